// Metric-space indexes on the CUDA backend (vsearch/metric.h; the reference is the host functions
// of gpu/cpu/lc.cpp, sss.cpp): the objects' arrays in pooled device memory, each batch's queries
// packed for the kernels of impl/metric_kernels.cu (a thread block per query; that file says how
// each index type is searched), and the calls that launch them.
//
// Range: a counting pass, offsets, a writing pass (every match written, none dropped), the matches
// of each query then sorted by id on the host.  kNN: one pass, the k best of each query by
// (distance, id) (up to VS_METRIC_GPU_MAX_K), the host's answer.
//
// Queries the kernels do not take (strings longer than 64 code points, k above the limit) are
// answered by the host functions on the object's host copy (cpu/host_metric.h).
//
// Builds (engine/metric_build_api.cpp) ask a flat object for the distances of one object (a new
// center or pivot) to many: one launch, a thread per string or a warp per vector, the distances
// back to the host, where the build selects; a center longer than 64 code points is measured on
// the host.
#include "cuda/metric_cuda.cuh"

#include "cpu/host_metric.h"
#include "cuda/impl/metric_kernels.cuh"
#include "cuda/utils/error.cuh"
#include "engine/host_common.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace vs::cuda {
namespace {

constexpr size_t kQueryChunk = 8192; // queries per launch (cancel is polled between launches)

// ---- objects ----------------------------------------------------------------------------------

class CudaMetric final : public MetricIndex
{
public:
    template <typename Source>
    CudaMetric(DeviceContext &dev, const Source &src) : host(src)
    {
        type_ = host.type();
        kind_ = host.space().kind;
        metric_ = host.space().metric;
        dim_ = host.space().dim;
        size_ = host.size();
        cudaStream_t s = dev.main;
        view.objs = upload(dev, host.space(), objs);
        if (type_ == kList)
        {
            const vs_lc &lc = host.list();
            view.aux = upload(dev, lc.centers, aux);
            const size_t nc = lc.centers.n;
            radii = DeviceArray<double>(*dev.pool, nc + 1, s);
            boff = DeviceArray<uint64_t>(*dev.pool, nc + 1, s);
            VS_CUDA_CHECK(cudaMemcpyAsync(radii.get(), lc.radii, (nc + 1) * sizeof(double),
                                          cudaMemcpyHostToDevice, s));
            VS_CUDA_CHECK(cudaMemcpyAsync(boff.get(), lc.bucket_offsets,
                                          (nc + 1) * sizeof(uint64_t), cudaMemcpyHostToDevice,
                                          s));
            view.radii = radii.get();
            view.bucket_offsets = boff.get();
        }
        else if (type_ == kPivots)
        {
            const vs_sss &p = host.pivots();
            view.aux = upload(dev, p.pivots, aux);
            const size_t np = p.pivots.n, n = p.objects.n;
            if (kind_ == VS_MSPACE_STRINGS)
            {
                // edit distances (whole numbers) as bytes, 4 pivots to a word, pivot-major
                const size_t ngroups = (np + 3) / 4;
                std::vector<uint32_t> t(std::max<size_t>(ngroups * n, 1), 0);
                for (size_t i = 0; i < n; i++)
                    for (size_t j = 0; j < np; j++)
                    {
                        const float d = std::min(p.table[i * np + j], 255.0f);
                        t[j / 4 * n + i] |= static_cast<uint32_t>(d) << (8 * (j % 4));
                    }
                table8 = DeviceArray<uint32_t>(*dev.pool, t.size(), s);
                VS_CUDA_CHECK(cudaMemcpyAsync(table8.get(), t.data(), t.size() * sizeof(uint32_t),
                                              cudaMemcpyHostToDevice, s));
                VS_CUDA_CHECK(cudaStreamSynchronize(s)); // t goes out of scope
                view.table8 = table8.get();
            }
            else
            {
                std::vector<float> t(std::max<size_t>(np * n, 1));
                for (size_t i = 0; i < n; i++)
                    for (size_t j = 0; j < np; j++)
                        t[j * n + i] = p.table[i * np + j];
                table = DeviceArray<float>(*dev.pool, t.size(), s);
                VS_CUDA_CHECK(cudaMemcpyAsync(table.get(), t.data(), t.size() * sizeof(float),
                                              cudaMemcpyHostToDevice, s));
                VS_CUDA_CHECK(cudaStreamSynchronize(s)); // t goes out of scope
                view.table = table.get();
            }
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(s));
    }

    HostMetric host; // the arrays, for the queries the kernels do not take
    DevIndex view{};

private:
    struct Arrays
    {
        DeviceArray<float> vectors;
        DeviceArray<uint32_t> chars;
        DeviceArray<uint64_t> offsets;
        DeviceArray<int64_t> ids;
    };

    // A host space's arrays (host_metric.h: rebased offsets, ids filled) on the device.
    static DevSpace upload(DeviceContext &dev, const vs_mspace &h, Arrays &a)
    {
        cudaStream_t s = dev.main;
        DevSpace d{};
        d.strings = h.kind == VS_MSPACE_STRINGS;
        d.metric = h.metric;
        d.dim = static_cast<int>(h.dim);
        d.n = h.n;
        auto copy = [&](auto &arr, const auto *src, size_t n) {
            using T = typename std::remove_pointer<decltype(arr.get())>::type;
            arr = DeviceArray<T>(*dev.pool, std::max<size_t>(n, 1), s);
            if (n > 0)
                VS_CUDA_CHECK(cudaMemcpyAsync(arr.get(), src, n * sizeof(T),
                                              cudaMemcpyHostToDevice, s));
            return arr.get();
        };
        if (d.strings)
        {
            d.offsets = copy(a.offsets, h.offsets, h.n + 1);
            d.chars = copy(a.chars, h.chars, static_cast<size_t>(h.offsets[h.n]));
        }
        else
            d.vectors = copy(a.vectors, h.vectors, h.n * h.dim);
        d.ids = copy(a.ids, h.ids, h.n);
        return d;
    }

    Arrays objs, aux;
    DeviceArray<double> radii;
    DeviceArray<uint64_t> boff;
    DeviceArray<float> table;
    DeviceArray<uint32_t> table8;
};

const CudaMetric &as_cuda_metric(const MetricIndex *m)
{
    auto *c = dynamic_cast<const CudaMetric *>(m);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "metric index belongs to another backend");
    return *c;
}

// ---- launches ---------------------------------------------------------------------------------

int host_threads(const DeviceContext &dev)
{
    if (dev.cfg.num_threads > 0)
        return dev.cfg.num_threads;
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool on_device(const vs_mspace &queries, size_t q)
{
    return queries.kind != VS_MSPACE_STRINGS ||
           queries.offsets[q + 1] - queries.offsets[q] <= VS_EDIT_MYERS_MAX;
}

// Queries `which` packed on the device.
struct QueryUpload
{
    DeviceArray<float> vectors;
    DeviceArray<uint32_t> chars;
    DeviceArray<uint64_t> offsets;
    DevQueries view{};

    QueryUpload(DeviceContext &dev, const vs_mspace &q, const std::vector<size_t> &which)
    {
        cudaStream_t s = dev.main;
        view.n = which.size();
        if (q.kind == VS_MSPACE_STRINGS)
        {
            std::vector<uint64_t> off(which.size() + 1, 0);
            std::vector<uint32_t> ch;
            for (size_t i = 0; i < which.size(); i++)
            {
                const uint64_t a = q.offsets[which[i]], b = q.offsets[which[i] + 1];
                ch.insert(ch.end(), q.chars + a, q.chars + b);
                off[i + 1] = ch.size();
            }
            ch.push_back(0);
            offsets = DeviceArray<uint64_t>(*dev.pool, off.size(), s);
            chars = DeviceArray<uint32_t>(*dev.pool, ch.size(), s);
            VS_CUDA_CHECK(cudaMemcpyAsync(offsets.get(), off.data(), off.size() * sizeof(uint64_t),
                                          cudaMemcpyHostToDevice, s));
            VS_CUDA_CHECK(cudaMemcpyAsync(chars.get(), ch.data(), ch.size() * sizeof(uint32_t),
                                          cudaMemcpyHostToDevice, s));
            VS_CUDA_CHECK(cudaStreamSynchronize(s));
            view.offsets = offsets.get();
            view.chars = chars.get();
        }
        else
        {
            std::vector<float> v(std::max<size_t>(which.size() * q.dim, 1));
            for (size_t i = 0; i < which.size(); i++)
                std::copy(q.vectors + which[i] * q.dim, q.vectors + (which[i] + 1) * q.dim,
                          v.begin() + i * q.dim);
            vectors = DeviceArray<float>(*dev.pool, v.size(), s);
            VS_CUDA_CHECK(cudaMemcpyAsync(vectors.get(), v.data(), v.size() * sizeof(float),
                                          cudaMemcpyHostToDevice, s));
            VS_CUDA_CHECK(cudaStreamSynchronize(s));
            view.vectors = vectors.get();
        }
    }
};

void metric_knn(DeviceContext &dev, const CudaMetric &cm, const vs_mspace &queries, size_t k,
                int64_t *out_ids, float *out_dists, int64_t *out_counts)
{
    const size_t nq = queries.n;
    std::vector<size_t> gpu, host;
    for (size_t q = 0; q < nq; q++)
        (k <= VS_METRIC_GPU_MAX_K && on_device(queries, q) ? gpu : host).push_back(q);
    if (!host.empty())
        host_metric_knn(cm.host, queries, host.data(), host.size(), k, out_ids, out_dists,
                        out_counts, host_threads(dev), dev.cfg);
    cudaStream_t s = dev.main;
    const size_t chunk = std::min(gpu.size(), kQueryChunk);
    if (chunk == 0)
        return;
    DeviceArray<int64_t> d_ids(*dev.pool, chunk * k, s);
    DeviceArray<float> d_dists(*dev.pool, chunk * k, s);
    DeviceArray<uint64_t> d_counts(*dev.pool, chunk, s);
    std::vector<int64_t> ids(chunk * k);
    std::vector<float> dists(chunk * k);
    std::vector<uint64_t> counts(chunk);
    for (size_t g0 = 0; g0 < gpu.size(); g0 += chunk)
    {
        check_cancel(dev.cfg);
        const size_t c = std::min(chunk, gpu.size() - g0);
        std::vector<size_t> which(gpu.begin() + g0, gpu.begin() + g0 + c);
        QueryUpload up(dev, queries, which);
        launch_metric<kKnn>(dev, cm.type(), cm.view, up.view, 0.0, static_cast<int>(k), nullptr,
                            d_counts.get(), d_ids.get(), d_dists.get());
        VS_LAUNCH_CHECK();
        VS_CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_ids.get(), c * k * sizeof(int64_t),
                                      cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(dists.data(), d_dists.get(), c * k * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(counts.data(), d_counts.get(), c * sizeof(uint64_t),
                                      cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaStreamSynchronize(s));
        for (size_t i = 0; i < c; i++)
        {
            const size_t q = which[i];
            std::copy(ids.begin() + i * k, ids.begin() + (i + 1) * k, out_ids + q * k);
            std::copy(dists.begin() + i * k, dists.begin() + (i + 1) * k, out_dists + q * k);
            if (out_counts)
                out_counts[q] = static_cast<int64_t>(counts[i]);
        }
    }
}

void metric_range(DeviceContext &dev, const CudaMetric &cm, const vs_mspace &queries,
                  double radius, RangeCollector *collector)
{
    const size_t nq = queries.n;
    cudaStream_t s = dev.main;
    std::vector<int64_t> counts, ids;
    std::vector<float> dists;
    for (size_t q0 = 0; q0 < nq; q0 += kQueryChunk)
    {
        check_cancel(dev.cfg);
        const size_t q1 = std::min(nq, q0 + kQueryChunk);
        std::vector<size_t> gpu;
        for (size_t q = q0; q < q1; q++)
            if (on_device(queries, q))
                gpu.push_back(q);
        std::vector<uint64_t> off(gpu.size() + 1, 0);
        std::vector<int64_t> gids;
        std::vector<float> gdists;
        if (!gpu.empty())
        {
            const size_t c = gpu.size();
            QueryUpload up(dev, queries, gpu);
            DeviceArray<uint64_t> d_counts(*dev.pool, c, s);
            launch_metric<kCount>(dev, cm.type(), cm.view, up.view, radius, 0, nullptr,
                                  d_counts.get(), nullptr, nullptr);
            VS_LAUNCH_CHECK();
            std::vector<uint64_t> hc(c);
            VS_CUDA_CHECK(cudaMemcpyAsync(hc.data(), d_counts.get(), c * sizeof(uint64_t),
                                          cudaMemcpyDeviceToHost, s));
            VS_CUDA_CHECK(cudaStreamSynchronize(s));
            for (size_t i = 0; i < c; i++)
                off[i + 1] = off[i] + hc[i];
            const size_t total = off[c];
            gids.resize(total);
            gdists.resize(total);
            if (total > 0)
            {
                DeviceArray<uint64_t> d_off(*dev.pool, c + 1, s);
                DeviceArray<int64_t> d_ids(*dev.pool, total, s);
                DeviceArray<float> d_dists(*dev.pool, total, s);
                VS_CUDA_CHECK(cudaMemcpyAsync(d_off.get(), off.data(), (c + 1) * sizeof(uint64_t),
                                              cudaMemcpyHostToDevice, s));
                launch_metric<kWrite>(dev, cm.type(), cm.view, up.view, radius, 0, d_off.get(),
                                      nullptr, d_ids.get(), d_dists.get());
                VS_LAUNCH_CHECK();
                VS_CUDA_CHECK(cudaMemcpyAsync(gids.data(), d_ids.get(), total * sizeof(int64_t),
                                              cudaMemcpyDeviceToHost, s));
                VS_CUDA_CHECK(cudaMemcpyAsync(gdists.data(), d_dists.get(),
                                              total * sizeof(float), cudaMemcpyDeviceToHost, s));
                VS_CUDA_CHECK(cudaStreamSynchronize(s));
            }
        }
        // the chunk's answers in query order, ascending ids within a query
        counts.clear();
        ids.clear();
        dists.clear();
        std::vector<std::pair<int64_t, float>> m;
        size_t g = 0;
        for (size_t q = q0; q < q1; q++)
        {
            const size_t before = ids.size();
            if (g < gpu.size() && gpu[g] == q)
            {
                m.clear();
                for (uint64_t i = off[g]; i < off[g + 1]; i++)
                    m.emplace_back(gids[i], gdists[i]);
                std::sort(m.begin(), m.end());
                for (const auto &p : m)
                {
                    ids.push_back(p.first);
                    dists.push_back(p.second);
                }
                g++;
            }
            else
                cm.host.range(vs_mspace_object(&queries, q), radius, ids, dists);
            counts.push_back(static_cast<int64_t>(ids.size() - before));
        }
        collector->add(q0, q1 - q0, counts.data(), ids.data(), dists.data());
    }
}

void metric_distances(DeviceContext &dev, const CudaMetric &cm, size_t from, const size_t *rows,
                      size_t n, double *out)
{
    check_cancel(dev.cfg);
    if (n == 0)
        return;
    const vs_mspace &hs = cm.host.space();
    if (hs.kind == VS_MSPACE_STRINGS &&
        hs.offsets[from + 1] - hs.offsets[from] > VS_EDIT_MYERS_MAX)
    {
        host_metric_distances(cm.host, from, rows, n, out, host_threads(dev), dev.cfg);
        return;
    }
    cudaStream_t s = dev.main;
    std::vector<uint32_t> r;
    DeviceArray<uint32_t> d_rows;
    if (rows)
    {
        r.assign(rows, rows + n);
        d_rows = DeviceArray<uint32_t>(*dev.pool, n, s);
        VS_CUDA_CHECK(cudaMemcpyAsync(d_rows.get(), r.data(), n * sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, s));
    }
    DeviceArray<double> d_out(*dev.pool, n, s);
    launch_build_distances(s, cm.view.objs, from, rows ? d_rows.get() : nullptr, n, d_out.get());
    VS_LAUNCH_CHECK();
    VS_CUDA_CHECK(cudaMemcpyAsync(out, d_out.get(), n * sizeof(double), cudaMemcpyDeviceToHost, s));
    VS_CUDA_CHECK(cudaStreamSynchronize(s)); // r and out
}

class CudaMetricBackend final : public MetricBackend
{
public:
    explicit CudaMetricBackend(Lanes &lanes) : lanes_(lanes) {}

    Status create_list(const vs_lc &lc, MetricIndex **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) { *out = new CudaMetric(dev, lc); });
    }
    Status create_pivots(const vs_sss &sss, MetricIndex **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) { *out = new CudaMetric(dev, sss); });
    }
    Status create_flat(const vs_mspace &objects, MetricIndex **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) { *out = new CudaMetric(dev, objects); });
    }

    Status knn(const MetricIndex *index, const vs_mspace &queries, size_t k, int64_t *out_ids,
               float *out_dists, int64_t *out_counts) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            metric_knn(dev, as_cuda_metric(index), queries, k, out_ids, out_dists, out_counts);
        });
    }

    Status range(const MetricIndex *index, const vs_mspace &queries, double radius,
                 RangeCollector *collector) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            metric_range(dev, as_cuda_metric(index), queries, radius, collector);
        });
    }

    Status distances(const MetricIndex *flat, size_t from, const size_t *rows, size_t n,
                     double *out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            metric_distances(dev, as_cuda_metric(flat), from, rows, n, out);
        });
    }

private:
    Lanes &lanes_;
};

} // namespace

std::unique_ptr<MetricBackend> make_cuda_metric(Lanes &lanes)
{
    return std::unique_ptr<MetricBackend>(new CudaMetricBackend(lanes));
}

} // namespace vs::cuda
