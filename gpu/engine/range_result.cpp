// Range results of the engine's C front end: the Collector's chunks, their assembly into the
// caller's CSR arrays, and vs_range_result_free.
#include "engine/range_result.h"

#include <cstdlib>
#include <cstring>

namespace vs::api {

void Collector::add(size_t q0, size_t nq, const int64_t *counts, const int64_t *ids,
                    const float *dists)
{
    Chunk c;
    c.q0 = q0;
    c.counts.assign(counts, counts + nq);
    size_t total = 0;
    for (size_t i = 0; i < nq; i++)
    {
        per_query_[q0 + i] += static_cast<size_t>(counts[i]);
        total += static_cast<size_t>(counts[i]);
    }
    c.ids.assign(ids, ids + total);
    c.dists.assign(dists, dists + total);
    chunks_.push_back(std::move(c));
}

size_t Collector::total() const
{
    size_t t = 0;
    for (size_t v : per_query_)
        t += v;
    return t;
}

void Collector::assemble(const int64_t *offsets, int64_t *ids, float *dists)
{
    std::vector<size_t> cursor(per_query_.size(), 0);
    for (const Chunk &c : chunks_)
    {
        size_t at = 0;
        for (size_t i = 0; i < c.counts.size(); i++)
        {
            size_t q = c.q0 + i, cnt = static_cast<size_t>(c.counts[i]);
            if (cnt)
            {
                size_t dst = static_cast<size_t>(offsets[q]) + cursor[q];
                std::memcpy(ids + dst, c.ids.data() + at, cnt * sizeof(int64_t));
                std::memcpy(dists + dst, c.dists.data() + at, cnt * sizeof(float));
                cursor[q] += cnt;
            }
            at += cnt;
        }
    }
}

namespace {

void *call_alloc(vs_alloc_fn alloc, void *arg, size_t bytes)
{
    if (bytes == 0)
        bytes = 8; // never ask for zero bytes: NULL always means failure
    return alloc ? alloc(arg, bytes) : std::malloc(bytes);
}

} // namespace

vs_status clear_range_out(vs_context *ctx, vs_range_result *out)
{
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    std::memset(out, 0, sizeof *out);
    return VS_OK;
}

vs_status deliver_range(vs_context *ctx, Collector &collector, size_t nq, vs_alloc_fn alloc,
                        void *alloc_arg, vs_range_result *out)
{
    size_t total = collector.total();
    out->nq = nq;
    out->total = total;
    out->offsets = static_cast<int64_t *>(call_alloc(alloc, alloc_arg, (nq + 1) * sizeof(int64_t)));
    if (!out->offsets)
        return fail(ctx, VS_OUT_OF_MEMORY, "range result allocation failed");
    out->ids = static_cast<int64_t *>(call_alloc(alloc, alloc_arg, total * sizeof(int64_t)));
    if (!out->ids)
        return fail(ctx, VS_OUT_OF_MEMORY, "range result allocation failed");
    out->distances = static_cast<float *>(call_alloc(alloc, alloc_arg, total * sizeof(float)));
    if (!out->distances)
        return fail(ctx, VS_OUT_OF_MEMORY, "range result allocation failed");
    out->offsets[0] = 0;
    for (size_t i = 0; i < nq; i++)
        out->offsets[i + 1] = out->offsets[i] + static_cast<int64_t>(collector.per_query()[i]);
    collector.assemble(out->offsets, out->ids, out->distances);
    ctx->last_error.clear();
    return VS_OK;
}

} // namespace vs::api

extern "C" void vs_range_result_free(vs_range_result *r) noexcept
{
    if (!r)
        return;
    std::free(r->offsets);
    std::free(r->ids);
    std::free(r->distances);
    r->offsets = nullptr;
    r->ids = nullptr;
    r->distances = nullptr;
    r->total = 0;
}
