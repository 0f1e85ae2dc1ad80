// Metric-space index objects on the CUDA backend (vsearch/metric.h): the arrays in pooled device
// memory, the batched range and kNN kernels, and a host copy for the queries the kernels do not
// take, as the CUDA backend's MetricBackend.
#ifndef VSEARCH_CUDA_METRIC_CUDA_CUH
#define VSEARCH_CUDA_METRIC_CUDA_CUH

#include "cuda/device_context.cuh"
#include "engine/metric_backend.h"

#include <memory>

namespace vs::cuda {

// The CUDA backend's MetricBackend (CudaBackend::metric()) on the backend's lanes (any free one
// per call), which outlive it.
std::unique_ptr<MetricBackend> make_cuda_metric(Lanes &lanes);

} // namespace vs::cuda

#endif
