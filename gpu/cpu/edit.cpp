// Edit distance on code points (vsearch/edit.h): Myers' bit-parallel algorithm for patterns of
// at most 64 code points, a banded-by-bound two-row dynamic program beyond.
#include "vsearch/edit.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace {

inline uint64_t match_mask(const vs_edit_pattern *p, uint32_t c)
{
    if (c < 256)
        return p->low[c];
    for (int i = 0; i < p->nhigh; i++)
        if (p->high[i] == c)
            return p->high_mask[i];
    return 0;
}

// Myers / Hyyrö: D[m][j] for the global distance, one column per text character.  Bits above m
// carry garbage that never reaches the lower bits (carries and shifts only go up).
size_t myers(const vs_edit_pattern *p, const uint32_t *t, size_t nt, size_t bound)
{
    const size_t m = p->n;
    if (m == 0)
        return nt;
    const uint64_t top = uint64_t(1) << (m - 1);
    uint64_t pv = ~uint64_t(0);
    uint64_t mv = 0;
    size_t score = m;

    for (size_t j = 0; j < nt; j++)
    {
        uint64_t eq = match_mask(p, t[j]);
        uint64_t xv = eq | mv;
        uint64_t xh = (((eq & pv) + pv) ^ pv) | eq;
        uint64_t ph = mv | ~(xh | pv);
        uint64_t mh = pv & xh;
        if (ph & top)
            score++;
        else if (mh & top)
            score--;
        ph = (ph << 1) | 1; // row 0 grows by one per column: D[0][j] = j
        mh <<= 1;
        pv = mh | ~(xv | ph);
        mv = ph & xv;
        // the distance falls by at most one per remaining column
        if (bound != SIZE_MAX && score > bound + (nt - 1 - j))
            return bound + 1;
    }
    return score;
}

// Two-row dynamic program over the shorter string; stops when a whole row exceeds bound.
size_t dp(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, size_t bound,
          vs_edit_cancel_fn cancel, void *arg)
{
    if (na < nb)
    {
        std::swap(a, b);
        std::swap(na, nb);
    }
    // rows over b (the shorter), one row per character of a
    size_t *row = static_cast<size_t *>(std::malloc(sizeof(size_t) * (nb + 1)));
    if (row == nullptr)
        return VS_EDIT_ABORTED;
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++)
    {
        if (cancel != nullptr && i % VS_EDIT_CANCEL_ROWS == 0 && cancel(arg))
        {
            std::free(row);
            return VS_EDIT_ABORTED;
        }
        size_t diag = row[0];
        size_t lowest = row[0] = i;
        uint32_t c = a[i - 1];
        for (size_t j = 1; j <= nb; j++)
        {
            size_t up = row[j];
            size_t v = diag + (b[j - 1] == c ? 0 : 1);
            v = std::min(v, up + 1);
            v = std::min(v, row[j - 1] + 1);
            row[j] = v;
            diag = up;
            lowest = std::min(lowest, v);
        }
        if (bound != SIZE_MAX && lowest > bound)
        {
            std::free(row);
            return bound + 1;
        }
    }
    size_t d = row[nb];
    std::free(row);
    return d;
}

} // namespace

extern "C" {

void vs_edit_prepare(vs_edit_pattern *p, const uint32_t *s, size_t n)
{
    p->s = s;
    p->n = n;
    p->nhigh = 0;
    p->cancel = nullptr;
    p->cancel_arg = nullptr;
    if (n > VS_EDIT_MYERS_MAX)
        return; // the long path reads s itself
    std::memset(p->low, 0, sizeof(p->low));
    for (size_t i = 0; i < n; i++)
    {
        uint32_t c = s[i];
        uint64_t bit = uint64_t(1) << i;
        if (c < 256)
        {
            p->low[c] |= bit;
            continue;
        }
        int k = 0;
        while (k < p->nhigh && p->high[k] != c)
            k++;
        if (k == p->nhigh)
        {
            p->high[k] = c;
            p->high_mask[k] = 0;
            p->nhigh++;
        }
        p->high_mask[k] |= bit;
    }
}

size_t vs_edit_pattern_distance(const vs_edit_pattern *p, const uint32_t *t, size_t nt,
                                size_t bound)
{
    size_t diff = p->n > nt ? p->n - nt : nt - p->n;
    if (bound != SIZE_MAX && diff > bound)
        return bound + 1; // the distance is at least the difference of the lengths
    if (p->n <= VS_EDIT_MYERS_MAX)
        return myers(p, t, nt, bound);
    if (nt <= VS_EDIT_MYERS_MAX)
    {
        vs_edit_pattern q;
        vs_edit_prepare(&q, t, nt); // symmetric: the short text becomes the pattern
        return myers(&q, p->s, p->n, bound);
    }
    return dp(p->s, p->n, t, nt, bound, p->cancel, p->cancel_arg);
}

size_t vs_edit_distance(const uint32_t *a, size_t na, const uint32_t *b, size_t nb)
{
    if (na > nb)
    {
        std::swap(a, b);
        std::swap(na, nb);
    }
    if (na <= VS_EDIT_MYERS_MAX)
    {
        vs_edit_pattern p;
        vs_edit_prepare(&p, a, na);
        return myers(&p, b, nb, SIZE_MAX);
    }
    return dp(a, na, b, nb, SIZE_MAX, nullptr, nullptr);
}

size_t vs_edit_distance_dp(const uint32_t *a, size_t na, const uint32_t *b, size_t nb)
{
    return dp(a, na, b, nb, SIZE_MAX, nullptr, nullptr);
}

} // extern "C"
