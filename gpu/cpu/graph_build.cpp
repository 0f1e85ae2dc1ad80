// The vs_graph build's graph from its kNN lists (vsearch/graph.h: vs_graph_prune,
// vs_graph_build_edges): the pruning and the merge with the reverse edges in blocks of nodes on
// the backend's threads, the reachability links on the calling thread.  No step's result depends
// on the thread count or on the order in which threads finish: each node's lists are computed
// from inputs only, and the reverse edges, gathered in any order, are sorted per node.
#include "cpu/cpu_graph.h"

#include "cpu/parallel.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace vs {
namespace {

constexpr uint32_t kNone = VS_GRAPH_NONE;
constexpr size_t kBlock = 1024; // nodes per parallel item

// Scratch of one list's pruning, reused across lists.
struct PruneScratch
{
    std::vector<uint64_t> slots; // open addressing: rank << 32 | node, or kNone (rank 0)
    std::vector<uint32_t> detours;
    std::vector<uint64_t> order; // detours << 32 | rank
};

// vs_graph_prune with the candidates' lists from nbrs_of(j) (nbr_width entries each).  Its cost
// is m x nbr_width lookups of a neighbour's neighbour among the candidates, about half of them
// found on clustered data: the table is kept sparse (at most 1/16 full) so that a lookup almost
// always ends at its first slot, which holds the node and its rank together, and a hit counts
// without a branch.  The candidates' lists are fetched a few candidates ahead (each is a random
// row of the kNN lists).
template <typename NbrsOf>
size_t prune_list(const uint32_t *cands, size_t m, NbrsOf nbrs_of, size_t nbr_width, size_t degree,
                  uint32_t *out, PruneScratch &s)
{
    if (m == 0)
        return 0;
    size_t size = 64;
    while (size < 16 * m)
        size *= 2;
    const uint32_t mask = static_cast<uint32_t>(size - 1);
    s.slots.assign(size, kNone);
    uint64_t *const slots = s.slots.data();
    for (size_t i = 0; i < m; i++)
    {
        uint32_t h = (cands[i] * 2654435761u) & mask;
        while (static_cast<uint32_t>(slots[h]) != kNone)
            h = (h + 1) & mask;
        slots[h] = static_cast<uint64_t>(i) << 32 | cands[i];
    }
    s.detours.assign(m + 8, 0);
    uint32_t *const detours = s.detours.data();
    const size_t width = std::min(nbr_width, m);
    // candidate j's list is read `ahead` steps after its fetch was started
    const size_t ahead = 4, lines = (width * sizeof(uint32_t) + 63) / 64;
    for (size_t f = 0; f < m + ahead; f++)
    {
        if (f < m)
        {
            const char *at = reinterpret_cast<const char *>(nbrs_of(f));
            for (size_t l = 0; l < lines; l++)
                __builtin_prefetch(at + 64 * l, 0, 3);
        }
        if (f < ahead)
            continue;
        const size_t j = f - ahead;
        const uint32_t *nb = nbrs_of(j);
        // candidate i has a detour through j when it stands at r < i of j's list and i > j
        for (size_t r = 0; r < width; r++)
        {
            const uint32_t u = nb[r];
            uint32_t h = (u * 2654435761u) & mask;
            uint64_t slot = slots[h];
            while (static_cast<uint32_t>(slot) != kNone && static_cast<uint32_t>(slot) != u)
            {
                h = (h + 1) & mask;
                slot = slots[h];
            }
            // a miss ends at an empty slot (rank 0, so it adds 0), and adds it to one of 8 spare
            // counters in turn: adding to one address every time chains the stores and loads
            const size_t i = slot >> 32;
            const bool found = static_cast<uint32_t>(slot) == u;
            detours[found ? i : m + (r & 7)] += (i > j) & (i > r);
        }
    }
    s.order.resize(m);
    for (size_t i = 0; i < m; i++)
        s.order[i] = static_cast<uint64_t>(s.detours[i]) << 32 | i;
    const size_t nout = std::min(degree, m);
    std::partial_sort(s.order.begin(), s.order.begin() + static_cast<std::ptrdiff_t>(nout),
                      s.order.end());
    for (size_t i = 0; i < nout; i++)
        out[i] = cands[s.order[i] & 0xFFFFFFFFu];
    return nout;
}

bool list_has(const uint32_t *list, size_t n, uint32_t v)
{
    return std::find(list, list + n, v) != list + n;
}

void poll_cancel(const BackendConfig &cfg)
{
    if (cfg.cancel && cfg.cancel(cfg.cancel_arg))
        throw Error(VS_CANCELLED, "cancelled");
}

// Marks what a walk from `from` reaches (queue: n entries).  Breadth first, so that the lists of
// the nodes a few places ahead in the queue can be fetched while the current one is read: a walk
// over a large graph waits on memory for almost every list.  What it marks does not depend on
// the order.
void reach_from(const uint32_t *graph, size_t degree, uint32_t from, std::vector<uint8_t> &reached,
                std::vector<uint32_t> &queue)
{
    if (reached[from])
        return;
    constexpr size_t ahead = 8;
    const size_t lines = (degree * sizeof(uint32_t) + 63) / 64;
    size_t head = 0, tail = 0;
    reached[from] = 1;
    queue[tail++] = from;
    while (head < tail)
    {
        if (head + ahead < tail)
        {
            const char *at = reinterpret_cast<const char *>(
                graph + static_cast<size_t>(queue[head + ahead]) * degree);
            for (size_t l = 0; l < lines; l++)
                __builtin_prefetch(at + 64 * l);
        }
        const uint32_t *nb = graph + static_cast<size_t>(queue[head++]) * degree;
        for (size_t i = 0; i < degree; i++)
            if (nb[i] != kNone && !reached[nb[i]])
            {
                reached[nb[i]] = 1;
                queue[tail++] = nb[i];
            }
    }
}

} // namespace

void graph_build_edges(const uint32_t *knn, size_t n, size_t K, size_t degree, uint32_t entry,
                       uint32_t *graph, vs_graph_build_info *info, int threads,
                       const BackendConfig &cfg)
{
    const auto t0 = std::chrono::steady_clock::now();
    const size_t half = (degree + 1) / 2, nblocks = (n + kBlock - 1) / kBlock;

    // 1. each kNN list pruned by rank
    std::vector<uint32_t> fwd(n * degree), nfwd(n);
    parallel_for(nblocks, threads, cfg, [&](size_t b) {
        PruneScratch s;
        for (size_t v = b * kBlock; v < std::min(n, (b + 1) * kBlock); v++)
        {
            const uint32_t *row = knn + v * K;
            size_t m = 0;
            while (m < K && row[m] != kNone)
            {
                if (row[m] >= n)
                    throw Error(VS_INVALID_ARGUMENT, "a kNN list names a node out of range");
                m++;
            }
            nfwd[v] = static_cast<uint32_t>(prune_list(
                row, m, [&](size_t j) { return knn + static_cast<size_t>(row[j]) * K; }, K, degree,
                &fwd[v * degree], s));
        }
    });
    const double prune_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // 2. reverse edges by target (CSR; each entry: position given << 32 | source), then each
    // node's final list
    std::vector<int64_t> roff(n + 1, 0);
    parallel_for(nblocks, threads, cfg, [&](size_t b) {
        for (size_t v = b * kBlock; v < std::min(n, (b + 1) * kBlock); v++)
            for (size_t p = 0; p < nfwd[v]; p++)
                __atomic_fetch_add(&roff[fwd[v * degree + p] + 1], 1, __ATOMIC_RELAXED);
    });
    for (size_t v = 0; v < n; v++)
        roff[v + 1] += roff[v];
    std::vector<uint64_t> rev(static_cast<size_t>(roff[n]));
    std::vector<int64_t> fill(roff.begin(), roff.end() - 1);
    parallel_for(nblocks, threads, cfg, [&](size_t b) {
        for (size_t v = b * kBlock; v < std::min(n, (b + 1) * kBlock); v++)
            for (size_t p = 0; p < nfwd[v]; p++)
            {
                const int64_t at = __atomic_fetch_add(&fill[fwd[v * degree + p]], 1, __ATOMIC_RELAXED);
                rev[static_cast<size_t>(at)] = static_cast<uint64_t>(p) << 32 | v;
            }
    });
    parallel_for(nblocks, threads, cfg, [&](size_t b) {
        for (size_t v = b * kBlock; v < std::min(n, (b + 1) * kBlock); v++)
        {
            uint32_t *out = graph + v * degree;
            const uint32_t *f = &fwd[v * degree];
            size_t m = 0;
            std::sort(rev.begin() + roff[v], rev.begin() + roff[v + 1]);
            for (size_t p = 0; p < nfwd[v] && p < half; p++)
                out[m++] = f[p];
            for (int64_t e = roff[v]; e < roff[v + 1] && m < degree; e++)
            {
                const uint32_t from = static_cast<uint32_t>(rev[static_cast<size_t>(e)]);
                if (!list_has(out, m, from))
                    out[m++] = from;
            }
            for (size_t p = half; p < nfwd[v] && m < degree; p++)
                if (!list_has(out, m, f[p]))
                    out[m++] = f[p];
            std::fill(out + m, out + degree, kNone);
        }
    });
    fwd = std::vector<uint32_t>();
    rev = std::vector<uint64_t>();

    // 3. reachability from the entry (in node order, on this thread: each link changes what the
    // next node sees)
    std::vector<int32_t> indeg(n, 0);
    for (size_t i = 0; i < n * degree; i++)
        if (graph[i] != kNone)
            indeg[graph[i]]++;
    std::vector<uint8_t> reached(n, 0);
    std::vector<uint32_t> queue(n);
    uint64_t linked = 0, unreached = 0;
    if (n > 0)
        reach_from(graph, degree, entry, reached, queue);
    for (int pass = 0; pass < 4; pass++)
    {
        bool changed = false;
        for (size_t x = 0; x < n; x++)
        {
            if (reached[x])
                continue;
            if ((x & 1023) == 0)
                poll_cancel(cfg);
            const uint32_t *row = knn + x * K;
            for (size_t j = 0; j < K && row[j] != kNone; j++)
            {
                const uint32_t w = row[j];
                uint32_t *out = graph + static_cast<size_t>(w) * degree;
                size_t slot = degree;
                if (!reached[w])
                    continue;
                for (size_t p = degree; p-- > 0 && slot == degree;)
                    if (out[p] == kNone)
                        slot = p;
                for (size_t p = degree; p-- > half && slot == degree;)
                    if (indeg[out[p]] > 1)
                        slot = p;
                if (slot == degree)
                    continue;
                if (out[slot] != kNone)
                    indeg[out[slot]]--;
                out[slot] = static_cast<uint32_t>(x);
                indeg[x]++;
                linked++;
                changed = true;
                reach_from(graph, degree, static_cast<uint32_t>(x), reached, queue);
                break;
            }
        }
        if (!changed)
            break;
    }
    for (size_t x = 0; x < n; x++)
        unreached += !reached[x];
    if (info)
    {
        info->linked = linked;
        info->unreached = unreached;
        info->prune_seconds = prune_s;
    }
}

} // namespace vs

int vs_graph_prune(const uint32_t *cands, size_t ncands, const uint32_t *cand_nbrs,
                   size_t nbr_width, size_t degree, uint32_t *out) noexcept
{
    try
    {
        vs::PruneScratch s;
        return static_cast<int>(vs::prune_list(
            cands, ncands, [&](size_t j) { return cand_nbrs + j * nbr_width; }, nbr_width, degree,
            out, s));
    }
    catch (...)
    {
        return -1;
    }
}

namespace vs {
namespace {

uint32_t root_of(std::vector<uint32_t> &parent, uint32_t x)
{
    while (parent[x] != x)
        x = parent[x] = parent[parent[x]];
    return x;
}

// One start per weakly connected part of the unreached nodes (their edges among themselves): the
// node nearest the part's mean, parts by size (largest first), then by that node.
std::vector<uint32_t> island_starts(const uint32_t *graph, size_t n, size_t degree,
                                    const float *vectors, size_t dim,
                                    const std::vector<uint8_t> &reached)
{
    std::vector<uint32_t> parent(n);
    for (size_t v = 0; v < n; v++)
        parent[v] = static_cast<uint32_t>(v);
    for (size_t u = 0; u < n; u++)
    {
        if (reached[u])
            continue;
        const uint32_t *nb = graph + u * degree;
        for (size_t i = 0; i < degree; i++)
        {
            if (nb[i] == kNone || reached[nb[i]])
                continue;
            const uint32_t a = root_of(parent, static_cast<uint32_t>(u)), b = root_of(parent, nb[i]);
            if (a != b)
                parent[std::max(a, b)] = std::min(a, b); // roots: each part's smallest node
        }
    }
    // parts numbered in order of their roots
    std::vector<uint32_t> part(n, kNone), roots;
    for (size_t v = 0; v < n; v++)
        if (!reached[v])
        {
            const uint32_t r = root_of(parent, static_cast<uint32_t>(v));
            if (r == v)
            {
                part[v] = static_cast<uint32_t>(roots.size());
                roots.push_back(r);
            }
            else
                part[v] = part[r]; // r < v was numbered first
        }
    // the nodes of each part together (counting sort), then each part's mean and its nearest
    // node with one mean at a time: memory O(n + dim) however many parts there are
    const size_t np = roots.size();
    std::vector<uint64_t> size(np, 0), first(np + 1, 0);
    for (size_t v = 0; v < n; v++)
        if (!reached[v])
            size[part[v]]++;
    for (size_t p = 0; p < np; p++)
        first[p + 1] = first[p] + size[p];
    std::vector<uint32_t> members(first[np]);
    {
        std::vector<uint64_t> at(first.begin(), first.end() - 1);
        for (size_t v = 0; v < n; v++) // ascending within each part
            if (!reached[v])
                members[at[part[v]]++] = static_cast<uint32_t>(v);
    }
    std::vector<uint32_t> best(np, kNone);
    std::vector<double> mean(dim);
    for (size_t p = 0; p < np; p++)
    {
        std::fill(mean.begin(), mean.end(), 0.0);
        for (uint64_t i = first[p]; i < first[p + 1]; i++)
            for (size_t j = 0; j < dim; j++)
                mean[j] += vectors[static_cast<size_t>(members[i]) * dim + j];
        for (size_t j = 0; j < dim; j++)
            mean[j] /= static_cast<double>(size[p]);
        double bestd = 0.0;
        for (uint64_t i = first[p]; i < first[p + 1]; i++)
        {
            const size_t v = members[i];
            double s = 0.0;
            for (size_t j = 0; j < dim; j++)
            {
                const double x = static_cast<double>(vectors[v * dim + j]) - mean[j];
                s += x * x;
            }
            if (best[p] == kNone || s < bestd) // members ascend: ties keep the smaller
            {
                best[p] = static_cast<uint32_t>(v);
                bestd = s;
            }
        }
    }
    std::vector<size_t> order(np);
    for (size_t p = 0; p < np; p++)
        order[p] = p;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return size[a] != size[b] ? size[a] > size[b] : best[a] < best[b];
    });
    std::vector<uint32_t> out(np);
    for (size_t i = 0; i < np; i++)
        out[i] = best[order[i]];
    return out;
}

} // namespace
} // namespace vs

int vs_graph_cover_starts(const uint32_t *graph, size_t n, size_t degree, const float *vectors,
                          size_t dim, const uint32_t *fixed, size_t nfixed, const uint32_t *cands,
                          size_t ncands, uint32_t *out, size_t max_out, uint64_t *unreached) noexcept
{
    if (unreached)
        *unreached = 0;
    if (n == 0)
        return 0;
    if (!graph || degree == 0 || (!vectors && dim > 0) || (nfixed > 0 && !fixed) ||
        (ncands > 0 && !cands) || (max_out > 0 && !out))
        return -1;
    try
    {
        std::vector<uint8_t> reached(n, 0), taken(n, 0);
        std::vector<uint32_t> queue(n), first, rest;
        for (size_t i = 0; i < nfixed; i++)
            if (fixed[i] < n)
            {
                taken[fixed[i]] = 1;
                vs::reach_from(graph, degree, fixed[i], reached, queue);
            }
        for (size_t i = 0; i < ncands; i++)
        {
            const uint32_t c = cands[i];
            if (c >= n || taken[c])
                continue;
            taken[c] = 1;
            (reached[c] ? rest : first).push_back(c);
            vs::reach_from(graph, degree, c, reached, queue);
        }
        // islands, in rounds: a part's node may not reach all of its part (the graph is directed)
        while (first.size() < max_out &&
               std::find(reached.begin(), reached.end(), 0) != reached.end())
        {
            for (uint32_t v : vs::island_starts(graph, n, degree, vectors, dim, reached))
            {
                if (first.size() >= max_out)
                    break;
                if (reached[v])
                    continue;
                first.push_back(v);
                vs::reach_from(graph, degree, v, reached, queue);
            }
        }
        size_t m = 0;
        for (uint32_t v : first)
            if (m < max_out)
                out[m++] = v;
        for (uint32_t v : rest)
            if (m < max_out)
                out[m++] = v;
        if (unreached)
        {
            // what the starts kept reach: what `reached` marks unless some of `first` were left
            // out (the others, `rest`, were reached when taken, so their walks marked nothing)
            if (first.size() > max_out)
            {
                std::fill(reached.begin(), reached.end(), 0);
                for (size_t i = 0; i < nfixed; i++)
                    if (fixed[i] < n)
                        vs::reach_from(graph, degree, fixed[i], reached, queue);
                for (size_t i = 0; i < m; i++)
                    vs::reach_from(graph, degree, out[i], reached, queue);
            }
            for (size_t v = 0; v < n; v++)
                *unreached += !reached[v];
        }
        return static_cast<int>(m);
    }
    catch (...)
    {
        return -1;
    }
}
