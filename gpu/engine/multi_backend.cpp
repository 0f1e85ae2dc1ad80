// Several devices behind one context (engine/multi_backend.h): the devices -- one backend and one
// thread each, the caller's cancel callback polled while they work, their information, calls and
// loss -- and where a dataset's rows go.  The datasets' calls are in multi_datasets.cpp, the
// objects placed whole on one device in multi_objects.cpp (engine/multi_internal.h).
#include "engine/multi_internal.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace vs::multi {

thread_local std::atomic<bool> *CancelState::current = nullptr;
thread_local bool CancelState::caller = false;

MultiBackendImpl::MultiBackendImpl(const BackendConfig &base, const MultiConfig &mc)
    : base_(base), mc_(mc), ivfpq_(*this), graph_(*this), metric_(*this)
{
    if (mc_.shard_min_bytes == 0)
        mc_.shard_min_bytes = size_t{1} << 30;
    cancel_.user = base.cancel;
    cancel_.user_arg = base.cancel_arg;
}

MultiBackendImpl::~MultiBackendImpl()
{
    // Objects are gone (the front end releases them first); the backends go on their threads.
    for (size_t i = 0; i < devs_.size(); i++)
        if (devs_[i].backend)
            on_thread(i, [&] { devs_[i].backend.reset(); });
}

bool MultiBackendImpl::start(const BackendFactory &factory, std::string *err)
{
    const size_t n = mc_.devices.size();
    devs_.resize(n);
    inflight_.reset(new std::atomic<int>[n]);
    for (size_t i = 0; i < n; i++)
        inflight_[i] = 0;
    BackendConfig cfg = base_;
    cfg.cancel = &CancelState::poll;
    cfg.cancel_arg = &cancel_;
    cfg.lanes = 1; // the context's lanes spread over the devices (lanes())
    if (base_.num_threads > 0)
        cfg.num_threads = std::max<int>(1, base_.num_threads / static_cast<int>(n));
    else if (n > 1)
        cfg.num_threads =
            std::max<int>(1, static_cast<int>(std::thread::hardware_concurrency() / n));
    for (size_t i = 0; i < n; i++)
    {
        Device &d = devs_[i];
        d.ordinal = mc_.devices[i];
        d.thread.reset(new DeviceThread);
        cfg.device = d.ordinal;
        std::string e;
        on_thread(i, [&] { d.backend = factory(cfg, &e); });
        d.alive = d.backend != nullptr;
        if (!d.alive)
            d.error = "did not start: " + e;
    }
    if (live_devices() == 0)
    {
        *err = devs_.empty() ? "no device" : devs_[0].error;
        return false;
    }
    return true;
}

int MultiBackendImpl::live_devices() const noexcept
{
    int n = 0;
    for (const Device &d : devs_)
        n += d.alive;
    return n;
}

Status MultiBackendImpl::device_info(int i, vs_device_info *out) noexcept
{
    return guarded([&] {
        if (i < 0 || static_cast<size_t>(i) >= devs_.size())
            throw Error(VS_INVALID_ARGUMENT, "no such device");
        Device &d = devs_[static_cast<size_t>(i)];
        std::memset(out, 0, sizeof *out);
        out->device = d.ordinal;
        {
            std::lock_guard<std::mutex> lock(devs_mu_);
            out->alive = d.alive;
            out->calls = d.calls;
            std::snprintf(out->error, sizeof out->error, "%s", d.error.c_str());
        }
        out->datasets = d.datasets;
        out->ivfpq_objects = d.ivfpq_objects;
        if (d.alive)
        {
            Status st = d.backend->info(&out->info);
            if (!st.ok())
                throw Error(st.code, st.message);
        }
    });
}

void MultiBackendImpl::fail_device(int i, const std::string &why) noexcept
{
    if (i >= 0 && static_cast<size_t>(i) < devs_.size())
    {
        std::lock_guard<std::mutex> lock(devs_mu_);
        lose_device(static_cast<size_t>(i), why);
    }
}

vs_placement MultiBackendImpl::placement(const Dataset *ds) const noexcept
{
    auto *m = dynamic_cast<const MultiDataset *>(ds);
    return m ? m->placement : VS_PLACEMENT_AUTO;
}

vs_backend_kind MultiBackendImpl::kind() const noexcept
{
    for (const Device &d : devs_)
        if (d.backend)
            return d.backend->kind();
    return VS_BACKEND_CPU;
}

Status MultiBackendImpl::info(vs_context_info *out) noexcept
{
    return guarded([&] {
        std::memset(out, 0, sizeof *out);
        std::string first;
        int live = 0;
        for (size_t i = 0; i < devs_.size(); i++)
        {
            if (!devs_[i].alive)
                continue;
            vs_context_info di;
            std::memset(&di, 0, sizeof di);
            Status st = devs_[i].backend->info(&di);
            if (!st.ok())
                throw Error(st.code, st.message);
            out->backend = di.backend;
            out->memory_budget += di.memory_budget;
            out->memory_in_use += di.memory_in_use;
            out->device_count = std::max(out->device_count, di.device_count);
            if (first.empty())
                first = di.device_name;
            live++;
        }
        std::snprintf(out->device_name, sizeof out->device_name, "%d x %s", live,
                      first.c_str());
    });
}

Status MultiBackendImpl::kmeans(const float *data, size_t n, size_t dim,
                                const vs_kmeans_params &params, float *centroids,
                                vs_kmeans_info *info) noexcept
{
    return guarded([&] {
        size_t d = least_used();
        throw_if(call(d, [&] {
            return devs_[d].backend->kmeans(data, n, dim, params, centroids, info);
        }));
    });
}

IvfpqBackend *MultiBackendImpl::ivfpq() noexcept
{
    for (const Device &d : devs_)
        if (d.backend && !d.backend->ivfpq())
            return nullptr;
    return &ivfpq_;
}

GraphBackend *MultiBackendImpl::graph() noexcept
{
    for (const Device &d : devs_)
        if (d.backend && !d.backend->graph())
            return nullptr;
    return &graph_;
}

MetricBackend *MultiBackendImpl::metric() noexcept
{
    for (const Device &d : devs_)
        if (d.backend && !d.backend->metric())
            return nullptr;
    return &metric_;
}

size_t MultiBackendImpl::least_used()
{
    size_t best = devs_.size();
    size_t best_use = 0;
    for (size_t i = 0; i < devs_.size(); i++)
    {
        if (!devs_[i].alive)
            continue;
        vs_context_info di;
        std::memset(&di, 0, sizeof di);
        (void)devs_[i].backend->info(&di);
        size_t use = di.memory_in_use + devs_[i].ivfpq_objects; // ties: fewer objects
        if (best == devs_.size() || use < best_use)
        {
            best = i;
            best_use = use;
        }
    }
    if (best == devs_.size())
        throw Error(VS_DEVICE_ERROR, "every device was lost");
    return best;
}

void MultiBackendImpl::check_device(size_t i)
{
    if (!devs_[i].alive)
        throw Error(VS_DEVICE_ERROR, "device " + std::to_string(devs_[i].ordinal) +
                                         " was lost (" + devs_[i].error +
                                         "); the object must be loaded again");
}

// Runs jobs[j] on device devs[j], all at once: the first on the calling thread (a CUDA backend
// makes its device current on entry), the others on their devices' threads; waits for all.
void MultiBackendImpl::run_jobs(const std::vector<size_t> &devs,
                                std::vector<std::function<Status()>> &jobs,
                                std::vector<Status *> &out)
{
    std::mutex mu;
    std::condition_variable cv;
    size_t left = jobs.size() - 1;
    std::atomic<bool> cancelled{false};
    auto run = [&](size_t j) {
        return guarded([&] {
            Status s = jobs[j]();
            if (!s.ok())
                throw Error(s.code, s.message);
        });
    };
    for (size_t j = 1; j < jobs.size(); j++)
        devs_[devs[j]].thread->post([&, j] {
            CancelScope scope(&cancelled, false);
            Status st = run(j);
            std::lock_guard<std::mutex> lock(mu);
            *out[j] = std::move(st);
            if (--left == 0)
                cv.notify_all();
        });
    CancelScope scope(&cancelled, true);
    inflight_[devs[0]]++;
    *out[0] = run(0);
    inflight_[devs[0]]--;
    std::unique_lock<std::mutex> lock(mu);
    while (left > 0)
    {
        cv.wait_for(lock, std::chrono::milliseconds(1));
        if (left > 0)
        {
            lock.unlock();
            cancel_.ask(cancelled);
            lock.lock();
        }
    }
}

void MultiBackendImpl::note(size_t i, const Status &st)
{
    std::lock_guard<std::mutex> lock(devs_mu_);
    devs_[i].calls++;
    if (st.code == VS_DEVICE_ERROR)
        lose_device(i, st.message);
}

void MultiBackendImpl::lose_device(size_t i, const std::string &why)
{
    if (devs_[i].alive)
    {
        devs_[i].alive = false;
        devs_[i].error = why;
    }
}

void MultiBackendImpl::check_alive(const MultiDataset &m)
{
    for (int d : m.devs)
        check_device(static_cast<size_t>(d));
}

std::vector<size_t> MultiBackendImpl::live_list() const
{
    std::vector<size_t> v;
    for (size_t i = 0; i < devs_.size(); i++)
        if (devs_[i].alive)
            v.push_back(i);
    return v;
}

vs_placement MultiBackendImpl::decide(const MultiDataset &m, size_t n)
{
    if (mc_.placement != VS_PLACEMENT_AUTO || m.parts.size() == 1)
        return m.parts.size() == 1 ? VS_PLACEMENT_REPLICATED : mc_.placement;
    const size_t bytes = n * m.dim() * sizeof(float);
    if (bytes >= mc_.shard_min_bytes)
        return VS_PLACEMENT_SHARDED;
    for (int d : m.devs)
    {
        vs_context_info di;
        std::memset(&di, 0, sizeof di);
        (void)devs_[static_cast<size_t>(d)].backend->info(&di);
        if (di.memory_budget > 0 && bytes > di.memory_budget / 2)
            return VS_PLACEMENT_SHARDED;
    }
    return VS_PLACEMENT_REPLICATED;
}

void MultiBackendImpl::ivfpq_destroyed(MultiIvfpq &m)
{
    size_t d = static_cast<size_t>(m.dev);
    Ivfpq *inner = m.inner;
    on_thread(d, [inner] { delete inner; });
    m.inner = nullptr;
    devs_[d].ivfpq_objects--;
}

void MultiBackendImpl::graph_destroyed(MultiGraph &m)
{
    size_t d = static_cast<size_t>(m.dev);
    Graph *inner = m.inner;
    on_thread(d, [inner] { delete inner; });
    m.inner = nullptr;
}

void MultiBackendImpl::metric_destroyed(MultiMetric &m)
{
    size_t d = static_cast<size_t>(m.dev);
    MetricIndex *inner = m.inner;
    on_thread(d, [inner] { delete inner; });
    m.inner = nullptr;
}

} // namespace vs::multi

namespace vs {

std::unique_ptr<MultiBackend> make_multi_backend(const BackendConfig &base, const MultiConfig &mc,
                                                 const BackendFactory &factory, std::string *err)
{
    std::unique_ptr<multi::MultiBackendImpl> b(new multi::MultiBackendImpl(base, mc));
    if (!b->start(factory, err))
        return nullptr;
    return b;
}

} // namespace vs
