// The List of Clusters range search on a CUDA device (vsearch/lc_cuda.h): one block per query,
// shared memory independent of the index, a counting pass and a writing pass.
#include "vsearch/lc_cuda.h"

#include "cuda/utils/exact_warp.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kBlock = 128;
constexpr int kWarps = kBlock / 32;

struct DevSpace
{
    int strings;
    vs_metric metric;
    int dim;
    size_t n;
    const float *vectors;
    const uint32_t *chars;
    const uint64_t *offsets;
    const int64_t *ids;
};

struct DevList
{
    DevSpace centers;
    DevSpace members;
    const double *radii;
    const uint64_t *bucket_offsets;
};

// Myers' bit-parallel edit distance of the pattern (masks in shared memory) against t; exact when
// <= bound, else some value > bound (as vs_edit_pattern_distance).
__device__ unsigned myers(const uint64_t *low, const uint32_t *high, const uint64_t *high_mask,
                          int nhigh, int m, const uint32_t *t, unsigned nt, unsigned bound)
{
    unsigned diff = m > (int) nt ? m - nt : nt - m;
    if (diff > bound)
        return bound + 1;
    if (m == 0)
        return nt;
    const uint64_t top = 1ull << (m - 1);
    uint64_t pv = ~0ull, mv = 0;
    unsigned score = m;
    for (unsigned j = 0; j < nt; j++)
    {
        uint32_t c = t[j];
        uint64_t eq = 0;
        if (c < 256)
            eq = low[c];
        else
            for (int k = 0; k < nhigh; k++)
                if (high[k] == c)
                    eq = high_mask[k];
        uint64_t xv = eq | mv;
        uint64_t xh = (((eq & pv) + pv) ^ pv) | eq;
        uint64_t ph = mv | ~(xh | pv);
        uint64_t mh = pv & xh;
        if (ph & top)
            score++;
        else if (mh & top)
            score--;
        ph = (ph << 1) | 1;
        mh <<= 1;
        pv = mh | ~(xv | ph);
        mv = ph & xv;
        // the distance falls by at most one per remaining column (64-bit: no wrap-around)
        if (static_cast<unsigned long long>(score) >
            static_cast<unsigned long long>(bound) + (nt - 1 - j))
            return bound + 1;
    }
    return score;
}

__device__ __forceinline__ unsigned bound_of(double b)
{
    if (b < 0)
        return 0;
    if (b >= 4e9)
        return 0xFFFFFFFEu;
    return static_cast<unsigned>(floor(b));
}

// The SQL operator's value from the engine's exact base (as vs_operator_distance).
__device__ __forceinline__ double vector_value(vs_metric m, double base)
{
    float f = static_cast<float>(base); // the exact distance's one rounding
    if (m == VS_METRIC_L2)
        return sqrt(static_cast<double>(f));
    return static_cast<double>(f);
}

template <bool kWrite>
__global__ void __launch_bounds__(kBlock)
    lc_range_kernel(DevList lc, DevSpace qs, double radius, const uint64_t *out_offsets,
                    uint32_t *counts, int64_t *out_ids, double *out_dist)
{
    __shared__ uint64_t low[256];
    __shared__ uint32_t high[64];
    __shared__ uint64_t high_mask[64];
    __shared__ int nhigh;
    __shared__ double cdist[kBlock];
    __shared__ int stop;
    __shared__ unsigned found;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool strings = qs.strings != 0;
    const double slack_factor = strings ? 0.0 : VS_LC_SLACK;

    for (size_t q = blockIdx.x; q < qs.n; q += gridDim.x)
    {
        const uint32_t *qc = nullptr;
        const float *qv = nullptr;
        int m = 0;
        if (strings)
        {
            qc = qs.chars + qs.offsets[q];
            m = static_cast<int>(qs.offsets[q + 1] - qs.offsets[q]);
            for (int i = tid; i < 256; i += kBlock)
                low[i] = 0;
            __syncthreads();
            if (tid == 0)
            {
                int nh = 0;
                for (int i = 0; i < m; i++)
                {
                    uint32_t c = qc[i];
                    uint64_t bit = 1ull << i;
                    if (c < 256)
                        low[c] |= bit;
                    else
                    {
                        int k = 0;
                        while (k < nh && high[k] != c)
                            k++;
                        if (k == nh)
                        {
                            high[k] = c;
                            high_mask[k] = 0;
                            nh++;
                        }
                        high_mask[k] |= bit;
                    }
                }
                nhigh = nh;
            }
        }
        else
            qv = qs.vectors + q * static_cast<size_t>(qs.dim);
        if (tid == 0)
            found = 0;
        __syncthreads();

        auto emit = [&](int64_t id, double d) {
            unsigned pos = atomicAdd(&found, 1u);
            if (kWrite)
            {
                out_ids[out_offsets[q] + pos] = id;
                out_dist[out_offsets[q] + pos] = d;
            }
        };
        // distance from the query to object i of a space (strings: one thread; vectors: the
        // calling warp, every lane gets it)
        auto string_distance = [&](const DevSpace &s, size_t i, double bound) -> double {
            const uint32_t *t = s.chars + s.offsets[i];
            unsigned nt = static_cast<unsigned>(s.offsets[i + 1] - s.offsets[i]);
            return static_cast<double>(myers(low, high, high_mask, nhigh, m, t, nt, bound_of(bound)));
        };
        auto vector_distance = [&](const DevSpace &s, size_t i) -> double {
            double base = vs::cuda::warp_exact_base(s.metric == VS_METRIC_L2 ? VS_METRIC_L2SQ : s.metric, qv,
                                                    s.vectors + i * static_cast<size_t>(s.dim), s.dim, lane);
            return vector_value(s.metric, base);
        };

        const size_t nc = lc.centers.n;
        for (size_t base = 0; base < nc; base += kBlock)
        {
            const int chunk = static_cast<int>(nc - base < kBlock ? nc - base : kBlock);
            if (tid == 0)
                stop = kBlock;
            __syncthreads();
            // 1. the chunk's center distances
            if (strings)
            {
                if (tid < chunk)
                {
                    double rc = lc.radii[base + tid];
                    cdist[tid] = string_distance(lc.centers, base + tid, rc + radius);
                }
            }
            else
                for (int c = warp; c < chunk; c += kWarps)
                {
                    double d = vector_distance(lc.centers, base + c);
                    if (lane == 0)
                        cdist[c] = d;
                }
            __syncthreads();
            // 2. the first containing center ends the scan
            if (tid < chunk)
            {
                double d = cdist[tid], rc = lc.radii[base + tid];
                if (d < rc - radius - slack_factor * (rc + radius + d))
                    atomicMin(&stop, tid);
            }
            __syncthreads();
            const int last = stop < chunk ? stop : chunk - 1;
            // 3. centers within the radius
            if (tid <= last)
            {
                int64_t id = lc.centers.ids[base + tid];
                if (cdist[tid] <= radius && id >= 0)
                    emit(id, cdist[tid]);
            }
            // 4. the buckets that may hold answers
            for (int c = 0; c <= last; c++)
            {
                double d = cdist[c], rc = lc.radii[base + c];
                if (!(d <= rc + radius + slack_factor * (rc + radius + d)))
                    continue;
                const uint64_t b0 = lc.bucket_offsets[base + c], b1 = lc.bucket_offsets[base + c + 1];
                if (strings)
                {
                    for (uint64_t i = b0 + tid; i < b1; i += kBlock)
                    {
                        double dm = string_distance(lc.members, i, radius);
                        if (dm <= radius)
                            emit(lc.members.ids[i], dm);
                    }
                }
                else
                    for (uint64_t i = b0 + warp; i < b1; i += kWarps)
                    {
                        double dm = vector_distance(lc.members, i);
                        if (lane == 0 && dm <= radius)
                            emit(lc.members.ids[i], dm);
                    }
            }
            __syncthreads();
            if (stop < chunk)
                break; // the query ball lies inside that center's ball
        }
        __syncthreads();
        if (!kWrite && tid == 0)
            counts[q] = found;
        __syncthreads();
    }
}

// Device copies, freed on every path.
struct DeviceBuffers
{
    std::vector<void *> ptrs;
    ~DeviceBuffers()
    {
        for (void *p : ptrs)
            cudaFree(p);
    }
    template <class T> cudaError_t upload(const T *host, size_t n, const T **dev)
    {
        *dev = nullptr;
        if (host == nullptr || n == 0)
            return cudaSuccess;
        void *p = nullptr;
        cudaError_t e = cudaMalloc(&p, n * sizeof(T));
        if (e != cudaSuccess)
            return e;
        ptrs.push_back(p);
        *dev = static_cast<const T *>(p);
        return cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice);
    }
    template <class T> cudaError_t alloc(size_t n, T **dev)
    {
        void *p = nullptr;
        cudaError_t e = cudaMalloc(&p, (n ? n : 1) * sizeof(T));
        if (e == cudaSuccess)
            ptrs.push_back(p);
        *dev = static_cast<T *>(p);
        return e;
    }
};

int fail(char *err, size_t errlen, int status, const char *what, cudaError_t e)
{
    if (err != nullptr && errlen > 0)
        std::snprintf(err, errlen, "%s%s%s", what, e != cudaSuccess ? ": " : "",
                      e != cudaSuccess ? cudaGetErrorString(e) : "");
    return status;
}

cudaError_t upload_space(DeviceBuffers &buf, const vs_mspace &s, DevSpace *d)
{
    d->strings = s.kind == VS_MSPACE_STRINGS;
    d->metric = s.metric;
    d->dim = static_cast<int>(s.dim);
    d->n = s.n;
    cudaError_t e = cudaSuccess;
    if (d->strings)
    {
        e = buf.upload(s.offsets, s.n + 1, &d->offsets);
        if (e == cudaSuccess && s.n > 0 && s.offsets[s.n] > 0)
            e = buf.upload(s.chars, static_cast<size_t>(s.offsets[s.n]), &d->chars);
        d->vectors = nullptr;
    }
    else
    {
        e = buf.upload(s.vectors, s.n * s.dim, &d->vectors);
        d->chars = nullptr;
        d->offsets = nullptr;
    }
    if (e == cudaSuccess)
        e = buf.upload(reinterpret_cast<const int64_t *>(s.ids), s.n, &d->ids);
    return e;
}

} // namespace

extern "C" __attribute__((visibility("default"))) int
vs_cuda_lc_range_v1(const vs_lc *lc, const vs_mspace *queries, double radius, uint64_t *offsets,
                    int64_t **ids, double **distances, char *err, size_t errlen)
{
    if (lc == nullptr || queries == nullptr || offsets == nullptr || ids == nullptr ||
        distances == nullptr || std::isnan(radius) || queries->kind != lc->centers.kind ||
        (queries->kind == VS_MSPACE_VECTORS && queries->dim != lc->centers.dim) ||
        lc->centers.ids == nullptr || lc->members.ids == nullptr)
        return fail(err, errlen, VS_INVALID_ARGUMENT, "invalid arguments", cudaSuccess);
    *ids = nullptr;
    *distances = nullptr;
    const size_t nq = queries->n;
    if (queries->kind == VS_MSPACE_STRINGS)
        for (size_t q = 0; q < nq; q++)
            if (queries->offsets[q + 1] - queries->offsets[q] > VS_EDIT_MYERS_MAX)
                return fail(err, errlen, VS_UNSUPPORTED,
                            "a string query longer than 64 characters (use the CPU path)",
                            cudaSuccess);
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        return fail(err, errlen, VS_UNSUPPORTED, "no CUDA device", e);
    for (size_t i = 0; i <= nq; i++)
        offsets[i] = 0;
    if (nq == 0)
        return VS_OK;

    DeviceBuffers buf;
    DevList d{};
    DevSpace dq{};
    if ((e = upload_space(buf, lc->centers, &d.centers)) != cudaSuccess ||
        (e = upload_space(buf, lc->members, &d.members)) != cudaSuccess ||
        (e = upload_space(buf, *queries, &dq)) != cudaSuccess ||
        (e = buf.upload(lc->radii, lc->centers.n, &d.radii)) != cudaSuccess ||
        (e = buf.upload(reinterpret_cast<const uint64_t *>(lc->bucket_offsets), lc->centers.n + 1,
                        &d.bucket_offsets)) != cudaSuccess)
        return fail(err, errlen, e == cudaErrorMemoryAllocation ? VS_OUT_OF_MEMORY : VS_DEVICE_ERROR,
                    "uploading the list", e);
    uint32_t *counts = nullptr;
    uint64_t *doff = nullptr;
    if ((e = buf.alloc(nq, &counts)) != cudaSuccess || (e = buf.alloc(nq + 1, &doff)) != cudaSuccess)
        return fail(err, errlen, VS_OUT_OF_MEMORY, "device memory for counts", e);
    const int grid = static_cast<int>(nq < 65535 ? nq : 65535);
    lc_range_kernel<false><<<grid, kBlock>>>(d, dq, radius, nullptr, counts, nullptr, nullptr);
    if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess)
        return fail(err, errlen, VS_DEVICE_ERROR, "counting pass", e);
    std::vector<uint32_t> hc(nq);
    if ((e = cudaMemcpy(hc.data(), counts, nq * sizeof(uint32_t), cudaMemcpyDeviceToHost)) != cudaSuccess)
        return fail(err, errlen, VS_DEVICE_ERROR, "reading the counts", e);
    for (size_t q = 0; q < nq; q++)
        offsets[q + 1] = offsets[q] + hc[q];
    const size_t total = offsets[nq];
    *ids = static_cast<int64_t *>(std::malloc(sizeof(int64_t) * (total ? total : 1)));
    *distances = static_cast<double *>(std::malloc(sizeof(double) * (total ? total : 1)));
    if (*ids == nullptr || *distances == nullptr)
    {
        std::free(*ids);
        std::free(*distances);
        *ids = nullptr;
        *distances = nullptr;
        return fail(err, errlen, VS_OUT_OF_MEMORY, "host memory for the matches", cudaSuccess);
    }
    if (total > 0)
    {
        int64_t *oid = nullptr;
        double *od = nullptr;
        if ((e = buf.alloc(total, &oid)) != cudaSuccess || (e = buf.alloc(total, &od)) != cudaSuccess ||
            (e = cudaMemcpy(doff, offsets, (nq + 1) * sizeof(uint64_t), cudaMemcpyHostToDevice)) !=
                cudaSuccess)
        {
            std::free(*ids);
            std::free(*distances);
            *ids = nullptr;
            *distances = nullptr;
            return fail(err, errlen, VS_OUT_OF_MEMORY, "device memory for the matches", e);
        }
        lc_range_kernel<true><<<grid, kBlock>>>(d, dq, radius, doff, counts, oid, od);
        if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess ||
            (e = cudaMemcpy(*ids, oid, total * sizeof(int64_t), cudaMemcpyDeviceToHost)) != cudaSuccess ||
            (e = cudaMemcpy(*distances, od, total * sizeof(double), cudaMemcpyDeviceToHost)) !=
                cudaSuccess)
        {
            std::free(*ids);
            std::free(*distances);
            *ids = nullptr;
            *distances = nullptr;
            return fail(err, errlen, VS_DEVICE_ERROR, "writing pass", e);
        }
    }
    return VS_OK;
}
