// Metric-space indexes in host memory (host_metric.h): owned copies of the arrays and one query's
// kNN and range search through the host functions (vs_lc_knn / vs_lc_range, vs_sss_knn /
// vs_sss_range, a brute force), with metric.h's conventions.
#include "cpu/host_metric.h"

#include "cpu/metric_space.h"
#include "cpu/parallel.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <utility>

namespace vs {

using metric::Hit;
using metric::Probe;

void HostSpace::assign(const vs_mspace &s)
{
    view = s;
    vectors.clear();
    chars.clear();
    offsets.clear();
    ids.clear();
    if (s.kind == VS_MSPACE_VECTORS)
    {
        if (s.n > 0)
            vectors.assign(s.vectors, s.vectors + s.n * s.dim);
    }
    else
    {
        offsets.assign(s.offsets, s.offsets + s.n + 1);
        const uint64_t base = offsets[0];
        for (auto &o : offsets)
            o -= base;
        if (offsets[s.n] > 0)
            chars.assign(s.chars + base, s.chars + base + offsets[s.n]);
    }
    if (s.ids)
        ids.assign(s.ids, s.ids + s.n);
    else
    {
        ids.resize(s.n);
        std::iota(ids.begin(), ids.end(), int64_t{0});
    }
    vectors.push_back(0.0f); // never empty: data() is never NULL
    chars.push_back(0);
    view.vectors = vectors.data();
    view.chars = chars.data();
    view.offsets = s.kind == VS_MSPACE_STRINGS ? offsets.data() : nullptr;
    view.ids = ids.data();
}

HostMetric::HostMetric(const vs_lc &lc) : type_(MetricIndex::kList)
{
    main_.assign(lc.members);
    extra_.assign(lc.centers);
    radii_.assign(lc.radii, lc.radii + lc.centers.n);
    bucket_offsets_.assign(lc.bucket_offsets, lc.bucket_offsets + lc.centers.n + 1);
    const uint64_t b0 = bucket_offsets_[0];
    for (auto &o : bucket_offsets_)
        o -= b0;
    radii_.push_back(0.0);
    lc_.centers = extra_.view;
    lc_.members = main_.view;
    lc_.radii = radii_.data();
    lc_.bucket_offsets = bucket_offsets_.data();
}

HostMetric::HostMetric(const vs_sss &sss) : type_(MetricIndex::kPivots)
{
    main_.assign(sss.objects);
    extra_.assign(sss.pivots);
    if (sss.objects.n > 0 && sss.pivots.n > 0)
        table_.assign(sss.table, sss.table + sss.objects.n * sss.pivots.n);
    table_.push_back(0.0f);
    sss_.pivots = extra_.view;
    sss_.objects = main_.view;
    sss_.table = table_.data();
}

HostMetric::HostMetric(const vs_mspace &objects) : type_(MetricIndex::kFlat)
{
    main_.assign(objects);
}

size_t HostMetric::size() const
{
    return main_.view.n + (type_ == MetricIndex::kList ? extra_.view.n : 0);
}

namespace {

void check(int st)
{
    if (st == VS_OK)
        return;
    if (st == VS_OUT_OF_MEMORY)
        throw std::bad_alloc();
    throw Error(static_cast<vs_status>(st), "metric search failed");
}

} // namespace

size_t HostMetric::knn(const vs_mobject &q, size_t k, int64_t *ids, float *dists) const
{
    std::vector<double> d(k);
    size_t count = 0;
    switch (type_)
    {
    case MetricIndex::kList:
        check(vs_lc_knn(&lc_, &q, k, nullptr, nullptr, ids, d.data(), &count, nullptr));
        break;
    case MetricIndex::kPivots:
        check(vs_sss_knn(&sss_, &q, k, nullptr, nullptr, ids, d.data(), &count, nullptr));
        break;
    case MetricIndex::kFlat:
    {
        const vs_mspace &s = main_.view;
        Probe p(s, q);
        std::priority_queue<Hit> best; // worst on top
        for (size_t i = 0; i < s.n; i++)
        {
            const int64_t id = s.ids[i];
            if (id < 0)
                continue;
            const double r = best.size() < k ? metric::kInf : best.top().d;
            const double di = p.distance(i, r);
            Hit h{di, id};
            if (best.size() < k)
                best.push(h);
            else if (h < best.top())
            {
                best.pop();
                best.push(h);
            }
        }
        count = best.size();
        for (size_t i = count; i-- > 0;)
        {
            ids[i] = best.top().id;
            d[i] = best.top().d;
            best.pop();
        }
        break;
    }
    }
    for (size_t i = 0; i < count; i++)
        dists[i] = vs_metric_base(&main_.view, d[i]);
    for (size_t i = count; i < k; i++)
    {
        ids[i] = -1;
        dists[i] = INFINITY;
    }
    return count;
}

void HostMetric::range(const vs_mobject &q, double radius, std::vector<int64_t> &ids,
                       std::vector<float> &dists) const
{
    vs_mhits hits{};
    int st = VS_OK;
    switch (type_)
    {
    case MetricIndex::kList:
        st = vs_lc_range(&lc_, &q, radius, nullptr, nullptr, &hits, nullptr);
        break;
    case MetricIndex::kPivots:
        st = vs_sss_range(&sss_, &q, radius, nullptr, nullptr, &hits, nullptr);
        break;
    case MetricIndex::kFlat:
        st = vs_mspace_range(&main_.view, &q, radius, &hits, nullptr);
        break;
    }
    if (st != VS_OK)
    {
        vs_mhits_free(&hits);
        check(st);
    }
    std::vector<std::pair<int64_t, float>> m(hits.n);
    for (size_t i = 0; i < hits.n; i++)
        m[i] = {hits.ids[i], vs_metric_base(&main_.view, hits.distances[i])};
    vs_mhits_free(&hits);
    std::sort(m.begin(), m.end());
    for (const auto &p : m)
    {
        ids.push_back(p.first);
        dists.push_back(p.second);
    }
}

void host_metric_knn(const HostMetric &h, const vs_mspace &queries, const size_t *which, size_t n,
                     size_t k, int64_t *out_ids, float *out_dists, int64_t *out_counts,
                     int threads, const BackendConfig &config)
{
    constexpr size_t kPer = 8; // queries per work item (cancel is polled between items)
    parallel_for((n + kPer - 1) / kPer, threads, config, [&](size_t b) {
        for (size_t i = b * kPer; i < std::min(n, (b + 1) * kPer); i++)
        {
            const size_t q = which ? which[i] : i;
            vs_mobject o = vs_mspace_object(&queries, q);
            size_t c = h.knn(o, k, out_ids + q * k, out_dists + q * k);
            if (out_counts)
                out_counts[q] = static_cast<int64_t>(c);
        }
    });
}

void host_metric_range(const HostMetric &h, const vs_mspace &queries, size_t q0, size_t q1,
                       double radius, HostMatches &out, int threads, const BackendConfig &config)
{
    const size_t n = q1 - q0;
    out.ids.assign(n, {});
    out.dists.assign(n, {});
    constexpr size_t kPer = 8;
    parallel_for((n + kPer - 1) / kPer, threads, config, [&](size_t b) {
        for (size_t i = b * kPer; i < std::min(n, (b + 1) * kPer); i++)
        {
            vs_mobject o = vs_mspace_object(&queries, q0 + i);
            h.range(o, radius, out.ids[i], out.dists[i]);
        }
    });
}

bool same_space(const vs_mspace &a, const vs_mspace &b)
{
    return a.kind == b.kind && (a.kind != VS_MSPACE_VECTORS || a.dim == b.dim);
}

void host_metric_distances(const HostMetric &h, size_t from, const size_t *rows, size_t n,
                           double *out, int threads, const BackendConfig &config)
{
    const vs_mspace &s = h.space();
    const Probe probe(s, vs_mspace_object(&s, from));
    constexpr size_t kPer = 1024; // rows per item: a thread hand-off costs about one distance
    // a thread per 4 items at most: parallel_for starts its threads per call, and a build makes a
    // call per center (2 607 on wspanish, the later ones over a few thousand rows)
    const size_t most = std::max<size_t>(1, n / (4 * kPer));
    const int use = static_cast<int>(std::min(static_cast<size_t>(std::max(threads, 1)), most));
    parallel_for((n + kPer - 1) / kPer, use, config, [&](size_t b) {
        const size_t end = std::min(n, (b + 1) * kPer);
        for (size_t i = b * kPer; i < end; i++)
            out[i] = probe.distance(rows ? rows[i] : i);
    });
}

} // namespace vs
