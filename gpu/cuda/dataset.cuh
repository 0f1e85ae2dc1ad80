// Resident datasets of the CUDA backend: rows in ascending id order in pooled device memory
// (vectors, ids, squared norms, inverse norms) with host copies of the ids and norms, and the
// add / remove that keep them so (engine/host_common.h plans the order; the gather kernel moves
// the rows).  An F16 dataset keeps its rows as binary16 (half the bytes; the front end hands the
// backend floats that are exact halves) and its norms from the widened values.
#ifndef VSEARCH_CUDA_DATASET_CUH
#define VSEARCH_CUDA_DATASET_CUH

#include "cuda/device_context.cuh"
#include "cuda/impl/kernels.cuh"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs::cuda {

class CudaDataset final : public Dataset
{
public:
    CudaDataset(size_t dim, vs_dtype dtype)
    {
        dim_ = dim;
        dtype_ = dtype;
    }
    bool half() const { return dtype_ == VS_DTYPE_F16; }
    size_t row_bytes() const { return dim_ * (half() ? 2 : 4); }
    const float *x_f32() const { return half() ? nullptr : reinterpret_cast<const float *>(x.get()); }
    const uint16_t *x_f16() const
    {
        return half() ? reinterpret_cast<const uint16_t *>(x.get()) : nullptr;
    }
    DeviceRows rows() const
    {
        return DeviceRows{x_f32(), x_f16(), ids.get(), sq.get(), inv.get(),
                          static_cast<uint32_t>(size_), static_cast<int>(dim_)};
    }
    void set_size(size_t n) { size_ = n; }

    DeviceArray<unsigned char> x; // n x d floats, or n x d binary16 for an F16 dataset
    DeviceArray<float> sq, inv;
    DeviceArray<int64_t> ids;
    size_t capacity = 0;
    std::vector<int64_t> host_ids;
    std::vector<double> host_sq;
    double maxnorm = 0;

    // Small kNN batches of this dataset that TF32 left uncertified, as a decaying average of the
    // fraction per batch, and the batches since TF32 was last tried (knn.cu); several lanes may
    // search the dataset at once.
    mutable std::atomic<float> tf32_miss{0};
    mutable std::atomic<unsigned> fp32_runs{0};
};

inline const CudaDataset &as_cuda(const Dataset *ds)
{
    auto *c = dynamic_cast<const CudaDataset *>(ds);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "dataset belongs to another backend");
    return *c;
}

// Adds n rows (ids new and unique; engine/host_common.h plan_add) in id order.
void add_impl(DeviceContext &dev, CudaDataset &c, const float *vectors, const int64_t *ids,
              size_t n);

// Removes the rows of the ids present; *removed (optional) gets how many.
void remove_impl(DeviceContext &dev, CudaDataset &c, const int64_t *ids, size_t n, size_t *removed);

// Fills the empty out with c's rows of these ids (each present once), gathered on the device.
void subset_impl(DeviceContext &dev, const CudaDataset &c, const int64_t *ids, size_t n,
                 CudaDataset &out);

} // namespace vs::cuda

#endif
