// The engine's fault points (vs_context_inject_fault, a test aid): an injected out-of-memory or
// device error fails the calls that reach the backend with that status and an "injected fault"
// message, for as many calls as asked, and the context then answers as before; a hang blocks
// without polling the cancel callback and fails; a slow call polls it and runs.  On the CPU
// backend (CI) and, where a GPU exists, on CUDA: the fault points sit in the front end.
#include "engine_testing.h"

#include <atomic>

namespace {

class EngineFault : public ::testing::TestWithParam<std::string>
{
};

std::atomic<int> polls{0};
std::atomic<int> stop_after{-1}; // the cancel callback says stop from this poll on (-1: never)

int counting_cancel(void *)
{
    int n = ++polls;
    return stop_after >= 0 && n > stop_after ? 1 : 0;
}

vt::ContextPtr make_cancellable(const std::string &backend, std::string *why)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = backend == "cuda" ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
    o.cuda_library = vt::cuda_library();
    o.cancel = counting_cancel;
    vs_context *ctx = nullptr;
    char err[512] = {0};
    if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
    {
        *why = err;
        return nullptr;
    }
    return vt::ContextPtr(ctx);
}

bool injected(vs_context *ctx)
{
    return std::string(vs_last_error(ctx)).find("injected fault") != std::string::npos;
}

TEST_P(EngineFault, FailsTheCallsAskedThenAnswersAsBefore)
{
    std::string why;
    vt::ContextPtr ctx = make_cancellable(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " backend unavailable: " << why;
    vs_context *c = ctx.get();
    stop_after = -1;
    vt::Data D = vt::make_data(500, 16, 7);
    vt::DatasetPtr ds = vt::upload(c, D);
    std::vector<float> q = vt::make_queries(D, 8, 11);
    const size_t k = 10;
    std::vector<int64_t> want_ids(8 * k), ids(8 * k);
    std::vector<float> want_d(8 * k), dist(8 * k);
    ASSERT_EQ(vs_knn(c, ds.get(), q.data(), 8, k, VS_METRIC_L2, nullptr, want_ids.data(),
                     want_d.data(), nullptr),
              VS_OK)
        << vs_last_error(c);

    // two calls run out of memory, the third is answered exactly as before
    ASSERT_EQ(vs_context_inject_fault(c, VS_FAULT_OUT_OF_MEMORY, 2, 0), VS_OK);
    for (int i = 0; i < 2; i++)
    {
        EXPECT_EQ(vs_knn(c, ds.get(), q.data(), 8, k, VS_METRIC_L2, nullptr, ids.data(),
                         dist.data(), nullptr),
                  VS_OUT_OF_MEMORY);
        EXPECT_TRUE(injected(c)) << vs_last_error(c);
    }
    ASSERT_EQ(vs_knn(c, ds.get(), q.data(), 8, k, VS_METRIC_L2, nullptr, ids.data(), dist.data(),
                     nullptr),
              VS_OK)
        << vs_last_error(c);
    EXPECT_EQ(ids, want_ids);
    EXPECT_EQ(dist, want_d);

    // a device error on every call (copies, searches, range, k-means) until cleared
    ASSERT_EQ(vs_context_inject_fault(c, VS_FAULT_DEVICE_ERROR, -1, 0), VS_OK);
    for (int i = 0; i < 3; i++)
        EXPECT_EQ(vs_knn(c, ds.get(), q.data(), 8, k, VS_METRIC_L2, nullptr, ids.data(),
                         dist.data(), nullptr),
                  VS_DEVICE_ERROR);
    EXPECT_TRUE(injected(c)) << vs_last_error(c);
    int64_t extra_id = 1000000;
    EXPECT_EQ(vs_dataset_add(c, ds.get(), D.x.data(), &extra_id, 1), VS_DEVICE_ERROR);
    EXPECT_EQ(vs_dataset_size(ds.get()), D.n);
    vs_range_result rr;
    EXPECT_EQ(vs_range(c, ds.get(), q.data(), 8, 1.0f, VS_METRIC_L2, nullptr, nullptr, nullptr,
                       &rr),
              VS_DEVICE_ERROR);
    vs_kmeans_params kp;
    vs_kmeans_params_init(&kp);
    kp.k = 4;
    std::vector<float> centroids(4 * D.d);
    EXPECT_EQ(vs_kmeans(c, D.x.data(), D.n, D.d, &kp, centroids.data(), nullptr),
              VS_DEVICE_ERROR);
    vs_ivfpq_params pp{D.d, 4, 4, 4, VS_METRIC_L2};
    std::vector<float> cb(16 * D.d);
    EXPECT_EQ(vs_ivfpq_train(c, &pp, nullptr, D.x.data(), D.n, centroids.data(), cb.data()),
              VS_DEVICE_ERROR);
    // argument errors come first: a bad call is not a device error
    EXPECT_EQ(vs_knn(c, ds.get(), nullptr, 8, k, VS_METRIC_L2, nullptr, ids.data(), dist.data(),
                     nullptr),
              VS_INVALID_ARGUMENT);

    ASSERT_EQ(vs_context_inject_fault(c, VS_FAULT_NONE, -1, 0), VS_OK);
    ASSERT_EQ(vs_knn(c, ds.get(), q.data(), 8, k, VS_METRIC_L2, nullptr, ids.data(), dist.data(),
                     nullptr),
              VS_OK)
        << vs_last_error(c);
    EXPECT_EQ(ids, want_ids);
    EXPECT_EQ(dist, want_d);
}

TEST_P(EngineFault, HangIgnoresCancelSlowHonoursIt)
{
    std::string why;
    vt::ContextPtr ctx = make_cancellable(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " backend unavailable: " << why;
    vs_context *c = ctx.get();
    vt::Data D = vt::make_data(300, 8, 3);
    vt::DatasetPtr ds = vt::upload(c, D);
    std::vector<float> q = vt::make_queries(D, 4, 5);
    std::vector<int64_t> want_ids(4 * 5), ids(4 * 5);
    std::vector<float> want_d(4 * 5), dist(4 * 5);
    stop_after = -1;
    ASSERT_EQ(vs_knn(c, ds.get(), q.data(), 4, 5, VS_METRIC_IP, nullptr, want_ids.data(),
                     want_d.data(), nullptr),
              VS_OK);

    // a hang: no poll of the cancel callback, even one that says stop, then a device error
    stop_after = 0;
    polls = 0;
    ASSERT_EQ(vs_context_inject_fault(c, VS_FAULT_HANG, 1, 20), VS_OK);
    EXPECT_EQ(vs_knn(c, ds.get(), q.data(), 4, 5, VS_METRIC_IP, nullptr, ids.data(), dist.data(),
                     nullptr),
              VS_DEVICE_ERROR);
    EXPECT_NE(std::string(vs_last_error(c)).find("hung for 20 ms"), std::string::npos)
        << vs_last_error(c);
    EXPECT_EQ(polls.load(), 0);

    // a slow call (as long as ten minutes) stops at the poll that asks it to
    stop_after = 3;
    polls = 0;
    ASSERT_EQ(vs_context_inject_fault(c, VS_FAULT_SLOW, 1, 600000), VS_OK);
    EXPECT_EQ(vs_knn(c, ds.get(), q.data(), 4, 5, VS_METRIC_IP, nullptr, ids.data(), dist.data(),
                     nullptr),
              VS_CANCELLED);
    EXPECT_EQ(polls.load(), 4);

    // a short slow call that is not cancelled runs and answers
    stop_after = -1;
    polls = 0;
    ASSERT_EQ(vs_context_inject_fault(c, VS_FAULT_SLOW, 1, 5), VS_OK);
    ASSERT_EQ(vs_knn(c, ds.get(), q.data(), 4, 5, VS_METRIC_IP, nullptr, ids.data(), dist.data(),
                     nullptr),
              VS_OK)
        << vs_last_error(c);
    EXPECT_GT(polls.load(), 0);
    EXPECT_EQ(ids, want_ids);
    EXPECT_EQ(dist, want_d);
}

TEST_P(EngineFault, RejectsBadInjections)
{
    std::string why;
    vt::ContextPtr ctx = vt::make_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " backend unavailable: " << why;
    vs_context *c = ctx.get();
    EXPECT_EQ(vs_context_inject_fault(nullptr, VS_FAULT_DEVICE_ERROR, 1, 0), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_context_inject_fault(c, static_cast<vs_fault>(9), 1, 0), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_context_inject_fault(c, VS_FAULT_DEVICE_ERROR, 0, 0), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_context_inject_fault(c, VS_FAULT_DEVICE_ERROR, -2, 0), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_context_inject_fault(c, VS_FAULT_HANG, 1, 600001), VS_INVALID_ARGUMENT);
    // none of them took: calls go through
    vt::Data D = vt::make_data(50, 4, 1);
    vt::DatasetPtr ds = vt::upload(c, D);
    EXPECT_EQ(vs_dataset_size(ds.get()), D.n);
}

INSTANTIATE_TEST_SUITE_P(All, EngineFault,
                         ::testing::Values(std::string("cpu"), std::string("cuda")),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

} // namespace
