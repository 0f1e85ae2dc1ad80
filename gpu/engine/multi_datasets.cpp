// The multi-device backend's datasets (engine/multi_internal.h): each a part per device, its rows
// replicated (a call's queries split over the devices, or a small call on one device) or sharded
// by id (every query visits every shard); the per-device answers merged exactly -- the top k by
// (distance, id), range matches by id -- so the answer is one device's.  Apart from the devices
// (multi_backend.cpp) so that placement and merging read alone.
#include "engine/multi_internal.h"

#include <algorithm>
#include <cmath>

namespace vs::multi {
namespace {

MultiDataset &as_multi(const Dataset *ds)
{
    auto *m = dynamic_cast<const MultiDataset *>(ds);
    if (!m)
        throw Error(VS_INVALID_ARGUMENT, "dataset belongs to another backend");
    return const_cast<MultiDataset &>(*m);
}

// The shard of an id among n (a mix of its bits: heap-derived ids are far from uniform).
size_t shard_of(int64_t id, size_t n)
{
    uint64_t x = static_cast<uint64_t>(id);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<size_t>(x % n);
}

// Range matches of one device, kept per query (queries [q0, q0 + n) of the call).
class QueryCollector final : public RangeCollector
{
public:
    explicit QueryCollector(size_t nq) : ids(nq), dists(nq) {}
    void add(size_t q0, size_t nq, const int64_t *counts, const int64_t *id,
             const float *d) override
    {
        size_t at = 0;
        for (size_t i = 0; i < nq; i++)
        {
            size_t c = static_cast<size_t>(counts[i]);
            ids[q0 + i].insert(ids[q0 + i].end(), id + at, id + at + c);
            dists[q0 + i].insert(dists[q0 + i].end(), d + at, d + at + c);
            at += c;
        }
    }
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<float>> dists;
};

// Delivers per-query lists to the caller's collector in blocks of queries; each query's matches
// are the merge by id of its lists in the given collectors (one list each when not sharded).
void deliver(const std::vector<QueryCollector *> &from, const std::vector<size_t> &first_query,
             size_t nq, RangeCollector *to)
{
    const size_t block = 1024;
    std::vector<int64_t> counts, ids;
    std::vector<float> dists;
    for (size_t q0 = 0; q0 < nq; q0 += block)
    {
        size_t qn = std::min(block, nq - q0);
        counts.assign(qn, 0);
        ids.clear();
        dists.clear();
        for (size_t i = 0; i < qn; i++)
        {
            size_t q = q0 + i;
            std::vector<std::pair<const QueryCollector *, size_t>> lists;
            for (size_t p = 0; p < from.size(); p++)
                if (q >= first_query[p] && q - first_query[p] < from[p]->ids.size())
                    lists.push_back({from[p], q - first_query[p]});
            std::vector<size_t> pos(lists.size(), 0);
            for (;;)
            {
                size_t best = lists.size();
                for (size_t l = 0; l < lists.size(); l++)
                {
                    const auto &v = lists[l].first->ids[lists[l].second];
                    if (pos[l] < v.size() &&
                        (best == lists.size() ||
                         v[pos[l]] < lists[best].first->ids[lists[best].second][pos[best]]))
                        best = l;
                }
                if (best == lists.size())
                    break;
                const QueryCollector *c = lists[best].first;
                size_t lq = lists[best].second;
                ids.push_back(c->ids[lq][pos[best]]);
                dists.push_back(c->dists[lq][pos[best]]);
                pos[best]++;
                counts[i]++;
            }
        }
        to->add(q0, qn, counts.data(), ids.data(), dists.data());
    }
}

} // namespace

MultiDataset::~MultiDataset()
{
    if (owner)
        owner->dataset_destroyed(*this);
}

Status MultiBackendImpl::dataset_create(size_t dim, vs_dtype dtype, Dataset **out) noexcept
{
    return guarded([&] {
        std::unique_ptr<MultiDataset> m(new MultiDataset(dim, dtype));
        std::vector<size_t> live = live_list();
        if (live.empty())
            throw Error(VS_DEVICE_ERROR, "every device was lost");
        m->parts.assign(live.size(), nullptr);
        m->devs.assign(live.begin(), live.end());
        Status st = run_parts(*m, [&](size_t p) {
            return devs_[m->devs[p]].backend->dataset_create(dim, dtype, &m->parts[p]);
        });
        *out = adopt_parts(std::move(m), st);
    });
}

Status MultiBackendImpl::dataset_add(Dataset *ds, const float *vectors, const int64_t *ids,
                                     size_t n) noexcept
{
    return guarded([&] {
        MultiDataset &m = as_multi(ds);
        check_alive(m);
        if (n == 0)
            return;
        if (m.placement == VS_PLACEMENT_AUTO)
            m.placement = decide(m, n);
        Status st;
        if (m.placement == VS_PLACEMENT_REPLICATED)
            st = run_parts(m, [&](size_t p) {
                return devs_[m.devs[p]].backend->dataset_add(m.parts[p], vectors, ids, n);
            });
        else
            st = run_parts(m, [&](size_t p) {
                std::vector<float> v;
                std::vector<int64_t> id;
                const size_t d = m.dim();
                for (size_t r = 0; r < n; r++)
                    if (shard_of(ids[r], m.parts.size()) == p)
                    {
                        id.push_back(ids[r]);
                        v.insert(v.end(), vectors + r * d, vectors + (r + 1) * d);
                    }
                return devs_[m.devs[p]].backend->dataset_add(m.parts[p], v.data(), id.data(),
                                                             id.size());
            });
        resize(m);
        throw_if(st);
    });
}

Status MultiBackendImpl::dataset_remove(Dataset *ds, const int64_t *ids, size_t n,
                                        size_t *removed) noexcept
{
    return guarded([&] {
        MultiDataset &m = as_multi(ds);
        check_alive(m);
        std::vector<size_t> got(m.parts.size(), 0);
        Status st = run_parts(m, [&](size_t p) {
            return devs_[m.devs[p]].backend->dataset_remove(m.parts[p], ids, n, &got[p]);
        });
        resize(m);
        throw_if(st);
        if (removed)
        {
            // a replica removes what every other one does; shards remove disjoint rows
            *removed = got[0];
            if (m.placement == VS_PLACEMENT_SHARDED)
                for (size_t p = 1; p < got.size(); p++)
                    *removed += got[p];
        }
    });
}

// Each part's subset on its device: a replica takes every id, a shard the ids it holds.
Status MultiBackendImpl::dataset_subset(const Dataset *src, const int64_t *ids, size_t n,
                                        Dataset **out) noexcept
{
    return guarded([&] {
        MultiDataset &s = as_multi(src);
        check_alive(s);
        std::unique_ptr<MultiDataset> m(new MultiDataset(s.dim(), s.dtype()));
        m->placement = s.placement;
        m->devs = s.devs;
        m->parts.assign(s.parts.size(), nullptr);
        Status st = run_parts(s, [&](size_t p) {
            Backend *b = devs_[static_cast<size_t>(s.devs[p])].backend.get();
            if (s.placement != VS_PLACEMENT_SHARDED)
                return b->dataset_subset(s.parts[p], ids, n, &m->parts[p]);
            std::vector<int64_t> mine;
            for (size_t r = 0; r < n; r++)
                if (shard_of(ids[r], s.parts.size()) == p)
                    mine.push_back(ids[r]);
            return b->dataset_subset(s.parts[p], mine.data(), mine.size(), &m->parts[p]);
        });
        *out = adopt_parts(std::move(m), st);
    });
}

Status MultiBackendImpl::knn(const Dataset *ds, const float *queries, size_t nq, size_t k,
                             vs_metric metric, const Subsets *subsets, int64_t *out_ids,
                             float *out_dists, int64_t *out_counts) noexcept
{
    return guarded([&] {
        MultiDataset &m = as_multi(ds);
        check_alive(m);
        if (m.placement != VS_PLACEMENT_SHARDED)
        {
            split_queries(m, nq, [&](size_t p, size_t q0, size_t qn) {
                Subsets s{};
                if (subsets)
                    s = Subsets{subsets->offsets + q0, subsets->ids};
                return devs_[m.devs[p]].backend->knn(
                    m.parts[p], queries + q0 * m.dim(), qn, k, metric,
                    subsets ? &s : nullptr, out_ids + q0 * k, out_dists + q0 * k,
                    out_counts ? out_counts + q0 : nullptr);
            });
            return;
        }
        const size_t np = m.parts.size();
        std::vector<std::vector<int64_t>> ids(np), counts(np);
        std::vector<std::vector<float>> dists(np);
        throw_if(run_parts(m, [&](size_t p) {
            ids[p].resize(nq * k);
            dists[p].resize(nq * k);
            counts[p].resize(nq);
            return devs_[m.devs[p]].backend->knn(m.parts[p], queries, nq, k, metric, subsets,
                                                 ids[p].data(), dists[p].data(),
                                                 counts[p].data());
        }));
        // Each shard's list is in (distance, id) order, the engine's order: merge the heads.
        std::vector<size_t> pos(np);
        for (size_t q = 0; q < nq; q++)
        {
            std::fill(pos.begin(), pos.end(), 0);
            size_t got = 0;
            for (; got < k; got++)
            {
                size_t best = np;
                for (size_t p = 0; p < np; p++)
                {
                    if (pos[p] >= static_cast<size_t>(counts[p][q]))
                        continue;
                    size_t a = q * k + pos[p];
                    if (best == np)
                    {
                        best = p;
                        continue;
                    }
                    size_t b = q * k + pos[best];
                    if (dists[p][a] < dists[best][b] ||
                        (dists[p][a] == dists[best][b] && ids[p][a] < ids[best][b]))
                        best = p;
                }
                if (best == np)
                    break;
                out_ids[q * k + got] = ids[best][q * k + pos[best]];
                out_dists[q * k + got] = dists[best][q * k + pos[best]];
                pos[best]++;
            }
            if (out_counts)
                out_counts[q] = static_cast<int64_t>(got);
            for (size_t i = got; i < k; i++)
            {
                out_ids[q * k + i] = -1;
                out_dists[q * k + i] = INFINITY;
            }
        }
    });
}

Status MultiBackendImpl::range(const Dataset *ds, const float *queries, size_t nq, float radius,
                               vs_metric metric, const Subsets *subsets,
                               RangeCollector *collector) noexcept
{
    return guarded([&] {
        MultiDataset &m = as_multi(ds);
        check_alive(m);
        const size_t np = m.parts.size();
        std::vector<std::unique_ptr<QueryCollector>> got(np);
        std::vector<size_t> first(np, 0);
        if (m.placement != VS_PLACEMENT_SHARDED)
        {
            split_queries(m, nq, [&](size_t p, size_t q0, size_t qn) {
                got[p].reset(new QueryCollector(qn));
                first[p] = q0;
                Subsets s{};
                if (subsets)
                    s = Subsets{subsets->offsets + q0, subsets->ids};
                return devs_[m.devs[p]].backend->range(m.parts[p], queries + q0 * m.dim(), qn,
                                                       radius, metric,
                                                       subsets ? &s : nullptr, got[p].get());
            });
        }
        else
        {
            throw_if(run_parts(m, [&](size_t p) {
                got[p].reset(new QueryCollector(nq));
                return devs_[m.devs[p]].backend->range(m.parts[p], queries, nq, radius, metric,
                                                       subsets, got[p].get());
            }));
        }
        std::vector<QueryCollector *> from;
        std::vector<size_t> from_first;
        for (size_t p = 0; p < np; p++)
            if (got[p])
            {
                from.push_back(got[p].get());
                from_first.push_back(first[p]);
            }
        deliver(from, from_first, nq, collector);
    });
}

MultiDataset *MultiBackendImpl::adopt_parts(std::unique_ptr<MultiDataset> m, const Status &st)
{
    if (!st.ok())
    {
        destroy_parts(*m);
        throw Error(st.code, st.message);
    }
    for (int d : m->devs)
        devs_[static_cast<size_t>(d)].datasets++;
    m->owner = this;
    resize(*m);
    return m.release();
}

void MultiBackendImpl::resize(MultiDataset &m)
{
    size_t n = 0;
    for (Dataset *p : m.parts)
        n = m.placement == VS_PLACEMENT_SHARDED ? n + p->size() : std::max(n, p->size());
    m.set_size(n);
}

void MultiBackendImpl::destroy_parts(MultiDataset &m)
{
    for (size_t p = 0; p < m.parts.size(); p++)
        if (m.parts[p])
        {
            size_t d = static_cast<size_t>(m.devs[p]);
            Dataset *part = m.parts[p];
            on_thread(d, [part] { delete part; });
            m.parts[p] = nullptr;
        }
}

void MultiBackendImpl::dataset_destroyed(MultiDataset &m)
{
    for (int d : m.devs)
        devs_[static_cast<size_t>(d)].datasets--;
    destroy_parts(m);
}

} // namespace vs::multi
