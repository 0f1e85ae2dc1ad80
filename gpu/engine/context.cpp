// The engine front end, context part: the C ABI of vsearch/engine.h for options, contexts (which
// backend: the CPU one, or the CUDA one loaded from vsearch_cuda.so), context information and
// errors, and the helpers of engine/api.h that every entry point uses.
#include "engine/api.h"

#include "cpu/cpu_backend.h"
#include "engine/multi_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

namespace vs::api {

std::string &thread_error(vs_context *ctx)
{
    std::lock_guard<std::mutex> lock(ctx->mu);
    return ctx->errors[std::this_thread::get_id()];
}

vs_status fail(vs_context *ctx, vs_status code, const std::string &msg)
{
    if (ctx)
        thread_error(ctx) = msg;
    return code;
}

vs_status finish(vs_context *ctx, const vs::Status &st)
{
    if (st.ok())
    {
        thread_error(ctx).clear();
        return VS_OK;
    }
    thread_error(ctx) = st.message;
    return st.code;
}

vs_status fault_point(vs_context *ctx)
{
    vs_fault fault;
    unsigned ms;
    {
        std::lock_guard<std::mutex> lock(ctx->mu);
        if (ctx->fault == VS_FAULT_NONE)
            return VS_OK;
        fault = ctx->fault;
        ms = ctx->fault_ms;
        if (ctx->fault_count > 0 && --ctx->fault_count == 0)
            ctx->fault = VS_FAULT_NONE;
    }
    switch (fault)
    {
    case VS_FAULT_OUT_OF_MEMORY:
        return fail(ctx, VS_OUT_OF_MEMORY, "injected fault: out of device memory");
    case VS_FAULT_DEVICE_ERROR:
        return fail(ctx, VS_DEVICE_ERROR, "injected fault: a kernel or copy failed");
    case VS_FAULT_HANG:
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        return fail(ctx, VS_DEVICE_ERROR,
                    "injected fault: the call hung for " + std::to_string(ms) + " ms");
    case VS_FAULT_SLOW:
    {
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        while (std::chrono::steady_clock::now() < end)
        {
            if (ctx->cancel && ctx->cancel(ctx->cancel_arg))
                return fail(ctx, VS_CANCELLED, "cancelled");
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return VS_OK;
    }
    case VS_FAULT_NONE:
        break;
    }
    return VS_OK;
}

bool valid_metric(vs_metric m)
{
    return static_cast<int>(m) >= 0 && static_cast<int>(m) < VS_METRIC_COUNT;
}

vs_status check_knn_io(vs_context *ctx, const float *queries, size_t nq, size_t k,
                       const int64_t *out_ids, const float *out_distances)
{
    if (nq > 0 && !queries)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
    if (k > 0 && nq > std::numeric_limits<size_t>::max() / 16 / k)
        return fail(ctx, VS_INVALID_ARGUMENT, "nq * k is too large");
    if (nq > 0 && k > 0 && (!out_ids || !out_distances))
        return fail(ctx, VS_INVALID_ARGUMENT, "out_ids or out_distances is NULL");
    return VS_OK;
}

vs_status check_range_io(vs_context *ctx, float radius, const float *queries, size_t nq)
{
    if (radius != radius)
        return fail(ctx, VS_INVALID_ARGUMENT, "radius is NaN");
    if (nq > 0 && !queries)
        return fail(ctx, VS_INVALID_ARGUMENT, "queries is NULL");
    return VS_OK;
}

} // namespace vs::api

namespace {

void write_err(char *buf, size_t len, const std::string &msg)
{
    if (buf && len > 0)
    {
        size_t n = std::min(len - 1, msg.size());
        std::memcpy(buf, msg.data(), n);
        buf[n] = '\0';
    }
}

// Loads vsearch_cuda.so once per path; never unloaded (the CUDA runtime dislikes that).
vs_cuda_backend_fn load_cuda_backend(const char *path, std::string *err)
{
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
    {
        const char *e = dlerror();
        *err = std::string("cannot load the CUDA backend: ") + (e ? e : path);
        return nullptr;
    }
    void *sym = dlsym(handle, VS_CUDA_BACKEND_SYMBOL);
    if (!sym)
    {
        *err = std::string("no symbol " VS_CUDA_BACKEND_SYMBOL " in ") + path;
        return nullptr;
    }
    vs_cuda_backend_fn fn;
    static_assert(sizeof fn == sizeof sym, "function pointer size");
    std::memcpy(&fn, &sym, sizeof fn);
    return fn;
}

} // namespace

using namespace vs::api;

extern "C" {

void vs_context_options_init(vs_context_options *o) noexcept
{
    if (!o)
        return;
    std::memset(o, 0, sizeof *o);
    o->backend = VS_BACKEND_AUTO;
    o->gemm_precision = VS_GEMM_TF32;
}

const char *vs_status_name(vs_status s) noexcept
{
    switch (s)
    {
    case VS_OK:
        return "VS_OK";
    case VS_INVALID_ARGUMENT:
        return "VS_INVALID_ARGUMENT";
    case VS_OUT_OF_MEMORY:
        return "VS_OUT_OF_MEMORY";
    case VS_DEVICE_ERROR:
        return "VS_DEVICE_ERROR";
    case VS_UNSUPPORTED:
        return "VS_UNSUPPORTED";
    case VS_CANCELLED:
        return "VS_CANCELLED";
    case VS_INTERNAL:
        return "VS_INTERNAL";
    }
    return "VS_UNKNOWN";
}

vs_status vs_context_create(const vs_context_options *options, vs_context **out, char *errbuf,
                            size_t errlen) noexcept
{
    if (!out)
    {
        write_err(errbuf, errlen, "out is NULL");
        return VS_INVALID_ARGUMENT;
    }
    *out = nullptr;
    try
    {
        vs_context_options o;
        vs_context_options_init(&o);
        if (options)
            o = *options;
        if (o.backend != VS_BACKEND_AUTO && o.backend != VS_BACKEND_CPU &&
            o.backend != VS_BACKEND_CUDA)
        {
            write_err(errbuf, errlen, "unknown backend");
            return VS_INVALID_ARGUMENT;
        }
        if (o.gemm_precision != VS_GEMM_TF32 && o.gemm_precision != VS_GEMM_FP32)
        {
            write_err(errbuf, errlen, "unknown gemm precision");
            return VS_INVALID_ARGUMENT;
        }
        vs::BackendConfig cfg;
        cfg.device = o.device;
        cfg.device_memory_budget = o.device_memory_budget;
        cfg.num_threads = o.num_threads;
        cfg.gemm_precision = o.gemm_precision;
        cfg.cancel = o.cancel;
        cfg.cancel_arg = o.cancel_arg;
        if (o.lanes < 0 || o.lanes > 16)
        {
            write_err(errbuf, errlen, "lanes must be 0 .. 16");
            return VS_INVALID_ARGUMENT;
        }
        cfg.lanes = std::max(1, o.lanes);

        if (o.ndevices < -1 || o.ndevices > 64 || (o.ndevices > 0 && !o.devices))
        {
            write_err(errbuf, errlen, "ndevices must be -1 (all), 0 (one) or 1 .. 64 with devices");
            return VS_INVALID_ARGUMENT;
        }
        if (o.placement != VS_PLACEMENT_AUTO && o.placement != VS_PLACEMENT_REPLICATED &&
            o.placement != VS_PLACEMENT_SHARDED)
        {
            write_err(errbuf, errlen, "unknown placement");
            return VS_INVALID_ARGUMENT;
        }

        // One device's backend of the kind asked for (AUTO: CUDA if it starts, else CPU).
        vs_backend_kind want = o.backend;
        vs_cuda_backend_fn cuda_fn = nullptr;
        std::string cuda_err;
        if (want != VS_BACKEND_CPU)
        {
            const char *path = o.cuda_library;
            if (!path)
                path = std::getenv("VSEARCH_CUDA_LIBRARY");
            if (!path)
                path = "vsearch_cuda.so";
            cuda_fn = load_cuda_backend(path, &cuda_err);
        }
        auto make_one = [&](const vs::BackendConfig &c, std::string *err) {
            std::unique_ptr<vs::Backend> b;
            if (want != VS_BACKEND_CPU && cuda_fn)
            {
                char buf[512] = {0};
                b.reset(cuda_fn(&c, buf, sizeof buf));
                if (!b)
                    *err = buf[0] ? buf : "the CUDA backend could not start";
            }
            else if (want != VS_BACKEND_CPU)
                *err = cuda_err;
            if (!b && want != VS_BACKEND_CUDA)
                b = vs::make_cpu_backend(c);
            return b;
        };

        std::unique_ptr<vs::Backend> backend = make_one(cfg, &cuda_err);
        if (!backend)
        {
            write_err(errbuf, errlen, cuda_err);
            return VS_UNSUPPORTED;
        }
        std::vector<int> devices;
        if (o.ndevices > 0)
            devices.assign(o.devices, o.devices + o.ndevices);
        else if (o.ndevices == -1)
        {
            vs_context_info info;
            std::memset(&info, 0, sizeof info);
            if (backend->info(&info).ok())
                for (int d = 0; d < info.device_count; d++)
                    devices.push_back(d);
        }
        if (devices.size() > 1 || (devices.size() == 1 && devices[0] != o.device))
        {
            // Several devices: every one (this first one too) gets a backend on its own thread.
            want = backend->kind();
            backend.reset();
            vs::MultiConfig mc;
            mc.devices = devices;
            mc.placement = o.placement;
            mc.shard_min_bytes = o.shard_min_bytes;
            std::string err;
            backend = vs::make_multi_backend(cfg, mc, make_one, &err);
            if (!backend)
            {
                write_err(errbuf, errlen, err);
                return VS_UNSUPPORTED;
            }
        }
        auto *ctx = new vs_context;
        ctx->backend = std::move(backend);
        ctx->device = o.device;
        ctx->cancel = o.cancel;
        ctx->cancel_arg = o.cancel_arg;
        ctx->config = cfg;
        ctx->lanes = ctx->backend->lanes();
        *out = ctx;
        return VS_OK;
    }
    catch (const std::bad_alloc &)
    {
        write_err(errbuf, errlen, "out of host memory");
        return VS_OUT_OF_MEMORY;
    }
    catch (const std::exception &e)
    {
        write_err(errbuf, errlen, e.what());
        return VS_INTERNAL;
    }
    catch (...)
    {
        write_err(errbuf, errlen, "unknown exception");
        return VS_INTERNAL;
    }
}

void vs_context_destroy(vs_context *ctx) noexcept
{
    if (!ctx)
        return;
    // Objects still alive (datasets, index objects) give their (device) memory back first;
    // their handles stay valid for their destroy call only.
    for (vs::api::Handle *h : ctx->objects)
        h->release();
    delete ctx;
}

int vs_context_lanes(const vs_context *ctx) noexcept
{
    return ctx ? ctx->lanes : 0;
}

const char *vs_last_error(const vs_context *ctx) noexcept
{
    return ctx ? vs::api::thread_error(const_cast<vs_context *>(ctx)).c_str() : "context is NULL";
}

vs_status vs_context_get_info(vs_context *ctx, vs_context_info *info) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!info)
        return fail(ctx, VS_INVALID_ARGUMENT, "info is NULL");
    std::memset(info, 0, sizeof *info);
    vs_status st = finish(ctx, ctx->backend->info(info));
    if (st == VS_OK && info->device_count == 0)
        info->device_count = 1;
    return st;
}

int vs_context_device_count(const vs_context *ctx) noexcept
{
    if (!ctx)
        return 0;
    auto *m = dynamic_cast<const vs::MultiBackend *>(ctx->backend.get());
    return m ? m->device_count() : 1;
}

int vs_context_live_devices(const vs_context *ctx) noexcept
{
    if (!ctx)
        return 0;
    auto *m = dynamic_cast<const vs::MultiBackend *>(ctx->backend.get());
    return m ? m->live_devices() : 1;
}

vs_status vs_context_get_device_info(vs_context *ctx, int i, vs_device_info *info) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (!info)
        return fail(ctx, VS_INVALID_ARGUMENT, "info is NULL");
    if (auto *m = dynamic_cast<vs::MultiBackend *>(ctx->backend.get()))
        return finish(ctx, m->device_info(i, info));
    if (i != 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "no such device");
    std::memset(info, 0, sizeof *info);
    info->alive = 1;
    vs_status st = vs_context_get_info(ctx, &info->info);
    info->device = ctx->device;
    return st;
}

vs_status vs_context_fail_device(vs_context *ctx, int i) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    auto *m = dynamic_cast<vs::MultiBackend *>(ctx->backend.get());
    if (!m)
        return fail(ctx, VS_UNSUPPORTED, "the context has one device");
    if (i < 0 || i >= m->device_count())
        return fail(ctx, VS_INVALID_ARGUMENT, "no such device");
    m->fail_device(i, "taken out by vs_context_fail_device");
    return finish(ctx, vs::Status{});
}

vs_status vs_context_inject_fault(vs_context *ctx, vs_fault fault, int count, unsigned ms) noexcept
{
    if (!ctx)
        return VS_INVALID_ARGUMENT;
    if (fault < VS_FAULT_NONE || fault > VS_FAULT_SLOW)
        return fail(ctx, VS_INVALID_ARGUMENT, "unknown fault");
    if (count < -1 || count == 0)
        return fail(ctx, VS_INVALID_ARGUMENT, "count must be -1 or positive");
    if (ms > 600000)
        return fail(ctx, VS_INVALID_ARGUMENT, "ms must be at most 600000");
    {
        std::lock_guard<std::mutex> lock(ctx->mu);
        ctx->fault = fault;
        ctx->fault_count = fault == VS_FAULT_NONE ? 0 : count;
        ctx->fault_ms = ms;
    }
    return finish(ctx, vs::Status{});
}

} // extern "C"
