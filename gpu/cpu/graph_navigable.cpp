// The vs_graph build's navigability pass (vsearch/graph.h: vs_graph_link_unfound): every node is
// searched for, with its own vector as the query, over the graph from the start nodes; a node the
// search does not reach is linked from the nearest nodes the search found, and to them.  A graph
// pruned from exact kNN lists keeps each row's edges inside its cluster, so a search that starts
// in another cluster can stall at its rim; the search for a node of such a cluster ends exactly at
// that rim, and the new edges lead from there into the cluster (Vamana and NSG add edges from
// where a search for the node went, for the same reason).
//
// Determinism: nodes go in fixed blocks; a block's searches run on the backend's threads over the
// graph as the previous blocks left it, and its links are applied afterwards on the calling
// thread in node order, so the result depends on the arguments only (not the thread count; the
// SIMD kernel the machine's CPU selects is part of the distance, as in the index's own scans).
//
// Cost: a search measures every start node (a thousand at a million rows) before it walks a few
// hundred nodes; a thread's chunk of queries measures only the starts that can be in its beam
// (graph_starts.h).  The walk fetches the vectors of a node's neighbours a few measurements ahead.
#include "cpu/cpu_graph.h"

#include "cpu/graph_starts.h"
#include "cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace vs {
namespace {

constexpr uint32_t kNone = VS_GRAPH_NONE;
constexpr size_t kBlock = 1024; // nodes searched against one state of the graph
constexpr size_t kChunk = 8;    // searches a thread takes at a time (and multiplies at once)

struct Item
{
    float key;
    uint32_t node;
};

inline bool nearer(const Item &a, const Item &b)
{
    return a.key < b.key || (a.key == b.key && a.node < b.node);
}

// One thread's search state, reused from search to search.
struct Searcher
{
    std::vector<uint8_t> visited; // n; the starts stay marked (every search measures them first)
    std::vector<uint32_t> touched;
    std::vector<Item> cand, beam; // heaps: cand nearest on top, beam farthest on top
    std::vector<uint32_t> next;   // the neighbours a step measures
    StartScratch starts;
};

// The beam search of graph.cpp (starts first, expand the nearest candidate, stop when it is
// farther than the worst of a full beam) for node `self`'s vector, navigating as the index's scans
// in the backend do, by the SIMD float distance (vs_distance_f32: a few ulps from the exact one,
// several times cheaper); stops as soon as it measures self.  Returns true when it did; otherwise
// `found` gets the beam, nearest first.  start_values: self's products with the starts
// (dot_block) when st.blocked, else null.
bool search_for(const uint32_t *graph, size_t n, size_t degree, const float *vectors, size_t dim,
                vs_metric metric, const GraphStarts &st, float *start_values, double xnorm,
                size_t width, uint32_t self, Searcher &s, std::vector<uint32_t> &found)
{
    // a start is the first thing a search measures: a start finds itself
    if (s.visited[self])
        return true;
    const float *query = vectors + static_cast<size_t>(self) * dim;
    auto far_first = [](const Item &a, const Item &b) { return nearer(b, a); };
    auto near_first = [](const Item &a, const Item &b) { return nearer(a, b); };
    s.cand.clear();
    s.beam.clear();
    bool hit = false;
    auto measure = [&](uint32_t v) {
        const double d = vs_distance_f32(metric, query, vectors + static_cast<size_t>(v) * dim, dim);
        return Item{std::isnan(d) ? std::numeric_limits<float>::infinity() : static_cast<float>(d), v};
    };
    auto offer = [&](const Item &it) {
        if (s.beam.size() >= width && !nearer(it, s.beam.front()))
            return;
        s.cand.push_back(it);
        std::push_heap(s.cand.begin(), s.cand.end(), far_first);
        s.beam.push_back(it);
        std::push_heap(s.beam.begin(), s.beam.end(), near_first);
        if (s.beam.size() > width)
        {
            std::pop_heap(s.beam.begin(), s.beam.end(), near_first);
            s.beam.pop_back();
        }
    };
    // The starts, in their order (only the width nearest stay in the beam, whatever the order).
    if (start_values && st.nodes.size() > width &&
        start_candidates(start_values, st, width, xnorm, s.starts))
        for (uint32_t j : s.starts.picked)
            offer(measure(st.nodes[j]));
    else
        for (uint32_t v : st.nodes)
            offer(measure(v));
    // a vector is fetched `ahead` measurements before its turn (each is a random row)
    constexpr size_t ahead = 4;
    const size_t lines = (dim * sizeof(float) + 63) / 64;
    auto prefetch = [&](uint32_t v) {
        const char *at = reinterpret_cast<const char *>(vectors + static_cast<size_t>(v) * dim);
        for (size_t l = 0; l < lines; l++)
            __builtin_prefetch(at + 64 * l);
    };
    while (!hit && !s.cand.empty())
    {
        const Item u = s.cand.front();
        std::pop_heap(s.cand.begin(), s.cand.end(), far_first);
        s.cand.pop_back();
        if (s.beam.size() >= width && nearer(s.beam.front(), u))
            break;
        const uint32_t *nb = graph + static_cast<size_t>(u.node) * degree;
        s.next.clear();
        for (size_t i = 0; i < degree; i++)
        {
            const uint32_t v = nb[i];
            if (v == kNone || v >= n || s.visited[v])
                continue;
            s.visited[v] = 1;
            s.touched.push_back(v);
            if (s.next.size() < ahead)
                prefetch(v);
            s.next.push_back(v);
        }
        for (size_t i = 0; i < s.next.size() && !hit; i++)
        {
            if (i + ahead < s.next.size())
                prefetch(s.next[i + ahead]);
            hit = s.next[i] == self;
            offer(measure(s.next[i]));
        }
    }
    for (uint32_t v : s.touched)
        s.visited[v] = 0;
    s.touched.clear();
    if (hit)
        return true;
    std::sort(s.beam.begin(), s.beam.end(), near_first);
    found.clear();
    for (const Item &it : s.beam)
        found.push_back(it.node);
    return false;
}

// Puts the edge from -> to into from's list: an empty slot (the last one), else the last slot of
// the second half whose target keeps another in-edge (the rule of the build's reachability
// links, which keeps the first half, the best pruned neighbours, and every node's last in-edge).
// False when the edge is there already or no slot qualifies.
bool add_edge(uint32_t *graph, size_t degree, std::vector<int32_t> &indeg, uint32_t from,
              uint32_t to)
{
    uint32_t *list = graph + static_cast<size_t>(from) * degree;
    if (from == to || std::find(list, list + degree, to) != list + degree)
        return false;
    const size_t half = (degree + 1) / 2;
    size_t slot = degree;
    for (size_t p = degree; p-- > 0 && slot == degree;)
        if (list[p] == kNone)
            slot = p;
    for (size_t p = degree; p-- > half && slot == degree;)
        if (indeg[list[p]] > 1)
            slot = p;
    if (slot == degree)
        return false;
    if (list[slot] != kNone)
        indeg[list[slot]]--;
    list[slot] = to;
    indeg[to]++;
    return true;
}

} // namespace

void graph_link_unfound(uint32_t *out, size_t n, size_t degree, const float *vectors, size_t dim,
                        const vs_graph_link_params &p, vs_graph_link_info *info, int threads,
                        const BackendConfig &cfg)
{
    for (size_t i = 0; i < n * degree; i++)
        if (out[i] != kNone && out[i] >= n)
            throw Error(VS_INVALID_ARGUMENT, "a neighbour list names a node out of range");
    // a copy, written back at the end: a cancelled or failed call leaves the graph as it was
    std::vector<uint32_t> copy(out, out + n * degree);
    uint32_t *graph = copy.data();
    std::vector<int32_t> indeg(n, 0);
    for (size_t i = 0; i < n * degree; i++)
        if (graph[i] != kNone)
            indeg[graph[i]]++;

    // the search's distance is vs_distance_f32: for L2SQ and IP a float sum (gemm.h's bound)
    const GraphStarts st(p.starts, p.nstarts, n, nullptr, vectors, dim, p.metric,
                         p.metric == VS_METRIC_L2SQ || p.metric == VS_METRIC_IP
                             ? float_sum_error(dim)
                             : 0.0,
                         p.width);

    Crew crew(std::max(threads, 1));
    std::vector<Searcher> searchers(static_cast<size_t>(crew.size()));
    for (Searcher &s : searchers)
    {
        s.visited.assign(n, 0);
        for (uint32_t v : st.nodes)
            s.visited[v] = 1;
        s.starts.reserve(st, kChunk);
    }
    std::vector<uint8_t> hit(kBlock);
    std::vector<std::vector<uint32_t>> found(kBlock);
    uint64_t unfound = 0, linked = 0;
    for (size_t b0 = 0; b0 < n; b0 += kBlock)
    {
        if (cfg.cancel && cfg.cancel(cfg.cancel_arg))
            throw Error(VS_CANCELLED, "cancelled");
        const size_t b1 = std::min(n, b0 + kBlock);
        std::atomic<size_t> next{b0};
        crew.run([&](int t) {
            Searcher &s = searchers[static_cast<size_t>(t)];
            const size_t ld = st.blocked ? st.rows.padded() : 0;
            for (;;)
            {
                const size_t c0 = next.fetch_add(kChunk);
                if (c0 >= b1)
                    return;
                const size_t c1 = std::min(b1, c0 + kChunk);
                if (st.blocked)
                {
                    dot_block(vectors + c0 * dim, dim, c1 - c0, st.rows, s.starts.values.data(),
                              ld);
                    row_norms(vectors + c0 * dim, dim, c1 - c0, dim, s.starts.xnorms.data());
                }
                for (size_t v = c0; v < c1; v++)
                    hit[v - b0] = search_for(
                        graph, n, degree, vectors, dim, p.metric, st,
                        st.blocked ? s.starts.values.data() + (v - c0) * ld : nullptr,
                        st.blocked ? s.starts.xnorms[v - c0] : 0.0, p.width,
                        static_cast<uint32_t>(v), s, found[v - b0]);
            }
        });
        // the links, in node order: into each unfound node from the nearest nodes its search
        // found (trying farther ones when a list has no slot to give), and back
        for (size_t v = b0; v < b1; v++)
        {
            if (hit[v - b0])
                continue;
            unfound++;
            size_t made = 0;
            for (uint32_t w : found[v - b0])
            {
                if (made >= p.links)
                    break;
                if (!add_edge(graph, degree, indeg, w, static_cast<uint32_t>(v)))
                    continue;
                made++;
                linked++;
                linked += add_edge(graph, degree, indeg, static_cast<uint32_t>(v), w);
            }
        }
    }
    std::copy(copy.begin(), copy.end(), out);
    if (info)
    {
        info->unfound = unfound;
        info->linked = linked;
    }
}

} // namespace vs
