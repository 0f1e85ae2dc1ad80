// The engine front end, row scans: the C ABI of vsearch/rowscan.h over cpu/rowscan.h (host
// threads, whatever the context's backend).
#include "cpu/rowscan.h"
#include "engine/api.h"
#include "engine/range_result.h"

#include <limits>
#include <memory>

struct vs_rowscan : vs::api::Object<vs::RowScan>
{
};

using namespace vs::api;

namespace {

vs_status begin(vs_context *ctx, size_t dim, vs_metric metric, const float *queries, size_t nq,
                size_t k, bool range, float radius, vs_rowscan **out)
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (dim == 0 || dim > (1u << 20))
        return fail(ctx, VS_INVALID_ARGUMENT, "dim must be in 1 .. 2^20");
    if (!valid_metric(metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown metric");
    if (range)
    {
        if (vs_status st = check_range_io(ctx, radius, queries, nq))
            return st;
    }
    else
    {
        if (nq > 0 && !queries)
            return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
        if (k > 0 && nq > std::numeric_limits<size_t>::max() / 16 / k)
            return fail(ctx, VS_INVALID_ARGUMENT, "nq * k is too large");
    }
    return create_object(ctx, out, [&](vs::RowScan **impl) {
        return vs::guarded([&] {
            *impl = vs::make_row_scan(ctx->config, dim, metric, queries, nq, k, range, radius)
                        .release();
        });
    });
}

} // namespace

extern "C" {

vs_status vs_rowscan_knn_begin(vs_context *ctx, size_t dim, vs_metric metric, const float *queries,
                               size_t nq, size_t k, vs_rowscan **out) noexcept
{
    return begin(ctx, dim, metric, queries, nq, k, false, 0.0f, out);
}

vs_status vs_rowscan_range_begin(vs_context *ctx, size_t dim, vs_metric metric,
                                 const float *queries, size_t nq, float radius,
                                 vs_rowscan **out) noexcept
{
    return begin(ctx, dim, metric, queries, nq, 0, true, radius, out);
}

vs_status vs_rowscan_add(vs_context *ctx, vs_rowscan *scan, const vs_row_block *blocks,
                         size_t nblocks) noexcept
{
    return vs_rowscan_add_ahead(ctx, scan, blocks, nblocks, nullptr, 0);
}

vs_status vs_rowscan_add_ahead(vs_context *ctx, vs_rowscan *scan, const vs_row_block *blocks,
                               size_t nblocks, const vs_row_block *ahead, size_t nahead) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, scan, "row scan"))
        return st;
    if (nblocks > 0 && !blocks)
        return fail(ctx, VS_INVALID_ARGUMENT, "blocks is NULL");
    if (nahead > 0 && !ahead)
        return fail(ctx, VS_INVALID_ARGUMENT, "ahead is NULL");
    return finish(ctx, vs::guarded([&] { scan->impl->add(blocks, nblocks, ahead, nahead); }));
}

vs_status vs_rowscan_sketch_filter(vs_context *ctx, vs_rowscan *scan, const void *sketches,
                                   size_t stride, size_t n, unsigned char *need) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, scan, "row scan"))
        return st;
    if (n > 0 && (!sketches || !need))
        return fail(ctx, VS_INVALID_ARGUMENT, "sketches or need is NULL");
    return finish(ctx, vs::guarded([&] { scan->impl->sketch_filter(sketches, stride, n, need); }));
}

vs_status vs_rowscan_knn_result(vs_context *ctx, vs_rowscan *scan, int64_t *out_ids,
                                float *out_distances, int64_t *out_counts) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, scan, "row scan"))
        return st;
    if (scan->impl->is_range())
        return fail(ctx, VS_INVALID_ARGUMENT, "a range scan has no kNN result");
    if (scan->impl->nq() > 0 && (!out_ids || !out_distances))
        return fail(ctx, VS_INVALID_ARGUMENT, "out_ids or out_distances is NULL");
    return finish(ctx, vs::guarded([&] {
                      scan->impl->knn_result(out_ids, out_distances, out_counts);
                  }));
}

vs_status vs_rowscan_range_result(vs_context *ctx, vs_rowscan *scan, vs_alloc_fn alloc,
                                  void *alloc_arg, vs_range_result *out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = clear_range_out(ctx, out))
        return st;
    if (vs_status st = check_object(ctx, scan, "row scan"))
        return st;
    if (!scan->impl->is_range())
        return fail(ctx, VS_INVALID_ARGUMENT, "a kNN scan has no range result");
    size_t nq = scan->impl->nq();
    std::unique_ptr<Collector> collector;
    try
    {
        collector.reset(new Collector(nq, ctx->config.num_threads));
    }
    catch (...)
    {
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    }
    vs_status st = finish(ctx, vs::guarded([&] { scan->impl->range_result(collector.get()); }));
    if (st != VS_OK)
        return st;
    return deliver_range(ctx, *collector, nq, alloc, alloc_arg, out);
}

void vs_rowscan_destroy(vs_context *ctx, vs_rowscan *scan) noexcept
{
    (void)ctx;
    destroy_object(scan);
}

} // extern "C"
