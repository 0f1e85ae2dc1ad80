// The start nodes of a batch of graph searches, cut by blocked products (cpu/gemm.h).
//
// A search measures every start node (a thousand at a million rows) before it walks a few hundred
// nodes.  Of the starts only the beam's width nearest stay in its beam, and a start outside them
// is never expanded (it is farther than the beam's worst, which only gets nearer) nor enters the
// beam later, so the search is the same when it measures just those.  A chunk of queries takes
// its products with all starts as one blocked product, and a rigorous bound on their rounding
// names the few starts that can be among the width nearest; only they are measured with the
// search's own distance.  Used by the build's navigability pass (graph_navigable.cpp, navigating
// by the SIMD float distance) and the CPU graph objects' exact search (cpu_graph.cpp).
#ifndef VSEARCH_CPU_GRAPH_STARTS_H
#define VSEARCH_CPU_GRAPH_STARTS_H

#include "cpu/gemm.h"
#include "vsearch/graph.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs {

// The start nodes as a search takes them: in range, live (live null: every node), each once, in
// the given order; packed for the blocked products when there are more than `width` and ref_err
// > 0 bounds the search distance's own rounding (gemm.h, NearestKind: L2 for the L2 metrics, IP
// for IP; the caller's distance must have such a bound, 0 when it has none).
struct GraphStarts
{
    GraphStarts(const uint32_t *starts, size_t nstarts, size_t n, const uint8_t *live,
                const float *vectors, size_t dim, vs_metric metric, double ref_err, size_t width);
    // Starts given as rows (nodes 0 .. nstarts - 1), of which only those with results[j] != 0
    // can be results (a search navigates through the others): the cut keeps every start that can
    // be nearer than the width-th nearest of those, and is made when there are more than width.
    GraphStarts(const float *rows, const uint8_t *results, size_t nstarts, size_t dim,
                vs_metric metric, double ref_err, size_t width);

    std::vector<uint32_t> nodes;
    std::vector<uint8_t> results; // empty: every start can be a result
    bool blocked = false;
    NearestKind kind = NearestKind::L2;
    double ref_err = 0;
    PackedRows rows;
};

constexpr size_t kStartChunk = 8; // queries multiplied with the starts at once (pick_starts)

// One thread's scratch for start_candidates (sized by reserve, reused from query to query).
struct StartScratch
{
    std::vector<float> values; // products of a chunk of queries with the starts (dot_block)
    std::vector<double> xnorms;
    std::vector<uint32_t> below, picked;
    std::vector<float> smallest;
    std::vector<uint32_t> every; // 0 .. st.nodes.size() - 1 (pick_starts)

    void reserve(const GraphStarts &st, size_t chunk);
};

// The starts (positions in st.nodes, ascending) that can be among the `width` nearest of a query
// of norm xnorm (or nearer than the width-th nearest result), into s.picked, from v, its products
// with the starts (dot_block; turned in place into nearest_rows' values, each within e of the
// search's distance to start j up to a term of the query alone): a start whose value exceeds the
// width-th smallest (of the results) by more than 2e is farther than `width` of them.  False when
// a value is not finite: then every start is measured.
bool start_candidates(float *v, const GraphStarts &st, size_t width, double xnorm,
                      StartScratch &s);

// For each of nq queries x (dim floats each; st.blocked, s reserved for kStartChunk):
// f(q, positions, count), the positions in st.nodes (ascending) of the starts query q needs:
// start_candidates' picks, or every start when its values are not finite.
template <typename F>
void pick_starts(const GraphStarts &st, size_t width, const float *x, size_t nq, StartScratch &s,
                 F &&f)
{
    const size_t dim = st.rows.dim(), ld = st.rows.padded();
    for (size_t c0 = 0; c0 < nq; c0 += kStartChunk)
    {
        const size_t c1 = std::min(nq, c0 + kStartChunk);
        dot_block(x + c0 * dim, dim, c1 - c0, st.rows, s.values.data(), ld);
        row_norms(x + c0 * dim, dim, c1 - c0, dim, s.xnorms.data());
        for (size_t q = c0; q < c1; q++)
        {
            if (start_candidates(s.values.data() + (q - c0) * ld, st, width, s.xnorms[q - c0], s))
                f(q, s.picked.data(), s.picked.size());
            else
                f(q, s.every.data(), s.every.size());
        }
    }
}

} // namespace vs

#endif
