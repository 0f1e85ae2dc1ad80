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

GraphStarts::GraphStarts(const float *start_rows, const uint8_t *can_be_result, size_t nstarts,
                         size_t dim, vs_metric metric, double err, size_t width)
    : results(can_be_result, can_be_result + nstarts)
{
    nodes.resize(nstarts);
    for (size_t j = 0; j < nstarts; j++)
        nodes[j] = static_cast<uint32_t>(j);
    const size_t nresults = static_cast<size_t>(
        std::count_if(results.begin(), results.end(), [](uint8_t r) { return r != 0; }));
    blocked = err > 0 && nresults > width;
    if (!blocked)
        return;
    rows.pack(start_rows, nstarts, dim, dim);
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
    every.resize(st.nodes.size());
    for (size_t j = 0; j < every.size(); j++)
        every[j] = static_cast<uint32_t>(j);
}

bool start_candidates(float *v, const GraphStarts &st, size_t width, double xnorm,
                      StartScratch &s)
{
    const size_t k = st.nodes.size();
    if (!nearest_values_finite(xnorm, st.rows.max_norm()) ||
        nearest_candidates(v, st.rows.sqnorms(), k, st.kind, 0.0, s.below.data()) == 0)
        return false;
    // the width-th smallest value of the starts that can be results (a max-heap of the width
    // smallest)
    s.smallest.clear();
    for (size_t j = 0; j < k; j++)
    {
        if (!st.results.empty() && st.results[j] == 0)
            continue;
        if (s.smallest.size() < width)
        {
            s.smallest.push_back(v[j]);
            std::push_heap(s.smallest.begin(), s.smallest.end());
        }
        else if (v[j] < s.smallest.front())
        {
            std::pop_heap(s.smallest.begin(), s.smallest.end());
            s.smallest.back() = v[j];
            std::push_heap(s.smallest.begin(), s.smallest.end());
        }
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

// ---- the C API (vsearch/graph.h) ------------------------------------------------------------

struct vs_graph_start_cut
{
    vs::GraphStarts starts;
    size_t width;
};

extern "C" vs_graph_start_cut *vs_graph_start_cut_create(vs_metric metric, const float *rows,
                                                         const uint8_t *results, size_t nstarts,
                                                         size_t dim, size_t width)
{
    if ((metric != VS_METRIC_L2SQ && metric != VS_METRIC_IP) || rows == nullptr ||
        results == nullptr || dim == 0 || width == 0)
        return nullptr;
    try
    {
        // vs_distance_f32 under L2SQ and IP: a float sum (gemm.h's bound)
        auto *cut = new vs_graph_start_cut{
            vs::GraphStarts(rows, results, nstarts, dim, metric, vs::float_sum_error(dim), width),
            width};
        if (!cut->starts.blocked)
        {
            delete cut;
            return nullptr;
        }
        return cut;
    }
    catch (...)
    {
        return nullptr;
    }
}

extern "C" int vs_graph_start_cut_pick(const vs_graph_start_cut *cut, const float *queries,
                                       size_t nq, uint32_t *out, size_t *counts)
{
    if (cut == nullptr || (nq > 0 && (queries == nullptr || out == nullptr || counts == nullptr)))
        return VS_INVALID_ARGUMENT;
    try
    {
        const size_t n = cut->starts.nodes.size();
        vs::StartScratch scratch;
        scratch.reserve(cut->starts, vs::kStartChunk);
        vs::pick_starts(cut->starts, cut->width, queries, nq, scratch,
                        [&](size_t q, const uint32_t *positions, size_t count) {
                            std::copy(positions, positions + count, out + q * n);
                            counts[q] = count;
                        });
        return VS_OK;
    }
    catch (...)
    {
        return VS_OUT_OF_MEMORY;
    }
}

extern "C" void vs_graph_start_cut_destroy(vs_graph_start_cut *cut) { delete cut; }
