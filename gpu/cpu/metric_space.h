// Shared pieces of the metric-space indexes on host arrays (lc.cpp, sss.cpp): the distance of a
// fixed object (query, center, pivot) to the objects of a space, result lists.
#pragma once

#include "vsearch/lc.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace vs::metric {

constexpr double kInf = std::numeric_limits<double>::infinity();


// The SQL operators' values (extension/search.c, vs_operator_distance): the engine's exact
// distance rounded to float once, L2 the root of the squared sum in double.
inline double vector_distance(vs_metric metric, const float *a, const float *b, size_t dim)
{
    if (metric == VS_METRIC_L2)
        return std::sqrt(static_cast<double>(
            static_cast<float>(vs_exact_distance_f32(VS_METRIC_L2SQ, a, b, dim))));
    return static_cast<double>(static_cast<float>(vs_exact_distance_f32(metric, a, b, dim)));
}

// One side fixed (a query, a center) against many objects; strings keep Myers' masks.
class Probe
{
public:
    Probe(const vs_mspace &space, const vs_mobject &q) : space_(space), q_(q)
    {
        if (space.kind == VS_MSPACE_STRINGS)
            vs_edit_prepare(&pattern_, q.chars, q.len);
    }

    // Exact when the distance is <= bound (bound is a radius: strings floor it); otherwise some
    // value > bound.
    double distance(size_t i, double bound = kInf) const
    {
        if (space_.kind == VS_MSPACE_VECTORS)
            return vector_distance(space_.metric, q_.vector, space_.vectors + i * space_.dim,
                                   space_.dim);
        return string_distance(space_.chars + space_.offsets[i],
                               space_.offsets[i + 1] - space_.offsets[i], bound);
    }

    double distance_to(const vs_mobject &o, double bound = kInf) const
    {
        if (space_.kind == VS_MSPACE_VECTORS)
            return vector_distance(space_.metric, q_.vector, o.vector, space_.dim);
        return string_distance(o.chars, o.len, bound);
    }

    // Slack of a pruning test on distances of this magnitude (0 for exact integer distances).
    double slack(double magnitude) const
    {
        return space_.kind == VS_MSPACE_VECTORS ? VS_LC_SLACK * magnitude : 0.0;
    }

private:
    double string_distance(const uint32_t *t, size_t nt, double bound) const
    {
        size_t b = SIZE_MAX;
        if (bound < 0)
            b = 0; // nothing can be within; any answer > 0 or an exact 0 will do
        else if (bound < 1e18)
            b = static_cast<size_t>(std::floor(bound));
        size_t d = vs_edit_pattern_distance(&pattern_, t, nt, b);
        return static_cast<double>(d);
    }

    const vs_mspace &space_;
    vs_mobject q_;
    vs_edit_pattern pattern_;
};

inline int64_t object_id(const vs_mspace &s, size_t i)
{
    return s.ids ? s.ids[i] : static_cast<int64_t>(i);
}

inline bool push_hit(vs_mhits *hits, int64_t id, double d)
{
    if (hits->n == hits->cap)
    {
        size_t cap = std::max<size_t>(64, hits->cap * 2);
        int64_t *ids = static_cast<int64_t *>(std::realloc(hits->ids, sizeof(int64_t) * cap));
        if (ids == nullptr)
            return false;
        hits->ids = ids;
        double *ds = static_cast<double *>(std::realloc(hits->distances, sizeof(double) * cap));
        if (ds == nullptr)
            return false;
        hits->distances = ds;
        hits->cap = cap;
    }
    hits->ids[hits->n] = id;
    hits->distances[hits->n] = d;
    hits->n++;
    return true;
}

struct Hit
{
    double d;
    int64_t id;
    bool operator<(const Hit &o) const { return d < o.d || (d == o.d && id < o.id); }
};

} // namespace vs::metric
