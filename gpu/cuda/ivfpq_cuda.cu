// IVF-PQ pipelines of the CUDA backend.
//   encode: vectors in chunks; one warp per vector ranks every list by the exact coarse distance;
//     one thread per (vector, code byte) picks the nearest codewords of the residual.
//   search: per block of queries, exact coarse keys of every (query, list) pair and a CUB
//     segmented sort give each query's probe window; queries are then taken in chunks whose
//     candidates fit the scratch limit.  k <= kPqSelectMax (fused): one block per (query,
//     probed list) builds the lookup table in shared memory, scans the list's search layout
//     (entries sorted by id, codes interleaved per 32 entries and read as uint4) and keeps
//     the list's min(len, k) best (estimate, slot) keys in per-warp WarpTopK selectors merged
//     by warp 0; those np x k candidates per query (keys (estimate, segment slot) and ids)
//     are then sorted per query and pq_topk_kernel resolves equal estimates by id.  Larger k:
//     every entry of the probed lists is a candidate (estimate, scan position), same sort and
//     top-k kernel.
//   range: every candidate (append-order layout), flagged against the radius and compacted
//     with CUB; the host orders each query's matches by (id, scan position).
// Every estimate uses the arithmetic of engine/ivfpq_math.h, so results equal the CPU backend's.
// CudaIvfpqBackend (at the end) is the backend's IvfpqBackend over these pipelines.
#include "cuda/ivfpq_cuda.cuh"

#include "cuda/impl/ivfpq_select.cuh"
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/error.cuh"
#include "engine/host_common.h"
#include "engine/ivfpq_math.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace vs::cuda {
namespace {

// What the pipelines need from the backend.
struct IvfpqDevice
{
    DevicePool &pool;
    cudaStream_t stream;
    const BackendConfig &cfg;
    size_t smem_optin; // largest dynamic shared memory per block
};

constexpr size_t kQueryBlock = 65536;  // queries uploaded and coarse-ranked together
constexpr size_t kCoarseKeys = 1 << 25; // coarse keys per sort
constexpr size_t kEncodeChunk = 65536;

class CudaIvfpq final : public Ivfpq
{
public:
    struct List
    {
        DeviceArray<uint8_t> codes; // append order (the range pipeline scans this)
        DeviceArray<int64_t> ids;
        size_t len = 0, cap = 0;
        // Search layout of the fused k-NN pipeline (launch_pq_interleave): entries sorted by
        // (id, append position), codes interleaved per 32 entries; rebuilt after adds.
        std::vector<int64_t> host_ids;
        DeviceArray<uint4> codes4;
        DeviceArray<int64_t> sorted_ids;
        bool layout_stale = true;
    };

    CudaIvfpq(const IvfpqDevice &dev, const vs_ivfpq_params &p, const float *c, const float *cb)
        : lists(p.nlist)
    {
        params_ = p;
        code_size = (p.m * p.nbits + 7) / 8;
        wq = (code_size + 15) / 16;
        const size_t ksub = size_t{1} << p.nbits;
        centroids = DeviceArray<float>(dev.pool, p.nlist * p.dim, dev.stream);
        codebooks = DeviceArray<float>(dev.pool, ksub * p.dim, dev.stream);
        VS_CUDA_CHECK(cudaMemcpyAsync(centroids.get(), c, centroids.bytes(), cudaMemcpyHostToDevice,
                                      dev.stream));
        VS_CUDA_CHECK(cudaMemcpyAsync(codebooks.get(), cb, codebooks.bytes(), cudaMemcpyHostToDevice,
                                      dev.stream));
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
    }

    void append(const IvfpqDevice &dev, size_t l, const int64_t *ids, const uint8_t *codes, size_t n)
    {
        List &L = lists[l];
        if (L.len + n >= 0xFFFFFFFFull)
            throw Error(VS_INVALID_ARGUMENT, "a list holds fewer than 2^32 - 1 entries");
        if (L.len + n > L.cap)
        {
            // Doubling keeps appends of single entries amortised O(1).
            size_t cap = std::max({L.cap * 2, L.len + n, size_t{16}});
            DeviceArray<uint8_t> nc(dev.pool, cap * code_size, dev.stream);
            DeviceArray<int64_t> ni(dev.pool, cap, dev.stream);
            if (L.len)
            {
                VS_CUDA_CHECK(cudaMemcpyAsync(nc.get(), L.codes.get(), L.len * code_size,
                                              cudaMemcpyDeviceToDevice, dev.stream));
                VS_CUDA_CHECK(cudaMemcpyAsync(ni.get(), L.ids.get(), L.len * sizeof(int64_t),
                                              cudaMemcpyDeviceToDevice, dev.stream));
            }
            L.codes = std::move(nc);
            L.ids = std::move(ni);
            L.cap = cap;
        }
        VS_CUDA_CHECK(cudaMemcpyAsync(L.codes.get() + L.len * code_size, codes, n * code_size,
                                      cudaMemcpyHostToDevice, dev.stream));
        VS_CUDA_CHECK(cudaMemcpyAsync(L.ids.get() + L.len, ids, n * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, dev.stream));
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
        L.host_ids.insert(L.host_ids.end(), ids, ids + n);
        L.len += n;
        size_ += n;
        tables_stale = true;
        L.layout_stale = true;
        layouts_stale = true;
    }

    // Device tables of list pointers and lengths, refreshed after adds.
    void refresh_tables(const IvfpqDevice &dev) const
    {
        std::lock_guard<std::mutex> lock(refresh_mu);
        if (!tables_stale)
            return;
        const size_t nlist = params_.nlist;
        std::vector<const uint8_t *> pc(nlist);
        std::vector<const int64_t *> pi(nlist);
        std::vector<uint32_t> pl(nlist);
        for (size_t l = 0; l < nlist; l++)
        {
            pc[l] = lists[l].codes.get();
            pi[l] = lists[l].ids.get();
            pl[l] = static_cast<uint32_t>(lists[l].len);
        }
        if (t_codes.size() != nlist)
        {
            t_codes = DeviceArray<const uint8_t *>(dev.pool, nlist, dev.stream);
            t_ids = DeviceArray<const int64_t *>(dev.pool, nlist, dev.stream);
            t_len = DeviceArray<uint32_t>(dev.pool, nlist, dev.stream);
        }
        VS_CUDA_CHECK(cudaMemcpyAsync(t_codes.get(), pc.data(), nlist * sizeof(void *),
                                      cudaMemcpyHostToDevice, dev.stream));
        VS_CUDA_CHECK(cudaMemcpyAsync(t_ids.get(), pi.data(), nlist * sizeof(void *),
                                      cudaMemcpyHostToDevice, dev.stream));
        VS_CUDA_CHECK(cudaMemcpyAsync(t_len.get(), pl.data(), nlist * sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, dev.stream));
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
        tables_stale = false;
    }

    // Search layouts of the lists changed since the last search, and their device tables.
    void refresh_layouts(const IvfpqDevice &dev) const
    {
        std::lock_guard<std::mutex> lock(refresh_mu);
        if (!layouts_stale)
            return;
        const size_t nlist = params_.nlist;
        for (size_t l = 0; l < nlist; l++)
        {
            List &L = const_cast<List &>(lists[l]);
            if (!L.layout_stale)
                continue;
            check_cancel(dev.cfg);
            L.codes4.reset();
            L.sorted_ids.reset();
            const size_t groups = (L.len + 31) / 32;
            L.codes4 = DeviceArray<uint4>(dev.pool, std::max<size_t>(groups * 32 * wq, 1), dev.stream);
            L.sorted_ids = DeviceArray<int64_t>(dev.pool, std::max<size_t>(L.len, 1), dev.stream);
            if (L.len)
            {
                // (id, append position) order: a stable sort of the positions by id.
                std::vector<uint32_t> perm(L.len);
                for (size_t i = 0; i < L.len; i++)
                    perm[i] = static_cast<uint32_t>(i);
                const bool sorted = std::is_sorted(L.host_ids.begin(), L.host_ids.end());
                if (!sorted)
                    std::stable_sort(perm.begin(), perm.end(), [&](uint32_t x, uint32_t y) {
                        return L.host_ids[x] < L.host_ids[y];
                    });
                std::vector<int64_t> sids(L.len);
                for (size_t i = 0; i < L.len; i++)
                    sids[i] = L.host_ids[perm[i]];
                VS_CUDA_CHECK(cudaMemcpyAsync(L.sorted_ids.get(), sids.data(), L.len * sizeof(int64_t),
                                              cudaMemcpyHostToDevice, dev.stream));
                DeviceArray<uint32_t> dperm;
                if (!sorted)
                {
                    dperm = DeviceArray<uint32_t>(dev.pool, L.len, dev.stream);
                    VS_CUDA_CHECK(cudaMemcpyAsync(dperm.get(), perm.data(), L.len * sizeof(uint32_t),
                                                  cudaMemcpyHostToDevice, dev.stream));
                }
                launch_pq_interleave(L.codes.get(), static_cast<int>(code_size), dperm.get(),
                                     static_cast<uint32_t>(L.len), static_cast<int>(wq),
                                     L.codes4.get(), dev.stream);
                // The host vectors and dperm go out of scope: wait for the copies and the kernel.
                VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
            }
            L.layout_stale = false;
        }
        std::vector<const uint4 *> pc(nlist);
        std::vector<const int64_t *> pi(nlist);
        for (size_t l = 0; l < nlist; l++)
        {
            pc[l] = lists[l].codes4.get();
            pi[l] = lists[l].sorted_ids.get();
        }
        if (t_codes4.size() != nlist)
        {
            t_codes4 = DeviceArray<const uint4 *>(dev.pool, nlist, dev.stream);
            t_sids = DeviceArray<const int64_t *>(dev.pool, nlist, dev.stream);
        }
        VS_CUDA_CHECK(cudaMemcpyAsync(t_codes4.get(), pc.data(), nlist * sizeof(void *),
                                      cudaMemcpyHostToDevice, dev.stream));
        VS_CUDA_CHECK(cudaMemcpyAsync(t_sids.get(), pi.data(), nlist * sizeof(void *),
                                      cudaMemcpyHostToDevice, dev.stream));
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
        layouts_stale = false;
    }

    size_t code_size = 0, wq = 0;
    DeviceArray<float> centroids, codebooks;
    std::vector<List> lists;
    mutable DeviceArray<const uint8_t *> t_codes;
    mutable DeviceArray<const int64_t *> t_ids;
    mutable DeviceArray<uint32_t> t_len;
    // Searches on several lanes at once refresh the tables and layouts one at a time (each
    // refresh ends with its copies done, so every lane may read the result).
    mutable std::mutex refresh_mu;
    mutable bool tables_stale = true;
    mutable DeviceArray<const uint4 *> t_codes4;
    mutable DeviceArray<const int64_t *> t_sids;
    mutable bool layouts_stale = true;
};

const CudaIvfpq &as_cuda(const Ivfpq *ivf)
{
    auto *c = dynamic_cast<const CudaIvfpq *>(ivf);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "ivfpq object belongs to another backend");
    return *c;
}

template <typename T> DeviceArray<T> device_copy(const IvfpqDevice &dev, const T *src, size_t n)
{
    DeviceArray<T> a(dev.pool, std::max<size_t>(n, 1), dev.stream);
    if (n)
        VS_CUDA_CHECK(cudaMemcpyAsync(a.get(), src, n * sizeof(T), cudaMemcpyHostToDevice,
                                      dev.stream));
    return a;
}

template <typename T> void download(const IvfpqDevice &dev, T *dst, const T *src, size_t n)
{
    if (n)
        VS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, dev.stream));
}

// Probe windows of queries [0, nq) of a block already on the device: lists and coarse distances.
void probe_windows(const IvfpqDevice &dev, const CudaIvfpq &ivf, const float *dq, size_t nq,
                   size_t first, size_t np, std::vector<int32_t> &probes, std::vector<float> &coarse)
{
    const vs_ivfpq_params &p = ivf.params();
    const size_t nlist = p.nlist;
    probes.resize(nq * np);
    coarse.resize(nq * np);
    const size_t per = std::max<size_t>(1, std::min(nq, kCoarseKeys / nlist));
    DeviceArray<uint64_t> keys(dev.pool, per * nlist, dev.stream), sorted(dev.pool, per * nlist, dev.stream);
    DeviceArray<int> offs(dev.pool, per + 1, dev.stream);
    DeviceArray<int32_t> dprobes(dev.pool, per * np, dev.stream);
    DeviceArray<float> dcoarse(dev.pool, per * np, dev.stream);
    for (size_t q0 = 0; q0 < nq; q0 += per)
    {
        check_cancel(dev.cfg);
        const int qn = static_cast<int>(std::min(per, nq - q0));
        launch_coarse_keys(dq + q0 * p.dim, qn, ivf.centroids.get(), static_cast<int>(nlist),
                           static_cast<int>(p.dim), pq_coarse_metric(p.metric), keys.get(), dev.stream);
        launch_fill_offsets(offs.get(), qn, static_cast<int>(nlist), dev.stream);
        segmented_sort_keys(dev.pool, keys.get(), sorted.get(), qn * static_cast<int>(nlist), qn,
                            offs.get(), offs.get() + 1, dev.stream);
        launch_probe_window(sorted.get(), qn, static_cast<int>(nlist), static_cast<int>(first),
                            static_cast<int>(np), dprobes.get(), dcoarse.get(), dev.stream);
        download(dev, probes.data() + q0 * np, dprobes.get(), qn * np);
        download(dev, coarse.data() + q0 * np, dcoarse.get(), qn * np);
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
    }
}

// The candidates of a chunk of queries on the device: keys (estimate, scan position) and ids,
// query segments seg[0 .. qn].
struct Candidates
{
    DeviceArray<uint64_t> keys;
    DeviceArray<int64_t> ids, seg;
    std::vector<int64_t> host_seg;
    size_t total = 0;
};

// Fused selection (select_warps > 0): each probed list contributes its min(len, k) best
// (launch_pq_scan_select); otherwise every entry is a candidate (launch_pq_scan).
struct ScanMode
{
    size_t k = SIZE_MAX; // candidates per probed list at most
    int select_warps = 0;
};

void scan_chunk(const IvfpqDevice &dev, const CudaIvfpq &ivf, const float *dq, size_t qa,
                size_t qb, size_t np, const std::vector<int32_t> &probes,
                const std::vector<float> &coarse, const ScanMode &mode, Candidates &c)
{
    const vs_ivfpq_params &p = ivf.params();
    const size_t qn = qb - qa;
    std::vector<PqPair> pairs;
    c.host_seg.assign(qn + 1, 0);
    for (size_t i = 0; i < qn; i++)
    {
        uint32_t pos = 0;
        for (size_t r = 0; r < np; r++)
        {
            const int32_t list = probes[(qa + i) * np + r];
            const size_t len = std::min(ivf.lists[list].len, mode.k);
            if (len == 0)
                continue;
            pairs.push_back(PqPair{static_cast<int32_t>(i), list,
                                   pq_list_term(p.metric, coarse[(qa + i) * np + r]), pos,
                                   c.host_seg[i] + pos});
            pos += static_cast<uint32_t>(len);
        }
        c.host_seg[i + 1] = c.host_seg[i] + pos;
    }
    c.total = static_cast<size_t>(c.host_seg[qn]);
    c.keys = DeviceArray<uint64_t>(dev.pool, std::max<size_t>(c.total, 1), dev.stream);
    c.ids = DeviceArray<int64_t>(dev.pool, std::max<size_t>(c.total, 1), dev.stream);
    c.seg = device_copy(dev, c.host_seg.data(), qn + 1);
    DeviceArray<PqPair> dpairs = device_copy(dev, pairs.data(), pairs.size());
    if (mode.select_warps > 0)
    {
        PqSelectArgs s{};
        s.pairs = dpairs.get();
        s.queries = dq + qa * p.dim;
        s.centroids = ivf.centroids.get();
        s.codebooks = ivf.codebooks.get();
        s.list_codes4 = ivf.t_codes4.get();
        s.list_sorted_ids = ivf.t_sids.get();
        s.list_len = ivf.t_len.get();
        s.d = static_cast<int>(p.dim);
        s.m = static_cast<int>(p.m);
        s.nbits = p.nbits;
        s.wq = static_cast<int>(ivf.wq);
        s.metric = p.metric;
        s.k = static_cast<int>(mode.k);
        s.nwarps = mode.select_warps;
        s.keys = c.keys.get();
        s.ids = c.ids.get();
        launch_pq_scan_select(s, static_cast<int>(pairs.size()), dev.stream);
        return;
    }
    PqScanArgs a{};
    a.pairs = dpairs.get();
    a.queries = dq + qa * p.dim;
    a.centroids = ivf.centroids.get();
    a.codebooks = ivf.codebooks.get();
    a.list_codes = ivf.t_codes.get();
    a.list_ids = ivf.t_ids.get();
    a.list_len = ivf.t_len.get();
    a.d = static_cast<int>(p.dim);
    a.m = static_cast<int>(p.m);
    a.nbits = p.nbits;
    a.code_size = static_cast<int>(ivf.code_size);
    a.metric = p.metric;
    a.keys = c.keys.get();
    a.ids = c.ids.get();
    launch_pq_scan(a, static_cast<int>(pairs.size()), dev.stream);
}

// Runs fn(block_first_query, block_size, device queries, probes, coarse) over blocks of queries,
// then per chunk [qa, qb) of the block whose candidates (and k outputs) fit the scratch limit.
template <typename Chunk>
void for_each_chunk(const IvfpqDevice &dev, const CudaIvfpq &ivf, const float *queries, size_t nq,
                    size_t first, size_t np, size_t per_query_out, const ScanMode &mode,
                    Chunk &&chunk)
{
    const vs_ivfpq_params &p = ivf.params();
    if (pq_scan_smem_bytes(static_cast<int>(p.m), p.nbits, static_cast<int>(p.dim)) > dev.smem_optin)
        throw Error(VS_UNSUPPORTED, "the lookup table (m x 2^nbits floats) and the query do not "
                                    "fit in the GPU's shared memory");
    ivf.refresh_tables(dev);
    if (mode.select_warps > 0)
        ivf.refresh_layouts(dev);
    // Scratch per candidate: key, sorted key, id (24 bytes) plus sort temporaries.
    const size_t limit =
        std::min<size_t>(INT32_MAX, std::max<size_t>(size_t{1} << 20, dev.pool.available() / 64));
    std::vector<int32_t> probes;
    std::vector<float> coarse;
    for (size_t b0 = 0; b0 < nq; b0 += kQueryBlock)
    {
        const size_t bn = std::min(kQueryBlock, nq - b0);
        DeviceArray<float> dq = device_copy(dev, queries + b0 * p.dim, bn * p.dim);
        probe_windows(dev, ivf, dq.get(), bn, first, np, probes, coarse);
        size_t qa = 0;
        while (qa < bn)
        {
            check_cancel(dev.cfg);
            size_t qb = qa, cand = 0;
            while (qb < bn)
            {
                size_t c = 0;
                for (size_t r = 0; r < np; r++)
                    c += std::min(ivf.lists[probes[qb * np + r]].len, mode.k);
                if (qb > qa && (cand + c > limit || (qb - qa + 1) * (np + per_query_out) > limit))
                    break;
                if (c > INT32_MAX)
                    throw Error(VS_UNSUPPORTED, "more than 2^31 candidates for one query");
                cand += c;
                qb++;
            }
            Candidates c;
            scan_chunk(dev, ivf, dq.get(), qa, qb, np, probes, coarse, mode, c);
            chunk(b0 + qa, qb - qa, c);
            qa = qb;
        }
    }
}

Ivfpq *ivfpq_create(const IvfpqDevice &dev, const vs_ivfpq_params &params, const float *centroids,
                    const float *codebooks)
{
    return new CudaIvfpq(dev, params, centroids, codebooks);
}

void ivfpq_encode(const IvfpqDevice &dev, const Ivfpq *ivf_, const float *vectors, size_t n,
                  int32_t *lists, uint8_t *codes)
{
    const CudaIvfpq &ivf = as_cuda(ivf_);
    const vs_ivfpq_params &p = ivf.params();
    const size_t per = std::min(n, kEncodeChunk);
    DeviceArray<float> x(dev.pool, per * p.dim, dev.stream);
    DeviceArray<int32_t> dl(dev.pool, per, dev.stream);
    DeviceArray<uint8_t> dc(dev.pool, codes ? per * ivf.code_size : 1, dev.stream);
    for (size_t i0 = 0; i0 < n; i0 += per)
    {
        check_cancel(dev.cfg);
        const size_t cn = std::min(per, n - i0);
        VS_CUDA_CHECK(cudaMemcpyAsync(x.get(), vectors + i0 * p.dim, cn * p.dim * sizeof(float),
                                      cudaMemcpyHostToDevice, dev.stream));
        launch_assign(x.get(), cn, ivf.centroids.get(), static_cast<int>(p.nlist),
                      static_cast<int>(p.dim), pq_coarse_metric(p.metric), dl.get(), dev.stream);
        download(dev, lists + i0, dl.get(), cn);
        if (codes)
        {
            launch_pq_encode(x.get(), cn, ivf.centroids.get(), dl.get(), ivf.codebooks.get(),
                             static_cast<int>(p.dim), static_cast<int>(p.m), p.nbits,
                             static_cast<int>(ivf.code_size), dc.get(), dev.stream);
            download(dev, codes + i0 * ivf.code_size, dc.get(), cn * ivf.code_size);
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
    }
}

void ivfpq_add(const IvfpqDevice &dev, Ivfpq *ivf, size_t list, const int64_t *ids,
               const uint8_t *codes, size_t n)
{
    const_cast<CudaIvfpq &>(as_cuda(ivf)).append(dev, list, ids, codes, n);
}

void ivfpq_search(const IvfpqDevice &dev, const Ivfpq *ivf_, const float *queries, size_t nq,
                  size_t probe_first, size_t nprobe, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts)
{
    const CudaIvfpq &ivf = as_cuda(ivf_);
    const vs_ivfpq_params &p = ivf.params();
    // Fused selection for k <= kPqSelectMax (when its selectors fit in shared memory): a probed
    // list then yields at most k candidates, so the per-query sort below is over np x k keys.
    ScanMode mode;
    if (k <= static_cast<size_t>(kPqSelectMax))
    {
        mode.select_warps = pq_select_warps(static_cast<int>(p.m), p.nbits, static_cast<int>(p.dim),
                                            static_cast<int>(k), dev.smem_optin);
        if (mode.select_warps > 0)
            mode.k = k;
    }
    for_each_chunk(dev, ivf, queries, nq, probe_first, nprobe, k, mode, [&](size_t q0, size_t qn, Candidates &c) {
        DeviceArray<uint64_t> sorted(dev.pool, std::max<size_t>(c.total, 1), dev.stream);
        segmented_sort_keys64(dev.pool, c.keys.get(), sorted.get(), static_cast<int>(c.total),
                              static_cast<int>(qn), c.seg.get(), dev.stream);
        DeviceArray<int64_t> ids(dev.pool, qn * k, dev.stream), counts(dev.pool, qn, dev.stream);
        DeviceArray<float> dists(dev.pool, qn * k, dev.stream);
        launch_pq_topk(sorted.get(), c.seg.get(), c.ids.get(), static_cast<int>(qn),
                       static_cast<int64_t>(k), ids.get(), dists.get(), counts.get(), dev.stream);
        download(dev, out_ids + q0 * k, ids.get(), qn * k);
        download(dev, out_dists + q0 * k, dists.get(), qn * k);
        if (out_counts)
            download(dev, out_counts + q0, counts.get(), qn);
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
    });
}

void ivfpq_range(const IvfpqDevice &dev, const Ivfpq *ivf_, const float *queries, size_t nq,
                 size_t probe_first, size_t nprobe, float radius, RangeCollector *collector)
{
    const CudaIvfpq &ivf = as_cuda(ivf_);
    for_each_chunk(dev, ivf, queries, nq, probe_first, nprobe, 0, ScanMode{}, [&](size_t q0, size_t qn, Candidates &c) {
        DeviceArray<uint8_t> flags(dev.pool, std::max<size_t>(c.total, 1), dev.stream);
        DeviceArray<uint32_t> sel(dev.pool, std::max<size_t>(c.total, 1), dev.stream);
        launch_pq_range_flags(c.keys.get(), c.total, radius, flags.get(), dev.stream);
        const size_t nm = select_flagged_indices(dev.pool, flags.get(), c.total, sel.get(), dev.stream);
        DeviceArray<int64_t> mids(dev.pool, std::max<size_t>(nm, 1), dev.stream);
        DeviceArray<float> mdists(dev.pool, std::max<size_t>(nm, 1), dev.stream);
        DeviceArray<uint32_t> mpos(dev.pool, std::max<size_t>(nm, 1), dev.stream);
        launch_pq_range_gather(sel.get(), nm, c.keys.get(), c.ids.get(), mids.get(), mdists.get(),
                               mpos.get(), dev.stream);
        std::vector<uint32_t> hsel(nm), hpos(nm);
        std::vector<int64_t> hids(nm);
        std::vector<float> hd(nm);
        download(dev, hsel.data(), sel.get(), nm);
        download(dev, hids.data(), mids.get(), nm);
        download(dev, hd.data(), mdists.get(), nm);
        download(dev, hpos.data(), mpos.get(), nm);
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.stream));
        // Matches are in candidate order, so grouped by query; order each group by (id, position).
        std::vector<int64_t> counts(qn, 0), ids(nm);
        std::vector<float> dists(nm);
        std::vector<size_t> order(nm);
        size_t at = 0;
        for (size_t i = 0; i < qn; i++)
        {
            const size_t from = at;
            while (at < nm && static_cast<int64_t>(hsel[at]) < c.host_seg[i + 1])
                at++;
            for (size_t j = from; j < at; j++)
                order[j] = j;
            std::sort(order.begin() + from, order.begin() + at, [&](size_t a, size_t b) {
                return hids[a] != hids[b] ? hids[a] < hids[b] : hpos[a] < hpos[b];
            });
            for (size_t j = from; j < at; j++)
            {
                ids[j] = hids[order[j]];
                dists[j] = hd[order[j]];
            }
            counts[i] = static_cast<int64_t>(at - from);
        }
        collector->add(q0, qn, counts.data(), ids.data(), dists.data());
    });
}

class CudaIvfpqBackend final : public IvfpqBackend
{
public:
    explicit CudaIvfpqBackend(Lanes &lanes) : lanes_(lanes) {}

    Status create(const vs_ivfpq_params &params, const float *centroids, const float *codebooks,
                  Ivfpq **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            *out = ivfpq_create(device(dev), params, centroids, codebooks);
        });
    }

    Status encode(const Ivfpq *ivf, const float *vectors, size_t n, int32_t *lists,
                  uint8_t *codes) noexcept override
    {
        return lanes_.run(
            [&](DeviceContext &dev) { ivfpq_encode(device(dev), ivf, vectors, n, lists, codes); });
    }

    Status add(Ivfpq *ivf, size_t list, const int64_t *ids, const uint8_t *codes,
               size_t n) noexcept override
    {
        return lanes_.run(
            [&](DeviceContext &dev) { ivfpq_add(device(dev), ivf, list, ids, codes, n); });
    }

    Status search(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                  size_t nprobe, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            ivfpq_search(device(dev), ivf, queries, nq, probe_first, nprobe, k, out_ids, out_dists,
                         out_counts);
        });
    }

    Status range(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                 size_t nprobe, float radius, RangeCollector *collector) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            ivfpq_range(device(dev), ivf, queries, nq, probe_first, nprobe, radius, collector);
        });
    }

private:
    static IvfpqDevice device(DeviceContext &dev)
    {
        return IvfpqDevice{*dev.pool, dev.main, dev.cfg, dev.smem_optin};
    }

    Lanes &lanes_;
};

} // namespace

std::unique_ptr<IvfpqBackend> make_cuda_ivfpq(Lanes &lanes)
{
    return std::unique_ptr<IvfpqBackend>(new CudaIvfpqBackend(lanes));
}

} // namespace vs::cuda
