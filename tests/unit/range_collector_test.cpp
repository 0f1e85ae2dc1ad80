// The range collector and its memory (engine/range_result.h, engine/result_memory.h): result
// blocks keep their bytes across every kind of resize (malloc'd, mapped, grown in place or
// moved, shrunk), kept blocks are reused within their limit; the collector's CSR equals a plain per-query reference for chunks in query
// order (whole tiles, one query's column chunks) and out of order, taken over (no allocator) or
// copied into a caller's allocator; the parallel copy copies every item once.
#include "engine_testing.h"

#include "engine/range_result.h"
#include "engine/result_memory.h"

#include <sys/mman.h>

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHeader = 64; // result_memory.h: data after a 64-byte header

// Byte i of a block filled by fill(): a function of (seed, i).
unsigned char pattern(uint64_t seed, size_t i)
{
    return static_cast<unsigned char>((i * 2654435761u + seed * 97) >> 7);
}

void fill(void *p, size_t from, size_t to, uint64_t seed)
{
    unsigned char *b = static_cast<unsigned char *>(p);
    for (size_t i = from; i < to; i++)
        b[i] = pattern(seed, i);
}

::testing::AssertionResult kept(const void *p, size_t bytes, uint64_t seed)
{
    const unsigned char *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != pattern(seed, i))
            return ::testing::AssertionFailure() << "byte " << i << " of " << bytes << " changed";
    return ::testing::AssertionSuccess();
}

class ResultBlocks : public ::testing::TestWithParam<bool> // huge page advice on
{
protected:
    void SetUp() override
    {
        if (GetParam())
            setenv("VSEARCH_HOST_HUGEPAGES", "1", 1);
    }
    void TearDown() override
    {
        unsetenv("VSEARCH_HOST_HUGEPAGES");
        unsetenv("VSEARCH_HOST_KEEP_MB");
    }
};

// Sizes across the malloc / mapping boundary, growth and shrinking; every resize keeps the
// bytes below the smaller size; a mapped block's mapping starts on a huge page boundary.
TEST_P(ResultBlocks, ResizesKeepTheBytes)
{
    const size_t sizes[] = {0,       1,           100,         kHugePage - kHeader - 1,
                            kHugePage - kHeader, kHugePage, 5 << 20,   40 << 20,
                            3 << 20, 1000,        kHugePage + 1, 17 << 20, 64,
                            kHugePage * 3};
    void *b = nullptr;
    size_t have = 0;
    uint64_t seed = 1;
    std::vector<void *> others; // allocations in between, so growth meets taken addresses
    for (size_t bytes : sizes)
    {
        void *nb = vs::result_resize(b, bytes);
        ASSERT_NE(nb, nullptr) << bytes;
        b = nb;
        ASSERT_TRUE(kept(b, std::min(have, bytes), seed)) << "resize to " << bytes;
        if (bytes >= kHugePage - kHeader)
            EXPECT_EQ((reinterpret_cast<uintptr_t>(b) - kHeader) % kHugePage, 0u) << bytes;
        fill(b, std::min(have, bytes), bytes, seed);
        have = bytes;
        others.push_back(vs::result_alloc(bytes / 3 + 1));
        ASSERT_NE(others.back(), nullptr);
        fill(others.back(), 0, bytes / 3 + 1, 99);
    }
    vs::result_free(b);
    for (void *o : others)
        vs::result_free(o);
    vs::result_free(nullptr);
}

// A mapped block whose next addresses are taken moves (page tables, not bytes) and keeps them.
TEST_P(ResultBlocks, GrowthPastATakenRangeMoves)
{
    setenv("VSEARCH_HOST_KEEP_MB", "0", 1); // a fresh mapping of exactly the size asked for
    const size_t bytes = 6 << 20;
    void *b = vs::result_alloc(bytes);
    ASSERT_NE(b, nullptr);
    fill(b, 0, bytes, 7);
    char *end = static_cast<char *>(b) - kHeader + (bytes + kHeader + kHugePage - 1) / kHugePage * kHugePage;
    void *blocker = mmap(end, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                         -1, 0);
    if (blocker == MAP_FAILED)
        GTEST_SKIP() << "the address after the block is taken already";
    void *nb = vs::result_resize(b, bytes * 3);
    ASSERT_NE(nb, nullptr);
    EXPECT_NE(nb, b);
    EXPECT_EQ((reinterpret_cast<uintptr_t>(nb) - kHeader) % kHugePage, 0u);
    EXPECT_TRUE(kept(nb, bytes, 7));
    fill(nb, bytes, bytes * 3, 7);
    EXPECT_TRUE(kept(nb, bytes * 3, 7));
    munmap(blocker, 4096);
    vs::result_free(nb);
}

// Starts from no kept block (earlier tests' range calls, on the GPU too, may have left some, of
// sizes an allocation in the test would not take).
void drain_kept()
{
    vs::result_drop_kept();
    ASSERT_EQ(vs::result_kept_bytes(), 0u);
}

// Kept blocks: the next mapped allocation takes the largest that holds it (the same memory, grown
// in place within it), a block is kept at the size of its last use, at most 4 blocks within
// VSEARCH_HOST_KEEP_MB, the smallest evicted first; blocks over the limit, malloc'd ones and a
// limit of 0 keep nothing.
TEST(ResultBlocksKept, FreedResultsAreReusedWithinTheLimit)
{
    setenv("VSEARCH_HOST_KEEP_MB", "64", 1);
    drain_kept();
    const size_t mb = size_t{1} << 20;
    void *a = vs::result_alloc(6 * mb);
    ASSERT_NE(a, nullptr);
    fill(a, 0, 6 * mb, 3);
    vs::result_keep(a);
    EXPECT_EQ(vs::result_kept_bytes(), 8 * mb); // 6 MiB and the header: 4 huge pages
    void *b = vs::result_alloc(3 * mb);
    EXPECT_EQ(b, a);
    EXPECT_EQ(vs::result_kept_bytes(), 0u);
    EXPECT_EQ(vs::result_resize(b, 7 * mb), b); // within the kept mapping
    fill(b, 0, 7 * mb, 4);
    EXPECT_TRUE(kept(b, 7 * mb, 4));
    vs::result_keep(b);
    void *big = vs::result_alloc(100 * mb); // more than any kept block: fresh
    ASSERT_NE(big, nullptr);
    EXPECT_EQ(vs::result_kept_bytes(), 8 * mb);
    vs::result_keep(big); // over the limit: freed
    EXPECT_EQ(vs::result_kept_bytes(), 8 * mb);
    void *small = vs::result_alloc(1000);
    vs::result_keep(small); // malloc'd: freed
    EXPECT_EQ(vs::result_kept_bytes(), 8 * mb);
    void *grown = vs::result_alloc(3 * mb); // takes the 8 MiB block ...
    ASSERT_NE(grown, nullptr);
    grown = vs::result_resize(grown, 20 * mb); // ... grows past it ...
    ASSERT_NE(grown, nullptr);
    grown = vs::result_resize(grown, 5 * mb); // ... and is last asked for 5 MiB
    vs::result_keep(grown);
    EXPECT_EQ(vs::result_kept_bytes(), 6 * mb); // kept at 6 MiB, the rest unmapped
    std::vector<void *> five;
    for (int i = 0; i < 5; i++)
        five.push_back(vs::result_alloc(7 * mb)); // none fits in the kept 6 MiB block
    EXPECT_EQ(vs::result_kept_bytes(), 6 * mb);
    for (void *f : five)
        vs::result_keep(f);
    EXPECT_EQ(vs::result_kept_bytes(), 4 * 8 * mb); // four kept, the 6 MiB block evicted first
    setenv("VSEARCH_HOST_KEEP_MB", "0", 1);
    void *none = vs::result_alloc(4 * mb); // a limit of 0 takes nothing ...
    ASSERT_NE(none, nullptr);
    EXPECT_EQ(vs::result_kept_bytes(), 4 * 8 * mb);
    vs::result_keep(none); // ... and keeps nothing
    EXPECT_EQ(vs::result_kept_bytes(), 4 * 8 * mb);
    setenv("VSEARCH_HOST_KEEP_MB", "64", 1);
    drain_kept();
    unsetenv("VSEARCH_HOST_KEEP_MB");
}

INSTANTIATE_TEST_SUITE_P(HugePages, ResultBlocks, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                             return info.param ? std::string("advised") : std::string("off");
                         });

// Every item copied once, whatever the split (parts of at least kMinPart bytes, crew sizes).
TEST(RangeCollector, ParallelCopyCoversEveryItem)
{
    for (int threads : {1, 3, 8})
    {
        vs::ParallelCopy copy(threads);
        for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{70000}, size_t{3} << 20,
                         size_t{1} << 20})
        {
            std::vector<int64_t> src(n), dst(n, -1);
            for (size_t i = 0; i < n; i++)
                src[i] = static_cast<int64_t>(i * 2654435761u);
            std::vector<int> copies(n, 0);
            copy.run(n, 8, [&](size_t b, size_t e) {
                for (size_t i = b; i < e && i < n; i++)
                {
                    dst[i] = src[i];
                    copies[i]++; // parts are disjoint: no two threads touch one item
                }
            });
            EXPECT_EQ(src, dst) << "threads=" << threads << " n=" << n;
            EXPECT_EQ(std::count(copies.begin(), copies.end(), 1), static_cast<long>(n));
        }
    }
}

struct Chunk
{
    size_t q0;
    std::vector<int64_t> counts, ids;
    std::vector<float> dists;
};

// A chunk of queries [q0, q0 + counts.size()) with the given counts and random matches.
Chunk make_chunk(size_t q0, std::vector<int64_t> counts, std::mt19937_64 &rng)
{
    Chunk c{q0, std::move(counts), {}, {}};
    size_t total = 0;
    for (int64_t k : c.counts)
        total += static_cast<size_t>(k);
    c.ids.resize(total);
    c.dists.resize(total);
    for (size_t i = 0; i < total; i++)
    {
        c.ids[i] = static_cast<int64_t>(rng() >> 1);
        c.dists[i] = static_cast<float>(rng() % 1000000) / 7.0f;
    }
    return c;
}

// The chunks of a call, as the backends deliver them.
enum class Order
{
    tiles,   // whole query tiles in order
    columns, // tiles, and one query's matches in several column chunks
    shuffled // tiles out of order
};

std::vector<Chunk> make_call(size_t nq, Order order, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<Chunk> chunks;
    for (size_t q0 = 0; q0 < nq;)
    {
        const size_t qn = std::min<size_t>(nq - q0, 1 + rng() % 48);
        std::vector<int64_t> counts(qn);
        for (auto &k : counts)
            k = rng() % 5 == 0 ? 0 : static_cast<int64_t>(rng() % 3000);
        if (q0 == 0)
            counts[0] = 700000; // one chunk large enough to be split over threads
        if (order == Order::columns && qn > 1)
        {
            // the tile's last query continues in column chunks of its own
            chunks.push_back(make_chunk(q0, counts, rng));
            const size_t last = q0 + qn - 1;
            for (int c = 0; c < 3; c++)
                chunks.push_back(make_chunk(last, {static_cast<int64_t>(rng() % 200000)}, rng));
        }
        else
            chunks.push_back(make_chunk(q0, counts, rng));
        q0 += qn;
    }
    if (order == Order::shuffled)
    {
        std::shuffle(chunks.begin(), chunks.end(), rng);
        if (chunks.size() > 1 && chunks[0].q0 == 0)
            std::swap(chunks[0], chunks[1]); // out of order for sure
    }
    return chunks;
}

struct Arena
{
    std::vector<std::unique_ptr<char[]>> blocks;
    static void *alloc(void *arg, size_t bytes)
    {
        auto *a = static_cast<Arena *>(arg);
        a->blocks.emplace_back(new char[bytes]);
        return a->blocks.back().get();
    }
};

// The collector's CSR, taken over and through a caller's allocator, equals the matches of each
// query concatenated in the order they arrived.
TEST(RangeCollector, CsrEqualsAPerQueryReference)
{
    vt::ContextPtr ctx = vt::make_context("cpu");
    ASSERT_TRUE(ctx != nullptr);
    const size_t nq = 300;
    for (Order order : {Order::tiles, Order::columns, Order::shuffled})
    {
        std::vector<Chunk> chunks = make_call(nq, order, 1900 + static_cast<int>(order));
        std::vector<std::vector<int64_t>> ref_ids(nq);
        std::vector<std::vector<float>> ref_dists(nq);
        for (const Chunk &c : chunks)
            for (size_t i = 0, at = 0; i < c.counts.size(); i++)
                for (int64_t j = 0; j < c.counts[i]; j++, at++)
                {
                    ref_ids[c.q0 + i].push_back(c.ids[at]);
                    ref_dists[c.q0 + i].push_back(c.dists[at]);
                }
        for (bool caller_alloc : {false, true})
        {
            vs::api::Collector col(nq, 4);
            for (const Chunk &c : chunks)
                col.add(c.q0, c.counts.size(), c.counts.data(), c.ids.data(), c.dists.data());
            EXPECT_EQ(col.in_order(), order != Order::shuffled);
            Arena arena;
            vs_range_result res;
            ASSERT_EQ(vs::api::clear_range_out(ctx.get(), &res), VS_OK);
            ASSERT_EQ(vs::api::deliver_range(ctx.get(), col, nq, caller_alloc ? Arena::alloc : nullptr,
                                             &arena, &res),
                      VS_OK);
            ASSERT_EQ(res.nq, nq);
            ASSERT_EQ(res.offsets[0], 0);
            for (size_t q = 0; q < nq; q++)
            {
                const size_t at = static_cast<size_t>(res.offsets[q]);
                ASSERT_EQ(static_cast<size_t>(res.offsets[q + 1]) - at, ref_ids[q].size())
                    << "query " << q;
                ASSERT_TRUE(std::equal(ref_ids[q].begin(), ref_ids[q].end(), res.ids + at))
                    << "ids of query " << q << " order " << static_cast<int>(order)
                    << " caller_alloc " << caller_alloc;
                ASSERT_EQ(std::memcmp(ref_dists[q].data(), res.distances + at,
                                      ref_dists[q].size() * sizeof(float)),
                          0)
                    << "distances of query " << q;
            }
            ASSERT_EQ(static_cast<size_t>(res.offsets[nq]), res.total);
            if (!caller_alloc)
                vs_range_result_free(&res);
        }
    }
}

// No matches at all: a valid empty result either way.
TEST(RangeCollector, EmptyCallDelivers)
{
    vt::ContextPtr ctx = vt::make_context("cpu");
    ASSERT_TRUE(ctx != nullptr);
    for (bool caller_alloc : {false, true})
    {
        vs::api::Collector col(5, 0);
        std::vector<int64_t> zeros(5, 0);
        col.add(0, 5, zeros.data(), nullptr, nullptr);
        Arena arena;
        vs_range_result res;
        ASSERT_EQ(vs::api::clear_range_out(ctx.get(), &res), VS_OK);
        ASSERT_EQ(vs::api::deliver_range(ctx.get(), col, 5, caller_alloc ? Arena::alloc : nullptr,
                                         &arena, &res),
                  VS_OK);
        EXPECT_EQ(res.total, 0u);
        for (size_t q = 0; q <= 5; q++)
            EXPECT_EQ(res.offsets[q], 0);
        EXPECT_NE(res.ids, nullptr);
        if (!caller_alloc)
            vs_range_result_free(&res);
    }
}

} // namespace
