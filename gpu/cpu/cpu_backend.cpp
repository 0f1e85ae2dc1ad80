// CPU backend.  kNN per query: a scan with the SIMD float kernels keeps the best K' = k + margin
// rows by approximate distance (a buffered selection: candidates below the running threshold are
// appended, and the buffer is cut back to K' with nth_element when it fills); the candidates are
// re-ranked with the exact formula; a rigorous bound on the float kernels' rounding error then
// either proves that no other row can enter the top k or sends the query to an exhaustive exact
// scan.  Range: rows whose approximate distance is within the radius plus the error bound are
// re-checked exactly.  Subsets: exact distances of the (deduplicated) candidates.  Index families
// live in files of their own (IVF-PQ: cpu_ivfpq.cpp, graphs: cpu_graph.cpp), which the accessors
// (ivfpq(), graph()) return.
#include "cpu/cpu_backend.h"

#include "cpu/cpu_graph.h"
#include "cpu/cpu_metric.h"
#include "cpu/cpu_ivfpq.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"
#include "engine/exact.h"
#include "engine/host_common.h"
#include "vsearch/distance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vs {
namespace {

class CpuDataset final : public Dataset
{
public:
    CpuDataset(size_t dim, vs_dtype dtype)
    {
        dim_ = dim;
        dtype_ = dtype;
    }
    const float *row(size_t r) const { return data.data() + r * dim_; }
    void set_size(size_t n) { size_ = n; }

    std::vector<float> data;
    std::vector<int64_t> ids; // ascending
    std::vector<double> sqnorms;
    double maxnorm = 0; // upper bound on every row's L2 norm
};

const CpuDataset *as_cpu(const Dataset *ds)
{
    auto *c = dynamic_cast<const CpuDataset *>(ds);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "dataset belongs to another backend");
    return c;
}

// Approximate base value of a row with the SIMD float kernels.
struct Approx
{
    vs_metric metric;
    const float *x;
    size_t d;
    double qsq; // ||x||^2
    // A value that overflowed float (or a NaN from inf - inf) says nothing about the exact
    // distance: -inf makes the row a candidate and leaves the scan uncertified.
    float operator()(const CpuDataset &ds, size_t r) const
    {
        float v = value(ds, r);
        if (std::isfinite(v) ||
            (metric == VS_METRIC_COSINE && (qsq == 0.0 || ds.sqnorms[r] == 0.0)))
            return v;
        return -INFINITY;
    }
    float value(const CpuDataset &ds, size_t r) const
    {
        const float *y = ds.row(r);
        switch (metric)
        {
        case VS_METRIC_L2SQ:
        case VS_METRIC_L2:
            return vs_l2sq_f32(x, y, d);
        case VS_METRIC_IP:
            return -vs_dot_f32(x, y, d);
        case VS_METRIC_COSINE:
            return static_cast<float>(cosine_base(vs_dot_f32(x, y, d), qsq, ds.sqnorms[r]));
        case VS_METRIC_L1:
            return vs_l1_f32(x, y, d);
        }
        return NAN;
    }
};

// Keeps the `keep` smallest keys of a stream.
class BufferedTopK
{
public:
    explicit BufferedTopK(size_t keep) : keep_(keep)
    {
        buf_.reserve(std::max<size_t>(2 * keep, 256));
        cap_ = buf_.capacity();
    }
    void add(uint64_t key)
    {
        if (key >= thr_)
            return;
        buf_.push_back(key);
        if (buf_.size() == cap_)
            cut();
    }
    // No key above this distance can be kept any more (+inf until the first cut).
    float bound() const { return thr_ == kNoKey ? INFINITY : key_dist(thr_); }
    // The kept keys, ascending.
    std::vector<uint64_t> &finish()
    {
        cut();
        std::sort(buf_.begin(), buf_.end());
        return buf_;
    }

private:
    void cut()
    {
        if (buf_.size() > keep_)
        {
            std::nth_element(buf_.begin(), buf_.begin() + (keep_ - 1), buf_.end());
            buf_.resize(keep_);
            thr_ = *std::max_element(buf_.begin(), buf_.end());
        }
    }
    size_t keep_, cap_;
    uint64_t thr_ = kNoKey;
    std::vector<uint64_t> buf_;
};

// Beyond this many candidates a query the blocked path's selections (a block's 128 queries at
// once, 2 x K' keys each) would hold too much memory per thread: the per-query path takes it.
constexpr size_t kGemmMaxCandidates = 4096;

class CpuBackend final : public Backend
{
public:
    explicit CpuBackend(const BackendConfig &cfg) : cfg_(cfg)
    {
        threads_ = cfg.num_threads > 0 ? cfg.num_threads
                                       : static_cast<int>(std::thread::hardware_concurrency());
        if (threads_ < 1)
            threads_ = 1;
        ivfpq_ = make_cpu_ivfpq(cfg_, threads_);
        graph_ = make_cpu_graph(cfg_, threads_);
        metric_ = make_cpu_metric(cfg_, threads_);
    }

    vs_backend_kind kind() const noexcept override { return VS_BACKEND_CPU; }
    // Searches only read datasets and index objects, and each call has its own threads.
    int lanes() const noexcept override { return cfg_.lanes; }

    Status info(vs_context_info *out) noexcept override
    {
        out->backend = VS_BACKEND_CPU;
        std::snprintf(out->device_name, sizeof out->device_name, "cpu (%s, %d threads)",
                      vs_simd_level(), threads_);
        out->memory_budget = 0;
        out->memory_in_use = 0;
        return Status{};
    }

    Status dataset_create(size_t dim, vs_dtype dtype, Dataset **out) noexcept override
    {
        return guarded([&] { *out = new CpuDataset(dim, dtype); });
    }

    Status dataset_add(Dataset *ds, const float *vectors, const int64_t *ids,
                       size_t n) noexcept override
    {
        return guarded([&] {
            auto *c = const_cast<CpuDataset *>(as_cpu(ds));
            AddPlan plan = plan_add(c->ids, ids, n);
            const size_t d = c->dim();
            const size_t old = c->ids.size();
            std::vector<double> norms(n);
            double maxnorm = c->maxnorm;
            for (size_t j = 0; j < n; j++)
            {
                norms[j] = sqnorm_double(vectors + plan.new_order[j] * d, d);
                maxnorm = std::max(maxnorm, std::sqrt(norms[j]));
            }
            if (plan.append)
            {
                c->data.reserve((old + n) * d);
                for (size_t j = 0; j < n; j++)
                {
                    const float *v = vectors + plan.new_order[j] * d;
                    c->data.insert(c->data.end(), v, v + d);
                    c->ids.push_back(ids[plan.new_order[j]]);
                    c->sqnorms.push_back(norms[j]);
                }
            }
            else
            {
                std::vector<float> data((old + n) * d);
                std::vector<double> sq(old + n);
                for (size_t r = 0; r < plan.merged.size(); r++)
                {
                    int64_t src = plan.merged[r];
                    if (src >= 0)
                    {
                        std::memcpy(&data[r * d], c->row(static_cast<size_t>(src)), d * sizeof(float));
                        sq[r] = c->sqnorms[static_cast<size_t>(src)];
                    }
                    else
                    {
                        size_t j = static_cast<size_t>(-src - 1);
                        std::memcpy(&data[r * d], vectors + plan.new_order[j] * d, d * sizeof(float));
                        sq[r] = norms[j];
                    }
                }
                c->data.swap(data);
                c->sqnorms.swap(sq);
                c->ids = std::move(plan.merged_ids);
            }
            c->maxnorm = maxnorm;
            c->set_size(c->ids.size());
        });
    }

    Status dataset_remove(Dataset *ds, const int64_t *ids, size_t n,
                          size_t *removed) noexcept override
    {
        return guarded([&] {
            auto *c = const_cast<CpuDataset *>(as_cpu(ds));
            size_t gone = 0;
            std::vector<size_t> keep = plan_remove(c->ids, ids, n, &gone);
            if (removed)
                *removed = gone;
            if (gone == 0)
                return;
            const size_t d = c->dim();
            for (size_t r = 0; r < keep.size(); r++)
            {
                if (keep[r] == r)
                    continue;
                std::memmove(&c->data[r * d], c->row(keep[r]), d * sizeof(float));
                c->ids[r] = c->ids[keep[r]];
                c->sqnorms[r] = c->sqnorms[keep[r]];
            }
            c->data.resize(keep.size() * d);
            c->ids.resize(keep.size());
            c->sqnorms.resize(keep.size());
            c->set_size(keep.size());
            // maxnorm stays an upper bound.
        });
    }

    Status dataset_subset(const Dataset *src, const int64_t *ids, size_t n,
                          Dataset **out) noexcept override
    {
        return guarded([&] {
            const CpuDataset &c = *as_cpu(src);
            std::vector<size_t> rows = plan_subset(c.ids, ids, n);
            auto s = std::make_unique<CpuDataset>(c.dim(), c.dtype());
            const size_t d = c.dim();
            s->data.resize(n * d);
            s->ids.resize(n);
            s->sqnorms.resize(n);
            for (size_t r = 0; r < n; r++)
            {
                std::memcpy(&s->data[r * d], c.row(rows[r]), d * sizeof(float));
                s->ids[r] = c.ids[rows[r]];
                s->sqnorms[r] = c.sqnorms[rows[r]];
                s->maxnorm = std::max(s->maxnorm, std::sqrt(s->sqnorms[r]));
            }
            s->set_size(n);
            *out = s.release();
        });
    }

    Status knn(const Dataset *ds, const float *queries, size_t nq, size_t k, vs_metric metric,
               const Subsets *subsets, int64_t *out_ids, float *out_dists,
               int64_t *out_counts) noexcept override
    {
        return guarded([&] {
            const CpuDataset &c = *as_cpu(ds);
            if (subsets)
                knn_subsets(c, queries, nq, k, metric, *subsets, out_ids, out_dists, out_counts);
            else
                knn_scan(c, queries, nq, k, metric, out_ids, out_dists, out_counts);
        });
    }

    Status range(const Dataset *ds, const float *queries, size_t nq, float radius,
                 vs_metric metric, const Subsets *subsets,
                 RangeCollector *collector) noexcept override
    {
        return guarded([&] { range_impl(*as_cpu(ds), queries, nq, radius, metric, subsets, collector); });
    }

    Status kmeans(const float *data, size_t n, size_t dim, const vs_kmeans_params &params,
                  float *centroids, vs_kmeans_info *info) noexcept override
    {
        return guarded([&] { kmeans_impl(data, n, dim, params, centroids, info); });
    }

    IvfpqBackend *ivfpq() noexcept override { return ivfpq_.get(); }
    GraphBackend *graph() noexcept override { return graph_.get(); }
    MetricBackend *metric() noexcept override { return metric_.get(); }

private:
    // ---- kNN ------------------------------------------------------------------------------

    // Exact keys of every row, the best min(k, n) into out (ascending).
    static void exact_all(const CpuDataset &c, const float *x, size_t k, vs_metric metric,
                          std::vector<uint64_t> &out)
    {
        const size_t n = c.size(), d = c.dim();
        out.resize(n);
        for (size_t r = 0; r < n; r++)
            out[r] = make_key(exact_distance_simd(metric, x, c.row(r), d), static_cast<uint32_t>(r));
        size_t kk = std::min(k, n);
        std::partial_sort(out.begin(), out.begin() + kk, out.end());
        out.resize(kk);
    }

    static void write_result(const CpuDataset &c, const std::vector<uint64_t> &keys, size_t k,
                             int64_t *ids, float *dists, int64_t *count)
    {
        size_t m = std::min(k, keys.size());
        for (size_t i = 0; i < m; i++)
        {
            ids[i] = c.ids[key_row(keys[i])];
            dists[i] = key_dist(keys[i]);
        }
        for (size_t i = m; i < k; i++)
        {
            ids[i] = -1;
            dists[i] = INFINITY;
        }
        if (count)
            *count = static_cast<int64_t>(m);
    }

    void knn_scan(const CpuDataset &c, const float *queries, size_t nq, size_t k, vs_metric metric,
                  int64_t *out_ids, float *out_dists, int64_t *out_counts)
    {
        const size_t n = c.size(), d = c.dim();
        const size_t kp = knn_candidates(k, n);
        const bool gemm = kp < n && kp <= kGemmMaxCandidates && metric != VS_METRIC_L1 &&
                          nq >= kGemmMinQueries;
        // cand[q * parts + p]: query q's kp best approximate keys among part p of the rows
        std::vector<std::vector<uint64_t>> cand;
        size_t parts = 1;
        if (gemm)
            parts = gemm_candidates(c, queries, nq, kp, metric, cand);
        else if (kp < n)
            parts = direct_candidates(c, queries, nq, kp, metric, cand);
        const int kind = gemm ? APPROX_GEMM_F32 : APPROX_DIRECT_F32;
        parallel_for(nq, threads_, cfg_, [&](size_t q) {
            const float *x = queries + q * d;
            std::vector<uint64_t> keys;
            bool certified = false;
            if (kp < n && !cand[q * parts].empty())
            {
                std::vector<uint64_t> approx;
                for (size_t p = 0; p < parts; p++)
                    approx.insert(approx.end(), cand[q * parts + p].begin(),
                                  cand[q * parts + p].end());
                std::sort(approx.begin(), approx.end());
                approx.resize(kp);
                keys.resize(kp);
                for (size_t i = 0; i < kp; i++)
                {
                    uint32_t r = key_row(approx[i]);
                    keys[i] = make_key(exact_distance_simd(metric, x, c.row(r), d), r);
                }
                std::sort(keys.begin(), keys.end());
                double qn = std::sqrt(sqnorm_double(x, d));
                ErrBound e = approx_error(kind, metric, d, qn, c.maxnorm);
                float lb = base_to_output(metric, approx_lower(e, key_dist(approx[kp - 1])));
                certified = lb > key_dist(keys[k - 1]);
                keys.resize(k);
            }
            if (!certified)
                exact_all(c, x, k, metric, keys);
            write_result(c, keys, k, out_ids + q * k, out_dists + q * k,
                         out_counts ? out_counts + q : nullptr);
        });
    }

    // Candidates from the SIMD float kernels, a query at a time; a query's rows are split over
    // threads only when there are few queries and many rows.
    size_t direct_candidates(const CpuDataset &c, const float *queries, size_t nq, size_t kp,
                             vs_metric metric, std::vector<std::vector<uint64_t>> &cand)
    {
        const size_t n = c.size(), d = c.dim();
        size_t parts = 1;
        if (nq < static_cast<size_t>(threads_) && n >= 16384)
            parts = std::min<size_t>((threads_ + nq - 1) / nq, n / 8192);
        cand.assign(nq * parts, {});
        parallel_for(nq * parts, threads_, cfg_, [&](size_t item) {
            size_t q = item / parts, p = item % parts;
            const float *x = queries + q * d;
            Approx ap{metric, x, d, sqnorm_double(x, d)};
            size_t r0 = n * p / parts, r1 = n * (p + 1) / parts;
            BufferedTopK top(kp);
            for (size_t r = r0; r < r1; r++)
                top.add(make_key(ap(c, r), static_cast<uint32_t>(r)));
            cand[item] = std::move(top.finish());
        });
        return parts;
    }

    // Candidates from blocked products (gemm.h): a block of kGemmQueries queries is packed as one
    // panel and the rows are the tiles' other operand, read in place, so a row is read once per
    // block instead of once per query and the products run at the FMA units' rate.  Items are a
    // block and a part of the rows (gemm_parts); each item merges its candidates into the block's
    // under the block's lock, cut back to kp a query (cand[q], one part).  The values
    // are the CUDA GEMM path's (||x||^2 + ||y||^2 - 2 <x, y> for L2, 1 - <x, y> / (||x|| ||y||)
    // for cosine), certified with APPROX_GEMM_F32's bound.  A query whose squared norm is not a
    // finite number of at least kTinyNorm2 gets no candidates (its exact scan): below that the
    // float products underflow and the bound no longer holds; so does a cosine row below it
    // (-inf: a candidate, never certified past).
    size_t gemm_candidates(const CpuDataset &c, const float *queries, size_t nq, size_t kp,
                           vs_metric metric, std::vector<std::vector<uint64_t>> &cand)
    {
        const size_t n = c.size(), d = c.dim();
        const size_t blocks = (nq + kGemmQueries - 1) / kGemmQueries;
        const size_t parts = gemm_parts(n, d, blocks);
        const GemmValue kind = gemm_value(metric);
        cand.assign(nq, {});
        std::unique_ptr<std::mutex[]> merging(new std::mutex[blocks]);
        parallel_for(blocks * parts, threads_, cfg_, [&](size_t item) {
            const size_t b = item / parts, p = item % parts;
            const size_t q0 = b * kGemmQueries, qn = std::min(kGemmQueries, nq - q0);
            PackedRows qp(queries + q0 * d, qn, d, d);
            // xa: ||x||^2 (L2) or 1 / ||x|| (cosine); the padding columns and the queries left
            // to the exact scan get the bound -inf, which only +inf and NaN values pass
            std::vector<float> xa(qp.padded()), bound(qp.padded(), -INFINITY);
            std::vector<char> scanned(qn);
            for (size_t i = 0; i < qn; i++)
            {
                const double s = sqnorm_double(queries + (q0 + i) * d, d);
                xa[i] = static_cast<float>(kind == GemmValue::Cosine ? 1.0 / std::sqrt(s) : s);
                scanned[i] = std::isfinite(s) && s >= kTinyNorm2;
                if (scanned[i])
                    bound[i] = INFINITY;
            }
            std::vector<BufferedTopK> top(qn, BufferedTopK(kp));
            bounded_pairs(c, qp, kind, xa.data(), bound.data(), n * p / parts, n * (p + 1) / parts,
                          [&](size_t i, uint32_t r, float value) {
                              if (!scanned[i])
                                  return;
                              // +inf (an overflowed float sum, whatever the exact value's sign)
                              // and NaN become -inf: candidates that no bound certifies past
                              top[i].add(make_key(std::isfinite(value) ? value : -INFINITY, r));
                              bound[i] = top[i].bound();
                          });
            // the block's candidates so far, cut back to kp a query
            std::lock_guard<std::mutex> lock(merging[b]);
            for (size_t i = 0; i < qn; i++)
            {
                if (!scanned[i])
                    continue;
                std::vector<uint64_t> &all = cand[q0 + i], &mine = top[i].finish();
                all.insert(all.end(), mine.begin(), mine.end());
                if (all.size() > kp)
                {
                    std::nth_element(all.begin(), all.begin() + (kp - 1), all.end());
                    all.resize(kp);
                }
            }
        });
        return 1;
    }

    // The pairs of rows [r0, r1) and a packed block of queries whose value bounded_columns does
    // not put above bound (which visit may lower as it goes): visit(i, r, value) for query i of
    // the block and row r, in row order.
    template <typename Visit>
    static void bounded_pairs(const CpuDataset &c, const PackedRows &qp, GemmValue kind,
                              const float *xa, const float *bound, size_t r0, size_t r1,
                              Visit &&visit)
    {
        const size_t w = qp.padded();
        std::vector<float> out(kGemmTileRows * w), vals(w);
        std::vector<uint32_t> cols(w);
        for (size_t t0 = r0; t0 < r1; t0 += kGemmTileRows)
        {
            const size_t tn = std::min(kGemmTileRows, r1 - t0);
            dot_block(c.row(t0), c.dim(), tn, qp, out.data(), w);
            for (size_t j = 0; j < tn; j++)
            {
                const uint32_t r = static_cast<uint32_t>(t0 + j);
                const size_t m = bounded_columns(out.data() + j * w, xa,
                                                 row_operand(kind, c.sqnorms[r]), bound, w, kind,
                                                 vals.data(), cols.data());
                for (size_t t = 0; t < m; t++)
                    if (cols[t] < qp.size())
                        visit(cols[t], r, vals[cols[t]]);
            }
        }
    }

    // Row parts of a blocked scan of `blocks` blocks of queries: enough (block, part) items for
    // two a thread, and parts of at most about 2^24 row elements (an item is then tens of
    // milliseconds, and only the calling thread polls the cancel callback, between items), each
    // of at least one tile.
    size_t gemm_parts(size_t n, size_t d, size_t blocks) const
    {
        const size_t want = 2 * static_cast<size_t>(threads_);
        size_t parts = std::max<size_t>((want + blocks - 1) / blocks, (n * d >> 24) + 1);
        return std::max<size_t>(1, std::min(parts, n / kGemmTileRows));
    }

    // A row's operand of bounded_columns from its squared norm: ||y||^2 (L2) or 1 / ||y||
    // (cosine; NaN below kTinyNorm2, so that every pair of the row is a candidate).
    static float row_operand(GemmValue kind, double ysq)
    {
        if (kind == GemmValue::L2)
            return static_cast<float>(ysq);
        return ysq < kTinyNorm2 ? NAN : static_cast<float>(1.0 / std::sqrt(ysq));
    }

    // Rows of a query's candidate ids: known ids only, ascending, each once.
    static std::vector<uint32_t> subset_rows(const CpuDataset &c, const Subsets &s, size_t q)
    {
        std::vector<uint32_t> rows;
        for (int64_t i = s.offsets[q]; i < s.offsets[q + 1]; i++)
        {
            int64_t r = find_row(c.ids, s.ids[i]);
            if (r >= 0)
                rows.push_back(static_cast<uint32_t>(r));
        }
        std::sort(rows.begin(), rows.end());
        rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
        return rows;
    }

    void knn_subsets(const CpuDataset &c, const float *queries, size_t nq, size_t k,
                     vs_metric metric, const Subsets &s, int64_t *out_ids, float *out_dists,
                     int64_t *out_counts)
    {
        const size_t d = c.dim();
        parallel_for(nq, threads_, cfg_, [&](size_t q) {
            const float *x = queries + q * d;
            std::vector<uint32_t> rows = subset_rows(c, s, q);
            std::vector<uint64_t> keys(rows.size());
            for (size_t i = 0; i < rows.size(); i++)
                keys[i] = make_key(exact_distance_simd(metric, x, c.row(rows[i]), d), rows[i]);
            size_t kk = std::min(k, keys.size());
            std::partial_sort(keys.begin(), keys.begin() + kk, keys.end());
            keys.resize(kk);
            write_result(c, keys, k, out_ids + q * k, out_dists + q * k,
                         out_counts ? out_counts + q : nullptr);
        });
    }

    // ---- range ----------------------------------------------------------------------------

    // Range through blocked products (gemm_candidates' values and bound): blocks of kGemmQueries
    // queries, each block's rows split over the threads in contiguous parts, whose matches are
    // joined in row order (so in id order) before they reach the collector.  A pair whose value is
    // not above the query's threshold (range_approx_threshold of APPROX_GEMM_F32's bound), or
    // overflowed, gets its exact distance; a query whose squared norm is below kTinyNorm2 or not
    // finite gets it for every row (threshold NaN), and so does a cosine row below it.
    void range_gemm(const CpuDataset &c, const float *queries, size_t nq, float radius,
                    vs_metric metric, double limit, RangeCollector *collector)
    {
        const size_t n = c.size(), d = c.dim();
        const GemmValue kind = gemm_value(metric);
        const size_t parts = gemm_parts(n, d, 1);
        for (size_t q0 = 0; q0 < nq; q0 += kGemmQueries)
        {
            const size_t qn = std::min(kGemmQueries, nq - q0);
            PackedRows qp(queries + q0 * d, qn, d, d);
            const size_t w = qp.padded();
            // xa as in gemm_candidates; thr: the largest float not above the double threshold
            std::vector<float> xa(w), thr(w, -INFINITY);
            for (size_t i = 0; i < qn; i++)
            {
                const double s = sqnorm_double(queries + (q0 + i) * d, d);
                xa[i] = static_cast<float>(kind == GemmValue::Cosine ? 1.0 / std::sqrt(s) : s);
                if (!(std::isfinite(s) && s >= kTinyNorm2))
                {
                    thr[i] = NAN;
                    continue;
                }
                const double t = range_approx_threshold(
                    approx_error(APPROX_GEMM_F32, metric, d, std::sqrt(s), c.maxnorm), limit);
                float f = static_cast<float>(t);
                thr[i] = static_cast<double>(f) > t ? std::nextafter(f, -INFINITY) : f;
            }
            // [part][query]: the part's matches in row order
            std::vector<std::vector<std::vector<int64_t>>> ids(
                parts, std::vector<std::vector<int64_t>>(qn));
            std::vector<std::vector<std::vector<float>>> dists(
                parts, std::vector<std::vector<float>>(qn));
            parallel_for(parts, threads_, cfg_, [&](size_t p) {
                bounded_pairs(c, qp, kind, xa.data(), thr.data(), n * p / parts,
                              n * (p + 1) / parts, [&](size_t i, uint32_t r, float) {
                                  const float dist = exact_distance_simd(
                                      metric, queries + (q0 + i) * d, c.row(r), d);
                                  if (dist <= radius)
                                  {
                                      ids[p][i].push_back(c.ids[r]);
                                      dists[p][i].push_back(dist);
                                  }
                              });
            });
            std::vector<int64_t> counts(qn), all_ids;
            std::vector<float> all_d;
            for (size_t i = 0; i < qn; i++)
                for (size_t p = 0; p < parts; p++)
                {
                    counts[i] += static_cast<int64_t>(ids[p][i].size());
                    all_ids.insert(all_ids.end(), ids[p][i].begin(), ids[p][i].end());
                    all_d.insert(all_d.end(), dists[p][i].begin(), dists[p][i].end());
                }
            collector->add(q0, qn, counts.data(), all_ids.data(), all_d.data());
        }
    }

    void range_impl(const CpuDataset &c, const float *queries, size_t nq, float radius,
                    vs_metric metric, const Subsets *subsets, RangeCollector *collector)
    {
        const size_t n = c.size(), d = c.dim();
        const double limit = range_base_limit(metric, radius);
        if (!subsets && metric != VS_METRIC_L1 && nq >= kGemmMinQueries)
        {
            range_gemm(c, queries, nq, radius, metric, limit, collector);
            return;
        }
        // Queries in blocks so that results reach the collector in order with bounded memory.
        const size_t block = std::max<size_t>(1, std::min<size_t>(256, 4 * threads_));
        for (size_t q0 = 0; q0 < nq; q0 += block)
        {
            size_t qn = std::min(block, nq - q0);
            std::vector<std::vector<int64_t>> ids(qn);
            std::vector<std::vector<float>> dists(qn);
            parallel_for(qn, threads_, cfg_, [&](size_t i) {
                size_t q = q0 + i;
                const float *x = queries + q * d;
                auto emit = [&](uint32_t r) {
                    float out = exact_distance_simd(metric, x, c.row(r), d);
                    if (out <= radius)
                    {
                        ids[i].push_back(c.ids[r]);
                        dists[i].push_back(out);
                    }
                };
                if (subsets)
                {
                    for (uint32_t r : subset_rows(c, *subsets, q))
                        emit(r);
                    return;
                }
                double qsq = sqnorm_double(x, d);
                ErrBound e = approx_error(APPROX_DIRECT_F32, metric, d, std::sqrt(qsq), c.maxnorm);
                double thr = range_approx_threshold(e, limit);
                Approx ap{metric, x, d, qsq};
                for (size_t r = 0; r < n; r++)
                {
                    double a = ap(c, r);
                    if (a <= thr || a != a)
                        emit(static_cast<uint32_t>(r));
                }
            });
            std::vector<int64_t> counts(qn), all_ids;
            std::vector<float> all_d;
            for (size_t i = 0; i < qn; i++)
            {
                counts[i] = static_cast<int64_t>(ids[i].size());
                all_ids.insert(all_ids.end(), ids[i].begin(), ids[i].end());
                all_d.insert(all_d.end(), dists[i].begin(), dists[i].end());
            }
            collector->add(q0, qn, counts.data(), all_ids.data(), all_d.data());
        }
    }

    // ---- k-means --------------------------------------------------------------------------

    void kmeans_impl(const float *data, size_t n, size_t d, const vs_kmeans_params &p,
                     float *centroids, vs_kmeans_info *info)
    {
        Rng rng(p.seed);
        const size_t k = p.k;
        std::vector<size_t> sample = kmeans_sample(n, p.sample_size, rng);
        const size_t m = sample.size();
        const bool spherical = kmeans_spherical(p.metric);
        std::vector<float> x(m * d);
        for (size_t i = 0; i < m; i++)
            std::memcpy(&x[i * d], data + sample[i] * d, d * sizeof(float));
        if (p.metric == VS_METRIC_COSINE)
            kmeans_normalize(x.data(), m, d);
        const size_t block = 1024;
        const size_t nblocks = (m + block - 1) / block;

        // Initialisation.
        if (p.init == VS_KMEANS_INIT_RANDOM)
        {
            std::vector<size_t> idx = kmeans_random_init(m, k, rng);
            for (size_t c = 0; c < k; c++)
                std::memcpy(centroids + c * d, &x[idx[c] * d], d * sizeof(float));
        }
        else
        {
            std::vector<double> mind(m), prefix(m);
            size_t first = rng.below(m);
            std::memcpy(centroids, &x[first * d], d * sizeof(float));
            for (size_t c = 1; c < k; c++)
            {
                const float *cv = centroids + (c - 1) * d;
                parallel_for(nblocks, threads_, cfg_, [&](size_t b) {
                    for (size_t i = b * block; i < std::min(m, (b + 1) * block); i++)
                    {
                        double v = vs_l2sq_f32(&x[i * d], cv, d);
                        mind[i] = c == 1 ? v : std::min(mind[i], v);
                    }
                });
                double s = 0;
                for (size_t i = 0; i < m; i++)
                    prefix[i] = (s += mind[i]);
                size_t pick = kmeans_pick(prefix.data(), m, rng.uniform());
                std::memcpy(centroids + c * d, &x[pick * d], d * sizeof(float));
            }
        }
        if (spherical)
            kmeans_normalize(centroids, k, d);

        std::vector<int32_t> assign(m);
        std::vector<double> block_obj(nblocks);
        std::vector<double> sums(k * d);
        std::vector<int64_t> counts(k);
        info->objective = 0;
        info->iterations = 0;
        info->empty_repaired = 0;
        PackedRows packed;
        std::vector<NearestScratch> scratch(nblocks);
        std::vector<double> xnorms(m);
        row_norms(x.data(), d, m, d, xnorms.data());
        for (int it = 0; it < p.iterations; it++)
        {
            check_cancel(cfg_);
            // Assignment: the centroid with the smallest SIMD-kernel distance (ties to the
            // smaller), found through blocked products and certified (gemm.h).
            packed.pack(centroids, k, d, d);
            parallel_for(nblocks, threads_, cfg_, [&](size_t b) {
                const size_t i0 = b * block, nb = std::min(m, (b + 1) * block) - i0;
                std::vector<float> best(nb);
                const float *xb = &x[i0 * d];
                if (spherical)
                    nearest_rows(xb, d, nb, packed, NearestKind::IP, float_sum_error(d),
                                 [&](size_t i, size_t c) {
                                     return -vs_dot_f32(xb + i * d, centroids + c * d, d);
                                 },
                                 &xnorms[i0], &assign[i0], best.data(), scratch[b]);
                else
                    nearest_rows(xb, d, nb, packed, NearestKind::L2, float_sum_error(d),
                                 [&](size_t i, size_t c) {
                                     return vs_l2sq_f32(xb + i * d, centroids + c * d, d);
                                 },
                                 &xnorms[i0], &assign[i0], best.data(), scratch[b]);
                double obj = 0;
                for (size_t i = 0; i < nb; i++)
                    obj += p.metric == VS_METRIC_COSINE ? 1.0 + best[i] : best[i];
                block_obj[b] = obj;
            });
            double obj = 0;
            for (double v : block_obj)
                obj += v;
            info->objective = obj;
            // Update: sums in point order, dimensions split over threads.
            std::fill(counts.begin(), counts.end(), 0);
            for (size_t i = 0; i < m; i++)
                counts[assign[i]]++;
            const size_t dparts = std::min<size_t>(d, static_cast<size_t>(threads_));
            parallel_for(dparts, threads_, cfg_, [&](size_t t) {
                size_t j0 = d * t / dparts, j1 = d * (t + 1) / dparts;
                for (size_t c = 0; c < k; c++)
                    for (size_t j = j0; j < j1; j++)
                        sums[c * d + j] = 0;
                for (size_t i = 0; i < m; i++)
                {
                    double *s = &sums[assign[i] * d];
                    const float *xi = &x[i * d];
                    for (size_t j = j0; j < j1; j++)
                        s[j] += xi[j];
                }
                for (size_t c = 0; c < k; c++)
                    if (counts[c] > 0)
                        for (size_t j = j0; j < j1; j++)
                            centroids[c * d + j] =
                                static_cast<float>(sums[c * d + j] / static_cast<double>(counts[c]));
            });
            info->empty_repaired += kmeans_repair_empty(centroids, counts, k, d, m, rng);
            if (spherical)
                kmeans_normalize(centroids, k, d);
            info->iterations = it + 1;
        }
    }

    BackendConfig cfg_;
    int threads_;
    std::unique_ptr<IvfpqBackend> ivfpq_; // cpu_ivfpq.cpp
    std::unique_ptr<GraphBackend> graph_; // cpu_graph.cpp
    std::unique_ptr<MetricBackend> metric_; // cpu_metric.cpp
};

} // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendConfig &config)
{
    return std::unique_ptr<Backend>(new CpuBackend(config));
}

} // namespace vs
