// k-means on the CUDA backend: the same sample and initial draws as the CPU backend
// (engine/host_common.cpp; k-means++ weights by a CUB prefix sum), assignment by a cuBLAS GEMM
// and a warp argmin, a stable CUB radix sort of (cluster, point), per-cluster sums in double in
// sorted order (deterministic, no float atomics), empty-cluster repair on the host.
#include "cuda/pipelines.cuh"

#include "engine/host_common.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace vs::cuda {

void kmeans_impl(DeviceContext &dev, const float *data, size_t n, size_t d,
                 const vs_kmeans_params &p, float *centroids, vs_kmeans_info *info)
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
    std::vector<float> xsq(m);
    for (size_t i = 0; i < m; i++)
        xsq[i] = static_cast<float>(sqnorm_double(&x[i * d], d));

    DeviceArray<float> X(*dev.pool, m * d, dev.main), XSQ(*dev.pool, m, dev.main),
        C(*dev.pool, k * d, dev.main), CSQ(*dev.pool, k + 4, dev.main);
    VS_CUDA_CHECK(cudaMemcpyAsync(X.get(), x.data(), m * d * 4, cudaMemcpyHostToDevice, dev.main));
    VS_CUDA_CHECK(cudaMemcpyAsync(XSQ.get(), xsq.data(), m * 4, cudaMemcpyHostToDevice, dev.main));
    cudaStream_t st = dev.main;

    // Initialisation (same draws as the CPU backend).
    if (p.init == VS_KMEANS_INIT_RANDOM)
    {
        std::vector<size_t> idx = kmeans_random_init(m, k, rng);
        for (size_t c = 0; c < k; c++)
            std::memcpy(centroids + c * d, &x[idx[c] * d], d * sizeof(float));
    }
    else
    {
        DeviceArray<double> mind(*dev.pool, m, dev.main), prefix(*dev.pool, m, dev.main);
        DeviceArray<uint32_t> pick(*dev.pool, 1, dev.main);
        size_t first = rng.below(m);
        size_t prev = first;
        std::memcpy(centroids, &x[first * d], d * sizeof(float));
        for (size_t c = 1; c < k; c++)
        {
            if (c % 64 == 0)
                check_cancel(dev.cfg);
            const float *cprev = X.get() + prev * d;
            launch_kmeans_mind(X.get(), m, static_cast<int>(d), cprev, c == 1, mind.get(), st);
            inclusive_sum(*dev.pool, mind.get(), prefix.get(), m, st);
            launch_kmeans_pick(prefix.get(), m, rng.uniform(), pick.get(), st);
            uint32_t h = 0;
            VS_CUDA_CHECK(cudaMemcpyAsync(&h, pick.get(), 4, cudaMemcpyDeviceToHost, st));
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            prev = h;
            std::memcpy(centroids + c * d, &x[static_cast<size_t>(h) * d], d * sizeof(float));
        }
    }
    if (spherical)
        kmeans_normalize(centroids, k, d);

    const size_t ld = round_up(k, 4);
    size_t tp = std::max<size_t>(1, std::min(dev.tile_bytes, dev.pool->available() / 4) / (ld * 4));
    tp = std::min(tp, m);
    DeviceArray<float> tile(*dev.pool, tp * ld, dev.main), obj(*dev.pool, m, dev.main);
    DeviceArray<uint32_t> assign(*dev.pool, m, dev.main), sorted_assign(*dev.pool, m, dev.main),
        iota_d(*dev.pool, m, dev.main), perm(*dev.pool, m, dev.main);
    DeviceArray<int> counts(*dev.pool, k, dev.main), offsets(*dev.pool, k, dev.main);
    std::vector<uint32_t> iota_h(m);
    std::iota(iota_h.begin(), iota_h.end(), 0u);
    VS_CUDA_CHECK(cudaMemcpyAsync(iota_d.get(), iota_h.data(), m * 4, cudaMemcpyHostToDevice, st));
    std::vector<float> h_obj(m);
    std::vector<int> h_counts(k);
    std::vector<int64_t> counts64(k);
    std::vector<int> h_off(k);
    std::vector<float> csq(k);
    int end_bit = 1;
    while ((size_t{1} << end_bit) < k)
        end_bit++;
    info->objective = 0;
    info->iterations = 0;
    info->empty_repaired = 0;
    // Assignments use the context's GEMM precision (TF32 by default) on dev.blas[0].
    for (int it = 0; it < p.iterations; it++)
    {
        check_cancel(dev.cfg);
        for (size_t c = 0; c < k; c++)
            csq[c] = static_cast<float>(sqnorm_double(centroids + c * d, d));
        VS_CUDA_CHECK(cudaMemcpyAsync(C.get(), centroids, k * d * 4, cudaMemcpyHostToDevice, st));
        VS_CUDA_CHECK(cudaMemcpyAsync(CSQ.get(), csq.data(), k * 4, cudaMemcpyHostToDevice, st));
        VS_CUDA_CHECK(cudaStreamSynchronize(st));
        cudaStream_t ws = dev.work[0];
        for (size_t p0 = 0; p0 < m; p0 += tp)
        {
            size_t pn = std::min(tp, m - p0);
            const float one = 1.0f, zero = 0.0f;
            VS_CUBLAS_CHECK(cublasSgemm(dev.blas[0], CUBLAS_OP_T, CUBLAS_OP_N,
                                        static_cast<int>(k), static_cast<int>(pn),
                                        static_cast<int>(d), &one, C.get(), static_cast<int>(d),
                                        X.get() + p0 * d, static_cast<int>(d), &zero,
                                        tile.get(), static_cast<int>(ld)));
            launch_kmeans_argmin(tile.get(), static_cast<int64_t>(ld), static_cast<int>(pn),
                                 static_cast<int>(k), spherical, p.metric, CSQ.get(),
                                 XSQ.get() + p0, assign.get() + p0, obj.get() + p0, ws);
        }
        VS_CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, k * 4, ws));
        launch_kmeans_counts(assign.get(), m, counts.get(), ws);
        sort_pairs_u32(*dev.pool, assign.get(), sorted_assign.get(), iota_d.get(), perm.get(), m,
                       end_bit, ws);
        VS_CUDA_CHECK(cudaMemcpyAsync(h_obj.data(), obj.get(), m * 4, cudaMemcpyDeviceToHost, ws));
        VS_CUDA_CHECK(cudaMemcpyAsync(h_counts.data(), counts.get(), k * 4,
                                      cudaMemcpyDeviceToHost, ws));
        VS_CUDA_CHECK(cudaStreamSynchronize(ws));
        double o = 0;
        for (float v : h_obj)
            o += v;
        info->objective = o;
        int acc = 0;
        for (size_t c = 0; c < k; c++)
        {
            h_off[c] = acc;
            acc += h_counts[c];
            counts64[c] = h_counts[c];
        }
        VS_CUDA_CHECK(cudaMemcpyAsync(offsets.get(), h_off.data(), k * 4, cudaMemcpyHostToDevice, ws));
        launch_kmeans_sums(X.get(), static_cast<int>(d), perm.get(), offsets.get(),
                           counts.get(), static_cast<int>(k), C.get(), ws);
        VS_CUDA_CHECK(cudaMemcpyAsync(centroids, C.get(), k * d * 4, cudaMemcpyDeviceToHost, ws));
        VS_CUDA_CHECK(cudaStreamSynchronize(ws));
        info->empty_repaired += kmeans_repair_empty(centroids, counts64, k, d, m, rng);
        if (spherical)
            kmeans_normalize(centroids, k, d);
        info->iterations = it + 1;
    }
    VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
}

} // namespace vs::cuda
