// The CUDA backend (vsearch_cuda.so): the Backend interface over one DeviceContext per lane
// (device, streams, cuBLAS handles; one budgeted memory pool for all; device_context.cuh).  Every
// call takes a free lane, so up to lanes() calls run at once from different threads (a dataset
// or index object must not change while a call uses it: the caller's rule).  Each call sets the
// device and runs a pipeline, turning exceptions into a Status:
//   datasets          dataset.cu
//   kNN               knn.cu picks the path: GEMM (knn_gemm.cu), direct (knn_direct.cu), large k
//                     (knn_large_k.cu), exhaustive (knn.cu); subsets.cu for candidate subsets
//   range             range.cu (subsets.cu for candidate subsets)
//   k-means           kmeans.cu
//   index families    their own files, returned by the accessors: IVF-PQ (ivfpq_cuda.cu),
//                     graphs (graph_cuda.cu), metric-space indexes (metric_cuda.cu)
// Kernels are in impl/ (impl/kernels.cuh), device utilities in utils/.  The library exports one
// symbol, vs_cuda_backend_v9 (exports.map), which creates a backend.
#include "cuda/dataset.cuh"
#include "cuda/device_context.cuh"
#include "cuda/graph_cuda.cuh"
#include "cuda/ivfpq_cuda.cuh"
#include "cuda/metric_cuda.cuh"
#include "cuda/pipelines.cuh"
#include "engine/backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace vs::cuda {
namespace {

class CudaBackend final : public Backend
{
public:
    explicit CudaBackend(const BackendConfig &cfg)
        : lanes_(cfg), dev_(lanes_.first()), ivfpq_(make_cuda_ivfpq(lanes_)),
          graph_(make_cuda_graph(lanes_)), metric_(make_cuda_metric(lanes_))
    {
    }

    vs_backend_kind kind() const noexcept override { return VS_BACKEND_CUDA; }
    int lanes() const noexcept override { return lanes_.size(); }

    Status info(vs_context_info *out) noexcept override
    {
        return guarded([&] {
            out->backend = VS_BACKEND_CUDA;
            std::snprintf(out->device_name, sizeof out->device_name, "%s", dev_.prop.name);
            out->memory_budget = dev_.pool->budget();
            out->memory_in_use = dev_.pool->in_use();
            int count = 0;
            if (cudaGetDeviceCount(&count) == cudaSuccess)
                out->device_count = count;
        });
    }

    Status dataset_create(size_t dim, vs_dtype dtype, Dataset **out) noexcept override
    {
        return guarded([&] { *out = new CudaDataset(dim, dtype); });
    }

    Status dataset_add(Dataset *ds, const float *vectors, const int64_t *ids,
                       size_t n) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            add_impl(dev, const_cast<CudaDataset &>(as_cuda(ds)), vectors, ids, n);
        });
    }

    Status dataset_remove(Dataset *ds, const int64_t *ids, size_t n,
                          size_t *removed) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            remove_impl(dev, const_cast<CudaDataset &>(as_cuda(ds)), ids, n, removed);
        });
    }

    Status dataset_subset(const Dataset *src, const int64_t *ids, size_t n,
                          Dataset **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            const CudaDataset &c = as_cuda(src);
            auto s = std::make_unique<CudaDataset>(c.dim(), c.dtype());
            subset_impl(dev, c, ids, n, *s);
            *out = s.release();
        });
    }

    Status knn(const Dataset *ds, const float *queries, size_t nq, size_t k, vs_metric metric,
               const Subsets *subsets, int64_t *out_ids, float *out_dists,
               int64_t *out_counts) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            const CudaDataset &c = as_cuda(ds);
            if (subsets)
                subsets_impl(dev, c, queries, nq, k, metric, *subsets, false, 0.0f, out_ids,
                             out_dists, out_counts, nullptr);
            else
                knn_impl(dev, c, queries, nq, k, metric, out_ids, out_dists, out_counts);
        });
    }

    Status range(const Dataset *ds, const float *queries, size_t nq, float radius,
                 vs_metric metric, const Subsets *subsets,
                 RangeCollector *collector) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            const CudaDataset &c = as_cuda(ds);
            if (subsets)
                subsets_impl(dev, c, queries, nq, 0, metric, *subsets, true, radius, nullptr,
                             nullptr, nullptr, collector);
            else
                range_impl(dev, c, queries, nq, radius, metric, collector);
        });
    }

    Status kmeans(const float *data, size_t n, size_t dim, const vs_kmeans_params &params,
                  float *centroids, vs_kmeans_info *info) noexcept override
    {
        return lanes_.run(
            [&](DeviceContext &dev) { kmeans_impl(dev, data, n, dim, params, centroids, info); });
    }

    IvfpqBackend *ivfpq() noexcept override { return ivfpq_.get(); }
    GraphBackend *graph() noexcept override { return graph_.get(); }
    MetricBackend *metric() noexcept override { return metric_.get(); }

private:
    Lanes lanes_;        // destroyed last
    DeviceContext &dev_; // lane 0: the device's name and the pool's figures
    std::unique_ptr<IvfpqBackend> ivfpq_; // ivfpq_cuda.cu
    std::unique_ptr<GraphBackend> graph_; // graph_cuda.cu
    std::unique_ptr<MetricBackend> metric_; // metric_cuda.cu
};

} // namespace
} // namespace vs::cuda

extern "C" __attribute__((visibility("default"))) vs::Backend *
vs_cuda_backend_v9(const vs::BackendConfig *config, char *err, size_t errlen)
{
    auto say = [&](const std::string &m) {
        if (err && errlen)
        {
            size_t n = std::min(errlen - 1, m.size());
            std::memcpy(err, m.data(), n);
            err[n] = 0;
        }
    };
    try
    {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0)
        {
            say(std::string("no CUDA device: ") +
                (e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0"));
            (void)cudaGetLastError();
            return nullptr;
        }
        if (config->device < 0 || config->device >= count)
        {
            say("CUDA device " + std::to_string(config->device) + " does not exist");
            return nullptr;
        }
        return new vs::cuda::CudaBackend(*config);
    }
    catch (const std::exception &ex)
    {
        say(ex.what());
        return nullptr;
    }
    catch (...)
    {
        say("unknown error starting the CUDA backend");
        return nullptr;
    }
}
