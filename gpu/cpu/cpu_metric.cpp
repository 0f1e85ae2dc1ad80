// Metric-space index objects on the CPU: a host copy (host_metric.h) per object; kNN and range
// search query by query on the backend's threads.  The answers do not depend on the thread count
// (each query is searched on its own).
#include "cpu/cpu_metric.h"

#include "cpu/host_metric.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace vs {
namespace {

class CpuMetricIndex final : public MetricIndex
{
public:
    template <typename Source> explicit CpuMetricIndex(const Source &src) : host(src)
    {
        type_ = host.type();
        kind_ = host.space().kind;
        metric_ = host.space().metric;
        dim_ = host.space().dim;
        size_ = host.size();
    }
    HostMetric host;
};

const CpuMetricIndex &as_cpu_metric(const MetricIndex *m)
{
    auto *c = dynamic_cast<const CpuMetricIndex *>(m);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "metric index belongs to another backend");
    return *c;
}

class CpuMetricBackend final : public MetricBackend
{
public:
    CpuMetricBackend(const BackendConfig &config, int threads) : cfg_(config), threads_(threads) {}

    Status create_list(const vs_lc &lc, MetricIndex **out) noexcept override
    {
        return guarded([&] { *out = new CpuMetricIndex(lc); });
    }
    Status create_pivots(const vs_sss &sss, MetricIndex **out) noexcept override
    {
        return guarded([&] { *out = new CpuMetricIndex(sss); });
    }
    Status create_flat(const vs_mspace &objects, MetricIndex **out) noexcept override
    {
        return guarded([&] { *out = new CpuMetricIndex(objects); });
    }

    Status knn(const MetricIndex *index, const vs_mspace &queries, size_t k, int64_t *out_ids,
               float *out_dists, int64_t *out_counts) noexcept override
    {
        return guarded([&] {
            host_metric_knn(as_cpu_metric(index).host, queries, nullptr, queries.n, k, out_ids,
                            out_dists, out_counts, threads_, cfg_);
        });
    }

    Status range(const MetricIndex *index, const vs_mspace &queries, double radius,
                 RangeCollector *collector) noexcept override
    {
        return guarded([&] {
            const HostMetric &h = as_cpu_metric(index).host;
            // blocks of queries: computed in parallel, delivered in order from this thread
            const size_t block = std::max<size_t>(64, static_cast<size_t>(threads_) * 16);
            HostMatches m;
            std::vector<int64_t> counts, ids;
            std::vector<float> dists;
            for (size_t q0 = 0; q0 < queries.n; q0 += block)
            {
                const size_t q1 = std::min(queries.n, q0 + block);
                host_metric_range(h, queries, q0, q1, radius, m, threads_, cfg_);
                counts.clear();
                ids.clear();
                dists.clear();
                for (size_t i = 0; i < q1 - q0; i++)
                {
                    counts.push_back(static_cast<int64_t>(m.ids[i].size()));
                    ids.insert(ids.end(), m.ids[i].begin(), m.ids[i].end());
                    dists.insert(dists.end(), m.dists[i].begin(), m.dists[i].end());
                }
                collector->add(q0, q1 - q0, counts.data(), ids.data(), dists.data());
            }
        });
    }

    Status distances(const MetricIndex *flat, size_t from, const size_t *rows, size_t n,
                     double *out) noexcept override
    {
        return guarded([&] {
            host_metric_distances(as_cpu_metric(flat).host, from, rows, n, out, threads_, cfg_);
        });
    }

private:
    const BackendConfig &cfg_;
    int threads_;
};

} // namespace

std::unique_ptr<MetricBackend> make_cpu_metric(const BackendConfig &config, int threads)
{
    return std::unique_ptr<MetricBackend>(new CpuMetricBackend(config, threads));
}

} // namespace vs
