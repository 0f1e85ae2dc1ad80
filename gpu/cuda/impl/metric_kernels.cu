// The CUDA backend's metric-space kernels (impl/metric_kernels.cuh; the reference is the host
// functions of gpu/cpu/lc.cpp, sss.cpp).  One thread block of kBlock threads per query (Barrientos
// et al.'s Algorithm 1), with shared memory that does not grow with the index:
//
//   List of Clusters  the centers in chunks of kBlock in creation order: their distances (a thread
//                     per center for strings, a warp per center for vectors), the centers within
//                     the radius, the chunk's first containing center (d < r_c - r, which ends
//                     the scan), then the buckets within r_c + r of the chunk's centers up to that
//                     one, flattened into one list that the block scans in tiles of kBlock
//                     members (a bucket of 32 words does not leave 96 threads idle);
//   SSS pivot table   the query's pivot distances (at most VS_SSS_MAX_PIVOTS, in shared memory),
//                     then the rows in tiles of kPivotRows x kBlock: a thread per row runs the
//                     discard test over the table (stored pivot-major, so a warp reads consecutive
//                     rows), the survivors are compacted and compared (a thread or a warp each).
//                     Edit distances are small integers: their table holds bytes, 4 pivots to a
//                     32-bit word, tested 4 at a time (SIMD byte differences), a quarter of the
//                     float table's bytes (the discard pass is the whole cost at small radii);
//   flat              every object, in tiles (the brute force the indexes are measured against).
//
// Distances: strings by Myers' bit-parallel algorithm with the query's match masks in shared
// memory (queries of at most VS_EDIT_MYERS_MAX code points; the indexed strings may be longer),
// bounded by the radius as the host's; vectors by the engine's exact distance, a warp each
// (utils/exact_warp.cuh: bit for bit the host's).  The pruning tests are the host's, with its
// slack for float distances.
//
// Range: a counting pass, offsets, a writing pass (every match written, none dropped), the matches
// of each query then sorted by id on the host.  kNN: a shrinking radius -- the k best so far, by
// (distance, id), in shared memory (up to VS_METRIC_GPU_MAX_K); the candidates a tile finds within
// the current radius are staged, sorted and merged in by rank, and the radius becomes the k-th
// distance.  Every object within the final k-th distance is examined (a test only prunes with a
// radius at least that large), so the answer is the unique k smallest by (distance, id), the host's.
//
// The builds' distances: one launch, a thread per string or a warp per vector.
#include "cuda/impl/metric_kernels.cuh"

#include "cuda/utils/error.cuh"
#include "cuda/utils/exact_warp.cuh"
#include "cuda/utils/launch.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace vs::cuda {
namespace {

constexpr int kBlock = 128;
constexpr int kWarps = kBlock / 32;
constexpr int kTile = kBlock;     // candidates a tile examines
constexpr int kPivotRows = 4;     // pivot table: rows per thread in a discard tile

// Dynamic shared memory of a block (8-byte arrays first).
struct Layout
{
    int k = 0, npiv = 0;
    size_t low = 0, high_mask = 0, cdist = 0, bpre = 0, dq = 0, best_d = 0, best_id = 0,
           spare_d = 0, spare_id = 0, st_d = 0, st_id = 0, st2_d = 0, st2_id = 0, high = 0,
           dq8 = 0, surv = 0, bytes = 0;

    Layout(int k_, int npiv_) : k(k_), npiv(npiv_)
    {
        size_t o = 0;
        auto take = [&o](size_t b) {
            size_t at = o;
            o += (b + 7) / 8 * 8;
            return at;
        };
        low = take(8 * 256);
        high_mask = take(8 * VS_EDIT_MYERS_MAX);
        cdist = take(8 * kBlock);
        bpre = take(8 * (kBlock + 1));
        dq = take(8 * static_cast<size_t>(std::max(npiv, 1)));
        if (k > 0)
        {
            best_d = take(8 * static_cast<size_t>(k));
            best_id = take(8 * static_cast<size_t>(k));
            spare_d = take(8 * static_cast<size_t>(k));
            spare_id = take(8 * static_cast<size_t>(k));
            st_d = take(8 * kTile);
            st_id = take(8 * kTile);
            st2_d = take(8 * kTile);
            st2_id = take(8 * kTile);
        }
        high = take(4 * VS_EDIT_MYERS_MAX);
        dq8 = take(4 * static_cast<size_t>(std::max((npiv + 3) / 4, 1)));
        surv = take(4 * kBlock * kPivotRows);
        bytes = o;
    }
};

// Myers' bit-parallel edit distance of the pattern (masks in shared memory) against t; exact when
// <= bound, else some value > bound (as vs_edit_pattern_distance).
__device__ unsigned myers(const uint64_t *low, const uint32_t *high, const uint64_t *high_mask,
                          int nhigh, int m, const uint32_t *t, unsigned nt, unsigned bound)
{
    unsigned diff = m > static_cast<int>(nt) ? m - nt : nt - m;
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

// The match masks of a pattern of m <= VS_EDIT_MYERS_MAX code points, by one thread: low[c] for
// c < 256 (zeroed by the caller), the others as high[k] with high_mask[k]; returns their count.
__device__ int myers_masks(const uint32_t *p, int m, uint64_t *low, uint32_t *high,
                           uint64_t *high_mask)
{
    int nh = 0;
    for (int i = 0; i < m; i++)
    {
        uint32_t c = p[i];
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
    return nh;
}

__device__ __forceinline__ unsigned bound_of(double b)
{
    if (b < 0)
        return 0;
    if (b >= 4e9)
        return 0xFFFFFFFEu;
    return static_cast<unsigned>(floor(b));
}

// (distance, id) order of results.
__device__ __forceinline__ bool before(double da, int64_t ia, double db, int64_t ib)
{
    return da < db || (da == db && ia < ib);
}

// The base a result reports (metric.h): L2 the squared sum, which d = sqrt((double) f) came from.
__device__ __forceinline__ float base_of(int strings, vs_metric m, double d)
{
    return !strings && m == VS_METRIC_L2 ? static_cast<float>(d * d) : static_cast<float>(d);
}

template <int Type, int Mode>
__global__ void __launch_bounds__(kBlock)
    metric_kernel(DevIndex ix, DevQueries qs, double radius, Layout L,
                  const uint64_t *__restrict__ out_offsets, uint64_t *__restrict__ counts,
                  int64_t *__restrict__ out_ids, float *__restrict__ out_dists)
{
    extern __shared__ __align__(16) unsigned char smem[];
    uint64_t *low = reinterpret_cast<uint64_t *>(smem + L.low);
    uint64_t *high_mask = reinterpret_cast<uint64_t *>(smem + L.high_mask);
    uint32_t *high = reinterpret_cast<uint32_t *>(smem + L.high);
    double *cdist = reinterpret_cast<double *>(smem + L.cdist);
    uint64_t *bpre = reinterpret_cast<uint64_t *>(smem + L.bpre);
    double *dq = reinterpret_cast<double *>(smem + L.dq);
    uint32_t *dq8 = reinterpret_cast<uint32_t *>(smem + L.dq8); // strings: dq as table8's bytes
    uint32_t *surv = reinterpret_cast<uint32_t *>(smem + L.surv);
    double *best_d = reinterpret_cast<double *>(smem + L.best_d);
    int64_t *best_id = reinterpret_cast<int64_t *>(smem + L.best_id);
    double *spare_d = reinterpret_cast<double *>(smem + L.spare_d);
    int64_t *spare_id = reinterpret_cast<int64_t *>(smem + L.spare_id);
    double *st_d = reinterpret_cast<double *>(smem + L.st_d);
    int64_t *st_id = reinterpret_cast<int64_t *>(smem + L.st_id);
    double *st2_d = reinterpret_cast<double *>(smem + L.st2_d);
    int64_t *st2_id = reinterpret_cast<int64_t *>(smem + L.st2_id);
    __shared__ int nhigh, stop, flag, nbest, nstage, nsurv;
    __shared__ unsigned long long found, total;
    __shared__ double rad; // the search radius: fixed (range) or the k-th best so far (kNN)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int strings = ix.objs.strings;
    const vs_metric metric = ix.objs.metric;
    const int dim = ix.objs.dim;
    const int K = L.k;

    for (size_t q = blockIdx.x; q < qs.n; q += gridDim.x)
    {
        const float *qv = nullptr;
        int m = 0;
        if (strings)
        {
            const uint32_t *qc = qs.chars + qs.offsets[q];
            m = static_cast<int>(qs.offsets[q + 1] - qs.offsets[q]);
            for (int i = tid; i < 256; i += kBlock)
                low[i] = 0;
            __syncthreads();
            if (tid == 0)
                nhigh = myers_masks(qc, m, low, high, high_mask);
        }
        else
            qv = qs.vectors + q * static_cast<size_t>(dim);
        if (tid == 0)
        {
            found = 0;
            nbest = 0;
            nstage = 0;
            rad = Mode == kKnn ? INFINITY : radius;
        }
        __syncthreads();

        // distance to object i of a space: strings by one thread, vectors by a warp (all lanes)
        auto string_distance = [&](const DevSpace &s, size_t i, double bound) -> double {
            const uint32_t *t = s.chars + s.offsets[i];
            unsigned nt = static_cast<unsigned>(s.offsets[i + 1] - s.offsets[i]);
            return static_cast<double>(
                myers(low, high, high_mask, nhigh, m, t, nt, bound_of(bound)));
        };
        auto vector_distance = [&](const DevSpace &s, size_t i) -> double {
            double base = warp_exact_base(metric == VS_METRIC_L2 ? VS_METRIC_L2SQ : metric, qv,
                                          s.vectors + i * static_cast<size_t>(dim), dim, lane);
            float f = static_cast<float>(base); // the exact distance's one rounding
            return metric == VS_METRIC_L2 ? sqrt(static_cast<double>(f))
                                          : static_cast<double>(f);
        };
        auto slack = [&](double magnitude) -> double {
            return strings ? 0.0 : VS_LC_SLACK * magnitude;
        };
        // a candidate within the radius, from one thread
        auto offer = [&](int64_t id, double d) {
            if (id < 0 || !(d <= rad))
                return;
            if (Mode == kKnn)
            {
                int s = atomicAdd(&nstage, 1);
                st_d[s] = d;
                st_id[s] = id;
            }
            else
            {
                unsigned long long pos = atomicAdd(&found, 1ull);
                if (Mode == kWrite)
                {
                    out_ids[out_offsets[q] + pos] = id;
                    out_dists[out_offsets[q] + pos] = base_of(strings, metric, d);
                }
            }
        };
        // after a tile, by the whole block: kNN merges the staged candidates into the k best
        auto flush = [&]() {
            __syncthreads();
            if (Mode != kKnn || nstage == 0)
                return;
            const int ms = nstage, n = nbest;
            for (int j = tid; j < ms; j += kBlock)
            {
                int r = 0;
                for (int t = 0; t < ms; t++)
                    r += before(st_d[t], st_id[t], st_d[j], st_id[j]) ||
                         (st_d[t] == st_d[j] && st_id[t] == st_id[j] && t < j);
                st2_d[r] = st_d[j];
                st2_id[r] = st_id[j];
            }
            __syncthreads();
            for (int j = tid; j < ms; j += kBlock)
            {
                int lo = 0, hi = n; // best entries before st2[j]
                while (lo < hi)
                {
                    int mid = (lo + hi) / 2;
                    if (before(best_d[mid], best_id[mid], st2_d[j], st2_id[j]))
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (j + lo < K)
                {
                    spare_d[j + lo] = st2_d[j];
                    spare_id[j + lo] = st2_id[j];
                }
            }
            for (int i = tid; i < n; i += kBlock)
            {
                int lo = 0, hi = ms; // staged entries not after best[i]
                while (lo < hi)
                {
                    int mid = (lo + hi) / 2;
                    if (!before(best_d[i], best_id[i], st2_d[mid], st2_id[mid]))
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (i + lo < K)
                {
                    spare_d[i + lo] = best_d[i];
                    spare_id[i + lo] = best_id[i];
                }
            }
            __syncthreads();
            const int nn = min(K, n + ms);
            for (int i = tid; i < nn; i += kBlock)
            {
                best_d[i] = spare_d[i];
                best_id[i] = spare_id[i];
            }
            __syncthreads();
            if (tid == 0)
            {
                nbest = nn;
                nstage = 0;
                rad = nn < K ? INFINITY : best_d[K - 1];
            }
            __syncthreads();
        };
        // examines candidates [0, count) of a list (object = at(i)) in tiles
        auto scan = [&](unsigned long long count, auto at) {
            for (unsigned long long t0 = 0; t0 < count; t0 += kTile)
            {
                if (strings)
                {
                    unsigned long long i = t0 + tid;
                    if (i < count)
                    {
                        size_t o = at(i);
                        offer(ix.objs.ids[o], string_distance(ix.objs, o, rad));
                    }
                }
                else
                    for (int j = warp; j < kTile; j += kWarps)
                    {
                        unsigned long long i = t0 + j;
                        if (i >= count)
                            break;
                        size_t o = at(i);
                        double d = vector_distance(ix.objs, o);
                        if (lane == 0)
                            offer(ix.objs.ids[o], d);
                    }
                flush();
            }
        };

        if (Type == MetricIndex::kFlat)
            scan(ix.objs.n, [](unsigned long long i) { return static_cast<size_t>(i); });
        else if (Type == MetricIndex::kList)
        {
            const size_t nc = ix.aux.n;
            for (size_t base = 0; base < nc; base += kBlock)
            {
                const int chunk = static_cast<int>(nc - base < kBlock ? nc - base : kBlock);
                // 1. the chunk's center distances, bounded by r_c + r
                if (strings)
                {
                    if (tid < chunk)
                        cdist[tid] =
                            string_distance(ix.aux, base + tid, ix.radii[base + tid] + rad);
                }
                else
                    for (int c = warp; c < chunk; c += kWarps)
                    {
                        double d = vector_distance(ix.aux, base + c);
                        if (lane == 0)
                            cdist[c] = d;
                    }
                __syncthreads();
                // 2. centers within the radius
                if (tid < chunk)
                    offer(ix.aux.ids[base + tid], cdist[tid]);
                flush();
                // 3. the first containing center ends the scan
                if (tid == 0)
                    stop = chunk;
                __syncthreads();
                const double r = rad;
                if (tid < chunk)
                {
                    double d = cdist[tid], rc = ix.radii[base + tid];
                    if (d < rc - r - slack(rc + r + d))
                        atomicMin(&stop, tid);
                }
                __syncthreads();
                const int last = stop < chunk ? stop : chunk - 1;
                // 4. the buckets that may hold answers, flattened
                if (tid < chunk)
                {
                    double d = cdist[tid], rc = ix.radii[base + tid];
                    uint64_t size = 0;
                    if (tid <= last && d <= rc + r + slack(rc + r + d))
                        size = ix.bucket_offsets[base + tid + 1] - ix.bucket_offsets[base + tid];
                    bpre[tid + 1] = size;
                }
                __syncthreads();
                if (tid == 0)
                {
                    bpre[0] = 0;
                    for (int c = 0; c < chunk; c++)
                        bpre[c + 1] += bpre[c];
                    total = bpre[chunk];
                }
                __syncthreads();
                scan(total, [&](unsigned long long i) -> size_t {
                    int lo = 0, hi = chunk; // the last c with bpre[c] <= i
                    while (hi - lo > 1)
                    {
                        int mid = (lo + hi) / 2;
                        if (bpre[mid] <= i)
                            lo = mid;
                        else
                            hi = mid;
                    }
                    return static_cast<size_t>(ix.bucket_offsets[base + lo] + (i - bpre[lo]));
                });
                // 5. stop after a containing center (kNN: with the radius the buckets left)
                if (tid == 0)
                    flag = 0;
                __syncthreads();
                const double r2 = rad;
                if (tid <= last)
                {
                    double d = cdist[tid], rc = ix.radii[base + tid];
                    if (d < rc - r2 - slack(rc + r2 + d))
                        flag = 1;
                }
                __syncthreads();
                if (flag)
                    break;
            }
        }
        else
        {
            const int np = static_cast<int>(ix.aux.n), ngroups = (np + 3) / 4;
            const size_t n = ix.objs.n;
            if (strings)
                for (int j = tid; j < np; j += kBlock)
                    dq[j] = string_distance(ix.aux, j, INFINITY);
            else
                for (int j = warp; j < np; j += kWarps)
                {
                    double d = vector_distance(ix.aux, j);
                    if (lane == 0)
                        dq[j] = d;
                }
            __syncthreads();
            if (strings)
                for (int g = tid; g < ngroups; g += kBlock)
                {
                    uint32_t w = 0;
                    for (int b = 0; b < 4 && 4 * g + b < np; b++)
                        w |= static_cast<uint32_t>(fmin(dq[4 * g + b], 255.0)) << (8 * b);
                    dq8[g] = w;
                }
            __syncthreads();
            // the discard test of row i at radius r: false when a pivot proves d(q, i) > r.
            // Strings: |min(a, 255) - min(b, 255)| <= |a - b|, so a clamped difference above r
            // is a true one; integer distances exceed r exactly when they exceed floor(r).
            auto keep_row = [&](size_t i, double r) -> bool {
                if (strings)
                {
                    if (r < 0)
                        return false;
                    const uint32_t over = r >= 255.0
                                              ? 0xFFFFFFFFu // no byte difference exceeds it
                                              : 0x01010101u * static_cast<uint32_t>(floor(r));
                    for (int g = 0; g < ngroups; g++)
                        if (__vcmpgtu4(__vabsdiffu4(ix.table8[static_cast<size_t>(g) * n + i],
                                                    dq8[g]),
                                       over))
                            return false;
                    return true;
                }
                for (int j = 0; j < np; j++)
                {
                    double px = static_cast<double>(ix.table[static_cast<size_t>(j) * n + i]);
                    double diff = fabs(px - dq[j]);
                    if (diff > r + VS_LC_SLACK * 2.0 * fmax(r, fmax(px, dq[j])))
                        return false;
                }
                return true;
            };
            for (size_t t0 = 0; t0 < n; t0 += static_cast<size_t>(kBlock) * kPivotRows)
            {
                if (tid == 0)
                    nsurv = 0;
                __syncthreads();
                const double r = rad;
                for (int k = 0; k < kPivotRows; k++)
                {
                    const size_t i = t0 + static_cast<size_t>(k) * kBlock + tid;
                    if (i < n && keep_row(i, r))
                        surv[atomicAdd(&nsurv, 1)] = static_cast<uint32_t>(i - t0);
                }
                __syncthreads();
                // at most kBlock candidates between merges (kNN stages kTile)
                const int ns = nsurv;
                for (int s0 = 0; s0 < ns; s0 += kBlock)
                {
                    const int s1 = min(ns, s0 + kBlock);
                    if (strings)
                    {
                        if (s0 + tid < s1)
                        {
                            size_t o = t0 + surv[s0 + tid];
                            offer(ix.objs.ids[o], string_distance(ix.objs, o, r));
                        }
                    }
                    else
                        for (int s = s0 + warp; s < s1; s += kWarps)
                        {
                            size_t o = t0 + surv[s];
                            double d = vector_distance(ix.objs, o);
                            if (lane == 0)
                                offer(ix.objs.ids[o], d);
                        }
                    flush();
                }
            }
        }

        if (Mode == kCount && tid == 0)
            counts[q] = found;
        if (Mode == kKnn)
        {
            const size_t out = q * static_cast<size_t>(K);
            for (int i = tid; i < K; i += kBlock)
            {
                if (i < nbest)
                {
                    out_ids[out + i] = best_id[i];
                    out_dists[out + i] = base_of(strings, metric, best_d[i]);
                }
                else
                {
                    out_ids[out + i] = -1;
                    out_dists[out + i] = INFINITY;
                }
            }
            if (tid == 0)
                counts[q] = static_cast<uint64_t>(nbest);
        }
        __syncthreads();
    }
}

// The builds' distances (MetricBackend::distances): out[i] = d(object from, object rows[i]) (rows
// NULL: i) of a flat object, unbounded.  Strings a thread each, `from` the pattern (at most
// VS_EDIT_MYERS_MAX code points; its masks built by each block), vectors a warp each.
__global__ void __launch_bounds__(kBlock)
    build_distances_kernel(DevSpace s, size_t from, const uint32_t *__restrict__ rows, size_t n,
                           double *__restrict__ out)
{
    __shared__ uint64_t low[256];
    __shared__ uint64_t high_mask[VS_EDIT_MYERS_MAX];
    __shared__ uint32_t high[VS_EDIT_MYERS_MAX];
    __shared__ int nhigh;
    const int tid = threadIdx.x;
    if (s.strings)
    {
        const uint32_t *p = s.chars + s.offsets[from];
        const int m = static_cast<int>(s.offsets[from + 1] - s.offsets[from]);
        for (int i = tid; i < 256; i += kBlock)
            low[i] = 0;
        __syncthreads();
        if (tid == 0)
            nhigh = myers_masks(p, m, low, high, high_mask);
        __syncthreads();
        const size_t stride = static_cast<size_t>(gridDim.x) * kBlock;
        for (size_t i = static_cast<size_t>(blockIdx.x) * kBlock + tid; i < n; i += stride)
        {
            const size_t r = rows ? rows[i] : i;
            const unsigned nt = static_cast<unsigned>(s.offsets[r + 1] - s.offsets[r]);
            out[i] = static_cast<double>(
                myers(low, high, high_mask, nhigh, m, s.chars + s.offsets[r], nt, 0xFFFFFFFEu));
        }
        return;
    }
    const int lane = tid & 31;
    const size_t dim = static_cast<size_t>(s.dim);
    const float *x = s.vectors + from * dim;
    const size_t stride = static_cast<size_t>(gridDim.x) * kWarps;
    for (size_t i = static_cast<size_t>(blockIdx.x) * kWarps + (tid >> 5); i < n; i += stride)
    {
        const size_t r = rows ? rows[i] : i;
        const double base = warp_exact_base(s.metric == VS_METRIC_L2 ? VS_METRIC_L2SQ : s.metric,
                                            x, s.vectors + r * dim, s.dim, lane);
        const float f = static_cast<float>(base); // the exact distance's one rounding
        if (lane == 0)
            out[i] = s.metric == VS_METRIC_L2 ? sqrt(static_cast<double>(f))
                                              : static_cast<double>(f);
    }
}

} // namespace

template <int Mode>
void launch_metric(DeviceContext &dev, MetricIndex::Type type, const DevIndex &view,
                   const DevQueries &q, double radius, int k, const uint64_t *out_offsets,
                   uint64_t *counts, int64_t *ids, float *dists)
{
    const Layout L(Mode == kKnn ? k : 0,
                   type == MetricIndex::kPivots ? static_cast<int>(view.aux.n) : 0);
    const void *kernel = nullptr;
    switch (type)
    {
    case MetricIndex::kList:
        kernel = reinterpret_cast<const void *>(&metric_kernel<MetricIndex::kList, Mode>);
        break;
    case MetricIndex::kPivots:
        kernel = reinterpret_cast<const void *>(&metric_kernel<MetricIndex::kPivots, Mode>);
        break;
    case MetricIndex::kFlat:
        kernel = reinterpret_cast<const void *>(&metric_kernel<MetricIndex::kFlat, Mode>);
        break;
    }
    const size_t smem = L.bytes;
    if (smem + 1024 > dev.smem_optin) // 1 KB for the kernel's static part (a few counters)
        throw Error(VS_UNSUPPORTED, "the metric search needs " + std::to_string(smem) +
                                        " bytes of shared memory");
    set_smem(kernel, smem);
    const unsigned grid = static_cast<unsigned>(std::min<size_t>(q.n, 65535));
    DevIndex ix = view;
    DevQueries qs = q;
    Layout lay = L;
    void *args[] = {&ix, &qs, &radius, &lay, &out_offsets, &counts, &ids, &dists};
    VS_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(grid), dim3(kBlock), args, smem, dev.main));
}

template void launch_metric<kCount>(DeviceContext &, MetricIndex::Type, const DevIndex &,
                                    const DevQueries &, double, int, const uint64_t *, uint64_t *,
                                    int64_t *, float *);
template void launch_metric<kWrite>(DeviceContext &, MetricIndex::Type, const DevIndex &,
                                    const DevQueries &, double, int, const uint64_t *, uint64_t *,
                                    int64_t *, float *);
template void launch_metric<kKnn>(DeviceContext &, MetricIndex::Type, const DevIndex &,
                                  const DevQueries &, double, int, const uint64_t *, uint64_t *,
                                  int64_t *, float *);

void launch_build_distances(cudaStream_t s, const DevSpace &objs, size_t from,
                            const uint32_t *rows, size_t n, double *out)
{
    const size_t per_block = objs.strings ? kBlock : kWarps;
    const unsigned grid = static_cast<unsigned>(
        std::min<size_t>((n + per_block - 1) / per_block, size_t{1} << 16));
    build_distances_kernel<<<grid, kBlock, 0, s>>>(objs, from, rows, n, out);
}

} // namespace vs::cuda
