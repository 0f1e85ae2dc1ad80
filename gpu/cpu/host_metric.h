// A metric-space index held in host memory and searched with the host functions of lc.cpp,
// sss.cpp (vsearch/metric.h's answers: base distances, ties by id, range matches by id): the CPU
// backend's metric objects (cpu_metric.cpp), and the host copy of a CUDA object that answers the
// queries its kernels cannot (metric_cuda.cu).
#ifndef VSEARCH_CPU_HOST_METRIC_H
#define VSEARCH_CPU_HOST_METRIC_H

#include "engine/metric_backend.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs {

// An owned copy of a space's arrays (ids filled with the positions when the source has none).
struct HostSpace
{
    vs_mspace view{};
    std::vector<float> vectors;
    std::vector<uint32_t> chars;
    std::vector<uint64_t> offsets;
    std::vector<int64_t> ids;
    void assign(const vs_mspace &s);
};

class HostMetric
{
public:
    explicit HostMetric(const vs_lc &lc);
    explicit HostMetric(const vs_sss &sss);
    explicit HostMetric(const vs_mspace &objects);
    HostMetric(const HostMetric &) = delete;
    HostMetric &operator=(const HostMetric &) = delete;

    MetricIndex::Type type() const { return type_; }
    // The searched objects' space (members, rows or the flat set): kind, metric, dim.
    const vs_mspace &space() const { return main_.view; }
    size_t size() const;
    const vs_lc &list() const { return lc_; }
    const vs_sss &pivots() const { return sss_; }

    // The k best of one query into ids[k] / dists[k] (padded); returns how many are real.
    size_t knn(const vs_mobject &q, size_t k, int64_t *ids, float *dists) const;
    // Every match of one query, ascending ids, appended.
    void range(const vs_mobject &q, double radius, std::vector<int64_t> &ids,
               std::vector<float> &dists) const;

private:
    MetricIndex::Type type_;
    HostSpace main_;  // members (list), rows (pivots), objects (flat)
    HostSpace extra_; // centers (list), pivots (pivots)
    std::vector<double> radii_;
    std::vector<uint64_t> bucket_offsets_;
    std::vector<float> table_;
    vs_lc lc_{};
    vs_sss sss_{};
};

// Runs the host searches of queries `which[0 .. n)` (which NULL: 0 .. n) of a batch on up to
// `threads` threads (config's cancel polled by the calling thread): kNN rows at query * k.
void host_metric_knn(const HostMetric &h, const vs_mspace &queries, const size_t *which, size_t n,
                     size_t k, int64_t *out_ids, float *out_dists, int64_t *out_counts,
                     int threads, const BackendConfig &config);

// Range matches of queries [q0, q1), per query (ascending ids), computed on up to `threads`
// threads.
struct HostMatches
{
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<float>> dists;
};
void host_metric_range(const HostMetric &h, const vs_mspace &queries, size_t q0, size_t q1,
                       double radius, HostMatches &out, int threads, const BackendConfig &config);

// The builds' distances (MetricBackend::distances) of a flat object on up to `threads` threads.
void host_metric_distances(const HostMetric &h, size_t from, const size_t *rows, size_t n,
                           double *out, int threads, const BackendConfig &config);

// Validates a space against the index's: same kind, and dimension for vectors.
bool same_space(const vs_mspace &a, const vs_mspace &b);

} // namespace vs

#endif
