// Host memory of the results the engine hands to a caller without an allocator (range CSR
// arrays, freed by vs_range_result_free), and the parallel copies that fill it.
//
// A block of 2 MiB or more is an anonymous mapping of its own, aligned to 2 MiB, that grows by
// mremap: in place, or moved whole to a new aligned range (page tables move, nothing is copied),
// and is not shrunk.
// Smaller blocks come from malloc.  Every block starts with a header that says which it is, so
// result_free releases either.  VSEARCH_HOST_HUGEPAGES=1 advises the mappings for transparent
// huge pages (a fault per 2 MiB instead of per 4 KiB page on first touch, most of the range
// collector's time): not the default, because where a virtual machine reports free 2 MiB blocks
// to its host (virtio-balloon free page reporting, as on the development machine) every huge
// page is cold host memory, and there 1.6 GB of results took 3.4x as long with the advice as
// without, though 0.2 GB took 0.4x as long (docs/ENGINE.md, "Range search and large k").
#ifndef VSEARCH_ENGINE_RESULT_MEMORY_H
#define VSEARCH_ENGINE_RESULT_MEMORY_H

#include <algorithm>
#include <cstddef>
#include <memory>
#include <type_traits>

namespace vs {

class Crew;

// A block of at least `bytes` (nullptr when out of memory).
void *result_alloc(size_t bytes);
// The block grown or shrunk to `bytes`, its first min(old, bytes) bytes kept; block may be
// nullptr.  nullptr when out of memory, and the block is then unchanged.
void *result_resize(void *block, size_t bytes);
// Releases a block of result_alloc / result_resize (nullptr: nothing).
void result_free(void *block) noexcept;
// Releases a block, keeping a mapped one (its pages touched already) for the next result_alloc
// of a mapped size, which takes the largest kept block that holds it (a block is kept at the
// size its last use asked for, its untouched tail unmapped): a process that repeats
// large range calls and frees their results (vs_range_result_free: the GPU worker) then copies
// into warm pages instead of faulting in fresh ones.  At most 4 blocks and VSEARCH_HOST_KEEP_MB
// (default 1024; 0 keeps none) in all, the smallest evicted first.  The collector's own arrays
// are freed, never kept (they die unreleased where a caller's allocator got a copy: backends,
// which must not each hold such memory).
void result_keep(void *block) noexcept;
// Bytes of the blocks kept now.
size_t result_kept_bytes();
// Unmaps every kept block.
void result_drop_kept() noexcept;

// Copies of results into fresh memory, split by bytes over up to `threads` threads (0: the
// hardware's, at most 8) that are started on the first copy large enough to share and kept
// for the next (a range call appends many chunks of a few MiB: threads per chunk cost more
// than they saved).  Each thread writes, and so first touches, its own part.
class ParallelCopy
{
public:
    explicit ParallelCopy(int threads);
    ~ParallelCopy();
    ParallelCopy(const ParallelCopy &) = delete;
    ParallelCopy &operator=(const ParallelCopy &) = delete;

    // copy(begin, end) copies items [begin, end) of n items of item_bytes each (must not
    // throw); runs it over one part per thread, each at least kMinPart bytes.
    template <typename F> void run(size_t n, size_t item_bytes, F &&copy);

    static constexpr size_t kMinPart = size_t{512} << 10;

private:
    void run_parts(size_t n, size_t parts, void (*fn)(void *, size_t, size_t), void *arg);

    int max_threads_;
    std::unique_ptr<Crew> crew_;
};

template <typename F> void ParallelCopy::run(size_t n, size_t item_bytes, F &&copy)
{
    const size_t parts = std::min<size_t>(max_threads_, n * item_bytes / kMinPart);
    if (parts <= 1)
    {
        copy(size_t{0}, n);
        return;
    }
    run_parts(
        n, parts,
        [](void *arg, size_t b, size_t e) { (*static_cast<std::remove_reference_t<F> *>(arg))(b, e); },
        &copy);
}

} // namespace vs

#endif
