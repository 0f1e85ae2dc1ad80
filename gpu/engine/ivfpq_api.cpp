// The engine front end, IVF-PQ: the C ABI of vsearch/ivfpq.h over the backend's IvfpqBackend
// (engine/ivfpq_backend.h): argument checks, COSINE normalization, probe window clamping, and
// training (coarse and sub-quantizer k-means through the backend's kmeans).
#include "cpu/cpu_ivfpq.h"
#include "engine/api.h"
#include "engine/host_common.h"
#include "engine/ivfpq_backend.h"
#include "engine/ivfpq_math.h"
#include "engine/range_result.h"
#include "vsearch/ivfpq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

struct vs_ivfpq : vs::api::Object<vs::Ivfpq>
{
};

struct vs_ivfpq_scan : vs::api::Object<vs::IvfpqListScan>
{
};

using namespace vs::api;

namespace {

vs_status check_ivfpq_params(vs_context *ctx, const vs_ivfpq_params *p)
{
    if (!p)
        return fail(ctx, VS_INVALID_ARGUMENT, "ivfpq params is NULL");
    if (p->dim == 0 || p->dim > (1u << 20))
        return fail(ctx, VS_INVALID_ARGUMENT, "dim must be in 1 .. 2^20");
    if (p->nlist == 0 || p->nlist >= 0x7FFFFFFFu)
        return fail(ctx, VS_INVALID_ARGUMENT, "nlist must be in 1 .. 2^31 - 2");
    if (p->m == 0 || p->dim % p->m != 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "m must be positive and divide dim");
    if (p->nbits != 4 && p->nbits != 8)
        return fail(ctx, VS_INVALID_ARGUMENT, "nbits must be 4 or 8");
    if (!valid_metric(p->metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown metric");
    if (p->metric == VS_METRIC_L1)
        return fail(ctx, VS_UNSUPPORTED, "IVF-PQ supports L2SQ, L2, IP and COSINE");
    return VS_OK;
}

// What every vs_ivfpq_create* checks first; clears *out.
vs_status check_create(vs_context *ctx, const vs_ivfpq_params *params, vs_ivfpq **out)
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    return check_ivfpq_params(ctx, params);
}

// COSINE works on unit vectors: a normalized copy (zero vectors stay zero), else the input.
const float *unit_vectors(vs_metric metric, const float *x, size_t n, size_t d,
                          std::vector<float> &copy)
{
    if (metric != VS_METRIC_COSINE)
        return x;
    copy.assign(x, x + n * d);
    vs::kmeans_normalize(copy.data(), n, d);
    return copy.data();
}

// The clamped probe window [first, first + count) of nlist lists.
void probe_window(size_t nlist, size_t offset, size_t nprobe, size_t *first, size_t *count)
{
    *first = std::min(offset, nlist);
    *count = std::min(nprobe, nlist - *first);
}

// Coarse k-means, assignment of the training points, then one k-means per sub-quantizer over
// the sub-vectors of the residuals; every k-means runs on the context's backend.
void train_ivfpq(vs::Backend &backend, vs::IvfpqBackend &pq, const vs_ivfpq_params &p,
                 const vs_ivfpq_train_params &t, const float *data, size_t n, float *centroids,
                 float *codebooks)
{
    const size_t d = p.dim, m = p.m, dsub = d / m, ksub = size_t{1} << p.nbits;
    vs::Rng rng(t.seed);
    std::vector<size_t> sample = vs::kmeans_sample(n, t.sample_size, rng);
    const size_t ns = sample.size();
    std::vector<float> x(ns * d);
    for (size_t i = 0; i < ns; i++)
        std::memcpy(&x[i * d], data + sample[i] * d, d * sizeof(float));
    if (p.metric == VS_METRIC_COSINE)
        vs::kmeans_normalize(x.data(), ns, d);
    auto check = [](const vs::Status &st) {
        if (!st.ok())
            throw vs::Error(st.code, st.message);
    };

    vs_kmeans_params kp;
    vs_kmeans_params_init(&kp);
    kp.k = p.nlist;
    kp.iterations = t.coarse_iterations;
    kp.seed = t.seed;
    kp.metric = vs::pq_coarse_metric(p.metric);
    vs_kmeans_info info;
    check(backend.kmeans(x.data(), ns, d, kp, centroids, &info));

    // Assignment through the backend's encoder (exact coarse distances, as encode uses).
    std::vector<int32_t> lists(ns);
    {
        std::vector<float> no_codebooks(ksub * d, 0.0f);
        vs::Ivfpq *coarse = nullptr;
        check(pq.create(p, centroids, no_codebooks.data(), &coarse));
        std::unique_ptr<vs::Ivfpq> owned(coarse);
        check(pq.encode(coarse, x.data(), ns, lists.data(), nullptr));
    }
    std::vector<float> sub(ns * dsub);
    for (size_t j = 0; j < m; j++)
    {
        for (size_t i = 0; i < ns; i++)
        {
            const float *xi = &x[i * d + j * dsub];
            const float *ci = centroids + static_cast<size_t>(lists[i]) * d + j * dsub;
            for (size_t s = 0; s < dsub; s++)
                sub[i * dsub + s] = vs::pq_sub(xi[s], ci[s]);
        }
        kp.k = ksub;
        kp.iterations = t.pq_iterations;
        kp.seed = t.seed + 1 + j;
        kp.metric = VS_METRIC_L2SQ;
        check(backend.kmeans(sub.data(), ns, dsub, kp, codebooks + j * ksub * dsub, &info));
    }
}

vs_status scan_begin(vs_context *ctx, const vs_ivfpq *ivf, const float *queries, size_t nq,
                     size_t probe_offset, size_t nprobe, size_t k, bool range, float radius,
                     vs_ivfpq_scan **out)
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_object(ctx, ivf, "ivfpq"))
        return st;
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
    const vs_ivfpq_params &p = ivf->impl->params();
    size_t first, count;
    probe_window(p.nlist, probe_offset, nprobe, &first, &count);
    return create_object(ctx, out, [&](vs::IvfpqListScan **impl) {
        return vs::guarded([&] {
            std::vector<float> copy;
            const float *q = unit_vectors(p.metric, queries, nq, p.dim, copy);
            *impl = vs::make_cpu_ivfpq_list_scan(ctx->config, ivf->impl, q, nq, first, count, k,
                                                 range, radius)
                        .release();
        });
    });
}

// vs_ivfpq_create / _create_view (view: a CPU object reads the quantizer in place).
vs_status create_ivfpq(vs_context *ctx, const vs_ivfpq_params *params, const float *centroids,
                       const float *codebooks, bool view, vs_ivfpq **out)
{
    if (vs_status st = check_create(ctx, params, out))
        return st;
    if (!centroids || !codebooks)
        return fail(ctx, VS_INVALID_ARGUMENT, "centroids or codebooks is NULL");
    vs::IvfpqBackend *pq = ctx->backend->ivfpq();
    if (vs_status st = check_family(ctx, pq, "IVF-PQ"))
        return st;
    if (vs_status st = fault_point(ctx))
        return st;
    if (view && ctx->backend->kind() == VS_BACKEND_CPU)
        return create_object(ctx, out, [&](vs::Ivfpq **impl) {
            return vs::guarded([&] { *impl = vs::make_cpu_ivfpq_view(*params, centroids, codebooks); });
        });
    return create_object(ctx, out, [&](vs::Ivfpq **impl) {
        return pq->create(*params, centroids, codebooks, impl);
    });
}

} // namespace

extern "C" {

void vs_ivfpq_train_params_init(vs_ivfpq_train_params *p) noexcept
{
    if (!p)
        return;
    std::memset(p, 0, sizeof *p);
    p->coarse_iterations = 20;
    p->pq_iterations = 25;
    p->seed = 1234;
    p->sample_size = 0;
}

size_t vs_ivfpq_code_size(const vs_ivfpq_params *p) noexcept
{
    if (!p || (p->nbits != 4 && p->nbits != 8))
        return 0;
    return (p->m * static_cast<size_t>(p->nbits) + 7) / 8;
}

vs_status vs_ivfpq_train(vs_context *ctx, const vs_ivfpq_params *params,
                         const vs_ivfpq_train_params *train, const float *data, size_t n,
                         float *centroids, float *codebooks) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_ivfpq_params(ctx, params))
        return st;
    if (!data || !centroids || !codebooks)
        return fail(ctx, VS_INVALID_ARGUMENT, "data, centroids or codebooks is NULL");
    vs_ivfpq_train_params t;
    vs_ivfpq_train_params_init(&t);
    if (train)
        t = *train;
    if (t.coarse_iterations < 0 || t.pq_iterations < 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "iterations must be >= 0");
    if (n >= 0xFFFFFFFFull)
        return fail(ctx, VS_INVALID_ARGUMENT, "too many training points");
    size_t ns = t.sample_size && t.sample_size < n ? t.sample_size : n;
    if (ns < params->nlist)
        return fail(ctx, VS_INVALID_ARGUMENT, "fewer training points than lists (n < nlist)");
    if (ns < (size_t{1} << params->nbits))
        return fail(ctx, VS_INVALID_ARGUMENT, "fewer training points than codewords (n < 2^nbits)");
    vs::IvfpqBackend *pq = ctx->backend->ivfpq();
    if (vs_status st = check_family(ctx, pq, "IVF-PQ"))
        return st;
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, vs::guarded([&] {
                      train_ivfpq(*ctx->backend, *pq, *params, t, data, n, centroids, codebooks);
                  }));
}

vs_status vs_ivfpq_create(vs_context *ctx, const vs_ivfpq_params *params, const float *centroids,
                          const float *codebooks, vs_ivfpq **out) noexcept
{
    return create_ivfpq(ctx, params, centroids, codebooks, false, out);
}

vs_status vs_ivfpq_create_view(vs_context *ctx, const vs_ivfpq_params *params,
                               const float *centroids, const float *codebooks,
                               vs_ivfpq **out) noexcept
{
    return create_ivfpq(ctx, params, centroids, codebooks, true, out);
}

vs_status vs_ivfpq_create_rows(vs_context *ctx, const vs_ivfpq_params *params,
                               const float *const *centroid_rows, const float *const *table_rows,
                               vs_ivfpq **out) noexcept
{
    if (vs_status st = check_create(ctx, params, out))
        return st;
    if (!centroid_rows || !table_rows)
        return fail(ctx, VS_INVALID_ARGUMENT, "centroid_rows or table_rows is NULL");
    for (size_t l = 0; l < params->nlist; l++)
        if (!centroid_rows[l])
            return fail(ctx, VS_INVALID_ARGUMENT, "centroid row " + std::to_string(l) + " is NULL");
    for (size_t t = 0; t < params->dim; t++)
        if (!table_rows[t])
            return fail(ctx, VS_INVALID_ARGUMENT, "table row " + std::to_string(t) + " is NULL");
    if (ctx->backend->kind() != VS_BACKEND_CPU)
        return fail(ctx, VS_UNSUPPORTED, "an ivfpq object read in pieces needs a CPU context");
    if (vs_status st = fault_point(ctx))
        return st;
    return create_object(ctx, out, [&](vs::Ivfpq **impl) {
        return vs::guarded(
            [&] { *impl = vs::make_cpu_ivfpq_rows(*params, centroid_rows, table_rows); });
    });
}

size_t vs_ivfpq_table_width(const vs_ivfpq_params *params) noexcept
{
    if (!params || (params->nbits != 4 && params->nbits != 8))
        return 0;
    return vs::ivfpq_table_width(*params);
}

void vs_ivfpq_destroy(vs_context *ctx, vs_ivfpq *ivf) noexcept
{
    (void)ctx;
    destroy_object(ivf);
}

vs_status vs_ivfpq_encode(vs_context *ctx, const vs_ivfpq *ivf, const float *vectors, size_t n,
                          int32_t *lists, uint8_t *codes) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, ivf, "ivfpq"))
        return st;
    if (n > 0 && (!vectors || !lists || !codes))
        return fail(ctx, VS_INVALID_ARGUMENT, "vectors, lists or codes is NULL");
    if (n == 0)
        return finish(ctx, vs::Status{});
    if (vs_status st = fault_point(ctx))
        return st;
    const vs_ivfpq_params &p = ivf->impl->params();
    std::vector<float> copy;
    vs::Status st = vs::guarded([&] {
        const float *x = unit_vectors(p.metric, vectors, n, p.dim, copy);
        vs::Status inner = ctx->backend->ivfpq()->encode(ivf->impl, x, n, lists, codes);
        if (!inner.ok())
            throw vs::Error(inner.code, inner.message);
        if (p.metric != VS_METRIC_COSINE)
            return;
        // Zero vectors have no direction: list 0, code 0.
        const size_t cs = vs_ivfpq_code_size(&p);
        for (size_t i = 0; i < n; i++)
            if (vs::sqnorm_double(vectors + i * p.dim, p.dim) == 0.0)
            {
                lists[i] = 0;
                std::memset(codes + i * cs, 0, cs);
            }
    });
    return finish(ctx, st);
}

vs_status vs_ivfpq_add(vs_context *ctx, vs_ivfpq *ivf, size_t list, const int64_t *ids,
                       const uint8_t *codes, size_t n) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, ivf, "ivfpq"))
        return st;
    if (list >= ivf->impl->params().nlist)
        return fail(ctx, VS_INVALID_ARGUMENT,
                    "list " + std::to_string(list) + " out of range (nlist " +
                        std::to_string(ivf->impl->params().nlist) + ")");
    if (n > 0 && (!ids || !codes))
        return fail(ctx, VS_INVALID_ARGUMENT, "ids or codes is NULL");
    if (n == 0)
        return finish(ctx, vs::Status{});
    if (vs_status st = fault_point(ctx))
        return st;
    return finish(ctx, ctx->backend->ivfpq()->add(ivf->impl, list, ids, codes, n));
}

size_t vs_ivfpq_size(const vs_ivfpq *ivf) noexcept
{
    return ivf && ivf->impl ? ivf->impl->size() : 0;
}

vs_status vs_ivfpq_search(vs_context *ctx, const vs_ivfpq *ivf, const float *queries, size_t nq,
                          size_t probe_offset, size_t nprobe, size_t k, int64_t *out_ids,
                          float *out_distances, int64_t *out_counts) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, ivf, "ivfpq"))
        return st;
    if (vs_status st = check_knn_io(ctx, queries, nq, k, out_ids, out_distances))
        return st;
    const vs_ivfpq_params &p = ivf->impl->params();
    size_t first, count;
    probe_window(p.nlist, probe_offset, nprobe, &first, &count);
    if (k == 0 || count == 0)
    {
        for (size_t i = 0; i < nq * k; i++)
        {
            out_ids[i] = -1;
            out_distances[i] = INFINITY;
        }
        if (out_counts)
            for (size_t i = 0; i < nq; i++)
                out_counts[i] = 0;
        return finish(ctx, vs::Status{});
    }
    if (vs_status st = fault_point(ctx))
        return st;
    std::vector<float> copy;
    return finish(ctx, vs::guarded([&] {
                      const float *q = unit_vectors(p.metric, queries, nq, p.dim, copy);
                      vs::Status st = ctx->backend->ivfpq()->search(
                          ivf->impl, q, nq, first, count, k, out_ids, out_distances, out_counts);
                      if (!st.ok())
                          throw vs::Error(st.code, st.message);
                  }));
}

vs_status vs_ivfpq_range(vs_context *ctx, const vs_ivfpq *ivf, const float *queries, size_t nq,
                         size_t probe_offset, size_t nprobe, float radius, vs_alloc_fn alloc,
                         void *alloc_arg, vs_range_result *out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = clear_range_out(ctx, out))
        return st;
    if (vs_status st = check_object(ctx, ivf, "ivfpq"))
        return st;
    if (vs_status st = check_range_io(ctx, radius, queries, nq))
        return st;
    const vs_ivfpq_params &p = ivf->impl->params();
    size_t first, count;
    probe_window(p.nlist, probe_offset, nprobe, &first, &count);
    if (nq > 0 && count > 0)
        if (vs_status st = fault_point(ctx))
            return st;
    std::unique_ptr<Collector> collector;
    std::vector<float> copy;
    vs::Status st = vs::guarded([&] {
        collector.reset(new Collector(nq, ctx->config.num_threads));
        if (nq == 0 || count == 0)
            return;
        const float *q = unit_vectors(p.metric, queries, nq, p.dim, copy);
        vs::Status inner = ctx->backend->ivfpq()->range(ivf->impl, q, nq, first, count, radius,
                                                        collector.get());
        if (!inner.ok())
            throw vs::Error(inner.code, inner.message);
    });
    if (!st.ok())
        return finish(ctx, st);
    return deliver_range(ctx, *collector, nq, alloc, alloc_arg, out);
}

vs_status vs_ivfpq_scan_knn_begin(vs_context *ctx, const vs_ivfpq *ivf, const float *queries,
                                  size_t nq, size_t probe_offset, size_t nprobe, size_t k,
                                  vs_ivfpq_scan **out) noexcept
{
    return scan_begin(ctx, ivf, queries, nq, probe_offset, nprobe, k, false, 0.0f, out);
}

vs_status vs_ivfpq_scan_range_begin(vs_context *ctx, const vs_ivfpq *ivf, const float *queries,
                                    size_t nq, size_t probe_offset, size_t nprobe, float radius,
                                    vs_ivfpq_scan **out) noexcept
{
    return scan_begin(ctx, ivf, queries, nq, probe_offset, nprobe, 0, true, radius, out);
}

size_t vs_ivfpq_scan_lists(const vs_ivfpq_scan *scan, const uint32_t **lists) noexcept
{
    if (!scan || !scan->impl)
    {
        if (lists)
            *lists = nullptr;
        return 0;
    }
    const std::vector<uint32_t> &l = scan->impl->lists();
    if (lists)
        *lists = l.data();
    return l.size();
}

vs_status vs_ivfpq_scan_add(vs_context *ctx, vs_ivfpq_scan *scan, size_t list, const int64_t *ids,
                            const uint8_t *codes, const uint64_t *tags, size_t n) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, scan, "ivfpq scan"))
        return st;
    if (n > 0 && (!ids || !codes))
        return fail(ctx, VS_INVALID_ARGUMENT, "ids or codes is NULL");
    return finish(ctx, vs::guarded([&] { scan->impl->add(list, ids, codes, tags, n); }));
}

vs_status vs_ivfpq_scan_knn_result(vs_context *ctx, vs_ivfpq_scan *scan, int64_t *out_ids,
                                   float *out_distances, uint64_t *out_tags,
                                   int64_t *out_counts) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_object(ctx, scan, "ivfpq scan"))
        return st;
    return finish(ctx, vs::guarded([&] {
                      scan->impl->knn_result(out_ids, out_distances, out_tags, out_counts);
                  }));
}

vs_status vs_ivfpq_scan_range_result(vs_context *ctx, vs_ivfpq_scan *scan, vs_alloc_fn alloc,
                                     void *alloc_arg, vs_range_result *out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = clear_range_out(ctx, out))
        return st;
    if (vs_status st = check_object(ctx, scan, "ivfpq scan"))
        return st;
    const size_t nq = scan->impl->nq();
    std::unique_ptr<Collector> collector;
    vs::Status st = vs::guarded([&] {
        collector.reset(new Collector(nq, ctx->config.num_threads));
        scan->impl->range_result(collector.get());
    });
    if (!st.ok())
        return finish(ctx, st);
    return deliver_range(ctx, *collector, nq, alloc, alloc_arg, out);
}

void vs_ivfpq_scan_destroy(vs_context *ctx, vs_ivfpq_scan *scan) noexcept
{
    (void)ctx;
    destroy_object(scan);
}

} // extern "C"
