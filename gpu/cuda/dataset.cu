// Resident datasets of the CUDA backend: add (appended in place when every new id is larger,
// else merged into fresh arrays by the gather kernel), remove (compacted by the same kernel) and
// subset (the kept rows gathered into a new dataset).
#include "cuda/dataset.cuh"

#include "engine/host_common.h"
#include "vsearch/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace vs::cuda {
namespace {

void upload_meta(DeviceContext &dev, CudaDataset &c, size_t from, size_t to)
{
    size_t cnt = to - from;
    if (cnt == 0)
        return;
    std::vector<float> sq(cnt), inv(cnt);
    for (size_t i = 0; i < cnt; i++)
    {
        double s = c.host_sq[from + i];
        sq[i] = static_cast<float>(s);
        inv[i] = static_cast<float>(1.0 / std::sqrt(s));
    }
    VS_CUDA_CHECK(cudaMemcpyAsync(c.ids.get() + from, c.host_ids.data() + from,
                                  cnt * sizeof(int64_t), cudaMemcpyHostToDevice, dev.main));
    VS_CUDA_CHECK(cudaMemcpyAsync(c.sq.get() + from, sq.data(), cnt * sizeof(float),
                                  cudaMemcpyHostToDevice, dev.main));
    VS_CUDA_CHECK(cudaMemcpyAsync(c.inv.get() + from, inv.data(), cnt * sizeof(float),
                                  cudaMemcpyHostToDevice, dev.main));
    VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
}

// Fresh arrays of the given capacity (norm arrays padded for vector over-reads).
void allocate(DeviceContext &dev, size_t cap, size_t row_bytes, DeviceArray<unsigned char> &x,
              DeviceArray<int64_t> &ids, DeviceArray<float> &sq, DeviceArray<float> &inv)
{
    x = DeviceArray<unsigned char>(*dev.pool, std::max<size_t>(cap, 1) * row_bytes, dev.main);
    ids = DeviceArray<int64_t>(*dev.pool, cap + 4, dev.main);
    sq = DeviceArray<float>(*dev.pool, cap + 4, dev.main);
    inv = DeviceArray<float>(*dev.pool, cap + 4, dev.main);
    VS_CUDA_CHECK(cudaMemsetAsync(sq.get(), 0, (cap + 4) * sizeof(float), dev.main));
    VS_CUDA_CHECK(cudaMemsetAsync(inv.get(), 0, (cap + 4) * sizeof(float), dev.main));
}

} // namespace

void add_impl(DeviceContext &dev, CudaDataset &c, const float *vectors, const int64_t *ids,
              size_t n)
{
    AddPlan plan = plan_add(c.host_ids, ids, n);
    if (n == 0)
        return;
    const size_t d = c.dim(), old = c.size(), rb = c.row_bytes();
    std::vector<unsigned char> fresh(n * rb);
    std::vector<double> fresh_sq(n);
    double maxnorm = c.maxnorm;
    for (size_t j = 0; j < n; j++)
    {
        const float *v = vectors + plan.new_order[j] * d;
        if (c.half()) // exact: the front end gives an F16 dataset exact halves
            vs_float_to_half(v, reinterpret_cast<uint16_t *>(&fresh[j * rb]), d);
        else
            std::memcpy(&fresh[j * rb], v, rb);
        fresh_sq[j] = sqnorm_double(v, d);
        maxnorm = std::max(maxnorm, std::sqrt(fresh_sq[j]));
    }
    if (plan.append)
    {
        if (old + n > c.capacity)
        {
            size_t cap = std::max(old + n, std::max<size_t>(1024, c.capacity + c.capacity / 2));
            DeviceArray<unsigned char> x;
            DeviceArray<float> sq, inv;
            DeviceArray<int64_t> idv;
            allocate(dev, cap, rb, x, idv, sq, inv);
            if (old)
            {
                VS_CUDA_CHECK(cudaMemcpyAsync(x.get(), c.x.get(), old * rb,
                                              cudaMemcpyDeviceToDevice, dev.main));
                VS_CUDA_CHECK(cudaMemcpyAsync(sq.get(), c.sq.get(), old * sizeof(float),
                                              cudaMemcpyDeviceToDevice, dev.main));
                VS_CUDA_CHECK(cudaMemcpyAsync(inv.get(), c.inv.get(), old * sizeof(float),
                                              cudaMemcpyDeviceToDevice, dev.main));
                VS_CUDA_CHECK(cudaMemcpyAsync(idv.get(), c.ids.get(), old * sizeof(int64_t),
                                              cudaMemcpyDeviceToDevice, dev.main));
            }
            c.x = std::move(x);
            c.sq = std::move(sq);
            c.inv = std::move(inv);
            c.ids = std::move(idv);
            c.capacity = cap;
        }
        VS_CUDA_CHECK(cudaMemcpyAsync(c.x.get() + old * rb, fresh.data(), n * rb,
                                      cudaMemcpyHostToDevice, dev.main));
        for (size_t j = 0; j < n; j++)
        {
            c.host_ids.push_back(ids[plan.new_order[j]]);
            c.host_sq.push_back(fresh_sq[j]);
        }
        upload_meta(dev, c, old, old + n);
    }
    else
    {
        const size_t total = old + n;
        size_t cap = std::max(total, c.capacity);
        DeviceArray<unsigned char> x;
        DeviceArray<float> sq, inv;
        DeviceArray<int64_t> idv;
        allocate(dev, cap, rb, x, idv, sq, inv);
        DeviceArray<unsigned char> fresh_dev(*dev.pool, n * rb, dev.main);
        DeviceArray<int64_t> map(*dev.pool, total, dev.main);
        VS_CUDA_CHECK(cudaMemcpyAsync(fresh_dev.get(), fresh.data(), n * rb,
                                      cudaMemcpyHostToDevice, dev.main));
        VS_CUDA_CHECK(cudaMemcpyAsync(map.get(), plan.merged.data(), total * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, dev.main));
        launch_gather_rows(x.get(), c.x.get(), fresh_dev.get(), map.get(), total, rb, dev.main);
        std::vector<double> sqs(total);
        for (size_t r = 0; r < total; r++)
        {
            int64_t src = plan.merged[r];
            sqs[r] = src >= 0 ? c.host_sq[static_cast<size_t>(src)]
                              : fresh_sq[static_cast<size_t>(-src - 1)];
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
        c.x = std::move(x);
        c.sq = std::move(sq);
        c.inv = std::move(inv);
        c.ids = std::move(idv);
        c.capacity = cap;
        c.host_ids = std::move(plan.merged_ids);
        c.host_sq = std::move(sqs);
        upload_meta(dev, c, 0, total);
    }
    c.maxnorm = maxnorm;
    c.set_size(c.host_ids.size());
    VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
}

namespace {

// Replaces out's rows by c's rows at these positions (ascending), gathered on the device; out may
// be c itself.
void keep_rows(DeviceContext &dev, const CudaDataset &c, const std::vector<size_t> &rows,
               CudaDataset &out)
{
    const size_t rb = c.row_bytes(), total = rows.size();
    DeviceArray<unsigned char> x;
    DeviceArray<float> sq, inv;
    DeviceArray<int64_t> idv;
    allocate(dev, std::max<size_t>(total, 1), rb, x, idv, sq, inv);
    std::vector<int64_t> map(rows.begin(), rows.end());
    std::vector<int64_t> hid(total);
    std::vector<double> hsq(total);
    for (size_t r = 0; r < total; r++)
    {
        hid[r] = c.host_ids[rows[r]];
        hsq[r] = c.host_sq[rows[r]];
    }
    if (total)
    {
        DeviceArray<int64_t> mapd(*dev.pool, total, dev.main);
        VS_CUDA_CHECK(cudaMemcpyAsync(mapd.get(), map.data(), total * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, dev.main));
        launch_gather_rows(x.get(), c.x.get(), nullptr, mapd.get(), total, rb, dev.main);
        VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
    }
    out.x = std::move(x);
    out.sq = std::move(sq);
    out.inv = std::move(inv);
    out.ids = std::move(idv);
    out.capacity = std::max<size_t>(total, 1);
    out.host_ids = std::move(hid);
    out.host_sq = std::move(hsq);
    upload_meta(dev, out, 0, total);
    out.set_size(total);
}

} // namespace

void remove_impl(DeviceContext &dev, CudaDataset &c, const int64_t *ids, size_t n, size_t *removed)
{
    size_t gone = 0;
    std::vector<size_t> keep = plan_remove(c.host_ids, ids, n, &gone);
    if (removed)
        *removed = gone;
    if (gone == 0)
        return;
    keep_rows(dev, c, keep, c); // maxnorm stays an upper bound
}

void subset_impl(DeviceContext &dev, const CudaDataset &c, const int64_t *ids, size_t n,
                 CudaDataset &out)
{
    keep_rows(dev, c, plan_subset(c.host_ids, ids, n), out);
    for (double s : out.host_sq)
        out.maxnorm = std::max(out.maxnorm, std::sqrt(s));
}

} // namespace vs::cuda
