// Host-side logic shared by the CPU and CUDA backends, so that both keep datasets in the same
// order and run the same k-means: id-order bookkeeping, a seeded RNG, sampling, initialisation
// choices and empty-cluster repair.
#ifndef VSEARCH_ENGINE_HOST_COMMON_H
#define VSEARCH_ENGINE_HOST_COMMON_H

#include "engine/backend.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace vs {

// splitmix64: tiny, portable and the same everywhere.
class Rng
{
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next()
    {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; } // [0, 1)
    uint64_t below(uint64_t n)                                                    // [0, n)
    {
        return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
    }

private:
    uint64_t state_;
};

// Where each row of a dataset comes from after an add: rows stay in ascending id order.
struct AddPlan
{
    // new rows in ascending id order: new_order[j] = index into the caller's arrays
    std::vector<size_t> new_order;
    bool append = true; // all new ids are larger than every old id: old rows stay in place
    // when !append: for each output row, >= 0: old row, < 0: -(j + 1) for new_order[j]
    std::vector<int64_t> merged;
    std::vector<int64_t> merged_ids;
};

// Validates ids (unique in the call, not present) and plans the merge; throws Error.
AddPlan plan_add(const std::vector<int64_t> &old_ids, const int64_t *ids, size_t n);

// Rows to keep (ascending) after removing ids; *removed gets the count.
std::vector<size_t> plan_remove(const std::vector<int64_t> &old_ids, const int64_t *ids, size_t n,
                                size_t *removed);

// Rows (ascending) of the ids, each of which must be present once; throws Error.
std::vector<size_t> plan_subset(const std::vector<int64_t> &old_ids, const int64_t *ids, size_t n);

// Row of an id in a sorted id array, or -1.
int64_t find_row(const std::vector<int64_t> &ids, int64_t id);

// Squared norm in double, rounded to float; and its max helper.
double sqnorm_double(const float *x, size_t d);

// Throws Error(VS_CANCELLED) if the config's cancel callback says so.
void check_cancel(const BackendConfig &config);

// Large host copies of kNN outputs on up to 8 threads, the caller included (range matches:
// result_memory.h's ParallelCopy, whose threads last a call): copy(begin, end) copies items
// [begin, end) and must not throw.  Much of such a copy is the first touch of fresh pages, which
// the kernel serves in parallel; copies under 8 MiB stay on the calling thread.
void copy_parallel(size_t n, size_t item_bytes, const std::function<void(size_t, size_t)> &copy);

// ---- k-means --------------------------------------------------------------------------------

// Training points: all (identity) or sample_size distinct indices drawn with rng, ascending.
std::vector<size_t> kmeans_sample(size_t n, size_t sample_size, Rng &rng);
// k distinct indices into [0, m) drawn with rng (random initialisation).
std::vector<size_t> kmeans_random_init(size_t m, size_t k, Rng &rng);
// Picks the index whose prefix interval contains u * total in a prefix-sum array (k-means++).
size_t kmeans_pick(const double *prefix, size_t m, double u);
// Re-seeds empty clusters by splitting populous ones (Faiss' rule); returns how many.
size_t kmeans_repair_empty(float *centroids, std::vector<int64_t> &counts, size_t k, size_t d,
                           size_t m, Rng &rng);
// Scales each centroid to unit L2 norm (spherical k-means); zero centroids are left alone.
void kmeans_normalize(float *centroids, size_t k, size_t d);
bool kmeans_spherical(vs_metric metric);

} // namespace vs

#endif
