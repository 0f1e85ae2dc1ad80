#include "engine/host_common.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <thread>

namespace vs {

AddPlan plan_add(const std::vector<int64_t> &old_ids, const int64_t *ids, size_t n)
{
    AddPlan plan;
    plan.new_order.resize(n);
    std::iota(plan.new_order.begin(), plan.new_order.end(), size_t{0});
    std::sort(plan.new_order.begin(), plan.new_order.end(),
              [ids](size_t a, size_t b) { return ids[a] < ids[b]; });
    for (size_t j = 1; j < n; j++)
        if (ids[plan.new_order[j]] == ids[plan.new_order[j - 1]])
            throw Error(VS_INVALID_ARGUMENT,
                        "duplicate id " + std::to_string(ids[plan.new_order[j]]) + " in the call");
    if (old_ids.size() + n >= 0xFFFFFFFFull)
        throw Error(VS_INVALID_ARGUMENT, "a dataset holds fewer than 2^32 - 1 rows");
    plan.append = n == 0 || old_ids.empty() || ids[plan.new_order[0]] > old_ids.back();
    if (plan.append)
        return plan;
    plan.merged.reserve(old_ids.size() + n);
    plan.merged_ids.reserve(old_ids.size() + n);
    size_t i = 0, j = 0;
    while (i < old_ids.size() || j < n)
    {
        if (j == n || (i < old_ids.size() && old_ids[i] < ids[plan.new_order[j]]))
        {
            plan.merged.push_back(static_cast<int64_t>(i));
            plan.merged_ids.push_back(old_ids[i]);
            i++;
        }
        else
        {
            int64_t id = ids[plan.new_order[j]];
            if (i < old_ids.size() && old_ids[i] == id)
                throw Error(VS_INVALID_ARGUMENT,
                            "id " + std::to_string(id) + " is already in the dataset");
            plan.merged.push_back(-static_cast<int64_t>(j) - 1);
            plan.merged_ids.push_back(id);
            j++;
        }
    }
    return plan;
}

std::vector<size_t> plan_remove(const std::vector<int64_t> &old_ids, const int64_t *ids, size_t n,
                                size_t *removed)
{
    std::vector<int64_t> gone(ids, ids + n);
    std::sort(gone.begin(), gone.end());
    gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
    std::vector<size_t> keep;
    keep.reserve(old_ids.size());
    size_t g = 0;
    for (size_t i = 0; i < old_ids.size(); i++)
    {
        while (g < gone.size() && gone[g] < old_ids[i])
            g++;
        if (g < gone.size() && gone[g] == old_ids[i])
            continue;
        keep.push_back(i);
    }
    if (removed)
        *removed = old_ids.size() - keep.size();
    return keep;
}

std::vector<size_t> plan_subset(const std::vector<int64_t> &old_ids, const int64_t *ids, size_t n)
{
    std::vector<size_t> rows(n);
    for (size_t i = 0; i < n; i++)
    {
        int64_t r = find_row(old_ids, ids[i]);
        if (r < 0)
            throw Error(VS_INVALID_ARGUMENT,
                        "id " + std::to_string(ids[i]) + " of the subset is not in the dataset");
        rows[i] = static_cast<size_t>(r);
    }
    std::sort(rows.begin(), rows.end());
    for (size_t i = 1; i < n; i++)
        if (rows[i] == rows[i - 1])
            throw Error(VS_INVALID_ARGUMENT, "id " + std::to_string(old_ids[rows[i]]) +
                                                 " is repeated in the subset");
    return rows;
}

int64_t find_row(const std::vector<int64_t> &ids, int64_t id)
{
    auto it = std::lower_bound(ids.begin(), ids.end(), id);
    if (it == ids.end() || *it != id)
        return -1;
    return it - ids.begin();
}

double sqnorm_double(const float *x, size_t d)
{
    double s = 0;
    for (size_t i = 0; i < d; i++)
        s += static_cast<double>(x[i]) * x[i];
    return s;
}

void check_cancel(const BackendConfig &config)
{
    if (config.cancel && config.cancel(config.cancel_arg))
        throw Error(VS_CANCELLED, "cancelled");
}

void copy_parallel(size_t n, size_t item_bytes, const std::function<void(size_t, size_t)> &copy)
{
    constexpr size_t kPerThread = size_t{4} << 20;
    const size_t hw = std::max(1u, std::thread::hardware_concurrency());
    const size_t nt = std::min<size_t>({8, hw, n * item_bytes / kPerThread});
    if (nt <= 1)
    {
        copy(0, n);
        return;
    }
    std::vector<std::thread> helpers;
    helpers.reserve(nt - 1);
    try
    {
        for (size_t t = 1; t < nt; t++)
            helpers.emplace_back(copy, n * t / nt, n * (t + 1) / nt);
    }
    catch (...)
    {
        for (std::thread &h : helpers)
            h.join();
        throw;
    }
    copy(0, n / nt);
    for (std::thread &h : helpers)
        h.join();
}

std::vector<size_t> kmeans_sample(size_t n, size_t sample_size, Rng &rng)
{
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), size_t{0});
    if (sample_size == 0 || sample_size >= n)
        return idx;
    for (size_t i = 0; i < sample_size; i++)
        std::swap(idx[i], idx[i + rng.below(n - i)]);
    idx.resize(sample_size);
    std::sort(idx.begin(), idx.end());
    return idx;
}

std::vector<size_t> kmeans_random_init(size_t m, size_t k, Rng &rng)
{
    // Partial Fisher-Yates over a lazily materialised permutation.
    std::vector<size_t> out(k);
    std::vector<std::pair<size_t, size_t>> swapped; // sparse: position -> value
    auto get = [&](size_t pos) {
        for (auto &p : swapped)
            if (p.first == pos)
                return p.second;
        return pos;
    };
    auto set = [&](size_t pos, size_t v) {
        for (auto &p : swapped)
            if (p.first == pos)
            {
                p.second = v;
                return;
            }
        swapped.emplace_back(pos, v);
    };
    if (k > 4096)
    {
        std::vector<size_t> perm(m);
        std::iota(perm.begin(), perm.end(), size_t{0});
        for (size_t i = 0; i < k; i++)
        {
            std::swap(perm[i], perm[i + rng.below(m - i)]);
            out[i] = perm[i];
        }
        return out;
    }
    for (size_t i = 0; i < k; i++)
    {
        size_t j = i + rng.below(m - i);
        size_t vi = get(i), vj = get(j);
        set(i, vj);
        set(j, vi);
        out[i] = vj;
    }
    return out;
}

size_t kmeans_pick(const double *prefix, size_t m, double u)
{
    double total = prefix[m - 1];
    if (!(total > 0))
        return std::min(m - 1, static_cast<size_t>(u * static_cast<double>(m)));
    // The first point whose prefix exceeds u * total: it has a positive weight.
    size_t i = std::upper_bound(prefix, prefix + m, u * total) - prefix;
    return i < m ? i : m - 1;
}

size_t kmeans_repair_empty(float *centroids, std::vector<int64_t> &counts, size_t k, size_t d,
                           size_t m, Rng &rng)
{
    const float eps = 1.0f / 1024.0f;
    if (m <= k)
        return 0;
    size_t repaired = 0;
    for (size_t ci = 0; ci < k; ci++)
    {
        if (counts[ci] != 0)
            continue;
        bool any = false;
        for (size_t j = 0; j < k; j++)
            any = any || counts[j] > 1;
        if (!any)
            break;
        size_t cj = 0;
        for (;; cj = (cj + 1) % k)
        {
            double p = (static_cast<double>(counts[cj]) - 1.0) / static_cast<double>(m - k);
            if (rng.uniform() < p)
                break;
        }
        float *a = centroids + ci * d, *b = centroids + cj * d;
        for (size_t j = 0; j < d; j++)
        {
            float v = b[j];
            float delta = eps * (std::fabs(v) + 1e-6f);
            if (j % 2 == 0)
            {
                a[j] = v + delta;
                b[j] = v - delta;
            }
            else
            {
                a[j] = v - delta;
                b[j] = v + delta;
            }
        }
        counts[ci] = counts[cj] / 2;
        counts[cj] -= counts[ci];
        repaired++;
    }
    return repaired;
}

void kmeans_normalize(float *centroids, size_t k, size_t d)
{
    for (size_t c = 0; c < k; c++)
    {
        float *v = centroids + c * d;
        double s = sqnorm_double(v, d);
        if (s <= 0)
            continue;
        double inv = 1.0 / std::sqrt(s);
        for (size_t j = 0; j < d; j++)
            v[j] = static_cast<float>(v[j] * inv);
    }
}

bool kmeans_spherical(vs_metric metric)
{
    return metric == VS_METRIC_IP || metric == VS_METRIC_COSINE;
}

} // namespace vs
