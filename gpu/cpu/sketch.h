// Row sketches (vsearch/rowscan.h): 8-bit codes of a row on its own grid, and a rigorous lower
// bound of a query's exact base value (engine/exact.h's units) against the row from the sketch.
//
// A sketch is a SketchHead, then the codes c (dim bytes, padded to 8).  The grid point of the row
// is t = lo + step * c (in real arithmetic), err >= ||x - t||, tsq ~ ||t||^2 (double sums) and cnorm >= ||c||.
// For a query q, <q, t> = lo * sum(q) + step * <q, c>, and <q, c> comes from integers: q rounded
// to q' = sigma * qi (|qi| <= 2047) gives <q, c> = sigma <qi, c> (exact in integers) + <q - q', c>,
// at most ||q - q'|| ||c|| away.  So <q, t> lies in a known interval, <q, x> within ||q|| err of
// it, and each metric's base value has a lower bound from them (L2: ||q - x|| >= ||q - t|| - err;
// cosine: the angle to x is at least the angle to t less asin(err / ||t||)).
#ifndef VSEARCH_CPU_SKETCH_H
#define VSEARCH_CPU_SKETCH_H

#include "vsearch/distance.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs {

struct SketchHead
{
    float lo, step, err;
    float cnorm; // >= ||c||
    double tsq;
};
static_assert(sizeof(SketchHead) == 24, "sketch head layout");

size_t sketch_bytes(size_t dim);
void make_sketch(const float *row, size_t dim, void *sketch);

// One query's side of the bound.
class SketchQuery
{
public:
    SketchQuery(const float *q, size_t dim, vs_metric metric);
    // A lower bound of the exact base value of (q, row of the sketch); -inf where none is known.
    double lower_base(const void *sketch) const;

private:
    size_t d_;
    vs_metric m_;
    std::vector<int16_t> qi_; // padded with zeros to a multiple of 32
    double sigma_, rnorm_, qsum_, qabs_, qsq_, qn_;
};

// <qi, c> over dim codes, the integer dot product (int64 sums), through the best kernel; qi is
// padded with zeros to a multiple of 32, codes are not read past dim.
int64_t sketch_dot(const int16_t *qi, const uint8_t *codes, size_t dim);
// Every kernel this CPU runs, best first (for the tests).
typedef int64_t (*SketchDot)(const int16_t *, const uint8_t *, size_t);
int sketch_dot_supported(SketchDot *out, int max);

} // namespace vs

#endif
