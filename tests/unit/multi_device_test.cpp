// Contexts over several devices (engine/multi_backend.h) against one device's answers: datasets
// replicated and sharded, kNN (small and split calls, subsets, k beyond the size), range, removes,
// IVF-PQ objects, per-device information and the loss of a device.  On the CPU backend (several
// CPU contexts: CI) and, where a GPU exists, on CUDA with two contexts on device 0 (or devices 0
// and 1 when VSEARCH_TEST_DEVICES=2).
#include "engine_testing.h"

namespace {

struct Case
{
    std::string backend;
    int ndev;
    vs_placement placement;
};

std::string case_name(const testing::TestParamInfo<Case> &i)
{
    static const char *p[] = {"Auto", "Replicated", "Sharded"};
    return i.param.backend + std::to_string(i.param.ndev) + p[i.param.placement];
}

vt::ContextPtr make_multi(const std::string &backend, int ndev, vs_placement placement,
                          size_t shard_min_bytes, std::string *why)
{
    std::vector<int> devices(static_cast<size_t>(ndev), 0);
    const char *two = std::getenv("VSEARCH_TEST_DEVICES");
    for (int i = 0; i < ndev; i++)
        devices[static_cast<size_t>(i)] = backend == "cpu" || (two && two[0] == '2') ? i : 0;
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = backend == "cuda" ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
    o.cuda_library = vt::cuda_library();
    o.devices = devices.data();
    o.ndevices = ndev;
    o.placement = placement;
    o.shard_min_bytes = shard_min_bytes;
    o.num_threads = 2;
    vs_context *ctx = nullptr;
    char err[512] = {0};
    if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
    {
        *why = err;
        return nullptr;
    }
    return vt::ContextPtr(ctx);
}

class MultiDevice : public testing::TestWithParam<Case>
{
protected:
    void SetUp() override
    {
        const Case &c = GetParam();
        std::string why;
        one_ = vt::make_context(c.backend, &why);
        if (!one_)
            GTEST_SKIP() << c.backend << " backend unavailable: " << why;
        many_ = make_multi(c.backend, c.ndev, c.placement, 1, &why);
        ASSERT_TRUE(many_) << why;
    }
    vt::ContextPtr one_, many_;
};

// kNN answers of both contexts, bit for bit (ids, distances, counts).
void expect_same_knn(vs_context *a, const vs_dataset *da, vs_context *b, const vs_dataset *db,
                     const std::vector<float> &q, size_t nq, size_t k, vs_metric m,
                     const vs_subsets *subsets = nullptr)
{
    std::vector<int64_t> ia(nq * k), ib(nq * k), ca(nq), cb(nq);
    std::vector<float> xa(nq * k), xb(nq * k);
    ASSERT_EQ(vs_knn(a, da, q.data(), nq, k, m, subsets, ia.data(), xa.data(), ca.data()), VS_OK)
        << vs_last_error(a);
    ASSERT_EQ(vs_knn(b, db, q.data(), nq, k, m, subsets, ib.data(), xb.data(), cb.data()), VS_OK)
        << vs_last_error(b);
    EXPECT_EQ(ca, cb);
    EXPECT_EQ(ia, ib);
    EXPECT_EQ(0, std::memcmp(xa.data(), xb.data(), xa.size() * sizeof(float)));
}

void expect_same_range(vs_context *a, const vs_dataset *da, vs_context *b, const vs_dataset *db,
                       const std::vector<float> &q, size_t nq, float r, vs_metric m)
{
    vs_range_result ra, rb;
    ASSERT_EQ(vs_range(a, da, q.data(), nq, r, m, nullptr, nullptr, nullptr, &ra), VS_OK);
    ASSERT_EQ(vs_range(b, db, q.data(), nq, r, m, nullptr, nullptr, nullptr, &rb), VS_OK)
        << vs_last_error(b);
    ASSERT_EQ(ra.total, rb.total);
    EXPECT_TRUE(ra.total > 0);
    EXPECT_TRUE(std::equal(ra.offsets, ra.offsets + nq + 1, rb.offsets));
    EXPECT_TRUE(std::equal(ra.ids, ra.ids + ra.total, rb.ids));
    EXPECT_EQ(0, std::memcmp(ra.distances, rb.distances, ra.total * sizeof(float)));
    vs_range_result_free(&ra);
    vs_range_result_free(&rb);
}

TEST_P(MultiDevice, SameAnswersAsOneDevice)
{
    const Case &c = GetParam();
    vt::Data D = vt::make_data(3000, 24, 7, 0.05);
    auto q = vt::make_queries(D, 300, 8);
    vt::DatasetPtr a = vt::upload(one_.get(), D);
    vt::DatasetPtr b = vt::upload(many_.get(), D);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(vs_dataset_size(b.get()), D.n);
    // AUTO with shard_min_bytes = 1 shards
    EXPECT_EQ(vs_dataset_placement(many_.get(), b.get()),
              c.placement == VS_PLACEMENT_REPLICATED ? VS_PLACEMENT_REPLICATED
                                                     : VS_PLACEMENT_SHARDED);
    for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE, VS_METRIC_L1})
    {
        SCOPED_TRACE(vt::metric_name(m));
        expect_same_knn(one_.get(), a.get(), many_.get(), b.get(), q, 300, 10, m); // split
        expect_same_knn(one_.get(), a.get(), many_.get(), b.get(), q, 7, 10, m);   // one device
        expect_same_knn(one_.get(), a.get(), many_.get(), b.get(), q, 3, 3500, m); // k > n
    }
    // candidate subsets (ids of every shard and unknown ones)
    std::vector<int64_t> off{0}, ids;
    for (size_t i = 0; i < 300; i++)
    {
        for (size_t j = 0; j < 40; j++)
            ids.push_back(j % 7 == 3 ? 1000000 + static_cast<int64_t>(j)
                                     : D.ids[(i * 37 + j * 11) % D.n]);
        off.push_back(static_cast<int64_t>(ids.size()));
    }
    vs_subsets s{off.data(), ids.data()};
    expect_same_knn(one_.get(), a.get(), many_.get(), b.get(), q, 300, 10, VS_METRIC_L2SQ, &s);
    expect_same_knn(one_.get(), a.get(), many_.get(), b.get(), q, 5, 10, VS_METRIC_L2SQ, &s);

    expect_same_range(one_.get(), a.get(), many_.get(), b.get(), q, 300, 30.0f, VS_METRIC_L2SQ);
    expect_same_range(one_.get(), a.get(), many_.get(), b.get(), q, 9, 30.0f, VS_METRIC_L2SQ);

    // a subset of every third row: the same rows, wherever they live
    std::vector<int64_t> third;
    for (size_t i = 0; i < D.n; i += 3)
        third.push_back(D.ids[i]);
    vs_dataset *sa = nullptr, *sb = nullptr;
    ASSERT_EQ(vs_dataset_subset(one_.get(), a.get(), third.data(), third.size(), &sa), VS_OK);
    vt::DatasetPtr suba(sa, vt::DatasetDeleter{one_.get()});
    ASSERT_EQ(vs_dataset_subset(many_.get(), b.get(), third.data(), third.size(), &sb), VS_OK)
        << vs_last_error(many_.get());
    vt::DatasetPtr subb(sb, vt::DatasetDeleter{many_.get()});
    EXPECT_EQ(vs_dataset_size(subb.get()), third.size());
    EXPECT_EQ(vs_dataset_placement(many_.get(), subb.get()),
              vs_dataset_placement(many_.get(), b.get()));
    expect_same_knn(one_.get(), suba.get(), many_.get(), subb.get(), q, 300, 10, VS_METRIC_L2SQ);
    expect_same_knn(one_.get(), suba.get(), many_.get(), subb.get(), q, 3, 1100, VS_METRIC_IP);
    third.push_back(123456789);
    EXPECT_EQ(vs_dataset_subset(many_.get(), b.get(), third.data(), third.size(), &sb),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(sb, nullptr);

    // removes: the same rows go, wherever they live
    std::vector<int64_t> gone(D.ids.begin(), D.ids.begin() + 500);
    gone.push_back(123456789);
    size_t ra = 0, rb = 0;
    ASSERT_EQ(vs_dataset_remove(one_.get(), a.get(), gone.data(), gone.size(), &ra), VS_OK);
    ASSERT_EQ(vs_dataset_remove(many_.get(), b.get(), gone.data(), gone.size(), &rb), VS_OK);
    EXPECT_EQ(ra, 500u);
    EXPECT_EQ(rb, 500u);
    EXPECT_EQ(vs_dataset_size(b.get()), D.n - 500);
    expect_same_knn(one_.get(), a.get(), many_.get(), b.get(), q, 300, 10, VS_METRIC_L2SQ);
}

TEST_P(MultiDevice, DeviceInformation)
{
    const Case &c = GetParam();
    EXPECT_EQ(vs_context_device_count(many_.get()), c.ndev);
    EXPECT_EQ(vs_context_live_devices(many_.get()), c.ndev);
    vt::Data D = vt::make_data(500, 8, 3);
    vt::DatasetPtr b = vt::upload(many_.get(), D);
    for (int i = 0; i < c.ndev; i++)
    {
        vs_device_info di;
        ASSERT_EQ(vs_context_get_device_info(many_.get(), i, &di), VS_OK);
        EXPECT_EQ(di.alive, 1);
        EXPECT_EQ(di.datasets, 1u);
        EXPECT_GT(di.calls, 0u);
        EXPECT_STREQ(di.error, "");
    }
    vs_device_info di;
    EXPECT_EQ(vs_context_get_device_info(many_.get(), c.ndev, &di), VS_INVALID_ARGUMENT);
    vs_context_info info;
    ASSERT_EQ(vs_context_get_info(many_.get(), &info), VS_OK);
    EXPECT_NE(std::string(info.device_name).find(std::to_string(c.ndev) + " x "),
              std::string::npos);
    b.reset();
    ASSERT_EQ(vs_context_get_device_info(many_.get(), 0, &di), VS_OK);
    EXPECT_EQ(di.datasets, 0u);
}

TEST_P(MultiDevice, LosingADeviceLeavesTheOthersServing)
{
    const Case &c = GetParam();
    vt::Data D = vt::make_data(800, 8, 4);
    auto q = vt::make_queries(D, 4, 5);
    vt::DatasetPtr b = vt::upload(many_.get(), D);
    ASSERT_EQ(vs_context_fail_device(many_.get(), 1), VS_OK);
    EXPECT_EQ(vs_context_live_devices(many_.get()), c.ndev - 1);
    std::vector<int64_t> ids(40);
    std::vector<float> d(40);
    EXPECT_EQ(vs_knn(many_.get(), b.get(), q.data(), 4, 10, VS_METRIC_L2SQ, nullptr, ids.data(),
                     d.data(), nullptr),
              VS_DEVICE_ERROR);
    EXPECT_NE(std::string(vs_last_error(many_.get())).find("was lost"), std::string::npos);
    vs_device_info di;
    ASSERT_EQ(vs_context_get_device_info(many_.get(), 1, &di), VS_OK);
    EXPECT_EQ(di.alive, 0);
    EXPECT_NE(std::string(di.error).find("vs_context_fail_device"), std::string::npos);
    // loaded again, the dataset lives on the devices left and answers as one device does
    b.reset();
    vt::DatasetPtr again = vt::upload(many_.get(), D);
    vt::DatasetPtr a = vt::upload(one_.get(), D);
    ASSERT_TRUE(again && a);
    expect_same_knn(one_.get(), a.get(), many_.get(), again.get(), q, 4, 10, VS_METRIC_L2SQ);
    ASSERT_EQ(vs_context_get_device_info(many_.get(), 1, &di), VS_OK);
    EXPECT_EQ(di.datasets, 0u);
}

TEST_P(MultiDevice, IvfpqObjectsLiveOnOneDeviceEach)
{
    const Case &c = GetParam();
    const size_t n = 2000, d = 16;
    vt::Data D = vt::make_data(n, d, 9);
    auto q = vt::make_queries(D, 20, 10);
    vs_ivfpq_params p{};
    p.dim = d;
    p.nlist = 16;
    p.m = 4;
    p.nbits = 8;
    p.metric = VS_METRIC_L2SQ;
    std::vector<float> cent(p.nlist * d), cb(p.m * 256 * (d / p.m));
    ASSERT_EQ(vs_ivfpq_train(one_.get(), &p, nullptr, D.x.data(), n, cent.data(), cb.data()),
              VS_OK);
    std::vector<std::vector<int64_t>> ids(c.ndev + 1);
    std::vector<std::vector<float>> dist(c.ndev + 1);
    std::vector<vs_ivfpq *> objs;
    for (int o = 0; o <= c.ndev; o++)
    {
        vs_context *ctx = o == 0 ? one_.get() : many_.get();
        vs_ivfpq *ivf = nullptr;
        ASSERT_EQ(vs_ivfpq_create(ctx, &p, cent.data(), cb.data(), &ivf), VS_OK);
        size_t cs = vs_ivfpq_code_size(&p);
        std::vector<int32_t> lists(n);
        std::vector<uint8_t> codes(n * cs);
        ASSERT_EQ(vs_ivfpq_encode(ctx, ivf, D.x.data(), n, lists.data(), codes.data()), VS_OK);
        for (size_t i = 0; i < n; i++)
            ASSERT_EQ(vs_ivfpq_add(ctx, ivf, static_cast<size_t>(lists[i]), &D.ids[i],
                                   &codes[i * cs], 1),
                      VS_OK);
        EXPECT_EQ(vs_ivfpq_size(ivf), n);
        ids[o].resize(20 * 10);
        dist[o].resize(20 * 10);
        ASSERT_EQ(vs_ivfpq_search(ctx, ivf, q.data(), 20, 0, 4, 10, ids[o].data(),
                                  dist[o].data(), nullptr),
                  VS_OK);
        EXPECT_EQ(ids[o], ids[0]);
        if (o == 0)
            vs_ivfpq_destroy(ctx, ivf);
        else
            objs.push_back(ivf);
    }
    // one object per device: each new one went to the least used device
    for (int i = 0; i < c.ndev; i++)
    {
        vs_device_info di;
        ASSERT_EQ(vs_context_get_device_info(many_.get(), i, &di), VS_OK);
        EXPECT_EQ(di.ivfpq_objects, 1u) << "device " << i;
    }
    for (vs_ivfpq *ivf : objs)
        vs_ivfpq_destroy(many_.get(), ivf);
}

INSTANTIATE_TEST_SUITE_P(All, MultiDevice,
                         testing::Values(Case{"cpu", 2, VS_PLACEMENT_REPLICATED},
                                         Case{"cpu", 2, VS_PLACEMENT_SHARDED},
                                         Case{"cpu", 3, VS_PLACEMENT_AUTO},
                                         Case{"cuda", 2, VS_PLACEMENT_REPLICATED},
                                         Case{"cuda", 2, VS_PLACEMENT_SHARDED}),
                         case_name);

TEST(MultiDeviceOptions, BadOptionsAreRefused)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    vs_context *ctx = nullptr;
    char err[256];
    o.ndevices = 2; // devices NULL
    EXPECT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_INVALID_ARGUMENT);
    int devs[2] = {0, 1};
    o.devices = devs;
    o.placement = static_cast<vs_placement>(7);
    EXPECT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_INVALID_ARGUMENT);
    o.placement = VS_PLACEMENT_AUTO;
    o.ndevices = -1; // every visible CPU device: one, a plain context
    ASSERT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_OK);
    EXPECT_EQ(vs_context_device_count(ctx), 1);
    EXPECT_EQ(vs_context_fail_device(ctx, 0), VS_UNSUPPORTED);
    vs_context_destroy(ctx);
}

} // namespace
