// Beam search on a proximity graph in host arrays (vsearch/graph.h): the reference of the vs_graph
// index's search, run by the CPU backend's graph objects (cpu_graph.cpp) and matched by the CUDA
// kernel (cuda/graph_cuda.cu); navigated by exact distances, or by PQ estimates for compressed
// objects (graph_search_pq).
#include "cpu/graph_search.h"

#include "engine/graph_pq.h"
#include "vsearch/graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <queue>
#include <vector>

namespace {

struct Item
{
    float key; // the distance, NaN as +inf
    uint32_t node;
};

// a before b: nearer, ties by node number
inline bool nearer(const Item &a, const Item &b)
{
    return a.key < b.key || (a.key == b.key && a.node < b.node);
}

struct Farther // for a min-heap of candidates (std::priority_queue keeps the "largest" on top)
{
    bool operator()(const Item &a, const Item &b) const { return nearer(b, a); }
};

struct Nearer // for a max-heap of the beam
{
    bool operator()(const Item &a, const Item &b) const { return nearer(a, b); }
};

inline float engine_distance(vs_metric metric, const float *a, const float *b, size_t dim)
{
    return static_cast<float>(vs_exact_distance_f32(metric, a, b, dim));
}

inline float key_of(float d)
{
    return std::isnan(d) ? std::numeric_limits<float>::infinity() : d;
}

struct Hit
{
    float d;
    int64_t id;
};

inline bool hit_before(const Hit &a, const Hit &b)
{
    const bool na = std::isnan(a.d), nb = std::isnan(b.d);
    if (na != nb)
        return nb;
    if (!na && a.d != b.d)
        return a.d < b.d;
    return a.id < b.id;
}

// One query's search; nav(v) is node v's navigation distance (NaN allowed), the results' distances
// are the exact ones.
template <typename Nav>
void search_one(const vs_graph_arrays &g, const vs_graph_search_params &p, const float *query,
                size_t k, Nav &&nav, std::vector<uint8_t> &visited, std::vector<uint32_t> &touched,
                int64_t *ids, float *dists, int64_t *count, uint64_t &ndist)
{
    const size_t ef = std::max(p.ef, k);
    std::priority_queue<Item, std::vector<Item>, Farther> cand;
    std::priority_queue<Item, std::vector<Item>, Nearer> beam;
    auto is_live = [&](uint32_t v) { return g.live == nullptr || g.live[v] != 0; };
    auto visit = [&](uint32_t v) {
        visited[v] = 1;
        touched.push_back(v);
        ndist++;
        return Item{key_of(nav(v)), v};
    };

    for (size_t s = 0; s < p.nstarts; s++)
    {
        const uint32_t v = p.starts[s];
        if (v >= g.n || visited[v] || !is_live(v))
            continue;
        const Item it = visit(v);
        cand.push(it);
        beam.push(it);
        if (beam.size() > ef)
            beam.pop();
    }
    // A step expands the `expand` nearest candidates still in the beam (a candidate farther than
    // the worst of a full beam was pushed out of it, and so was every later one: the worst only
    // gets nearer), all picked before the beam changes.
    const size_t expand = std::max<size_t>(p.expand, 1);
    std::vector<uint32_t> picked;
    picked.reserve(expand);
    for (;;)
    {
        picked.clear();
        while (picked.size() < expand && !cand.empty() &&
               !(beam.size() >= ef && nearer(beam.top(), cand.top())))
        {
            picked.push_back(cand.top().node);
            cand.pop();
        }
        if (picked.empty())
            break;
        for (uint32_t u : picked)
        {
            const uint32_t *nb = g.neighbors + static_cast<size_t>(u) * g.degree;
            for (size_t i = 0; i < g.degree; i++)
            {
                const uint32_t v = nb[i];
                if (v == VS_GRAPH_NONE || v >= g.n || visited[v] || !is_live(v))
                    continue;
                const Item it = visit(v);
                if (beam.size() >= ef && !nearer(it, beam.top()))
                    continue;
                cand.push(it);
                beam.push(it);
                if (beam.size() > ef)
                    beam.pop();
            }
        }
    }

    std::vector<Hit> hits;
    hits.reserve(beam.size());
    for (; !beam.empty(); beam.pop())
    {
        const uint32_t v = beam.top().node;
        hits.push_back({engine_distance(p.metric, query, g.vectors + static_cast<size_t>(v) * g.dim,
                                        g.dim),
                        g.ids ? g.ids[v] : static_cast<int64_t>(v)});
    }
    std::sort(hits.begin(), hits.end(), hit_before);
    const size_t m = std::min(k, hits.size());
    for (size_t i = 0; i < k; i++)
    {
        ids[i] = i < m ? hits[i].id : -1;
        dists[i] = i < m ? hits[i].d : std::numeric_limits<float>::infinity();
    }
    if (count)
        *count = static_cast<int64_t>(m);
    for (uint32_t v : touched)
        visited[v] = 0;
    touched.clear();
}

} // namespace

extern "C" int vs_graph_search(const vs_graph_arrays *graph, const vs_graph_search_params *params,
                               const float *queries, size_t nq, size_t k, int64_t *out_ids,
                               float *out_distances, int64_t *out_counts, uint64_t *ndist)
{
    if (graph == nullptr || params == nullptr || out_ids == nullptr || out_distances == nullptr)
        return VS_INVALID_ARGUMENT;
    const vs_graph_arrays &g = *graph;
    const vs_graph_search_params &p = *params;
    if (g.dim == 0 || g.degree == 0 || k == 0 || p.ef == 0 || p.expand > VS_GRAPH_MAX_EXPAND ||
        (g.n > 0 && (g.vectors == nullptr || g.neighbors == nullptr)) ||
        (nq > 0 && queries == nullptr) || (p.nstarts > 0 && p.starts == nullptr) ||
        g.n >= VS_GRAPH_NONE)
        return VS_INVALID_ARGUMENT;
    if (p.metric != VS_METRIC_L2SQ && p.metric != VS_METRIC_L2 && p.metric != VS_METRIC_IP &&
        p.metric != VS_METRIC_COSINE)
        return VS_INVALID_ARGUMENT;
    try
    {
        std::vector<uint8_t> visited(g.n, 0);
        std::vector<uint32_t> touched;
        uint64_t nd = 0;
        for (size_t q = 0; q < nq; q++)
        {
            const float *query = queries + q * g.dim;
            auto exact = [&](uint32_t v) {
                return engine_distance(p.metric, query, g.vectors + static_cast<size_t>(v) * g.dim,
                                       g.dim);
            };
            search_one(g, p, query, k, exact, visited, touched, out_ids + q * k,
                       out_distances + q * k, out_counts ? out_counts + q : nullptr, nd);
        }
        if (ndist)
            *ndist = nd;
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

namespace vs {

void graph_search_one(const vs_graph_arrays &g, const vs_graph_search_params &p,
                      const float *query, size_t k, std::vector<uint8_t> &visited,
                      std::vector<uint32_t> &touched, int64_t *ids, float *dists, int64_t *count)
{
    auto exact = [&](uint32_t v) {
        return engine_distance(p.metric, query, g.vectors + static_cast<size_t>(v) * g.dim, g.dim);
    };
    uint64_t nd = 0;
    search_one(g, p, query, k, exact, visited, touched, ids, dists, count, nd);
}

void graph_search_pq(const vs_graph_arrays &g, const GraphPqView &pq,
                     const vs_graph_search_params &p, const float *queries, size_t nq, size_t k,
                     int64_t *out_ids, float *out_distances, int64_t *out_counts)
{
    const bool inner = graph_pq_inner(p.metric);
    const int dsub = static_cast<int>(g.dim / pq.m), m = static_cast<int>(pq.m);
    std::vector<uint8_t> visited(g.n, 0);
    std::vector<uint32_t> touched;
    std::vector<float> x(g.dim), table(pq.m * VS_GRAPH_PQ_KSUB);
    uint64_t nd = 0;
    for (size_t q = 0; q < nq; q++)
    {
        const float *query = queries + q * g.dim;
        const double inv = graph_pq_unit(p.metric) ? graph_pq_inv_norm(query, int(g.dim)) : 0.0;
        for (size_t i = 0; i < g.dim; i++)
            x[i] = graph_pq_residual(p.metric, query, inv, pq.center, static_cast<int>(i));
        for (size_t e = 0; e < table.size(); e++)
            table[e] = graph_pq_table_entry(inner, x.data(), pq.codebooks, dsub, static_cast<int>(e));
        auto estimate = [&](uint32_t v) {
            const uint8_t *code = pq.codes + static_cast<size_t>(v) * pq.m;
            float acc = 0.0f;
            for (int j = 0; j < m; j++)
                acc = pq_add(acc, table[static_cast<size_t>(j) * VS_GRAPH_PQ_KSUB + code[j]]);
            return graph_pq_key_distance(inner, acc);
        };
        search_one(g, p, query, k, estimate, visited, touched, out_ids + q * k,
                   out_distances + q * k, out_counts ? out_counts + q : nullptr, nd);
    }
}

} // namespace vs
