// kNN and range over per-query candidate subsets on the CUDA backend: ids mapped to rows (unknown
// ids dropped), exact keys per candidate, a CUB segmented sort per query, repeats counted once,
// then the k best (kNN) or every match (range) written out; queries in batches of at most
// VSEARCH_CUDA_SUBSET_BATCH (2^24) candidates.
#include "cuda/pipelines.cuh"

#include "engine/host_common.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace vs::cuda {

void subsets_impl(DeviceContext &dev, const CudaDataset &c, const float *hq, size_t nq, size_t k,
                  vs_metric m, const Subsets &sub, bool range, float radius, int64_t *out_ids,
                  float *out_d, int64_t *out_counts, RangeCollector *collector)
{
    const size_t d = c.dim();
    const size_t max_cand = env_size("VSEARCH_CUDA_SUBSET_BATCH", size_t{1} << 24);
    size_t q0 = 0;
    while (q0 < nq)
    {
        check_cancel(dev.cfg);
        // A batch of queries with at most max_cand candidates (at least one query).
        size_t q1 = q0 + 1;
        while (q1 < nq && static_cast<size_t>(sub.offsets[q1 + 1] - sub.offsets[q0]) <= max_cand &&
               q1 - q0 < 65536)
            q1++;
        const size_t nb = q1 - q0;
        const int64_t base = sub.offsets[q0];
        const size_t nc = static_cast<size_t>(sub.offsets[q1] - base);
        if (nc >= 0x7fffffffu)
            throw Error(VS_INVALID_ARGUMENT, "a query has too many candidates");
        std::vector<int> which(nb);
        std::iota(which.begin(), which.end(), static_cast<int>(q0));
        QueryBatch Q = upload_queries(dev, hq, which, c);
        std::vector<int64_t> off64(nb + 1);
        std::vector<int> off32(nb + 1);
        for (size_t i = 0; i <= nb; i++)
        {
            off64[i] = sub.offsets[q0 + i] - base;
            off32[i] = static_cast<int>(off64[i]);
        }
        DeviceArray<int64_t> offs(*dev.pool, nb + 1, dev.main), cids(*dev.pool, std::max<size_t>(nc, 1), dev.main);
        DeviceArray<int> offs32(*dev.pool, nb + 1, dev.main), qidx(*dev.pool, std::max<size_t>(nc, 1), dev.main);
        DeviceArray<uint32_t> rows(*dev.pool, std::max<size_t>(nc, 1), dev.main);
        DeviceArray<uint64_t> keys(*dev.pool, std::max<size_t>(nc, 1), dev.main),
            sorted(*dev.pool, std::max<size_t>(nc, 1), dev.main);
        DeviceArray<int64_t> counts(*dev.pool, nb, dev.main);
        VS_CUDA_CHECK(cudaMemcpyAsync(offs.get(), off64.data(), (nb + 1) * 8,
                                      cudaMemcpyHostToDevice, dev.main));
        VS_CUDA_CHECK(cudaMemcpyAsync(offs32.get(), off32.data(), (nb + 1) * 4,
                                      cudaMemcpyHostToDevice, dev.main));
        if (nc)
            VS_CUDA_CHECK(cudaMemcpyAsync(cids.get(), sub.ids + base, nc * 8,
                                          cudaMemcpyHostToDevice, dev.main));
        cudaStream_t st = dev.main;
        launch_subset_rows(offs.get(), static_cast<int>(nb), cids.get(), c.ids.get(),
                           static_cast<uint32_t>(c.size()), rows.get(), qidx.get(), st);
        launch_subset_keys(rows.get(), qidx.get(), nc, Q.view(), c.rows(), m, range, radius,
                           keys.get(), st);
        segmented_sort_keys(*dev.pool, keys.get(), sorted.get(), static_cast<int>(nc),
                            static_cast<int>(nb), offs32.get(), offs32.get() + 1, st);
        launch_subset_count(sorted.get(), offs.get(), static_cast<int>(nb),
                            range ? -1 : static_cast<int64_t>(k), counts.get(), st);
        std::vector<int64_t> h_counts(nb);
        VS_CUDA_CHECK(cudaMemcpyAsync(h_counts.data(), counts.get(), nb * 8,
                                      cudaMemcpyDeviceToHost, st));
        VS_CUDA_CHECK(cudaStreamSynchronize(st));
        if (!range)
        {
            DeviceArray<int64_t> oid(*dev.pool, nb * k, dev.main);
            DeviceArray<float> od(*dev.pool, nb * k, dev.main);
            launch_subset_write(sorted.get(), offs.get(), static_cast<int>(nb), false,
                                static_cast<int64_t>(k), nullptr, c.ids.get(), oid.get(),
                                od.get(), st);
            VS_CUDA_CHECK(cudaMemcpyAsync(out_ids + q0 * k, oid.get(), nb * k * 8,
                                          cudaMemcpyDeviceToHost, st));
            VS_CUDA_CHECK(cudaMemcpyAsync(out_d + q0 * k, od.get(), nb * k * 4,
                                          cudaMemcpyDeviceToHost, st));
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            if (out_counts)
                std::memcpy(out_counts + q0, h_counts.data(), nb * 8);
        }
        else
        {
            std::vector<int64_t> out_off(nb);
            int64_t total = 0;
            for (size_t i = 0; i < nb; i++)
            {
                out_off[i] = total;
                total += h_counts[i];
            }
            DeviceArray<int64_t> ooff(*dev.pool, nb, dev.main);
            DeviceArray<int64_t> oid(*dev.pool, std::max<int64_t>(total, 1), dev.main);
            DeviceArray<float> od(*dev.pool, std::max<int64_t>(total, 1), dev.main);
            VS_CUDA_CHECK(cudaMemcpyAsync(ooff.get(), out_off.data(), nb * 8,
                                          cudaMemcpyHostToDevice, st));
            launch_subset_write(sorted.get(), offs.get(), static_cast<int>(nb), true, 0,
                                ooff.get(), c.ids.get(), oid.get(), od.get(), st);
            std::vector<int64_t> h_ids(static_cast<size_t>(total));
            std::vector<float> h_d(static_cast<size_t>(total));
            if (total)
            {
                VS_CUDA_CHECK(cudaMemcpyAsync(h_ids.data(), oid.get(), total * 8,
                                              cudaMemcpyDeviceToHost, st));
                VS_CUDA_CHECK(cudaMemcpyAsync(h_d.data(), od.get(), total * 4,
                                              cudaMemcpyDeviceToHost, st));
            }
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            collector->add(q0, nb, h_counts.data(), h_ids.data(), h_d.data());
        }
        q0 = q1;
    }
}

} // namespace vs::cuda
