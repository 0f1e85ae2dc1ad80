// Row scans (vsearch/rowscan.h).  Every (query, row) pair first gets the SIMD float kernel's value
// and a rigorous lower bound of the exact base value from engine/exact.h's error bounds; the exact
// distance (the engine's formula, bit for bit vs_knn's) is computed only when that bound does not
// rule the row out: above the current k-th best for kNN, beyond the radius for range.  The float
// kernel reads a row at the memory's speed where the exact formula (terms in double) takes about
// twice as long, so a scan of rows that are not in the caches costs what reading them does.
//
// Each thread keeps its own candidates per query; results merge them.  Selection keys are 128
// bits, the distance's order-preserving image above the id, so ties go to the smaller id whatever
// order the rows arrive in.
#include "cpu/rowscan.h"

#include "cpu/parallel.h"
#include "cpu/simd.h"
#include "engine/exact.h"
#include "engine/host_common.h"
#include "vsearch/distance.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <utility>
#include <vector>

namespace vs {
namespace {

using Key = unsigned __int128;

constexpr uint64_t kIdFlip = 1ull << 63; // signed ids in unsigned order
constexpr Key kNoBound = ~static_cast<Key>(0);
// An add below this much work (rows x dim x queries: a megabyte of rows for 8 queries) stays on
// the calling thread.  Handing an add to the kept threads and back took about 55 us on the
// development machine (2 vCPUs under KVM: wake-ups between CPUs), more than one query's scan of
// a megabyte of rows, so single queries run on one thread and batches on all.
constexpr size_t kParallelWork = size_t(1) << 21;
// Rows handed to a scan are usually not in the caches (pages of a buffer pool: one or a few rows
// between page headers, where the hardware prefetcher starts anew), so the first lines of the row
// kPrefetchAhead rows on are fetched while this one is measured (the prefetcher takes over from
// there): on the development machine a loop over rows laid out as in vs_flat's pages took 1.17x
// a contiguous scan's time without, 1.07x with (BENCHMARKS.md, "CPU path: vs_flat streaming").
constexpr size_t kPrefetchAhead = 2;
constexpr size_t kPrefetchBytes = 512;
// Squared norms below this get exact distances (IP, cosine): the float sums' error is then no
// longer relative to them (subnormal terms), and |x| |y| >= 1e-30 keeps the absolute part of a
// cosine's error (d 2^-149 / (|x| |y|)) far below the bound's slack.
constexpr float kTinyNorm2 = 1e-30f;

Key make_key128(float dist, int64_t id)
{
    return (static_cast<Key>(float_key(dist)) << 64) | (static_cast<uint64_t>(id) ^ kIdFlip);
}
int64_t key_id(Key k) { return static_cast<int64_t>(static_cast<uint64_t>(k) ^ kIdFlip); }
float key_distance(Key k) { return key_float(static_cast<uint32_t>(k >> 64)); }

// The `keep` smallest keys of a stream; bound() is the largest of them once `keep` were seen.
class TopK
{
public:
    void add(Key key, size_t keep)
    {
        if (key >= thr_)
            return;
        buf_.push_back(key);
        if (buf_.size() >= 2 * keep + 64)
            cut(keep);
    }
    bool bounded() const { return thr_ != kNoBound; }
    float bound() const { return key_distance(thr_); }
    std::vector<Key> &keys() { return buf_; }

private:
    void cut(size_t keep)
    {
        std::nth_element(buf_.begin(), buf_.begin() + (keep - 1), buf_.end());
        buf_.resize(keep);
        thr_ = *std::max_element(buf_.begin(), buf_.end());
    }
    std::vector<Key> buf_;
    Key thr_ = kNoBound;
};

struct Query
{
    const float *x;
    double qsq;
    double qn;
};

class CpuRowScan final : public RowScan
{
public:
    CpuRowScan(const BackendConfig &cfg, size_t dim, vs_metric metric, const float *queries,
               size_t nq, size_t k, bool range, float radius)
        : cfg_(cfg), d_(dim), m_(metric), nq_(nq), k_(k), range_(range), radius_(radius),
          x_(queries, queries + nq * dim)
    {
        threads_ = cfg.num_threads > 0 ? cfg.num_threads
                                       : static_cast<int>(std::thread::hardware_concurrency());
        threads_ = std::max(threads_, 1);
        q_.resize(nq);
        for (size_t i = 0; i < nq; i++)
        {
            q_[i].x = &x_[i * d_];
            q_[i].qsq = sqnorm_double(q_[i].x, d_);
            q_[i].qn = std::sqrt(q_[i].qsq);
        }
        g_ = (static_cast<double>(d_) + 4.0) * 5.9604644775390625e-08;
        rel_ = approx_error(APPROX_DIRECT_F32, m_, d_, 0.0, 0.0).rel;
        limit_ = range_ ? range_base_limit(m_, radius_) : 0.0;
        under_ = 2.0 * static_cast<double>(d_) * 0x1p-149;
    }

    size_t nq() const override { return nq_; }
    bool is_range() const override { return range_; }

    void add(const vs_row_block *blocks, size_t nblocks) override
    {
        check_cancel(cfg_);
        if (!range_ && k_ == 0)
            return;
        size_t rows = 0;
        for (size_t b = 0; b < nblocks; b++)
            rows += blocks[b].n;
        if (rows == 0)
            return;
        int parts = 1;
        if (threads_ > 1 && rows * d_ * nq_ >= kParallelWork && nblocks > 1)
            parts = static_cast<int>(std::min<size_t>(threads_, nblocks));
        slots(parts);
        if (parts == 1)
        {
            scan(blocks, 0, nblocks, 0);
            return;
        }
        // contiguous runs of blocks with about the same number of rows
        std::vector<size_t> cut(parts + 1, nblocks);
        cut[0] = 0;
        size_t seen = 0;
        int p = 1;
        for (size_t b = 0; b < nblocks && p < parts; b++)
        {
            seen += blocks[b].n;
            if (seen * parts >= rows * p)
                cut[p++] = b + 1;
        }
        if (!crew_)
            crew_.reset(new Crew(threads_));
        crew_->run([&](int t) {
            if (t < parts)
                scan(blocks, cut[t], cut[t + 1], t);
        });
    }

    void knn_result(int64_t *ids, float *dists, int64_t *counts) override
    {
        std::vector<Key> all;
        for (size_t q = 0; q < nq_; q++)
        {
            all.clear();
            for (auto &s : top_)
                all.insert(all.end(), s[q].keys().begin(), s[q].keys().end());
            size_t m = std::min(k_, all.size());
            std::partial_sort(all.begin(), all.begin() + m, all.end());
            for (size_t i = 0; i < k_; i++)
            {
                ids[q * k_ + i] = i < m ? key_id(all[i]) : -1;
                dists[q * k_ + i] = i < m ? key_distance(all[i]) : INFINITY;
            }
            if (counts)
                counts[q] = static_cast<int64_t>(m);
        }
    }

    void range_result(RangeCollector *collector) override
    {
        std::vector<std::pair<int64_t, float>> all;
        std::vector<int64_t> ids;
        std::vector<float> dists;
        for (size_t q = 0; q < nq_; q++)
        {
            all.clear();
            for (auto &s : hits_)
                all.insert(all.end(), s[q].begin(), s[q].end());
            std::sort(all.begin(), all.end(),
                      [](const auto &a, const auto &b) { return a.first < b.first; });
            ids.resize(all.size());
            dists.resize(all.size());
            for (size_t i = 0; i < all.size(); i++)
            {
                ids[i] = all[i].first;
                dists[i] = all[i].second;
            }
            int64_t count = static_cast<int64_t>(all.size());
            collector->add(q, 1, &count, ids.data(), dists.data());
        }
    }

private:
    // The per-thread state of the first n threads.
    void slots(int n)
    {
        if (range_)
            while (hits_.size() < static_cast<size_t>(n))
                hits_.emplace_back(nq_);
        else
            while (top_.size() < static_cast<size_t>(n))
                top_.emplace_back(nq_);
    }

    // A lower bound of the exact base value of (query, row), NaN when the float kernel cannot
    // give one (a value that overflowed, norms too small for a relative bound): then the exact
    // value decides.  engine/exact.h's bounds are relative to the terms; products that fall below
    // float's normal range add at most 2^-149 each, which under_ covers.
    double lower_base(const Query &q, const float *y) const
    {
        switch (m_)
        {
        case VS_METRIC_L2SQ:
        case VS_METRIC_L2:
        case VS_METRIC_L1:
        {
            double a = m_ == VS_METRIC_L1 ? vs_l1_f32(q.x, y, d_) : vs_l2sq_f32(q.x, y, d_);
            return std::isfinite(a) ? a - rel_ * std::fabs(a) - under_ : NAN;
        }
        case VS_METRIC_IP:
        case VS_METRIC_COSINE:
        {
            float dot, aa, bb;
            vs_cosine_parts_f32(q.x, y, d_, &dot, &aa, &bb);
            if (!std::isfinite(dot) || !std::isfinite(bb) || bb < kTinyNorm2)
                return NAN;
            if (m_ == VS_METRIC_IP)
            {
                // the row's norm from its float sum of squares, rounded up past that sum's error
                double yn = std::sqrt(static_cast<double>(bb) / (1.0 - 2.0 * g_));
                return approx_lower(approx_error(APPROX_DIRECT_F32, m_, d_, q.qn, yn), -dot) -
                       under_;
            }
            if (q.qsq < kTinyNorm2)
                return NAN;
            double a = cosine_base(dot, q.qsq, bb);
            // the bound of a cosine from exact norms, plus the float norm's share (at most g)
            return a - approx_error(APPROX_DIRECT_F32, m_, d_, q.qn, 0.0).abs - 2.0 * g_;
        }
        }
        return NAN;
    }

    // Starts fetching the head of the row kPrefetchAhead rows after row i of block b (in this
    // block or the next of b1).
    void prefetch_ahead(const vs_row_block *blocks, size_t b, size_t b1, size_t i) const
    {
        size_t j = i + kPrefetchAhead;
        while (j >= blocks[b].n)
        {
            j -= blocks[b].n;
            if (++b >= b1)
                return;
        }
        const char *row = reinterpret_cast<const char *>(blocks[b].rows) + j * blocks[b].stride;
        size_t bytes = std::min(kPrefetchBytes, d_ * sizeof(float));
        for (size_t off = 0; off < bytes; off += 64)
            __builtin_prefetch(row + off);
    }

    void scan(const vs_row_block *blocks, size_t b0, size_t b1, int slot)
    {
        for (size_t b = b0; b < b1; b++)
        {
            const vs_row_block &blk = blocks[b];
            const char *base = reinterpret_cast<const char *>(blk.rows);
            for (size_t qi = 0; qi < nq_; qi++)
            {
                const Query &q = q_[qi];
                // the first query's pass brings the rows into the caches for the others
                const bool ahead = qi == 0;
                if (range_)
                {
                    auto &out = hits_[slot][qi];
                    for (size_t i = 0; i < blk.n; i++)
                    {
                        const float *y = reinterpret_cast<const float *>(base + i * blk.stride);
                        if (ahead)
                            prefetch_ahead(blocks, b, b1, i);
                        double lb = lower_base(q, y);
                        if (lb > limit_)
                            continue;
                        float dist = exact_distance_simd(m_, q.x, y, d_);
                        if (dist <= radius_)
                            out.emplace_back(blk.ids[i], dist);
                    }
                    continue;
                }
                TopK &top = top_[slot][qi];
                for (size_t i = 0; i < blk.n; i++)
                {
                    const float *y = reinterpret_cast<const float *>(base + i * blk.stride);
                    if (ahead)
                        prefetch_ahead(blocks, b, b1, i);
                    if (top.bounded())
                    {
                        double lb = lower_base(q, y);
                        if (base_to_output(m_, lb) > top.bound())
                            continue;
                    }
                    top.add(make_key128(exact_distance_simd(m_, q.x, y, d_), blk.ids[i]), k_);
                }
            }
        }
    }

    BackendConfig cfg_;
    size_t d_;
    vs_metric m_;
    size_t nq_, k_;
    bool range_;
    float radius_;
    std::vector<float> x_;
    std::vector<Query> q_;
    double g_, rel_, limit_, under_;
    int threads_;
    std::vector<std::vector<TopK>> top_;                                  // [slot][query]
    std::vector<std::vector<std::vector<std::pair<int64_t, float>>>> hits_; // [slot][query]
    std::unique_ptr<Crew> crew_;
};

} // namespace

std::unique_ptr<RowScan> make_row_scan(const BackendConfig &config, size_t dim, vs_metric metric,
                                       const float *queries, size_t nq, size_t k, bool range,
                                       float radius)
{
    return std::unique_ptr<RowScan>(
        new CpuRowScan(config, dim, metric, queries, nq, k, range, radius));
}

} // namespace vs
