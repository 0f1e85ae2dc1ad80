// The engine front end: the C ABI of vsearch/engine.h over the Backend interface, argument
// checking, per-context error messages, range-result assembly and loading the CUDA backend.
#include "vsearch/engine.h"
#include "vsearch/ivfpq.h"

#include "cpu/cpu_backend.h"
#include "engine/backend.h"
#include "engine/host_common.h"
#include "engine/ivfpq_math.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

struct vs_context
{
    std::unique_ptr<vs::Backend> backend;
    std::string last_error;
    std::set<vs_dataset *> datasets; // live datasets, released before the backend goes
    std::set<vs_ivfpq *> ivfpqs;     // likewise for IVF-PQ objects
};

struct vs_dataset
{
    vs_context *owner = nullptr;
    vs::Dataset *impl = nullptr;
};

struct vs_ivfpq
{
    vs_context *owner = nullptr;
    vs::Ivfpq *impl = nullptr;
};

namespace {

void write_err(char *buf, size_t len, const std::string &msg)
{
    if (buf && len > 0)
    {
        size_t n = std::min(len - 1, msg.size());
        std::memcpy(buf, msg.data(), n);
        buf[n] = '\0';
    }
}

vs_status fail(vs_context *ctx, vs_status code, const std::string &msg)
{
    if (ctx)
        ctx->last_error = msg;
    return code;
}

vs_status finish(vs_context *ctx, const vs::Status &st)
{
    if (st.ok())
    {
        ctx->last_error.clear();
        return VS_OK;
    }
    ctx->last_error = st.message;
    return st.code;
}

// Loads vsearch_cuda.so once per path; never unloaded (the CUDA runtime dislikes that).
vs_cuda_backend_fn load_cuda_backend(const char *path, std::string *err)
{
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
    {
        const char *e = dlerror();
        *err = std::string("cannot load the CUDA backend: ") + (e ? e : path);
        return nullptr;
    }
    void *sym = dlsym(handle, VS_CUDA_BACKEND_SYMBOL);
    if (!sym)
    {
        *err = std::string("no symbol " VS_CUDA_BACKEND_SYMBOL " in ") + path;
        return nullptr;
    }
    vs_cuda_backend_fn fn;
    static_assert(sizeof fn == sizeof sym, "function pointer size");
    std::memcpy(&fn, &sym, sizeof fn);
    return fn;
}

bool valid_metric(vs_metric m)
{
    return static_cast<int>(m) >= 0 && static_cast<int>(m) < VS_METRIC_COUNT;
}

vs_status check_dataset(vs_context *ctx, const vs_dataset *ds)
{
    if (!ds || !ds->impl)
        return fail(ctx, VS_INVALID_ARGUMENT, "dataset is NULL");
    if (ds->owner != ctx)
        return fail(ctx, VS_INVALID_ARGUMENT, "dataset belongs to another context");
    return VS_OK;
}

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

// Range matches kept as the chunks the backend delivers (one copy), assembled per query into
// the caller's arrays at the end (a second copy).
class Collector final : public vs::RangeCollector
{
public:
    explicit Collector(size_t nq) : per_query_(nq, 0) {}
    void add(size_t q0, size_t nq, const int64_t *counts, const int64_t *ids,
             const float *dists) override
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
    size_t total() const
    {
        size_t t = 0;
        for (size_t v : per_query_)
            t += v;
        return t;
    }
    // offsets[nq + 1] must be filled by the caller from per_query(); copies every chunk's
    // matches to ids / dists (chunks of one query arrive in row order).
    void assemble(const int64_t *offsets, int64_t *ids, float *dists)
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
    const std::vector<size_t> &per_query() const { return per_query_; }

private:
    struct Chunk
    {
        size_t q0 = 0;
        std::vector<int64_t> counts, ids;
        std::vector<float> dists;
    };
    std::vector<size_t> per_query_;
    std::vector<Chunk> chunks_;
};

void *call_alloc(vs_alloc_fn alloc, void *arg, size_t bytes)
{
    if (bytes == 0)
        bytes = 8; // never ask for zero bytes: NULL always means failure
    return alloc ? alloc(arg, bytes) : std::malloc(bytes);
}

// The collected matches as CSR in the caller's arrays.
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

// ---- IVF-PQ helpers ------------------------------------------------------------------------

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

vs_status check_ivfpq(vs_context *ctx, const vs_ivfpq *ivf)
{
    if (!ivf || !ivf->impl)
        return fail(ctx, VS_INVALID_ARGUMENT, "ivfpq is NULL");
    if (ivf->owner != ctx)
        return fail(ctx, VS_INVALID_ARGUMENT, "ivfpq belongs to another context");
    return VS_OK;
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
void train_ivfpq(vs::Backend &backend, const vs_ivfpq_params &p, const vs_ivfpq_train_params &t,
                 const float *data, size_t n, float *centroids, float *codebooks)
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
        check(backend.ivfpq_create(p, centroids, no_codebooks.data(), &coarse));
        std::unique_ptr<vs::Ivfpq> owned(coarse);
        check(backend.ivfpq_encode(coarse, x.data(), ns, lists.data(), nullptr));
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

} // namespace

extern "C" {

void vs_context_options_init(vs_context_options *o) noexcept
{
    if (!o)
        return;
    std::memset(o, 0, sizeof *o);
    o->backend = VS_BACKEND_AUTO;
    o->gemm_precision = VS_GEMM_TF32;
}

const char *vs_status_name(vs_status s) noexcept
{
    switch (s)
    {
    case VS_OK:
        return "VS_OK";
    case VS_INVALID_ARGUMENT:
        return "VS_INVALID_ARGUMENT";
    case VS_OUT_OF_MEMORY:
        return "VS_OUT_OF_MEMORY";
    case VS_DEVICE_ERROR:
        return "VS_DEVICE_ERROR";
    case VS_UNSUPPORTED:
        return "VS_UNSUPPORTED";
    case VS_CANCELLED:
        return "VS_CANCELLED";
    case VS_INTERNAL:
        return "VS_INTERNAL";
    }
    return "VS_UNKNOWN";
}

vs_status vs_context_create(const vs_context_options *options, vs_context **out, char *errbuf,
                            size_t errlen) noexcept
{
    if (!out)
    {
        write_err(errbuf, errlen, "out is NULL");
        return VS_INVALID_ARGUMENT;
    }
    *out = nullptr;
    try
    {
        vs_context_options o;
        vs_context_options_init(&o);
        if (options)
            o = *options;
        if (o.backend != VS_BACKEND_AUTO && o.backend != VS_BACKEND_CPU &&
            o.backend != VS_BACKEND_CUDA)
        {
            write_err(errbuf, errlen, "unknown backend");
            return VS_INVALID_ARGUMENT;
        }
        if (o.gemm_precision != VS_GEMM_TF32 && o.gemm_precision != VS_GEMM_FP32)
        {
            write_err(errbuf, errlen, "unknown gemm precision");
            return VS_INVALID_ARGUMENT;
        }
        vs::BackendConfig cfg;
        cfg.device = o.device;
        cfg.device_memory_budget = o.device_memory_budget;
        cfg.num_threads = o.num_threads;
        cfg.gemm_precision = o.gemm_precision;
        cfg.cancel = o.cancel;
        cfg.cancel_arg = o.cancel_arg;

        std::unique_ptr<vs::Backend> backend;
        std::string cuda_err;
        if (o.backend != VS_BACKEND_CPU)
        {
            const char *path = o.cuda_library;
            if (!path)
                path = std::getenv("VSEARCH_CUDA_LIBRARY");
            if (!path)
                path = "vsearch_cuda.so";
            vs_cuda_backend_fn fn = load_cuda_backend(path, &cuda_err);
            if (fn)
            {
                char buf[512] = {0};
                vs::Backend *b = fn(&cfg, buf, sizeof buf);
                if (b)
                    backend.reset(b);
                else
                    cuda_err = buf[0] ? buf : "the CUDA backend could not start";
            }
            if (!backend && o.backend == VS_BACKEND_CUDA)
            {
                write_err(errbuf, errlen, cuda_err);
                return VS_UNSUPPORTED;
            }
        }
        if (!backend)
            backend = vs::make_cpu_backend(cfg);
        auto *ctx = new vs_context;
        ctx->backend = std::move(backend);
        *out = ctx;
        return VS_OK;
    }
    catch (const std::bad_alloc &)
    {
        write_err(errbuf, errlen, "out of host memory");
        return VS_OUT_OF_MEMORY;
    }
    catch (const std::exception &e)
    {
        write_err(errbuf, errlen, e.what());
        return VS_INTERNAL;
    }
    catch (...)
    {
        write_err(errbuf, errlen, "unknown exception");
        return VS_INTERNAL;
    }
}

void vs_context_destroy(vs_context *ctx) noexcept
{
    if (!ctx)
        return;
    // Datasets still alive give their (device) memory back first; their handles stay valid
    // for vs_dataset_destroy only.
    for (vs_dataset *ds : ctx->datasets)
    {
        delete ds->impl;
        ds->impl = nullptr;
        ds->owner = nullptr;
    }
    for (vs_ivfpq *ivf : ctx->ivfpqs)
    {
        delete ivf->impl;
        ivf->impl = nullptr;
        ivf->owner = nullptr;
    }
    delete ctx;
}

const char *vs_last_error(const vs_context *ctx) noexcept
{
    return ctx ? ctx->last_error.c_str() : "context is NULL";
}

vs_status vs_context_get_info(vs_context *ctx, vs_context_info *info) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!info)
        return fail(ctx, VS_INVALID_ARGUMENT, "info is NULL");
    std::memset(info, 0, sizeof *info);
    return finish(ctx, ctx->backend->info(info));
}

vs_status vs_dataset_create(vs_context *ctx, size_t dim, vs_dtype storage, vs_dataset **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (dim == 0 || dim > (1u << 20))
        return fail(ctx, VS_INVALID_ARGUMENT, "dim must be in 1 .. 2^20");
    if (storage != VS_DTYPE_F32)
    {
        if (storage == VS_DTYPE_F16 || storage == VS_DTYPE_BF16)
            return fail(ctx, VS_UNSUPPORTED, "only float32 storage is implemented");
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown storage type");
    }
    vs_dataset *ds = new (std::nothrow) vs_dataset;
    if (!ds)
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    vs::Dataset *impl = nullptr;
    vs_status st = finish(ctx, ctx->backend->dataset_create(dim, storage, &impl));
    if (st != VS_OK)
    {
        delete ds;
        return st;
    }
    ds->owner = ctx;
    ds->impl = impl;
    try
    {
        ctx->datasets.insert(ds);
    }
    catch (...)
    {
        delete impl;
        delete ds;
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    }
    *out = ds;
    return VS_OK;
}

vs_status vs_dataset_add(vs_context *ctx, vs_dataset *ds, const float *vectors, const int64_t *ids,
                         size_t n) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_dataset(ctx, ds))
        return st;
    if (n > 0 && (!vectors || !ids))
        return fail(ctx, VS_INVALID_ARGUMENT, "vectors or ids is NULL");
    return finish(ctx, ctx->backend->dataset_add(ds->impl, vectors, ids, n));
}

vs_status vs_dataset_remove(vs_context *ctx, vs_dataset *ds, const int64_t *ids, size_t n,
                            size_t *removed) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (removed)
        *removed = 0;
    if (vs_status st = check_dataset(ctx, ds))
        return st;
    if (n > 0 && !ids)
        return fail(ctx, VS_INVALID_ARGUMENT, "ids is NULL");
    return finish(ctx, ctx->backend->dataset_remove(ds->impl, ids, n, removed));
}

size_t vs_dataset_size(const vs_dataset *ds) noexcept
{
    return ds && ds->impl ? ds->impl->size() : 0;
}

size_t vs_dataset_dim(const vs_dataset *ds) noexcept
{
    return ds && ds->impl ? ds->impl->dim() : 0;
}

void vs_dataset_destroy(vs_context *ctx, vs_dataset *ds) noexcept
{
    if (!ds)
        return;
    if (ds->owner)
        ds->owner->datasets.erase(ds);
    (void)ctx;
    delete ds->impl;
    delete ds;
}

vs_status vs_knn(vs_context *ctx, const vs_dataset *ds, const float *queries, size_t nq, size_t k,
                 vs_metric metric, const vs_subsets *subsets, int64_t *out_ids,
                 float *out_distances, int64_t *out_counts) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_dataset(ctx, ds))
        return st;
    if (!valid_metric(metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown metric");
    if (nq > 0 && !queries)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
    if (k > 0 && nq > std::numeric_limits<size_t>::max() / 16 / k)
        return fail(ctx, VS_INVALID_ARGUMENT, "nq * k is too large");
    if (nq > 0 && k > 0 && (!out_ids || !out_distances))
        return fail(ctx, VS_INVALID_ARGUMENT, "out_ids or out_distances is NULL");
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
    return finish(ctx, ctx->backend->knn(ds->impl, queries, nq, k, metric, subsets ? &s : nullptr,
                                         out_ids, out_distances, out_counts));
}

vs_status vs_range(vs_context *ctx, const vs_dataset *ds, const float *queries, size_t nq,
                   float radius, vs_metric metric, const vs_subsets *subsets, vs_alloc_fn alloc,
                   void *alloc_arg, vs_range_result *out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    std::memset(out, 0, sizeof *out);
    if (vs_status st = check_dataset(ctx, ds))
        return st;
    if (!valid_metric(metric))
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown metric");
    if (radius != radius)
        return fail(ctx, VS_INVALID_ARGUMENT, "radius is NaN");
    if (nq > 0 && !queries)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
    if (vs_status st = check_subsets(ctx, subsets, nq))
        return st;
    std::unique_ptr<Collector> collector;
    try
    {
        collector.reset(new Collector(nq));
    }
    catch (...)
    {
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    }
    if (nq > 0)
    {
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

void vs_range_result_free(vs_range_result *r) noexcept
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
    vs_kmeans_info local{};
    return finish(ctx, ctx->backend->kmeans(data, n, dim, *params, centroids, info ? info : &local));
}

// ---- IVF-PQ -----------------------------------------------------------------------------------

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
    return finish(ctx, vs::guarded([&] {
                      train_ivfpq(*ctx->backend, *params, t, data, n, centroids, codebooks);
                  }));
}

vs_status vs_ivfpq_create(vs_context *ctx, const vs_ivfpq_params *params, const float *centroids,
                          const float *codebooks, vs_ivfpq **out) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (vs_status st = check_ivfpq_params(ctx, params))
        return st;
    if (!centroids || !codebooks)
        return fail(ctx, VS_INVALID_ARGUMENT, "centroids or codebooks is NULL");
    vs_ivfpq *ivf = new (std::nothrow) vs_ivfpq;
    if (!ivf)
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    vs::Ivfpq *impl = nullptr;
    vs_status st = finish(ctx, ctx->backend->ivfpq_create(*params, centroids, codebooks, &impl));
    if (st != VS_OK)
    {
        delete ivf;
        return st;
    }
    ivf->owner = ctx;
    ivf->impl = impl;
    try
    {
        ctx->ivfpqs.insert(ivf);
    }
    catch (...)
    {
        delete impl;
        delete ivf;
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    }
    *out = ivf;
    return VS_OK;
}

void vs_ivfpq_destroy(vs_context *ctx, vs_ivfpq *ivf) noexcept
{
    (void)ctx;
    if (!ivf)
        return;
    if (ivf->owner)
        ivf->owner->ivfpqs.erase(ivf);
    delete ivf->impl;
    delete ivf;
}

vs_status vs_ivfpq_encode(vs_context *ctx, const vs_ivfpq *ivf, const float *vectors, size_t n,
                          int32_t *lists, uint8_t *codes) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_ivfpq(ctx, ivf))
        return st;
    if (n > 0 && (!vectors || !lists || !codes))
        return fail(ctx, VS_INVALID_ARGUMENT, "vectors, lists or codes is NULL");
    if (n == 0)
        return finish(ctx, vs::Status{});
    const vs_ivfpq_params &p = ivf->impl->params();
    std::vector<float> copy;
    vs::Status st = vs::guarded([&] {
        const float *x = unit_vectors(p.metric, vectors, n, p.dim, copy);
        vs::Status inner = ctx->backend->ivfpq_encode(ivf->impl, x, n, lists, codes);
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
    if (vs_status st = check_ivfpq(ctx, ivf))
        return st;
    if (list >= ivf->impl->params().nlist)
        return fail(ctx, VS_INVALID_ARGUMENT,
                    "list " + std::to_string(list) + " out of range (nlist " +
                        std::to_string(ivf->impl->params().nlist) + ")");
    if (n > 0 && (!ids || !codes))
        return fail(ctx, VS_INVALID_ARGUMENT, "ids or codes is NULL");
    if (n == 0)
        return finish(ctx, vs::Status{});
    return finish(ctx, ctx->backend->ivfpq_add(ivf->impl, list, ids, codes, n));
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
    if (vs_status st = check_ivfpq(ctx, ivf))
        return st;
    if (nq > 0 && !queries)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
    if (k > 0 && nq > std::numeric_limits<size_t>::max() / 16 / k)
        return fail(ctx, VS_INVALID_ARGUMENT, "nq * k is too large");
    if (nq > 0 && k > 0 && (!out_ids || !out_distances))
        return fail(ctx, VS_INVALID_ARGUMENT, "out_ids or out_distances is NULL");
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
    std::vector<float> copy;
    return finish(ctx, vs::guarded([&] {
                      const float *q = unit_vectors(p.metric, queries, nq, p.dim, copy);
                      vs::Status st = ctx->backend->ivfpq_search(ivf->impl, q, nq, first, count, k,
                                                                 out_ids, out_distances, out_counts);
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
    if (!out)
        return fail(ctx, VS_INVALID_ARGUMENT, "out is NULL");
    std::memset(out, 0, sizeof *out);
    if (vs_status st = check_ivfpq(ctx, ivf))
        return st;
    if (radius != radius)
        return fail(ctx, VS_INVALID_ARGUMENT, "radius is NaN");
    if (nq > 0 && !queries)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
    const vs_ivfpq_params &p = ivf->impl->params();
    size_t first, count;
    probe_window(p.nlist, probe_offset, nprobe, &first, &count);
    std::unique_ptr<Collector> collector;
    std::vector<float> copy;
    vs::Status st = vs::guarded([&] {
        collector.reset(new Collector(nq));
        if (nq == 0 || count == 0)
            return;
        const float *q = unit_vectors(p.metric, queries, nq, p.dim, copy);
        vs::Status inner = ctx->backend->ivfpq_range(ivf->impl, q, nq, first, count, radius,
                                                     collector.get());
        if (!inner.ok())
            throw vs::Error(inner.code, inner.message);
    });
    if (!st.ok())
        return finish(ctx, st);
    return deliver_range(ctx, *collector, nq, alloc, alloc_arg, out);
}

} // extern "C"
