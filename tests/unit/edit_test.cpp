// Edit distance (vsearch/edit.h) against a plain full-matrix dynamic program written here, on
// seeded random strings of code points: ASCII, Latin-1 letters (ñ, á: one code point each, two
// bytes in UTF-8), and code points above 255 (CJK, emoji), lengths 0..200 around the 64-character
// boundary of the bit-parallel path.
#include "vsearch/edit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using Str = std::vector<uint32_t>;

size_t reference(const Str &a, const Str &b)
{
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); i++)
        d[i][0] = i;
    for (size_t j = 0; j <= b.size(); j++)
        d[0][j] = j;
    for (size_t i = 1; i <= a.size(); i++)
        for (size_t j = 1; j <= b.size(); j++)
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                                d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    return d[a.size()][b.size()];
}

Str random_string(std::mt19937_64 &rng, size_t len, const Str &alphabet)
{
    Str s(len);
    for (auto &c : s)
        c = alphabet[rng() % alphabet.size()];
    return s;
}

// b = a with a few random edits, so that distances are small as well as large
Str mutate(std::mt19937_64 &rng, Str a, int edits, const Str &alphabet)
{
    for (int e = 0; e < edits; e++)
    {
        int op = static_cast<int>(rng() % 3);
        uint32_t c = alphabet[rng() % alphabet.size()];
        if (op == 0 || a.empty())
            a.insert(a.begin() + static_cast<long>(a.empty() ? 0 : rng() % (a.size() + 1)), c);
        else if (op == 1)
            a.erase(a.begin() + static_cast<long>(rng() % a.size()));
        else
            a[rng() % a.size()] = c;
    }
    return a;
}

const Str kAscii = {'a', 'b', 'c', 'd'};
const Str kLatin = {'a', 'n', 0xF1 /* ñ */, 0xE1 /* á */, 'o', 0xF3 /* ó */};
const Str kWide = {'a', 0x4E2D, 0x6587, 0x1F600, 0xF1, 0x10FFFF};

void check_pair(const Str &a, const Str &b)
{
    size_t want = reference(a, b);
    ASSERT_EQ(vs_edit_distance(a.data(), a.size(), b.data(), b.size()), want);
    ASSERT_EQ(vs_edit_distance(b.data(), b.size(), a.data(), a.size()), want);
    ASSERT_EQ(vs_edit_distance_dp(a.data(), a.size(), b.data(), b.size()), want);
    vs_edit_pattern p;
    vs_edit_prepare(&p, a.data(), a.size());
    ASSERT_EQ(vs_edit_pattern_distance(&p, b.data(), b.size(), SIZE_MAX), want);
    for (size_t bound : {size_t(0), size_t(1), size_t(2), size_t(5), want, want + 1})
    {
        size_t got = vs_edit_pattern_distance(&p, b.data(), b.size(), bound);
        if (want <= bound)
            ASSERT_EQ(got, want) << "bound " << bound;
        else
            ASSERT_GT(got, bound) << "bound " << bound;
    }
}

TEST(EditDistance, KnownValues)
{
    auto s = [](std::initializer_list<uint32_t> l) { return Str(l); };
    EXPECT_EQ(reference(s({'k', 'i', 't', 't', 'e', 'n'}), s({'s', 'i', 't', 't', 'i', 'n', 'g'})),
              3u);
    check_pair(s({'k', 'i', 't', 't', 'e', 'n'}), s({'s', 'i', 't', 't', 'i', 'n', 'g'}));
    // 'año' and 'ano': one substitution of a code point (two bytes in UTF-8)
    Str ano = s({'a', 0xF1, 'o'}), ano2 = s({'a', 'n', 'o'});
    EXPECT_EQ(vs_edit_distance(ano.data(), 3, ano2.data(), 3), 1u);
    Str empty;
    EXPECT_EQ(vs_edit_distance(empty.data(), 0, ano.data(), 3), 3u);
    EXPECT_EQ(vs_edit_distance(empty.data(), 0, empty.data(), 0), 0u);
    check_pair(empty, ano);
    check_pair(ano, empty);
}

TEST(EditDistance, RandomAgainstReference)
{
    std::mt19937_64 rng(20261125);
    for (const Str *alphabet : {&kAscii, &kLatin, &kWide})
        for (size_t len : {1, 2, 7, 31, 63, 64, 65, 100, 130, 200})
            for (int trial = 0; trial < 12; trial++)
            {
                Str a = random_string(rng, len, *alphabet);
                Str b = trial % 2 ? random_string(rng, rng() % (len + 10), *alphabet)
                                  : mutate(rng, a, static_cast<int>(rng() % 6), *alphabet);
                check_pair(a, b);
                check_pair(b, a);
            }
}

TEST(EditDistance, LongPathCancels)
{
    Str a(5000, 'a'), b(5000, 'b');
    vs_edit_pattern p;
    vs_edit_prepare(&p, a.data(), a.size());
    int calls = 0;
    p.cancel = [](void *arg) { return ++*static_cast<int *>(arg) >= 3 ? 1 : 0; };
    p.cancel_arg = &calls;
    EXPECT_EQ(vs_edit_pattern_distance(&p, b.data(), b.size(), SIZE_MAX), VS_EDIT_ABORTED);
    EXPECT_EQ(calls, 3);
    p.cancel = nullptr;
    EXPECT_EQ(vs_edit_pattern_distance(&p, b.data(), b.size(), SIZE_MAX), 5000u);
    // a bound stops the long path early (every row exceeds it), with an answer above the bound
    EXPECT_GT(vs_edit_pattern_distance(&p, b.data(), b.size(), 10), 10u);
}

} // namespace
