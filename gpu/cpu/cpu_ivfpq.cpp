// IVF-PQ on the CPU (IVFADC): lists of (id, code) in host memory; search ranks the lists of each
// query with exact coarse distances, builds the m x 2^nbits lookup table of every probed list,
// sums the tables over each entry's code, and keeps the k best by (estimate, id, scan position).
// CpuIvfpqBackend (at the end) is the CPU backend's IvfpqBackend over these functions.
#include "cpu/cpu_ivfpq.h"

#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"
#include "engine/exact.h"
#include "engine/ivfpq_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace vs {
namespace {

class CpuIvfpq final : public Ivfpq
{
public:
    // view: read c and cb where they are (the caller keeps them until the object is destroyed)
    // instead of copying them.
    CpuIvfpq(const vs_ivfpq_params &p, const float *c, const float *cb, bool view)
        : own_centroids_(view ? nullptr : c, view ? nullptr : c + p.nlist * p.dim),
          own_codebooks_(view ? nullptr : cb, // m x ksub x dsub = ksub x dim
                         view ? nullptr : cb + (size_t{1} << p.nbits) * p.dim),
          centroids(view ? c : own_centroids_.data()),
          codebooks(view ? cb : own_codebooks_.data()), packed_codebooks(p.m), ids(p.nlist),
          codes(p.nlist)
    {
        params_ = p;
        const size_t ksub = size_t{1} << p.nbits, dsub = p.dim / p.m;
        centroid_rows.resize(p.nlist);
        for (size_t l = 0; l < p.nlist; l++)
            centroid_rows[l] = centroids + l * p.dim;
        std::vector<const float *> rows;
        for (size_t j = 0; j < p.m; j++)
        {
            packed_codebooks[j].pack(&codebooks[j * ksub * dsub], ksub, dsub, dsub);
            packed_codebooks[j].panel_rows(rows);
            table_rows.insert(table_rows.end(), rows.begin(), rows.end());
        }
        table_width = packed_codebooks[0].padded();
    }
    // A quantizer read in place in pieces (vs_ivfpq_create_rows): searches only, no encoder.
    CpuIvfpq(const vs_ivfpq_params &p, const float *const *c_rows, const float *const *t_rows)
        : centroids(nullptr), codebooks(nullptr), centroid_rows(c_rows, c_rows + p.nlist),
          table_rows(t_rows, t_rows + p.dim), table_width(ivfpq_table_width(p)), ids(p.nlist),
          codes(p.nlist)
    {
        params_ = p;
    }
    size_t code_size() const { return (params_.m * params_.nbits + 7) / 8; }
    void grow(size_t n) { size_ += n; }
    // The centroids packed for blocked products (gemm.h): only encoding uses them, so they are
    // packed on its first call (a backend that only searches never touches that memory).
    const PackedRows &packed_centroids() const
    {
        std::call_once(packed_once_, [this] {
            packed_centroids_.pack(centroids, params_.nlist, params_.dim, params_.dim);
        });
        return packed_centroids_;
    }

private:
    std::vector<float> own_centroids_, own_codebooks_; // empty for a view
    mutable std::once_flag packed_once_;
    mutable PackedRows packed_centroids_;

public:
    const float *centroids;  // nlist x dim (null when read in pieces)
    const float *codebooks;  // m x ksub x dsub (null when read in pieces)
    std::vector<PackedRows> packed_codebooks; // per sub-quantizer, packed (gemm.h; encoding)
    std::vector<const float *> centroid_rows; // nlist: centroid l
    // dim: row j * dsub + t is element t of sub-quantizer j's codewords, table_width floats
    // (pq_table's rows)
    std::vector<const float *> table_rows;
    size_t table_width;
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<uint8_t>> codes; // code_size bytes per entry
};

const CpuIvfpq &as_cpu(const Ivfpq *ivf)
{
    auto *c = dynamic_cast<const CpuIvfpq *>(ivf);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "ivfpq object belongs to another backend");
    return *c;
}

// Lists ordered by exact coarse distance (ties: smaller list); keys (distance, list).
void rank_lists(const CpuIvfpq &ivf, const float *q, size_t first, size_t count,
                std::vector<uint64_t> &keys)
{
    const vs_ivfpq_params &p = ivf.params();
    const vs_metric cm = pq_coarse_metric(p.metric);
    keys.resize(p.nlist);
    for (size_t l = 0; l < p.nlist; l++)
        keys[l] = make_key(exact_distance_simd(cm, q, ivf.centroid_rows[l], p.dim),
                           static_cast<uint32_t>(l));
    std::partial_sort(keys.begin(), keys.begin() + (first + count), keys.end());
    keys.erase(keys.begin(), keys.begin() + first);
    keys.resize(count);
}

// rank_lists for nb queries x (row i at x + i * dim) from their blocked products with the packed
// centroids, keys[i] query i's: a list can be among a query's first + count only if its product
// value (||c||^2 - 2 <q, c>, or -<q, c> for IP) is within nearest_slack of the (first + count)-th
// smallest (gemm.h: the products' rounding and the exact distance's), so only those lists get the
// exact distance, and the keys are rank_lists' bit for bit.  Every list's exact distance when a
// value may not be finite.  0 < count, first + count < nlist.
void rank_lists_packed(const CpuIvfpq &ivf, const PackedRows &centroids, const float *x,
                       size_t nb, size_t first, size_t count, std::vector<uint64_t> *keys,
                       std::vector<float> &values)
{
    const vs_ivfpq_params &p = ivf.params();
    const vs_metric cm = pq_coarse_metric(p.metric);
    const NearestKind kind = cm == VS_METRIC_IP ? NearestKind::IP : NearestKind::L2;
    const size_t d = p.dim, nlist = p.nlist, ld = centroids.padded(), want = first + count;
    values.resize(nb * ld + nlist);
    float *nth = values.data() + nb * ld;
    dot_block(x, d, nb, centroids, values.data(), ld);
    for (size_t i = 0; i < nb; i++)
    {
        const float *q = x + i * d;
        float *v = values.data() + i * ld;
        for (size_t l = 0; l < nlist; l++)
            nth[l] = v[l] = kind == NearestKind::L2 ? centroids.sqnorms()[l] - 2.0f * v[l] : -v[l];
        double xnorm;
        row_norms(q, d, 1, d, &xnorm);
        const bool finite = nearest_values_finite(xnorm, centroids.max_norm());
        std::nth_element(nth, nth + (want - 1), nth + nlist);
        const double limit = static_cast<double>(nth[want - 1]) +
                             nearest_slack(kind, d, kRoundedOnceError, xnorm,
                                           centroids.max_norm());
        std::vector<uint64_t> &k = keys[i];
        k.clear();
        for (size_t l = 0; l < nlist; l++)
            if (!finite || static_cast<double>(v[l]) <= limit)
                k.push_back(make_key(exact_distance_simd(cm, q, ivf.centroid_rows[l], d),
                                     static_cast<uint32_t>(l)));
        std::partial_sort(k.begin(), k.begin() + want, k.end());
        k.erase(k.begin(), k.begin() + first);
        k.resize(count);
    }
}

// The work (entries x sub-quantizers x queries, plus a table per query) of a scan step below which
// it stays on the calling thread (rowscan.cpp: handing work to threads and back costs ~55 us here).
constexpr size_t kListParallelWork = size_t(1) << 21;
// Queries from which their lists are ranked from blocked products (rank_lists_packed): packing
// the centroids costs about one query's exact ranking.
constexpr size_t kPackedRankQueries = 8;

// Each query's probe window (rank_lists) into keys[0 .. nq), on up to `threads` threads.
void rank_queries(const BackendConfig &cfg, int threads, const CpuIvfpq &ivf, const float *x,
                  size_t nq, size_t first, size_t count, std::vector<uint64_t> *keys)
{
    const size_t d = ivf.params().dim, nlist = ivf.params().nlist;
    threads = nq * nlist * d >= kListParallelWork ? threads : 1;
    if (nq < kPackedRankQueries || count == 0 || first + count >= nlist)
    {
        parallel_for(nq, threads, cfg,
                     [&](size_t q) { rank_lists(ivf, x + q * d, first, count, keys[q]); });
        return;
    }
    PackedRows own;
    if (!ivf.centroids)
        own.pack_rows(ivf.centroid_rows.data(), nlist, d);
    const PackedRows &centroids = ivf.centroids ? ivf.packed_centroids() : own;
    // blocks of queries whose products stay in L1 (about 32 kB)
    const size_t block = std::max<size_t>(1, (size_t{8} << 10) / centroids.padded() / 12) * 12;
    parallel_for((nq + block - 1) / block, threads, cfg, [&](size_t b) {
        thread_local std::vector<float> values;
        const size_t q0 = b * block, nb = std::min(block, nq - q0);
        rank_lists_packed(ivf, centroids, x + q0 * d, nb, first, count, keys + q0, values);
    });
}

// Tables built together (build_luts): their sub-quantizer's codewords are read once for all of
// them, from the L1 cache, where a table alone streams the whole codebook (800 kB at Fashion-
// MNIST's m 56, beyond the L2 cache) and a batch's tables were bound by it.
constexpr size_t kLutGroup = 8;

// The tables of n <= kLutGroup (query, list) pairs, table g at lut[g * m * ksub ..):
// lut[j * ksub + c] is the squared L2 between query g's residual to its list and codeword c (L2),
// or its sub-vector . codeword c (IP / COSINE).
void build_luts(const CpuIvfpq &ivf, const float *const *qs, const size_t *lists, size_t n,
                std::vector<float> &residual, std::vector<float> &lut)
{
    const vs_ivfpq_params &p = ivf.params();
    const int dsub = static_cast<int>(p.dim / p.m);
    const size_t ksub = size_t{1} << p.nbits, width = p.m * ksub;
    const bool ip = pq_inner_product(p.metric);
    lut.resize(n * width);
    const float *x[kLutGroup];
    if (!ip)
        residual.resize(n * p.dim);
    for (size_t g = 0; g < n; g++)
    {
        x[g] = qs[g];
        if (ip)
            continue;
        const float *c = ivf.centroid_rows[lists[g]];
        float *r = &residual[g * p.dim];
        for (size_t i = 0; i < p.dim; i++)
            r[i] = pq_sub(qs[g][i], c[i]);
        x[g] = r;
    }
    // pq_l2 / pq_dot of every codeword, bit for bit, from the packed codebooks (gemm.h).
    const size_t padded = ivf.table_width;
    float tmp[kGemmSinglePanel];
    for (size_t j = 0; j < p.m; j++)
        for (size_t g = 0; g < n; g++)
        {
            float *dst = &lut[g * width + j * ksub];
            float *out = padded == ksub ? dst : tmp;
            pq_table(x[g] + j * dsub, &ivf.table_rows[j * dsub], dsub, padded, ip, out);
            if (out == tmp)
                std::memcpy(dst, tmp, ksub * sizeof(float));
        }
}

struct Candidate
{
    uint32_t dist_key; // float_key(estimate)
    int64_t id;
    uint64_t pos; // scan position over the probed lists
};

bool by_estimate(const Candidate &a, const Candidate &b)
{
    if (a.dist_key != b.dist_key)
        return a.dist_key < b.dist_key;
    if (a.id != b.id)
        return a.id < b.id;
    return a.pos < b.pos;
}

// The estimate of each of n codes (code_size bytes each) from the list's term and its table,
// emit(entry, estimate) in entry order.
template <typename Emit>
void estimate_entries(const vs_ivfpq_params &p, const float *lut, float term, const uint8_t *codes,
                      size_t n, Emit &&emit)
{
    const size_t ksub = size_t{1} << p.nbits;
    const size_t cs = (p.m * p.nbits + 7) / 8;
    const int m = static_cast<int>(p.m);
    size_t e = 0;
    if (p.nbits == 8)
    {
        // Eight entries at a time: their sums are independent chains of additions (each in
        // its own order, as below), so they overlap instead of waiting on one another.
        constexpr size_t kGroup = 8;
        for (; e + kGroup <= n; e += kGroup)
        {
            const uint8_t *code = codes + e * cs;
            float acc[kGroup];
            for (size_t g = 0; g < kGroup; g++)
                acc[g] = term;
            const float *t = lut;
            for (int j = 0; j < m; j++, t += ksub)
                for (size_t g = 0; g < kGroup; g++)
                    acc[g] = pq_add(acc[g], t[code[g * cs + j]]);
            for (size_t g = 0; g < kGroup; g++)
                emit(e + g, pq_finish(p.metric, acc[g]));
        }
    }
    for (; e < n; e++)
    {
        const uint8_t *code = codes + e * cs;
        float acc = term;
        for (int j = 0; j < m; j++)
            acc = pq_add(acc, lut[j * ksub + pq_code_get(code, j, p.nbits)]);
        emit(e, pq_finish(p.metric, acc));
    }
}

// Every entry of the query's probed lists (probes: rank_lists' keys) with its estimate, in scan
// order.
void scan_query(const CpuIvfpq &ivf, const float *q, std::vector<uint64_t> &probes,
                std::vector<Candidate> &out)
{
    const vs_ivfpq_params &p = ivf.params();
    std::vector<float> residual, lut;
    probes.erase(std::remove_if(probes.begin(), probes.end(),
                                [&](uint64_t key) { return ivf.ids[key_row(key)].empty(); }),
                 probes.end());
    out.clear();
    uint64_t pos = 0;
    // one table per probe, built kLutGroup at a time (the inner-product table does not depend on
    // the list: one for all)
    const bool one_table = pq_inner_product(p.metric);
    const size_t width = p.m << p.nbits;
    const float *qs[kLutGroup];
    size_t lists[kLutGroup];
    std::fill(qs, qs + kLutGroup, q);
    for (size_t i0 = 0; i0 < probes.size(); i0 += kLutGroup)
    {
        const size_t n = std::min(kLutGroup, probes.size() - i0);
        for (size_t g = 0; g < n; g++)
            lists[g] = key_row(probes[i0 + g]);
        if (!one_table || i0 == 0)
            build_luts(ivf, qs, lists, one_table ? 1 : n, residual, lut);
        for (size_t g = 0; g < n; g++)
        {
            const std::vector<int64_t> &ids = ivf.ids[lists[g]];
            const float term = pq_list_term(p.metric, key_dist(probes[i0 + g]));
            estimate_entries(p, lut.data() + (one_table ? 0 : g * width), term,
                             ivf.codes[lists[g]].data(), ids.size(), [&](size_t e, float est) {
                                 out.push_back({float_key(est), ids[e], pos++});
                             });
        }
    }
}

// ---- list scans (IvfpqListScan): lists held by the caller --------------------------------------

// An entry the scan keeps: estimate key, id, the caller's tag.  Ordered by (estimate, id); entries
// equal in both are one entry handed over twice, and count once.
struct Kept
{
    uint32_t dist_key;
    int64_t id;
    uint64_t tag;
};

bool by_key_id(const Kept &a, const Kept &b)
{
    return a.dist_key != b.dist_key ? a.dist_key < b.dist_key : a.id < b.id;
}

bool same_entry(const Kept &a, const Kept &b) { return a.dist_key == b.dist_key && a.id == b.id; }

// The lists a scan holds before it searches them: a step of this much work (or of this many bytes
// of codes) across lists, so that a batch whose lists each have a few queries still runs on every
// thread.
constexpr size_t kHeldWork = size_t(1) << 24;
constexpr size_t kHeldBytes = size_t(8) << 20;

class CpuIvfpqListScan final : public IvfpqListScan
{
public:
    CpuIvfpqListScan(const BackendConfig &cfg, const Ivfpq *ivf, const float *queries, size_t nq,
                     size_t first, size_t count, size_t k, bool range, float radius)
        : cfg_(cfg), ivf_(as_cpu(ivf)), nq_(nq), k_(k), range_(range), radius_(radius),
          x_(queries, queries + nq * ivf->params().dim), kept_(nq),
          bound_(nq, std::numeric_limits<uint32_t>::max())
    {
        threads_ = cfg.num_threads > 0 ? cfg.num_threads
                                       : static_cast<int>(std::thread::hardware_concurrency());
        threads_ = std::max(threads_, 1);
        // Each query's probe window (rank_lists), then grouped by list: which queries probe a
        // list, with the term its estimates start from.
        const size_t nlist = ivf_.params().nlist;
        std::vector<std::vector<uint64_t>> keys(nq);
        rank_queries(cfg_, threads_, ivf_, x_.data(), nq, first, count, keys.data());
        std::vector<size_t> per_list(nlist + 1, 0);
        for (size_t q = 0; q < nq; q++)
            for (uint64_t key : keys[q])
                per_list[key_row(key) + 1]++;
        for (size_t l = 0; l < nlist; l++)
        {
            if (per_list[l + 1] > 0)
                lists_.push_back(static_cast<uint32_t>(l));
            per_list[l + 1] += per_list[l];
        }
        probe_start_.assign(per_list.begin(), per_list.end());
        probes_.resize(per_list[nlist]);
        for (size_t q = 0; q < nq; q++)
            for (uint64_t key : keys[q])
                probes_[per_list[key_row(key)]++] = {
                    static_cast<uint32_t>(q), pq_list_term(ivf_.params().metric, key_dist(key))};
    }

    size_t nq() const override { return nq_; }
    const std::vector<uint32_t> &lists() const override { return lists_; }

    // A single query's list is searched at once, in the caller's arrays (no thread would share
    // it); other scans copy the entries and search them with the lists held before them.
    void add(size_t list, const int64_t *ids, const uint8_t *codes, const uint64_t *tags,
             size_t n) override
    {
        if (n == 0 || list >= ivf_.params().nlist)
            return;
        const size_t np = probe_start_[list + 1] - probe_start_[list];
        if (np == 0)
            return; // no query probes this list
        const vs_ivfpq_params &p = ivf_.params();
        const size_t work = np * (n * p.m + (size_t{1} << p.nbits) * p.dim);
        if (nq_ == 1)
        {
            const ListEntries here{list, ids, codes, tags, n};
            search_lists(&here, 1, work);
            return;
        }
        const size_t cs = (p.m * p.nbits + 7) / 8;
        held_.push_back({list, held_ids_.size(), n});
        held_ids_.insert(held_ids_.end(), ids, ids + n);
        held_codes_.insert(held_codes_.end(), codes, codes + n * cs);
        if (tags)
            held_tags_.insert(held_tags_.end(), tags, tags + n);
        else
            held_tags_.resize(held_tags_.size() + n, 0);
        held_work_ += work;
        if (held_work_ >= kHeldWork || held_codes_.size() >= kHeldBytes)
            search_held();
    }

    void knn_result(int64_t *ids, float *dists, uint64_t *tags, int64_t *counts) override
    {
        search_held();
        for (size_t q = 0; q < nq_; q++)
        {
            std::vector<Kept> &kept = kept_[q];
            prune(kept, bound_[q]);
            for (size_t i = 0; i < k_; i++)
            {
                const bool real = i < kept.size();
                ids[q * k_ + i] = real ? kept[i].id : -1;
                dists[q * k_ + i] = real ? key_float(kept[i].dist_key) : INFINITY;
                if (tags)
                    tags[q * k_ + i] = real ? kept[i].tag : 0;
            }
            if (counts)
                counts[q] = static_cast<int64_t>(kept.size());
        }
    }

    void range_result(RangeCollector *collector) override
    {
        search_held();
        std::vector<int64_t> counts(nq_), ids;
        std::vector<float> dists;
        for (size_t q = 0; q < nq_; q++)
        {
            std::vector<Kept> &kept = kept_[q];
            std::sort(kept.begin(), kept.end(), [](const Kept &a, const Kept &b) {
                return a.id != b.id ? a.id < b.id : a.dist_key < b.dist_key;
            });
            kept.erase(std::unique(kept.begin(), kept.end(), same_entry), kept.end());
            counts[q] = static_cast<int64_t>(kept.size());
            for (const Kept &c : kept)
            {
                ids.push_back(c.id);
                dists.push_back(key_float(c.dist_key));
            }
        }
        collector->add(0, nq_, counts.data(), ids.data(), dists.data());
    }

private:
    struct Probe
    {
        uint32_t query;
        float term;
    };
    struct HeldList
    {
        size_t list, first, n; // its entries: held_ids_[first .. first + n)
    };
    struct ListEntries
    {
        size_t list;
        const int64_t *ids;
        const uint8_t *codes;
        const uint64_t *tags; // null: 0 for each
        size_t n;
    };

    // The held lists (search_lists), then none.
    void search_held()
    {
        if (held_.empty())
            return;
        const vs_ivfpq_params &p = ivf_.params();
        const size_t cs = (p.m * p.nbits + 7) / 8;
        std::vector<ListEntries> lists;
        lists.reserve(held_.size());
        for (const HeldList &h : held_)
            lists.push_back({h.list, held_ids_.data() + h.first, held_codes_.data() + h.first * cs,
                             held_tags_.data() + h.first, h.n});
        search_lists(lists.data(), lists.size(), held_work_);
        held_.clear();
        held_ids_.clear();
        held_codes_.clear();
        held_tags_.clear();
        held_work_ = 0;
    }

    // Lists against the queries probing them.  The queries are split into parts (query mod
    // parts), each part searching every list in the order given, so that a query's entries
    // arrive in the order of a search list by list and its answer is the same on any number of
    // threads; a part's queries of a list go kLutGroup at a time (build_luts).
    void search_lists(const ListEntries *lists, size_t nlists, size_t work)
    {
        const vs_ivfpq_params &p = ivf_.params();
        const size_t width = p.m << p.nbits;
        const int threads = work >= kListParallelWork ? threads_ : 1;
        const size_t parts = threads > 1 ? std::min(4 * static_cast<size_t>(threads), nq_) : 1;
        parallel_for(parts, threads, cfg_, [&](size_t part) {
            thread_local std::vector<float> residual, lut;
            for (size_t l = 0; l < nlists; l++)
            {
                const ListEntries &h = lists[l];
                const Probe *pr[kLutGroup];
                const float *qs[kLutGroup];
                size_t group_lists[kLutGroup];
                size_t gn = 0;
                auto search_group = [&] {
                    build_luts(ivf_, qs, group_lists, gn, residual, lut);
                    for (size_t g = 0; g < gn; g++)
                    {
                        std::vector<Kept> &kept = kept_[pr[g]->query];
                        // what it holds at most before a prune, for the k of a re-rank
                        if (!range_ && kept.capacity() == 0)
                            kept.reserve(std::min<size_t>(2 * k_ + 256, 1024));
                        uint32_t &bound = bound_[pr[g]->query];
                        estimate_entries(p, lut.data() + g * width, pr[g]->term, h.codes, h.n,
                                         [&](size_t e, float est) {
                                             const uint32_t key = float_key(est);
                                             if (range_ ? !(est <= radius_) : key > bound)
                                                 return;
                                             kept.push_back(
                                                 {key, h.ids[e], h.tags ? h.tags[e] : 0});
                                             if (!range_ && kept.size() >= 2 * k_ + 256)
                                                 prune(kept, bound);
                                         });
                    }
                    gn = 0;
                };
                for (size_t i = probe_start_[h.list]; i < probe_start_[h.list + 1]; i++)
                {
                    if (probes_[i].query % parts != part)
                        continue;
                    pr[gn] = &probes_[i];
                    qs[gn] = &x_[probes_[i].query * p.dim];
                    group_lists[gn] = h.list;
                    if (++gn == kLutGroup)
                        search_group();
                }
                if (gn > 0)
                    search_group();
            }
        });
    }

    // Keeps the k smallest distinct entries, sorted; bound: the k-th's key once there are k.
    // The k smallest are selected first and only they sorted; an entry handed over twice among
    // them (rare) sorts all.
    void prune(std::vector<Kept> &kept, uint32_t &bound) const
    {
        if (k_ > 0 && kept.size() > k_)
        {
            std::nth_element(kept.begin(), kept.begin() + (k_ - 1), kept.end(), by_key_id);
            std::sort(kept.begin(), kept.begin() + k_, by_key_id);
            if (std::adjacent_find(kept.begin(), kept.begin() + k_, same_entry) ==
                kept.begin() + k_)
            {
                kept.resize(k_);
                bound = kept.back().dist_key;
                return;
            }
        }
        std::sort(kept.begin(), kept.end(), by_key_id);
        kept.erase(std::unique(kept.begin(), kept.end(), same_entry), kept.end());
        if (kept.size() >= k_)
        {
            kept.resize(k_);
            if (k_ > 0)
                bound = kept.back().dist_key;
        }
    }

    const BackendConfig &cfg_;
    const CpuIvfpq &ivf_;
    size_t nq_, k_;
    bool range_;
    float radius_;
    int threads_ = 1;
    std::vector<float> x_;
    std::vector<uint32_t> lists_;
    std::vector<size_t> probe_start_; // nlist + 1 offsets into probes_
    std::vector<Probe> probes_;
    std::vector<std::vector<Kept>> kept_; // per query
    std::vector<uint32_t> bound_;         // per query: no entry with a larger key can enter
    // lists added but not searched yet (search_held), with copies of their entries
    std::vector<HeldList> held_;
    std::vector<int64_t> held_ids_;
    std::vector<uint8_t> held_codes_;
    std::vector<uint64_t> held_tags_;
    size_t held_work_ = 0;
};

Ivfpq *cpu_ivfpq_create(const vs_ivfpq_params &params, const float *centroids,
                        const float *codebooks)
{
    return new CpuIvfpq(params, centroids, codebooks, false);
}

// The list of each vector is the smallest key (exact coarse distance, list) and code j the
// codeword with the smallest pq_l2 to the residual's sub-vector (ties: smaller codeword), as a
// scan of every list and codeword would find them; nearest_rows (gemm.h) finds them from blocked
// products and computes those reference values only for the rows its bound cannot rule out.
void cpu_ivfpq_encode(const BackendConfig &cfg, int threads, const Ivfpq *ivf_,
                      const float *vectors, size_t n, int32_t *lists, uint8_t *codes)
{
    const CpuIvfpq &ivf = as_cpu(ivf_);
    if (!ivf.centroids)
        throw Error(VS_UNSUPPORTED, "an ivfpq object read in pieces (vs_ivfpq_create_rows) "
                                    "cannot encode");
    const vs_ivfpq_params &p = ivf.params();
    const size_t d = p.dim;
    const vs_metric cm = pq_coarse_metric(p.metric);
    const NearestKind coarse_kind = cm == VS_METRIC_IP ? NearestKind::IP : NearestKind::L2;
    const size_t dsub = d / p.m;
    const size_t ksub = size_t{1} << p.nbits;
    const size_t cs = ivf.code_size();
    const size_t block = 256;
    parallel_for((n + block - 1) / block, threads, cfg, [&](size_t b) {
        const size_t i0 = b * block, nb = std::min(n, i0 + block) - i0;
        const float *x = vectors + i0 * d;
        NearestScratch scratch;
        std::vector<float> residual(nb * d);
        std::vector<int32_t> arg(nb);
        nearest_rows(x, d, nb, ivf.packed_centroids(), coarse_kind, kRoundedOnceError,
                     [&](size_t i, size_t l) {
                         return exact_distance_simd(cm, x + i * d, &ivf.centroids[l * d], d);
                     },
                     nullptr, lists + i0, nullptr, scratch);
        if (!codes)
            return;
        for (size_t i = 0; i < nb; i++)
        {
            const float *c = &ivf.centroids[static_cast<size_t>(lists[i0 + i]) * d];
            for (size_t t = 0; t < d; t++)
                residual[i * d + t] = pq_sub(x[i * d + t], c[t]);
            std::memset(codes + (i0 + i) * cs, 0, cs);
        }
        for (size_t j = 0; j < p.m; j++)
        {
            const float *r = residual.data() + j * dsub;
            const float *cb = &ivf.codebooks[j * ksub * dsub];
            nearest_rows(r, d, nb, ivf.packed_codebooks[j], NearestKind::L2,
                         float_sum_error(dsub),
                         [&](size_t i, size_t c) {
                             return pq_l2(r + i * d, cb + c * dsub, static_cast<int>(dsub));
                         },
                         nullptr, arg.data(), nullptr, scratch);
            for (size_t i = 0; i < nb; i++)
                pq_code_set(codes + (i0 + i) * cs, static_cast<int>(j), p.nbits, arg[i]);
        }
    });
}

void cpu_ivfpq_add(Ivfpq *ivf_, size_t list, const int64_t *ids, const uint8_t *codes, size_t n)
{
    CpuIvfpq &ivf = const_cast<CpuIvfpq &>(as_cpu(ivf_));
    const size_t cs = ivf.code_size();
    std::vector<int64_t> &li = ivf.ids[list];
    std::vector<uint8_t> &lc = ivf.codes[list];
    // Reserve both first so that a failed allocation leaves the list unchanged.
    li.reserve(li.size() + n);
    lc.reserve(lc.size() + n * cs);
    li.insert(li.end(), ids, ids + n);
    lc.insert(lc.end(), codes, codes + n * cs);
    ivf.grow(n);
}

// Queries searched (and their lists ranked) a block at a time: bounded memory, and results reach a
// range collector in order.
constexpr size_t kSearchBlock = 1024;

void cpu_ivfpq_search(const BackendConfig &cfg, int threads, const Ivfpq *ivf_,
                      const float *queries, size_t nq, size_t probe_first, size_t nprobe,
                      size_t k, int64_t *out_ids, float *out_dists, int64_t *out_counts)
{
    const CpuIvfpq &ivf = as_cpu(ivf_);
    const size_t d = ivf.params().dim;
    std::vector<std::vector<uint64_t>> probes(std::min(nq, kSearchBlock));
    for (size_t q0 = 0; q0 < nq; q0 += kSearchBlock)
    {
        const size_t qn = std::min(kSearchBlock, nq - q0);
        rank_queries(cfg, threads, ivf, queries + q0 * d, qn, probe_first, nprobe,
                     probes.data());
        parallel_for(qn, threads, cfg, [&](size_t i) {
            const size_t q = q0 + i;
            std::vector<Candidate> cand;
            scan_query(ivf, queries + q * d, probes[i], cand);
            const size_t kk = std::min(k, cand.size());
            std::partial_sort(cand.begin(), cand.begin() + kk, cand.end(), by_estimate);
            for (size_t j = 0; j < k; j++)
            {
                out_ids[q * k + j] = j < kk ? cand[j].id : -1;
                out_dists[q * k + j] = j < kk ? key_float(cand[j].dist_key) : INFINITY;
            }
            if (out_counts)
                out_counts[q] = static_cast<int64_t>(kk);
        });
    }
}

void cpu_ivfpq_range(const BackendConfig &cfg, int threads, const Ivfpq *ivf_,
                     const float *queries, size_t nq, size_t probe_first, size_t nprobe,
                     float radius, RangeCollector *collector)
{
    const CpuIvfpq &ivf = as_cpu(ivf_);
    const size_t d = ivf.params().dim;
    // Queries in blocks: results reach the collector in order with bounded memory.
    const size_t block = std::max<size_t>(1, std::min<size_t>(256, 4 * threads));
    std::vector<std::vector<uint64_t>> probes(std::min(nq, block));
    for (size_t q0 = 0; q0 < nq; q0 += block)
    {
        const size_t qn = std::min(block, nq - q0);
        rank_queries(cfg, threads, ivf, queries + q0 * d, qn, probe_first, nprobe,
                     probes.data());
        std::vector<std::vector<Candidate>> hits(qn);
        parallel_for(qn, threads, cfg, [&](size_t i) {
            std::vector<Candidate> cand;
            scan_query(ivf, queries + (q0 + i) * d, probes[i], cand);
            for (const Candidate &c : cand)
                if (key_float(c.dist_key) <= radius)
                    hits[i].push_back(c);
            std::sort(hits[i].begin(), hits[i].end(), [](const Candidate &a, const Candidate &b) {
                return a.id != b.id ? a.id < b.id : a.pos < b.pos;
            });
        });
        std::vector<int64_t> counts(qn), ids;
        std::vector<float> dists;
        for (size_t i = 0; i < qn; i++)
        {
            counts[i] = static_cast<int64_t>(hits[i].size());
            for (const Candidate &c : hits[i])
            {
                ids.push_back(c.id);
                dists.push_back(key_float(c.dist_key));
            }
        }
        collector->add(q0, qn, counts.data(), ids.data(), dists.data());
    }
}

class CpuIvfpqBackend final : public IvfpqBackend
{
public:
    CpuIvfpqBackend(const BackendConfig &cfg, int threads) : cfg_(cfg), threads_(threads) {}

    Status create(const vs_ivfpq_params &params, const float *centroids, const float *codebooks,
                  Ivfpq **out) noexcept override
    {
        return guarded([&] { *out = cpu_ivfpq_create(params, centroids, codebooks); });
    }

    Status encode(const Ivfpq *ivf, const float *vectors, size_t n, int32_t *lists,
                  uint8_t *codes) noexcept override
    {
        return guarded([&] { cpu_ivfpq_encode(cfg_, threads_, ivf, vectors, n, lists, codes); });
    }

    Status add(Ivfpq *ivf, size_t list, const int64_t *ids, const uint8_t *codes,
               size_t n) noexcept override
    {
        return guarded([&] { cpu_ivfpq_add(ivf, list, ids, codes, n); });
    }

    Status search(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                  size_t nprobe, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts) noexcept override
    {
        return guarded([&] {
            cpu_ivfpq_search(cfg_, threads_, ivf, queries, nq, probe_first, nprobe, k, out_ids,
                             out_dists, out_counts);
        });
    }

    Status range(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                 size_t nprobe, float radius, RangeCollector *collector) noexcept override
    {
        return guarded([&] {
            cpu_ivfpq_range(cfg_, threads_, ivf, queries, nq, probe_first, nprobe, radius,
                            collector);
        });
    }

private:
    const BackendConfig &cfg_; // the owning CPU backend's
    int threads_;
};

} // namespace

std::unique_ptr<IvfpqListScan> make_cpu_ivfpq_list_scan(const BackendConfig &config,
                                                        const Ivfpq *ivf, const float *queries,
                                                        size_t nq, size_t first, size_t count,
                                                        size_t k, bool range, float radius)
{
    return std::unique_ptr<IvfpqListScan>(
        new CpuIvfpqListScan(config, ivf, queries, nq, first, count, k, range, radius));
}

Ivfpq *make_cpu_ivfpq_view(const vs_ivfpq_params &params, const float *centroids,
                          const float *codebooks)
{
    return new CpuIvfpq(params, centroids, codebooks, true);
}

Ivfpq *make_cpu_ivfpq_rows(const vs_ivfpq_params &params, const float *const *centroid_rows,
                          const float *const *table_rows)
{
    return new CpuIvfpq(params, centroid_rows, table_rows);
}

size_t ivfpq_table_width(const vs_ivfpq_params &params)
{
    const size_t ksub = size_t{1} << params.nbits;
    return (ksub + kGemmColumnAlign - 1) / kGemmColumnAlign * kGemmColumnAlign;
}

std::unique_ptr<IvfpqBackend> make_cpu_ivfpq(const BackendConfig &config, int threads)
{
    return std::unique_ptr<IvfpqBackend>(new CpuIvfpqBackend(config, threads));
}

} // namespace vs
