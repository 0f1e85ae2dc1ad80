// The engine front end, exact search: the C ABI of vsearch/engine.h for resident datasets, exact
// kNN (vs_knn) and range search (vs_range) over the core of the Backend interface.
#include "engine/api.h"
#include "engine/multi_backend.h"
#include "engine/range_result.h"

#include "vsearch/half.h"

#include <memory>
#include <vector>

struct vs_dataset : vs::api::Object<vs::Dataset>
{
};

using namespace vs::api;

namespace {

vs_status check_subsets(vs_context *ctx, const vs_subsets *s, size_t nq)
{
    if (!s)
        return VS_OK;
    if (!s->offsets)
        return fail(ctx, VS_INVALID_ARGUMENT, "subsets->offsets is NULL");
    if (s->offsets[0] != 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "subsets->offsets[0] must be 0");
    for (size_t i = 0; i < nq; i++)
        if (s->offsets[i + 1] < s->offsets[i])
            return fail(ctx, VS_INVALID_ARGUMENT, "subsets->offsets must be non-decreasing");
    if (s->offsets[nq] > 0 && !s->ids)
        return fail(ctx, VS_INVALID_ARGUMENT, "subsets->ids is NULL");
    return VS_OK;
}

// Every value of an F16 dataset must be a finite half.
const char *const kNotHalf = "a value is beyond the binary16 range (|v| >= 65520), infinite or NaN";

std::vector<float> widen_halves(size_t d, size_t n, const uint16_t *vectors)
{
    for (size_t i = 0; i < n * d; i++)
        if (vs_half_is_special(vectors[i]))
            throw vs::Error(VS_INVALID_ARGUMENT, kNotHalf);
    std::vector<float> f(n * d);
    vs_half_to_float(vectors, f.data(), f.size());
    return f;
}

// n x d floats rounded to the nearest half and widened back.
std::vector<float> halves_as_floats(size_t d, size_t n, const float *vectors)
{
    std::vector<uint16_t> h(n * d);
    vs_float_to_half(vectors, h.data(), h.size());
    return widen_halves(d, n, h.data());
}

vs_status add_floats(vs_context *ctx, vs_dataset *ds, const float *vectors, const int64_t *ids,
                     size_t n)
{
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, ctx->backend->dataset_add(ds->impl, vectors, ids, n));
}

} // namespace

extern "C" {

vs_status vs_dataset_create(vs_context *ctx, size_t dim, vs_dtype storage, vs_dataset **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (dim == 0 || dim > (1u << 20))
        return fail(ctx, VS_INVALID_ARGUMENT, "dim must be in 1 .. 2^20");
    if (storage != VS_DTYPE_F32 && storage != VS_DTYPE_F16)
    {
        if (storage == VS_DTYPE_BF16)
            return fail(ctx, VS_UNSUPPORTED, "bfloat16 storage is not implemented");
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown storage type");
    }
    return create_object(ctx, out, [&](vs::Dataset **impl) {
        return ctx->backend->dataset_create(dim, storage, impl);
    });
}

vs_status vs_dataset_add(vs_context *ctx, vs_dataset *ds, const float *vectors, const int64_t *ids,
                         size_t n) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, ds, "dataset"))
        return st;
    if (n > 0 && (!vectors || !ids))
        return fail(ctx, VS_INVALID_ARGUMENT, "vectors or ids is NULL");
    if (ds->impl->dtype() == VS_DTYPE_F16)
    {
        // The backends take floats: an F16 dataset's are exact halves, so this rounds them here.
        std::vector<float> held;
        vs::Status st = vs::guarded([&] { held = halves_as_floats(ds->impl->dim(), n, vectors); });
        if (!st.ok())
            return fail(ctx, st.code, st.message.c_str());
        return add_floats(ctx, ds, held.data(), ids, n);
    }
    return add_floats(ctx, ds, vectors, ids, n);
}

vs_status vs_dataset_add_f16(vs_context *ctx, vs_dataset *ds, const uint16_t *vectors,
                             const int64_t *ids, size_t n) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, ds, "dataset"))
        return st;
    if (n > 0 && (!vectors || !ids))
        return fail(ctx, VS_INVALID_ARGUMENT, "vectors or ids is NULL");
    std::vector<float> widened;
    vs::Status st = vs::guarded([&] { widened = widen_halves(ds->impl->dim(), n, vectors); });
    if (!st.ok())
        return fail(ctx, st.code, st.message.c_str());
    return add_floats(ctx, ds, widened.data(), ids, n);
}

vs_status vs_dataset_remove(vs_context *ctx, vs_dataset *ds, const int64_t *ids, size_t n,
                            size_t *removed) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (removed)
        *removed = 0;
    if (vs_status st = check_object(ctx, ds, "dataset"))
        return st;
    if (n > 0 && !ids)
        return fail(ctx, VS_INVALID_ARGUMENT, "ids is NULL");
    return finish(ctx, ctx->backend->dataset_remove(ds->impl, ids, n, removed));
}

vs_status vs_dataset_subset(vs_context *ctx, const vs_dataset *src, const int64_t *ids, size_t n,
                            vs_dataset **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_object(ctx, src, "dataset"))
        return st;
    if (n > 0 && !ids)
        return fail(ctx, VS_INVALID_ARGUMENT, "ids is NULL");
    if (vs_status st = fault_point(ctx))
        return st;
    return create_object(ctx, out, [&](vs::Dataset **impl) {
        return ctx->backend->dataset_subset(src->impl, ids, n, impl);
    });
}

size_t vs_dataset_size(const vs_dataset *ds) noexcept
{
    return ds && ds->impl ? ds->impl->size() : 0;
}

size_t vs_dataset_dim(const vs_dataset *ds) noexcept
{
    return ds && ds->impl ? ds->impl->dim() : 0;
}

vs_dtype vs_dataset_storage(const vs_dataset *ds) noexcept
{
    return ds && ds->impl ? ds->impl->dtype() : VS_DTYPE_F32;
}

void vs_dataset_destroy(vs_context *ctx, vs_dataset *ds) noexcept
{
    (void)ctx;
    destroy_object(ds);
}

vs_placement vs_dataset_placement(const vs_context *ctx, const vs_dataset *ds) noexcept
{
    if (!ctx || !ds || !ds->impl)
        return VS_PLACEMENT_AUTO;
    if (auto *m = dynamic_cast<const vs::MultiBackend *>(ctx->backend.get()))
        return m->placement(ds->impl);
    return VS_PLACEMENT_REPLICATED;
}

vs_status vs_knn(vs_context *ctx, const vs_dataset *ds, const float *queries, size_t nq, size_t k,
                 vs_metric metric, const vs_subsets *subsets, int64_t *out_ids,
                 float *out_distances, int64_t *out_counts) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, ds, "dataset"))
        return st;
    if (!valid_metric(metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown metric");
    if (vs_status st = check_knn_io(ctx, queries, nq, k, out_ids, out_distances))
        return st;
    if (vs_status st = check_subsets(ctx, subsets, nq))
        return st;
    if (nq == 0)
        return finish(ctx, vs::Status{});
    vs::Subsets s{};
    if (subsets)
        s = vs::Subsets{subsets->offsets, subsets->ids};
    if (k == 0)
    {
        if (out_counts)
            for (size_t i = 0; i < nq; i++)
                out_counts[i] = 0;
        return finish(ctx, vs::Status{});
    }
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, ctx->backend->knn(ds->impl, queries, nq, k, metric, subsets ? &s : nullptr,
                                         out_ids, out_distances, out_counts));
}

vs_status vs_range(vs_context *ctx, const vs_dataset *ds, const float *queries, size_t nq,
                   float radius, vs_metric metric, const vs_subsets *subsets, vs_alloc_fn alloc,
                   void *alloc_arg, vs_range_result *out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = clear_range_out(ctx, out))
        return st;
    if (vs_status st = check_object(ctx, ds, "dataset"))
        return st;
    if (!valid_metric(metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown metric");
    if (vs_status st = check_range_io(ctx, radius, queries, nq))
        return st;
    if (vs_status st = check_subsets(ctx, subsets, nq))
        return st;
    std::unique_ptr<Collector> collector;
    try
    {
        collector.reset(new Collector(nq, ctx->config.num_threads));
    }
    catch (...)
    {
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    }
    if (nq > 0)
    {
        if (vs_status st = fault_point(ctx))
            return st;
        vs::Subsets s{};
        if (subsets)
            s = vs::Subsets{subsets->offsets, subsets->ids};
        vs_status st = finish(ctx, ctx->backend->range(ds->impl, queries, nq, radius, metric,
                                                       subsets ? &s : nullptr, collector.get()));
        if (st != VS_OK)
            return st;
    }
    return deliver_range(ctx, *collector, nq, alloc, alloc_arg, out);
}

} // extern "C"
