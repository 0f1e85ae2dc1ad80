// The C++ interface behind engine.h: one abstract Backend with a CPU implementation (gpu/cpu/,
// linked into the engine) and a CUDA implementation (gpu/cuda/, in vsearch_cuda.so, obtained
// through the exported C function vs_cuda_backend_v9 after dlopen).
//
// Backend is the core: datasets, exact kNN / range search and k-means.  Each index family has an
// abstract interface of its own in its own header (engine/ivfpq_backend.h: IvfpqBackend and its
// object type Ivfpq) and one accessor here (Backend::ivfpq()); a backend implements a family in
// its own files and returns it from the accessor (docs/ENGINE.md, "Adding an index family").
//
// The interface crosses a shared-library boundary whose two sides are built with hidden
// visibility, so no engine exception type may cross it: every virtual call is noexcept and
// returns a Status.  Both sides are built by the same compiler from these headers.
#ifndef VSEARCH_ENGINE_BACKEND_H
#define VSEARCH_ENGINE_BACKEND_H

#include "vsearch/engine.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

namespace vs {

struct Status
{
    vs_status code = VS_OK;
    std::string message;
    bool ok() const { return code == VS_OK; }
};

// Thrown inside a backend, converted to a Status before it leaves it.
class Error : public std::runtime_error
{
public:
    Error(vs_status status, const std::string &message)
        : std::runtime_error(message), status_(status)
    {
    }
    vs_status status() const { return status_; }

private:
    vs_status status_;
};

// Runs f, turning every exception into a Status.
template <typename F> Status guarded(F &&f) noexcept
{
    try
    {
        f();
        return Status{};
    }
    catch (const Error &e)
    {
        return Status{e.status(), e.what()};
    }
    catch (const std::bad_alloc &)
    {
        return Status{VS_OUT_OF_MEMORY, "out of host memory"};
    }
    catch (const std::exception &e)
    {
        return Status{VS_INTERNAL, std::string("internal error: ") + e.what()};
    }
    catch (...)
    {
        return Status{VS_INTERNAL, "internal error: unknown exception"};
    }
}

struct BackendConfig
{
    int device = 0;
    size_t device_memory_budget = 0; // 0: 90% of free memory
    int num_threads = 0;             // CPU: 0 = hardware concurrency
    vs_gemm_precision gemm_precision = VS_GEMM_TF32;
    int (*cancel)(void *) = nullptr;
    void *cancel_arg = nullptr;
    int lanes = 1; // calls that may run at once (vs_context_options.lanes)
};

struct Subsets
{
    const int64_t *offsets; // nq + 1
    const int64_t *ids;
};

// Receives range matches.  add() is called from the calling thread with the matches of queries
// [q0, q0 + nq) within one block of rows; blocks of one query arrive in ascending row order.
// counts[i] matches of query q0 + i, concatenated in ids / dists.  It may throw std::bad_alloc.
class RangeCollector
{
public:
    virtual ~RangeCollector() = default;
    virtual void add(size_t q0, size_t nq, const int64_t *counts, const int64_t *ids,
                     const float *dists) = 0;
};

class Dataset
{
public:
    virtual ~Dataset() = default;
    size_t dim() const { return dim_; }
    size_t size() const { return size_; }
    vs_dtype dtype() const { return dtype_; }

protected:
    size_t dim_ = 0;
    size_t size_ = 0;
    vs_dtype dtype_ = VS_DTYPE_F32;
};

// The index families (their own headers); a backend returns each from its accessor below.
class IvfpqBackend;
class GraphBackend;
class MetricBackend;

class Backend
{
public:
    virtual ~Backend() = default;
    virtual vs_backend_kind kind() const noexcept = 0;
    virtual Status info(vs_context_info *out) noexcept = 0;
    // Calls that may run at once from different threads (BackendConfig::lanes where the backend
    // supports it).
    virtual int lanes() const noexcept { return 1; }

    virtual Status dataset_create(size_t dim, vs_dtype dtype, Dataset **out) noexcept = 0;
    virtual Status dataset_add(Dataset *ds, const float *vectors, const int64_t *ids,
                               size_t n) noexcept = 0;
    virtual Status dataset_remove(Dataset *ds, const int64_t *ids, size_t n,
                                  size_t *removed) noexcept = 0;
    // A new dataset of src's rows with these ids (engine/host_common.h plan_subset validates).
    virtual Status dataset_subset(const Dataset *src, const int64_t *ids, size_t n,
                                  Dataset **out) noexcept = 0;

    // Arguments are validated by the front end (non-null, dims, metric range).
    virtual Status knn(const Dataset *ds, const float *queries, size_t nq, size_t k,
                       vs_metric metric, const Subsets *subsets, int64_t *out_ids,
                       float *out_dists, int64_t *out_counts) noexcept = 0;
    virtual Status range(const Dataset *ds, const float *queries, size_t nq, float radius,
                         vs_metric metric, const Subsets *subsets,
                         RangeCollector *collector) noexcept = 0;
    virtual Status kmeans(const float *data, size_t n, size_t dim, const vs_kmeans_params &params,
                          float *centroids, vs_kmeans_info *info) noexcept = 0;

    // Index families: the backend's implementation of each, owned by the backend (never
    // deleted by the caller), or null where this backend does not implement the family.
    virtual IvfpqBackend *ivfpq() noexcept = 0; // engine/ivfpq_backend.h
    virtual GraphBackend *graph() noexcept = 0; // engine/graph_backend.h
    virtual MetricBackend *metric() noexcept = 0; // engine/metric_backend.h
};

} // namespace vs

// The one symbol vsearch_cuda.so exports.  Returns a new backend (delete it to destroy), or NULL
// with a message in err (no device, driver too old, ...).
extern "C" typedef vs::Backend *(*vs_cuda_backend_fn)(const vs::BackendConfig *config, char *err,
                                                      size_t errlen);
// v9: dataset_subset (v8: the graph family's compressed objects; v7: its navigability links; v6:
// the metric-space family; v5: the graph family's build edges; v4: the graph family; v3: index
// families behind accessors; v2: the IVF-PQ virtuals in Backend itself); a library of another
// version is refused rather than misused.
#define VS_CUDA_BACKEND_SYMBOL "vs_cuda_backend_v9"

#endif
