// The multi-device backend's IVF-PQ, graph and metric objects (engine/multi_internal.h): each
// lives whole on one device, the one with the least memory in use when it is made, and every call
// of it runs there; the object wraps the device's own.  Apart from the datasets
// (multi_datasets.cpp), which are spread over every device.
#include "engine/multi_internal.h"

#include <vector>

namespace vs::multi {
namespace {

const MultiIvfpq &as_multi_ivfpq(const Ivfpq *ivf)
{
    auto *m = dynamic_cast<const MultiIvfpq *>(ivf);
    if (!m)
        throw Error(VS_INVALID_ARGUMENT, "IVF-PQ object belongs to another backend");
    return *m;
}

const MultiGraph &as_multi_graph(const Graph *g)
{
    auto *m = dynamic_cast<const MultiGraph *>(g);
    if (!m)
        throw Error(VS_INVALID_ARGUMENT, "graph object belongs to another backend");
    return *m;
}

const MultiMetric &as_multi_metric(const MetricIndex *m)
{
    auto *mm = dynamic_cast<const MultiMetric *>(m);
    if (!mm)
        throw Error(VS_INVALID_ARGUMENT, "metric index belongs to another backend");
    return *mm;
}

} // namespace

MultiIvfpq::~MultiIvfpq()
{
    if (owner)
        owner->ivfpq_destroyed(*this);
}

// ---- MultiIvfpqBackend ----------------------------------------------------------------------

Status MultiIvfpqBackend::create(const vs_ivfpq_params &params, const float *centroids,
                                 const float *codebooks, Ivfpq **out) noexcept
{
    return guarded([&] {
        size_t d = b_.least_used();
        std::unique_ptr<MultiIvfpq> m(new MultiIvfpq);
        m->dev = static_cast<int>(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->create(params, centroids, codebooks, &m->inner);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
        m->sync();
        b_.devs_[d].ivfpq_objects++;
        m->owner = &b_;
        *out = m.release();
    });
}

Status MultiIvfpqBackend::encode(const Ivfpq *ivf, const float *vectors, size_t n, int32_t *lists,
                                 uint8_t *codes) noexcept
{
    return guarded([&] {
        const MultiIvfpq &m = as_multi_ivfpq(ivf);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->encode(m.inner, vectors, n, lists, codes);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiIvfpqBackend::add(Ivfpq *ivf, size_t list, const int64_t *ids, const uint8_t *codes,
                              size_t n) noexcept
{
    return guarded([&] {
        MultiIvfpq &m = const_cast<MultiIvfpq &>(as_multi_ivfpq(ivf));
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(
            d, [&] { return b_.devs_[d].backend->ivfpq()->add(m.inner, list, ids, codes, n); });
        m.sync();
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiIvfpqBackend::search(const Ivfpq *ivf, const float *queries, size_t nq,
                                 size_t probe_first, size_t nprobe, size_t k, int64_t *out_ids,
                                 float *out_dists, int64_t *out_counts) noexcept
{
    return guarded([&] {
        const MultiIvfpq &m = as_multi_ivfpq(ivf);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->search(m.inner, queries, nq, probe_first, nprobe,
                                                        k, out_ids, out_dists, out_counts);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiIvfpqBackend::range(const Ivfpq *ivf, const float *queries, size_t nq,
                                size_t probe_first, size_t nprobe, float radius,
                                RangeCollector *collector) noexcept
{
    return guarded([&] {
        const MultiIvfpq &m = as_multi_ivfpq(ivf);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->range(m.inner, queries, nq, probe_first, nprobe,
                                                       radius, collector);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

// ---- MultiGraphBackend ----------------------------------------------------------------------

MultiGraph::~MultiGraph()
{
    if (owner)
        owner->graph_destroyed(*this);
}

// A graph object whole on the least used device, made there by make(device's GraphBackend, &inner).
template <typename Make> Status create_multi_graph(MultiBackendImpl &b, Graph **out, Make &&make)
{
    return guarded([&] {
        size_t d = b.least_used();
        std::unique_ptr<MultiGraph> m(new MultiGraph);
        m->dev = static_cast<int>(d);
        Status st = b.call(d, [&] { return make(b.devs_[d].backend->graph(), &m->inner); });
        if (!st.ok())
            throw Error(st.code, st.message);
        m->sync();
        m->owner = &b;
        *out = m.release();
    });
}

Status MultiGraphBackend::create(const vs_graph_arrays &arrays, Graph **out) noexcept
{
    return create_multi_graph(b_, out, [&](GraphBackend *gb, Graph **inner) {
        return gb->create(arrays, inner);
    });
}

Status MultiGraphBackend::create_compressed(const vs_graph_arrays &arrays, const vs_graph_pq &pq,
                                            const uint8_t *codes, Graph **out) noexcept
{
    return create_multi_graph(b_, out, [&](GraphBackend *gb, Graph **inner) {
        return gb->create_compressed(arrays, pq, codes, inner);
    });
}

Status MultiGraphBackend::search(const Graph *g, const vs_graph_search_params &params,
                                 const float *queries, size_t nq, size_t k, int64_t *out_ids,
                                 float *out_dists, int64_t *out_counts) noexcept
{
    return guarded([&] {
        const MultiGraph &m = as_multi_graph(g);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->graph()->search(m.inner, params, queries, nq, k, out_ids,
                                                        out_dists, out_counts);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

// ---- MultiMetricBackend ---------------------------------------------------------------------

MultiMetric::~MultiMetric()
{
    if (owner)
        owner->metric_destroyed(*this);
}

template <typename Make> Status MultiMetricBackend::create(MetricIndex **out, Make &&make) noexcept
{
    return guarded([&] {
        size_t d = b_.least_used();
        std::unique_ptr<MultiMetric> m(new MultiMetric);
        m->dev = static_cast<int>(d);
        Status st = b_.call(d, [&] { return make(b_.devs_[d].backend->metric(), &m->inner); });
        if (!st.ok())
            throw Error(st.code, st.message);
        m->sync();
        m->owner = &b_;
        *out = m.release();
    });
}

Status MultiMetricBackend::create_list(const vs_lc &lc, MetricIndex **out) noexcept
{
    return create(out, [&](MetricBackend *mb, MetricIndex **o) { return mb->create_list(lc, o); });
}

Status MultiMetricBackend::create_pivots(const vs_sss &sss, MetricIndex **out) noexcept
{
    return create(out,
                  [&](MetricBackend *mb, MetricIndex **o) { return mb->create_pivots(sss, o); });
}

Status MultiMetricBackend::create_flat(const vs_mspace &objects, MetricIndex **out) noexcept
{
    return create(out,
                  [&](MetricBackend *mb, MetricIndex **o) { return mb->create_flat(objects, o); });
}

Status MultiMetricBackend::knn(const MetricIndex *index, const vs_mspace &queries, size_t k,
                               int64_t *out_ids, float *out_dists, int64_t *out_counts) noexcept
{
    return guarded([&] {
        const MultiMetric &m = as_multi_metric(index);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->metric()->knn(m.inner, queries, k, out_ids, out_dists,
                                                      out_counts);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiMetricBackend::distances(const MetricIndex *flat, size_t from, const size_t *rows,
                                     size_t n, double *out) noexcept
{
    return guarded([&] {
        const MultiMetric &m = as_multi_metric(flat);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->metric()->distances(m.inner, from, rows, n, out);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

// The device's matches are collected on its thread and delivered from the caller's.
Status MultiMetricBackend::range(const MetricIndex *index, const vs_mspace &queries,
                                 double radius, RangeCollector *collector) noexcept
{
    return guarded([&] {
        const MultiMetric &m = as_multi_metric(index);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        struct Buffer final : RangeCollector
        {
            std::vector<int64_t> counts, ids;
            std::vector<float> dists;
            void add(size_t, size_t nq, const int64_t *c, const int64_t *i,
                     const float *ds) override
            {
                size_t total = 0;
                for (size_t q = 0; q < nq; q++)
                    total += static_cast<size_t>(c[q]);
                counts.insert(counts.end(), c, c + nq);
                ids.insert(ids.end(), i, i + total);
                dists.insert(dists.end(), ds, ds + total);
            }
        } buf;
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->metric()->range(m.inner, queries, radius, &buf);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
        collector->add(0, queries.n, buf.counts.data(), buf.ids.data(), buf.dists.data());
    });
}

} // namespace vs::multi
