// The engine's C API: argument checking, error codes and messages, dataset bookkeeping (ids kept
// in order across adds and removes, subsets), the range allocator callback, cancellation and
// backend selection.
#include "engine_testing.h"

#include "engine/backend.h" // VS_CUDA_BACKEND_SYMBOL

#include <dlfcn.h>

#include <atomic>

namespace {

class EngineApi : public ::testing::TestWithParam<std::string>
{
};

TEST(EngineApiGlobal, ContextCreation)
{
    vs_context *ctx = nullptr;
    char err[256];
    EXPECT_EQ(vs_context_create(nullptr, nullptr, err, sizeof err), VS_INVALID_ARGUMENT);
    // AUTO with a library that does not exist falls back to the CPU.
    vs_context_options o;
    vs_context_options_init(&o);
    o.cuda_library = "/nonexistent/vsearch_cuda.so";
    ASSERT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_OK);
    vs_context_info info;
    ASSERT_EQ(vs_context_get_info(ctx, &info), VS_OK);
    EXPECT_EQ(info.backend, VS_BACKEND_CPU);
    EXPECT_NE(std::string(info.device_name).find("cpu"), std::string::npos);
    vs_context_destroy(ctx);
    // CUDA explicitly, without the library: UNSUPPORTED with a message.
    o.backend = VS_BACKEND_CUDA;
    ctx = reinterpret_cast<vs_context *>(0x1);
    err[0] = 0;
    EXPECT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_UNSUPPORTED);
    EXPECT_EQ(ctx, nullptr);
    EXPECT_NE(std::string(err).find("CUDA"), std::string::npos) << err;
    o.backend = static_cast<vs_backend_kind>(42);
    EXPECT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_INVALID_ARGUMENT);
    EXPECT_STREQ(vs_status_name(VS_OUT_OF_MEMORY), "VS_OUT_OF_MEMORY");
}

// vsearch_cuda.so, where it was built and loads, exports the versioned symbol the engine looks up
// (backend.h, cuda/exports.map and the definition in cuda_backend.cu must agree; a mismatch would
// otherwise only show as skipped CUDA tests).  Needs no device.
TEST(EngineApiGlobal, CudaLibraryExportsTheBackendSymbol)
{
#ifndef VSEARCH_TEST_CUDA_LIBRARY
    if (!std::getenv("VSEARCH_CUDA_LIBRARY"))
        GTEST_SKIP() << "no CUDA library in this build";
#endif
    void *lib = dlopen(vt::cuda_library(), RTLD_NOW | RTLD_LOCAL); // never closed, as the engine
    if (!lib)
        GTEST_SKIP() << "cannot load the CUDA library: " << dlerror();
    EXPECT_NE(dlsym(lib, VS_CUDA_BACKEND_SYMBOL), nullptr)
        << vt::cuda_library() << " does not export " << VS_CUDA_BACKEND_SYMBOL;
}

TEST_P(EngineApi, ArgumentErrors)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    vs_context *c = ctx.get();
    vs_dataset *ds = nullptr;
    EXPECT_EQ(vs_dataset_create(c, 0, VS_DTYPE_F32, &ds), VS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(vs_last_error(c)), "");
    EXPECT_EQ(vs_dataset_create(c, 4, VS_DTYPE_BF16, &ds), VS_UNSUPPORTED);
    EXPECT_EQ(vs_dataset_create(c, 4, static_cast<vs_dtype>(9), &ds), VS_INVALID_ARGUMENT);
    ASSERT_EQ(vs_dataset_create(c, 4, VS_DTYPE_F32, &ds), VS_OK);
    EXPECT_STREQ(vs_last_error(c), "");
    vt::DatasetPtr guard(ds, vt::DatasetDeleter{c});
    float v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int64_t ids[3] = {5, 7, 5};
    EXPECT_EQ(vs_dataset_add(c, ds, v, ids, 3), VS_INVALID_ARGUMENT); // repeated in the call
    EXPECT_NE(std::string(vs_last_error(c)).find("duplicate"), std::string::npos);
    EXPECT_EQ(vs_dataset_size(ds), 0u);
    EXPECT_EQ(vs_dataset_add(c, ds, v, ids, 2), VS_OK);
    EXPECT_EQ(vs_dataset_add(c, ds, v, ids + 1, 1), VS_INVALID_ARGUMENT); // already present
    EXPECT_EQ(vs_dataset_size(ds), 2u);
    EXPECT_EQ(vs_dataset_add(c, ds, nullptr, ids, 1), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_dataset_dim(ds), 4u);

    int64_t oid[2];
    float od[2];
    EXPECT_EQ(vs_knn(c, ds, nullptr, 1, 2, VS_METRIC_L2, nullptr, oid, od, nullptr),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_knn(c, ds, v, 1, 2, static_cast<vs_metric>(7), nullptr, oid, od, nullptr),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_knn(c, ds, v, 1, 2, VS_METRIC_L2, nullptr, nullptr, od, nullptr),
              VS_INVALID_ARGUMENT);
    int64_t bad_offsets[2] = {1, 0};
    vs_subsets bad{bad_offsets, ids};
    EXPECT_EQ(vs_knn(c, ds, v, 1, 2, VS_METRIC_L2, &bad, oid, od, nullptr), VS_INVALID_ARGUMENT);
    int64_t cnt = -1;
    EXPECT_EQ(vs_knn(c, ds, v, 1, 0, VS_METRIC_L2, nullptr, nullptr, nullptr, &cnt), VS_OK);
    EXPECT_EQ(cnt, 0);
    vs_range_result res;
    EXPECT_EQ(vs_range(c, ds, v, 1, NAN, VS_METRIC_L2, nullptr, nullptr, nullptr, &res),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_range(c, ds, v, 1, 1.0f, VS_METRIC_L2, nullptr, nullptr, nullptr, nullptr),
              VS_INVALID_ARGUMENT);

    // A dataset of another context is refused.
    vt::ContextPtr other = vt::make_context("cpu");
    EXPECT_EQ(vs_knn(other.get(), ds, v, 1, 2, VS_METRIC_L2, nullptr, oid, od, nullptr),
              VS_INVALID_ARGUMENT);

    vs_kmeans_params kp;
    vs_kmeans_params_init(&kp);
    kp.k = 3;
    float cent[12];
    EXPECT_EQ(vs_kmeans(c, v, 2, 4, &kp, cent, nullptr), VS_INVALID_ARGUMENT); // n < k
    kp.k = 1;
    kp.metric = VS_METRIC_L1;
    EXPECT_EQ(vs_kmeans(c, v, 2, 4, &kp, cent, nullptr), VS_UNSUPPORTED);
}

// Ids stay in order whatever the order of adds; removed ids never come back; ties by id.
TEST_P(EngineApi, AddRemoveKeepsIdOrder)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    vs_context *c = ctx.get();
    const size_t d = 5;
    vs_dataset *raw = nullptr;
    ASSERT_EQ(vs_dataset_create(c, d, VS_DTYPE_F32, &raw), VS_OK);
    vt::DatasetPtr ds(raw, vt::DatasetDeleter{c});
    // 300 rows: 100 distinct vectors, each three times under ids far apart.
    vt::Data base = vt::make_data(100, d, 5);
    std::vector<float> x;
    std::vector<int64_t> ids;
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < 100; i++)
        {
            x.insert(x.end(), &base.x[i * d], &base.x[i * d] + d);
            ids.push_back(1000 * (2 - rep) + static_cast<int64_t>(i)); // later adds: smaller ids
        }
    for (int rep = 0; rep < 3; rep++)
        ASSERT_EQ(vs_dataset_add(c, raw, &x[rep * 100 * d], &ids[rep * 100], 100), VS_OK)
            << vs_last_error(c);
    ASSERT_EQ(vs_dataset_size(raw), 300u);
    // Query = vector 7: its three copies tie at distance 0; ids 7, 1007, 2007 in that order.
    int64_t oid[4];
    float od[4];
    int64_t cnt;
    ASSERT_EQ(vs_knn(c, raw, &base.x[7 * d], 1, 4, VS_METRIC_L2SQ, nullptr, oid, od, &cnt), VS_OK);
    EXPECT_EQ(cnt, 4);
    EXPECT_EQ(oid[0], 7);
    EXPECT_EQ(oid[1], 1007);
    EXPECT_EQ(oid[2], 2007);
    EXPECT_EQ(od[0], 0.0f);
    EXPECT_EQ(od[2], 0.0f);
    EXPECT_GT(od[3], 0.0f);
    // Remove 7 and 2007 (and an unknown id): 1007 is first, the rest shifts.
    int64_t gone[3] = {2007, 7, 123456};
    size_t removed = 0;
    ASSERT_EQ(vs_dataset_remove(c, raw, gone, 3, &removed), VS_OK);
    EXPECT_EQ(removed, 2u);
    EXPECT_EQ(vs_dataset_size(raw), 298u);
    ASSERT_EQ(vs_knn(c, raw, &base.x[7 * d], 1, 4, VS_METRIC_L2SQ, nullptr, oid, od, &cnt), VS_OK);
    EXPECT_EQ(oid[0], 1007);
    EXPECT_GT(od[1], 0.0f);
    for (int i = 0; i < 4; i++)
        EXPECT_TRUE(oid[i] != 7 && oid[i] != 2007);
    // Re-adding a removed id works; asking for more than exist pads.
    ASSERT_EQ(vs_dataset_add(c, raw, &base.x[7 * d], &gone[1], 1), VS_OK);
    std::vector<int64_t> all_ids(310);
    std::vector<float> all_d(310);
    ASSERT_EQ(vs_knn(c, raw, &base.x[7 * d], 1, 310, VS_METRIC_L2SQ, nullptr, all_ids.data(),
                     all_d.data(), &cnt),
              VS_OK);
    EXPECT_EQ(cnt, 299);
    EXPECT_EQ(all_ids[0], 7);
    EXPECT_EQ(all_ids[1], 1007);
    EXPECT_EQ(all_ids[299], -1);
    EXPECT_TRUE(std::isinf(all_d[309]));
    // Removing everything leaves an empty dataset that still answers.
    size_t n_removed = 0;
    std::vector<int64_t> every(ids);
    every.push_back(7);
    ASSERT_EQ(vs_dataset_remove(c, raw, every.data(), every.size(), &n_removed), VS_OK);
    EXPECT_EQ(n_removed, 299u);
    ASSERT_EQ(vs_knn(c, raw, &base.x[0], 1, 2, VS_METRIC_L2, nullptr, oid, od, &cnt), VS_OK);
    EXPECT_EQ(cnt, 0);
    EXPECT_EQ(oid[0], -1);
}

// knn answers of two datasets of one context, bit for bit (ids, distances, counts).
void expect_same_knn(vs_context *c, const vs_dataset *a, const vs_dataset *b,
                     const std::vector<float> &q, size_t nq, size_t k, vs_metric m)
{
    std::vector<int64_t> ia(nq * k), ib(nq * k), ca(nq), cb(nq);
    std::vector<float> xa(nq * k), xb(nq * k);
    ASSERT_EQ(vs_knn(c, a, q.data(), nq, k, m, nullptr, ia.data(), xa.data(), ca.data()), VS_OK)
        << vs_last_error(c);
    ASSERT_EQ(vs_knn(c, b, q.data(), nq, k, m, nullptr, ib.data(), xb.data(), cb.data()), VS_OK)
        << vs_last_error(c);
    EXPECT_EQ(ca, cb);
    EXPECT_EQ(ia, ib);
    EXPECT_EQ(0, std::memcmp(xa.data(), xb.data(), xa.size() * sizeof(float)));
}

// A subset of a dataset (its rows named in any order) answers as a dataset the same rows were
// added to directly, in F32 and F16 storage, also once its source is gone; a missing or repeated
// id is refused and leaves no dataset.
TEST_P(EngineApi, SubsetSearchesAmongItsRows)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    vs_context *c = ctx.get();
    vt::Data D = vt::make_data(600, 12, 21, 0.05);
    vt::Data S; // 150 of D's rows (241 and 600 coprime: no row twice)
    S.n = 150;
    S.d = D.d;
    for (size_t i = 0; i < S.n; i++)
    {
        size_t r = (i * 241 + 17) % D.n;
        S.ids.push_back(D.ids[r]);
        S.x.insert(S.x.end(), &D.x[r * D.d], &D.x[r * D.d] + D.d);
        S.group.push_back(D.group[r]);
    }
    auto q = vt::make_queries(S, 40, 5);
    for (vs_dtype storage : {VS_DTYPE_F32, VS_DTYPE_F16})
    {
        SCOPED_TRACE(storage == VS_DTYPE_F16 ? "f16" : "f32");
        vs_dataset *raw = nullptr;
        ASSERT_EQ(vs_dataset_create(c, D.d, storage, &raw), VS_OK);
        vt::DatasetPtr all(raw, vt::DatasetDeleter{c});
        ASSERT_EQ(vs_dataset_add(c, raw, D.x.data(), D.ids.data(), D.n), VS_OK);
        ASSERT_EQ(vs_dataset_create(c, D.d, storage, &raw), VS_OK);
        vt::DatasetPtr direct(raw, vt::DatasetDeleter{c});
        ASSERT_EQ(vs_dataset_add(c, raw, S.x.data(), S.ids.data(), S.n), VS_OK);

        raw = nullptr;
        ASSERT_EQ(vs_dataset_subset(c, all.get(), S.ids.data(), S.n, &raw), VS_OK)
            << vs_last_error(c);
        vt::DatasetPtr sub(raw, vt::DatasetDeleter{c});
        EXPECT_EQ(vs_dataset_size(sub.get()), S.n);
        EXPECT_EQ(vs_dataset_dim(sub.get()), D.d);
        EXPECT_EQ(vs_dataset_storage(sub.get()), storage);
        EXPECT_EQ(vs_dataset_size(all.get()), D.n);
        for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_IP, VS_METRIC_COSINE, VS_METRIC_L1})
        {
            SCOPED_TRACE(vt::metric_name(m));
            expect_same_knn(c, sub.get(), direct.get(), q, 40, 10, m);
            expect_same_knn(c, sub.get(), direct.get(), q, 2, 200, m); // k > rows
        }

        int64_t missing[2] = {S.ids[0], 99999999};
        raw = reinterpret_cast<vs_dataset *>(&missing);
        EXPECT_EQ(vs_dataset_subset(c, all.get(), missing, 2, &raw), VS_INVALID_ARGUMENT);
        EXPECT_EQ(raw, nullptr);
        EXPECT_NE(std::string(vs_last_error(c)).find("99999999 of the subset is not in the dataset"),
                  std::string::npos)
            << vs_last_error(c);
        int64_t twice[3] = {S.ids[3], S.ids[1], S.ids[3]};
        EXPECT_EQ(vs_dataset_subset(c, all.get(), twice, 3, &raw), VS_INVALID_ARGUMENT);
        EXPECT_NE(std::string(vs_last_error(c)).find("repeated"), std::string::npos);
        EXPECT_EQ(vs_dataset_subset(c, all.get(), nullptr, 1, &raw), VS_INVALID_ARGUMENT);
        EXPECT_EQ(vs_dataset_subset(c, nullptr, S.ids.data(), 1, &raw), VS_INVALID_ARGUMENT);

        ASSERT_EQ(vs_dataset_subset(c, all.get(), nullptr, 0, &raw), VS_OK);
        vt::DatasetPtr empty(raw, vt::DatasetDeleter{c});
        int64_t oid[2], cnt = -1;
        float od[2];
        ASSERT_EQ(vs_knn(c, empty.get(), q.data(), 1, 2, VS_METRIC_L2, nullptr, oid, od, &cnt),
                  VS_OK);
        EXPECT_EQ(cnt, 0);

        all.reset();
        expect_same_knn(c, sub.get(), direct.get(), q, 40, 10, VS_METRIC_L2);
    }
}

struct Arena
{
    std::vector<std::unique_ptr<char[]>> blocks;
    int calls = 0;
    bool fail = false;
};

void *arena_alloc(void *arg, size_t bytes)
{
    auto *a = static_cast<Arena *>(arg);
    a->calls++;
    if (a->fail)
        return nullptr;
    a->blocks.emplace_back(new char[bytes]);
    return a->blocks.back().get();
}

TEST_P(EngineApi, RangeUsesCallerAllocator)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    vs_context *c = ctx.get();
    vt::Data D = vt::make_data(500, 8, 3);
    vt::DatasetPtr ds = vt::upload(c, D);
    std::vector<float> q = vt::make_queries(D, 4, 3);
    Arena arena;
    vs_range_result res;
    ASSERT_EQ(vs_range(c, ds.get(), q.data(), 4, 12.0f, VS_METRIC_L2SQ, nullptr, arena_alloc,
                       &arena, &res),
              VS_OK);
    EXPECT_EQ(arena.calls, 3);
    EXPECT_GT(res.total, 0u);
    EXPECT_EQ(res.offsets[4], static_cast<int64_t>(res.total));
    for (size_t i = 0; i < 4; i++)
    {
        auto ref = vt::ref_sorted(D, &q[i * 8], VS_METRIC_L2SQ);
        EXPECT_TRUE(vt::check_range(ref, 12.0f, res.ids + res.offsets[i],
                                    res.distances + res.offsets[i],
                                    static_cast<size_t>(res.offsets[i + 1] - res.offsets[i])));
    }
    arena.fail = true;
    EXPECT_EQ(vs_range(c, ds.get(), q.data(), 4, 12.0f, VS_METRIC_L2SQ, nullptr, arena_alloc,
                       &arena, &res),
              VS_OUT_OF_MEMORY);
    // No queries: offsets only.
    arena.fail = false;
    ASSERT_EQ(vs_range(c, ds.get(), q.data(), 0, 12.0f, VS_METRIC_L2SQ, nullptr, arena_alloc,
                       &arena, &res),
              VS_OK);
    EXPECT_EQ(res.total, 0u);
    EXPECT_EQ(res.offsets[0], 0);
}

int cancel_after(void *arg)
{
    auto *n = static_cast<std::atomic<int> *>(arg);
    return --*n < 0;
}

TEST_P(EngineApi, CancelStopsTheCall)
{
    std::atomic<int> budget{0};
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = GetParam() == "cuda" ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
    o.cuda_library = vt::cuda_library();
    o.cancel = cancel_after;
    o.cancel_arg = &budget;
    vs_context *raw = nullptr;
    char err[256];
    if (vs_context_create(&o, &raw, err, sizeof err) != VS_OK)
        GTEST_SKIP() << err;
    vt::ContextPtr ctx(raw);
    vt::Data D = vt::make_data(2000, 16, 4);
    budget = 1 << 30;
    vt::DatasetPtr ds = vt::upload(raw, D);
    std::vector<float> q = vt::make_queries(D, 600, 4);
    std::vector<int64_t> ids(600 * 10);
    std::vector<float> dist(600 * 10);
    budget = 0;
    EXPECT_EQ(vs_knn(raw, ds.get(), q.data(), 600, 10, VS_METRIC_L2, nullptr, ids.data(),
                     dist.data(), nullptr),
              VS_CANCELLED);
    EXPECT_NE(std::string(vs_last_error(raw)).find("cancel"), std::string::npos);
    // The context stays usable.
    budget = 1 << 30;
    EXPECT_EQ(vs_knn(raw, ds.get(), q.data(), 600, 10, VS_METRIC_L2, nullptr, ids.data(),
                     dist.data(), nullptr),
              VS_OK)
        << vs_last_error(raw);
}

INSTANTIATE_TEST_SUITE_P(All, EngineApi,
                         ::testing::Values(std::string("cpu"), std::string("cuda")),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

// A device budget too small for the data is a clean VS_OUT_OF_MEMORY, and the context survives.
TEST(EngineApiCuda, OutOfMemoryIsAnError)
{
    std::string why;
    vt::ContextPtr ctx = vt::make_context("cuda", &why, 4u << 20);
    if (!ctx)
        GTEST_SKIP() << why;
    vs_context *c = ctx.get();
    vs_dataset *ds = nullptr;
    ASSERT_EQ(vs_dataset_create(c, 256, VS_DTYPE_F32, &ds), VS_OK);
    vt::DatasetPtr guard(ds, vt::DatasetDeleter{c});
    vt::Data D = vt::make_data(8192, 256, 9); // 8 MiB of vectors
    EXPECT_EQ(vs_dataset_add(c, ds, D.x.data(), D.ids.data(), D.n), VS_OUT_OF_MEMORY);
    EXPECT_NE(std::string(vs_last_error(c)), "");
    ASSERT_EQ(vs_dataset_add(c, ds, D.x.data(), D.ids.data(), 1024), VS_OK) << vs_last_error(c);
    // A search whose scratch does not fit fails cleanly too, or succeeds by tiling smaller.
    std::vector<float> q = vt::make_queries(D, 2000, 9);
    std::vector<int64_t> ids(2000 * 1000);
    std::vector<float> dist(2000 * 1000);
    vs_status st = vs_knn(c, ds, q.data(), 2000, 1000, VS_METRIC_L2, nullptr, ids.data(),
                          dist.data(), nullptr);
    EXPECT_TRUE(st == VS_OK || st == VS_OUT_OF_MEMORY) << vs_status_name(st);
    int64_t one_id;
    float one_d;
    EXPECT_EQ(vs_knn(c, ds, q.data(), 1, 1, VS_METRIC_L2, nullptr, &one_id, &one_d, nullptr), VS_OK)
        << vs_last_error(c);
}

} // namespace
