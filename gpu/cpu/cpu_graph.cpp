// Graph objects on the CPU: host copies of the arrays, searched by vs_graph_search's search
// (graph.cpp) on blocks of queries handed to the backend's threads; compressed objects add the
// codes and the quantizer and are searched by graph_search_pq.  A batch under an L2 metric or IP
// measures of its many start nodes only those that can be in a query's first beam
// (graph_starts.h): the same searches, so the same answers as vs_graph_search.  The answers do
// not depend on the thread count (each query is searched on its own).
#include "cpu/cpu_graph.h"

#include "cpu/graph_search.h"
#include "cpu/graph_starts.h"
#include "cpu/parallel.h"
#include "engine/exact.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace vs {
namespace {

constexpr size_t kStartMinQueries = 4; // fewer: packing the starts costs about what it saves

class CpuGraph final : public Graph
{
public:
    explicit CpuGraph(const vs_graph_arrays &a)
    {
        n_ = a.n;
        dim_ = a.dim;
        degree_ = a.degree;
        vectors_.assign(a.vectors, a.vectors + a.n * a.dim);
        neighbors_.assign(a.neighbors, a.neighbors + a.n * a.degree);
        if (a.live)
            live_.assign(a.live, a.live + a.n);
        if (a.ids)
            ids_.assign(a.ids, a.ids + a.n);
        memory_.device_bytes = vectors_.size() * sizeof(float) +
                               neighbors_.size() * sizeof(uint32_t) + live_.size() +
                               ids_.size() * sizeof(int64_t);
    }

    // A compressed object: the codes and quantizer count as the backend's memory, the rest as
    // host memory (vs_graph_compressed_memory's split, as the CUDA object holds it).
    CpuGraph(const vs_graph_arrays &a, const vs_graph_pq &pq, const uint8_t *codes) : CpuGraph(a)
    {
        pq_metric_ = pq.metric;
        codes_.assign(codes, codes + a.n * pq.m);
        center_.assign(pq.center, pq.center + a.dim);
        codebooks_.assign(pq.codebooks, pq.codebooks + VS_GRAPH_PQ_KSUB * a.dim);
        vs_graph_compressed_memory(a.n, a.dim, a.degree, pq.m, &memory_);
    }

    bool compressed() const { return memory_.pq_m > 0; }
    GraphPqView pq() const
    {
        return GraphPqView{memory_.pq_m, center_.data(), codebooks_.data(), codes_.data()};
    }

    vs_graph_arrays arrays() const
    {
        vs_graph_arrays a{};
        a.n = n_;
        a.dim = dim_;
        a.degree = degree_;
        a.vectors = vectors_.data();
        a.neighbors = neighbors_.data();
        a.live = live_.empty() ? nullptr : live_.data();
        a.ids = ids_.empty() ? nullptr : ids_.data();
        return a;
    }

private:
    std::vector<float> vectors_;
    std::vector<uint32_t> neighbors_;
    std::vector<uint8_t> live_;
    std::vector<int64_t> ids_;
    std::vector<uint8_t> codes_;
    std::vector<float> center_, codebooks_;
};

const CpuGraph &as_cpu_graph(const Graph *g)
{
    auto *c = dynamic_cast<const CpuGraph *>(g);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "graph object belongs to another backend");
    return *c;
}

// Queries q0 .. q1 of a search, each from the starts that can be in its first beam.
void search_block(const vs_graph_arrays &a, const vs_graph_search_params &params,
                  const GraphStarts &st, size_t width, const float *queries, size_t q0, size_t q1,
                  size_t k, int64_t *out_ids, float *out_dists, int64_t *out_counts)
{
    std::vector<uint8_t> visited(a.n, 0);
    std::vector<uint32_t> touched, subset;
    StartScratch scratch;
    scratch.reserve(st, kStartChunk);
    pick_starts(st, width, queries + q0 * a.dim, q1 - q0, scratch,
                [&](size_t i, const uint32_t *positions, size_t count) {
                    const size_t q = q0 + i;
                    subset.clear();
                    for (size_t j = 0; j < count; j++)
                        subset.push_back(st.nodes[positions[j]]);
                    vs_graph_search_params one = params;
                    one.starts = subset.data();
                    one.nstarts = subset.size();
                    graph_search_one(a, one, queries + q * a.dim, k, visited, touched,
                                     out_ids + q * k, out_dists + q * k,
                                     out_counts ? out_counts + q : nullptr);
                });
}

class CpuGraphBackend final : public GraphBackend
{
public:
    CpuGraphBackend(const BackendConfig &config, int threads) : cfg_(config), threads_(threads) {}

    Status create(const vs_graph_arrays &arrays, Graph **out) noexcept override
    {
        return guarded([&] { *out = new CpuGraph(arrays); });
    }

    Status create_compressed(const vs_graph_arrays &arrays, const vs_graph_pq &pq,
                             const uint8_t *codes, Graph **out) noexcept override
    {
        return guarded([&] { *out = new CpuGraph(arrays, pq, codes); });
    }

    Status search(const Graph *g, const vs_graph_search_params &params, const float *queries,
                  size_t nq, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts) noexcept override
    {
        return guarded([&] {
            const CpuGraph &cg = as_cpu_graph(g);
            const vs_graph_arrays a = cg.arrays();
            const size_t width = std::max(params.ef, k);
            std::optional<GraphStarts> starts;
            if (!cg.compressed() && nq >= kStartMinQueries && params.nstarts > width &&
                (params.metric == VS_METRIC_L2SQ || params.metric == VS_METRIC_L2 ||
                 params.metric == VS_METRIC_IP))
                starts.emplace(params.starts, params.nstarts, a.n, a.live, a.vectors, a.dim,
                               params.metric, kExactKeyError, width);
            // blocks of queries: each search clears a visited map of n bytes once per block
            const size_t blocks = std::min(nq, static_cast<size_t>(std::max(threads_, 1)) * 4);
            const size_t per = blocks ? (nq + blocks - 1) / blocks : 0;
            parallel_for(blocks, threads_, cfg_, [&](size_t b) {
                const size_t q0 = b * per, q1 = std::min(nq, q0 + per);
                if (q0 >= q1)
                    return;
                if (cg.compressed())
                {
                    graph_search_pq(a, cg.pq(), params, queries + q0 * a.dim, q1 - q0, k,
                                    out_ids + q0 * k, out_dists + q0 * k,
                                    out_counts ? out_counts + q0 : nullptr);
                    return;
                }
                if (starts && starts->blocked)
                {
                    search_block(a, params, *starts, width, queries, q0, q1, k, out_ids,
                                 out_dists, out_counts);
                    return;
                }
                int st = vs_graph_search(&a, &params, queries + q0 * a.dim, q1 - q0, k,
                                         out_ids + q0 * k, out_dists + q0 * k,
                                         out_counts ? out_counts + q0 : nullptr, nullptr);
                if (st != VS_OK)
                    throw Error(static_cast<vs_status>(st), "graph search failed");
            });
        });
    }

    Status build_edges(const uint32_t *knn, size_t n, size_t knn_width, size_t degree,
                       uint32_t entry, uint32_t *out, vs_graph_build_info *info) noexcept override
    {
        return guarded(
            [&] { graph_build_edges(knn, n, knn_width, degree, entry, out, info, threads_, cfg_); });
    }

    Status link_unfound(uint32_t *graph, size_t n, size_t degree, const float *vectors, size_t dim,
                        const vs_graph_link_params &params,
                        vs_graph_link_info *info) noexcept override
    {
        return guarded([&] {
            graph_link_unfound(graph, n, degree, vectors, dim, params, info, threads_, cfg_);
        });
    }

private:
    const BackendConfig &cfg_;
    int threads_;
};

} // namespace

std::unique_ptr<GraphBackend> make_cpu_graph(const BackendConfig &config, int threads)
{
    return std::unique_ptr<GraphBackend>(new CpuGraphBackend(config, threads));
}

} // namespace vs
