// vsearch/half.h against an independent reference: the value of every half computed with ldexp
// from its fields, and float-to-half as "the nearest of all finite halves, ties to the even one"
// found by binary search over that sorted table.  Both the portable code and the F16C path (when
// this CPU has it) must match bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "vsearch/half.h"

namespace {

double reference_value(uint16_t h)
{
    int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    double v = exponent == 0 ? std::ldexp((double)mantissa, -24)
                             : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    if (exponent == 31)
        v = mantissa ? NAN : INFINITY;
    return sign ? -v : v;
}

// The finite non-negative halves in increasing order: bit patterns 0x0000 .. 0x7bff.
struct Table
{
    std::vector<double> values;
    Table()
    {
        for (uint32_t h = 0; h <= 0x7bff; h++)
            values.push_back(reference_value((uint16_t)h));
    }
};

const Table &table()
{
    static Table t;
    return t;
}

uint16_t reference_to_half(float f)
{
    if (std::isnan(f))
        return 0x7e00;
    uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    double a = std::fabs((double)f);
    const std::vector<double> &v = table().values;
    // Beyond the largest half by at least half a unit in the last place (65520): infinity.
    if (a >= 65520.0)
        return sign | 0x7c00;
    size_t hi = std::lower_bound(v.begin(), v.end(), a) - v.begin(); // v[hi] >= a
    if (hi == v.size())
        return sign | 0x7bff;
    if (v[hi] == a || hi == 0)
        return sign | (uint16_t)hi;
    size_t lo = hi - 1;
    double dlo = a - v[lo], dhi = v[hi] - a;
    size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | (uint16_t)pick;
}

float from_bits(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

TEST(Half, EveryHalfToFloat)
{
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    std::vector<float> portable(65536), dispatched(65536);
    vs_half_to_float_portable(all.data(), portable.data(), all.size());
    vs_half_to_float(all.data(), dispatched.data(), all.size());
    for (uint32_t h = 0; h < 65536; h++)
    {
        double want = reference_value((uint16_t)h);
        if (std::isnan(want))
        {
            EXPECT_TRUE(std::isnan(portable[h])) << h;
            EXPECT_TRUE(std::isnan(dispatched[h])) << h;
            continue;
        }
        ASSERT_EQ((double)portable[h], want) << "half 0x" << std::hex << h;
        ASSERT_EQ(std::signbit(portable[h]), std::signbit(want)) << h;
        ASSERT_EQ(std::memcmp(&portable[h], &dispatched[h], sizeof(float)), 0)
            << "F16C differs for half 0x" << std::hex << h;
        ASSERT_EQ(vs_half_to_float1((uint16_t)h), portable[h]);
    }
}

// Floats around every half: for each sign, float exponent that can reach a half (2^-26 .. 2^16)
// and the top 10 mantissa bits, the low 13 bits at the rounding boundaries (exact, just below /
// at / just above the tie, the largest) and a few random ones; plus random floats of any
// magnitude and the special values.
TEST(Half, FloatToHalfAtEveryBoundary)
{
    std::vector<float> in;
    std::mt19937 rng(23);
    const uint32_t lows[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff};
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t exponent = 127 - 26; exponent <= 127 + 16; exponent++)
            for (uint32_t top = 0; top < 1024; top++)
            {
                uint32_t base = (sign << 31) | (exponent << 23) | (top << 13);
                for (uint32_t low : lows)
                    in.push_back(from_bits(base | low));
                in.push_back(from_bits(base | (rng() & 0x1fff)));
            }
    for (int i = 0; i < 200000; i++)
    {
        float f = from_bits(rng());
        if (!std::isnan(f))
            in.push_back(f);
    }
    for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.99f, 65520.0f, -65520.0f,
                    0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1p-26f, 0x1p-14f, 0x1.ffcp-15f, 0x1p-149f,
                    1e-8f, 3.4028235e38f})
        in.push_back(f);

    std::vector<uint16_t> portable(in.size()), dispatched(in.size());
    vs_float_to_half_portable(in.data(), portable.data(), in.size());
    vs_float_to_half(in.data(), dispatched.data(), in.size());
    for (size_t i = 0; i < in.size(); i++)
    {
        uint16_t want = reference_to_half(in[i]);
        ASSERT_EQ(portable[i], want) << "float " << std::hexfloat << in[i];
        ASSERT_EQ(dispatched[i], want) << "F16C, float " << std::hexfloat << in[i];
        ASSERT_EQ(vs_float_to_half1(in[i]), want);
    }
    EXPECT_GT(in.size(), 500000u);
}

TEST(Half, NaNStaysNaN)
{
    float nan = std::nanf("");
    uint16_t h;
    vs_float_to_half(&nan, &h, 1);
    EXPECT_TRUE(vs_half_is_special(h) && (h & 0x3ff) != 0);
    EXPECT_EQ(vs_float_to_half1(INFINITY), 0x7c00);
    EXPECT_TRUE(vs_half_is_special(0xfc00));
    EXPECT_FALSE(vs_half_is_special(0x7bff));
}

// Lengths that are not multiples of the 8-wide F16C step round-trip too.
TEST(Half, BulkTails)
{
    for (size_t n = 0; n < 40; n++)
    {
        std::vector<float> in(n), back(n);
        for (size_t i = 0; i < n; i++)
            in[i] = (float)i * 0.5f - 7.0f;
        std::vector<uint16_t> h(n);
        vs_float_to_half(in.data(), h.data(), n);
        vs_half_to_float(h.data(), back.data(), n);
        EXPECT_EQ(in, back) << n;
    }
    std::printf("half conversion: %s\n", vs_half_simd_level());
}

} // namespace
