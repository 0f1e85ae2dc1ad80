// What the files of the engine's C front end share (internal; not installed): the context behind
// vs_context, the C handles of engine objects (vs_dataset, vs_ivfpq, ... each file defines its
// own) and the helpers every entry point uses (errors, argument checks, object lifetime).
//
//   context.cpp     options, context create / destroy / info, errors, loading vsearch_cuda.so
//   exact_api.cpp   datasets, vs_knn, vs_range
//   range_result.*  range matches collected from a backend and delivered as CSR (vs_range,
//                   vs_ivfpq_range)
//   result_memory.* host memory of results without a caller allocator (huge-page mappings),
//                   the parallel copies that fill it
//   kmeans_api.cpp  vs_kmeans
//   ivfpq_api.cpp   vs_ivfpq_* (training, encoding, lists, search, range)
//   rowscan_api.cpp vs_rowscan_* (searches over the caller's blocks of rows, on the host)
//
// Every entry point is noexcept; argument errors are recorded with fail(), a backend's Status
// with finish() (which clears the last error on success).
#ifndef VSEARCH_ENGINE_API_H
#define VSEARCH_ENGINE_API_H

#include "engine/backend.h"
#include "vsearch/engine.h"

#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>

namespace vs::api {

// The C handle of an engine object: the context it belongs to and the backend's object.  The
// context keeps every live handle so that vs_context_destroy can release their (device) memory
// before the backend goes; a released handle keeps only its destroy call.
struct Handle
{
    vs_context *owner = nullptr;
    virtual ~Handle() = default;
    virtual void release() noexcept = 0; // deletes the backend object, detaches from the context
};

template <typename Impl> struct Object : Handle
{
    Impl *impl = nullptr;
    void release() noexcept override
    {
        delete impl;
        impl = nullptr;
        owner = nullptr;
    }
};

} // namespace vs::api

struct vs_context
{
    std::unique_ptr<vs::Backend> backend;
    int device = 0; // ordinal of a single-device context
    vs::BackendConfig config; // as created: host threads and cancel callback of row scans
    int lanes = 1;            // calls that may run at once (vs_context_lanes)
    // Calls may come from several threads at once (lanes): each thread has its own last error,
    // and mu guards errors, objects and the fault state.
    std::mutex mu;
    std::map<std::thread::id, std::string> errors;
    std::set<vs::api::Handle *> objects; // live handles of every kind
    int (*cancel)(void *) = nullptr;      // the options' cancel callback (for fault_point)
    void *cancel_arg = nullptr;
    vs_fault fault = VS_FAULT_NONE;       // vs_context_inject_fault
    int fault_count = 0;                  // calls left to fail (-1: until cleared)
    unsigned fault_ms = 0;
};

namespace vs::api {

// The calling thread's last error on ctx (created empty on its first use).
std::string &thread_error(vs_context *ctx);
// Records msg as the context's last error (ctx may be NULL) and returns code.
vs_status fail(vs_context *ctx, vs_status code, const std::string &msg);
// A backend's status as the call's result: clears the last error on success.
vs_status finish(vs_context *ctx, const Status &st);

// The fault point before a call reaches the backend (vs_context_inject_fault): VS_OK when no
// fault is injected or the call may go on after a SLOW wait; else the injected failure, recorded.
vs_status fault_point(vs_context *ctx);

bool valid_metric(vs_metric m);
// The checks of a kNN call's queries, k and outputs (vs_knn, vs_ivfpq_search).
vs_status check_knn_io(vs_context *ctx, const float *queries, size_t nq, size_t k,
                       const int64_t *out_ids, const float *out_distances);
// The checks of a range call's radius and queries (vs_range, vs_ivfpq_range).
vs_status check_range_io(vs_context *ctx, float radius, const float *queries, size_t nq);

// An index family's interface as the backend's accessor returned it (Backend::ivfpq(), ...):
// NULL, a backend without that family, is VS_UNSUPPORTED.
inline vs_status check_family(vs_context *ctx, const void *family, const char *name)
{
    if (!family)
        return fail(ctx, VS_UNSUPPORTED, std::string(name) + " is not implemented on this backend");
    return VS_OK;
}

// A handle argument: not NULL, not released, of this context.  what names it in messages.
template <typename H> vs_status check_object(vs_context *ctx, const H *h, const char *what)
{
    if (!h || !h->impl)
        return fail(ctx, VS_INVALID_ARGUMENT, std::string(what) + " is NULL");
    if (h->owner != ctx)
        return fail(ctx, VS_INVALID_ARGUMENT, std::string(what) + " belongs to another context");
    return VS_OK;
}

// A new handle of type H for the object that make(&impl) creates on the backend (make returns
// its Status), registered with the context.
template <typename H, typename Make> vs_status create_object(vs_context *ctx, H **out, Make &&make)
{
    H *h = new (std::nothrow) H;
    if (!h)
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    decltype(h->impl) impl = nullptr;
    vs_status st = finish(ctx, make(&impl));
    if (st != VS_OK)
    {
        delete h;
        return st;
    }
    h->owner = ctx;
    h->impl = impl;
    try
    {
        std::lock_guard<std::mutex> lock(ctx->mu);
        ctx->objects.insert(h);
    }
    catch (...)
    {
        delete impl;
        delete h;
        return fail(ctx, VS_OUT_OF_MEMORY, "out of host memory");
    }
    *out = h;
    return VS_OK;
}

// Destroys a handle and its object (also a handle its context already released).
template <typename H> void destroy_object(H *h) noexcept
{
    if (!h)
        return;
    if (h->owner)
    {
        std::lock_guard<std::mutex> lock(h->owner->mu);
        h->owner->objects.erase(h);
    }
    delete h->impl;
    delete h;
}

} // namespace vs::api

#endif
