// Blocked matrix products for the CPU backend: the dot products of many vectors with a set of
// packed rows (k-means centroids, IVF-PQ coarse centroids and codebooks) as tiles that keep their
// accumulators in registers (gemm_kernels.inc, dispatched per instruction set like distance.h),
// and on top of them a certified nearest-row search: the nearest row under a reference distance
// the caller computes, found from the tiles' float values and a rigorous bound on their rounding,
// so the answer is exactly the one a scan of every row with the reference would give.
//
// Own kernels rather than a BLAS: they start no threads of their own inside a PostgreSQL backend
// and need no new dependency (the comparison with OpenBLAS: docs/BENCHMARKS.md, "CPU build").
#ifndef VSEARCH_CPU_GEMM_H
#define VSEARCH_CPU_GEMM_H

#include "engine/backend.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs {

constexpr size_t kGemmPanel = 16;       // panel width of packed sets of more than 256 rows
constexpr size_t kGemmColumnAlign = 32; // packed rows are padded to a multiple of this
constexpr size_t kGemmSinglePanel = 256; // up to this many (padded) rows form one panel

// Rows of a matrix (n x d, leading dimension ld) packed as columns for the kernels: zero rows up
// to a multiple of 32 (padded()), in panels of width() rows stored dimension-major (element t of
// row j at panels()[(j / w) * d * w + t * w + j % w]): one panel of all rows when they are at
// most 256 (a PQ codebook, a small k-means), else panels of 16.
class PackedRows
{
public:
    PackedRows() = default;
    PackedRows(const float *rows, size_t n, size_t d, size_t ld) { pack(rows, n, d, ld); }
    void pack(const float *rows, size_t n, size_t d, size_t ld);
    // The same from a pointer to each row (rows read in place, e.g. from index pages).
    void pack_rows(const float *const *rows, size_t n, size_t d);

    size_t size() const { return n_; }
    size_t dim() const { return d_; }
    size_t padded() const { return cols_; }
    size_t width() const { return width_; }
    const float *panels() const { return panels_.data(); }
    // Element t of row j.
    float at(size_t j, size_t t) const
    {
        return panels_[(j / width_) * d_ * width_ + t * width_ + j % width_];
    }
    const float *sqnorms() const { return sqnorms_.data(); } // float(||row||^2); padding 0
    double max_norm() const { return max_norm_; }           // >= every row's L2 norm
    const double *norms() const { return norms_.data(); }   // >= each row's L2 norm
    // Where element t of every row lies, for t < dim(), in a single panel (pq_table's rows).
    void panel_rows(std::vector<const float *> &out) const;

private:
    size_t n_ = 0, d_ = 0, cols_ = 0, width_ = 0;
    std::vector<float> panels_;
    std::vector<float> sqnorms_;
    std::vector<double> norms_;
    double max_norm_ = 0;
};

// out[i * ldo + j] = <x_i, row j> in float (any order of summation, fused multiply-adds) for
// i < nx and j < rows.padded() (padding columns are 0); ldo >= rows.padded().
void dot_block(const float *x, size_t ldx, size_t nx, const PackedRows &rows, float *out,
               size_t ldo);
// The same with a named kernel table ("avx512", "avx2", "sse2"; tests), false if not supported.
bool dot_block_with(const char *isa, const float *x, size_t ldx, size_t nx, const PackedRows &rows,
                    float *out, size_t ldo);

// The values of exact kNN's blocked products (the CUDA GEMM path's, cpu_backend.cpp) for one row
// y against columns c < n (n a multiple of 16: a packed panel's padded()) from its row of dot
// products o: L2 (xa[c] + s) - 2 o[c] (xa: ||x||^2, s: ||y||^2), IP -o[c], cosine
// 1 - o[c] xa[c] s (xa: 1 / ||x||, s: 1 / ||y||), into v[c]; the columns whose value is not above
// bound[c], or is +inf or NaN (a float sum that overflowed: it says nothing), ascending into out.
// Returns how many.
enum class GemmValue
{
    L2 = 0,
    IP = 1,
    Cosine = 2
};
size_t bounded_columns(const float *o, const float *xa, float s, const float *bound, size_t n,
                       GemmValue kind, float *v, uint32_t *out);
// The same with a named kernel table (tests): *count columns; false if not supported.
bool bounded_columns_with(const char *isa, const float *o, const float *xa, float s,
                          const float *bound, size_t n, GemmValue kind, float *v, uint32_t *out,
                          size_t *count);

// bounded_columns' values for a metric (L2 for L2 and L2SQ; L1 has none).
inline GemmValue gemm_value(vs_metric m)
{
    return m == VS_METRIC_IP       ? GemmValue::IP
           : m == VS_METRIC_COSINE ? GemmValue::Cosine
                                   : GemmValue::L2;
}

// The shape of the exact searches through blocked products (the CPU backend's kNN and range,
// row scans): from a handful of queries on (but L1), reading each row once per block of queries
// beats reading it once per query; a block is one packed panel (at most 256 columns); rows per
// dot_block call, whose output (rows x queries) stays in the core's caches.
constexpr size_t kGemmMinQueries = 4;
constexpr size_t kGemmQueries = 128;
constexpr size_t kGemmTileRows = 48;

// Squared norms below this get exact distances where a bound needs them: the float sums' error is
// then no longer relative to them (subnormal terms), and |x| |y| >= 1e-30 keeps the absolute part
// of a cosine's error (d 2^-149 / (|x| |y|)) far below the bound's slack.
constexpr float kTinyNorm2 = 1e-30f;

// IVF-PQ lookup table of one sub-vector x (d elements) against w <= 256 codewords (w a multiple
// of 32), given as rows[t] = element t of every codeword (w floats: a single-panel PackedRows'
// panel_rows(), or the same floats where the caller keeps them, e.g. index pages):
// out[j] = pq_l2(x, codeword j) (or pq_dot with inner_product), bit for bit
// (engine/ivfpq_math.h: in order, products rounded), for j < w.  pq_table_with: a named kernel
// table (tests), false if not supported.
void pq_table(const float *x, const float *const *rows, size_t d, size_t w, bool inner_product,
              float *out);
bool pq_table_with(const char *isa, const float *x, const float *const *rows, size_t d, size_t w,
                   bool inner_product, float *out);

// What the reference distance of nearest_rows approximates, and how closely:
//   L2: ||x - r||^2 (up to a term that depends on x only); IP: -<x, r>.
// ref_err bounds the reference's own rounding: |reference - true| <= ref_err * s with
// s = (||x|| + ||r||)^2 for L2 and ||x|| ||r|| for IP.  2 (d + 4) 2^-24 covers a float sum of d
// terms in any order (the SIMD kernels, the IVF-PQ sums in order); 2^-23 a value computed in
// double and rounded to float once (engine/exact.h).
enum class NearestKind
{
    L2,
    IP
};

inline double float_sum_error(size_t d) { return 2.0 * (static_cast<double>(d) + 4.0) * 0x1p-24; }
constexpr double kRoundedOnceError = 0x1p-23;

// Candidate bound of nearest_rows: a row j can be the reference's nearest only if its tile value
// v_j (||r_j||^2 - 2 <x, r_j> for L2, -<x, r_j> for IP) is within slack of the smallest v.
double nearest_slack(NearestKind kind, size_t d, double ref_err, double xnorm, double rmax);
// The same bound for one row of norm rnorm: e_j, so that nearest_slack(.., rmax) = 2 e at
// rnorm = rmax.  The reference's nearest row j* has v_j* - e_j* <= v_c + e_c for every row c,
// which sharpens the candidates of nearest_slack to those near in value and short.
double nearest_row_error(NearestKind kind, size_t d, double ref_err, double xnorm, double rnorm);

// The candidates of one row x (nearest_rows): its values v_j (||r_j||^2 - 2 <x, r_j> for L2,
// -<x, r_j> for IP) into v[0 .. k), and the j with v_j <= min v + slack, ascending, into out;
// returns how many, or 0 when a value is not finite (every row is then a candidate).
// nearest_candidates: from a row of dot products with `rows` (dot_block), in place;
// nearest_row_candidates: straight from x and a single-panel `rows` (width() == padded(), v of
// padded() floats), faster than a tile for short rows.
size_t nearest_candidates(float *v, const float *sqnorms, size_t k, NearestKind kind,
                          double slack, uint32_t *out);
size_t nearest_row_candidates(const float *x, const PackedRows &rows, NearestKind kind,
                              double slack, float *v, uint32_t *out);

// nearest_lane_candidates: the candidates of nearest_row_candidates for nr <= nearest_lane_rows(d)
// rows x_b at once (leading dimension ldx; rows of at most 16 elements with AVX-512, 8 else),
// slack[b] per row: row b's candidates ascending into cand + b * ldc (counts[b] of them) and their
// values into v[b * ldv + j] at their columns j (some other columns too); lane_values:
// scratch of rows.padded() * kMaxLaneRows floats.  Every value must be finite
// (nearest_values_finite).  The same candidates and values as nearest_row_candidates, bit for
// bit, at a fraction of its cost per row for short rows.  nearest_lane_rows(d) is 0 when d is
// too long for it; _with: a named kernel table (tests), false if not supported.
constexpr size_t kMaxLaneRows = 16;
size_t nearest_lane_rows(size_t d);
void nearest_lane_candidates(const float *x, size_t ldx, size_t nr, const PackedRows &rows,
                             NearestKind kind, const double *slack, float *lane_values, float *v,
                             size_t ldv, uint32_t *cand, size_t ldc, size_t *counts);
bool nearest_lane_candidates_with(const char *isa, const float *x, size_t ldx, size_t nr,
                                  const PackedRows &rows, NearestKind kind, const double *slack,
                                  float *lane_values, float *v, size_t ldv, uint32_t *cand,
                                  size_t ldc, size_t *counts);

// Whether every value of nearest_rows of a row of norm xnorm against rows of norm at most rmax is
// finite: |v_j| <= (1 + (d + 4) 2^-24) (xnorm + rmax)^2, which this keeps below FLT_MAX.  False
// for NaN or infinite norms.
inline bool nearest_values_finite(double xnorm, double rmax)
{
    return (xnorm + rmax) * (xnorm + rmax) < 0x1p127;
}

// norms[i] = ||x_i|| (in double, for the bounds) for i < n.
void row_norms(const float *x, size_t ldx, size_t n, size_t d, double *norms);

// What nearest_rows reuses between calls.
struct NearestScratch
{
    std::vector<float> values;
    std::vector<uint32_t> candidates;
    std::vector<double> norms;
    std::vector<double> errors;
    std::vector<float> lane_values;        // nearest_lane_candidates' scratch
    std::vector<uint32_t> lane_candidates; // per row of a lane group
    size_t lane_counts[kMaxLaneRows];
    double lane_slack[kMaxLaneRows];
};

// Keeps the candidates c (cand[0 .. nc), ascending, values finite) with v_c - e_c <= min over
// candidates of (v + e), e from nearest_row_error with the row's own norm (norms: an upper bound
// of each row's); returns how many are left (at least one: the row of the smallest v + e).
size_t sharpen_candidates(const float *v, const double *norms, NearestKind kind, size_t d,
                          double ref_err, double xnorm, uint32_t *cand, size_t nc,
                          std::vector<double> &errors);

// For each x_i (i < n, leading dimension ldx), the row j of `rows` with the smallest reference
// value ref(i, j) (a float), ties to the smaller j: out_row[i] = j.  The products give every
// row's value v_j; ref is computed only when more than one row lies within nearest_slack of the
// smallest v (for all of those; for every row when a value is not finite).  out_value (may be
// null) gets the winner's ref when it was computed, else its distance from the products
// (||x - r||^2 or -<x, r>, within nearest_slack).  xnorms: ||x_i|| (row_norms) when the caller has them, else null.
template <typename Ref>
void nearest_rows(const float *x, size_t ldx, size_t n, const PackedRows &rows, NearestKind kind,
                  double ref_err, Ref &&ref, const double *xnorms, int32_t *out_row,
                  float *out_value, NearestScratch &scratch)
{
    const size_t d = rows.dim(), k = rows.size(), ld = rows.padded();
    if (k == 0)
        return;
    // Short rows against one panel: a row at a time from registers, or (shorter still) a group
    // of rows at once, one per vector lane.  Else tiles of rows, in blocks whose values stay in
    // L1 (about 32 kB) between the passes over them, in whole tiles of rows (12 is a multiple of
    // every kernel's).
    const bool by_row = rows.width() == ld && d <= 32;
    const size_t lanes = rows.width() == ld ? nearest_lane_rows(d) : 0;
    const size_t block = lanes        ? lanes
                         : by_row     ? 1
                                      : std::max<size_t>(1, (size_t{8} << 10) / ld / 12) * 12;
    scratch.values.resize(block * ld);
    scratch.candidates.resize(k);
    if (lanes)
    {
        scratch.lane_values.resize(ld * kMaxLaneRows);
        scratch.lane_candidates.resize(k * lanes);
    }
    const double rmax = rows.max_norm();
    for (size_t i0 = 0; i0 < n; i0 += block)
    {
        const size_t nb = std::min(block, n - i0);
        if (!by_row)
            dot_block(x + i0 * ldx, ldx, nb, rows, scratch.values.data(), ld);
        const double *xn = xnorms ? xnorms + i0 : nullptr;
        if (!xn)
        {
            scratch.norms.resize(nb);
            row_norms(x + i0 * ldx, ldx, nb, d, scratch.norms.data());
            xn = scratch.norms.data();
        }
        if (lanes)
        {
            for (size_t b = 0; b < nb; b++)
                scratch.lane_slack[b] = nearest_slack(kind, d, ref_err, xn[b], rmax);
            nearest_lane_candidates(x + i0 * ldx, ldx, nb, rows, kind, scratch.lane_slack,
                                    scratch.lane_values.data(), scratch.values.data(), ld,
                                    scratch.lane_candidates.data(), k, scratch.lane_counts);
        }
        for (size_t b = 0; b < nb; b++)
        {
            const size_t i = i0 + b;
            float *v = scratch.values.data() + b * ld;
            uint32_t *cand = scratch.candidates.data();
            const double slack = lanes ? scratch.lane_slack[b]
                                       : nearest_slack(kind, d, ref_err, xn[b], rmax);
            size_t nc;
            if (lanes && nearest_values_finite(xn[b], rmax))
            {
                cand = scratch.lane_candidates.data() + b * k;
                nc = scratch.lane_counts[b];
            }
            else
                nc = by_row ? nearest_row_candidates(x + i * ldx, rows, kind, slack, v, cand)
                            : nearest_candidates(v, rows.sqnorms(), k, kind, slack, cand);
            const bool finite = nc > 0;
            if (!finite) // a value overflowed: every row is a candidate
                for (nc = 0; nc < k; nc++)
                    cand[nc] = static_cast<uint32_t>(nc);
            if (nc > 1 && finite)
                nc = sharpen_candidates(v, rows.norms(), kind, d, ref_err, xn[b], cand, nc,
                                        scratch.errors);
            int32_t arg = static_cast<int32_t>(cand[0]);
            float best = kind == NearestKind::L2 ? static_cast<float>(v[arg] + xn[b] * xn[b])
                                                 : v[arg];
            if (nc > 1)
            {
                for (size_t c = 0; c < nc; c++)
                {
                    float r = ref(i, cand[c]);
                    if (c == 0 || r < best)
                    {
                        best = r;
                        arg = static_cast<int32_t>(cand[c]);
                    }
                }
            }
            out_row[i] = arg;
            if (out_value)
                out_value[i] = best;
        }
    }
}

} // namespace vs

#endif
