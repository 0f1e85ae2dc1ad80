// What the exact-search pipelines of the CUDA backend share: the upload of a batch of queries
// with their norms, per-tile outputs (device buffer, pinned host copy, scatter into the caller's
// arrays), the exact re-rank / sort / certification of a tile's candidates, and the tiles of
// approximate values (a cuBLAS GEMM, or the direct scan for full rows).
#include "cuda/pipelines.cuh"

#include "engine/host_common.h"
#include "vsearch/half.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace vs::cuda {

namespace {

// Squared norm in double with four partial sums (prepare_queries_kernel adds the same way on the
// device; this host copy serves range's thresholds): one chain of dependent double adds costs
// ~1 us per 784-float query.  The sum's order differs from
// sqnorm_double's in the last bits only; the approximate values it feeds are certified against
// bounds far wider than that, and exact distances never use it.
double query_sqnorm(const float *x, size_t d)
{
    double s[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= d; i += 4)
        for (int j = 0; j < 4; j++)
            s[j] += static_cast<double>(x[i + j]) * x[i + j];
    for (; i < d; i++)
        s[0] += static_cast<double>(x[i]) * x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// x rounded to binary16 into xh, and an upper bound on ||x - xh|| / ||x|| (norm = ||x||): +inf
// when a value overflows binary16, 0 when x is exact in binary16.  wide: d floats of scratch.
double half_query(const float *x, uint16_t *xh, float *wide, size_t d, double norm)
{
    // the bulk conversions (F16C where the CPU has it): one value at a time, the portable
    // conversion cost ~3x the rest of a 2 000-query batch's upload
    vs_float_to_half(x, xh, d);
    vs_half_to_float(xh, wide, d);
    double e = 0.0;
    for (size_t i = 0; i < d; i++)
    {
        if (vs_half_is_special(xh[i]))
            return INFINITY;
        const double t = static_cast<double>(x[i]) - wide[i]; // exact
        e += t * t;
    }
    if (e == 0.0)
        return 0.0;
    // the sum's rounding (d terms, relative 2^-53 each) is far inside 2^-30
    return std::sqrt(e) / norm * (1.0 + 0x1p-30);
}

} // namespace

// The norms of a batch of queries already on the device, and for binary16 rows the queries
// rounded to binary16 and qrel (half_query's bound).  A block per query: its threads copy the
// query into shared memory a chunk at a time (coalesced, every load in flight at once), then four
// threads add the squares, thread j query_sqnorm's partial sum s[j] in its order (each product
// of two floats is exact in double, so the fused multiply-adds round as the host's adds do and
// the norms are the host's bit for bit).  Four threads a query loading for themselves waited on
// d / 4 dependent loads (14-15 us cold for 16 x 784 queries on an H100).  On the host this took
// most of a large batch's upload: 1.9 ms for 2 000 x 784 binary16 queries on the H100 machine's
// 16-core host (0.97 ms for float rows), longer than the binary16 GEMM itself.
constexpr int kPrepareThreads = 128;
constexpr int kPrepareChunk = 2048; // floats of a query in shared memory at once (a multiple of 4)

__global__ void __launch_bounds__(kPrepareThreads)
    prepare_queries_kernel(const float *x, int d, double *norm, float *sq, float *inv,
                           uint16_t *xh, double *qrel)
{
    __shared__ float chunk[kPrepareChunk];
    __shared__ double e_warp[kPrepareThreads / 32];
    __shared__ int special_warp[kPrepareThreads / 32];
    const int q = blockIdx.x, j = threadIdx.x;
    const float *xq = x + static_cast<size_t>(q) * d;
    const int body = d / 4 * 4;
    double s = 0.0, e = 0.0;
    int special = 0;
    for (int c0 = 0; c0 < d; c0 += kPrepareChunk)
    {
        const int n = min(kPrepareChunk, d - c0);
        for (int i = j; i < n; i += kPrepareThreads)
        {
            const float v = xq[c0 + i];
            chunk[i] = v;
            if (xh)
            {
                const __half h = __float2half_rn(v);
                xh[static_cast<size_t>(q) * d + c0 + i] = __half_as_ushort(h);
                special |= (__half_as_ushort(h) & 0x7c00) == 0x7c00; // vs_half_is_special
                const double r = static_cast<double>(v) - __half2float(h); // exact
                e += r * r;
            }
        }
        __syncthreads();
        if (j < 4)
        {
            const int end = min(n, body - c0); // c0 <= body: both are multiples of 4, c0 < d
#pragma unroll 8
            for (int i = j; i < end; i += 4)
            {
                const double v = chunk[i];
                s += v * v;
            }
            if (j == 0)
                for (int i = end; i < n; i++)
                {
                    const double v = chunk[i];
                    s += v * v;
                }
        }
        __syncthreads();
    }
    // (s0 + s1) + (s2 + s3), as query_sqnorm adds them (lanes 4-31 hold 0 and are not read)
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (xh)
    {
        // e bounds the rounding from above with 2^-30 of slack: its order does not matter
        for (int m = 16; m >= 1; m >>= 1)
        {
            e += __shfl_xor_sync(0xffffffffu, e, m);
            special |= __shfl_xor_sync(0xffffffffu, special, m);
        }
        if ((j & 31) == 0)
        {
            e_warp[j >> 5] = e;
            special_warp[j >> 5] = special;
        }
        __syncthreads();
    }
    if (j != 0)
        return;
    const double nrm = sqrt(s);
    norm[q] = nrm;
    sq[q] = static_cast<float>(s);
    inv[q] = static_cast<float>(1.0 / nrm);
    if (xh)
    {
        e = 0.0;
        special = 0;
        for (int w = 0; w < kPrepareThreads / 32; w++)
        {
            e += e_warp[w];
            special |= special_warp[w];
        }
        qrel[q] = special ? INFINITY : e == 0.0 ? 0.0 : sqrt(e) / nrm * (1.0 + 0x1p-30);
    }
}

QueryBatch upload_queries(DeviceContext &dev, const float *hq, const std::vector<int> &which,
                          const CudaDataset &c, bool sync, bool host_bounds)
{
    QueryBatch b;
    const size_t d = c.dim();
    b.n = static_cast<int>(which.size());
    b.d = static_cast<int>(d);
    const size_t nb = which.size();
    const bool half = c.half();
    // Layout: norms (double) | x | sq | inv [| qrel (double) | xh (binary16)], each part 16-byte
    // aligned.  Only x goes up; the rest is computed on the device.
    const size_t o_norm = 0, o_x = round_up((nb + 4) * 8, 16),
                 o_sq = o_x + round_up(std::max<size_t>(nb * d, 1) * 4, 16),
                 o_inv = o_sq + round_up((nb + 4) * 4, 16),
                 o_qrel = o_inv + round_up((nb + 4) * 4, 16),
                 o_xh = o_qrel + round_up((nb + 4) * 8, 16),
                 total = half ? o_xh + std::max<size_t>(nb * d, 1) * 2 : o_inv + (nb + 4) * 4;
    const size_t xbytes = nb * d * sizeof(float);
    // Pinned staging up to kPinnedStagingMax (a pageable copy costs ~1 us per 784-float query);
    // a larger batch goes through pageable memory, which cudaMemcpyAsync has copied out of by the
    // time it returns, so that the pinned buffer does not grow with the largest batch ever seen.
    constexpr size_t kPinnedStagingMax = size_t{64} << 20;
    std::vector<unsigned char> pageable;
    unsigned char *h;
    if (xbytes <= kPinnedStagingMax)
    {
        // the previous upload's copy must be done before the buffer is rewritten (an event never
        // recorded counts as complete)
        VS_CUDA_CHECK(cudaEventSynchronize(dev.staging_copied));
        h = static_cast<unsigned char *>(dev.staging.ensure(std::max<size_t>(xbytes, 4)));
    }
    else
    {
        pageable.resize(xbytes);
        h = pageable.data();
    }
    float *hx = reinterpret_cast<float *>(h);
    copy_parallel(nb, d * sizeof(float), [&](size_t b0, size_t b1) {
        for (size_t i = b0; i < b1; i++)
            std::memcpy(hx + i * d, hq + static_cast<size_t>(which[i]) * d, d * sizeof(float));
    });
    b.buf = DeviceArray<unsigned char>(*dev.pool, total, dev.main);
    // the paddings are zero (a memset of the few MB on the device costs microseconds)
    VS_CUDA_CHECK(cudaMemsetAsync(b.buf.get(), 0, total, dev.main));
    if (xbytes)
        VS_CUDA_CHECK(
            cudaMemcpyAsync(b.buf.get() + o_x, h, xbytes, cudaMemcpyHostToDevice, dev.main));
    if (pageable.empty())
        VS_CUDA_CHECK(cudaEventRecord(dev.staging_copied, dev.main));
    b.norm = reinterpret_cast<double *>(b.buf.get() + o_norm);
    b.x = reinterpret_cast<float *>(b.buf.get() + o_x);
    b.sq = reinterpret_cast<float *>(b.buf.get() + o_sq);
    b.inv = reinterpret_cast<float *>(b.buf.get() + o_inv);
    if (half)
    {
        b.qrel = reinterpret_cast<double *>(b.buf.get() + o_qrel);
        b.xh = reinterpret_cast<uint16_t *>(b.buf.get() + o_xh);
    }
    if (nb)
    {
        prepare_queries_kernel<<<static_cast<unsigned>(nb), kPrepareThreads, 0, dev.main>>>(
            b.x, b.d, b.norm, b.sq, b.inv, b.xh, b.qrel);
        VS_CUDA_CHECK(cudaGetLastError());
    }
    if (host_bounds)
    {
        b.host_norm.resize(nb);
        if (half)
            b.host_qrel.resize(nb);
        // a query's work counted as four copies of it (2 000 x 784 binary16 queries took 7 ms on
        // one thread)
        copy_parallel(nb, d * sizeof(float) * 4, [&](size_t b0, size_t b1) {
            std::vector<uint16_t> rounded(half ? d : 0);
            std::vector<float> wide(half ? d : 0);
            for (size_t i = b0; i < b1; i++)
            {
                const float *src = hq + static_cast<size_t>(which[i]) * d;
                b.host_norm[i] = std::sqrt(query_sqnorm(src, d));
                if (half)
                    b.host_qrel[i] =
                        half_query(src, rounded.data(), wide.data(), d, b.host_norm[i]);
            }
        });
    }
    if (sync)
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
    return b;
}

void make_out(DeviceContext &dev, TileOut &o, size_t tq, size_t k, PinnedBuffer *host)
{
    o.tq = tq;
    o.k = k;
    o.buf = DeviceArray<unsigned char>(*dev.pool, o.bytes(), dev.main);
    o.ids = reinterpret_cast<int64_t *>(o.buf.get());
    o.d = reinterpret_cast<float *>(o.buf.get() + o.o_d());
    o.counts = reinterpret_cast<int64_t *>(o.buf.get() + o.o_cnt());
    o.ok = reinterpret_cast<int *>(o.buf.get() + o.o_ok());
    o.host = host;
    host->ensure(o.bytes());
}

// Copies the outputs of the first qn queries to the pinned buffer (async on s).
void download(TileOut &o, size_t qn, cudaStream_t s)
{
    char *h = static_cast<char *>(o.host->ensure(o.bytes()));
    if (qn == o.tq)
    {
        VS_CUDA_CHECK(cudaMemcpyAsync(h, o.buf.get(), o.bytes(), cudaMemcpyDeviceToHost, s));
        return;
    }
    const size_t k = o.k;
    VS_CUDA_CHECK(cudaMemcpyAsync(h, o.ids, qn * k * 8, cudaMemcpyDeviceToHost, s));
    VS_CUDA_CHECK(cudaMemcpyAsync(h + o.o_d(), o.d, qn * k * 4, cudaMemcpyDeviceToHost, s));
    VS_CUDA_CHECK(cudaMemcpyAsync(h + o.o_cnt(), o.counts, o.tq * 12, cudaMemcpyDeviceToHost, s));
}

// After the stream is done: copies results of queries which[first .. first + qn) to the user
// arrays, collecting the uncertified ones.
void scatter(TileOut &o, size_t qn, const std::vector<int> &which, size_t first, int64_t *out_ids,
             float *out_d, int64_t *out_counts, std::vector<int> *failed)
{
    const char *h = static_cast<const char *>(o.host->ensure(o.bytes()));
    const size_t k = o.k;
    const int64_t *ids = reinterpret_cast<const int64_t *>(h);
    const float *dd = reinterpret_cast<const float *>(h + o.o_d());
    const int64_t *cnt = reinterpret_cast<const int64_t *>(h + o.o_cnt());
    const int *ok = reinterpret_cast<const int *>(h + o.o_ok());
    for (size_t i = 0; i < qn; i++)
        if (!ok[i])
            failed->push_back(which[first + i]);
    copy_parallel(qn, k * 12, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; i++)
        {
            if (!ok[i])
                continue;
            const size_t q = static_cast<size_t>(which[first + i]);
            std::memcpy(out_ids + q * k, ids + i * k, k * 8);
            std::memcpy(out_d + q * k, dd + i * k, k * 4);
            if (out_counts)
                out_counts[q] = cnt[i];
        }
    });
}

// Re-rank candidates exactly, sort, certify and write one tile's outputs (stream s).
void rerank_finalize(DeviceContext &dev, const uint64_t *cand, int qn, int kp, const QueryBatch &Q,
                     size_t q0, const CudaDataset &c, vs_metric m, size_t k, int kind, bool certify,
                     uint64_t *exact, uint64_t *sorted, int *offs, TileOut &o, cudaStream_t s)
{
    if (kp <= kRerankMax && certify)
    {
        RerankArgs r{};
        r.cand = cand;
        r.kp = kp;
        r.nq = qn;
        r.k = static_cast<int>(k);
        r.q = Q.view(q0);
        r.rows = c.rows();
        r.metric = m;
        r.kind = kind;
        r.maxnorm = c.maxnorm;
        r.out_ids = o.ids;
        r.out_d = o.d;
        r.out_counts = o.counts;
        r.out_ok = o.ok;
        launch_rerank(r, s);
        return;
    }
    launch_exact_keys(cand, qn, kp, Q.view(q0), c.rows(), m, exact, s);
    launch_fill_offsets(offs, qn, kp, s);
    segmented_sort_keys(*dev.pool, exact, sorted, qn * kp, qn, offs, offs + 1, s);
    FinalizeArgs f{};
    f.sorted = sorted;
    f.seg = kp;
    f.approx = certify ? cand : nullptr;
    f.kp = kp;
    f.nq = qn;
    f.k = static_cast<int>(k);
    f.metric = m;
    f.kind = kind;
    f.d = static_cast<int>(c.dim());
    f.qnorm = Q.norm + q0;
    f.qrel = Q.qrel ? Q.qrel + q0 : nullptr;
    f.maxnorm = c.maxnorm;
    f.ids = c.ids.get();
    f.out_ids = o.ids;
    f.out_d = o.d;
    f.out_counts = o.counts;
    f.out_ok = o.ok;
    launch_finalize(f, s);
}

int approx_mode(vs_metric m)
{
    switch (m)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
        return MODE_L2_GEMM;
    case VS_METRIC_IP:
        return MODE_IP_GEMM;
    case VS_METRIC_COSINE:
        return MODE_COS_GEMM;
    default:
        return MODE_RAW;
    }
}

// C[q * ldc + c] = <y_{row0 + c}, x_{q0 + q}> for c < cn, q < qn.
void gemm(DeviceContext &dev, int slot, const CudaDataset &c, size_t row0, size_t cn,
          const QueryBatch &Q, size_t q0, size_t qn, float *C, size_t ldc)
{
    const float one = 1.0f, zero = 0.0f;
    const int d = static_cast<int>(c.dim());
    if (c.half())
    {
        // binary16 operands, fp32 accumulation (tensor cores): the bound is APPROX_GEMM_F16's
        VS_CUBLAS_CHECK(cublasGemmEx(dev.blas[slot], CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cn),
                                     static_cast<int>(qn), d, &one, c.x_f16() + row0 * d,
                                     CUDA_R_16F, d, Q.xh + q0 * d, CUDA_R_16F, d, &zero, C,
                                     CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
        return;
    }
    VS_CUBLAS_CHECK(cublasSgemm(dev.blas[slot], CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cn),
                                static_cast<int>(qn), d, &one, c.x_f32() + row0 * d, d,
                                Q.x + q0 * d, d, &zero, C, static_cast<int>(ldc)));
}

// Approximate values of full rows for qn queries into tile (ld): a GEMM (dot products,
// MODE_*_GEMM) or the direct scan (base values, MODE_RAW).
void full_rows(DeviceContext &dev, const CudaDataset &c, const QueryBatch &Q, size_t q0, size_t qn,
               vs_metric m, float *tile, size_t ld, int slot, cudaStream_t st, bool direct)
{
    if (!direct)
    {
        gemm(dev, slot, c, 0, c.size(), Q, q0, qn, tile, ld);
        return;
    }
    if (c.half())
    {
        DeviceQueries qv = Q.view(q0);
        qv.n = static_cast<int>(qn);
        launch_exact_tile(qv, c.rows(), m, tile, static_cast<int64_t>(ld), st);
        return;
    }
    for (size_t b = 0; b < qn; b += 64)
    {
        ScanArgs a{};
        a.rows = c.rows();
        a.q = Q.x + (q0 + b) * c.dim();
        a.qinv = Q.inv + q0 + b;
        a.nb = static_cast<int>(std::min<size_t>(64, qn - b));
        a.metric = m;
        a.select = false;
        a.out = tile + b * ld;
        a.ldo = static_cast<int64_t>(ld);
        int tier = a.nb <= 16 ? 0 : 1;
        size_t smem = scan_smem_bytes(tier, false, a.nb, 0, 0);
        int bps = std::max(1, scan_blocks_per_sm(tier, smem));
        a.grid = static_cast<int>(std::min<size_t>((c.size() + 127) / 128,
                                                   static_cast<size_t>(dev.prop.multiProcessorCount) * bps));
        launch_scan(a, tier, st);
    }
}

} // namespace vs::cuda
