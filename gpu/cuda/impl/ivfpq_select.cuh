// Fused IVF-PQ scan + selection (impl/ivfpq_kernels.cu), declared apart from kernels.cuh.
#ifndef VSEARCH_CUDA_IMPL_IVFPQ_SELECT_CUH
#define VSEARCH_CUDA_IMPL_IVFPQ_SELECT_CUH

#include "cuda/impl/kernels.cuh"

namespace vs::cuda {

// Fused scan + selection (k <= kPqSelectMax).  Search layout of a list (built from the append
// order at the first search after adds): entries sorted by (id, append position), so the key
// (estimate, slot) of a list orders like (estimate, id); codes padded to wq x 16 bytes and
// interleaved per group of 32 entries: codes4[(g * wq + w) * 32 + t] = bytes [16w, 16w + 16) of
// entry 32g + t (zero padding), so lane t of a warp reads entry 32g + t with one uint4 per w.
constexpr int kPqSelectMax = 2048;
struct PqSelectArgs
{
    const PqPair *pairs; // out: first output slot; pos0: its slot within the query's segment
    const float *queries;
    const float *centroids, *codebooks;
    const uint4 *const *list_codes4;
    const int64_t *const *list_sorted_ids;
    const uint32_t *list_len;
    int d, m, nbits, wq;
    vs_metric metric;
    int k;      // slots per pair: min(k, list length)
    int nwarps; // selecting warps per block (pq_select_warps)
    uint64_t *keys; // (estimate << 32 | slot within the query's segment)
    int64_t *ids;
};
// Warps per block (8, 4, 2, 1) whose selectors and lookup table fit in smem_limit; 0: none.
int pq_select_warps(int m, int nbits, int d, int k, size_t smem_limit);
size_t pq_select_smem_bytes(int m, int nbits, int d, int k, int nwarps);
void launch_pq_scan_select(const PqSelectArgs &a, int npairs, cudaStream_t s);
// Builds a list's search layout: codes4 (groups of 32 entries, wq uint4 each) from raw codes
// (code_size bytes per entry, append order) taken in the order perm (null: identity).
void launch_pq_interleave(const uint8_t *raw, int code_size, const uint32_t *perm, uint32_t len,
                          int wq, uint4 *codes4, cudaStream_t s);

} // namespace vs::cuda

#endif
