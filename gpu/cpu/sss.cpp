// Sparse Spatial Selection pivot tables on host arrays (vsearch/sss.h): pivot selection, the
// pivot-distance table, exact range and kNN search.
#include "vsearch/sss.h"

#include "cpu/metric_space.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <queue>
#include <utility>
#include <vector>

using namespace vs::metric;

namespace {

// The lower bound of d(q, x) from the pivots: max_i |d(p_i, x) - d(p_i, q)|.
inline double lower_bound(const float *row, const double *qp, size_t np)
{
    double lb = 0.0;
    for (size_t j = 0; j < np; j++)
        lb = std::max(lb, std::fabs(static_cast<double>(row[j]) - qp[j]));
    return lb;
}

// Slack of the discard test for a row (0 for strings: exact integer distances).
inline double row_slack(const vs_mspace &s, const float *row, const double *qp, size_t np,
                        double radius)
{
    if (s.kind != VS_MSPACE_VECTORS)
        return 0.0;
    double m = radius;
    for (size_t j = 0; j < np; j++)
        m = std::max(m, std::max(static_cast<double>(row[j]), qp[j]));
    return VS_LC_SLACK * 2.0 * m;
}

// Is some pivot's |d(p, x) - d(p, q)| beyond the radius (plus the slack of float distances)?
// Stops at the first such pivot.
inline bool discarded(const vs_mspace &s, const float *row, const double *qp, size_t np,
                      double radius)
{
    const bool exact = s.kind != VS_MSPACE_VECTORS;
    for (size_t j = 0; j < np; j++)
    {
        double px = static_cast<double>(row[j]);
        double diff = std::fabs(px - qp[j]);
        double slack = exact ? 0.0 : VS_LC_SLACK * 2.0 * std::max(radius, std::max(px, qp[j]));
        if (diff > radius + slack)
            return true;
    }
    return false;
}

bool query_pivots(const vs_sss *s, const vs_mobject *q, std::vector<double> &qp, uint64_t &evals)
{
    Probe p(s->pivots, *q);
    qp.resize(s->pivots.n);
    for (size_t j = 0; j < s->pivots.n; j++)
        qp[j] = p.distance(j);
    evals += s->pivots.n;
    return true;
}

} // namespace

extern "C" {

int vs_sss_select(const vs_mspace *objects, double alpha, size_t max_pivots, size_t *pivots,
                  size_t *npivots, double *diameter, uint64_t *ndist)
{
    int st = vs_mspace_check(objects);
    if (st != VS_OK)
        return st;
    if (!(alpha > 0.0) || max_pivots == 0 || pivots == nullptr || npivots == nullptr)
        return VS_INVALID_ARGUMENT;
    *npivots = 0;
    if (diameter)
        *diameter = 0.0;
    const size_t n = objects->n;
    if (n == 0)
        return VS_OK;
    uint64_t evals = 0;
    // the diameter: two farthest-object sweeps
    double m = 0.0;
    size_t from = 0;
    for (int sweep = 0; sweep < 2; sweep++)
    {
        vs_mobject o = vs_mspace_object(objects, from);
        Probe p(*objects, o);
        size_t far = from;
        double best = -1.0;
        for (size_t i = 0; i < n; i++)
        {
            double d = p.distance(i);
            if (d > best)
            {
                best = d;
                far = i;
            }
        }
        evals += n;
        m = std::max(m, best);
        from = far;
    }
    double threshold = alpha * m;
    size_t np = 0;
    pivots[np++] = 0;
    for (size_t i = 1; i < n && np < max_pivots; i++)
    {
        vs_mobject x = vs_mspace_object(objects, i);
        Probe p(*objects, x);
        bool far = true;
        for (size_t j = 0; j < np && far; j++)
        {
            evals++;
            if (p.distance(pivots[j]) < threshold)
                far = false;
        }
        if (far)
            pivots[np++] = i;
    }
    *npivots = np;
    if (diameter)
        *diameter = m;
    if (ndist)
        *ndist += evals;
    return VS_OK;
}

int vs_sss_table(const vs_mspace *pivots, const vs_mspace *objects, vs_lc_tick_fn tick,
                 void *tick_arg, float *table, uint64_t *ndist)
{
    if (pivots == nullptr || objects == nullptr || (table == nullptr && objects->n > 0))
        return VS_INVALID_ARGUMENT;
    const size_t np = pivots->n;
    for (size_t i = 0; i < objects->n; i++)
    {
        if (tick != nullptr && i % 1024 == 1023 && tick(tick_arg, i))
            return VS_CANCELLED;
        vs_mobject x = vs_mspace_object(objects, i);
        Probe p(*pivots, x);
        for (size_t j = 0; j < np; j++)
            table[i * np + j] = static_cast<float>(p.distance(j));
    }
    if (ndist)
        *ndist += objects->n * np;
    return VS_OK;
}

int vs_sss_range(const vs_sss *s, const vs_mobject *q, double radius, vs_lc_tick_fn tick,
                 void *tick_arg, vs_mhits *hits, uint64_t *ndist)
{
    if (s == nullptr || q == nullptr || hits == nullptr || std::isnan(radius))
        return VS_INVALID_ARGUMENT;
    try
    {
        uint64_t evals = 0;
        std::vector<double> qp;
        query_pivots(s, q, qp, evals);
        const size_t np = s->pivots.n;
        Probe p(s->objects, *q);
        int st = VS_OK;
        for (size_t i = 0; i < s->objects.n; i++)
        {
            if (tick != nullptr && i % 4096 == 4095 && tick(tick_arg, i))
            {
                st = VS_CANCELLED;
                break;
            }
            const float *row = s->table + i * np;
            if (discarded(s->objects, row, qp.data(), np, radius))
                continue; // by a pivot
            double d = p.distance(i, radius);
            evals++;
            if (d <= radius && object_id(s->objects, i) >= 0 &&
                !push_hit(hits, object_id(s->objects, i), d))
            {
                st = VS_OUT_OF_MEMORY;
                break;
            }
        }
        if (ndist)
            *ndist += evals;
        return st;
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

int vs_sss_knn(const vs_sss *s, const vs_mobject *q, size_t k, vs_lc_tick_fn tick, void *tick_arg,
               int64_t *ids, double *distances, size_t *count, uint64_t *ndist)
{
    if (s == nullptr || q == nullptr || count == nullptr || (k > 0 && (!ids || !distances)))
        return VS_INVALID_ARGUMENT;
    *count = 0;
    if (k == 0)
        return VS_OK;
    try
    {
        uint64_t evals = 0;
        std::vector<double> qp;
        query_pivots(s, q, qp, evals);
        const size_t np = s->pivots.n;
        const size_t n = s->objects.n;
        // objects by lower bound
        std::vector<std::pair<double, size_t>> order(n);
        for (size_t i = 0; i < n; i++)
        {
            const float *row = s->table + i * np;
            double lb = lower_bound(row, qp.data(), np);
            order[i] = {lb - row_slack(s->objects, row, qp.data(), np, lb), i};
        }
        std::sort(order.begin(), order.end());
        Probe p(s->objects, *q);
        std::priority_queue<Hit> best;
        for (size_t t = 0; t < n; t++)
        {
            if (tick != nullptr && t % 4096 == 4095 && tick(tick_arg, t))
                return VS_CANCELLED;
            double r = best.size() < k ? kInf : best.top().d;
            if (order[t].first > r)
                break; // every later object is farther than the k-th best
            size_t i = order[t].second;
            int64_t id = object_id(s->objects, i);
            if (id < 0)
                continue;
            double d = p.distance(i, r);
            evals++;
            Hit h{d, id};
            if (best.size() < k)
                best.push(h);
            else if (h < best.top())
            {
                best.pop();
                best.push(h);
            }
        }
        size_t m = best.size();
        for (size_t i = m; i-- > 0;)
        {
            ids[i] = best.top().id;
            distances[i] = best.top().d;
            best.pop();
        }
        *count = m;
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

} // extern "C"
