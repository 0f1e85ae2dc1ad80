// The multi-device backend's parts (engine/multi_backend.h) shared by its files:
// multi_backend.cpp (the devices: their threads and the caller's cancel, set-up, information,
// calls and loss; placement), multi_datasets.cpp (datasets replicated or sharded: adds, removes,
// kNN and range with exact merges) and multi_objects.cpp (IVF-PQ, graph and metric objects, each
// whole on one device).  Internal to those files.
#ifndef VSEARCH_ENGINE_MULTI_INTERNAL_H
#define VSEARCH_ENGINE_MULTI_INTERNAL_H

#include "engine/multi_backend.h"

#include "engine/graph_backend.h"
#include "engine/ivfpq_backend.h"
#include "engine/metric_backend.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace vs::multi {

// ---- one thread per device ------------------------------------------------------------------

// Runs the jobs of one device in order.  Every call of a device's backend (and the deletion of
// its objects) runs here, so a CUDA backend always finds its device current on this thread.
class DeviceThread
{
public:
    DeviceThread() : thread_([this] { loop(); }) {}
    ~DeviceThread()
    {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    void post(std::function<void()> job)
    {
        {
            std::lock_guard<std::mutex> lock(mu_);
            jobs_.push_back(std::move(job));
        }
        cv_.notify_all();
    }

private:
    void loop()
    {
        for (;;)
        {
            std::function<void()> job;
            {
                std::unique_lock<std::mutex> lock(mu_);
                cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
                if (jobs_.empty())
                    return;
                job = std::move(jobs_.front());
                jobs_.pop_front();
            }
            job();
        }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool stop_ = false;
    std::thread thread_; // last: started once the members above exist
};

// What the devices' backends poll.  Calls may run at once from several threads (lanes), so each
// call has its own flag: on the calling thread (a call run inline) poll asks the user's callback
// and remembers a yes in it; on a device thread it only reads the flag of the call whose job runs
// there, which the calling thread keeps up to date while it waits (the user's callback is called
// from the caller only).
struct CancelState
{
    int (*user)(void *) = nullptr;
    void *user_arg = nullptr;
    static thread_local std::atomic<bool> *current; // the flag of the call this thread works for
    static thread_local bool caller;                // this thread made that call
    bool ask(std::atomic<bool> &cancelled)
    {
        if (user && !cancelled.load(std::memory_order_relaxed) && user(user_arg))
            cancelled.store(true);
        return cancelled.load(std::memory_order_relaxed);
    }
    static int poll(void *arg)
    {
        auto *c = static_cast<CancelState *>(arg);
        if (!current)
            return 0;
        if (caller)
            return c->ask(*current) ? 1 : 0;
        return current->load(std::memory_order_relaxed) ? 1 : 0;
    }
};

// Sets this thread's CancelState for the extent of a job, restoring the previous one.
class CancelScope
{
public:
    CancelScope(std::atomic<bool> *flag, bool caller)
        : flag_(CancelState::current), caller_(CancelState::caller)
    {
        CancelState::current = flag;
        CancelState::caller = caller;
    }
    ~CancelScope()
    {
        CancelState::current = flag_;
        CancelState::caller = caller_;
    }

private:
    std::atomic<bool> *flag_;
    bool caller_;
};

struct Device
{
    int ordinal = 0;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<DeviceThread> thread;
    bool alive = false;
    std::string error;
    uint64_t calls = 0;
    size_t datasets = 0;
    size_t ivfpq_objects = 0;
};

// ---- datasets -------------------------------------------------------------------------------

class MultiBackendImpl;

class MultiDataset final : public Dataset
{
public:
    MultiDataset(size_t dim, vs_dtype dtype)
    {
        dim_ = dim;
        dtype_ = dtype;
    }
    ~MultiDataset() override;
    MultiBackendImpl *owner = nullptr;          // set once every part exists
    vs_placement placement = VS_PLACEMENT_AUTO; // AUTO: no row added yet (parts are empty)
    std::vector<int> devs;                      // device index of each part
    std::vector<Dataset *> parts;               // owned; deleted on their device's thread
    void set_size(size_t n) { size_ = n; }
};

// ---- IVF-PQ: each object whole on one device --------------------------------------------------

class MultiIvfpq final : public Ivfpq
{
public:
    ~MultiIvfpq() override;
    MultiBackendImpl *owner = nullptr;
    int dev = 0;
    Ivfpq *inner = nullptr; // owned; deleted on its device's thread
    void sync()
    {
        params_ = inner->params();
        size_ = inner->size();
    }
};

class MultiIvfpqBackend final : public IvfpqBackend
{
public:
    explicit MultiIvfpqBackend(MultiBackendImpl &b) : b_(b) {}
    Status create(const vs_ivfpq_params &params, const float *centroids, const float *codebooks,
                  Ivfpq **out) noexcept override;
    Status encode(const Ivfpq *ivf, const float *vectors, size_t n, int32_t *lists,
                  uint8_t *codes) noexcept override;
    Status add(Ivfpq *ivf, size_t list, const int64_t *ids, const uint8_t *codes,
               size_t n) noexcept override;
    Status search(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                  size_t nprobe, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts) noexcept override;
    Status range(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                 size_t nprobe, float radius, RangeCollector *collector) noexcept override;

private:
    MultiBackendImpl &b_;
};

// ---- graphs: each object whole on one device -------------------------------------------------

class MultiGraph final : public Graph
{
public:
    ~MultiGraph() override;
    MultiBackendImpl *owner = nullptr;
    int dev = 0;
    Graph *inner = nullptr; // owned; deleted on its device's thread
    void sync()
    {
        n_ = inner->size();
        dim_ = inner->dim();
        degree_ = inner->degree();
        memory_ = inner->memory();
        pq_metric_ = inner->pq_metric();
    }
};

class MultiGraphBackend final : public GraphBackend
{
public:
    explicit MultiGraphBackend(MultiBackendImpl &b) : b_(b) {}
    Status create(const vs_graph_arrays &arrays, Graph **out) noexcept override;
    Status create_compressed(const vs_graph_arrays &arrays, const vs_graph_pq &pq,
                             const uint8_t *codes, Graph **out) noexcept override;
    Status search(const Graph *g, const vs_graph_search_params &params, const float *queries,
                  size_t nq, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts) noexcept override;

private:
    MultiBackendImpl &b_;
};

// ---- metric-space indexes: each object whole on one device ------------------------------------

class MultiMetric final : public MetricIndex
{
public:
    ~MultiMetric() override;
    MultiBackendImpl *owner = nullptr;
    int dev = 0;
    MetricIndex *inner = nullptr; // owned; deleted on its device's thread
    void sync()
    {
        type_ = inner->type();
        kind_ = inner->kind();
        metric_ = inner->metric();
        dim_ = inner->dim();
        size_ = inner->size();
    }
};

class MultiMetricBackend final : public MetricBackend
{
public:
    explicit MultiMetricBackend(MultiBackendImpl &b) : b_(b) {}
    Status create_list(const vs_lc &lc, MetricIndex **out) noexcept override;
    Status create_pivots(const vs_sss &sss, MetricIndex **out) noexcept override;
    Status create_flat(const vs_mspace &objects, MetricIndex **out) noexcept override;
    Status knn(const MetricIndex *index, const vs_mspace &queries, size_t k, int64_t *out_ids,
               float *out_dists, int64_t *out_counts) noexcept override;
    Status range(const MetricIndex *index, const vs_mspace &queries, double radius,
                 RangeCollector *collector) noexcept override;
    Status distances(const MetricIndex *flat, size_t from, const size_t *rows, size_t n,
                     double *out) noexcept override;

private:
    template <typename Make> Status create(MetricIndex **out, Make &&make) noexcept;
    MultiBackendImpl &b_;
};

// ---- the backend ----------------------------------------------------------------------------

class MultiBackendImpl final : public MultiBackend
{
public:
    MultiBackendImpl(const BackendConfig &base, const MultiConfig &mc);
    ~MultiBackendImpl() override;
    bool start(const BackendFactory &factory, std::string *err);

    // ---- MultiBackend ----

    int device_count() const noexcept override { return static_cast<int>(devs_.size()); }
    int live_devices() const noexcept override;
    Status device_info(int i, vs_device_info *out) noexcept override;
    void fail_device(int i, const std::string &why) noexcept override;
    vs_placement placement(const Dataset *ds) const noexcept override;

    // ---- Backend ----

    // Calls from several threads at once: a small replicated call takes the device with the
    // fewest calls in flight, so each lane of the caller can have a device of its own.
    int lanes() const noexcept override { return base_.lanes; }
    vs_backend_kind kind() const noexcept override;
    Status info(vs_context_info *out) noexcept override;
    Status kmeans(const float *data, size_t n, size_t dim, const vs_kmeans_params &params,
                  float *centroids, vs_kmeans_info *info) noexcept override;
    IvfpqBackend *ivfpq() noexcept override;
    GraphBackend *graph() noexcept override;
    MetricBackend *metric() noexcept override;
    // datasets (multi_datasets.cpp)
    Status dataset_create(size_t dim, vs_dtype dtype, Dataset **out) noexcept override;
    Status dataset_add(Dataset *ds, const float *vectors, const int64_t *ids,
                       size_t n) noexcept override;
    Status dataset_remove(Dataset *ds, const int64_t *ids, size_t n,
                          size_t *removed) noexcept override;
    Status dataset_subset(const Dataset *src, const int64_t *ids, size_t n,
                          Dataset **out) noexcept override;
    Status knn(const Dataset *ds, const float *queries, size_t nq, size_t k, vs_metric metric,
               const Subsets *subsets, int64_t *out_ids, float *out_dists,
               int64_t *out_counts) noexcept override;
    Status range(const Dataset *ds, const float *queries, size_t nq, float radius,
                 vs_metric metric, const Subsets *subsets,
                 RangeCollector *collector) noexcept override;

    // ---- shared with MultiIvfpqBackend and MultiGraphBackend ----

    // Runs f on device i's thread and waits, polling the caller's cancel callback meanwhile.
    template <typename F> Status run_one(size_t i, F &&f)
    {
        Status st;
        std::vector<Status *> out{&st};
        std::vector<std::function<Status()>> jobs{std::function<Status()>(std::forward<F>(f))};
        run_jobs({i}, jobs, out);
        return st;
    }

    // Device i's call: counted; a device error takes the device out.
    template <typename F> Status call(size_t i, F &&f)
    {
        Status st = run_one(i, std::forward<F>(f));
        note(i, st);
        return st;
    }

    size_t least_used();
    void check_device(size_t i);

    std::vector<Device> devs_;

private:
    void run_jobs(const std::vector<size_t> &devs, std::vector<std::function<Status()>> &jobs,
                  std::vector<Status *> &out);

    // Runs f on device i's own thread and waits (deleting its objects, whose memory a CUDA
    // backend frees on that device's streams).
    template <typename F> Status on_thread(size_t i, F &&f)
    {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        Status st;
        devs_[i].thread->post([&] {
            Status s = guarded([&] { f(); });
            std::lock_guard<std::mutex> lock(mu);
            st = std::move(s);
            done = true;
            cv.notify_all();
        });
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return done; });
        return st;
    }

    // f(p) on every part's device at once; the first error (device errors take devices out).
    template <typename F> Status run_parts(MultiDataset &m, F &&f)
    {
        std::vector<std::function<Status()>> jobs;
        std::vector<Status> st(m.parts.size());
        std::vector<Status *> out;
        std::vector<size_t> devs;
        for (size_t p = 0; p < m.parts.size(); p++)
        {
            jobs.push_back([&f, p] { return f(p); });
            out.push_back(&st[p]);
            devs.push_back(static_cast<size_t>(m.devs[p]));
        }
        run_jobs(devs, jobs, out);
        Status first;
        for (size_t p = 0; p < m.parts.size(); p++)
        {
            note(static_cast<size_t>(m.devs[p]), st[p]);
            if (first.ok() && !st[p].ok())
                first = st[p];
        }
        return first;
    }

    // A replicated call: queries split over the parts when there are many, else one part in
    // turn.  f(p, q0, qn) runs part p on queries [q0, q0 + qn).
    template <typename F> void split_queries(MultiDataset &m, size_t nq, F &&f)
    {
        const size_t np = m.parts.size();
        const size_t per = (nq + np - 1) / np;
        if (np == 1 || nq < kSplitMin)
        {
            // the part whose device runs the fewest calls now (lanes), ties in turn
            size_t p = next_++ % np;
            for (size_t i = 1; i < np; i++)
            {
                size_t o = (p + i) % np;
                if (inflight_[static_cast<size_t>(m.devs[o])] <
                    inflight_[static_cast<size_t>(m.devs[p])])
                    p = o;
            }
            throw_if(call(static_cast<size_t>(m.devs[p]), [&] { return f(p, 0, nq); }));
            return;
        }
        std::vector<std::function<Status()>> jobs;
        std::vector<Status> st(np);
        std::vector<Status *> out;
        std::vector<size_t> devs;
        for (size_t p = 0; p < np && p * per < nq; p++)
        {
            size_t q0 = p * per, qn = std::min(per, nq - q0);
            jobs.push_back([&f, p, q0, qn] { return f(p, q0, qn); });
            out.push_back(&st[p]);
            devs.push_back(static_cast<size_t>(m.devs[p]));
        }
        run_jobs(devs, jobs, out);
        Status first;
        for (size_t j = 0; j < devs.size(); j++)
        {
            note(devs[j], st[j]);
            if (first.ok() && !st[j].ok())
                first = st[j];
        }
        throw_if(first);
    }

    void note(size_t i, const Status &st);
    void lose_device(size_t i, const std::string &why); // under devs_mu_

    static void throw_if(const Status &st)
    {
        if (!st.ok())
            throw Error(st.code, st.message);
    }

    void check_alive(const MultiDataset &m);
    std::vector<size_t> live_list() const;
    vs_placement decide(const MultiDataset &m, size_t n);
    void resize(MultiDataset &m);
    // A new dataset whose parts were made with status st: counted on its devices and sized, or
    // (st failed) its parts destroyed and st thrown.
    MultiDataset *adopt_parts(std::unique_ptr<MultiDataset> m, const Status &st);

public:
    // Objects going away: their parts or inner objects deleted on their devices' threads.
    void destroy_parts(MultiDataset &m);
    void dataset_destroyed(MultiDataset &m);
    void ivfpq_destroyed(MultiIvfpq &m);
    void graph_destroyed(MultiGraph &m);
    void metric_destroyed(MultiMetric &m);

private:
    static constexpr size_t kSplitMin = 256; // fewer queries: one device reads the data once
    BackendConfig base_;
    MultiConfig mc_;
    CancelState cancel_;
    MultiIvfpqBackend ivfpq_;
    MultiGraphBackend graph_;
    MultiMetricBackend metric_;
    // Calls may come from several threads (lanes): the turn, the calls each device runs now, and
    // devs_mu_ over the devices' counters and losses (alive is read without it: a call that
    // reads it stale fails on the lost device, as a call already under way there does).
    std::atomic<size_t> next_{0};
    std::unique_ptr<std::atomic<int>[]> inflight_;
    std::mutex devs_mu_;
};

} // namespace vs::multi

#endif
