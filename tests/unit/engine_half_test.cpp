// Datasets stored as binary16 (VS_DTYPE_F16, `halfvec`): on every backend, kNN and range answers
// match the double-precision reference over the half values and are bit for bit those of an F32
// dataset holding the same values widened (same ids, same distance bits), after merging adds and
// removes; floats are rounded on the way in and values beyond the binary16 range refused; on the
// CUDA backend the rows take half the device bytes.
#include "engine_testing.h"

#include "vsearch/half.h"

#include <cmath>
#include <tuple>

namespace {

struct HalfCase
{
    const char *name;
    size_t n, d, nq;
    std::vector<size_t> ks; // 0 means "n"
    double dups;
    uint64_t seed;
};

// Sizes that reach each CUDA path of a binary16 dataset: small and large batches of the GEMM
// with the warp selectors or the sampled filter, the large-k path, K' >= n (exact path), an
// odd dimension (rows of an odd number of halves), queries longer than a chunk of the query norms.
std::vector<HalfCase> half_cases()
{
    return {
        {"n37_d3", 37, 3, 7, {1, 10, 0}, 0.1, 41},
        {"n1000_d128_b64", 1000, 128, 64, {1, 10, 100}, 0.05, 42},
        {"n4099_d128_b5", 4099, 128, 5, {1, 10}, 0.05, 43},
        {"n20011_d32_b40", 20011, 32, 40, {10, 300}, 0.05, 44},
        {"n6007_d16_bigk", 6007, 16, 7, {5000}, 0.05, 45},
        {"n501_d37", 501, 37, 33, {10, 100}, 0.05, 46},
        {"n301_d784", 301, 784, 9, {10}, 0.05, 47},
        // longer than the CUDA query-norm kernel's 2 048-float chunk, 3 values past the last 4
        {"n509_d2051", 509, 2051, 9, {10}, 0.05, 48},
        // vs_flat's longest binary16 rows (a halfvec(4076) column: one row a page)
        {"n203_d4076", 203, 4076, 5, {1, 10}, 0.05, 49},
    };
}

using Param = std::tuple<std::string, HalfCase>;

class EngineHalf : public ::testing::TestWithParam<Param>
{
};

const vs_metric kMetrics[] = {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE,
                              VS_METRIC_L1};

std::vector<uint16_t> to_half(const std::vector<float> &x)
{
    std::vector<uint16_t> h(x.size());
    vs_float_to_half(x.data(), h.data(), x.size());
    return h;
}

// D with every value rounded to binary16 (so D.x holds the widened halves the reference uses),
// every 7th column scaled to subnormal halves or zero (the same columns in every row, so that
// duplicate rows stay duplicates), the others by 4.
vt::Data half_data(const HalfCase &c)
{
    vt::Data D = vt::make_data(c.n, c.d, c.seed, c.dups, true);
    for (size_t i = 0; i < D.x.size(); i++)
        D.x[i] *= (i % c.d) % 7 == 3 ? 1e-6f : 4.0f;
    std::vector<uint16_t> h = to_half(D.x);
    vs_half_to_float(h.data(), D.x.data(), h.size());
    return D;
}

// The F16 twin of vt::upload: the halves in three calls of vs_dataset_add_f16 (merging adds).
vt::DatasetPtr upload_half(vs_context *ctx, const vt::Data &D)
{
    vs_dataset *ds = nullptr;
    EXPECT_EQ(vs_dataset_create(ctx, D.d, VS_DTYPE_F16, &ds), VS_OK) << vs_last_error(ctx);
    EXPECT_EQ(vs_dataset_storage(ds), VS_DTYPE_F16);
    std::vector<uint16_t> h = to_half(D.x);
    const size_t cuts[4] = {0, D.n / 2, D.n * 3 / 4, D.n};
    for (int c = 0; c < 3; c++)
        EXPECT_EQ(vs_dataset_add_f16(ctx, ds, h.data() + cuts[c] * D.d, D.ids.data() + cuts[c],
                                     cuts[c + 1] - cuts[c]),
                  VS_OK)
            << vs_last_error(ctx);
    EXPECT_EQ(vs_dataset_size(ds), D.n);
    return vt::DatasetPtr(ds, vt::DatasetDeleter{ctx});
}

// Queries: make_queries' (not halves: the GEMM's query rounding is in play), every fourth one
// rounded to binary16 (exact: no rounding), and the last one with a value beyond the binary16
// range (it cannot take a binary16 GEMM).
std::vector<float> half_queries(const vt::Data &D, size_t nq, uint64_t seed)
{
    std::vector<float> q = vt::make_queries(D, nq, seed);
    for (size_t i = 0; i < nq; i += 4)
    {
        std::vector<float> row(q.begin() + i * D.d, q.begin() + (i + 1) * D.d);
        std::vector<uint16_t> h = to_half(row);
        vs_half_to_float(h.data(), &q[i * D.d], D.d);
    }
    if (nq > 2)
        q[(nq - 1) * D.d] = 1e6f;
    return q;
}

bool same_bits(float a, float b)
{
    return std::memcmp(&a, &b, sizeof a) == 0;
}

// kNN and range on the F16 dataset and on its F32 twin: the reference's answers, and the twin's
// ids and distance bits.
void check_against_twin(vs_context *ctx, const HalfCase &c, const vt::Data &D, vs_dataset *half,
                        vs_dataset *twin, const std::vector<float> &q)
{
    for (vs_metric m : kMetrics)
    {
        for (size_t k0 : c.ks)
        {
            const size_t k = std::min(k0 ? k0 : c.n, D.n);
            std::vector<int64_t> ih(c.nq * k, vt::kPoisonId), it(c.nq * k), nh(c.nq), nt(c.nq);
            std::vector<float> fh(c.nq * k, vt::poison_float()), ft(c.nq * k);
            ASSERT_EQ(vs_knn(ctx, half, q.data(), c.nq, k, m, nullptr, ih.data(), fh.data(),
                             nh.data()),
                      VS_OK)
                << vs_last_error(ctx);
            ASSERT_EQ(vs_knn(ctx, twin, q.data(), c.nq, k, m, nullptr, it.data(), ft.data(),
                             nt.data()),
                      VS_OK)
                << vs_last_error(ctx);
            for (size_t i = 0; i < c.nq; i++)
            {
                auto ref = vt::ref_sorted(D, &q[i * c.d], m);
                auto r = vt::check_knn(D, ref, k, &ih[i * k], &fh[i * k], nh[i]);
                ASSERT_TRUE(r) << c.name << " " << vt::metric_name(m) << " k=" << k << " query "
                               << i << ": " << r.message();
                ASSERT_EQ(nh[i], nt[i]);
                for (size_t j = 0; j < k; j++)
                    ASSERT_TRUE(ih[i * k + j] == it[i * k + j] &&
                                same_bits(fh[i * k + j], ft[i * k + j]))
                        << c.name << " " << vt::metric_name(m) << " k=" << k << " query " << i
                        << " slot " << j << ": " << ih[i * k + j] << "/" << fh[i * k + j]
                        << " against the F32 twin's " << it[i * k + j] << "/" << ft[i * k + j];
            }
        }
        // Range at the 10th distance of the first query.
        auto ref0 = vt::ref_sorted(D, &q[0], m);
        const float radius = ref0[std::min<size_t>(ref0.size() - 1, 10)].dist;
        if (radius != radius)
            continue;
        vs_range_result rh, rt;
        ASSERT_EQ(vs_range(ctx, half, q.data(), c.nq, radius, m, nullptr, nullptr, nullptr, &rh),
                  VS_OK)
            << vs_last_error(ctx);
        ASSERT_EQ(vs_range(ctx, twin, q.data(), c.nq, radius, m, nullptr, nullptr, nullptr, &rt),
                  VS_OK)
            << vs_last_error(ctx);
        ASSERT_EQ(rh.total, rt.total) << c.name << " " << vt::metric_name(m);
        for (size_t i = 0; i < c.nq; i++)
        {
            auto ref = vt::ref_sorted(D, &q[i * c.d], m);
            auto r = vt::check_range(ref, radius, rh.ids + rh.offsets[i],
                                     rh.distances + rh.offsets[i],
                                     static_cast<size_t>(rh.offsets[i + 1] - rh.offsets[i]));
            EXPECT_TRUE(r) << c.name << " " << vt::metric_name(m) << " query " << i << ": "
                           << r.message();
        }
        for (size_t j = 0; j < rh.total; j++)
            ASSERT_TRUE(rh.ids[j] == rt.ids[j] && same_bits(rh.distances[j], rt.distances[j]))
                << c.name << " " << vt::metric_name(m) << " range match " << j;
        vs_range_result_free(&rh);
        vs_range_result_free(&rt);
    }
}

TEST_P(EngineHalf, MatchesReferenceAndTheF32Twin)
{
    const std::string backend = std::get<0>(GetParam());
    const HalfCase &c = std::get<1>(GetParam());
    VT_CONTEXT_OR_SKIP(ctx, backend);
    vt::Data D = half_data(c);
    vt::DatasetPtr half = upload_half(ctx.get(), D);
    vt::DatasetPtr twin = vt::upload(ctx.get(), D);
    std::vector<float> q = half_queries(D, c.nq, c.seed);
    check_against_twin(ctx.get(), c, D, half.get(), twin.get(), q);
}

TEST_P(EngineHalf, AfterRemovesStillTheTwin)
{
    const std::string backend = std::get<0>(GetParam());
    const HalfCase &c = std::get<1>(GetParam());
    if (c.n < 100 || c.n > 5000)
        GTEST_SKIP() << "covered by other cases";
    VT_CONTEXT_OR_SKIP(ctx, backend);
    vt::Data D = half_data(c);
    vt::DatasetPtr half = upload_half(ctx.get(), D);
    vt::DatasetPtr twin = vt::upload(ctx.get(), D);
    // Remove every third row from both and from the reference.
    std::vector<int64_t> gone;
    vt::Data kept = D;
    kept.x.clear();
    kept.ids.clear();
    kept.group.clear();
    for (size_t r = 0; r < D.n; r++)
    {
        if (r % 3 == 0)
        {
            gone.push_back(D.ids[r]);
            continue;
        }
        kept.x.insert(kept.x.end(), D.x.begin() + r * D.d, D.x.begin() + (r + 1) * D.d);
        kept.ids.push_back(D.ids[r]);
        kept.group.push_back(D.group[r]);
    }
    kept.n = kept.ids.size();
    size_t removed = 0;
    ASSERT_EQ(vs_dataset_remove(ctx.get(), half.get(), gone.data(), gone.size(), &removed), VS_OK);
    ASSERT_EQ(removed, gone.size());
    ASSERT_EQ(vs_dataset_remove(ctx.get(), twin.get(), gone.data(), gone.size(), nullptr), VS_OK);
    HalfCase kc = c;
    kc.n = kept.n;
    std::vector<float> q = half_queries(kept, c.nq, c.seed + 1);
    check_against_twin(ctx.get(), kc, kept, half.get(), twin.get(), q);
}

// The fused GEMM and filter kernel over binary16 rows (and TF32 over the twin's floats) for every
// batch size; d = 36 is not a multiple of 8, so there the binary16 rows take the cuBLAS tile.  The
// binary16 filter pass keeps a query tile for a unit of row tiles: rows of 24, 64 and 96 halves
// (zeros beyond d), batches of part of, one and several 128-query tiles, sets not a multiple of
// the 128-row tiles; units of its own choice and of 3 row tiles (several units a query tile, the
// last one short); on wgmma where the device runs it (sm_90) and on mma.sync.
void check_fused_filter(std::initializer_list<vt::EnvSetting> settings)
{
    std::string why;
    vt::ContextPtr ctx = vt::make_context_with_env("cuda", settings, &why);
    if (!ctx)
        GTEST_SKIP() << "cuda backend unavailable: " << why;
    for (const HalfCase &c : {HalfCase{"n4099_d128_b5", 4099, 128, 5, {1, 10}, 0.05, 43},
                              HalfCase{"n20011_d24_b300", 20011, 24, 300, {10, 100}, 0.05, 48},
                              HalfCase{"n5003_d36_b40", 5003, 36, 40, {10}, 0.05, 49},
                              HalfCase{"n9001_d96_b129", 9001, 96, 129, {1, 10}, 0.05, 50},
                              HalfCase{"n3077_d64_b128", 3077, 64, 128, {10}, 0.05, 51}})
    {
        vt::Data D = half_data(c);
        vt::DatasetPtr half = upload_half(ctx.get(), D);
        vt::DatasetPtr twin = vt::upload(ctx.get(), D);
        std::vector<float> q = half_queries(D, c.nq, c.seed);
        check_against_twin(ctx.get(), c, D, half.get(), twin.get(), q);
    }
}

TEST(EngineHalfCuda, FusedFilterMatchesTheTwin)
{
    check_fused_filter({{"VSEARCH_CUDA_FUSED_BATCH", "1"}, {"VSEARCH_CUDA_SMALL_BATCH", "0"}});
}

TEST(EngineHalfCuda, FusedFilterUnitsMatchTheTwin)
{
    check_fused_filter({{"VSEARCH_CUDA_FUSED_BATCH", "1"},
                        {"VSEARCH_CUDA_SMALL_BATCH", "0"},
                        {"VSEARCH_CUDA_FUSED_UNIT_TILES", "3"}});
}

TEST(EngineHalfCuda, FusedFilterMmaSyncMatchesTheTwin)
{
    check_fused_filter({{"VSEARCH_CUDA_FUSED_BATCH", "1"},
                        {"VSEARCH_CUDA_SMALL_BATCH", "0"},
                        {"VSEARCH_CUDA_FUSED_WGMMA", "0"},
                        {"VSEARCH_CUDA_FUSED_UNIT_TILES", "3"}});
}

std::string param_name(const ::testing::TestParamInfo<Param> &info)
{
    return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(All, EngineHalf,
                         ::testing::Combine(::testing::Values(std::string("cpu"),
                                                              std::string("cuda")),
                                            ::testing::ValuesIn(half_cases())),
                         param_name);

class EngineHalfApi : public ::testing::TestWithParam<std::string>
{
};

TEST_P(EngineHalfApi, FloatsAreRoundedAndOverflowRefused)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    vs_context *c = ctx.get();
    vs_dataset *ds = nullptr, *tw = nullptr;
    ASSERT_EQ(vs_dataset_create(c, 3, VS_DTYPE_F16, &ds), VS_OK);
    vt::DatasetPtr g1(ds, vt::DatasetDeleter{c});
    ASSERT_EQ(vs_dataset_create(c, 3, VS_DTYPE_F32, &tw), VS_OK);
    vt::DatasetPtr g2(tw, vt::DatasetDeleter{c});
    EXPECT_EQ(vs_dataset_storage(tw), VS_DTYPE_F32);
    // 1 + 2^-12 rounds to 1 (ties to even), 0.1 to 0.0999755859375, 65519 to 65504
    const float v[6] = {1.0f + 0x1p-12f, 0.1f, 65519.0f, -3.0f, 1e-9f, 2.0f};
    const float w[6] = {1.0f, 0.0999755859375f, 65504.0f, -3.0f, 0.0f, 2.0f};
    const int64_t ids[2] = {4, 9};
    ASSERT_EQ(vs_dataset_add(c, ds, v, ids, 2), VS_OK) << vs_last_error(c);
    ASSERT_EQ(vs_dataset_add(c, tw, w, ids, 2), VS_OK);
    const float q[3] = {1.0f, 0.1f, 60000.0f};
    int64_t ih[2], it[2];
    float fh[2], ft[2];
    ASSERT_EQ(vs_knn(c, ds, q, 1, 2, VS_METRIC_L2, nullptr, ih, fh, nullptr), VS_OK);
    ASSERT_EQ(vs_knn(c, tw, q, 1, 2, VS_METRIC_L2, nullptr, it, ft, nullptr), VS_OK);
    for (int i = 0; i < 2; i++)
    {
        EXPECT_EQ(ih[i], it[i]);
        EXPECT_TRUE(same_bits(fh[i], ft[i])) << fh[i] << " " << ft[i];
    }
    // 65520 rounds to infinity; NaN; an infinite half: refused, nothing added
    const float big[3] = {65520.0f, 0.0f, 0.0f}, nan[3] = {NAN, 0.0f, 0.0f};
    const int64_t more = 20;
    EXPECT_EQ(vs_dataset_add(c, ds, big, &more, 1), VS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(vs_last_error(c)).find("binary16"), std::string::npos);
    EXPECT_EQ(vs_dataset_add(c, ds, nan, &more, 1), VS_INVALID_ARGUMENT);
    const uint16_t inf_half[3] = {0x7c00, 0, 0};
    EXPECT_EQ(vs_dataset_add_f16(c, ds, inf_half, &more, 1), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_dataset_add_f16(c, tw, inf_half, &more, 1), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_dataset_size(ds), 2u);
    // halves into an F32 dataset are widened
    const uint16_t one_half[3] = {0x3c00, 0x3800, 0xc000}; // 1, 0.5, -2
    EXPECT_EQ(vs_dataset_add_f16(c, tw, one_half, &more, 1), VS_OK);
    int64_t id;
    float dist;
    const float at[3] = {1.0f, 0.5f, -2.0f};
    ASSERT_EQ(vs_knn(c, tw, at, 1, 1, VS_METRIC_L2, nullptr, &id, &dist, nullptr), VS_OK);
    EXPECT_EQ(id, more);
    EXPECT_EQ(dist, 0.0f);
}

TEST_P(EngineHalfApi, RowsTakeHalfTheDeviceBytes)
{
    if (GetParam() != "cuda")
        GTEST_SKIP() << "the CPU backend reports no device memory";
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    vs_context *c = ctx.get();
    const size_t n = 20000, d = 128;
    vt::Data D = vt::make_data(n, d, 5);
    auto in_use = [&] {
        vs_context_info info;
        EXPECT_EQ(vs_context_get_info(c, &info), VS_OK);
        return info.memory_in_use;
    };
    const size_t before = in_use();
    size_t half_bytes, f32_bytes;
    {
        vs_dataset *ds = nullptr;
        ASSERT_EQ(vs_dataset_create(c, d, VS_DTYPE_F16, &ds), VS_OK);
        vt::DatasetPtr g(ds, vt::DatasetDeleter{c});
        ASSERT_EQ(vs_dataset_add(c, ds, D.x.data(), D.ids.data(), n), VS_OK);
        half_bytes = in_use() - before;
    }
    {
        vs_dataset *ds = nullptr;
        ASSERT_EQ(vs_dataset_create(c, d, VS_DTYPE_F32, &ds), VS_OK);
        vt::DatasetPtr g(ds, vt::DatasetDeleter{c});
        ASSERT_EQ(vs_dataset_add(c, ds, D.x.data(), D.ids.data(), n), VS_OK);
        f32_bytes = in_use() - before;
    }
    // rows 256 against 512 bytes, ids and norms 16 bytes each: 0.52
    EXPECT_LT(static_cast<double>(half_bytes), 0.55 * static_cast<double>(f32_bytes))
        << half_bytes << " bytes against " << f32_bytes;
    EXPECT_GE(half_bytes, n * d * 2);
}

INSTANTIATE_TEST_SUITE_P(All, EngineHalfApi,
                         ::testing::Values(std::string("cpu"), std::string("cuda")));

} // namespace
