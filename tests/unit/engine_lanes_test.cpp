// Lanes: several threads calling one context at once (vs_context_options.lanes) get exactly the
// answers of one thread calling alone, on every path a small or large batch takes, while other
// threads change another dataset and fail calls of their own (each thread keeps its own last
// error).  CPU backend always, CUDA where a device exists; each also over two devices, replicated
// (the CPU twin: two contexts; CUDA: two contexts on device 0, or devices 0 and 1 with
// VSEARCH_TEST_DEVICES=2), where small calls spread over the devices.
#include "engine_testing.h"

#include <atomic>
#include <thread>

namespace {

using Param = std::string;

// backend: "cpu" or "cuda", "2" appended for two devices.
vt::ContextPtr make_lanes_context(const std::string &backend, int lanes, std::string *why)
{
    const bool two = backend.back() == '2';
    const char *devs_env = std::getenv("VSEARCH_TEST_DEVICES");
    int devices[2] = {0, backend == "cpu2" || (devs_env && devs_env[0] == '2') ? 1 : 0};
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = backend.rfind("cuda", 0) == 0 ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
    o.cuda_library = vt::cuda_library();
    o.lanes = lanes;
    if (two)
    {
        o.devices = devices;
        o.ndevices = 2;
        o.placement = VS_PLACEMENT_REPLICATED;
    }
    vs_context *ctx = nullptr;
    char err[512] = {0};
    if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
    {
        *why = err;
        return nullptr;
    }
    return vt::ContextPtr(ctx);
}

class EngineLanes : public ::testing::TestWithParam<Param>
{
};

struct Call
{
    size_t nq, k; // k = 0: a range call
    size_t q0;    // first query
};

TEST_P(EngineLanes, ConcurrentCallsAnswerAsOneThreadDoes)
{
    std::string why;
    vt::ContextPtr ctx = make_lanes_context(GetParam(), 3, &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " backend unavailable: " << why;
    ASSERT_EQ(vs_context_lanes(ctx.get()), 3);
    vs_context *c = ctx.get();

    // Sizes that take the direct rows kernels (<= 32 queries), the sampled filter (n >= 4096) and
    // the GEMM path (40 and 300 queries) on the CUDA backend.
    const vt::Data D = vt::make_data(9001, 64, 71, 0.05);
    const std::vector<float> Q = vt::make_queries(D, 400, 72);
    vt::DatasetPtr ds = vt::upload(c, D);
    std::vector<Call> calls;
    for (size_t nq : {1, 3, 12, 29, 40, 300})
        for (size_t k : {1, 10, 100, 0})
            calls.push_back({nq, k, (nq * 7 + k) % 100});

    // Each call's answer from one thread first.
    struct Answer
    {
        std::vector<int64_t> ids, counts;
        std::vector<float> d;
    };
    const float radius = 60.0f; // a few dozen matches per query at d = 64
    auto run = [&](const Call &call, Answer *a) -> vs_status {
        const float *q = Q.data() + call.q0 * D.d;
        if (call.k == 0)
        {
            vs_range_result r{};
            vs_status st = vs_range(c, ds.get(), q, call.nq, radius, VS_METRIC_L2SQ, nullptr,
                                    nullptr, nullptr, &r);
            if (st != VS_OK)
                return st;
            a->counts.assign(r.offsets, r.offsets + call.nq + 1);
            a->ids.assign(r.ids, r.ids + r.total);
            a->d.assign(r.distances, r.distances + r.total);
            vs_range_result_free(&r);
            return VS_OK;
        }
        a->ids.assign(call.nq * call.k, -2);
        a->d.assign(call.nq * call.k, -1.0f);
        a->counts.assign(call.nq, -1);
        return vs_knn(c, ds.get(), q, call.nq, call.k, VS_METRIC_L2SQ, nullptr, a->ids.data(),
                      a->d.data(), a->counts.data());
    };
    std::vector<Answer> expected(calls.size());
    for (size_t i = 0; i < calls.size(); i++)
        ASSERT_EQ(run(calls[i], &expected[i]), VS_OK) << vs_last_error(c);

    std::atomic<int> mismatches{0}, failures{0}, wrong_errors{0};
    std::atomic<bool> searching{true};
    auto searcher = [&](int t) {
        for (int round = 0; round < 6; round++)
            for (size_t j = 0; j < calls.size(); j++)
            {
                const size_t i = (j * 5 + t * 7 + round) % calls.size();
                Answer a;
                if (run(calls[i], &a) != VS_OK)
                {
                    failures++;
                    continue;
                }
                if (std::string(vs_last_error(c)) != "")
                    wrong_errors++;
                if (a.ids != expected[i].ids || a.counts != expected[i].counts ||
                    std::memcmp(a.d.data(), expected[i].d.data(), a.d.size() * sizeof(float)) != 0)
                    mismatches++;
            }
    };
    // Another dataset changes meanwhile, and this thread's failed calls keep their own message.
    auto changer = [&] {
        const vt::Data E = vt::make_data(3001, 64, 73);
        while (searching)
        {
            vt::DatasetPtr other = vt::upload(c, E);
            size_t removed = 0;
            if (vs_dataset_remove(c, other.get(), E.ids.data(), 100, &removed) != VS_OK ||
                removed != 100)
                failures++;
            int64_t ids[2];
            float d[2];
            if (vs_knn(c, other.get(), Q.data(), 1, 2, VS_METRIC_L2SQ, nullptr, ids, d,
                       nullptr) != VS_OK)
                failures++;
            vs_range_result r{};
            if (vs_range(c, other.get(), Q.data(), 1, NAN, VS_METRIC_L2SQ, nullptr, nullptr,
                         nullptr, &r) != VS_INVALID_ARGUMENT ||
                std::string(vs_last_error(c)).find("NaN") == std::string::npos)
                wrong_errors++;
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++)
        threads.emplace_back(searcher, t);
    std::thread change(changer);
    for (auto &t : threads)
        t.join();
    searching = false;
    change.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(mismatches.load(), 0);
    EXPECT_EQ(wrong_errors.load(), 0);
}

TEST_P(EngineLanes, LanesOutOfRangeAreRefused)
{
    std::string why;
    EXPECT_FALSE(make_lanes_context(GetParam(), 17, &why));
    EXPECT_NE(why.find("lanes"), std::string::npos) << why;
    EXPECT_FALSE(make_lanes_context(GetParam(), -1, &why));
    vt::ContextPtr one = make_lanes_context(GetParam(), 0, &why);
    if (!one)
        GTEST_SKIP() << GetParam() << " backend unavailable: " << why;
    EXPECT_EQ(vs_context_lanes(one.get()), 1);
}

INSTANTIATE_TEST_SUITE_P(All, EngineLanes,
                         ::testing::Values(std::string("cpu"), std::string("cuda"),
                                           std::string("cpu2"), std::string("cuda2")),
                         [](const ::testing::TestParamInfo<Param> &info) { return info.param; });

} // namespace
