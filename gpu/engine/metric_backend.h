// The metric-space family behind vsearch/metric.h: its object type (MetricIndex: a List of
// Clusters, an SSS pivot table or a plain set of objects on the backend) and the abstract
// interface a backend implements for it (MetricBackend, returned by Backend::metric()).
// Implementations: gpu/cpu/cpu_metric.cpp (the host functions of lc.cpp / sss.cpp, queries and
// the builds' distances spread over the backend's threads) and gpu/cuda/metric_cuda.cu (one thread
// block per query); front ends: gpu/engine/metric_api.cpp (objects, searches) and
// metric_build_api.cpp (builds).  Every virtual call is noexcept and returns a Status (it crosses
// the dlopen boundary of vsearch_cuda.so).
#ifndef VSEARCH_ENGINE_METRIC_BACKEND_H
#define VSEARCH_ENGINE_METRIC_BACKEND_H

#include "engine/backend.h"
#include "vsearch/metric.h"

#include <cstddef>
#include <cstdint>

namespace vs {

class MetricIndex
{
public:
    enum Type
    {
        kList = 0, // List of Clusters
        kPivots,   // SSS pivot table
        kFlat      // brute force
    };
    virtual ~MetricIndex() = default;
    Type type() const { return type_; }
    vs_mspace_kind kind() const { return kind_; }
    vs_metric metric() const { return metric_; }
    size_t dim() const { return dim_; }
    size_t size() const { return size_; }

protected:
    Type type_ = kFlat;
    vs_mspace_kind kind_ = VS_MSPACE_VECTORS;
    vs_metric metric_ = VS_METRIC_L2;
    size_t dim_ = 0, size_ = 0;
};

// Owned by its Backend, which returns it from metric().  The front end validates the arrays
// (vs_mspace_check, matching kinds, bucket offsets, ...) and the queries (their kind and
// dimension are the index's, k >= 1, the radius not NaN).
class MetricBackend
{
public:
    virtual ~MetricBackend() = default;
    virtual Status create_list(const vs_lc &lc, MetricIndex **out) noexcept = 0;
    virtual Status create_pivots(const vs_sss &sss, MetricIndex **out) noexcept = 0;
    virtual Status create_flat(const vs_mspace &objects, MetricIndex **out) noexcept = 0;
    virtual Status knn(const MetricIndex *index, const vs_mspace &queries, size_t k,
                       int64_t *out_ids, float *out_dists, int64_t *out_counts) noexcept = 0;
    // Matches go to the collector in query order, ascending ids within a query.
    virtual Status range(const MetricIndex *index, const vs_mspace &queries, double radius,
                         RangeCollector *collector) noexcept = 0;
    // The builds' distances (engine/metric_build_api.cpp): out[i] = d(object `from`, object
    // rows[i]) of a flat index for i < n (rows NULL: objects 0 .. n), the value of the host
    // functions (cpu/metric_space.h's Probe with `from` the fixed side, unbounded).
    virtual Status distances(const MetricIndex *flat, size_t from, const size_t *rows, size_t n,
                             double *out) noexcept = 0;
};

} // namespace vs

#endif
