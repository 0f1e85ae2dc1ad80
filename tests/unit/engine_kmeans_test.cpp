// k-means on both backends: recovers well-separated clusters, deterministic for a seed, repairs
// empty clusters, honours the sample size, spherical variants give unit centroids.
#include "engine_testing.h"

namespace {

class EngineKmeans : public ::testing::TestWithParam<std::string>
{
};

// n points around k centers spread far apart; returns the centers.
std::vector<float> blobs(size_t n, size_t d, size_t k, uint64_t seed, std::vector<float> &x)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> centers(k * d);
    for (auto &v : centers)
        v = 20.0f * g(rng);
    x.resize(n * d);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            x[i * d + j] = centers[(i % k) * d + j] + 0.5f * g(rng);
    return centers;
}

double nearest_sq(const float *c, const std::vector<float> &centers, size_t k, size_t d)
{
    double best = INFINITY;
    for (size_t i = 0; i < k; i++)
        best = std::min(best, vt::ref_distance(VS_METRIC_L2SQ, c, &centers[i * d], d));
    return best;
}

TEST_P(EngineKmeans, FindsSeparatedClustersDeterministically)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t n = 4000, d = 16, k = 8;
    std::vector<float> x;
    std::vector<float> centers = blobs(n, d, k, 1, x);
    for (vs_kmeans_init init : {VS_KMEANS_INIT_RANDOM, VS_KMEANS_INIT_PLUSPLUS})
    {
        vs_kmeans_params p;
        vs_kmeans_params_init(&p);
        p.k = k;
        p.iterations = 25;
        p.init = init;
        p.seed = 42;
        std::vector<float> c1(k * d), c2(k * d);
        vs_kmeans_info i1, i2;
        ASSERT_EQ(vs_kmeans(ctx.get(), x.data(), n, d, &p, c1.data(), &i1), VS_OK)
            << vs_last_error(ctx.get());
        ASSERT_EQ(vs_kmeans(ctx.get(), x.data(), n, d, &p, c2.data(), &i2), VS_OK);
        EXPECT_EQ(c1, c2) << "not deterministic";
        EXPECT_EQ(i1.objective, i2.objective);
        EXPECT_EQ(i1.iterations, 25);
        // With k-means++ every true center is found; random init may merge two blobs, so only
        // check the objective is near the optimum (n * d * 0.25) there.
        double opt = n * d * 0.25;
        if (init == VS_KMEANS_INIT_PLUSPLUS)
        {
            for (size_t i = 0; i < k; i++)
                EXPECT_LT(nearest_sq(&c1[i * d], centers, k, d), 1.0) << "centroid " << i;
            EXPECT_LT(i1.objective, 1.2 * opt);
        }
        EXPECT_GT(i1.objective, 0.8 * opt);
    }
}

TEST_P(EngineKmeans, RepairsEmptyClustersAndSamples)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    // 5 distinct points repeated: with k = 8 some clusters start or become empty.
    const size_t d = 6, n = 1000;
    std::vector<float> x(n * d);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            x[i * d + j] = static_cast<float>((i % 5) * 10 + j);
    vs_kmeans_params p;
    vs_kmeans_params_init(&p);
    p.k = 8;
    p.iterations = 5;
    p.seed = 3;
    std::vector<float> c(p.k * d);
    vs_kmeans_info info;
    ASSERT_EQ(vs_kmeans(ctx.get(), x.data(), n, d, &p, c.data(), &info), VS_OK)
        << vs_last_error(ctx.get());
    EXPECT_GT(info.empty_repaired, 0u);
    for (float v : c)
        EXPECT_TRUE(std::isfinite(v));
    // Sample of 200 points, k = 50, L2 and spherical metrics.
    vt::Data D = vt::make_data(3000, 12, 8);
    for (vs_metric m : {VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE})
    {
        p.k = 50;
        p.sample_size = 200;
        p.iterations = 10;
        p.metric = m;
        std::vector<float> cc(p.k * 12);
        ASSERT_EQ(vs_kmeans(ctx.get(), D.x.data(), D.n, 12, &p, cc.data(), &info), VS_OK)
            << vs_last_error(ctx.get());
        EXPECT_EQ(info.iterations, 10);
        if (m != VS_METRIC_L2)
            for (size_t i = 0; i < p.k; i++)
                EXPECT_NEAR(vt::ref_distance(VS_METRIC_L2, &cc[i * 12], std::vector<float>(12, 0).data(), 12),
                            1.0, 1e-5);
    }
    p.sample_size = 20; // fewer training points than centroids
    EXPECT_EQ(vs_kmeans(ctx.get(), D.x.data(), D.n, 12, &p, c.data(), &info), VS_INVALID_ARGUMENT);
}

INSTANTIATE_TEST_SUITE_P(All, EngineKmeans,
                         ::testing::Values(std::string("cpu"), std::string("cuda")),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

// Both backends reach about the same objective on the same data and seed.
TEST(EngineKmeansCross, CpuAndCudaObjectivesAgree)
{
    VT_CONTEXT_OR_SKIP(gpu, "cuda");
    VT_CONTEXT_OR_SKIP(cpu, "cpu");
    vt::Data D = vt::make_data(5000, 32, 12);
    vs_kmeans_params p;
    vs_kmeans_params_init(&p);
    p.k = 64;
    p.iterations = 10;
    std::vector<float> a(p.k * 32), b(p.k * 32);
    vs_kmeans_info ia, ib;
    ASSERT_EQ(vs_kmeans(gpu.get(), D.x.data(), D.n, 32, &p, a.data(), &ia), VS_OK)
        << vs_last_error(gpu.get());
    ASSERT_EQ(vs_kmeans(cpu.get(), D.x.data(), D.n, 32, &p, b.data(), &ib), VS_OK);
    EXPECT_NEAR(ia.objective, ib.objective, 0.02 * ib.objective);
}

} // namespace
