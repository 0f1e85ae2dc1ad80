// The engine front end, graphs: the object part of vsearch/graph.h over the backend's
// GraphBackend (engine/graph_backend.h): argument checks, then one backend call.
#include "engine/api.h"
#include "engine/graph_backend.h"
#include "vsearch/graph.h"

#include <cmath>
#include <string>

struct vs_graph : vs::api::Object<vs::Graph>
{
};

using namespace vs::api;

vs_status vs_graph_create(vs_context *ctx, const vs_graph_arrays *graph, vs_graph **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_family(ctx, ctx->backend->graph(), "graph"))
        return st;
    if (!graph)
        return fail(ctx, VS_INVALID_ARGUMENT, "graph is NULL");
    const vs_graph_arrays &a = *graph;
    if (a.dim == 0 || a.degree == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "dim and degree must be positive");
    if (a.n >= VS_GRAPH_NONE)
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph has fewer than 2^32 - 1 nodes");
    if (a.n > 0 && (!a.vectors || !a.neighbors))
        return fail(ctx, VS_INVALID_ARGUMENT, "vectors or neighbors is NULL");
    if (vs_status st = fault_point(ctx))
        return st;
    return create_object(ctx, out, [&](vs::Graph **impl) {
        return ctx->backend->graph()->create(a, impl);
    });
}

void vs_graph_destroy(vs_context *ctx, vs_graph *g) noexcept
{
    (void)ctx;
    destroy_object(g);
}

size_t vs_graph_size(const vs_graph *g) noexcept
{
    return g && g->impl ? g->impl->size() : 0;
}

vs_status vs_graph_knn(vs_context *ctx, const vs_graph *g, const vs_graph_search_params *params,
                       const float *queries, size_t nq, size_t k, int64_t *out_ids,
                       float *out_distances, int64_t *out_counts) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, g, "graph"))
        return st;
    if (vs_status st = check_knn_io(ctx, queries, nq, k, out_ids, out_distances))
        return st;
    if (!params)
        return fail(ctx, VS_INVALID_ARGUMENT, "params is NULL");
    vs_graph_search_params p = *params;
    if (p.metric != VS_METRIC_L2SQ && p.metric != VS_METRIC_L2 && p.metric != VS_METRIC_IP &&
        p.metric != VS_METRIC_COSINE)
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph is searched under L2SQ, L2, IP or COSINE");
    if (k == 0 || p.ef == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "k and ef must be positive");
    if (p.nstarts > 0 && !p.starts)
        return fail(ctx, VS_INVALID_ARGUMENT, "starts is NULL");
    if (p.expand > VS_GRAPH_MAX_EXPAND)
        return fail(ctx, VS_INVALID_ARGUMENT,
                    "a search expands at most " + std::to_string(VS_GRAPH_MAX_EXPAND) +
                        " nodes per step");
    if (p.ef < k)
        p.ef = k;
    if (nq == 0)
        return finish(ctx, vs::Status{});
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, ctx->backend->graph()->search(g->impl, p, queries, nq, k, out_ids,
                                                     out_distances, out_counts));
}

vs_status vs_graph_build_edges(vs_context *ctx, const uint32_t *knn, size_t n, size_t knn_width,
                               size_t degree, uint32_t entry, uint32_t *out,
                               vs_graph_build_info *info) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_family(ctx, ctx->backend->graph(), "graph"))
        return st;
    if (degree == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "degree must be positive");
    if (n >= VS_GRAPH_NONE)
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph has fewer than 2^32 - 1 nodes");
    if (n > 0 && (!knn || !out))
        return fail(ctx, VS_INVALID_ARGUMENT, "knn or out is NULL");
    if (n > 0 && entry >= n)
        return fail(ctx, VS_INVALID_ARGUMENT, "the entry is not a node");
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, ctx->backend->graph()->build_edges(knn, n, knn_width, degree, entry, out,
                                                          info));
}

vs_status vs_graph_link_unfound(vs_context *ctx, uint32_t *graph, size_t n, size_t degree,
                                const float *vectors, size_t dim,
                                const vs_graph_link_params *params,
                                vs_graph_link_info *info) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_family(ctx, ctx->backend->graph(), "graph"))
        return st;
    if (!params)
        return fail(ctx, VS_INVALID_ARGUMENT, "params is NULL");
    if (degree == 0 || dim == 0 || params->width == 0 || params->links == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "degree, dim, width and links must be positive");
    if (n >= VS_GRAPH_NONE)
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph has fewer than 2^32 - 1 nodes");
    if (n > 0 && (!graph || !vectors))
        return fail(ctx, VS_INVALID_ARGUMENT, "graph or vectors is NULL");
    if (params->nstarts > 0 && !params->starts)
        return fail(ctx, VS_INVALID_ARGUMENT, "starts is NULL");
    if (params->metric != VS_METRIC_L2SQ && params->metric != VS_METRIC_L2 &&
        params->metric != VS_METRIC_IP && params->metric != VS_METRIC_COSINE)
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph is searched under L2SQ, L2, IP or COSINE");
    if (info)
        *info = vs_graph_link_info{};
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, ctx->backend->graph()->link_unfound(graph, n, degree, vectors, dim,
                                                           *params, info));
}
