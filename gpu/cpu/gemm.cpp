// Blocked dot products (gemm.h): gemm_kernels.inc compiled for AVX-512, AVX2+FMA and SSE2, the
// best one the CPU supports chosen once per process; packing; the candidate bound of
// nearest_rows.
#include "cpu/gemm.h"
#include "engine/nearest_slack.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace vs {

namespace gemm_isa {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
namespace avx512 {
#define VS_VEC_BYTES 64
#include "gemm_kernels.inc"
#undef VS_VEC_BYTES
} // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
#define VS_VEC_BYTES 32
#include "gemm_kernels.inc"
#undef VS_VEC_BYTES
} // namespace avx2
#pragma GCC pop_options

namespace sse2 {
#define VS_VEC_BYTES 16
#include "gemm_kernels.inc"
#undef VS_VEC_BYTES
} // namespace sse2

using DotBlock = void (*)(const float *, size_t, size_t, const float *, size_t, size_t, size_t,
                          float *, size_t);

struct Table
{
    const char *name;
    DotBlock dot_block;
    size_t (*row_candidates)(const float *, const float *, size_t, size_t, size_t, const float *,
                             bool, float *, double, uint32_t *);
    size_t (*dot_candidates)(float *, const float *, size_t, bool, double, uint32_t *);
    size_t (*bounded_columns)(const float *, const float *, float, const float *, size_t, int,
                              float *, uint32_t *);
    void (*pq_table)(const float *, const float *const *, size_t, size_t, bool, float *);
    size_t (*lane_rows)(size_t);
    void (*lane_candidates)(const float *, size_t, size_t, const float *, size_t, size_t, size_t,
                            const float *, bool, const double *, float *, float *, size_t,
                            uint32_t *, size_t, size_t *);
    bool (*usable)();
};

bool has_avx512()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}
bool has_avx2()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool always() { return true; }

#define VS_TABLE(ns, usable)                                                                       \
    {#ns,         ns::dot_block,      ns::row_candidates, ns::dot_candidates,                     \
     ns::bounded_columns, ns::pq_table,     ns::lane_rows,      ns::lane_candidates, usable}
const Table kTables[] = {VS_TABLE(avx512, has_avx512), VS_TABLE(avx2, has_avx2),
                         VS_TABLE(sse2, always)};
#undef VS_TABLE

const Table &active()
{
    static const Table *best = [] {
        for (const Table &t : kTables)
            if (t.usable())
                return &t;
        return &kTables[2];
    }();
    return *best;
}

} // namespace gemm_isa

void PackedRows::pack(const float *rows, size_t n, size_t d, size_t ld)
{
    std::vector<const float *> row(n);
    for (size_t j = 0; j < n; j++)
        row[j] = rows + j * ld;
    pack_rows(row.data(), n, d);
}

void PackedRows::pack_rows(const float *const *rows, size_t n, size_t d)
{
    n_ = n;
    d_ = d;
    cols_ = (std::max<size_t>(n, 1) + kGemmColumnAlign - 1) / kGemmColumnAlign * kGemmColumnAlign;
    width_ = cols_ <= kGemmSinglePanel ? cols_ : kGemmPanel;
    panels_.assign(cols_ * d, 0.0f);
    sqnorms_.assign(cols_, 0.0f);
    norms_.assign(cols_, 0.0);
    double maxsq = 0;
    for (size_t j = 0; j < n; j++)
    {
        const float *r = rows[j];
        float *p = panels_.data() + (j / width_) * d * width_ + j % width_;
        double s = 0;
        for (size_t t = 0; t < d; t++)
        {
            p[t * width_] = r[t];
            s += static_cast<double>(r[t]) * r[t];
        }
        sqnorms_[j] = static_cast<float>(s);
        norms_[j] = std::sqrt(s) * (1.0 + 1e-9);
        maxsq = std::max(maxsq, s);
    }
    max_norm_ = std::sqrt(maxsq) * (1.0 + 1e-9);
}

void dot_block(const float *x, size_t ldx, size_t nx, const PackedRows &rows, float *out,
               size_t ldo)
{
    gemm_isa::active().dot_block(x, ldx, nx, rows.panels(), rows.dim(), rows.width(),
                                 rows.padded(), out, ldo);
}

size_t nearest_row_candidates(const float *x, const PackedRows &rows, NearestKind kind,
                              double slack, float *v, uint32_t *out)
{
    return gemm_isa::active().row_candidates(x, rows.panels(), rows.dim(), rows.width(),
                                             rows.size(), rows.sqnorms(), kind == NearestKind::L2,
                                             v, slack, out);
}

size_t nearest_lane_rows(size_t d)
{
    return gemm_isa::active().lane_rows(d);
}

namespace {

void lane_candidates_of(const gemm_isa::Table &t, const float *x, size_t ldx, size_t nr,
                        const PackedRows &rows, NearestKind kind, const double *slack,
                        float *lane_values, float *v, size_t ldv, uint32_t *cand, size_t ldc,
                        size_t *counts)
{
    t.lane_candidates(x, ldx, nr, rows.panels(), rows.dim(), rows.width(), rows.size(),
                      rows.sqnorms(), kind == NearestKind::L2, slack, lane_values, v, ldv, cand,
                      ldc, counts);
}

} // namespace

void nearest_lane_candidates(const float *x, size_t ldx, size_t nr, const PackedRows &rows,
                             NearestKind kind, const double *slack, float *lane_values, float *v,
                             size_t ldv, uint32_t *cand, size_t ldc, size_t *counts)
{
    lane_candidates_of(gemm_isa::active(), x, ldx, nr, rows, kind, slack, lane_values, v, ldv,
                       cand, ldc, counts);
}

bool nearest_lane_candidates_with(const char *isa, const float *x, size_t ldx, size_t nr,
                                  const PackedRows &rows, NearestKind kind, const double *slack,
                                  float *lane_values, float *v, size_t ldv, uint32_t *cand,
                                  size_t ldc, size_t *counts)
{
    for (const gemm_isa::Table &t : gemm_isa::kTables)
        if (std::strcmp(t.name, isa) == 0)
        {
            if (!t.usable() || nr > t.lane_rows(rows.dim()) || rows.width() != rows.padded())
                return false;
            lane_candidates_of(t, x, ldx, nr, rows, kind, slack, lane_values, v, ldv, cand, ldc,
                               counts);
            return true;
        }
    return false;
}

size_t nearest_candidates(float *v, const float *sqnorms, size_t k, NearestKind kind,
                          double slack, uint32_t *out)
{
    return gemm_isa::active().dot_candidates(v, sqnorms, k, kind == NearestKind::L2, slack, out);
}

size_t bounded_columns(const float *o, const float *xa, float s, const float *bound, size_t n,
                       GemmValue kind, float *v, uint32_t *out)
{
    return gemm_isa::active().bounded_columns(o, xa, s, bound, n, static_cast<int>(kind), v, out);
}

void pq_table(const float *x, const float *const *rows, size_t d, size_t w, bool inner_product,
              float *out)
{
    gemm_isa::active().pq_table(x, rows, d, w, inner_product, out);
}

bool pq_table_with(const char *isa, const float *x, const float *const *rows, size_t d, size_t w,
                   bool inner_product, float *out)
{
    for (const gemm_isa::Table &t : gemm_isa::kTables)
        if (std::strcmp(t.name, isa) == 0)
        {
            if (!t.usable())
                return false;
            t.pq_table(x, rows, d, w, inner_product, out);
            return true;
        }
    return false;
}

bool bounded_columns_with(const char *isa, const float *o, const float *xa, float s,
                          const float *bound, size_t n, GemmValue kind, float *v, uint32_t *out,
                          size_t *count)
{
    for (const gemm_isa::Table &t : gemm_isa::kTables)
        if (std::strcmp(t.name, isa) == 0)
        {
            if (!t.usable())
                return false;
            *count = t.bounded_columns(o, xa, s, bound, n, static_cast<int>(kind), v, out);
            return true;
        }
    return false;
}

void PackedRows::panel_rows(std::vector<const float *> &out) const
{
    out.resize(d_);
    for (size_t t = 0; t < d_; t++)
        out[t] = panels_.data() + t * width_;
}

bool dot_block_with(const char *isa, const float *x, size_t ldx, size_t nx,
                    const PackedRows &rows, float *out, size_t ldo)
{
    for (const gemm_isa::Table &t : gemm_isa::kTables)
        if (std::strcmp(t.name, isa) == 0)
        {
            if (!t.usable())
                return false;
            t.dot_block(x, ldx, nx, rows.panels(), rows.dim(), rows.width(), rows.padded(), out,
                        ldo);
            return true;
        }
    return false;
}

void row_norms(const float *x, size_t ldx, size_t n, size_t d, double *norms)
{
    for (size_t i = 0; i < n; i++)
    {
        const float *r = x + i * ldx;
        double s[4] = {0, 0, 0, 0};
        size_t t = 0;
        for (; t + 4 <= d; t += 4)
            for (int l = 0; l < 4; l++)
                s[l] += static_cast<double>(r[t + l]) * r[t + l];
        for (; t < d; t++)
            s[0] += static_cast<double>(r[t]) * r[t];
        norms[i] = std::sqrt((s[0] + s[1]) + (s[2] + s[3]));
    }
}

// With u = 2^-24 and g = (d + 4) u (a float sum of d products, any order, fused or not):
//   L2: v_j = fl(fl(||r_j||^2) - 2 fl(<x, r_j>)) is within
//       E1 = 2 (g + 2u) ||x|| rmax + 2u rmax^2 of ||x - r_j||^2 - ||x||^2;
//   IP: v_j = -fl(<x, r_j>) within E1 = g ||x|| rmax of -<x, r_j>;
// the reference within E2 = ref_err s.  A row j whose reference ties or beats row m's (the row
// of the smallest v) has v_j - E1 - E2 <= v_m + E1 + E2, so slack 2 (E1 + E2) keeps every such
// row; twice that for safety, plus the gradual underflow of d products.  The same argument with
// each row's own norm in place of rmax (nearest_row_error) drops the candidates that are only
// within the slack because rmax is large (sub-vectors near zero among long codewords).
double nearest_row_error(NearestKind kind, size_t d, double ref_err, double xnorm, double rnorm)
{
    return 0.5 * nearest_slack(kind, d, ref_err, xnorm, rnorm);
}

size_t sharpen_candidates(const float *v, const double *norms, NearestKind kind, size_t d,
                          double ref_err, double xnorm, uint32_t *cand, size_t nc,
                          std::vector<double> &errors)
{
    // nearest_row_error as e0 + r (e1 + r e2) in the row's norm r (nearest_slack's terms).
    const double u = 0x1p-24, g = (static_cast<double>(d) + 4.0) * u;
    const double e0 = 8.0 * (static_cast<double>(d) + 4.0) * 0x1p-149 +
                      (kind == NearestKind::L2 ? 2.0 * ref_err * xnorm * xnorm : 0.0);
    const double e1 = kind == NearestKind::L2 ? 4.0 * (g + 2.0 * u + ref_err) * xnorm
                                              : 2.0 * (g + ref_err) * xnorm;
    const double e2 = kind == NearestKind::L2 ? 4.0 * u + 2.0 * ref_err : 0.0;
    errors.resize(nc);
    double bound = INFINITY;
    for (size_t c = 0; c < nc; c++)
    {
        const double r = norms[cand[c]];
        // 1e-12 relative above the sum: the rounding of these few double operations
        errors[c] = (e0 + r * (e1 + r * e2)) * (1.0 + 1e-12);
        bound = std::min(bound, static_cast<double>(v[cand[c]]) + errors[c]);
    }
    size_t kept = 0;
    for (size_t c = 0; c < nc; c++)
        if (static_cast<double>(v[cand[c]]) - errors[c] <= bound)
            cand[kept++] = cand[c];
    return kept;
}

double nearest_slack(NearestKind kind, size_t d, double ref_err, double xnorm, double rmax)
{
    return nearest_value_slack(kind == NearestKind::L2, static_cast<double>(d), ref_err, xnorm,
                               rmax);
}

} // namespace vs
