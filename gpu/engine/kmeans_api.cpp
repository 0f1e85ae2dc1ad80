// The engine front end, k-means: the C ABI of vsearch/engine.h for vs_kmeans (argument checks;
// the backend's kmeans does the work).
#include "engine/api.h"

#include <cstring>

using namespace vs::api;

extern "C" {

void vs_kmeans_params_init(vs_kmeans_params *p) noexcept
{
    if (!p)
        return;
    std::memset(p, 0, sizeof *p);
    p->k = 1;
    p->iterations = 20;
    p->init = VS_KMEANS_INIT_RANDOM;
    p->seed = 1234;
    p->sample_size = 0;
    p->metric = VS_METRIC_L2SQ;
}

vs_status vs_kmeans(vs_context *ctx, const float *data, size_t n, size_t dim,
                    const vs_kmeans_params *params, float *centroids, vs_kmeans_info *info) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!params || !data || !centroids)
        return fail(ctx, VS_INVALID_ARGUMENT, "params, data or centroids is NULL");
    if (dim == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "dim must be positive");
    if (params->k == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "k must be positive");
    size_t m = params->sample_size && params->sample_size < n ? params->sample_size : n;
    if (m < params->k)
        return fail(ctx, VS_INVALID_ARGUMENT, "fewer training points than centroids");
    if (n >= 0xFFFFFFFFull)
        return fail(ctx, VS_INVALID_ARGUMENT, "too many training points");
    if (params->iterations < 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "iterations must be >= 0");
    if (!valid_metric(params->metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown metric");
    if (params->metric == VS_METRIC_L1)
        return fail(ctx, VS_UNSUPPORTED, "k-means supports L2SQ, L2, IP and COSINE");
    if (params->init != VS_KMEANS_INIT_RANDOM && params->init != VS_KMEANS_INIT_PLUSPLUS)
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown init");
    if (vs_status st = fault_point(ctx))
        return st;
    vs_kmeans_info local{};
    return finish(ctx, ctx->backend->kmeans(data, n, dim, *params, centroids, info ? info : &local));
}

} // extern "C"
