// The start nodes of a batch of graph searches, cut by blocked products (graph_starts.h).
#include "cpu/graph_starts.h"

#include <algorithm>

namespace vs {

GraphStarts::GraphStarts(const uint32_t *starts, size_t nstarts, size_t n, const uint8_t *live,
                         const float *vectors, size_t dim, vs_metric metric, double err,
                         size_t width)
{
    std::vector<uint8_t> seen(n, 0);
    for (size_t i = 0; i < nstarts; i++)
    {
        const uint32_t v = starts[i];
        if (v < n && !seen[v] && (live == nullptr || live[v] != 0))
        {
            seen[v] = 1;
            nodes.push_back(v);
        }
    }
    blocked = err > 0 && nodes.size() > width;
    if (!blocked)
        return;
    std::vector<const float *> at(nodes.size());
    for (size_t j = 0; j < nodes.size(); j++)
        at[j] = vectors + static_cast<size_t>(nodes[j]) * dim;
    rows.pack_rows(at.data(), nodes.size(), dim);
    kind = metric == VS_METRIC_IP ? NearestKind::IP : NearestKind::L2;
    ref_err = err;
}

void StartScratch::reserve(const GraphStarts &st, size_t chunk)
{
    if (!st.blocked)
        return;
    values.resize(chunk * st.rows.padded());
    xnorms.resize(chunk);
    below.resize(st.rows.padded());
}

bool start_candidates(float *v, const GraphStarts &st, size_t width, double xnorm,
                      StartScratch &s)
{
    const size_t k = st.nodes.size();
    if (!nearest_values_finite(xnorm, st.rows.max_norm()) ||
        nearest_candidates(v, st.rows.sqnorms(), k, st.kind, 0.0, s.below.data()) == 0)
        return false;
    // the width-th smallest value (a max-heap of the width smallest)
    s.smallest.assign(v, v + width);
    std::make_heap(s.smallest.begin(), s.smallest.end());
    for (size_t j = width; j < k; j++)
        if (v[j] < s.smallest.front())
        {
            std::pop_heap(s.smallest.begin(), s.smallest.end());
            s.smallest.back() = v[j];
            std::push_heap(s.smallest.begin(), s.smallest.end());
        }
    const double e =
        nearest_row_error(st.kind, st.rows.dim(), st.ref_err, xnorm, st.rows.max_norm());
    const double limit = static_cast<double>(s.smallest.front()) + 2.0 * e;
    s.picked.clear();
    for (size_t j = 0; j < k; j++)
        if (static_cast<double>(v[j]) <= limit)
            s.picked.push_back(static_cast<uint32_t>(j));
    return true;
}

} // namespace vs
