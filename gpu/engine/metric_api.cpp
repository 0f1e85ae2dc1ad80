// The engine front end, metric-space indexes: the C ABI of vsearch/metric.h over the backend's
// MetricBackend (engine/metric_backend.h): argument checks, then one backend call.
#include "engine/api.h"
#include "engine/metric_backend.h"
#include "engine/range_result.h"
#include "vsearch/metric.h"

#include <cmath>
#include <memory>
#include <string>

struct vs_metric_index : vs::api::Object<vs::MetricIndex>
{
};

using namespace vs::api;

namespace {

vs_status check_space(vs_context *ctx, const vs_mspace &s, const char *what)
{
    if (vs_mspace_check(&s) != VS_OK)
        return fail(ctx, VS_INVALID_ARGUMENT,
                    std::string(what) + ": invalid space (kind, metric L2 or L1, arrays, offsets)");
    if (s.kind == VS_MSPACE_VECTORS && s.dim == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, std::string(what) + ": dim must be positive");
    if (s.kind == VS_MSPACE_VECTORS && s.dim > (size_t{1} << 20))
        return fail(ctx, VS_INVALID_ARGUMENT, std::string(what) + ": dim must be at most 2^20");
    return VS_OK;
}

bool same_kind(const vs_mspace &a, const vs_mspace &b)
{
    return a.kind == b.kind &&
           (a.kind != VS_MSPACE_VECTORS || (a.dim == b.dim && a.metric == b.metric));
}

template <typename Make> vs_status create(vs_context *ctx, vs_metric_index **out, Make &&make)
{
    if (vs_status st = fault_point(ctx))
        return st;
    return create_object(ctx, out, [&](vs::MetricIndex **impl) { return make(impl); });
}

vs_status check_queries(vs_context *ctx, const vs_metric_index *index, const vs_mspace *queries)
{
    if (vs_status st = check_object(ctx, index, "index"))
        return st;
    if (!queries)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
    vs_mspace q = *queries;
    q.metric = index->impl->metric(); // the queries' metric is the index's
    if (q.kind == VS_MSPACE_STRINGS)
        q.metric = VS_METRIC_L2;
    if (vs_mspace_check(&q) != VS_OK)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries: invalid space");
    if (q.kind != index->impl->kind() ||
        (q.kind == VS_MSPACE_VECTORS && q.dim != index->impl->dim()))
        return fail(ctx, VS_INVALID_ARGUMENT, "queries are not of the index's kind and dimension");
    return VS_OK;
}

} // namespace

vs_status vs_metric_index_lc(vs_context *ctx, const vs_lc *lc, vs_metric_index **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_family(ctx, ctx->backend->metric(), "metric indexes"))
        return st;
    if (!lc)
        return fail(ctx, VS_INVALID_ARGUMENT, "lc is NULL");
    if (vs_status st = check_space(ctx, lc->centers, "centers"))
        return st;
    if (vs_status st = check_space(ctx, lc->members, "members"))
        return st;
    if (!same_kind(lc->centers, lc->members))
        return fail(ctx, VS_INVALID_ARGUMENT, "centers and members are of different spaces");
    const size_t nc = lc->centers.n;
    if (nc > 0 && (!lc->radii || !lc->bucket_offsets))
        return fail(ctx, VS_INVALID_ARGUMENT, "radii or bucket_offsets is NULL");
    if (nc == 0 && lc->members.n > 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "members without centers");
    if (nc > 0)
    {
        if (lc->bucket_offsets[nc] - lc->bucket_offsets[0] != lc->members.n)
            return fail(ctx, VS_INVALID_ARGUMENT, "bucket offsets do not cover the members");
        for (size_t c = 0; c < nc; c++)
            if (lc->bucket_offsets[c + 1] < lc->bucket_offsets[c] || std::isnan(lc->radii[c]))
                return fail(ctx, VS_INVALID_ARGUMENT, "bucket offsets descend or a radius is NaN");
    }
    if (nc >= (size_t{1} << 31) || lc->members.n >= (size_t{1} << 40))
        return fail(ctx, VS_INVALID_ARGUMENT, "too many centers or members");
    static const uint64_t zero = 0;
    vs_lc copy = *lc;
    if (nc == 0)
        copy.bucket_offsets = &zero;
    return create(ctx, out, [&](vs::MetricIndex **impl) {
        return ctx->backend->metric()->create_list(copy, impl);
    });
}

vs_status vs_metric_index_sss(vs_context *ctx, const vs_sss *sss, vs_metric_index **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_family(ctx, ctx->backend->metric(), "metric indexes"))
        return st;
    if (!sss)
        return fail(ctx, VS_INVALID_ARGUMENT, "sss is NULL");
    if (vs_status st = check_space(ctx, sss->pivots, "pivots"))
        return st;
    if (vs_status st = check_space(ctx, sss->objects, "objects"))
        return st;
    if (!same_kind(sss->pivots, sss->objects))
        return fail(ctx, VS_INVALID_ARGUMENT, "pivots and objects are of different spaces");
    if (sss->pivots.n > VS_SSS_MAX_PIVOTS)
        return fail(ctx, VS_INVALID_ARGUMENT, "more than VS_SSS_MAX_PIVOTS pivots");
    if (sss->pivots.n > 0 && sss->objects.n > 0 && !sss->table)
        return fail(ctx, VS_INVALID_ARGUMENT, "table is NULL");
    return create(ctx, out, [&](vs::MetricIndex **impl) {
        return ctx->backend->metric()->create_pivots(*sss, impl);
    });
}

vs_status vs_metric_index_flat(vs_context *ctx, const vs_mspace *objects,
                               vs_metric_index **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_family(ctx, ctx->backend->metric(), "metric indexes"))
        return st;
    if (!objects)
        return fail(ctx, VS_INVALID_ARGUMENT, "objects is NULL");
    if (vs_status st = check_space(ctx, *objects, "objects"))
        return st;
    return create(ctx, out, [&](vs::MetricIndex **impl) {
        return ctx->backend->metric()->create_flat(*objects, impl);
    });
}

void vs_metric_index_destroy(vs_context *ctx, vs_metric_index *index) noexcept
{
    (void)ctx;
    destroy_object(index);
}

size_t vs_metric_index_size(const vs_metric_index *index) noexcept
{
    return index && index->impl ? index->impl->size() : 0;
}

vs_status vs_metric_index_knn(vs_context *ctx, const vs_metric_index *index,
                              const vs_mspace *queries, size_t k, int64_t *out_ids,
                              float *out_distances, int64_t *out_counts) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_queries(ctx, index, queries))
        return st;
    if (k == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "k must be positive");
    if (queries->n > 0 && (!out_ids || !out_distances))
        return fail(ctx, VS_INVALID_ARGUMENT, "out_ids or out_distances is NULL");
    if (queries->n == 0)
        return finish(ctx, vs::Status{});
    vs_mspace q = *queries;
    q.metric = index->impl->metric();
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, ctx->backend->metric()->knn(index->impl, q, k, out_ids, out_distances,
                                                   out_counts));
}

vs_status vs_metric_index_range(vs_context *ctx, const vs_metric_index *index,
                                const vs_mspace *queries, double radius, vs_alloc_fn alloc,
                                void *alloc_arg, vs_range_result *out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = clear_range_out(ctx, out))
        return st;
    if (vs_status st = check_queries(ctx, index, queries))
        return st;
    if (std::isnan(radius))
        return fail(ctx, VS_INVALID_ARGUMENT, "radius is NaN");
    const size_t nq = queries->n;
    vs_mspace q = *queries;
    q.metric = index->impl->metric();
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
        vs_status st = finish(ctx, ctx->backend->metric()->range(index->impl, q, radius,
                                                                 collector.get()));
        if (st != VS_OK)
            return st;
    }
    return deliver_range(ctx, *collector, nq, alloc, alloc_arg, out);
}
