// The engine front end, metric-index builds in a context (vsearch/metric.h: vs_metric_build_lc,
// vs_metric_select_sss, vs_metric_table_sss).  The objects become a flat object of the backend
// (device memory on CUDA) and every distance the build needs is one backend call from a fixed
// object to many (MetricBackend::distances: the CPU backend's threads, or one GPU launch); the
// selections run here, on the host, as the host functions run them, so the results are theirs:
// the List of Clusters by the very code of vs_lc_build (cpu/lc_build.h), the SSS pivots by an
// order of the same comparisons (below).
#include "cpu/lc_build.h"
#include "engine/api.h"
#include "engine/metric_backend.h"
#include "vsearch/metric.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <new>
#include <vector>

using namespace vs::api;

namespace {

// The build's objects in the context, and its distance calls.
class BuildObjects
{
public:
    explicit BuildObjects(vs_context *ctx) : ctx_(ctx) {}

    vs_status create(const vs_mspace &objects)
    {
        vs_mspace s = objects;
        s.ids = nullptr; // positions
        vs::MetricIndex *flat = nullptr;
        vs_status st = finish(ctx_, ctx_->backend->metric()->create_flat(s, &flat));
        flat_.reset(flat);
        return st;
    }

    // out[i] = d(from, rows[i]) (rows NULL: 0 .. n); throws Failed with the context's error set.
    void distances(size_t from, const size_t *rows, size_t n, double *out)
    {
        vs_status st = fault_point(ctx_);
        if (st == VS_OK)
            st = finish(ctx_, ctx_->backend->metric()->distances(flat_.get(), from, rows, n, out));
        if (st != VS_OK)
            throw Failed{st};
    }

    struct Failed
    {
        vs_status status;
    };

private:
    vs_context *ctx_;
    std::unique_ptr<vs::MetricIndex> flat_;
};

vs_status check_build_space(vs_context *ctx, const vs_mspace *objects)
{
    if (vs_status st = check_family(ctx, ctx->backend->metric(), "metric indexes"))
        return st;
    if (!objects || vs_mspace_check(objects) != VS_OK)
        return fail(ctx, VS_INVALID_ARGUMENT,
                    "objects: invalid space (kind, metric L2 or L1, arrays, offsets)");
    if (objects->kind == VS_MSPACE_VECTORS &&
        (objects->dim == 0 || objects->dim > (size_t{1} << 20)))
        return fail(ctx, VS_INVALID_ARGUMENT, "objects: dim must be 1 .. 2^20");
    if (objects->n >= (size_t{1} << 32))
        return fail(ctx, VS_INVALID_ARGUMENT, "objects: at most 2^32 - 1 of them");
    return VS_OK;
}

// Runs a build body, turning its failures into the context's status.
template <typename Body> vs_status run_build(vs_context *ctx, Body &&body) noexcept
{
    try
    {
        return body();
    }
    catch (const BuildObjects::Failed &f)
    {
        return f.status;
    }
    catch (const std::bad_alloc &)
    {
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    }
    catch (...)
    {
        return fail(ctx, VS_INTERNAL, "unexpected exception in a metric build");
    }
}

} // namespace

vs_status vs_metric_build_lc(vs_context *ctx, const vs_mspace *objects, size_t bucket_size,
                             uint64_t seed, size_t *centers, size_t *ncenters, size_t *members,
                             size_t *bucket_offsets, double *radii) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_build_space(ctx, objects))
        return st;
    if (bucket_size == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "bucket_size must be positive");
    if (!centers || !ncenters || !members || !bucket_offsets || !radii)
        return fail(ctx, VS_INVALID_ARGUMENT, "an output array is NULL");
    return run_build(ctx, [&]() -> vs_status {
        *ncenters = 0;
        bucket_offsets[0] = 0;
        if (objects->n == 0)
            return finish(ctx, vs::Status{});
        BuildObjects b(ctx);
        if (vs_status st = b.create(*objects))
            return st;
        int st = vs::metric::lc_build_with(
            objects->n, bucket_size, seed,
            [&](size_t c, const size_t *rows, size_t m, double *out) {
                b.distances(c, rows, m, out);
            },
            [](size_t) { return false; }, centers, ncenters, members, bucket_offsets, radii,
            nullptr);
        if (st != VS_OK)
            return fail(ctx, static_cast<vs_status>(st), "the List of Clusters build failed");
        return finish(ctx, vs::Status{});
    });
}

// vs_sss_select's pivots.  It scans the objects in order and compares each with the pivots so
// far until one is nearer than alpha M; here each new pivot is compared at once with every later
// object that no pivot is near yet, and the next pivot is the first of them that stays far: the
// same comparisons, grouped by pivot (one backend call each), so the same pivots.
vs_status vs_metric_select_sss(vs_context *ctx, const vs_mspace *objects, double alpha,
                               size_t max_pivots, size_t *pivots, size_t *npivots,
                               double *diameter) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_build_space(ctx, objects))
        return st;
    if (!(alpha > 0.0) || max_pivots == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "alpha and max_pivots must be positive");
    if (!pivots || !npivots)
        return fail(ctx, VS_INVALID_ARGUMENT, "pivots or npivots is NULL");
    return run_build(ctx, [&]() -> vs_status {
        *npivots = 0;
        if (diameter)
            *diameter = 0.0;
        const size_t n = objects->n;
        if (n == 0)
            return finish(ctx, vs::Status{});
        BuildObjects b(ctx);
        if (vs_status st = b.create(*objects))
            return st;
        std::vector<double> d(n);
        // the diameter: two farthest-object sweeps (the first farthest object on ties)
        double m = 0.0;
        size_t from = 0;
        for (int sweep = 0; sweep < 2; sweep++)
        {
            b.distances(from, nullptr, n, d.data());
            size_t far = from;
            double best = -1.0;
            for (size_t i = 0; i < n; i++)
                if (d[i] > best)
                {
                    best = d[i];
                    far = i;
                }
            m = std::max(m, best);
            from = far;
        }
        const double threshold = alpha * m;
        std::vector<size_t> open; // later objects no pivot is near, ascending
        open.reserve(n - 1);
        for (size_t i = 1; i < n; i++)
            open.push_back(i);
        size_t np = 0;
        pivots[np++] = 0;
        while (np < max_pivots && !open.empty())
        {
            b.distances(pivots[np - 1], open.data(), open.size(), d.data());
            size_t kept = 0;
            for (size_t i = 0; i < open.size(); i++)
                if (!(d[i] < threshold))
                    open[kept++] = open[i];
            open.resize(kept);
            if (open.empty())
                break;
            pivots[np++] = open.front();
            open.erase(open.begin());
        }
        *npivots = np;
        if (diameter)
            *diameter = m;
        return finish(ctx, vs::Status{});
    });
}

vs_status vs_metric_table_sss(vs_context *ctx, const vs_mspace *objects, const size_t *pivots,
                              size_t npivots, float *table) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (vs_status st = check_build_space(ctx, objects))
        return st;
    if (npivots > VS_SSS_MAX_PIVOTS)
        return fail(ctx, VS_INVALID_ARGUMENT, "more than VS_SSS_MAX_PIVOTS pivots");
    if (npivots > 0 && (!pivots || (objects->n > 0 && !table)))
        return fail(ctx, VS_INVALID_ARGUMENT, "pivots or table is NULL");
    for (size_t j = 0; j < npivots; j++)
        if (pivots[j] >= objects->n)
            return fail(ctx, VS_INVALID_ARGUMENT, "a pivot is not an object");
    return run_build(ctx, [&]() -> vs_status {
        const size_t n = objects->n;
        if (n == 0 || npivots == 0)
            return finish(ctx, vs::Status{});
        BuildObjects b(ctx);
        if (vs_status st = b.create(*objects))
            return st;
        std::vector<double> d(n);
        for (size_t j = 0; j < npivots; j++)
        {
            b.distances(pivots[j], nullptr, n, d.data());
            for (size_t i = 0; i < n; i++)
                table[i * npivots + j] = static_cast<float>(d[i]);
        }
        return finish(ctx, vs::Status{});
    });
}
