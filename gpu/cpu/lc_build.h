// The List of Clusters build (lc.h) over a source of distances, so that the host function
// vs_lc_build (lc.cpp: one thread) and the context build vs_metric_build_lc (engine/
// metric_build_api.cpp: the backend's distances, on its threads or the GPU) run the same
// selections on the same values and give the same centers, buckets and radii.
#pragma once

#include "vsearch/lc.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace vs::metric {

// The first center of a build over n objects: splitmix64 of the seed.
inline size_t lc_first_center(uint64_t seed, size_t n)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return static_cast<size_t>(z % n);
}

// dist(c, rows, m, out): out[i] = d(object c, object rows[i]) for i < m, rows ascending (the
// value vs::metric::Probe gives with c the fixed side, unbounded).  tick(done) true: stop
// (VS_CANCELLED).  Outputs as vs_lc_build's; returns a vs_status (allocation failures throw).
template <typename Dist, typename Tick>
int lc_build_with(size_t n, size_t bucket_size, uint64_t seed, Dist &&dist, Tick &&tick,
                  size_t *centers, size_t *ncenters, size_t *members, size_t *bucket_offsets,
                  double *radii, uint64_t *ndist)
{
    *ncenters = 0;
    bucket_offsets[0] = 0;
    if (n == 0)
        return VS_OK;
    std::vector<size_t> rem(n);
    for (size_t i = 0; i < n; i++)
        rem[i] = i;
    std::vector<double> sum(n, 0.0);
    std::vector<unsigned char> taken(n, 0);
    std::vector<double> d(n);
    std::vector<std::pair<double, size_t>> bucket; // a max-heap while it is chosen
    bucket.reserve(std::min(bucket_size, n));
    uint64_t evals = 0;
    size_t nc = 0;
    size_t nm = 0;
    size_t c = lc_first_center(seed, n);

    while (true)
    {
        // c leaves the remaining set and becomes the next center
        rem.erase(std::find(rem.begin(), rem.end(), c));
        centers[nc] = c;
        dist(c, rem.data(), rem.size(), d.data());
        evals += rem.size();
        // the sums, and the bucket: the bucket_size nearest by (distance, position)
        bucket.clear();
        for (size_t i = 0; i < rem.size(); i++)
        {
            const std::pair<double, size_t> e(d[i], rem[i]);
            sum[rem[i]] += d[i];
            if (bucket.size() < bucket_size)
            {
                bucket.push_back(e);
                std::push_heap(bucket.begin(), bucket.end());
            }
            else if (e < bucket.front())
            {
                std::pop_heap(bucket.begin(), bucket.end());
                bucket.back() = e;
                std::push_heap(bucket.begin(), bucket.end());
            }
        }
        std::sort_heap(bucket.begin(), bucket.end());
        double radius = 0.0;
        for (const auto &e : bucket)
        {
            members[nm++] = e.second;
            radius = std::max(radius, e.first);
            taken[e.second] = 1;
        }
        radii[nc] = radius;
        nc++;
        bucket_offsets[nc] = nm;

        // the rest stays, in position order; the next center is the first of them with the
        // largest sum of distances to the centers so far
        size_t kept = 0;
        size_t best = n;
        for (size_t p : rem)
            if (!taken[p])
            {
                rem[kept++] = p;
                if (best == n || sum[p] > sum[best])
                    best = p;
            }
        rem.resize(kept);
        if (tick(nc + nm))
            return VS_CANCELLED;
        if (rem.empty())
            break;
        c = best;
    }
    *ncenters = nc;
    if (ndist)
        *ndist += evals;
    return VS_OK;
}

} // namespace vs::metric
