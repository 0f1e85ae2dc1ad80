// The engine front end, graphs: the object part of vsearch/graph.h over the backend's
// GraphBackend (engine/graph_backend.h): argument checks, then one backend call.
#include "engine/api.h"
#include "engine/graph_backend.h"
#include "engine/graph_pq.h"
#include "engine/host_common.h"
#include "vsearch/graph.h"
#include "vsearch/ivfpq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

struct vs_graph : vs::api::Object<vs::Graph>
{
};

using namespace vs::api;

namespace {

// What vs_graph_create and vs_graph_create_compressed check of the arrays.
vs_status check_arrays(vs_context *ctx, const vs_graph_arrays *graph)
{
    if (!graph)
        return fail(ctx, VS_INVALID_ARGUMENT, "graph is NULL");
    const vs_graph_arrays &a = *graph;
    if (a.dim == 0 || a.degree == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "dim and degree must be positive");
    if (a.n >= VS_GRAPH_NONE)
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph has fewer than 2^32 - 1 nodes");
    if (a.n > 0 && (!a.vectors || !a.neighbors))
        return fail(ctx, VS_INVALID_ARGUMENT, "vectors or neighbors is NULL");
    return VS_OK;
}

bool graph_metric(vs_metric m)
{
    return m == VS_METRIC_L2SQ || m == VS_METRIC_L2 || m == VS_METRIC_IP || m == VS_METRIC_COSINE;
}

vs_status check_pq_shape(vs_context *ctx, size_t dim, size_t m, vs_metric metric)
{
    if (m == 0 || m > dim || dim % m != 0)
        return fail(ctx, VS_INVALID_ARGUMENT,
                    "pq m must divide the dimension " + std::to_string(dim) + ", not " +
                        std::to_string(m));
    if (!graph_metric(metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph's codes serve L2SQ, L2, IP or COSINE");
    return VS_OK;
}

vs_ivfpq_params quantizer_params(size_t dim, size_t m, vs_metric metric)
{
    vs_ivfpq_params q{};
    q.dim = dim;
    q.nlist = 1;
    q.m = m;
    q.nbits = 8;
    q.metric = metric;
    return q;
}

// Nodes encoded per vs_ivfpq_encode call (bounds the backend's buffers, whatever n is).
constexpr size_t kEncodeChunk = size_t{1} << 18;

} // namespace

vs_status vs_graph_create(vs_context *ctx, const vs_graph_arrays *graph, vs_graph **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_family(ctx, ctx->backend->graph(), "graph"))
        return st;
    if (vs_status st = check_arrays(ctx, graph))
        return st;
    if (vs_status st = fault_point(ctx))
        return st;
    return create_object(ctx, out, [&](vs::Graph **impl) {
        return ctx->backend->graph()->create(*graph, impl);
    });
}

vs_status vs_graph_pq_train(vs_context *ctx, const vs_graph_arrays *graph, size_t m,
                            vs_metric metric, const vs_graph_pq_train_params *train,
                            float *center, float *codebooks) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_arrays(ctx, graph))
        return st;
    const vs_graph_arrays &a = *graph;
    if (vs_status st = check_pq_shape(ctx, a.dim, m, metric))
        return st;
    if (!center || !codebooks)
        return fail(ctx, VS_INVALID_ARGUMENT, "center or codebooks is NULL");
    vs_graph_pq_train_params t{};
    if (train)
        t = *train;
    std::vector<float> rows;
    vs::Status st = vs::guarded([&] {
        std::vector<uint32_t> live;
        for (size_t i = 0; i < a.n; i++)
            if (!a.live || a.live[i])
                live.push_back(static_cast<uint32_t>(i));
        if (live.empty())
        {
            std::fill(center, center + a.dim, 0.0f);
            std::fill(codebooks, codebooks + VS_GRAPH_PQ_KSUB * a.dim, 0.0f);
            return;
        }
        vs::Rng rng(t.seed);
        std::vector<size_t> sample = vs::kmeans_sample(
            live.size(), t.sample_size ? t.sample_size : VS_GRAPH_PQ_DEFAULT_SAMPLE, rng);
        std::sort(sample.begin(), sample.end());
        // k-means needs a row per codeword: a small graph's nodes repeated in order
        const size_t rows_n = std::max<size_t>(sample.size(), VS_GRAPH_PQ_KSUB);
        rows.resize(rows_n * a.dim);
        for (size_t r = 0; r < rows_n; r++)
            std::memcpy(&rows[r * a.dim],
                        a.vectors + static_cast<size_t>(live[sample[r % sample.size()]]) * a.dim,
                        a.dim * sizeof(float));
    });
    if (!st.ok())
        return finish(ctx, st);
    if (rows.empty())
        return finish(ctx, vs::Status{});
    // the center: the mean of the rows as the codes see them (COSINE: unit vectors), k-means of
    // one cluster under L2SQ (vs_ivfpq's IP and COSINE quantizers would make it a unit vector)
    if (vs::graph_pq_unit(metric))
        vs::kmeans_normalize(rows.data(), rows.size() / a.dim, a.dim);
    const vs_ivfpq_params q = quantizer_params(a.dim, m, VS_METRIC_L2SQ);
    vs_ivfpq_train_params tp;
    vs_ivfpq_train_params_init(&tp);
    tp.seed = t.seed;
    if (t.iterations > 0)
        tp.pq_iterations = t.iterations;
    return vs_ivfpq_train(ctx, &q, &tp, rows.data(), rows.size() / a.dim, center, codebooks);
}

vs_status vs_graph_create_compressed(vs_context *ctx, const vs_graph_arrays *graph,
                                     const vs_graph_pq *pq, vs_graph **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_family(ctx, ctx->backend->graph(), "graph"))
        return st;
    if (vs_status st = check_arrays(ctx, graph))
        return st;
    if (!pq)
        return fail(ctx, VS_INVALID_ARGUMENT, "pq is NULL");
    const vs_graph_arrays &a = *graph;
    if (vs_status st = check_pq_shape(ctx, a.dim, pq->m, pq->metric))
        return st;
    if (!pq->center || !pq->codebooks)
        return fail(ctx, VS_INVALID_ARGUMENT, "pq center or codebooks is NULL");
    // the codes, through a one-list vs_ivfpq quantizer on the context's backend
    const vs_ivfpq_params q = quantizer_params(a.dim, pq->m, pq->metric);
    vs_ivfpq *quantizer = nullptr;
    if (vs_status st = vs_ivfpq_create(ctx, &q, pq->center, pq->codebooks, &quantizer))
        return st;
    std::vector<uint8_t> codes;
    std::vector<int32_t> lists;
    vs::Status st = vs::guarded([&] {
        codes.resize(std::max<size_t>(a.n, 1) * pq->m);
        lists.resize(std::min(std::max<size_t>(a.n, 1), kEncodeChunk));
    });
    for (size_t i = 0; st.ok() && i < a.n; i += kEncodeChunk)
    {
        const size_t c = std::min(kEncodeChunk, a.n - i);
        if (vs_status e = vs_ivfpq_encode(ctx, quantizer, a.vectors + i * a.dim, c, lists.data(),
                                          codes.data() + i * pq->m))
            st = vs::Status{e, thread_error(ctx)};
    }
    vs_ivfpq_destroy(ctx, quantizer);
    if (!st.ok())
        return finish(ctx, st);
    if (vs_status f = fault_point(ctx))
        return f;
    return create_object(ctx, out, [&](vs::Graph **impl) {
        return ctx->backend->graph()->create_compressed(a, *pq, codes.data(), impl);
    });
}

void vs_graph_get_memory(const vs_graph *g, vs_graph_memory *out) noexcept
{
    if (!out)
        return;
    *out = g && g->impl ? g->impl->memory() : vs_graph_memory{};
}

void vs_graph_compressed_memory(size_t n, size_t dim, size_t degree, size_t m,
                                vs_graph_memory *out) noexcept
{
    if (!out)
        return;
    out->pq_m = m;
    out->device_bytes = n * (m + 1) + (VS_GRAPH_PQ_KSUB + 1) * dim * sizeof(float);
    out->host_bytes = n * (dim * sizeof(float) + degree * sizeof(uint32_t) + sizeof(int64_t));
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
    if (!graph_metric(p.metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "a graph is searched under L2SQ, L2, IP or COSINE");
    if (g->impl->memory().pq_m > 0 &&
        vs::graph_pq_unit(p.metric) != vs::graph_pq_unit(g->impl->pq_metric()))
        return fail(ctx, VS_INVALID_ARGUMENT,
                    vs::graph_pq_unit(p.metric)
                        ? "a compressed graph coded for L2SQ, L2 or IP is not searched under COSINE"
                        : "a compressed graph coded for COSINE is searched under COSINE only");
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
