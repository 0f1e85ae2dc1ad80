// IVF-PQ on the CPU: the readable reference of the arithmetic in engine/ivfpq_math.h (the CUDA
// backend computes the same codes, tables and estimates), as the CPU backend's IvfpqBackend
// (engine/ivfpq_backend.h), which CpuBackend::ivfpq() returns.
#ifndef VSEARCH_CPU_IVFPQ_H
#define VSEARCH_CPU_IVFPQ_H

#include "engine/ivfpq_backend.h"

#include <memory>

namespace vs {

// config is the owning backend's (it outlives the family); threads as the backend's.
std::unique_ptr<IvfpqBackend> make_cpu_ivfpq(const BackendConfig &config, int threads);

} // namespace vs

#endif
