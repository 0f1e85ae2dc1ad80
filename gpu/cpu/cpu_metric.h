// Metric-space index objects on the CPU (vsearch/metric.h): host copies searched by the host
// functions of lc.cpp / sss.cpp (host_metric.h), queries spread over the backend's threads; the CPU
// backend's MetricBackend, which CpuBackend::metric() returns.
#ifndef VSEARCH_CPU_CPU_METRIC_H
#define VSEARCH_CPU_CPU_METRIC_H

#include "engine/metric_backend.h"

#include <memory>

namespace vs {

// config is the owning backend's (it outlives the family); threads as the backend's.
std::unique_ptr<MetricBackend> make_cpu_metric(const BackendConfig &config, int threads);

} // namespace vs

#endif
