// Range results of the engine's C front end (internal): what a backend delivers to a
// vs::RangeCollector, returned as CSR in the caller's arrays.  Used by every range call
// (vs_range, vs_ivfpq_range, ...).
#ifndef VSEARCH_ENGINE_RANGE_RESULT_H
#define VSEARCH_ENGINE_RANGE_RESULT_H

#include "engine/api.h"
#include "engine/result_memory.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs::api {

// Range matches appended as the backend delivers them to two flat arrays (one copy, made while
// the backend works on the next chunk, split over threads kept for the call): result blocks
// (engine/result_memory.h), so fresh memory is first touched a huge page at a time.  When every
// chunk arrives in query order (each starting at or after the previous chunk's last query: whole
// query tiles, or one query's column chunks in row order), those arrays already are the CSR
// result and a result without a caller allocator takes them over; otherwise (or for a caller's
// allocator) they are copied, once, at the end.
class Collector final : public RangeCollector
{
public:
    // threads: for the copies (0: the hardware's, at most 8)
    Collector(size_t nq, int threads) : per_query_(nq, 0), copy_(threads) {}
    ~Collector() override;
    Collector(const Collector &) = delete;
    Collector &operator=(const Collector &) = delete;
    void add(size_t q0, size_t nq, const int64_t *counts, const int64_t *ids,
             const float *dists) override;
    size_t total() const { return size_; }
    const std::vector<size_t> &per_query() const { return per_query_; }
    bool in_order() const { return in_order_; }
    // offsets[nq + 1] must be filled by the caller from per_query(); copies every chunk's
    // matches to ids / dists (chunks of one query arrive in row order).
    void assemble(const int64_t *offsets, int64_t *ids, float *dists);
    // The flat arrays (result blocks, never NULL; vs_range_result_free keeps or frees them),
    // given up by the collector; for in_order() only.
    void release(int64_t **ids, float **dists);

private:
    struct Chunk
    {
        size_t q0 = 0, nq = 0;
        size_t at = 0;     // first match in the flat arrays
        size_t counts = 0; // first count in counts_
    };
    std::vector<size_t> per_query_;
    std::vector<Chunk> chunks_;
    std::vector<int64_t> counts_;
    int64_t *ids_ = nullptr;
    float *dists_ = nullptr;
    size_t size_ = 0, cap_ = 0;
    size_t next_query_ = 0; // end of the last chunk's queries
    bool in_order_ = true;
    ParallelCopy copy_;
};

// A range call's result argument: not NULL (else VS_INVALID_ARGUMENT), then zeroed.
vs_status clear_range_out(vs_context *ctx, vs_range_result *out);

// The collected matches of nq queries as CSR in arrays from alloc(alloc_arg, bytes) (result
// blocks when alloc is NULL); clears the context's last error.
vs_status deliver_range(vs_context *ctx, Collector &collector, size_t nq, vs_alloc_fn alloc,
                        void *alloc_arg, vs_range_result *out);

} // namespace vs::api

#endif
