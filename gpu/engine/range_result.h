// Range results of the engine's C front end (internal): what a backend delivers to a
// vs::RangeCollector, returned as CSR in the caller's arrays.  Used by every range call
// (vs_range, vs_ivfpq_range, ...).
#ifndef VSEARCH_ENGINE_RANGE_RESULT_H
#define VSEARCH_ENGINE_RANGE_RESULT_H

#include "engine/api.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs::api {

// Range matches kept as the chunks the backend delivers (one copy), assembled per query into
// the caller's arrays at the end (a second copy).
class Collector final : public RangeCollector
{
public:
    explicit Collector(size_t nq) : per_query_(nq, 0) {}
    void add(size_t q0, size_t nq, const int64_t *counts, const int64_t *ids,
             const float *dists) override;
    size_t total() const;
    // offsets[nq + 1] must be filled by the caller from per_query(); copies every chunk's
    // matches to ids / dists (chunks of one query arrive in row order).
    void assemble(const int64_t *offsets, int64_t *ids, float *dists);
    const std::vector<size_t> &per_query() const { return per_query_; }

private:
    struct Chunk
    {
        size_t q0 = 0;
        std::vector<int64_t> counts, ids;
        std::vector<float> dists;
    };
    std::vector<size_t> per_query_;
    std::vector<Chunk> chunks_;
};

// A range call's result argument: not NULL (else VS_INVALID_ARGUMENT), then zeroed.
vs_status clear_range_out(vs_context *ctx, vs_range_result *out);

// The collected matches of nq queries as CSR in arrays from alloc(alloc_arg, bytes) (malloc
// when alloc is NULL); clears the context's last error.
vs_status deliver_range(vs_context *ctx, Collector &collector, size_t nq, vs_alloc_fn alloc,
                        void *alloc_arg, vs_range_result *out);

} // namespace vs::api

#endif
