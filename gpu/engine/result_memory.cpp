// Result blocks (malloc'd, or mappings advised for huge pages) behind a header that says which,
// and the parallel copies that fill them.
#include "engine/result_memory.h"

#include "cpu/parallel.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
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

// Mapped blocks given back by result_keep (their pages touched already), at most kKeptMax and
// keep_limit() bytes in all.
constexpr int kKeptMax = 4;

struct Kept
{
    char *base;
    size_t mapped;
};

std::mutex kept_mu;
Kept kept[kKeptMax];
size_t kept_total = 0;

size_t keep_limit()
{
    const char *v = std::getenv("VSEARCH_HOST_KEEP_MB");
    if (!v || !*v)
        return size_t{1024} << 20;
    char *end = nullptr;
    const unsigned long long mb = std::strtoull(v, &end, 10);
    if (*end)
        return 0; // not a number: keep nothing
    return mb > (SIZE_MAX >> 20) ? SIZE_MAX : static_cast<size_t>(mb) << 20;
}

// The largest kept block of at least len bytes, taken out of the set (nullptr: none).
char *take_kept(size_t len, size_t *mapped)
{
    if (keep_limit() == 0)
        return nullptr;
    std::lock_guard<std::mutex> lock(kept_mu);
    int best = -1;
    for (int i = 0; i < kKeptMax; i++)
        if (kept[i].base && kept[i].mapped >= len &&
            (best < 0 || kept[i].mapped > kept[best].mapped))
            best = i;
    if (best < 0)
        return nullptr;
    char *base = kept[best].base;
    *mapped = kept[best].mapped;
    kept_total -= kept[best].mapped;
    kept[best] = Kept{nullptr, 0};
    return base;
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
    if (len == 0)
        return nullptr;
    size_t mapped = 0;
    if (char *base = take_kept(len, &mapped))
        return block_at(base, mapped, bytes);
    char *at = map_aligned(len);
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
        // not shrunk: an untouched tail costs no memory, and a kept block stays whole
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

void result_keep(void *block) noexcept
{
    if (!block)
        return;
    Header *h = header_of(block);
    // kept at the size of its last use (growth by doubling leaves an untouched tail)
    const size_t len = mapping_length(h->bytes);
    if (h->mapped && len < h->mapped)
    {
        munmap(reinterpret_cast<char *>(h) + len, h->mapped - len);
        h->mapped = len;
    }
    const size_t limit = keep_limit();
    if (h->mapped == 0 || h->mapped > limit)
    {
        result_free(block);
        return;
    }
    Kept evicted[kKeptMax];
    int nevicted = 0;
    {
        std::lock_guard<std::mutex> lock(kept_mu);
        for (;;)
        {
            int used = 0, smallest = -1;
            for (int i = 0; i < kKeptMax; i++)
                if (kept[i].base)
                {
                    used++;
                    if (smallest < 0 || kept[i].mapped < kept[smallest].mapped)
                        smallest = i;
                }
            if (used < kKeptMax && kept_total + h->mapped <= limit)
                break;
            evicted[nevicted++] = kept[smallest];
            kept_total -= kept[smallest].mapped;
            kept[smallest] = Kept{nullptr, 0};
        }
        for (Kept &k : kept)
            if (!k.base)
            {
                k = Kept{reinterpret_cast<char *>(h), h->mapped};
                break;
            }
        kept_total += h->mapped;
    }
    for (int i = 0; i < nevicted; i++)
        munmap(evicted[i].base, evicted[i].mapped);
}

size_t result_kept_bytes()
{
    std::lock_guard<std::mutex> lock(kept_mu);
    return kept_total;
}

void result_drop_kept() noexcept
{
    Kept dropped[kKeptMax];
    {
        std::lock_guard<std::mutex> lock(kept_mu);
        for (int i = 0; i < kKeptMax; i++)
        {
            dropped[i] = kept[i];
            kept[i] = Kept{nullptr, 0};
        }
        kept_total = 0;
    }
    for (const Kept &k : dropped)
        if (k.base)
            munmap(k.base, k.mapped);
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
