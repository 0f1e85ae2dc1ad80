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

#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "cpu/simd.h"
#include "cpu/sketch.h"
#include "engine/exact.h"
#include "engine/host_common.h"
#include "vsearch/distance.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
// Rows handed to a scan are usually not in the caches, and the hardware prefetcher cannot follow
// them: pages of a buffer pool hold one or a few rows between page headers and free space, and
// each gap ends its stream.  So the whole row about kPrefetchBytes on in the stream of rows (this
// add's, then the caller's next ones: vs_rowscan_add_ahead) is fetched into L2 while this one is
// measured, a row per row.  On the development machine one query over 60 000 x 784 floats laid out
// as vs_flat's pages (2 rows a page, 4 pages an add) took 17.0 ms with the heads of the rows 2 on
// fetched and no look past the add, 10.1-10.5 ms this way, 5.9 ms over contiguous rows
// (BENCHMARKS.md, "CPU path: vs_flat's rows fetched ahead").
constexpr size_t kPrefetchBytes = 12 << 10;
// Queries from which a scan takes blocked products.  Unlike a dataset's kNN (gemm.h's
// kGemmMinQueries), a row scan first gathers each row into a tile and takes its norm, so the
// float kernel per pair stays cheaper for longer: one thread over rows in vs_flat's page layout,
// per pair / blocked (ms), at 128 dims (200 000 rows) 4 queries 14.3 / 31.7, 8 27.0 / 32.1, 16
// 52.7 / 32.8; at 784 (60 000 rows) 4 19.1 / 51.1, 8 29.9 / 51.4, 16 54.6 / 52.2, 32 101 / 54.
constexpr size_t kRowScanGemmMinQueries = 10;

// Walks the rows after the one being measured: the rest of an add's blocks, then the blocks the
// caller will add next (only fetched, never read).
class RowPrefetch
{
public:
    RowPrefetch(const vs_row_block *blocks, size_t b, size_t b1, const vs_row_block *ahead,
                size_t nahead, size_t row_bytes)
        : blocks_(blocks), b_(b), b1_(b1), ahead_(ahead), nahead_(nahead), bytes_(row_bytes)
    {
        const size_t rows = std::max<size_t>(2, (kPrefetchBytes + row_bytes - 1) / row_bytes);
        for (size_t r = 0; r < rows && valid(); r++)
            step();
    }
    // Fetches the row under the cursor into L2 and moves on by one.
    void next()
    {
        if (!valid())
            return;
        const vs_row_block &blk = block();
        const uintptr_t row = reinterpret_cast<uintptr_t>(blk.rows) + i_ * blk.stride;
        for (uintptr_t line = row & ~uintptr_t{63}; line < row + bytes_; line += 64)
            __builtin_prefetch(reinterpret_cast<const void *>(line), 0, 2);
        step();
    }

private:
    bool valid() const { return b_ < b1_ || (b_ - b1_) < nahead_; }
    const vs_row_block &block() const { return b_ < b1_ ? blocks_[b_] : ahead_[b_ - b1_]; }
    void step()
    {
        i_++;
        while (valid() && i_ >= block().n)
        {
            i_ = 0;
            b_++;
        }
    }
    const vs_row_block *blocks_;
    size_t b_, b1_;
    const vs_row_block *ahead_;
    size_t nahead_, bytes_, i_ = 0;
};

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
    // Brings bound() closer to the k-th smallest key seen: add() moves it only every keep + 64
    // keys, this once a quarter of keep more have come (a cut costs about keep steps).
    void tighten(size_t keep)
    {
        if (keep > 0 && buf_.size() >= keep && (buf_.size() >= keep + keep / 4 + 4 || !bounded()))
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
    float xsq, xinv; // float(||x||^2), float(1 / ||x||): the GEMM values' operands (CUDA's)
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
            q_[i].xsq = static_cast<float>(q_[i].qsq);
            q_[i].xinv = static_cast<float>(1.0 / q_[i].qn);
        }
        if (nq_ >= kRowScanGemmMinQueries && m_ != VS_METRIC_L1)
        {
            for (size_t q0 = 0; q0 < nq_; q0 += kGemmQueries)
                panels_.emplace_back(q_[q0].x, std::min(kGemmQueries, nq_ - q0), d_, d_);
            zeros_.assign(d_, 0.0f);
        }
        g_ = (static_cast<double>(d_) + 4.0) * 5.9604644775390625e-08;
        rel_ = approx_error(APPROX_DIRECT_F32, m_, d_, 0.0, 0.0).rel;
        limit_ = range_ ? range_base_limit(m_, radius_) : 0.0;
        under_ = 2.0 * static_cast<double>(d_) * 0x1p-149;
        if (!panels_.empty())
            gemm_terms();
    }

    size_t nq() const override { return nq_; }
    bool is_range() const override { return range_; }

    void add(const vs_row_block *blocks, size_t nblocks, const vs_row_block *ahead,
             size_t nahead) override
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
            scan(blocks, 0, nblocks, ahead, nahead, 0);
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
                scan(blocks, cut[t], cut[t + 1], t + 1 == parts ? ahead : nullptr,
                     t + 1 == parts ? nahead : 0, t);
        });
    }

    // A row is needed where a query's lower bound from its sketch does not rule it out: below the
    // radius's base value, or not above the base value past the first thread's k-th best (at
    // least the scan's k-th best so far), which is tightened first: once most rows are ruled
    // out, few rows arrive to move the bound that add() keeps.
    void sketch_filter(const void *sketches, size_t stride, size_t n, unsigned char *need) override
    {
        if (sq_.empty())
            for (size_t qi = 0; qi < nq_; qi++)
                sq_.emplace_back(q_[qi].x, d_, m_);
        slots(1);
        std::vector<double> &skip = sketch_skip_;
        skip.resize(nq_);
        for (size_t qi = 0; qi < nq_; qi++)
        {
            if (!range_)
                top_[0][qi].tighten(k_);
            skip[qi] = range_ ? limit_ : k_ == 0 ? -INFINITY : base_skip(top_[0][qi]);
        }
        const char *base = static_cast<const char *>(sketches);
        for (size_t i = 0; i < n; i++)
        {
            need[i] = 0;
            for (size_t qi = 0; qi < nq_ && !need[i]; qi++)
                need[i] = !(sq_[qi].lower_base(base + i * stride) > skip[qi]);
        }
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

    // Per query, the terms of a lower bound of the exact base value of (query, row) from the dot
    // product o of a blocked product: the value is the CUDA GEMM path's, the error
    // APPROX_GEMM_F32's (engine/exact.h) for the row's own norm yn >= ||y||, spelled out so that
    // a pair costs a few operations:
    //   L2:     (xsq + ysq) - 2 o - (e0 + e1 yn + e2 yn^2) - under_
    //   IP:     -o - e1 yn - under_
    //   cosine: 1 - o xinv yinv - e0
    // NaN terms (a query or row whose squared norm is below kTinyNorm2 where the bound needs
    // more, their products underflowing) make the bound NaN: the exact value decides, as with
    // lower_base's NaN; so do values that overflowed.
    void gemm_terms()
    {
        const double u = 5.9604644775390625e-08, safety = 2.0;
        e0_.assign(nq_, 0.0);
        e1_.assign(nq_, 0.0);
        e2_.assign(nq_, 0.0);
        for (size_t i = 0; i < nq_; i++)
        {
            const Query &q = q_[i];
            const bool tiny = !(q.qsq >= kTinyNorm2);
            switch (m_)
            {
            case VS_METRIC_L2SQ:
            case VS_METRIC_L2: // safety (2 g qn yn + 3 u (qn + yn)^2)
                e0_[i] = tiny ? NAN : safety * 3.0 * u * q.qsq;
                e1_[i] = safety * (2.0 * g_ + 6.0 * u) * q.qn;
                e2_[i] = safety * 3.0 * u;
                break;
            case VS_METRIC_IP: // safety g qn yn + 1e-300
                e0_[i] = 1e-300;
                e1_[i] = safety * g_ * q.qn;
                break;
            case VS_METRIC_COSINE: // the float norms' share 2 g besides, as lower_base
                e0_[i] = tiny ? NAN
                              : approx_error(APPROX_GEMM_F32, m_, d_, q.qn, 0.0).abs + 2.0 * g_;
                break;
            default:
                break;
            }
        }
    }

    // The rows of blocks [b0, b1) against every query through blocked products: up to
    // kGemmTileRows rows are copied together (rows of index pages lie between page headers), each
    // block of queries' products taken at once, and every pair whose bound does not rule it out
    // gets its exact distance as in scan().
    void scan_gemm(const vs_row_block *blocks, size_t b0, size_t b1, RowPrefetch &fetch, int slot)
    {
        const size_t T = kGemmTileRows;
        std::vector<float> tile(T * d_), out(T * 256), ysq(T), yinv(T);
        std::vector<const float *> row(T);
        std::vector<int64_t> id(T);
        std::vector<double> yn(T), yn2(T);
        // rows whose bound needs their own norm to be normal (IP, cosine below kTinyNorm2): every
        // pair of theirs takes the pair's bound
        std::vector<char> special(T);
        std::vector<float> thr(256), xa(256), vals(256);
        std::vector<uint32_t> cols(256);
        const GemmValue kind = gemm_value(m_);
        // per query, a base value above which a row cannot enter its top k (kNN), or the radius's
        std::vector<double> skip(nq_);
        for (size_t qi = 0; qi < nq_; qi++)
            skip[qi] = range_ ? limit_ : base_skip(top_[slot][qi]);
        size_t b = b0, i = 0;
        while (b < b1)
        {
            size_t tn = 0;
            for (; b < b1 && tn < T; i = 0, b++)
            {
                const vs_row_block &blk = blocks[b];
                const char *base = reinterpret_cast<const char *>(blk.rows);
                for (; i < blk.n && tn < T; i++, tn++)
                {
                    row[tn] = reinterpret_cast<const float *>(base + i * blk.stride);
                    fetch.next();
                    id[tn] = blk.ids[i];
                    std::memcpy(&tile[tn * d_], row[tn], d_ * sizeof(float));
                    // ||y||^2 in double by the exact kernel's 32 partial sums (a plain double
                    // sum waits on each addition: most of a small batch's time at 784 dims)
                    const double s =
                        simd::exact_base_simd(VS_METRIC_L2SQ, row[tn], zeros_.data(), d_);
                    const bool tiny = !(s >= kTinyNorm2);
                    ysq[tn] = static_cast<float>(s);
                    yn[tn] = std::sqrt(s) * (1.0 + 1e-9);
                    yn2[tn] = yn[tn] * yn[tn];
                    yinv[tn] = tiny ? NAN : static_cast<float>(1.0 / std::sqrt(s));
                    special[tn] = tiny && m_ != VS_METRIC_L2 && m_ != VS_METRIC_L2SQ;
                    if (tiny && m_ == VS_METRIC_IP)
                        yn[tn] = NAN;
                }
                if (i < blk.n)
                    break; // the tile is full inside this block: go on from row i
            }
            // the largest row norm of the tile, for one threshold per query and tile
            double ymax = 0;
            for (size_t j = 0; j < tn; j++)
                ymax = std::max(ymax, yn[j]);
            for (size_t pb = 0; pb < panels_.size(); pb++)
            {
                const PackedRows &qp = panels_[pb];
                const size_t w = qp.padded(), q0 = pb * kGemmQueries, qn = qp.size();
                dot_block(tile.data(), d_, tn, qp, out.data(), w);
                // A value above thr[c] puts the pair's lower bound above skip for every row of
                // the tile (the error grows with the row's norm): bounded_columns passes the
                // others, and those that overflowed, to the pair's own bound.  A NaN threshold
                // (a tiny query) passes every pair; padding columns pass none.
                std::fill(thr.begin(), thr.end(), -INFINITY);
                for (size_t c = 0; c < qn; c++)
                {
                    const size_t qi = q0 + c;
                    const double e = m_ == VS_METRIC_COSINE ? e0_[qi]
                                     : m_ == VS_METRIC_IP
                                         ? e0_[qi] + e1_[qi] * ymax + under_
                                         : e0_[qi] + (e1_[qi] + e2_[qi] * ymax) * ymax + under_;
                    // (the double sums' rounding is far inside the bound's safety factor)
                    thr[c] = float_at_least(skip[qi] + e);
                    xa[c] = m_ == VS_METRIC_COSINE ? q_[qi].xinv : q_[qi].xsq;
                }
                for (size_t j = 0; j < tn; j++)
                {
                    const float *o = &out[j * w];
                    size_t m = qn;
                    if (!special[j])
                        m = bounded_columns(o, xa.data(), m_ == VS_METRIC_COSINE ? yinv[j] : ysq[j],
                                            thr.data(), w, kind, vals.data(), cols.data());
                    for (size_t t = 0; t < m; t++)
                    {
                        const size_t c = special[j] ? t : cols[t];
                        if (c >= qn)
                            continue;
                        const size_t qi = q0 + c;
                        float a;
                        double lb;
                        if (m_ == VS_METRIC_IP)
                        {
                            a = -o[c];
                            lb = a - e0_[qi] - e1_[qi] * yn[j] - under_;
                        }
                        else if (m_ == VS_METRIC_COSINE)
                        {
                            a = 1.0f - o[c] * q_[qi].xinv * yinv[j];
                            lb = a - e0_[qi];
                        }
                        else
                        {
                            a = (q_[qi].xsq + ysq[j]) - 2.0f * o[c];
                            lb = a - (e0_[qi] + e1_[qi] * yn[j] + e2_[qi] * yn2[j]) - under_;
                        }
                        if (lb > skip[qi] && a < INFINITY)
                            continue;
                        const Query &q = q_[qi];
                        float dist = exact_distance_simd(m_, q.x, row[j], d_);
                        if (range_)
                        {
                            if (dist <= radius_)
                                hits_[slot][qi].emplace_back(id[j], dist);
                            continue;
                        }
                        TopK &top = top_[slot][qi];
                        top.add(make_key128(dist, id[j]), k_);
                        skip[qi] = base_skip(top);
                    }
                }
            }
        }
    }

    // A base value above which a row's exact distance is above the top's bound (+inf while it
    // is not bounded): the base value of the next float past the bound, so that a lower bound
    // beyond it gives an output distance beyond the bound whatever the rounding.
    double base_skip(const TopK &top) const
    {
        if (!top.bounded())
            return INFINITY;
        const double up = nextafterf(top.bound(), INFINITY);
        return m_ == VS_METRIC_L2 ? (up > 0 ? up * up : 0.0) : up;
    }

    // ahead: the rows after blocks [b0, b1) (fetched, not read).
    void scan(const vs_row_block *blocks, size_t b0, size_t b1, const vs_row_block *ahead,
              size_t nahead, int slot)
    {
        RowPrefetch fetch(blocks, b0, b1, ahead, nahead, d_ * sizeof(float));
        if (!panels_.empty())
        {
            scan_gemm(blocks, b0, b1, fetch, slot);
            return;
        }
        for (size_t b = b0; b < b1; b++)
        {
            const vs_row_block &blk = blocks[b];
            const char *base = reinterpret_cast<const char *>(blk.rows);
            for (size_t qi = 0; qi < nq_; qi++)
            {
                const Query &q = q_[qi];
                // the first query's pass brings the rows into the caches for the others
                const bool first = qi == 0;
                if (range_)
                {
                    auto &out = hits_[slot][qi];
                    for (size_t i = 0; i < blk.n; i++)
                    {
                        const float *y = reinterpret_cast<const float *>(base + i * blk.stride);
                        if (first)
                            fetch.next();
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
                    if (first)
                        fetch.next();
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
    std::vector<SketchQuery> sq_; // made by the first sketch_filter
    std::vector<double> sketch_skip_; // sketch_filter's bounds per query, kept between calls
    std::vector<PackedRows> panels_; // blocks of kGemmQueries queries packed (GEMM scans only)
    std::vector<double> e0_, e1_, e2_; // gemm_terms()
    std::vector<float> zeros_;         // the origin, for the rows' norms (GEMM scans only)
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
