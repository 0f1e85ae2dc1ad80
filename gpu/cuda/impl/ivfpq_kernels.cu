// IVF-PQ kernels: exact coarse distances (list ranking and assignment), residual PQ encoding,
// the list scans (lookup table in shared memory per (query, probe), estimates summed over the
// m tables in order, engine/ivfpq_math.h): writing every candidate, or fused with a per-list
// WarpTopK selection over the id-sorted search layout; and the per-query top-k over sorted
// candidate keys with ties resolved by (id, scan position).  The arithmetic is the CPU
// backend's, so both return the same candidates.
#include "cuda/impl/ivfpq_select.cuh"
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/exact_warp.cuh"
#include "cuda/utils/select.cuh"
#include "engine/ivfpq_math.h"

namespace vs::cuda {

namespace {

int grid_for(size_t items, int threads, size_t cap = 65535u * 8)
{
    size_t b = (items + threads - 1) / threads;
    if (b > cap)
        b = cap;
    return b < 1 ? 1 : static_cast<int>(b);
}

// keys[q * nlist + l] = (exact coarse distance, l): one warp per pair.
__global__ void coarse_keys_kernel(const float *q, int nq, const float *centroids, int nlist,
                                   int d, vs_metric cm, uint64_t *keys)
{
    const int lane = threadIdx.x & 31;
    const size_t pairs = static_cast<size_t>(nq) * nlist;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < pairs;
         i += nwarps)
    {
        size_t qi = i / nlist, l = i % nlist;
        double b = warp_exact_base(cm, q + qi * d, centroids + l * d, d, lane);
        if (lane == 0)
            keys[i] = make_key(base_to_output(cm, b), static_cast<uint32_t>(l));
    }
}

// lists[i] = nearest list of vector i (ties: smaller list): one warp per vector.
__global__ void assign_kernel(const float *x, size_t n, const float *centroids, int nlist, int d,
                              vs_metric cm, int32_t *lists)
{
    const int lane = threadIdx.x & 31;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < n;
         i += nwarps)
    {
        uint64_t best = kNoKey;
        for (int l = 0; l < nlist; l++)
        {
            double b = warp_exact_base(cm, x + i * d, centroids + static_cast<size_t>(l) * d, d, lane);
            uint64_t key = make_key(base_to_output(cm, b), static_cast<uint32_t>(l));
            best = key < best ? key : best;
        }
        if (lane == 0)
            lists[i] = static_cast<int32_t>(key_row(best));
    }
}

// One thread per (vector, code byte): the nearest codeword of the byte's sub-quantizers to the
// residual sub-vector (ties: smaller codeword).
__global__ void pq_encode_kernel(const float *x, size_t n, const float *centroids,
                                 const int32_t *lists, const float *codebooks, int d, int m,
                                 int nbits, int code_size, uint8_t *codes)
{
    const int dsub = d / m, ksub = 1 << nbits;
    const int per_byte = nbits == 8 ? 1 : 2;
    const size_t items = n * code_size;
    for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < items;
         t += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        // Consecutive threads take consecutive vectors of one byte: codeword reads broadcast.
        const size_t i = t % n;
        const int byte = static_cast<int>(t / n);
        const float *xi = x + i * d;
        const float *ci = centroids + static_cast<size_t>(lists[i]) * d;
        uint8_t out = 0;
        for (int h = 0; h < per_byte; h++)
        {
            const int j = byte * per_byte + h;
            if (j >= m)
                break;
            int arg = 0;
            float best = 0.0f;
            for (int c = 0; c < ksub; c++)
            {
                const float *cw = codebooks + (static_cast<size_t>(j) * ksub + c) * dsub;
                // pq_l2 of the residual sub-vector (residual formed as the CPU forms it).
                float s = 0.0f;
                for (int u = 0; u < dsub; u++)
                {
                    float e = pq_sub(pq_sub(xi[j * dsub + u], ci[j * dsub + u]), cw[u]);
                    s = pq_add(s, pq_mul(e, e));
                }
                if (c == 0 || s < best)
                {
                    best = s;
                    arg = c;
                }
            }
            out = static_cast<uint8_t>(out | (nbits == 8 ? arg : (arg << (4 * h))));
        }
        codes[i * code_size + byte] = out;
    }
}

// One block per (query, probe): the lookup table in shared memory, then the list's entries.
__global__ void pq_scan_kernel(PqScanArgs a)
{
    extern __shared__ float smem[];
    const int ksub = 1 << a.nbits, dsub = a.d / a.m;
    float *lut = smem;                         // m x ksub
    float *qv = smem + static_cast<size_t>(a.m) * ksub; // d: residual (L2) or query (IP)
    const PqPair p = a.pairs[blockIdx.x];
    if (p.list < 0)
        return;
    const bool inner = pq_inner_product(a.metric);
    const float *q = a.queries + static_cast<size_t>(p.query) * a.d;
    const float *c = a.centroids + static_cast<size_t>(p.list) * a.d;
    for (int t = threadIdx.x; t < a.d; t += blockDim.x)
        qv[t] = inner ? q[t] : pq_sub(q[t], c[t]);
    __syncthreads();
    for (int e = threadIdx.x; e < a.m * ksub; e += blockDim.x)
    {
        const int j = e / ksub;
        const float *cw = a.codebooks + static_cast<size_t>(e) * dsub;
        lut[e] = inner ? pq_dot(qv + j * dsub, cw, dsub) : pq_l2(qv + j * dsub, cw, dsub);
    }
    __syncthreads();
    const uint8_t *codes = a.list_codes[p.list];
    const int64_t *ids = a.list_ids[p.list];
    const uint32_t len = a.list_len[p.list];
    for (uint32_t e = threadIdx.x; e < len; e += blockDim.x)
    {
        const uint8_t *code = codes + static_cast<size_t>(e) * a.code_size;
        float acc = p.term;
        for (int j = 0; j < a.m; j++)
            acc = pq_add(acc, lut[j * ksub + pq_code_get(code, j, a.nbits)]);
        const size_t at = p.out + e;
        a.keys[at] = make_key(pq_finish(a.metric, acc), p.pos0 + e);
        a.ids[at] = ids[e];
    }
}

// Fused scan + selection: one block per (query, probe), nwarps warps.  The lookup table is
// built in shared memory as in pq_scan_kernel; warp w then takes the groups of 32 entries
// w, w + nwarps, ... of the list's search layout (lane t = entry 32g + t, codes read as uint4,
// coalesced) and feeds the keys (estimate, slot) to its WarpTopK selector of kp = min(k, len);
// warp 0 merges the other warps' sorted lists into its own and writes the pair's kp best with
// their ids.  Slots are in (id, append position) order, so within a list (estimate, slot) is
// (estimate, id) order and a pair's kp best contain every entry of the list that belongs to the
// query's k best (the per-query sort + pq_topk_kernel resolve ties across lists by id).
template <int NBITS> __global__ void pq_scan_select_kernel(PqSelectArgs a)
{
    extern __shared__ __align__(16) unsigned char pq_sel_smem[];
    __shared__ const uint64_t *tops[8];
    constexpr int ksub = 1 << NBITS, per_word = 32 / NBITS;
    const int dsub = a.d / a.m;
    const int bcap = warp_topk_bcap(a.k);
    const int stride = warp_topk_words(a.k, bcap);
    uint64_t *sel = reinterpret_cast<uint64_t *>(pq_sel_smem);
    float *lut = reinterpret_cast<float *>(sel + static_cast<size_t>(a.nwarps) * stride);
    float *qv = lut + static_cast<size_t>(a.m) * ksub;
    const PqPair p = a.pairs[blockIdx.x];
    if (p.list < 0)
        return;
    const bool inner = pq_inner_product(a.metric);
    const float *q = a.queries + static_cast<size_t>(p.query) * a.d;
    const float *c = a.centroids + static_cast<size_t>(p.list) * a.d;
    for (int t = threadIdx.x; t < a.d; t += blockDim.x)
        qv[t] = inner ? q[t] : pq_sub(q[t], c[t]);
    __syncthreads();
    for (int e = threadIdx.x; e < a.m * ksub; e += blockDim.x)
    {
        const int j = e / ksub;
        const float *cw = a.codebooks + static_cast<size_t>(e) * dsub;
        lut[e] = inner ? pq_dot(qv + j * dsub, cw, dsub) : pq_l2(qv + j * dsub, cw, dsub);
    }
    __syncthreads();
    const uint32_t len = a.list_len[p.list];
    const int kp = static_cast<int>(len < static_cast<uint32_t>(a.k) ? len : a.k);
    if (kp == 0)
        return; // (the host makes no pairs of empty lists)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    WarpTopK t;
    t.init(sel + static_cast<size_t>(warp) * stride, kp, bcap, kNoKey, lane);
    const uint4 *codes4 = a.list_codes4[p.list];
    const uint32_t groups = (len + 31) / 32;
    for (uint32_t g = warp; g < groups; g += a.nwarps)
    {
        const uint32_t e = g * 32 + lane;
        const uint4 *cp = codes4 + static_cast<size_t>(g) * a.wq * 32 + lane;
        float acc = p.term;
        int j = 0;
        for (int w = 0; w < a.wq; w++)
        {
            const uint4 v = cp[static_cast<size_t>(w) * 32];
            const uint32_t word[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int h = 0; h < 4; h++)
#pragma unroll
                for (int n = 0; n < per_word; n++)
                {
                    // Sub-quantizers in order j = 0 .. m-1 (byte j, or nibble j: low first).
                    if (j < a.m)
                        acc = pq_add(acc, lut[j * ksub + ((word[h] >> (n * NBITS)) & (ksub - 1))]);
                    j++;
                }
        }
        t.add(e < len ? make_key(pq_finish(a.metric, acc), e) : kNoKey, lane);
    }
    t.flush(lane);
    if (lane == 0)
        tops[warp] = t.top;
    __syncthreads();
    if (warp != 0)
        return;
    for (int w = 1; w < a.nwarps; w++)
        t.add_sorted(tops[w], 0, kp, lane);
    t.flush(lane);
    const int64_t *ids = a.list_sorted_ids[p.list];
    for (int i = lane; i < kp; i += 32)
    {
        const uint64_t key = t.top[i];
        a.keys[p.out + i] = (key & 0xFFFFFFFF00000000ull) | (p.pos0 + static_cast<uint32_t>(i));
        a.ids[p.out + i] = ids[key_row(key)];
    }
}

// codes4 of a list's search layout: one thread per (entry slot, 16-byte word).
__global__ void pq_interleave_kernel(const uint8_t *raw, int code_size, const uint32_t *perm,
                                     uint32_t len, int wq, uint4 *codes4)
{
    const size_t slots = static_cast<size_t>((len + 31) / 32) * 32;
    const size_t items = slots * wq;
    for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < items;
         t += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        const size_t e = t / wq;
        const int w = static_cast<int>(t % wq);
        uint32_t word[4] = {0, 0, 0, 0};
        if (e < len)
        {
            const uint8_t *code = raw + static_cast<size_t>(perm ? perm[e] : e) * code_size;
            for (int b = 0; b < 16; b++)
            {
                const int at = w * 16 + b;
                if (at < code_size)
                    word[b >> 2] |= static_cast<uint32_t>(code[at]) << (8 * (b & 3));
            }
        }
        const size_t g = e / 32, lane = e % 32;
        codes4[(g * wq + w) * 32 + lane] = make_uint4(word[0], word[1], word[2], word[3]);
    }
}

// (id, scan position) order inside a run of equal estimates.
__device__ __forceinline__ bool id_before(int64_t ia, uint32_t pa, int64_t ib, uint32_t pb)
{
    return ia != ib ? ia < ib : pa < pb;
}

// One block per query: the sorted keys of its segment (estimate, scan position) become the k
// best by (estimate, id, scan position).  Only the run of equal estimates at rank k - 1 can
// reorder across the cut, so it is taken whole; each element's rank within its run is counted.
__global__ void pq_topk_kernel(const uint64_t *sorted, const int64_t *seg, const int64_t *cand_ids,
                               int nq, int64_t k, int64_t *out_ids, float *out_d,
                               int64_t *out_counts)
{
    const int q = blockIdx.x;
    if (q >= nq)
        return;
    const int64_t s0 = seg[q], c = seg[q + 1] - s0;
    const int64_t kk = c < k ? c : k;
    const uint64_t *keys = sorted + s0;
    __shared__ int64_t run_end;
    if (threadIdx.x == 0)
    {
        int64_t b = kk;
        if (kk > 0)
        {
            const uint32_t last = static_cast<uint32_t>(keys[kk - 1] >> 32);
            while (b < c && static_cast<uint32_t>(keys[b] >> 32) == last)
                b++;
        }
        run_end = b;
        if (out_counts)
            out_counts[q] = kk;
    }
    __syncthreads();
    const int64_t b = run_end;
    for (int64_t i = threadIdx.x; i < b; i += blockDim.x)
    {
        const uint32_t hi = static_cast<uint32_t>(keys[i] >> 32);
        int64_t ra = i, rb = i + 1;
        while (ra > 0 && static_cast<uint32_t>(keys[ra - 1] >> 32) == hi)
            ra--;
        while (rb < b && static_cast<uint32_t>(keys[rb] >> 32) == hi)
            rb++;
        const int64_t id = cand_ids[s0 + key_row(keys[i])];
        const uint32_t pos = key_row(keys[i]);
        int64_t rank = ra;
        for (int64_t j = ra; j < rb; j++)
            if (j != i && id_before(cand_ids[s0 + key_row(keys[j])], key_row(keys[j]), id, pos))
                rank++;
        if (rank < kk)
        {
            out_ids[q * k + rank] = id;
            out_d[q * k + rank] = key_float(hi);
        }
    }
    for (int64_t i = kk + threadIdx.x; i < k; i += blockDim.x)
    {
        out_ids[q * k + i] = -1;
        out_d[q * k + i] = INFINITY;
    }
}

// probes[q * np + i] and coarse[q * np + i] from the sorted coarse keys of each query.
__global__ void probe_window_kernel(const uint64_t *sorted, int nq, int nlist, int first, int np,
                                    int32_t *probes, float *coarse)
{
    const size_t items = static_cast<size_t>(nq) * np;
    for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < items;
         t += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        const size_t qi = t / np, i = t % np;
        const uint64_t key = sorted[qi * nlist + first + i];
        probes[t] = static_cast<int32_t>(key_row(key));
        coarse[t] = key_dist(key);
    }
}

// Range: flags of the candidates within the radius (NaN never matches).
__global__ void pq_range_flags_kernel(const uint64_t *keys, size_t n, float radius, uint8_t *flags)
{
    for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
         t += static_cast<size_t>(gridDim.x) * blockDim.x)
        flags[t] = key_dist(keys[t]) <= radius ? 1 : 0;
}

__global__ void pq_range_gather_kernel(const uint32_t *sel, size_t n, const uint64_t *keys,
                                       const int64_t *cand_ids, int64_t *ids, float *dists,
                                       uint32_t *pos)
{
    for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
         t += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        const uint32_t s = sel[t];
        ids[t] = cand_ids[s];
        dists[t] = key_dist(keys[s]);
        pos[t] = key_row(keys[s]);
    }
}

} // namespace

void launch_coarse_keys(const float *q, int nq, const float *centroids, int nlist, int d,
                        vs_metric cm, uint64_t *keys, cudaStream_t s)
{
    if (nq == 0)
        return;
    coarse_keys_kernel<<<grid_for(static_cast<size_t>(nq) * nlist * 32, 256), 256, 0, s>>>(
        q, nq, centroids, nlist, d, cm, keys);
    VS_LAUNCH_CHECK();
}

void launch_probe_window(const uint64_t *sorted, int nq, int nlist, int first, int np,
                         int32_t *probes, float *coarse, cudaStream_t s)
{
    if (nq == 0)
        return;
    probe_window_kernel<<<grid_for(static_cast<size_t>(nq) * np, 256), 256, 0, s>>>(
        sorted, nq, nlist, first, np, probes, coarse);
    VS_LAUNCH_CHECK();
}

void launch_assign(const float *x, size_t n, const float *centroids, int nlist, int d,
                   vs_metric cm, int32_t *lists, cudaStream_t s)
{
    if (n == 0)
        return;
    assign_kernel<<<grid_for(n * 32, 256), 256, 0, s>>>(x, n, centroids, nlist, d, cm, lists);
    VS_LAUNCH_CHECK();
}

void launch_pq_encode(const float *x, size_t n, const float *centroids, const int32_t *lists,
                      const float *codebooks, int d, int m, int nbits, int code_size,
                      uint8_t *codes, cudaStream_t s)
{
    if (n == 0)
        return;
    pq_encode_kernel<<<grid_for(n * code_size, 128), 128, 0, s>>>(x, n, centroids, lists, codebooks,
                                                                   d, m, nbits, code_size, codes);
    VS_LAUNCH_CHECK();
}

size_t pq_scan_smem_bytes(int m, int nbits, int d)
{
    return (static_cast<size_t>(m) * (size_t{1} << nbits) + d) * sizeof(float);
}

void launch_pq_scan(const PqScanArgs &a, int npairs, cudaStream_t s)
{
    if (npairs == 0)
        return;
    const size_t smem = pq_scan_smem_bytes(a.m, a.nbits, a.d);
    set_smem(reinterpret_cast<const void *>(pq_scan_kernel), smem);
    pq_scan_kernel<<<npairs, 256, smem, s>>>(a);
    VS_LAUNCH_CHECK();
}

size_t pq_select_smem_bytes(int m, int nbits, int d, int k, int nwarps)
{
    const size_t words = static_cast<size_t>(warp_topk_words(k, warp_topk_bcap(k)));
    return static_cast<size_t>(nwarps) * words * sizeof(uint64_t) + pq_scan_smem_bytes(m, nbits, d);
}

int pq_select_warps(int m, int nbits, int d, int k, size_t smem_limit)
{
    if (k < 1 || k > kPqSelectMax || (nbits != 4 && nbits != 8))
        return 0;
    for (int w = 8; w >= 1; w >>= 1)
        if (pq_select_smem_bytes(m, nbits, d, k, w) + 8 * sizeof(void *) <= smem_limit) // + tops
            return w;
    return 0;
}

void launch_pq_scan_select(const PqSelectArgs &a, int npairs, cudaStream_t s)
{
    if (npairs == 0)
        return;
    const size_t smem = pq_select_smem_bytes(a.m, a.nbits, a.d, a.k, a.nwarps);
    auto kernel = a.nbits == 8 ? pq_scan_select_kernel<8> : pq_scan_select_kernel<4>;
    set_smem(reinterpret_cast<const void *>(kernel), smem);
    kernel<<<npairs, 32 * a.nwarps, smem, s>>>(a);
    VS_LAUNCH_CHECK();
}

void launch_pq_interleave(const uint8_t *raw, int code_size, const uint32_t *perm, uint32_t len,
                          int wq, uint4 *codes4, cudaStream_t s)
{
    if (len == 0)
        return;
    const size_t items = static_cast<size_t>((len + 31) / 32) * 32 * wq;
    pq_interleave_kernel<<<grid_for(items, 256), 256, 0, s>>>(raw, code_size, perm, len, wq, codes4);
    VS_LAUNCH_CHECK();
}

void launch_pq_topk(const uint64_t *sorted, const int64_t *seg, const int64_t *cand_ids, int nq,
                    int64_t k, int64_t *out_ids, float *out_d, int64_t *out_counts, cudaStream_t s)
{
    if (nq == 0)
        return;
    pq_topk_kernel<<<nq, 256, 0, s>>>(sorted, seg, cand_ids, nq, k, out_ids, out_d, out_counts);
    VS_LAUNCH_CHECK();
}

void launch_pq_range_flags(const uint64_t *keys, size_t n, float radius, uint8_t *flags,
                           cudaStream_t s)
{
    if (n == 0)
        return;
    pq_range_flags_kernel<<<grid_for(n, 256), 256, 0, s>>>(keys, n, radius, flags);
    VS_LAUNCH_CHECK();
}

void launch_pq_range_gather(const uint32_t *sel, size_t n, const uint64_t *keys,
                            const int64_t *cand_ids, int64_t *ids, float *dists, uint32_t *pos,
                            cudaStream_t s)
{
    if (n == 0)
        return;
    pq_range_gather_kernel<<<grid_for(n, 256), 256, 0, s>>>(sel, n, keys, cand_ids, ids, dists, pos);
    VS_LAUNCH_CHECK();
}

} // namespace vs::cuda
