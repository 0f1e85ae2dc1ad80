// Batched beam search on a proximity graph, CUDA backend (vsearch/graph.h; the reference is
// gpu/cpu/graph.cpp).  One thread block of kWarps warps per query (SONG's layout), everything of
// the query's search in shared memory:
//   beam     the best ef nodes seen, as keys (distance << 32 | node, engine/exact.h: NaN as +inf)
//            in ascending order, with an "expanded" flag each;
//   visited  an open-addressing hash table of node numbers holding at least the beam's nodes;
//            when it is half full it is cleared and refilled with the beam (a node outside the
//            beam lost to the beam's worst once and would lose again, so forgetting it only costs
//            a distance, never a duplicate);
//   fresh    the keys measured in the current step that may enter the beam.
// A step takes the nearest unexpanded beam node (none left: done), and the warps measure its
// neighbours (a warp per neighbour: the engine's exact distance, utils/exact_warp.cuh), skipping
// free slots, nodes not live and nodes already visited; the fresh keys are merged into the beam by
// rank (every key is distinct: a node is measured once while it can be in the beam).  The start
// nodes are measured first, `degree` at a time, the same way.  This is the reference's search:
// the same beam after every step, so the same ids and bit-identical distances.  The results are
// the beam ordered by (distance, id), NaN last, the first k of them.
#include "cuda/graph_cuda.cuh"

#include "cuda/utils/error.cuh"
#include "cuda/utils/exact_warp.cuh"
#include "cuda/utils/launch.cuh"
#include "engine/host_common.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

namespace vs::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr size_t kQueryChunk = 8192; // queries per launch (cancel is polled between launches)
constexpr uint32_t kEmpty = 0xFFFFFFFFu;

struct GraphView
{
    const float *vectors;    // n x dim
    const uint32_t *nbrs;    // n x degree
    const uint8_t *live;     // n, or null: every node
    const int64_t *ids;      // n, or null: node numbers
    uint32_t n;
    int dim;
    int degree;
};

// The shared memory of one query's search (offsets from the dynamic buffer; 8-byte arrays first).
struct Layout
{
    int ef, degree, dim;
    uint32_t hash_size; // a power of two >= 4 (ef + degree)
    size_t beam, spare, fresh, dist, hash, query, expanded, spare_expanded, bytes;

    Layout(int ef_, int degree_, int dim_) : ef(ef_), degree(degree_), dim(dim_)
    {
        hash_size = 1;
        while (hash_size < 4u * static_cast<uint32_t>(ef + degree))
            hash_size <<= 1;
        size_t o = 0;
        beam = o, o += 8 * static_cast<size_t>(ef);
        spare = o, o += 8 * static_cast<size_t>(ef); // the merge's output; the final ids
        fresh = o, o += 8 * static_cast<size_t>(degree);
        dist = o, o += 4 * static_cast<size_t>(ef);
        hash = o, o += 4 * static_cast<size_t>(hash_size);
        query = o, o += 4 * static_cast<size_t>(dim);
        expanded = o, o += static_cast<size_t>(ef);
        spare_expanded = o, o += static_cast<size_t>(ef);
        bytes = o;
    }
};

__device__ __forceinline__ float nan_as_inf(float d) { return d != d ? INFINITY : d; }

// True when v was not in the table (it is now).  The table is never more than half full.
__device__ __forceinline__ bool visit(uint32_t *table, uint32_t mask, uint32_t v, int *count)
{
    uint32_t h = (v * 2654435761u) & mask;
    for (;;)
    {
        uint32_t prev = atomicCAS(&table[h], kEmpty, v);
        if (prev == kEmpty)
        {
            atomicAdd(count, 1);
            return true;
        }
        if (prev == v)
            return false;
        h = (h + 1) & mask;
    }
}

// Results before: (distance, id) ascending, NaN after every number, -0 == +0; then the beam
// position, so that ranks are distinct even where a caller's ids repeat.
__device__ __forceinline__ bool result_before(float da, int64_t ia, int pa, float db, int64_t ib,
                                              int pb)
{
    const bool na = da != da, nb = db != db;
    if (na != nb)
        return nb;
    if (!na && da != db)
        return da < db;
    return ia != ib ? ia < ib : pa < pb;
}

__global__ void __launch_bounds__(kThreads)
    graph_search_kernel(GraphView g, vs_metric metric, const float *__restrict__ queries,
                        const uint32_t *__restrict__ starts, int nstarts, int ef, int k,
                        Layout L, int64_t *__restrict__ out_ids, float *__restrict__ out_dists,
                        int64_t *__restrict__ out_counts)
{
    extern __shared__ __align__(16) unsigned char smem[];
    uint64_t *beam = reinterpret_cast<uint64_t *>(smem + L.beam);
    uint64_t *spare = reinterpret_cast<uint64_t *>(smem + L.spare);
    uint64_t *fresh = reinterpret_cast<uint64_t *>(smem + L.fresh);
    float *dist = reinterpret_cast<float *>(smem + L.dist);
    uint32_t *table = reinterpret_cast<uint32_t *>(smem + L.hash);
    float *q = reinterpret_cast<float *>(smem + L.query);
    uint8_t *expanded = smem + L.expanded;
    uint8_t *spare_expanded = smem + L.spare_expanded;
    __shared__ int nbeam, nfresh, nvisited, pick;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t mask = L.hash_size - 1;
    const float *query = queries + static_cast<size_t>(blockIdx.x) * g.dim;
    for (int i = tid; i < g.dim; i += kThreads)
        q[i] = query[i];
    for (uint32_t i = tid; i < L.hash_size; i += kThreads)
        table[i] = kEmpty;
    if (tid == 0)
    {
        nbeam = 0;
        nfresh = 0;
        nvisited = 0;
    }
    __syncthreads();

    // Measures the nodes list[0 .. count) (count <= degree) and merges those that may enter the
    // beam.  Called by the whole block.
    auto step = [&](const uint32_t *list, int count) {
        if (nvisited + count > static_cast<int>(L.hash_size / 2))
        {
            // forget everything but the beam
            __syncthreads();
            for (uint32_t i = tid; i < L.hash_size; i += kThreads)
                table[i] = kEmpty;
            if (tid == 0)
                nvisited = 0;
            __syncthreads();
            for (int i = tid; i < nbeam; i += kThreads)
                visit(table, mask, key_row(beam[i]), &nvisited);
            __syncthreads();
        }
        for (int i = warp; i < count; i += kWarps)
        {
            uint32_t v = kEmpty;
            int fresh_node = 0;
            if (lane == 0)
            {
                v = list[i];
                fresh_node = v < g.n && (g.live == nullptr || g.live[v] != 0) &&
                             visit(table, mask, v, &nvisited);
            }
            fresh_node = __shfl_sync(0xffffffffu, fresh_node, 0);
            if (!fresh_node)
                continue;
            v = __shfl_sync(0xffffffffu, v, 0);
            const float d = base_to_output(
                metric, warp_exact_base(metric, q, g.vectors + static_cast<size_t>(v) * g.dim,
                                        g.dim, lane));
            if (lane == 0)
            {
                const uint64_t key = make_key(nan_as_inf(d), v);
                if (nbeam < ef || key < beam[nbeam - 1])
                    fresh[atomicAdd(&nfresh, 1)] = key;
            }
        }
        __syncthreads();
        // merge by rank: a key's place is its rank in its own list plus the keys of the other
        // list below it
        const int m = nfresh, nb = nbeam;
        for (int i = tid; i < nb; i += kThreads)
        {
            int pos = i;
            for (int j = 0; j < m; j++)
                pos += fresh[j] < beam[i];
            if (pos < ef)
            {
                spare[pos] = beam[i];
                spare_expanded[pos] = expanded[i];
            }
        }
        for (int j = tid; j < m; j += kThreads)
        {
            const uint64_t key = fresh[j];
            int pos = 0;
            for (int t = 0; t < m; t++)
                pos += fresh[t] < key;
            int lo = 0, hi = nb; // beam keys below key
            while (lo < hi)
            {
                const int mid = (lo + hi) / 2;
                if (beam[mid] < key)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            pos += lo;
            if (pos < ef)
            {
                spare[pos] = key;
                spare_expanded[pos] = 0;
            }
        }
        __syncthreads();
        const int merged = min(ef, nb + m);
        for (int i = tid; i < merged; i += kThreads)
        {
            beam[i] = spare[i];
            expanded[i] = spare_expanded[i];
        }
        __syncthreads();
        if (tid == 0)
        {
            nbeam = merged;
            nfresh = 0;
        }
        __syncthreads();
    };

    for (int s = 0; s < nstarts; s += g.degree)
        step(starts + s, min(g.degree, nstarts - s));

    for (;;)
    {
        if (tid == 0)
            pick = INT_MAX;
        __syncthreads();
        for (int i = tid; i < nbeam; i += kThreads)
            if (!expanded[i])
                atomicMin(&pick, i);
        __syncthreads();
        const int u = pick;
        if (u == INT_MAX)
            break;
        const uint32_t node = key_row(beam[u]);
        __syncthreads();
        if (tid == 0)
            expanded[u] = 1;
        __syncthreads();
        step(g.nbrs + static_cast<size_t>(node) * g.degree, g.degree);
    }

    // the beam's distances (a key holds +inf for NaN: measure those again) and ids
    const int nb = nbeam;
    int64_t *ids = reinterpret_cast<int64_t *>(spare);
    for (int i = warp; i < nb; i += kWarps)
    {
        const uint32_t v = key_row(beam[i]);
        float d = key_dist(beam[i]);
        if (isinf(d))
            d = base_to_output(metric, warp_exact_base(metric, q,
                                                       g.vectors + static_cast<size_t>(v) * g.dim,
                                                       g.dim, lane));
        if (lane == 0)
        {
            dist[i] = d;
            ids[i] = g.ids ? g.ids[v] : static_cast<int64_t>(v);
        }
    }
    __syncthreads();
    const size_t out = static_cast<size_t>(blockIdx.x) * k;
    for (int i = tid; i < nb; i += kThreads)
    {
        int rank = 0;
        for (int j = 0; j < nb; j++)
            rank += result_before(dist[j], ids[j], j, dist[i], ids[i], i);
        if (rank < k)
        {
            out_ids[out + rank] = ids[i];
            out_dists[out + rank] = dist[i];
        }
    }
    for (int r = min(k, nb) + tid; r < k; r += kThreads)
    {
        out_ids[out + r] = -1;
        out_dists[out + r] = INFINITY;
    }
    if (tid == 0)
        out_counts[blockIdx.x] = min(k, nb);
}

class CudaGraph final : public Graph
{
public:
    CudaGraph(DeviceContext &dev, const vs_graph_arrays &a)
    {
        n_ = a.n;
        dim_ = a.dim;
        degree_ = a.degree;
        cudaStream_t s = dev.main;
        const size_t n = std::max<size_t>(a.n, 1);
        vectors = DeviceArray<float>(*dev.pool, n * a.dim, s);
        nbrs = DeviceArray<uint32_t>(*dev.pool, n * a.degree, s);
        if (a.n > 0)
        {
            VS_CUDA_CHECK(cudaMemcpyAsync(vectors.get(), a.vectors, a.n * a.dim * sizeof(float),
                                          cudaMemcpyHostToDevice, s));
            VS_CUDA_CHECK(cudaMemcpyAsync(nbrs.get(), a.neighbors,
                                          a.n * a.degree * sizeof(uint32_t),
                                          cudaMemcpyHostToDevice, s));
        }
        if (a.live)
        {
            live = DeviceArray<uint8_t>(*dev.pool, n, s);
            if (a.n > 0)
                VS_CUDA_CHECK(cudaMemcpyAsync(live.get(), a.live, a.n, cudaMemcpyHostToDevice, s));
        }
        if (a.ids)
        {
            ids = DeviceArray<int64_t>(*dev.pool, n, s);
            if (a.n > 0)
                VS_CUDA_CHECK(cudaMemcpyAsync(ids.get(), a.ids, a.n * sizeof(int64_t),
                                              cudaMemcpyHostToDevice, s));
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(s));
    }

    GraphView view() const
    {
        return GraphView{vectors.get(),
                         nbrs.get(),
                         live.size() ? live.get() : nullptr,
                         ids.size() ? ids.get() : nullptr,
                         static_cast<uint32_t>(n_),
                         static_cast<int>(dim_),
                         static_cast<int>(degree_)};
    }

private:
    DeviceArray<float> vectors;
    DeviceArray<uint32_t> nbrs;
    DeviceArray<uint8_t> live;
    DeviceArray<int64_t> ids;
};

const CudaGraph &as_cuda_graph(const Graph *g)
{
    auto *c = dynamic_cast<const CudaGraph *>(g);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "graph object belongs to another backend");
    return *c;
}

void graph_search(DeviceContext &dev, const CudaGraph &cg, const vs_graph_search_params &p,
                  const float *queries, size_t nq, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts)
{
    const GraphView g = cg.view();
    if (p.ef > static_cast<size_t>(INT_MAX / 64) || cg.dim() > static_cast<size_t>(INT_MAX / 64))
        throw Error(VS_UNSUPPORTED, "the GPU graph search of width " + std::to_string(p.ef) +
                                        " does not fit shared memory");
    const Layout L(static_cast<int>(p.ef), g.degree, g.dim);
    if (L.bytes > dev.smem_optin)
        throw Error(VS_UNSUPPORTED, "the GPU graph search of width " + std::to_string(p.ef) +
                                        " needs " + std::to_string(L.bytes) +
                                        " bytes of shared memory; the device has " +
                                        std::to_string(dev.smem_optin));
    const void *kernel = reinterpret_cast<const void *>(&graph_search_kernel);
    set_smem(kernel, L.bytes);
    cudaStream_t s = dev.main;
    const size_t chunk = std::min(nq, kQueryChunk);
    DeviceArray<uint32_t> d_starts(*dev.pool, std::max<size_t>(p.nstarts, 1), s);
    DeviceArray<float> d_queries(*dev.pool, chunk * g.dim, s);
    DeviceArray<int64_t> d_ids(*dev.pool, chunk * k, s);
    DeviceArray<float> d_dists(*dev.pool, chunk * k, s);
    DeviceArray<int64_t> d_counts(*dev.pool, chunk, s);
    std::vector<int64_t> counts(chunk);
    if (p.nstarts > 0)
        VS_CUDA_CHECK(cudaMemcpyAsync(d_starts.get(), p.starts, p.nstarts * sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, s));
    for (size_t q0 = 0; q0 < nq; q0 += chunk)
    {
        check_cancel(dev.cfg);
        const size_t c = std::min(chunk, nq - q0);
        VS_CUDA_CHECK(cudaMemcpyAsync(d_queries.get(), queries + q0 * g.dim,
                                      c * g.dim * sizeof(float), cudaMemcpyHostToDevice, s));
        graph_search_kernel<<<static_cast<unsigned>(c), kThreads, L.bytes, s>>>(
            g, p.metric, d_queries.get(), d_starts.get(), static_cast<int>(p.nstarts),
            static_cast<int>(p.ef), static_cast<int>(k), L, d_ids.get(), d_dists.get(),
            d_counts.get());
        VS_LAUNCH_CHECK();
        VS_CUDA_CHECK(cudaMemcpyAsync(out_ids + q0 * k, d_ids.get(), c * k * sizeof(int64_t),
                                      cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(out_dists + q0 * k, d_dists.get(), c * k * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(counts.data(), d_counts.get(), c * sizeof(int64_t),
                                      cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaStreamSynchronize(s));
        if (out_counts)
            std::copy(counts.begin(), counts.begin() + c, out_counts + q0);
    }
}

class CudaGraphBackend final : public GraphBackend
{
public:
    explicit CudaGraphBackend(Lanes &lanes) : lanes_(lanes) {}

    Status create(const vs_graph_arrays &arrays, Graph **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) { *out = new CudaGraph(dev, arrays); });
    }

    Status search(const Graph *g, const vs_graph_search_params &params, const float *queries,
                  size_t nq, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            graph_search(dev, as_cuda_graph(g), params, queries, nq, k, out_ids, out_dists,
                         out_counts);
        });
    }

private:
    Lanes &lanes_;
};

} // namespace

std::unique_ptr<GraphBackend> make_cuda_graph(Lanes &lanes)
{
    return std::unique_ptr<GraphBackend>(new CudaGraphBackend(lanes));
}

} // namespace vs::cuda
