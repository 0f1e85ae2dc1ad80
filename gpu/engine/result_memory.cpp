// Result blocks (malloc'd, or mappings advised for huge pages) behind a header that says which,
// and the parallel copies that fill them.
#include "engine/result_memory.h"

#include "cpu/parallel.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace vs {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHeader = 64; // keeps the data 64-byte aligned in a mapping

struct Header
{
    size_t mapped; // the mapping's length; 0: malloc'd
    size_t bytes;  // the block's size
};
static_assert(sizeof(Header) <= kHeader, "header too large");

Header *header_of(void *block)
{
    return reinterpret_cast<Header *>(static_cast<char *>(block) - kHeader);
}

void *block_at(void *base, size_t mapped, size_t bytes)
{
    Header *h = static_cast<Header *>(base);
    h->mapped = mapped;
    h->bytes = bytes;
    return static_cast<char *>(base) + kHeader;
}

bool mapped_size(size_t bytes) { return bytes >= kHugePage - kHeader; }

// The length of a mapping that holds the header and `bytes`: whole huge pages (0: too large).
size_t mapping_length(size_t bytes)
{
    if (bytes > SIZE_MAX / 2)
        return 0;
    return (bytes + kHeader + kHugePage - 1) / kHugePage * kHugePage;
}

// A fresh mapping of len bytes (whole huge pages) at a huge-page-aligned address, or nullptr.
char *map_aligned(size_t len)
{
    void *p = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return nullptr;
    char *raw = static_cast<char *>(p);
    const uintptr_t a = reinterpret_cast<uintptr_t>(raw);
    char *at = raw + ((kHugePage - a % kHugePage) % kHugePage);
    if (at > raw)
        munmap(raw, static_cast<size_t>(at - raw));
    munmap(at + len, static_cast<size_t>(raw + len + kHugePage - (at + len)));
    const char *v = std::getenv("VSEARCH_HOST_HUGEPAGES");
    if (v && v[0] == '1')
        madvise(at, len, MADV_HUGEPAGE); // advice: fails harmlessly without huge page support
    return at;
}

} // namespace

void *result_alloc(size_t bytes)
{
    if (!mapped_size(bytes))
    {
        void *p = std::malloc(bytes + kHeader);
        return p ? block_at(p, 0, bytes) : nullptr;
    }
    const size_t len = mapping_length(bytes);
    char *at = len ? map_aligned(len) : nullptr;
    return at ? block_at(at, len, bytes) : nullptr;
}

void *result_resize(void *block, size_t bytes)
{
    if (!block)
        return result_alloc(bytes);
    Header *h = header_of(block);
    if (h->mapped == 0)
    {
        if (!mapped_size(bytes))
        {
            void *p = std::realloc(h, bytes + kHeader);
            return p ? block_at(p, 0, bytes) : nullptr;
        }
        void *to = result_alloc(bytes); // under a huge page is copied, once
        if (!to)
            return nullptr;
        std::memcpy(to, block, h->bytes);
        std::free(h);
        return to;
    }
    const size_t len = mapping_length(bytes);
    if (len == 0)
        return nullptr;
    if (len <= h->mapped)
    {
        if (len < h->mapped)
            munmap(reinterpret_cast<char *>(h) + len, h->mapped - len);
        h->mapped = len;
        h->bytes = bytes;
        return block;
    }
    // in place where the addresses after it are free; else moved whole onto a new aligned range
    // (page tables move, huge pages stay huge, nothing is copied)
    void *p = mremap(h, h->mapped, len, 0);
    if (p == MAP_FAILED)
    {
        char *at = map_aligned(len);
        if (!at)
            return nullptr;
        p = mremap(h, h->mapped, h->mapped, MREMAP_MAYMOVE | MREMAP_FIXED, at);
        if (p == MAP_FAILED)
        {
            munmap(at, len);
            return nullptr;
        }
    }
    return block_at(p, len, bytes);
}

void result_free(void *block) noexcept
{
    if (!block)
        return;
    Header *h = header_of(block);
    if (h->mapped)
        munmap(h, h->mapped);
    else
        std::free(h);
}

ParallelCopy::ParallelCopy(int threads)
{
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    max_threads_ = std::min(threads > 0 ? threads : hw, 8);
}

ParallelCopy::~ParallelCopy() = default;

void ParallelCopy::run_parts(size_t n, size_t parts, void (*fn)(void *, size_t, size_t), void *arg)
{
    if (!crew_)
    {
        try
        {
            crew_.reset(new Crew(max_threads_));
        }
        catch (...)
        {
            fn(arg, 0, n); // no threads to be had: the calling thread copies
            return;
        }
    }
    parts = std::min<size_t>(parts, static_cast<size_t>(crew_->size()));
    crew_->run([&](int t) {
        const size_t i = static_cast<size_t>(t);
        if (i < parts)
            fn(arg, n * i / parts, n * (i + 1) / parts);
    });
}

} // namespace vs
