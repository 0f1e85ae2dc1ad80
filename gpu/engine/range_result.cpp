// Range results of the engine's C front end: the Collector's flat arrays, their delivery as the
// caller's CSR arrays (taken over or copied), and vs_range_result_free.
#include "engine/range_result.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

namespace vs::api {

Collector::~Collector()
{
    result_free(ids_);
    result_free(dists_);
}

void Collector::add(size_t q0, size_t nq, const int64_t *counts, const int64_t *ids,
                    const float *dists)
{
    size_t total = 0;
    for (size_t i = 0; i < nq; i++)
        total += static_cast<size_t>(counts[i]);
    if (size_ + total > cap_)
    {
        // mappings grow by mremap, so doubling costs no copy
        const size_t want = std::max({size_ + total, cap_ * 2, size_t{1024}});
        if (want > SIZE_MAX / sizeof(int64_t))
            throw std::bad_alloc();
        void *ni = result_resize(ids_, want * sizeof(int64_t));
        if (!ni)
            throw std::bad_alloc();
        ids_ = static_cast<int64_t *>(ni);
        void *nd = result_resize(dists_, want * sizeof(float));
        if (!nd)
            throw std::bad_alloc();
        dists_ = static_cast<float *>(nd);
        cap_ = want;
    }
    chunks_.push_back(Chunk{q0, nq, size_, counts_.size()});
    counts_.insert(counts_.end(), counts, counts + nq);
    for (size_t i = 0; i < nq; i++)
        per_query_[q0 + i] += static_cast<size_t>(counts[i]);
    if (total)
    {
        int64_t *to_ids = ids_ + size_;
        float *to_d = dists_ + size_;
        copy_.run(total, 12, [&](size_t b, size_t e) {
            std::memcpy(to_ids + b, ids + b, (e - b) * sizeof(int64_t));
            std::memcpy(to_d + b, dists + b, (e - b) * sizeof(float));
        });
        size_ += total;
    }
    if (nq)
    {
        if (q0 + 1 < next_query_)
            in_order_ = false;
        next_query_ = q0 + nq;
    }
}

void Collector::assemble(const int64_t *offsets, int64_t *ids, float *dists)
{
    if (in_order_)
    {
        copy_.run(size_, 12, [&](size_t b, size_t e) {
            std::memcpy(ids + b, ids_ + b, (e - b) * sizeof(int64_t));
            std::memcpy(dists + b, dists_ + b, (e - b) * sizeof(float));
        });
        return;
    }
    std::vector<size_t> cursor(per_query_.size(), 0);
    for (const Chunk &c : chunks_)
    {
        size_t at = c.at;
        for (size_t i = 0; i < c.nq; i++)
        {
            size_t q = c.q0 + i, cnt = static_cast<size_t>(counts_[c.counts + i]);
            if (cnt)
            {
                size_t dst = static_cast<size_t>(offsets[q]) + cursor[q];
                std::memcpy(ids + dst, ids_ + at, cnt * sizeof(int64_t));
                std::memcpy(dists + dst, dists_ + at, cnt * sizeof(float));
                cursor[q] += cnt;
            }
            at += cnt;
        }
    }
}

void Collector::release(int64_t **ids, float **dists)
{
    // a malloc'd block shrinks to the matches, a mapping stays whole (at least one element:
    // NULL means failure to the caller)
    const size_t keep = std::max<size_t>(size_, 1);
    void *ni = result_resize(ids_, keep * sizeof(int64_t));
    if (!ni)
        throw std::bad_alloc();
    ids_ = static_cast<int64_t *>(ni);
    void *nd = result_resize(dists_, keep * sizeof(float));
    if (!nd)
        throw std::bad_alloc();
    dists_ = static_cast<float *>(nd);
    *ids = ids_;
    *dists = dists_;
    ids_ = nullptr;
    dists_ = nullptr;
    size_ = cap_ = 0;
}

namespace {

void *call_alloc(vs_alloc_fn alloc, void *arg, size_t bytes)
{
    if (bytes == 0)
        bytes = 8; // never ask for zero bytes: NULL always means failure
    return alloc ? alloc(arg, bytes) : result_alloc(bytes);
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
    out->offsets[0] = 0;
    for (size_t i = 0; i < nq; i++)
        out->offsets[i + 1] = out->offsets[i] + static_cast<int64_t>(collector.per_query()[i]);
    if (!alloc && collector.in_order())
    {
        try
        {
            collector.release(&out->ids, &out->distances);
        }
        catch (const std::bad_alloc &)
        {
            return fail(ctx, VS_OUT_OF_MEMORY, "range result allocation failed");
        }
    }
    else
    {
        out->ids = static_cast<int64_t *>(call_alloc(alloc, alloc_arg, total * sizeof(int64_t)));
        if (!out->ids)
            return fail(ctx, VS_OUT_OF_MEMORY, "range result allocation failed");
        out->distances =
            static_cast<float *>(call_alloc(alloc, alloc_arg, total * sizeof(float)));
        if (!out->distances)
            return fail(ctx, VS_OUT_OF_MEMORY, "range result allocation failed");
        collector.assemble(out->offsets, out->ids, out->distances);
    }
    thread_error(ctx).clear();
    return VS_OK;
}

} // namespace vs::api

extern "C" void vs_range_result_free(vs_range_result *r) noexcept
{
    if (!r)
        return;
    vs::result_keep(r->offsets);
    vs::result_keep(r->ids);
    vs::result_keep(r->distances);
    r->offsets = nullptr;
    r->ids = nullptr;
    r->distances = nullptr;
    r->total = 0;
}
