// The CUDA backend: device context (device, streams, cuBLAS handles, budgeted memory pool),
// resident datasets, and the search pipelines.  kNN picks, per call:
//   * GEMM path (large batches, L2/IP/cosine): cuBLAS GEMM (TF32 tensor cores by default) of a
//     query tile against the dataset into a tile buffer, a selection of K' = k + margin
//     candidates per query (tiles of whole rows: a threshold from a sample of the row, a filter
//     pass and a sort of the survivors; column tiles: WarpTopK, one warp per row segment,
//     thresholds carried across segments), the exact re-rank of the candidates (double,
//     engine/exact.h) with a sort in shared memory, and certification against the GEMM error
//     bound; two streams alternate query tiles.  The full distance matrix never exists: only
//     one tile per stream.
//   * direct path (small batches, L1, and the queries GEMM could not certify): up to 32 queries
//     the rows kernels read the dataset once and keep the keys below a sampled threshold;
//     otherwise (and for the queries whose sample missed) the staged scan kernel with fused
//     selectors; then the same re-rank / certification (dot-form or tight direct bound).
//   * large k (K' > 4096): full-row tiles, radix select of K' candidates, re-rank, certify.
//   * exhaustive exact path (K' >= n, or the rare queries that no bound certifies: exact keys
//     of every row and a segmented sort).
// Range: approximate tile, CUB select of candidates within radius + bound, exact check, CUB
// compaction, per query tile and dataset chunk so the output never needs more than the budget.
#include "cpu/cpu_backend.h" // knn_candidates
#include "cuda/impl/kernels.cuh"
#include "cuda/ivfpq_cuda.cuh"
#include "cuda/utils/error.cuh"
#include "cuda/utils/memory_pool.cuh"
#include "cuda/utils/select.cuh"
#include "engine/backend.h"
#include "engine/exact.h"
#include "engine/host_common.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace vs::cuda {
namespace {

constexpr int kWarpSelectMax = 4096; // largest K' for the register/shared-memory selectors

size_t env_size(const char *name, size_t dflt)
{
    const char *v = std::getenv(name);
    if (!v || !*v)
        return dflt;
    return static_cast<size_t>(std::strtoull(v, nullptr, 10));
}

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

class PinnedBuffer
{
public:
    ~PinnedBuffer()
    {
        if (p_)
            cudaFreeHost(p_);
    }
    void *ensure(size_t bytes)
    {
        if (bytes > cap_)
        {
            if (p_)
                cudaFreeHost(p_);
            p_ = nullptr;
            cap_ = 0;
            size_t want = std::max(bytes, cap_ * 2);
            VS_CUDA_CHECK(cudaMallocHost(&p_, want));
            cap_ = want;
        }
        return p_;
    }

private:
    void *p_ = nullptr;
    size_t cap_ = 0;
};

class CudaDataset final : public Dataset
{
public:
    CudaDataset(size_t dim, vs_dtype dtype)
    {
        dim_ = dim;
        dtype_ = dtype;
    }
    DeviceRows rows() const
    {
        return DeviceRows{x.get(), ids.get(), sq.get(), inv.get(), static_cast<uint32_t>(size_),
                          static_cast<int>(dim_)};
    }
    void set_size(size_t n) { size_ = n; }

    DeviceArray<float> x, sq, inv;
    DeviceArray<int64_t> ids;
    size_t capacity = 0;
    std::vector<int64_t> host_ids;
    std::vector<double> host_sq;
    double maxnorm = 0;
};

const CudaDataset &as_cuda(const Dataset *ds)
{
    auto *c = dynamic_cast<const CudaDataset *>(ds);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "dataset belongs to another backend");
    return *c;
}

// Queries on the device with their norms, uploaded in one copy.
struct QueryBatch
{
    DeviceArray<unsigned char> buf;
    float *x = nullptr, *sq = nullptr, *inv = nullptr;
    double *norm = nullptr;
    int n = 0;
    int d = 0;
    DeviceQueries view(size_t q0 = 0) const
    {
        return DeviceQueries{x + q0 * d, sq + q0, inv + q0, norm + q0, n - static_cast<int>(q0)};
    }
    std::vector<double> host_norm;
};

// VSEARCH_CUDA_PROFILE=1: synchronise after each phase and print where the time went (it
// serialises the two streams, so totals grow; use it for the split, not the total).
class Profile
{
public:
    Profile()
    {
        const char *p = std::getenv("VSEARCH_CUDA_PROFILE");
        on_ = p && *p && *p != '0';
        t_ = now();
    }
    void mark(const char *phase, cudaStream_t s)
    {
        if (!on_)
            return;
        cudaStreamSynchronize(s);
        double t = now();
        for (auto &e : acc_)
            if (e.first == phase)
            {
                e.second += t - t_;
                t_ = t;
                return;
            }
        acc_.emplace_back(phase, t - t_);
        t_ = t;
    }
    void print(const char *what, size_t nq, size_t k) const
    {
        if (!on_)
            return;
        std::fprintf(stderr, "vsearch profile %s nq=%zu k=%zu:", what, nq, k);
        for (auto &e : acc_)
            std::fprintf(stderr, " %s=%.3fms", e.first.c_str(), e.second * 1e3);
        std::fprintf(stderr, "\n");
    }

private:
    static double now()
    {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
    }
    bool on_ = false;
    double t_ = 0;
    std::vector<std::pair<std::string, double>> acc_;
};

// Waits for the work streams before per-call buffers are released (also on exceptions).
struct StreamJoin
{
    cudaStream_t *s;
    int n;
    ~StreamJoin()
    {
        for (int i = 0; i < n; i++)
            cudaStreamSynchronize(s[i]);
    }
};

class CudaBackend final : public Backend
{
public:
    explicit CudaBackend(const BackendConfig &cfg) : cfg_(cfg), device_(cfg.device)
    {
        VS_CUDA_CHECK(cudaSetDevice(device_));
        VS_CUDA_CHECK(cudaGetDeviceProperties(&prop_, device_));
        size_t free_b = 0, total_b = 0;
        VS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        size_t budget = cfg.device_memory_budget ? cfg.device_memory_budget : free_b / 10 * 9;
        pool_.reset(new DevicePool(device_, budget));
        VS_CUDA_CHECK(cudaStreamCreateWithFlags(&main_, cudaStreamNonBlocking));
        for (int i = 0; i < 2; i++)
        {
            VS_CUDA_CHECK(cudaStreamCreateWithFlags(&work_[i], cudaStreamNonBlocking));
            VS_CUBLAS_CHECK(cublasCreate(&blas_[i]));
            VS_CUBLAS_CHECK(cublasSetStream(blas_[i], work_[i]));
            VS_CUBLAS_CHECK(cublasSetMathMode(blas_[i], cfg.gemm_precision == VS_GEMM_TF32
                                                            ? CUBLAS_TF32_TENSOR_OP_MATH
                                                            : CUBLAS_PEDANTIC_MATH));
        }
        tile_bytes_ = env_size("VSEARCH_CUDA_TILE_BYTES", size_t{1} << 30);
        small_batch_ = static_cast<int>(env_size("VSEARCH_CUDA_SMALL_BATCH", 32));
        smem_optin_ = prop_.sharedMemPerBlockOptin;
        ivfpq_ = make_cuda_ivfpq(IvfpqDevice{*pool_, main_, cfg_, smem_optin_}, device_);
    }

    ~CudaBackend() override
    {
        cudaSetDevice(device_);
        cudaDeviceSynchronize();
        for (int i = 0; i < 2; i++)
        {
            if (blas_[i])
                cublasDestroy(blas_[i]);
            if (work_[i])
                cudaStreamDestroy(work_[i]);
        }
        if (main_)
            cudaStreamDestroy(main_);
        pool_.reset();
    }

    vs_backend_kind kind() const noexcept override { return VS_BACKEND_CUDA; }

    Status info(vs_context_info *out) noexcept override
    {
        return guarded([&] {
            out->backend = VS_BACKEND_CUDA;
            std::snprintf(out->device_name, sizeof out->device_name, "%s", prop_.name);
            out->memory_budget = pool_->budget();
            out->memory_in_use = pool_->in_use();
        });
    }

    Status dataset_create(size_t dim, vs_dtype dtype, Dataset **out) noexcept override
    {
        return guarded([&] { *out = new CudaDataset(dim, dtype); });
    }

    Status dataset_add(Dataset *ds, const float *vectors, const int64_t *ids,
                       size_t n) noexcept override
    {
        return guarded([&] {
            VS_CUDA_CHECK(cudaSetDevice(device_));
            add_impl(const_cast<CudaDataset &>(as_cuda(ds)), vectors, ids, n);
        });
    }

    Status dataset_remove(Dataset *ds, const int64_t *ids, size_t n,
                          size_t *removed) noexcept override
    {
        return guarded([&] {
            VS_CUDA_CHECK(cudaSetDevice(device_));
            remove_impl(const_cast<CudaDataset &>(as_cuda(ds)), ids, n, removed);
        });
    }

    Status knn(const Dataset *ds, const float *queries, size_t nq, size_t k, vs_metric metric,
               const Subsets *subsets, int64_t *out_ids, float *out_dists,
               int64_t *out_counts) noexcept override
    {
        return guarded([&] {
            VS_CUDA_CHECK(cudaSetDevice(device_));
            const CudaDataset &c = as_cuda(ds);
            if (subsets)
                subsets_impl(c, queries, nq, k, metric, *subsets, false, 0.0f, out_ids, out_dists,
                             out_counts, nullptr);
            else
                knn_impl(c, queries, nq, k, metric, out_ids, out_dists, out_counts);
        });
    }

    Status range(const Dataset *ds, const float *queries, size_t nq, float radius,
                 vs_metric metric, const Subsets *subsets,
                 RangeCollector *collector) noexcept override
    {
        return guarded([&] {
            VS_CUDA_CHECK(cudaSetDevice(device_));
            const CudaDataset &c = as_cuda(ds);
            if (subsets)
                subsets_impl(c, queries, nq, 0, metric, *subsets, true, radius, nullptr, nullptr,
                             nullptr, collector);
            else
                range_impl(c, queries, nq, radius, metric, collector);
        });
    }

    Status kmeans(const float *data, size_t n, size_t dim, const vs_kmeans_params &params,
                  float *centroids, vs_kmeans_info *info) noexcept override
    {
        return guarded([&] {
            VS_CUDA_CHECK(cudaSetDevice(device_));
            kmeans_impl(data, n, dim, params, centroids, info);
        });
    }

    IvfpqBackend *ivfpq() noexcept override { return ivfpq_.get(); }

private:
    // ---- datasets ------------------------------------------------------------------------

    void upload_meta(CudaDataset &c, size_t from, size_t to)
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
                                      cnt * sizeof(int64_t), cudaMemcpyHostToDevice, main_));
        VS_CUDA_CHECK(cudaMemcpyAsync(c.sq.get() + from, sq.data(), cnt * sizeof(float),
                                      cudaMemcpyHostToDevice, main_));
        VS_CUDA_CHECK(cudaMemcpyAsync(c.inv.get() + from, inv.data(), cnt * sizeof(float),
                                      cudaMemcpyHostToDevice, main_));
        VS_CUDA_CHECK(cudaStreamSynchronize(main_));
    }

    // Fresh arrays of the given capacity (norm arrays padded for vector over-reads).
    void allocate(size_t cap, size_t d, DeviceArray<float> &x, DeviceArray<int64_t> &ids,
                  DeviceArray<float> &sq, DeviceArray<float> &inv)
    {
        x = DeviceArray<float>(*pool_, std::max<size_t>(cap, 1) * d, main_);
        ids = DeviceArray<int64_t>(*pool_, cap + 4, main_);
        sq = DeviceArray<float>(*pool_, cap + 4, main_);
        inv = DeviceArray<float>(*pool_, cap + 4, main_);
        VS_CUDA_CHECK(cudaMemsetAsync(sq.get(), 0, (cap + 4) * sizeof(float), main_));
        VS_CUDA_CHECK(cudaMemsetAsync(inv.get(), 0, (cap + 4) * sizeof(float), main_));
    }

    void add_impl(CudaDataset &c, const float *vectors, const int64_t *ids, size_t n)
    {
        AddPlan plan = plan_add(c.host_ids, ids, n);
        if (n == 0)
            return;
        const size_t d = c.dim(), old = c.size();
        std::vector<float> fresh(n * d);
        std::vector<double> fresh_sq(n);
        double maxnorm = c.maxnorm;
        for (size_t j = 0; j < n; j++)
        {
            std::memcpy(&fresh[j * d], vectors + plan.new_order[j] * d, d * sizeof(float));
            fresh_sq[j] = sqnorm_double(&fresh[j * d], d);
            maxnorm = std::max(maxnorm, std::sqrt(fresh_sq[j]));
        }
        if (plan.append)
        {
            if (old + n > c.capacity)
            {
                size_t cap = std::max(old + n, std::max<size_t>(1024, c.capacity + c.capacity / 2));
                DeviceArray<float> x, sq, inv;
                DeviceArray<int64_t> idv;
                allocate(cap, d, x, idv, sq, inv);
                if (old)
                {
                    VS_CUDA_CHECK(cudaMemcpyAsync(x.get(), c.x.get(), old * d * sizeof(float),
                                                  cudaMemcpyDeviceToDevice, main_));
                    VS_CUDA_CHECK(cudaMemcpyAsync(sq.get(), c.sq.get(), old * sizeof(float),
                                                  cudaMemcpyDeviceToDevice, main_));
                    VS_CUDA_CHECK(cudaMemcpyAsync(inv.get(), c.inv.get(), old * sizeof(float),
                                                  cudaMemcpyDeviceToDevice, main_));
                    VS_CUDA_CHECK(cudaMemcpyAsync(idv.get(), c.ids.get(), old * sizeof(int64_t),
                                                  cudaMemcpyDeviceToDevice, main_));
                }
                c.x = std::move(x);
                c.sq = std::move(sq);
                c.inv = std::move(inv);
                c.ids = std::move(idv);
                c.capacity = cap;
            }
            VS_CUDA_CHECK(cudaMemcpyAsync(c.x.get() + old * d, fresh.data(), n * d * sizeof(float),
                                          cudaMemcpyHostToDevice, main_));
            for (size_t j = 0; j < n; j++)
            {
                c.host_ids.push_back(ids[plan.new_order[j]]);
                c.host_sq.push_back(fresh_sq[j]);
            }
            upload_meta(c, old, old + n);
        }
        else
        {
            const size_t total = old + n;
            size_t cap = std::max(total, c.capacity);
            DeviceArray<float> x, sq, inv;
            DeviceArray<int64_t> idv;
            allocate(cap, d, x, idv, sq, inv);
            DeviceArray<float> fresh_dev(*pool_, n * d, main_);
            DeviceArray<int64_t> map(*pool_, total, main_);
            VS_CUDA_CHECK(cudaMemcpyAsync(fresh_dev.get(), fresh.data(), n * d * sizeof(float),
                                          cudaMemcpyHostToDevice, main_));
            VS_CUDA_CHECK(cudaMemcpyAsync(map.get(), plan.merged.data(), total * sizeof(int64_t),
                                          cudaMemcpyHostToDevice, main_));
            launch_gather_rows(x.get(), c.x.get(), fresh_dev.get(), map.get(), total,
                               static_cast<int>(d), main_);
            std::vector<double> sqs(total);
            for (size_t r = 0; r < total; r++)
            {
                int64_t src = plan.merged[r];
                sqs[r] = src >= 0 ? c.host_sq[static_cast<size_t>(src)]
                                  : fresh_sq[static_cast<size_t>(-src - 1)];
            }
            VS_CUDA_CHECK(cudaStreamSynchronize(main_));
            c.x = std::move(x);
            c.sq = std::move(sq);
            c.inv = std::move(inv);
            c.ids = std::move(idv);
            c.capacity = cap;
            c.host_ids = std::move(plan.merged_ids);
            c.host_sq = std::move(sqs);
            upload_meta(c, 0, total);
        }
        c.maxnorm = maxnorm;
        c.set_size(c.host_ids.size());
        VS_CUDA_CHECK(cudaStreamSynchronize(main_));
    }

    void remove_impl(CudaDataset &c, const int64_t *ids, size_t n, size_t *removed)
    {
        size_t gone = 0;
        std::vector<size_t> keep = plan_remove(c.host_ids, ids, n, &gone);
        if (removed)
            *removed = gone;
        if (gone == 0)
            return;
        const size_t d = c.dim(), total = keep.size();
        DeviceArray<float> x, sq, inv;
        DeviceArray<int64_t> idv;
        allocate(std::max<size_t>(total, 1), d, x, idv, sq, inv);
        std::vector<int64_t> map(keep.begin(), keep.end());
        std::vector<int64_t> hid(total);
        std::vector<double> hsq(total);
        for (size_t r = 0; r < total; r++)
        {
            hid[r] = c.host_ids[keep[r]];
            hsq[r] = c.host_sq[keep[r]];
        }
        if (total)
        {
            DeviceArray<int64_t> mapd(*pool_, total, main_);
            VS_CUDA_CHECK(cudaMemcpyAsync(mapd.get(), map.data(), total * sizeof(int64_t),
                                          cudaMemcpyHostToDevice, main_));
            launch_gather_rows(x.get(), c.x.get(), nullptr, mapd.get(), total, static_cast<int>(d),
                               main_);
            VS_CUDA_CHECK(cudaStreamSynchronize(main_));
        }
        c.x = std::move(x);
        c.sq = std::move(sq);
        c.inv = std::move(inv);
        c.ids = std::move(idv);
        c.capacity = std::max<size_t>(total, 1);
        c.host_ids = std::move(hid);
        c.host_sq = std::move(hsq);
        upload_meta(c, 0, total);
        c.set_size(total);
    }

    // ---- shared helpers -------------------------------------------------------------------

    // Uploads the queries on main_; with sync, waits for the copy (callers that go on with other
    // streams need that; work on main_ itself is ordered after it).
    QueryBatch upload_queries(const float *hq, const std::vector<int> &which, size_t d, bool sync = true)
    {
        QueryBatch b;
        b.n = static_cast<int>(which.size());
        b.d = static_cast<int>(d);
        const size_t nb = which.size();
        // Layout: norms (double) | x | sq | inv, each part 16-byte aligned.
        const size_t o_norm = 0, o_x = round_up((nb + 4) * 8, 16),
                     o_sq = o_x + round_up(std::max<size_t>(nb * d, 1) * 4, 16),
                     o_inv = o_sq + round_up((nb + 4) * 4, 16), total = o_inv + (nb + 4) * 4;
        staging_.resize(total);
        unsigned char *h = staging_.data();
        std::memset(h, 0, total);
        double *hn = reinterpret_cast<double *>(h + o_norm);
        float *hx = reinterpret_cast<float *>(h + o_x), *hs = reinterpret_cast<float *>(h + o_sq),
              *hi = reinterpret_cast<float *>(h + o_inv);
        b.host_norm.resize(nb);
        for (size_t i = 0; i < nb; i++)
        {
            const float *src = hq + static_cast<size_t>(which[i]) * d;
            std::memcpy(hx + i * d, src, d * sizeof(float));
            double sqn = sqnorm_double(src, d);
            hs[i] = static_cast<float>(sqn);
            hn[i] = b.host_norm[i] = std::sqrt(sqn);
            hi[i] = static_cast<float>(1.0 / std::sqrt(sqn));
        }
        b.buf = DeviceArray<unsigned char>(*pool_, total, main_);
        VS_CUDA_CHECK(cudaMemcpyAsync(b.buf.get(), h, total, cudaMemcpyHostToDevice, main_));
        b.norm = reinterpret_cast<double *>(b.buf.get() + o_norm);
        b.x = reinterpret_cast<float *>(b.buf.get() + o_x);
        b.sq = reinterpret_cast<float *>(b.buf.get() + o_sq);
        b.inv = reinterpret_cast<float *>(b.buf.get() + o_inv);
        if (sync)
            VS_CUDA_CHECK(cudaStreamSynchronize(main_));
        return b;
    }

    // Per-tile outputs on the device (one allocation) and their pinned host copy (same layout):
    // ids (tq x k) | distances (tq x k) | counts (tq) | ok (tq).
    struct TileOut
    {
        DeviceArray<unsigned char> buf;
        int64_t *ids = nullptr, *counts = nullptr;
        float *d = nullptr;
        int *ok = nullptr;
        PinnedBuffer *host = nullptr;
        size_t tq = 0, k = 0;
        size_t o_d() const { return tq * k * 8; }
        size_t o_cnt() const { return round_up(tq * k * 12, 8); }
        size_t o_ok() const { return o_cnt() + tq * 8; }
        size_t bytes() const { return o_ok() + tq * 4 + 16; }
    };

    void make_out(TileOut &o, size_t tq, size_t k, PinnedBuffer *host)
    {
        o.tq = tq;
        o.k = k;
        o.buf = DeviceArray<unsigned char>(*pool_, o.bytes(), main_);
        o.ids = reinterpret_cast<int64_t *>(o.buf.get());
        o.d = reinterpret_cast<float *>(o.buf.get() + o.o_d());
        o.counts = reinterpret_cast<int64_t *>(o.buf.get() + o.o_cnt());
        o.ok = reinterpret_cast<int *>(o.buf.get() + o.o_ok());
        o.host = host;
        host->ensure(o.bytes());
    }

    // Copies the outputs of the first qn queries to the pinned buffer (async on s).
    void download(TileOut &o, size_t qn, cudaStream_t s)
    {
        char *h = static_cast<char *>(o.host->ensure(o.bytes()));
        if (qn == o.tq)
        {
            VS_CUDA_CHECK(cudaMemcpyAsync(h, o.buf.get(), o.bytes(), cudaMemcpyDeviceToHost, s));
            return;
        }
        const size_t k = o.k;
        VS_CUDA_CHECK(cudaMemcpyAsync(h, o.ids, qn * k * 8, cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(h + o.o_d(), o.d, qn * k * 4, cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(h + o.o_cnt(), o.counts, o.tq * 12, cudaMemcpyDeviceToHost, s));
    }

    // After the stream is done: copies results of queries which[first .. first + qn) to the user
    // arrays, collecting the uncertified ones.
    void scatter(TileOut &o, size_t qn, const std::vector<int> &which, size_t first,
                 int64_t *out_ids, float *out_d, int64_t *out_counts, std::vector<int> *failed)
    {
        const char *h = static_cast<const char *>(o.host->ensure(o.bytes()));
        const size_t k = o.k;
        const int64_t *ids = reinterpret_cast<const int64_t *>(h);
        const float *dd = reinterpret_cast<const float *>(h + o.o_d());
        const int64_t *cnt = reinterpret_cast<const int64_t *>(h + o.o_cnt());
        const int *ok = reinterpret_cast<const int *>(h + o.o_ok());
        for (size_t i = 0; i < qn; i++)
        {
            int q = which[first + i];
            if (!ok[i])
            {
                failed->push_back(q);
                continue;
            }
            std::memcpy(out_ids + static_cast<size_t>(q) * k, ids + i * k, k * 8);
            std::memcpy(out_d + static_cast<size_t>(q) * k, dd + i * k, k * 4);
            if (out_counts)
                out_counts[q] = cnt[i];
        }
    }

    // Re-rank candidates exactly, sort, certify and write one tile's outputs (stream s).
    void rerank_finalize(const uint64_t *cand, int qn, int kp, const QueryBatch &Q, size_t q0,
                         const CudaDataset &c, vs_metric m, size_t k, int kind, bool certify,
                         uint64_t *exact, uint64_t *sorted, int *offs, TileOut &o, cudaStream_t s)
    {
        if (kp <= kRerankMax && certify)
        {
            RerankArgs r{};
            r.cand = cand;
            r.kp = kp;
            r.nq = qn;
            r.k = static_cast<int>(k);
            r.q = Q.view(q0);
            r.rows = c.rows();
            r.metric = m;
            r.kind = kind;
            r.maxnorm = c.maxnorm;
            r.out_ids = o.ids;
            r.out_d = o.d;
            r.out_counts = o.counts;
            r.out_ok = o.ok;
            launch_rerank(r, s);
            return;
        }
        launch_exact_keys(cand, qn, kp, Q.view(q0), c.rows(), m, exact, s);
        launch_fill_offsets(offs, qn, kp, s);
        segmented_sort_keys(*pool_, exact, sorted, qn * kp, qn, offs, offs + 1, s);
        FinalizeArgs f{};
        f.sorted = sorted;
        f.seg = kp;
        f.approx = certify ? cand : nullptr;
        f.kp = kp;
        f.nq = qn;
        f.k = static_cast<int>(k);
        f.metric = m;
        f.kind = kind;
        f.d = static_cast<int>(c.dim());
        f.qnorm = Q.norm + q0;
        f.maxnorm = c.maxnorm;
        f.ids = c.ids.get();
        f.out_ids = o.ids;
        f.out_d = o.d;
        f.out_counts = o.counts;
        f.out_ok = o.ok;
        launch_finalize(f, s);
    }

    int approx_mode(vs_metric m) const
    {
        switch (m)
        {
        case VS_METRIC_L2SQ:
        case VS_METRIC_L2:
            return MODE_L2_GEMM;
        case VS_METRIC_IP:
            return MODE_IP_GEMM;
        case VS_METRIC_COSINE:
            return MODE_COS_GEMM;
        default:
            return MODE_RAW;
        }
    }

    // Runs f with plain fp32 GEMMs (pedantic math and the fp32 rounding bound), then restores
    // the context's TF32 setting, also when f throws.
    template <typename F> auto with_fp32_gemm(F &&f)
    {
        struct Restore
        {
            CudaBackend *self;
            ~Restore()
            {
                self->cfg_.gemm_precision = VS_GEMM_TF32;
                for (cublasHandle_t h : self->blas_)
                    cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
            }
        } restore{this};
        cfg_.gemm_precision = VS_GEMM_FP32;
        for (cublasHandle_t h : blas_)
            VS_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
        return f();
    }

    int gemm_kind() const
    {
        return cfg_.gemm_precision == VS_GEMM_TF32 ? APPROX_GEMM_TF32 : APPROX_GEMM_F32;
    }

    // C[q * ldc + c] = <y_{row0 + c}, x_{q0 + q}> for c < cn, q < qn.
    void gemm(int slot, const CudaDataset &c, size_t row0, size_t cn, const float *qx, size_t qn,
              float *C, size_t ldc)
    {
        const float one = 1.0f, zero = 0.0f;
        const int d = static_cast<int>(c.dim());
        VS_CUBLAS_CHECK(cublasSgemm(blas_[slot], CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(cn),
                                    static_cast<int>(qn), d, &one, c.x.get() + row0 * d, d, qx, d,
                                    &zero, C, static_cast<int>(ldc)));
    }

    // ---- kNN ------------------------------------------------------------------------------

    void knn_impl(const CudaDataset &c, const float *queries, size_t nq, size_t k, vs_metric m,
                  int64_t *out_ids, float *out_d, int64_t *out_counts)
    {
        const size_t n = c.size();
        if (n == 0)
        {
            for (size_t i = 0; i < nq * k; i++)
            {
                out_ids[i] = -1;
                out_d[i] = INFINITY;
            }
            if (out_counts)
                std::fill(out_counts, out_counts + nq, 0);
            return;
        }
        // Candidates per query: k + k/8 for fp32 approximations; k + k/2 for TF32 GEMMs, whose
        // rounding bound is ~250x wider (a thin margin would send most queries to the fallback).
        const size_t kp_d = knn_candidates(k, n);
        const size_t kp_g =
            cfg_.gemm_precision == VS_GEMM_TF32 ? knn_candidates_wide(k, n) : kp_d;
        const bool gemm_metric = m != VS_METRIC_L1;
        const size_t chunk = 65536;
        for (size_t b0 = 0; b0 < nq; b0 += chunk)
        {
            std::vector<int> which(std::min(chunk, nq - b0));
            std::iota(which.begin(), which.end(), static_cast<int>(b0));
            std::vector<int> failed;
            if (kp_d >= n)
            {
                exact_path(c, queries, which, k, m, out_ids, out_d, out_counts);
                continue;
            }
            const bool small = which.size() <= static_cast<size_t>(small_batch_);
            if (gemm_metric && !small && kp_g < n)
            {
                if (kp_g <= static_cast<size_t>(kWarpSelectMax))
                    failed = gemm_path(c, queries, which, k, kp_g, m, out_ids, out_d, out_counts);
                else
                    failed = large_k_path(c, queries, which, k, kp_g, m, false, out_ids, out_d,
                                          out_counts);
                stats_gemm_failed_ += failed.size();
                // TF32 leaves uncertified the queries with near ties at their k-th place (40% of
                // a clustered 1M x 128 batch); an fp32 GEMM pass, whose bound is ~250x tighter,
                // certifies them at GEMM speed where the direct path would scan per query.  It
                // uses the warp selectors, which also answer the queries whose sampled filter
                // threshold missed (filter_select.cu).
                if (cfg_.gemm_precision == VS_GEMM_TF32 &&
                    failed.size() > static_cast<size_t>(small_batch_) &&
                    kp_d <= static_cast<size_t>(kWarpSelectMax))
                {
                    failed = with_fp32_gemm([&] {
                        return gemm_path(c, queries, failed, k, kp_d, m, out_ids, out_d, out_counts,
                                         false);
                    });
                    stats_fp32_failed_ += failed.size();
                }
            }
            else
                failed = which;
            if (!failed.empty())
            {
                if (kp_d <= static_cast<size_t>(kWarpSelectMax))
                    failed = direct_path(c, queries, failed, k, kp_d, m, out_ids, out_d, out_counts);
                else if (!gemm_metric || small)
                    failed = large_k_path(c, queries, failed, k, kp_d, m, true, out_ids, out_d,
                                          out_counts);
            }
            stats_exact_ += failed.size();
            if (!failed.empty())
                exact_path(c, queries, failed, k, m, out_ids, out_d, out_counts);
        }
        if (const char *st = std::getenv("VSEARCH_CUDA_STATS"); st && *st)
            std::fprintf(stderr,
                         "vsearch cuda: nq=%zu k=%zu gemm_uncertified=%zu fp32_uncertified=%zu "
                         "exact=%zu\n",
                         nq, k, stats_gemm_failed_, stats_fp32_failed_, stats_exact_);
    }

    std::vector<int> gemm_path(const CudaDataset &c, const float *hq, const std::vector<int> &which,
                               size_t k, size_t kp, vs_metric m, int64_t *out_ids, float *out_d,
                               int64_t *out_counts, bool filter = true)
    {
        const size_t n = c.size(), nb = which.size();
        Profile prof;
        QueryBatch Q = upload_queries(hq, which, c.dim());
        prof.mark("upload", main_);
        // Tile shape: whole rows when 32 of them fit, else column tiles of 64 queries.
        const size_t budget = std::min(tile_bytes_, pool_->available() / 6);
        size_t tn = n, tq;
        if (round_up(n, 4) * 4 * 32 <= budget)
        {
            tq = budget / (round_up(n, 4) * 4);
            tq = std::min(tq, size_t{2048});
            if (tq >= 32)
                tq = tq / 32 * 32;
        }
        else
        {
            tq = 64;
            tn = std::max<size_t>(4096, budget / (4 * tq) / 4096 * 4096);
            tn = std::min(tn, n);
        }
        tq = std::max<size_t>(1, std::min(tq, nb));
        const size_t ld = round_up(tn, 4);
        const int bcap = warp_topk_bcap(static_cast<int>(kp));
        const size_t target_warps = static_cast<size_t>(prop_.multiProcessorCount) * 32;
        size_t P = std::max<size_t>(1, (target_warps + tq - 1) / tq);
        P = std::min(P, std::max<size_t>(1, (tn + 2047) / 2048));
        // First part of each row, scanned before the rest to set the thresholds.
        size_t L1 = round_up(std::max<size_t>(8 * kp, tn / 32), 128);
        bool split = tn >= 4 * L1;
        size_t P1 = std::max<size_t>(1, std::min(P, L1 / std::max<size_t>(1024, 4 * kp)));
        // Whole rows: sampled threshold, filter, sort (filter_select.cu); else warp selectors.
        const FilterPlan fp = filter && tn == n
                                  ? plan_filter(static_cast<int>(kp), static_cast<uint32_t>(tn), 1024)
                                  : FilterPlan{};

        struct Slot
        {
            DeviceArray<float> tile;
            DeviceArray<uint64_t> state, partial, thr, cand;
            DeviceArray<uint32_t> count;
            TileOut out;
            size_t q0 = 0, qn = 0;
            bool busy = false;
        } slots[2];
        for (int i = 0; i < 2 && static_cast<size_t>(i) * tq < nb; i++)
        {
            Slot &s = slots[i];
            s.tile = DeviceArray<float>(*pool_, tq * ld, main_);
            s.state = DeviceArray<uint64_t>(*pool_, tq * kp, main_);
            if (fp.on)
            {
                s.thr = DeviceArray<uint64_t>(*pool_, tq, main_);
                s.count = DeviceArray<uint32_t>(*pool_, tq, main_);
                s.cand = DeviceArray<uint64_t>(*pool_, tq * fp.cap, main_);
            }
            else
                s.partial = DeviceArray<uint64_t>(*pool_, tq * std::max(P, P1) * kp, main_);
            make_out(s.out, tq, k, &pinned_[i]);
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(main_));
        StreamJoin join{work_, 2};
        std::vector<int> failed;
        const int mode = approx_mode(m);
        size_t t = 0;
        for (size_t q0 = 0; q0 < nb; q0 += tq, t++)
        {
            const int si = static_cast<int>(t % 2);
            Slot &s = slots[si];
            cudaStream_t st = work_[si];
            if (s.busy)
            {
                VS_CUDA_CHECK(cudaStreamSynchronize(st));
                scatter(s.out, s.qn, which, s.q0, out_ids, out_d, out_counts, &failed);
                s.busy = false;
            }
            check_cancel(cfg_);
            const size_t qn = std::min(tq, nb - q0);
            for (size_t c0 = 0; c0 < n; c0 += tn)
            {
                const size_t cn = std::min(tn, n - c0);
                gemm(si, c, c0, cn, Q.x + q0 * c.dim(), qn, s.tile.get(), ld);
                prof.mark("gemm", st);
                TileSelectArgs a{};
                a.tile = s.tile.get();
                a.ld = static_cast<int64_t>(ld);
                a.tq = static_cast<int>(qn);
                a.row0 = static_cast<uint32_t>(c0);
                a.mode = mode;
                a.xsq = Q.sq + q0;
                a.xinv = Q.inv + q0;
                a.ysq = c.sq.get();
                a.yinv = c.inv.get();
                a.partial = s.partial.get();
                a.kp = static_cast<int>(kp);
                a.bcap = bcap;
                auto pass = [&](size_t col0, size_t col1, size_t parts, bool have_state) {
                    a.col0 = static_cast<int>(col0);
                    a.col1 = static_cast<int>(col1);
                    a.P = static_cast<int>(parts);
                    a.seg_len = static_cast<int>(round_up((col1 - col0 + parts - 1) / parts, 128));
                    a.state = have_state ? s.state.get() : nullptr;
                    launch_tile_select(a, st);
                    prof.mark(have_state ? "select2" : "select1", st);
                    launch_merge_lists(s.state.get(), have_state, s.partial.get(), a.tq, a.P,
                                       a.kp, bcap, st);
                    prof.mark("merge", st);
                };
                if (fp.on)
                {
                    FilterArgs f{};
                    f.tile = a.tile;
                    f.ld = a.ld;
                    f.tq = a.tq;
                    f.tn = static_cast<uint32_t>(cn);
                    f.mode = mode;
                    f.xsq = a.xsq;
                    f.xinv = a.xinv;
                    f.ysq = a.ysq;
                    f.yinv = a.yinv;
                    f.chunks = fp.chunks;
                    f.rank = fp.rank;
                    f.cap = fp.cap;
                    f.kp = a.kp;
                    f.thr = s.thr.get();
                    f.count = s.count.get();
                    f.cand = s.cand.get();
                    f.state = s.state.get();
                    launch_filter_select(f, st);
                    prof.mark("filter", st);
                }
                else if (c0 == 0 && split && cn >= 4 * L1)
                {
                    pass(0, L1, P1, false);
                    pass(L1, cn, P, true);
                }
                else
                    pass(0, cn, P, c0 > 0);
            }
            rerank_finalize(s.state.get(), static_cast<int>(qn), static_cast<int>(kp), Q, q0, c, m,
                            k, gemm_kind(), true, nullptr, nullptr, nullptr, s.out, st);
            prof.mark("rerank", st);
            download(s.out, qn, st);
            prof.mark("download", st);
            s.q0 = q0;
            s.qn = qn;
            s.busy = true;
        }
        for (int si = 0; si < 2; si++)
            if (slots[si].busy)
            {
                VS_CUDA_CHECK(cudaStreamSynchronize(work_[si]));
                scatter(slots[si].out, slots[si].qn, which, slots[si].q0, out_ids, out_d,
                        out_counts, &failed);
            }
        prof.mark("tail", main_);
        prof.print("gemm", nb, k);
        return failed;
    }

    std::vector<int> direct_path(const CudaDataset &c, const float *hq,
                                 const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                                 int64_t *out_ids, float *out_d, int64_t *out_counts,
                                 bool allow_rows = true)
    {
        const size_t nb = which.size();
        Profile prof;
        // One stream for all of it: a small batch is latency-bound, and host waits between the
        // upload, the allocations and the kernels cost more than the work (~10 us each).
        cudaStream_t st = main_;
        QueryBatch Q = upload_queries(hq, which, c.dim(), false);
        prof.mark("upload", st);
        const int tier = nb <= 16 ? 0 : 1;
        const int bcap = warp_topk_bcap(static_cast<int>(kp));
        const int d = static_cast<int>(c.dim());
        // <= 32 queries: the rows kernels with a sampled threshold (no selectors, no merge); the
        // queries whose sample missed, and everything else, go through the staged scan.
        const int rows_nb = static_cast<int>(std::min<size_t>(nb, 32));
        FilterPlan fp{};
        if (allow_rows && nb <= 32 && stream_ok(d, rows_nb) && stream_fits(rows_nb, d, smem_optin_))
            fp = plan_filter(static_cast<int>(kp), static_cast<uint32_t>(c.size()), 256);
        int per = fp.on ? rows_nb : static_cast<int>(std::min<size_t>(scan_tier_queries(tier), nb));
        while (!fp.on && per > 1 &&
               scan_smem_bytes(tier, true, per, static_cast<int>(kp), bcap) > smem_optin_)
            per--;
        int grid = 0;
        DeviceArray<uint64_t> partial, sample, thr, cand;
        DeviceArray<uint32_t> count;
        if (fp.on)
        {
            sample = DeviceArray<uint64_t>(*pool_, static_cast<size_t>(per) * fp.chunks * 32, main_);
            thr = DeviceArray<uint64_t>(*pool_, per, main_);
            count = DeviceArray<uint32_t>(*pool_, per, main_);
            cand = DeviceArray<uint64_t>(*pool_, static_cast<size_t>(per) * fp.cap, main_);
        }
        else
        {
            const size_t smem = scan_smem_bytes(tier, true, per, static_cast<int>(kp), bcap);
            const size_t ntiles = (c.size() + 127) / 128;
            grid = static_cast<int>(std::min<size_t>(
                ntiles, static_cast<size_t>(prop_.multiProcessorCount) *
                            std::max(1, scan_blocks_per_sm(tier, smem))));
            partial = DeviceArray<uint64_t>(*pool_, static_cast<size_t>(per) * grid * kp, main_);
        }
        DeviceArray<uint64_t> state(*pool_, per * kp, main_);
        TileOut out;
        make_out(out, per, k, &pinned_[0]);
        prof.mark("alloc", st);
        std::vector<int> failed;
        for (size_t q0 = 0; q0 < nb; q0 += per)
        {
            check_cancel(cfg_);
            const int qn = static_cast<int>(std::min<size_t>(per, nb - q0));
            ScanArgs a{};
            a.rows = c.rows();
            a.q = Q.x + q0 * c.dim();
            a.qinv = Q.inv + q0;
            a.qsq = Q.sq + q0;
            a.nb = qn;
            a.metric = m;
            a.select = true;
            a.kp = static_cast<int>(kp);
            a.bcap = bcap;
            if (fp.on)
            {
                a.thr = thr.get();
                a.count = count.get();
                a.cand = cand.get();
                a.cap = fp.cap;
                launch_stream_filter(a, fp, prop_.multiProcessorCount, sample.get(), state.get(), st);
                prof.mark("rows", st);
            }
            else
            {
                a.partial = partial.get();
                a.grid = grid;
                launch_scan(a, tier, st);
                prof.mark("scan", st);
                launch_merge_lists(state.get(), false, partial.get(), qn, grid,
                                   static_cast<int>(kp), bcap, st);
                prof.mark("merge", st);
            }
            // The rows kernels form L2 through dot products (||x||^2 + ||y||^2 - 2 x.y).
            const int kind = fp.on ? APPROX_GEMM_F32 : APPROX_DIRECT_F32;
            rerank_finalize(state.get(), qn, static_cast<int>(kp), Q, q0, c, m, k, kind, true,
                            nullptr, nullptr, nullptr, out, st);
            prof.mark("rerank", st);
            download(out, qn, st);
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            scatter(out, qn, which, q0, out_ids, out_d, out_counts, &failed);
            prof.mark("download", st);
        }
        prof.print(fp.on ? "rows" : "scan", nb, k);
        if (fp.on && !failed.empty())
            failed = direct_path(c, hq, failed, k, kp, m, out_ids, out_d, out_counts, false);
        return failed;
    }

    // Approximate values of full rows for qn queries into tile (ld): a GEMM (dot products,
    // MODE_*_GEMM) or the direct scan (base values, MODE_RAW).
    void full_rows(const CudaDataset &c, const QueryBatch &Q, size_t q0, size_t qn, vs_metric m,
                   float *tile, size_t ld, int slot, cudaStream_t st, bool direct)
    {
        if (!direct)
        {
            gemm(slot, c, 0, c.size(), Q.x + q0 * c.dim(), qn, tile, ld);
            return;
        }
        for (size_t b = 0; b < qn; b += 64)
        {
            ScanArgs a{};
            a.rows = c.rows();
            a.q = Q.x + (q0 + b) * c.dim();
            a.qinv = Q.inv + q0 + b;
            a.nb = static_cast<int>(std::min<size_t>(64, qn - b));
            a.metric = m;
            a.select = false;
            a.out = tile + b * ld;
            a.ldo = static_cast<int64_t>(ld);
            int tier = a.nb <= 16 ? 0 : 1;
            size_t smem = scan_smem_bytes(tier, false, a.nb, 0, 0);
            int bps = std::max(1, scan_blocks_per_sm(tier, smem));
            a.grid = static_cast<int>(std::min<size_t>((c.size() + 127) / 128,
                                                       static_cast<size_t>(prop_.multiProcessorCount) * bps));
            launch_scan(a, tier, st);
        }
    }

    std::vector<int> large_k_path(const CudaDataset &c, const float *hq,
                                  const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                                  bool direct, int64_t *out_ids, float *out_d, int64_t *out_counts)
    {
        const size_t n = c.size(), nb = which.size();
        Profile prof;
        QueryBatch Q = upload_queries(hq, which, c.dim());
        const size_t ld = round_up(n, 4);
        const size_t per_query = ld * 4 + kp * 8 * 3 + k * 12;
        size_t tq = std::max<size_t>(1, std::min(tile_bytes_, pool_->available() / 3) / per_query);
        tq = std::min(tq, nb);
        if (tq * kp > 0x7fffffffu)
            tq = std::max<size_t>(1, 0x7fffffffu / kp);
        DeviceArray<float> tile(*pool_, tq * ld, main_);
        DeviceArray<uint64_t> cand(*pool_, tq * kp, main_), exact(*pool_, tq * kp, main_),
            sorted(*pool_, tq * kp, main_);
        DeviceArray<int> offs(*pool_, tq + 1, main_);
        TileOut out;
        make_out(out, tq, k, &pinned_[0]);
        VS_CUDA_CHECK(cudaStreamSynchronize(main_));
        StreamJoin join{work_, 2};
        cudaStream_t st = work_[0];
        const int mode = direct ? MODE_RAW : approx_mode(m);
        const int kind = direct ? APPROX_DIRECT_F32 : gemm_kind();
        std::vector<int> failed;
        for (size_t q0 = 0; q0 < nb; q0 += tq)
        {
            check_cancel(cfg_);
            const size_t qn = std::min(tq, nb - q0);
            full_rows(c, Q, q0, qn, m, tile.get(), ld, 0, st, direct);
            prof.mark("rows", st);
            launch_radix_select(tile.get(), static_cast<int64_t>(ld), static_cast<int>(qn),
                                static_cast<uint32_t>(n), mode, Q.sq + q0, Q.inv + q0,
                                c.sq.get(), c.inv.get(), static_cast<int>(kp), cand.get(), st);
            prof.mark("radix", st);
            rerank_finalize(cand.get(), static_cast<int>(qn), static_cast<int>(kp), Q, q0, c, m, k,
                            kind, true, exact.get(), sorted.get(), offs.get(), out, st);
            prof.mark("rerank", st);
            download(out, qn, st);
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            scatter(out, qn, which, q0, out_ids, out_d, out_counts, &failed);
            prof.mark("download", st);
        }
        prof.print("large_k", nb, k);
        return failed;
    }

    void exact_path(const CudaDataset &c, const float *hq, const std::vector<int> &which, size_t k,
                    vs_metric m, int64_t *out_ids, float *out_d, int64_t *out_counts)
    {
        const size_t n = c.size(), nb = which.size();
        QueryBatch Q = upload_queries(hq, which, c.dim());
        const size_t per_query = n * 8 * 3 + k * 12;
        size_t tq = std::max<size_t>(1, (pool_->available() / 2) / per_query);
        tq = std::min({tq, nb, std::max<size_t>(1, 0x7fffffffu / n)});
        DeviceArray<uint64_t> keys(*pool_, tq * n, main_), sorted(*pool_, tq * n, main_);
        DeviceArray<int> offs(*pool_, tq + 1, main_);
        TileOut out;
        make_out(out, tq, k, &pinned_[0]);
        VS_CUDA_CHECK(cudaStreamSynchronize(main_));
        StreamJoin join{work_, 2};
        cudaStream_t st = work_[0];
        std::vector<int> failed;
        for (size_t q0 = 0; q0 < nb; q0 += tq)
        {
            check_cancel(cfg_);
            const size_t qn = std::min(tq, nb - q0);
            DeviceQueries qv = Q.view(q0);
            qv.n = static_cast<int>(qn);
            launch_exact_all(qv, c.rows(), m, keys.get(), st);
            launch_fill_offsets(offs.get(), static_cast<int>(qn), static_cast<int>(n), st);
            segmented_sort_keys(*pool_, keys.get(), sorted.get(), static_cast<int>(qn * n),
                                static_cast<int>(qn), offs.get(), offs.get() + 1, st);
            FinalizeArgs f{};
            f.sorted = sorted.get();
            f.seg = static_cast<int64_t>(n);
            f.approx = nullptr;
            f.nq = static_cast<int>(qn);
            f.k = static_cast<int>(k);
            f.metric = m;
            f.d = static_cast<int>(c.dim());
            f.qnorm = Q.norm + q0;
            f.ids = c.ids.get();
            f.out_ids = out.ids;
            f.out_d = out.d;
            f.out_counts = out.counts;
            f.out_ok = out.ok;
            launch_finalize(f, st);
            download(out, qn, st);
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            scatter(out, qn, which, q0, out_ids, out_d, out_counts, &failed);
        }
        if (!failed.empty())
            throw Error(VS_INTERNAL, "exact path left queries unresolved");
    }

    // ---- range ----------------------------------------------------------------------------

    void range_impl(const CudaDataset &c, const float *hq, size_t nq, float radius, vs_metric m,
                    RangeCollector *collector)
    {
        const size_t n = c.size(), d = c.dim();
        if (n == 0)
        {
            std::vector<int64_t> zeros(nq, 0);
            collector->add(0, nq, zeros.data(), nullptr, nullptr);
            return;
        }
        std::vector<int> which(nq);
        std::iota(which.begin(), which.end(), 0);
        QueryBatch Q = upload_queries(hq, which, d);
        const bool use_gemm = m != VS_METRIC_L1 && nq > static_cast<size_t>(small_batch_);
        const int kind = use_gemm ? gemm_kind() : APPROX_DIRECT_F32;
        const int mode = use_gemm ? approx_mode(m) : MODE_RAW;
        const double limit = range_base_limit(m, radius);
        std::vector<double> thr(nq);
        for (size_t i = 0; i < nq; i++)
            thr[i] = range_approx_threshold(approx_error(kind, m, d, Q.host_norm[i], c.maxnorm),
                                            limit);
        DeviceArray<double> thr_d(*pool_, nq, main_);
        VS_CUDA_CHECK(cudaMemcpyAsync(thr_d.get(), thr.data(), nq * sizeof(double),
                                      cudaMemcpyHostToDevice, main_));
        // Tiles of whole rows (tq queries x n values) when they fit, else column chunks; the
        // candidate buffers (21 bytes per candidate) are sized separately, and the per-query
        // candidate counts split a tile into batches that fit them.
        const size_t avail = pool_->available();
        const size_t tile_budget = std::min(tile_bytes_, avail / 4);
        size_t tn = n, tq;
        if (round_up(n, 4) * 4 <= tile_budget)
            tq = std::max<size_t>(1, tile_budget / (round_up(n, 4) * 4));
        else
        {
            tq = 1;
            tn = use_gemm ? std::max<size_t>(4096, tile_budget / 4 / 4096 * 4096) : n;
        }
        tq = std::min({tq, nq, size_t{4096}});
        const size_t ld = round_up(tn, 4);
        if (tq * ld >= 0xFFFFFFF0ull)
            tq = std::max<size_t>(1, 0xFFFFFFF0ull / ld - 1);
        const size_t cap = std::max(ld, std::min(tq * ld, avail / 4 / 21));
        DeviceArray<float> tile(*pool_, tq * ld, main_);
        DeviceArray<uint32_t> cand(*pool_, cap, main_);
        DeviceArray<uint64_t> packed(*pool_, cap, main_), packed_out(*pool_, cap, main_);
        DeviceArray<uint8_t> flags(*pool_, cap, main_);
        DeviceArray<int64_t> qcount(*pool_, tq, main_), counts(*pool_, tq, main_);
        VS_CUDA_CHECK(cudaStreamSynchronize(main_));
        StreamJoin join{work_, 2};
        cudaStream_t st = work_[0];
        std::vector<int64_t> h_qcount(tq);
        for (size_t q0 = 0; q0 < nq; q0 += tq)
        {
            const size_t qn = std::min(tq, nq - q0);
            for (size_t c0 = 0; c0 < n; c0 += tn)
            {
                check_cancel(cfg_);
                const size_t cn = std::min(tn, n - c0);
                if (use_gemm)
                    gemm(0, c, c0, cn, Q.x + q0 * d, qn, tile.get(), ld);
                else
                    full_rows(c, Q, q0, qn, m, tile.get(), ld, 0, st, true);
                RangeTile rt{tile.get(), static_cast<int64_t>(ld), static_cast<uint32_t>(cn), mode,
                             Q.sq + q0, Q.inv + q0, c.sq.get() + c0, c.inv.get() + c0,
                             thr_d.get() + q0};
                range_count(rt, static_cast<int>(qn), qcount.get(), st);
                VS_CUDA_CHECK(cudaMemcpyAsync(h_qcount.data(), qcount.get(), qn * 8,
                                              cudaMemcpyDeviceToHost, st));
                VS_CUDA_CHECK(cudaStreamSynchronize(st));
                for (size_t qa = 0; qa < qn;)
                {
                    size_t qb = qa, ncand = 0;
                    while (qb < qn && ncand + static_cast<size_t>(h_qcount[qb]) <= cap)
                        ncand += static_cast<size_t>(h_qcount[qb++]);
                    range_select(*pool_, rt, static_cast<int>(qa), static_cast<int>(qb), cand.get(), st);
                    DeviceQueries qv = Q.view(q0);
                    size_t nm = range_exact(*pool_, cand.get(), ncand, static_cast<uint32_t>(cn),
                                            static_cast<uint32_t>(c0), qv, c.rows(), m, radius,
                                            packed.get(), flags.get(), packed_out.get(), st);
                    // Emit into the (now free) packed / cand buffers; counts of queries [0, qb).
                    int64_t *e_ids = reinterpret_cast<int64_t *>(packed.get());
                    float *e_d = reinterpret_cast<float *>(cand.get());
                    launch_range_emit(packed_out.get(), nm, static_cast<uint32_t>(cn),
                                      static_cast<uint32_t>(c0), c.ids.get(), static_cast<int>(qb),
                                      counts.get(), e_ids, e_d, st);
                    char *h = static_cast<char *>(pinned_[0].ensure(qn * 8 + nm * 12 + 16));
                    int64_t *h_counts = reinterpret_cast<int64_t *>(h);
                    int64_t *h_ids = reinterpret_cast<int64_t *>(h + qn * 8);
                    float *h_d = reinterpret_cast<float *>(h + qn * 8 + nm * 8);
                    VS_CUDA_CHECK(cudaMemcpyAsync(h_counts, counts.get() + qa, (qb - qa) * 8,
                                                  cudaMemcpyDeviceToHost, st));
                    if (nm)
                    {
                        VS_CUDA_CHECK(cudaMemcpyAsync(h_ids, e_ids, nm * 8, cudaMemcpyDeviceToHost, st));
                        VS_CUDA_CHECK(cudaMemcpyAsync(h_d, e_d, nm * 4, cudaMemcpyDeviceToHost, st));
                    }
                    VS_CUDA_CHECK(cudaStreamSynchronize(st));
                    collector->add(q0 + qa, qb - qa, h_counts, h_ids, h_d);
                    qa = qb;
                }
            }
        }
    }

    // ---- subsets --------------------------------------------------------------------------

    void subsets_impl(const CudaDataset &c, const float *hq, size_t nq, size_t k, vs_metric m,
                      const Subsets &sub, bool range, float radius, int64_t *out_ids,
                      float *out_d, int64_t *out_counts, RangeCollector *collector)
    {
        const size_t d = c.dim();
        const size_t max_cand = env_size("VSEARCH_CUDA_SUBSET_BATCH", size_t{1} << 24);
        size_t q0 = 0;
        while (q0 < nq)
        {
            check_cancel(cfg_);
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
            QueryBatch Q = upload_queries(hq, which, d);
            std::vector<int64_t> off64(nb + 1);
            std::vector<int> off32(nb + 1);
            for (size_t i = 0; i <= nb; i++)
            {
                off64[i] = sub.offsets[q0 + i] - base;
                off32[i] = static_cast<int>(off64[i]);
            }
            DeviceArray<int64_t> offs(*pool_, nb + 1, main_), cids(*pool_, std::max<size_t>(nc, 1), main_);
            DeviceArray<int> offs32(*pool_, nb + 1, main_), qidx(*pool_, std::max<size_t>(nc, 1), main_);
            DeviceArray<uint32_t> rows(*pool_, std::max<size_t>(nc, 1), main_);
            DeviceArray<uint64_t> keys(*pool_, std::max<size_t>(nc, 1), main_),
                sorted(*pool_, std::max<size_t>(nc, 1), main_);
            DeviceArray<int64_t> counts(*pool_, nb, main_);
            VS_CUDA_CHECK(cudaMemcpyAsync(offs.get(), off64.data(), (nb + 1) * 8,
                                          cudaMemcpyHostToDevice, main_));
            VS_CUDA_CHECK(cudaMemcpyAsync(offs32.get(), off32.data(), (nb + 1) * 4,
                                          cudaMemcpyHostToDevice, main_));
            if (nc)
                VS_CUDA_CHECK(cudaMemcpyAsync(cids.get(), sub.ids + base, nc * 8,
                                              cudaMemcpyHostToDevice, main_));
            cudaStream_t st = main_;
            launch_subset_rows(offs.get(), static_cast<int>(nb), cids.get(), c.ids.get(),
                               static_cast<uint32_t>(c.size()), rows.get(), qidx.get(), st);
            launch_subset_keys(rows.get(), qidx.get(), nc, Q.view(), c.rows(), m, range, radius,
                               keys.get(), st);
            segmented_sort_keys(*pool_, keys.get(), sorted.get(), static_cast<int>(nc),
                                static_cast<int>(nb), offs32.get(), offs32.get() + 1, st);
            launch_subset_count(sorted.get(), offs.get(), static_cast<int>(nb),
                                range ? -1 : static_cast<int64_t>(k), counts.get(), st);
            std::vector<int64_t> h_counts(nb);
            VS_CUDA_CHECK(cudaMemcpyAsync(h_counts.data(), counts.get(), nb * 8,
                                          cudaMemcpyDeviceToHost, st));
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            if (!range)
            {
                DeviceArray<int64_t> oid(*pool_, nb * k, main_);
                DeviceArray<float> od(*pool_, nb * k, main_);
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
                DeviceArray<int64_t> ooff(*pool_, nb, main_);
                DeviceArray<int64_t> oid(*pool_, std::max<int64_t>(total, 1), main_);
                DeviceArray<float> od(*pool_, std::max<int64_t>(total, 1), main_);
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

    // ---- k-means --------------------------------------------------------------------------

    void kmeans_impl(const float *data, size_t n, size_t d, const vs_kmeans_params &p,
                     float *centroids, vs_kmeans_info *info)
    {
        Rng rng(p.seed);
        const size_t k = p.k;
        std::vector<size_t> sample = kmeans_sample(n, p.sample_size, rng);
        const size_t m = sample.size();
        const bool spherical = kmeans_spherical(p.metric);
        std::vector<float> x(m * d);
        for (size_t i = 0; i < m; i++)
            std::memcpy(&x[i * d], data + sample[i] * d, d * sizeof(float));
        if (p.metric == VS_METRIC_COSINE)
            kmeans_normalize(x.data(), m, d);
        std::vector<float> xsq(m);
        for (size_t i = 0; i < m; i++)
            xsq[i] = static_cast<float>(sqnorm_double(&x[i * d], d));

        DeviceArray<float> X(*pool_, m * d, main_), XSQ(*pool_, m, main_),
            C(*pool_, k * d, main_), CSQ(*pool_, k + 4, main_);
        VS_CUDA_CHECK(cudaMemcpyAsync(X.get(), x.data(), m * d * 4, cudaMemcpyHostToDevice, main_));
        VS_CUDA_CHECK(cudaMemcpyAsync(XSQ.get(), xsq.data(), m * 4, cudaMemcpyHostToDevice, main_));
        cudaStream_t st = main_;

        // Initialisation (same draws as the CPU backend).
        if (p.init == VS_KMEANS_INIT_RANDOM)
        {
            std::vector<size_t> idx = kmeans_random_init(m, k, rng);
            for (size_t c = 0; c < k; c++)
                std::memcpy(centroids + c * d, &x[idx[c] * d], d * sizeof(float));
        }
        else
        {
            DeviceArray<double> mind(*pool_, m, main_), prefix(*pool_, m, main_);
            DeviceArray<uint32_t> pick(*pool_, 1, main_);
            size_t first = rng.below(m);
            size_t prev = first;
            std::memcpy(centroids, &x[first * d], d * sizeof(float));
            for (size_t c = 1; c < k; c++)
            {
                if (c % 64 == 0)
                    check_cancel(cfg_);
                const float *cprev = X.get() + prev * d;
                launch_kmeans_mind(X.get(), m, static_cast<int>(d), cprev, c == 1, mind.get(), st);
                inclusive_sum(*pool_, mind.get(), prefix.get(), m, st);
                launch_kmeans_pick(prefix.get(), m, rng.uniform(), pick.get(), st);
                uint32_t h = 0;
                VS_CUDA_CHECK(cudaMemcpyAsync(&h, pick.get(), 4, cudaMemcpyDeviceToHost, st));
                VS_CUDA_CHECK(cudaStreamSynchronize(st));
                prev = h;
                std::memcpy(centroids + c * d, &x[static_cast<size_t>(h) * d], d * sizeof(float));
            }
        }
        if (spherical)
            kmeans_normalize(centroids, k, d);

        const size_t ld = round_up(k, 4);
        size_t tp = std::max<size_t>(1, std::min(tile_bytes_, pool_->available() / 4) / (ld * 4));
        tp = std::min(tp, m);
        DeviceArray<float> tile(*pool_, tp * ld, main_), obj(*pool_, m, main_);
        DeviceArray<uint32_t> assign(*pool_, m, main_), sorted_assign(*pool_, m, main_),
            iota_d(*pool_, m, main_), perm(*pool_, m, main_);
        DeviceArray<int> counts(*pool_, k, main_), offsets(*pool_, k, main_);
        std::vector<uint32_t> iota_h(m);
        std::iota(iota_h.begin(), iota_h.end(), 0u);
        VS_CUDA_CHECK(cudaMemcpyAsync(iota_d.get(), iota_h.data(), m * 4, cudaMemcpyHostToDevice, st));
        std::vector<float> h_obj(m);
        std::vector<int> h_counts(k);
        std::vector<int64_t> counts64(k);
        std::vector<int> h_off(k);
        std::vector<float> csq(k);
        int end_bit = 1;
        while ((size_t{1} << end_bit) < k)
            end_bit++;
        info->objective = 0;
        info->iterations = 0;
        info->empty_repaired = 0;
        // Assignments use the context's GEMM precision (TF32 by default) on blas_[0].
        for (int it = 0; it < p.iterations; it++)
        {
            check_cancel(cfg_);
            for (size_t c = 0; c < k; c++)
                csq[c] = static_cast<float>(sqnorm_double(centroids + c * d, d));
            VS_CUDA_CHECK(cudaMemcpyAsync(C.get(), centroids, k * d * 4, cudaMemcpyHostToDevice, st));
            VS_CUDA_CHECK(cudaMemcpyAsync(CSQ.get(), csq.data(), k * 4, cudaMemcpyHostToDevice, st));
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            cudaStream_t ws = work_[0];
            for (size_t p0 = 0; p0 < m; p0 += tp)
            {
                size_t pn = std::min(tp, m - p0);
                const float one = 1.0f, zero = 0.0f;
                VS_CUBLAS_CHECK(cublasSgemm(blas_[0], CUBLAS_OP_T, CUBLAS_OP_N,
                                            static_cast<int>(k), static_cast<int>(pn),
                                            static_cast<int>(d), &one, C.get(), static_cast<int>(d),
                                            X.get() + p0 * d, static_cast<int>(d), &zero,
                                            tile.get(), static_cast<int>(ld)));
                launch_kmeans_argmin(tile.get(), static_cast<int64_t>(ld), static_cast<int>(pn),
                                     static_cast<int>(k), spherical, p.metric, CSQ.get(),
                                     XSQ.get() + p0, assign.get() + p0, obj.get() + p0, ws);
            }
            VS_CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, k * 4, ws));
            launch_kmeans_counts(assign.get(), m, counts.get(), ws);
            sort_pairs_u32(*pool_, assign.get(), sorted_assign.get(), iota_d.get(), perm.get(), m,
                           end_bit, ws);
            VS_CUDA_CHECK(cudaMemcpyAsync(h_obj.data(), obj.get(), m * 4, cudaMemcpyDeviceToHost, ws));
            VS_CUDA_CHECK(cudaMemcpyAsync(h_counts.data(), counts.get(), k * 4,
                                          cudaMemcpyDeviceToHost, ws));
            VS_CUDA_CHECK(cudaStreamSynchronize(ws));
            double o = 0;
            for (float v : h_obj)
                o += v;
            info->objective = o;
            int acc = 0;
            for (size_t c = 0; c < k; c++)
            {
                h_off[c] = acc;
                acc += h_counts[c];
                counts64[c] = h_counts[c];
            }
            VS_CUDA_CHECK(cudaMemcpyAsync(offsets.get(), h_off.data(), k * 4, cudaMemcpyHostToDevice, ws));
            launch_kmeans_sums(X.get(), static_cast<int>(d), perm.get(), offsets.get(),
                               counts.get(), static_cast<int>(k), C.get(), ws);
            VS_CUDA_CHECK(cudaMemcpyAsync(centroids, C.get(), k * d * 4, cudaMemcpyDeviceToHost, ws));
            VS_CUDA_CHECK(cudaStreamSynchronize(ws));
            info->empty_repaired += kmeans_repair_empty(centroids, counts64, k, d, m, rng);
            if (spherical)
                kmeans_normalize(centroids, k, d);
            info->iterations = it + 1;
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(main_));
    }

    BackendConfig cfg_;
    int device_;
    cudaDeviceProp prop_{};
    std::unique_ptr<DevicePool> pool_;
    cudaStream_t main_ = nullptr;
    cudaStream_t work_[2] = {nullptr, nullptr};
    cublasHandle_t blas_[2] = {nullptr, nullptr};
    PinnedBuffer pinned_[2];
    size_t tile_bytes_ = 0;
    int small_batch_ = 32;
    size_t smem_optin_ = 48 << 10;
    size_t stats_gemm_failed_ = 0, stats_fp32_failed_ = 0, stats_exact_ = 0;
    std::vector<unsigned char> staging_;
    std::unique_ptr<IvfpqBackend> ivfpq_; // ivfpq_cuda.cu
};

} // namespace
} // namespace vs::cuda

extern "C" __attribute__((visibility("default"))) vs::Backend *
vs_cuda_backend_v3(const vs::BackendConfig *config, char *err, size_t errlen)
{
    auto say = [&](const std::string &m) {
        if (err && errlen)
        {
            size_t n = std::min(errlen - 1, m.size());
            std::memcpy(err, m.data(), n);
            err[n] = 0;
        }
    };
    try
    {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0)
        {
            say(std::string("no CUDA device: ") +
                (e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0"));
            (void)cudaGetLastError();
            return nullptr;
        }
        if (config->device < 0 || config->device >= count)
        {
            say("CUDA device " + std::to_string(config->device) + " does not exist");
            return nullptr;
        }
        return new vs::cuda::CudaBackend(*config);
    }
    catch (const std::exception &ex)
    {
        say(ex.what());
        return nullptr;
    }
    catch (...)
    {
        say("unknown error starting the CUDA backend");
        return nullptr;
    }
}
