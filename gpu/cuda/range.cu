// Range search on the CUDA backend.  Per step (a tile of queries x every row, or x a column chunk
// when one row of the tile does not fit): the approximate tile (GEMM, or the direct scan for L1
// and small batches; binary16 rows: the GEMM, or exact values for L1); one pass that keeps every
// value within the radius plus the error bound as a candidate key (query, column), with
// per-query counts (impl/range_kernels.cu); the exact check of the candidates; one radix sort of
// the matches by (query, column), i.e. by (query, id); the per-query offsets; ids and distances
// to pinned memory and the collector.  Two slots (stream, tile, buffers) alternate, so one step's
// GEMM runs while the previous step's matches are checked, sorted and copied and the host
// appends the one before.  A step whose candidates overflow the buffer is redone in batches of
// queries that fit (by the first pass's per-query counts) and, for a query with more candidates
// than the buffer holds, in column chunks of the buffer's size: device memory stays bounded
// whatever the radius.
#include "cuda/pipelines.cuh"

#include "engine/host_common.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace vs::cuda {

namespace {

struct Step
{
    size_t q0, qn; // queries of the batch
    size_t c0, cn; // dataset rows (tile columns)
};

struct Slot
{
    int index = 0;
    cudaStream_t st = nullptr;
    PinnedBuffer *host = nullptr;
    DeviceArray<float> tile;
    DeviceArray<uint64_t> cand, keys, sorted;
    DeviceArray<uint32_t> vals, sorted_vals, count;
    DeviceArray<unsigned long long> total;
    DeviceArray<int64_t> offsets;
    Step step{};
    // the output in flight: out_nq queries from query out_q0 of the call, out_n sorted keys
    bool pending = false;
    size_t out_q0 = 0, out_nq = 0, out_n = 0;
};

class RangeRun
{
public:
    RangeRun(DeviceContext &dev, const CudaDataset &c, const float *hq, size_t nq, float radius,
             vs_metric m, RangeCollector *collector)
        : dev_(dev), c_(c), nq_(nq), radius_(radius), m_(m), collector_(collector)
    {
        const size_t n = c.size(), d = c.dim();
        std::vector<int> which(nq);
        std::iota(which.begin(), which.end(), 0);
        Q_ = upload_queries(dev, hq, which, c, true, true);
        // binary16 rows: the GEMM for every batch (their direct tile is exact values, for L1)
        use_gemm_ = m != VS_METRIC_L1 &&
                    (c.half() || nq > static_cast<size_t>(dev.range_small_batch()));
        const int kind = use_gemm_ ? dev.gemm_kind(c.half()) : APPROX_DIRECT_F32;
        mode_ = use_gemm_ ? approx_mode(m) : MODE_RAW;
        // Candidates: approximate value <= the threshold in double, rounded up to a float (a
        // superset: the exact check decides).
        const double limit = range_base_limit(m, radius);
        std::vector<float> thr(nq);
        for (size_t i = 0; i < nq; i++)
        {
            const double t = range_approx_threshold(
                approx_error(kind, m, d, Q_.host_norm[i], c.maxnorm,
                             Q_.host_qrel.empty() ? 0.0 : Q_.host_qrel[i]),
                limit);
            float f = static_cast<float>(t);
            if (static_cast<double>(f) < t)
                f = std::nextafter(f, INFINITY);
            thr[i] = f;
        }
        // Per slot: a tile of whole rows (tq queries) when one fits, else column chunks of one
        // query (GEMM only; the direct scan writes whole rows); candidate buffers of `cap_` keys
        // (about 48 bytes each with the sort's scratch; 2^26, 3 GiB, holds 26% of a 256 x 1M
        // tile, and more only costs overflow batches).
        const size_t avail = dev.pool->available();
        const size_t budget = std::min(dev.tile_bytes, avail / 6);
        tn_ = n;
        if (round_up(n, 4) * 4 <= budget)
            tq_ = std::max<size_t>(1, budget / (round_up(n, 4) * 4));
        else
        {
            tq_ = 1;
            if (use_gemm_)
                tn_ = std::min(n, std::max<size_t>(4096, budget / 4 / 4096 * 4096));
        }
        tq_ = std::min({tq_, nq, size_t{4096}});
        ld_ = round_up(tn_, 4);
        cap_ = dev.range_cap ? dev.range_cap
                             : std::min<size_t>(size_t{1} << 26,
                                                std::max<size_t>(size_t{1} << 16, avail / 6 / 48));
        cap_ = std::max<size_t>(4, std::min(cap_, tq_ * tn_));
        // Keys q << cbits | column: the sort reads qbits + cbits bits (29 for 256 x 1M tiles).
        qbits_ = 1;
        while ((size_t{1} << qbits_) <= tq_)
            qbits_++;
        cbits_ = 1;
        while ((size_t{1} << cbits_) < tn_)
            cbits_++;
        thr_ = DeviceArray<float>(*dev.pool, nq, dev.main);
        VS_CUDA_CHECK(cudaMemcpyAsync(thr_.get(), thr.data(), nq * sizeof(float),
                                      cudaMemcpyHostToDevice, dev.main));
        const size_t nslots = nq > tq_ || n > tn_ ? 2 : 1;
        for (size_t i = 0; i < nslots; i++)
        {
            Slot &s = slots_[i];
            s.index = static_cast<int>(i);
            s.st = dev.work[i];
            s.host = &dev.pinned[i];
            s.tile = DeviceArray<float>(*dev.pool, tq_ * ld_, dev.main);
            s.cand = DeviceArray<uint64_t>(*dev.pool, cap_, dev.main);
            s.keys = DeviceArray<uint64_t>(*dev.pool, cap_, dev.main);
            s.sorted = DeviceArray<uint64_t>(*dev.pool, cap_, dev.main);
            s.vals = DeviceArray<uint32_t>(*dev.pool, cap_, dev.main);
            s.sorted_vals = DeviceArray<uint32_t>(*dev.pool, cap_, dev.main);
            s.count = DeviceArray<uint32_t>(*dev.pool, tq_, dev.main);
            s.total = DeviceArray<unsigned long long>(*dev.pool, 1, dev.main);
            s.offsets = DeviceArray<int64_t>(*dev.pool, tq_ + 1, dev.main);
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
        prof_.mark("setup", dev.main);
    }

    void run()
    {
        std::vector<Step> steps;
        for (size_t q0 = 0; q0 < nq_; q0 += tq_)
            for (size_t c0 = 0; c0 < c_.size(); c0 += tn_)
                steps.push_back({q0, std::min(tq_, nq_ - q0), c0, std::min(tn_, c_.size() - c0)});
        StreamJoin join{dev_.work, 2};
        const size_t T = steps.size();
        check_cancel(dev_.cfg);
        first_pass(slots_[0], steps[0]);
        for (size_t t = 0; t < T; t++)
        {
            Slot &cur = slots_[t % 2], &nxt = slots_[(t + 1) % 2];
            // nxt's pending output (step t - 1) is ahead of the next first pass on its stream,
            // and the two use disjoint parts of its pinned buffer.
            if (t + 1 < T)
            {
                check_cancel(dev_.cfg);
                first_pass(nxt, steps[t + 1]);
            }
            finish(nxt);
            second_pass(cur);
        }
        finish(slots_[T % 2]);
        finish(slots_[(T - 1) % 2]);
        prof_.print("range", nq_, steps.size());
    }

private:
    // Pinned layout: total (8 bytes) | per-query counts | offsets | ids | distances.
    size_t counters_bytes() const { return round_up(8 + tq_ * 4, 64); }
    size_t ids_at() const { return counters_bytes() + round_up((tq_ + 1) * 8, 64); }

    // The approximate tile, the candidates of the whole step with per-query counts, and the
    // counters to the host.
    void first_pass(Slot &s, const Step &step)
    {
        s.step = step;
        if (use_gemm_)
            gemm(dev_, s.index, c_, step.c0, step.cn, Q_, step.q0, step.qn, s.tile.get(), ld_);
        else
            full_rows(dev_, c_, Q_, step.q0, step.qn, m_, s.tile.get(), ld_, s.index, s.st, true);
        prof_.mark("approx", s.st);
        VS_CUDA_CHECK(cudaMemsetAsync(s.count.get(), 0, step.qn * 4, s.st));
        filter(s, 0, step.qn, 0, step.cn, true);
        prof_.mark("filter", s.st);
        // grows on a slot's first step only (ids_at() is fixed per call), never under a pending
        // output
        char *h = static_cast<char *>(s.host->ensure(ids_at()));
        VS_CUDA_CHECK(cudaMemcpyAsync(h, s.total.get(), 8, cudaMemcpyDeviceToHost, s.st));
        VS_CUDA_CHECK(cudaMemcpyAsync(h + 8, s.count.get(), step.qn * 4, cudaMemcpyDeviceToHost,
                                      s.st));
    }

    void filter(Slot &s, size_t qa, size_t qb, size_t ca, size_t cb, bool counts)
    {
        const Step &step = s.step;
        VS_CUDA_CHECK(cudaMemsetAsync(s.total.get(), 0, 8, s.st));
        RangeFilterArgs a{};
        a.tile = s.tile.get();
        a.ld = static_cast<int64_t>(ld_);
        a.mode = mode_;
        a.xsq = Q_.sq + step.q0;
        a.xinv = Q_.inv + step.q0;
        a.ysq = c_.sq.get() + step.c0;
        a.yinv = c_.inv.get() + step.c0;
        a.thr = thr_.get() + step.q0;
        a.qa = static_cast<int>(qa);
        a.qb = static_cast<int>(qb);
        a.ca = static_cast<uint32_t>(ca);
        a.cb = static_cast<uint32_t>(cb);
        a.cbits = cbits_;
        a.count = counts ? s.count.get() : nullptr;
        a.total = s.total.get();
        a.cand = s.cand.get();
        a.cap = cap_;
        launch_range_filter(a, s.st);
    }

    // After the first pass: the step's output when its candidates fit the buffer, else the
    // step again in batches that do (each finished before the next).
    void second_pass(Slot &s)
    {
        VS_CUDA_CHECK(cudaStreamSynchronize(s.st));
        const char *h = static_cast<const char *>(s.host->ensure(ids_at()));
        const uint64_t total = *reinterpret_cast<const uint64_t *>(h);
        const Step &step = s.step;
        if (total <= cap_)
        {
            output(s, 0, step.qn, total);
            return;
        }
        const uint32_t *hc = reinterpret_cast<const uint32_t *>(h + 8);
        std::vector<uint32_t> count(hc, hc + step.qn);
        const size_t width = std::max<size_t>(4, cap_ / 4 * 4);
        for (size_t qa = 0; qa < step.qn;)
        {
            if (count[qa] > cap_)
            {
                for (size_t ca = 0; ca < step.cn; ca += width)
                    batch(s, qa, qa + 1, ca, std::min(step.cn, ca + width));
                qa++;
                continue;
            }
            size_t qb = qa, sum = 0;
            while (qb < step.qn && sum + count[qb] <= cap_)
                sum += count[qb++];
            batch(s, qa, qb, 0, step.cn);
            qa = qb;
        }
    }

    void batch(Slot &s, size_t qa, size_t qb, size_t ca, size_t cb)
    {
        check_cancel(dev_.cfg);
        filter(s, qa, qb, ca, cb, false);
        uint64_t *h = static_cast<uint64_t *>(s.host->ensure(ids_at()));
        VS_CUDA_CHECK(cudaMemcpyAsync(h, s.total.get(), 8, cudaMemcpyDeviceToHost, s.st));
        VS_CUDA_CHECK(cudaStreamSynchronize(s.st));
        if (*h > cap_)
            throw Error(VS_INTERNAL, "range batch exceeds its candidate buffer");
        output(s, qa, qb, *h);
        finish(s);
    }

    // Exact check, sort, offsets, ids and distances of n candidates of queries [qa, qb) of the
    // step, and their copy to the pinned buffer (stream-ordered; finish() hands them over).
    void output(Slot &s, size_t qa, size_t qb, size_t n)
    {
        const Step &step = s.step;
        const uint32_t row0 = static_cast<uint32_t>(step.c0);
        launch_range_check(s.cand.get(), n, cbits_, row0, Q_.view(step.q0), c_.rows(), m_,
                           radius_, s.keys.get(), s.vals.get(), s.st);
        prof_.mark("check", s.st);
        sort_pairs_u64(*dev_.pool, s.keys.get(), s.sorted.get(), s.vals.get(), s.sorted_vals.get(),
                       n, qbits_ + cbits_, s.st);
        prof_.mark("sort", s.st);
        // The candidate and value buffers are free again: ids and distances go there.
        int64_t *ids = reinterpret_cast<int64_t *>(s.cand.get());
        float *dists = reinterpret_cast<float *>(s.vals.get());
        const int nb = static_cast<int>(qb - qa);
        launch_range_output(s.sorted.get(), s.sorted_vals.get(), n, cbits_, static_cast<int>(qa),
                            nb, row0, c_.ids.get(), s.offsets.get(), ids, dists, s.st);
        char *h = static_cast<char *>(s.host->ensure(ids_at() + n * 12));
        VS_CUDA_CHECK(cudaMemcpyAsync(h + counters_bytes(), s.offsets.get(), (nb + 1) * 8,
                                      cudaMemcpyDeviceToHost, s.st));
        if (n)
        {
            // n bounds the matches (the exact count is on the device): one copy, no round trip
            VS_CUDA_CHECK(cudaMemcpyAsync(h + ids_at(), ids, n * 8, cudaMemcpyDeviceToHost, s.st));
            VS_CUDA_CHECK(cudaMemcpyAsync(h + ids_at() + n * 8, dists, n * 4,
                                          cudaMemcpyDeviceToHost, s.st));
        }
        s.pending = true;
        s.out_q0 = step.q0 + qa;
        s.out_nq = qb - qa;
        s.out_n = n;
    }

    void finish(Slot &s)
    {
        if (!s.pending)
            return;
        s.pending = false;
        VS_CUDA_CHECK(cudaStreamSynchronize(s.st));
        prof_.mark("output", s.st);
        const char *h = static_cast<const char *>(s.host->ensure(ids_at() + s.out_n * 12));
        const int64_t *off = reinterpret_cast<const int64_t *>(h + counters_bytes());
        const size_t nb = s.out_nq;
        counts_.resize(nb);
        for (size_t i = 0; i < nb; i++)
            counts_[i] = off[i + 1] - off[i];
        collector_->add(s.out_q0, nb, counts_.data(),
                        reinterpret_cast<const int64_t *>(h + ids_at()),
                        reinterpret_cast<const float *>(h + ids_at() + s.out_n * 8));
        prof_.mark("append", s.st);
    }

    DeviceContext &dev_;
    const CudaDataset &c_;
    size_t nq_;
    float radius_;
    vs_metric m_;
    RangeCollector *collector_;
    QueryBatch Q_;
    bool use_gemm_ = false;
    int mode_ = MODE_RAW;
    size_t tq_ = 1, tn_ = 0, ld_ = 0, cap_ = 0;
    int qbits_ = 1, cbits_ = 1;
    DeviceArray<float> thr_;
    Slot slots_[2];
    std::vector<int64_t> counts_;
    Profile prof_; // VSEARCH_CUDA_PROFILE=1 (serialises the slots); "k" = steps
};

} // namespace

void range_impl(DeviceContext &dev, const CudaDataset &c, const float *hq, size_t nq, float radius,
                vs_metric m, RangeCollector *collector)
{
    if (c.size() == 0)
    {
        std::vector<int64_t> zeros(nq, 0);
        collector->add(0, nq, zeros.data(), nullptr, nullptr);
        return;
    }
    RangeRun run(dev, c, hq, nq, radius, m, collector);
    run.run();
}

} // namespace vs::cuda
