// Row scans (vsearch/rowscan.h): exact kNN and range search over blocks of rows in the caller's
// memory, on the host's CPU threads.  The C front end is engine/rowscan_api.cpp.
#ifndef VSEARCH_CPU_ROWSCAN_H
#define VSEARCH_CPU_ROWSCAN_H

#include "engine/backend.h"
#include "vsearch/rowscan.h"

#include <memory>

namespace vs {

class RowScan
{
public:
    virtual ~RowScan() = default;
    virtual size_t nq() const = 0;
    virtual bool is_range() const = 0;
    // Throws Error (VS_CANCELLED when config's cancel callback says so).
    // ahead: rows the caller will add next (vs_rowscan_add_ahead), fetched into the caches only.
    virtual void add(const vs_row_block *blocks, size_t nblocks, const vs_row_block *ahead,
                     size_t nahead) = 0;
    // vs_rowscan_sketch_filter
    virtual void sketch_filter(const void *sketches, size_t stride, size_t n,
                               unsigned char *need) = 0;
    virtual void knn_result(int64_t *ids, float *dists, int64_t *counts) = 0;
    virtual void range_result(RangeCollector *collector) = 0;
};

// radius is used when range is true, k otherwise.  Arguments are validated by the front end.
std::unique_ptr<RowScan> make_row_scan(const BackendConfig &config, size_t dim, vs_metric metric,
                                       const float *queries, size_t nq, size_t k, bool range,
                                       float radius);

} // namespace vs

#endif
