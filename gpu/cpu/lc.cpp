// List of Clusters on host arrays (vsearch/lc.h): metric spaces of vectors and strings, the
// build (center selection, fixed-size buckets, covering radii) and exact range and kNN search.
#include "vsearch/lc.h"

#include "cpu/lc_build.h"
#include "cpu/metric_space.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <queue>
#include <utility>
#include <vector>

using namespace vs::metric;


extern "C" {

vs_mobject vs_mspace_object(const vs_mspace *s, size_t i)
{
    vs_mobject o{};
    if (s->kind == VS_MSPACE_VECTORS)
    {
        o.vector = s->vectors + i * s->dim;
        o.len = s->dim;
    }
    else
    {
        o.chars = s->chars + s->offsets[i];
        o.len = s->offsets[i + 1] - s->offsets[i];
    }
    return o;
}

double vs_mspace_distance(const vs_mspace *s, const vs_mobject *a, const vs_mobject *b)
{
    if (s->kind == VS_MSPACE_VECTORS)
        return vector_distance(s->metric, a->vector, b->vector, s->dim);
    return static_cast<double>(vs_edit_distance(a->chars, a->len, b->chars, b->len));
}

int vs_mspace_check(const vs_mspace *s)
{
    if (s == nullptr)
        return VS_INVALID_ARGUMENT;
    if (s->kind == VS_MSPACE_VECTORS)
    {
        if (s->metric != VS_METRIC_L2 && s->metric != VS_METRIC_L1)
            return VS_INVALID_ARGUMENT;
        if (s->n > 0 && (s->vectors == nullptr || s->dim == 0))
            return VS_INVALID_ARGUMENT;
        return VS_OK;
    }
    if (s->kind != VS_MSPACE_STRINGS || s->offsets == nullptr)
        return VS_INVALID_ARGUMENT;
    for (size_t i = 0; i < s->n; i++)
        if (s->offsets[i + 1] < s->offsets[i])
            return VS_INVALID_ARGUMENT;
    if (s->n > 0 && s->offsets[s->n] > s->offsets[0] && s->chars == nullptr)
        return VS_INVALID_ARGUMENT;
    return VS_OK;
}

void vs_mhits_free(vs_mhits *hits)
{
    std::free(hits->ids);
    std::free(hits->distances);
    hits->ids = nullptr;
    hits->distances = nullptr;
    hits->n = hits->cap = 0;
}

int vs_lc_build(const vs_mspace *objects, size_t bucket_size, uint64_t seed, vs_lc_tick_fn tick,
                void *tick_arg, size_t *centers, size_t *ncenters, size_t *members,
                size_t *bucket_offsets, double *radii, uint64_t *ndist)
{
    int st = vs_mspace_check(objects);
    if (st != VS_OK)
        return st;
    if (bucket_size == 0 || centers == nullptr || ncenters == nullptr || members == nullptr ||
        bucket_offsets == nullptr || radii == nullptr)
        return VS_INVALID_ARGUMENT;
    try
    {
        return lc_build_with(
            objects->n, bucket_size, seed,
            [&](size_t c, const size_t *rows, size_t m, double *out) {
                Probe probe(*objects, vs_mspace_object(objects, c));
                for (size_t i = 0; i < m; i++)
                    out[i] = probe.distance(rows[i]);
            },
            [&](size_t done) { return tick != nullptr && tick(tick_arg, done) != 0; }, centers,
            ncenters, members, bucket_offsets, radii, ndist);
    }
    catch (const std::bad_alloc &)
    {
        return VS_OUT_OF_MEMORY;
    }
    catch (...)
    {
        return VS_INTERNAL;
    }
}

int vs_lc_range(const vs_lc *lc, const vs_mobject *q, double radius, vs_lc_tick_fn tick,
                void *tick_arg, vs_mhits *hits, uint64_t *ndist)
{
    if (lc == nullptr || q == nullptr || hits == nullptr || std::isnan(radius))
        return VS_INVALID_ARGUMENT;
    const vs_mspace &cs = lc->centers;
    const vs_mspace &ms = lc->members;
    Probe pc(cs, *q);
    Probe pm(ms, *q);
    uint64_t evals = 0;
    int st = VS_OK;

    for (size_t c = 0; c < cs.n; c++)
    {
        if (tick != nullptr && c % 64 == 63 && tick(tick_arg, c))
        {
            st = VS_CANCELLED;
            break;
        }
        double rc = lc->radii[c];
        double d = pc.distance(c, rc + radius + pc.slack(rc + radius));
        evals++;
        if (d <= radius && object_id(cs, c) >= 0 && !push_hit(hits, object_id(cs, c), d))
        {
            st = VS_OUT_OF_MEMORY;
            break;
        }
        double slack = pc.slack(rc + radius + d);
        if (d <= rc + radius + slack)
        {
            for (uint64_t m = lc->bucket_offsets[c]; m < lc->bucket_offsets[c + 1]; m++)
            {
                double dm = pm.distance(m, radius);
                if (dm <= radius && !push_hit(hits, object_id(ms, m), dm))
                {
                    st = VS_OUT_OF_MEMORY;
                    break;
                }
            }
            evals += lc->bucket_offsets[c + 1] - lc->bucket_offsets[c];
            if (st != VS_OK)
                break;
        }
        if (d < rc - radius - slack)
            break; // the query ball lies inside this center's ball
    }
    if (ndist)
        *ndist += evals;
    return st;
}

int vs_lc_knn(const vs_lc *lc, const vs_mobject *q, size_t k, vs_lc_tick_fn tick, void *tick_arg,
              int64_t *ids, double *distances, size_t *count, uint64_t *ndist)
{
    if (lc == nullptr || q == nullptr || count == nullptr || (k > 0 && (!ids || !distances)))
        return VS_INVALID_ARGUMENT;
    *count = 0;
    if (k == 0)
        return VS_OK;
    const vs_mspace &cs = lc->centers;
    const vs_mspace &ms = lc->members;
    try
    {
        Probe pc(cs, *q);
        Probe pm(ms, *q);
        std::priority_queue<Hit> best; // the k best so far, worst on top
        uint64_t evals = 0;
        auto radius = [&]() { return best.size() < k ? kInf : best.top().d; };
        auto consider = [&](int64_t id, double d) {
            if (id < 0)
                return;
            Hit h{d, id};
            if (best.size() < k)
                best.push(h);
            else if (h < best.top())
            {
                best.pop();
                best.push(h);
            }
        };

        for (size_t c = 0; c < cs.n; c++)
        {
            if (tick != nullptr && c % 64 == 63 && tick(tick_arg, c))
                return VS_CANCELLED;
            double rc = lc->radii[c];
            double r = radius();
            double d = pc.distance(c, rc + r + pc.slack(rc + r));
            evals++;
            if (d <= r)
                consider(object_id(cs, c), d);
            r = radius();
            if (d <= rc + r + pc.slack(rc + r + d))
            {
                for (uint64_t m = lc->bucket_offsets[c]; m < lc->bucket_offsets[c + 1]; m++)
                {
                    double dm = pm.distance(m, radius());
                    if (dm <= radius())
                        consider(object_id(ms, m), dm);
                }
                evals += lc->bucket_offsets[c + 1] - lc->bucket_offsets[c];
                r = radius();
            }
            if (d < rc - r - pc.slack(rc + r + d))
                break; // no later bucket holds anything within r
        }
        size_t n = best.size();
        for (size_t i = n; i-- > 0;)
        {
            ids[i] = best.top().id;
            distances[i] = best.top().d;
            best.pop();
        }
        *count = n;
        if (ndist)
            *ndist += evals;
        return VS_OK;
    }
    catch (const std::bad_alloc &)
    {
        return VS_OUT_OF_MEMORY;
    }
    catch (...)
    {
        return VS_INTERNAL;
    }
}

int vs_mspace_range(const vs_mspace *space, const vs_mobject *q, double radius, vs_mhits *hits,
                    uint64_t *ndist)
{
    if (space == nullptr || q == nullptr || hits == nullptr || std::isnan(radius))
        return VS_INVALID_ARGUMENT;
    Probe p(*space, *q);
    for (size_t i = 0; i < space->n; i++)
    {
        double d = p.distance(i, radius);
        if (d <= radius && object_id(*space, i) >= 0 && !push_hit(hits, object_id(*space, i), d))
            return VS_OUT_OF_MEMORY;
    }
    if (ndist)
        *ndist += space->n;
    return VS_OK;
}

} // extern "C"
