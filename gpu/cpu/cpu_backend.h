// The CPU backend: multithreaded (std::thread over query blocks) exact kNN / range / k-means over
// host-resident datasets, using the SIMD distance kernels of distance.h to find candidates and the
// engine's exact formula (engine/exact.h) for every returned distance.
#ifndef VSEARCH_CPU_BACKEND_H
#define VSEARCH_CPU_BACKEND_H

#include "engine/backend.h"

#include <memory>

namespace vs {

std::unique_ptr<Backend> make_cpu_backend(const BackendConfig &config);

// Candidates kept per query before the exact re-rank: k plus a margin, so that the rounding of
// the candidate distances rarely forces the exhaustive fallback.  Shared with the CUDA backend.
inline size_t knn_candidates(size_t k, size_t n)
{
    size_t margin = k / 8 > 32 ? k / 8 : 32;
    size_t c = (k + margin + 31) / 32 * 32;
    return c < n ? c : n;
}

// The wider margin for candidates found with TF32 tensor-core GEMMs (CUDA backend).
inline size_t knn_candidates_wide(size_t k, size_t n)
{
    size_t margin = k / 2 > 32 ? k / 2 : 32;
    size_t c = (k + margin + 31) / 32 * 32;
    return c < n ? c : n;
}

} // namespace vs

#endif
