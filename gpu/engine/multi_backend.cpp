// Several devices behind one context (engine/multi_backend.h): device threads, datasets replicated
// or sharded, exact merges of per-device answers, IVF-PQ and graph objects placed whole, device
// loss.
#include "engine/multi_backend.h"

#include "engine/graph_backend.h"
#include "engine/metric_backend.h"
#include "engine/ivfpq_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace vs {
namespace {

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
thread_local std::atomic<bool> *CancelState::current = nullptr;
thread_local bool CancelState::caller = false;

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

MultiDataset &as_multi(const Dataset *ds)
{
    auto *m = dynamic_cast<const MultiDataset *>(ds);
    if (!m)
        throw Error(VS_INVALID_ARGUMENT, "dataset belongs to another backend");
    return const_cast<MultiDataset &>(*m);
}

// The shard of an id among n (a mix of its bits: heap-derived ids are far from uniform).
size_t shard_of(int64_t id, size_t n)
{
    uint64_t x = static_cast<uint64_t>(id);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<size_t>(x % n);
}

// Range matches of one device, kept per query (queries [q0, q0 + n) of the call).
class QueryCollector final : public RangeCollector
{
public:
    explicit QueryCollector(size_t nq) : ids(nq), dists(nq) {}
    void add(size_t q0, size_t nq, const int64_t *counts, const int64_t *id,
             const float *d) override
    {
        size_t at = 0;
        for (size_t i = 0; i < nq; i++)
        {
            size_t c = static_cast<size_t>(counts[i]);
            ids[q0 + i].insert(ids[q0 + i].end(), id + at, id + at + c);
            dists[q0 + i].insert(dists[q0 + i].end(), d + at, d + at + c);
            at += c;
        }
    }
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<float>> dists;
};

// Delivers per-query lists to the caller's collector in blocks of queries; each query's matches
// are the merge by id of its lists in the given collectors (one list each when not sharded).
void deliver(const std::vector<QueryCollector *> &from, const std::vector<size_t> &first_query,
             size_t nq, RangeCollector *to)
{
    const size_t block = 1024;
    std::vector<int64_t> counts, ids;
    std::vector<float> dists;
    for (size_t q0 = 0; q0 < nq; q0 += block)
    {
        size_t qn = std::min(block, nq - q0);
        counts.assign(qn, 0);
        ids.clear();
        dists.clear();
        for (size_t i = 0; i < qn; i++)
        {
            size_t q = q0 + i;
            std::vector<std::pair<const QueryCollector *, size_t>> lists;
            for (size_t p = 0; p < from.size(); p++)
                if (q >= first_query[p] && q - first_query[p] < from[p]->ids.size())
                    lists.push_back({from[p], q - first_query[p]});
            std::vector<size_t> pos(lists.size(), 0);
            for (;;)
            {
                size_t best = lists.size();
                for (size_t l = 0; l < lists.size(); l++)
                {
                    const auto &v = lists[l].first->ids[lists[l].second];
                    if (pos[l] < v.size() &&
                        (best == lists.size() ||
                         v[pos[l]] < lists[best].first->ids[lists[best].second][pos[best]]))
                        best = l;
                }
                if (best == lists.size())
                    break;
                const QueryCollector *c = lists[best].first;
                size_t lq = lists[best].second;
                ids.push_back(c->ids[lq][pos[best]]);
                dists.push_back(c->dists[lq][pos[best]]);
                pos[best]++;
                counts[i]++;
            }
        }
        to->add(q0, qn, counts.data(), ids.data(), dists.data());
    }
}

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

const MultiIvfpq &as_multi_ivfpq(const Ivfpq *ivf)
{
    auto *m = dynamic_cast<const MultiIvfpq *>(ivf);
    if (!m)
        throw Error(VS_INVALID_ARGUMENT, "IVF-PQ object belongs to another backend");
    return *m;
}

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

const MultiGraph &as_multi_graph(const Graph *g)
{
    auto *m = dynamic_cast<const MultiGraph *>(g);
    if (!m)
        throw Error(VS_INVALID_ARGUMENT, "graph object belongs to another backend");
    return *m;
}

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

const MultiMetric &as_multi_metric(const MetricIndex *m)
{
    auto *mm = dynamic_cast<const MultiMetric *>(m);
    if (!mm)
        throw Error(VS_INVALID_ARGUMENT, "metric index belongs to another backend");
    return *mm;
}

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
    MultiBackendImpl(const BackendConfig &base, const MultiConfig &mc)
        : base_(base), mc_(mc), ivfpq_(*this), graph_(*this), metric_(*this)
    {
        if (mc_.shard_min_bytes == 0)
            mc_.shard_min_bytes = size_t{1} << 30;
        cancel_.user = base.cancel;
        cancel_.user_arg = base.cancel_arg;
    }

    ~MultiBackendImpl() override
    {
        // Objects are gone (the front end releases them first); the backends go on their threads.
        for (size_t i = 0; i < devs_.size(); i++)
            if (devs_[i].backend)
                on_thread(i, [&] { devs_[i].backend.reset(); });
    }

    bool start(const BackendFactory &factory, std::string *err)
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

    // ---- MultiBackend ----

    int device_count() const noexcept override { return static_cast<int>(devs_.size()); }
    int live_devices() const noexcept override
    {
        int n = 0;
        for (const Device &d : devs_)
            n += d.alive;
        return n;
    }
    Status device_info(int i, vs_device_info *out) noexcept override
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
    void fail_device(int i, const std::string &why) noexcept override
    {
        if (i >= 0 && static_cast<size_t>(i) < devs_.size())
        {
            std::lock_guard<std::mutex> lock(devs_mu_);
            lose_device(static_cast<size_t>(i), why);
        }
    }
    vs_placement placement(const Dataset *ds) const noexcept override
    {
        auto *m = dynamic_cast<const MultiDataset *>(ds);
        return m ? m->placement : VS_PLACEMENT_AUTO;
    }

    // ---- Backend ----

    // Calls from several threads at once: a small replicated call takes the device with the
    // fewest calls in flight, so each lane of the caller can have a device of its own.
    int lanes() const noexcept override { return base_.lanes; }

    vs_backend_kind kind() const noexcept override
    {
        for (const Device &d : devs_)
            if (d.backend)
                return d.backend->kind();
        return VS_BACKEND_CPU;
    }

    Status info(vs_context_info *out) noexcept override
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

    Status dataset_create(size_t dim, vs_dtype dtype, Dataset **out) noexcept override
    {
        return guarded([&] {
            std::unique_ptr<MultiDataset> m(new MultiDataset(dim, dtype));
            std::vector<size_t> live = live_list();
            if (live.empty())
                throw Error(VS_DEVICE_ERROR, "every device was lost");
            m->parts.assign(live.size(), nullptr);
            m->devs.assign(live.begin(), live.end());
            Status st = run_parts(*m, [&](size_t p) {
                return devs_[m->devs[p]].backend->dataset_create(dim, dtype, &m->parts[p]);
            });
            if (!st.ok())
            {
                destroy_parts(*m);
                throw Error(st.code, st.message);
            }
            for (int d : m->devs)
                devs_[static_cast<size_t>(d)].datasets++;
            m->owner = this;
            *out = m.release();
        });
    }

    Status dataset_add(Dataset *ds, const float *vectors, const int64_t *ids,
                       size_t n) noexcept override
    {
        return guarded([&] {
            MultiDataset &m = as_multi(ds);
            check_alive(m);
            if (n == 0)
                return;
            if (m.placement == VS_PLACEMENT_AUTO)
                m.placement = decide(m, n);
            Status st;
            if (m.placement == VS_PLACEMENT_REPLICATED)
                st = run_parts(m, [&](size_t p) {
                    return devs_[m.devs[p]].backend->dataset_add(m.parts[p], vectors, ids, n);
                });
            else
                st = run_parts(m, [&](size_t p) {
                    std::vector<float> v;
                    std::vector<int64_t> id;
                    const size_t d = m.dim();
                    for (size_t r = 0; r < n; r++)
                        if (shard_of(ids[r], m.parts.size()) == p)
                        {
                            id.push_back(ids[r]);
                            v.insert(v.end(), vectors + r * d, vectors + (r + 1) * d);
                        }
                    return devs_[m.devs[p]].backend->dataset_add(m.parts[p], v.data(), id.data(),
                                                                 id.size());
                });
            resize(m);
            throw_if(st);
        });
    }

    Status dataset_remove(Dataset *ds, const int64_t *ids, size_t n,
                          size_t *removed) noexcept override
    {
        return guarded([&] {
            MultiDataset &m = as_multi(ds);
            check_alive(m);
            std::vector<size_t> got(m.parts.size(), 0);
            Status st = run_parts(m, [&](size_t p) {
                return devs_[m.devs[p]].backend->dataset_remove(m.parts[p], ids, n, &got[p]);
            });
            resize(m);
            throw_if(st);
            if (removed)
            {
                // a replica removes what every other one does; shards remove disjoint rows
                *removed = got[0];
                if (m.placement == VS_PLACEMENT_SHARDED)
                    for (size_t p = 1; p < got.size(); p++)
                        *removed += got[p];
            }
        });
    }

    Status knn(const Dataset *ds, const float *queries, size_t nq, size_t k, vs_metric metric,
               const Subsets *subsets, int64_t *out_ids, float *out_dists,
               int64_t *out_counts) noexcept override
    {
        return guarded([&] {
            MultiDataset &m = as_multi(ds);
            check_alive(m);
            if (m.placement != VS_PLACEMENT_SHARDED)
            {
                split_queries(m, nq, [&](size_t p, size_t q0, size_t qn) {
                    Subsets s{};
                    if (subsets)
                        s = Subsets{subsets->offsets + q0, subsets->ids};
                    return devs_[m.devs[p]].backend->knn(
                        m.parts[p], queries + q0 * m.dim(), qn, k, metric,
                        subsets ? &s : nullptr, out_ids + q0 * k, out_dists + q0 * k,
                        out_counts ? out_counts + q0 : nullptr);
                });
                return;
            }
            const size_t np = m.parts.size();
            std::vector<std::vector<int64_t>> ids(np), counts(np);
            std::vector<std::vector<float>> dists(np);
            throw_if(run_parts(m, [&](size_t p) {
                ids[p].resize(nq * k);
                dists[p].resize(nq * k);
                counts[p].resize(nq);
                return devs_[m.devs[p]].backend->knn(m.parts[p], queries, nq, k, metric, subsets,
                                                     ids[p].data(), dists[p].data(),
                                                     counts[p].data());
            }));
            // Each shard's list is in (distance, id) order, the engine's order: merge the heads.
            std::vector<size_t> pos(np);
            for (size_t q = 0; q < nq; q++)
            {
                std::fill(pos.begin(), pos.end(), 0);
                size_t got = 0;
                for (; got < k; got++)
                {
                    size_t best = np;
                    for (size_t p = 0; p < np; p++)
                    {
                        if (pos[p] >= static_cast<size_t>(counts[p][q]))
                            continue;
                        size_t a = q * k + pos[p];
                        if (best == np)
                        {
                            best = p;
                            continue;
                        }
                        size_t b = q * k + pos[best];
                        if (dists[p][a] < dists[best][b] ||
                            (dists[p][a] == dists[best][b] && ids[p][a] < ids[best][b]))
                            best = p;
                    }
                    if (best == np)
                        break;
                    out_ids[q * k + got] = ids[best][q * k + pos[best]];
                    out_dists[q * k + got] = dists[best][q * k + pos[best]];
                    pos[best]++;
                }
                if (out_counts)
                    out_counts[q] = static_cast<int64_t>(got);
                for (size_t i = got; i < k; i++)
                {
                    out_ids[q * k + i] = -1;
                    out_dists[q * k + i] = INFINITY;
                }
            }
        });
    }

    Status range(const Dataset *ds, const float *queries, size_t nq, float radius,
                 vs_metric metric, const Subsets *subsets,
                 RangeCollector *collector) noexcept override
    {
        return guarded([&] {
            MultiDataset &m = as_multi(ds);
            check_alive(m);
            const size_t np = m.parts.size();
            std::vector<std::unique_ptr<QueryCollector>> got(np);
            std::vector<size_t> first(np, 0);
            if (m.placement != VS_PLACEMENT_SHARDED)
            {
                split_queries(m, nq, [&](size_t p, size_t q0, size_t qn) {
                    got[p].reset(new QueryCollector(qn));
                    first[p] = q0;
                    Subsets s{};
                    if (subsets)
                        s = Subsets{subsets->offsets + q0, subsets->ids};
                    return devs_[m.devs[p]].backend->range(m.parts[p], queries + q0 * m.dim(), qn,
                                                           radius, metric,
                                                           subsets ? &s : nullptr, got[p].get());
                });
            }
            else
            {
                throw_if(run_parts(m, [&](size_t p) {
                    got[p].reset(new QueryCollector(nq));
                    return devs_[m.devs[p]].backend->range(m.parts[p], queries, nq, radius, metric,
                                                           subsets, got[p].get());
                }));
            }
            std::vector<QueryCollector *> from;
            std::vector<size_t> from_first;
            for (size_t p = 0; p < np; p++)
                if (got[p])
                {
                    from.push_back(got[p].get());
                    from_first.push_back(first[p]);
                }
            deliver(from, from_first, nq, collector);
        });
    }

    Status kmeans(const float *data, size_t n, size_t dim, const vs_kmeans_params &params,
                  float *centroids, vs_kmeans_info *info) noexcept override
    {
        return guarded([&] {
            size_t d = least_used();
            throw_if(call(d, [&] {
                return devs_[d].backend->kmeans(data, n, dim, params, centroids, info);
            }));
        });
    }

    IvfpqBackend *ivfpq() noexcept override
    {
        for (const Device &d : devs_)
            if (d.backend && !d.backend->ivfpq())
                return nullptr;
        return &ivfpq_;
    }

    GraphBackend *graph() noexcept override
    {
        for (const Device &d : devs_)
            if (d.backend && !d.backend->graph())
                return nullptr;
        return &graph_;
    }

    MetricBackend *metric() noexcept override
    {
        for (const Device &d : devs_)
            if (d.backend && !d.backend->metric())
                return nullptr;
        return &metric_;
    }

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

    size_t least_used()
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

    void check_device(size_t i)
    {
        if (!devs_[i].alive)
            throw Error(VS_DEVICE_ERROR, "device " + std::to_string(devs_[i].ordinal) +
                                             " was lost (" + devs_[i].error +
                                             "); the object must be loaded again");
    }

    std::vector<Device> devs_;

private:
    // Runs jobs[j] on device devs[j], all at once: the first on the calling thread (a CUDA backend
    // makes its device current on entry), the others on their devices' threads; waits for all.
    void run_jobs(const std::vector<size_t> &devs, std::vector<std::function<Status()>> &jobs,
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

    void note(size_t i, const Status &st)
    {
        std::lock_guard<std::mutex> lock(devs_mu_);
        devs_[i].calls++;
        if (st.code == VS_DEVICE_ERROR)
            lose_device(i, st.message);
    }

    // Under devs_mu_.
    void lose_device(size_t i, const std::string &why)
    {
        if (devs_[i].alive)
        {
            devs_[i].alive = false;
            devs_[i].error = why;
        }
    }

    static void throw_if(const Status &st)
    {
        if (!st.ok())
            throw Error(st.code, st.message);
    }

    void check_alive(const MultiDataset &m)
    {
        for (int d : m.devs)
            check_device(static_cast<size_t>(d));
    }

    std::vector<size_t> live_list() const
    {
        std::vector<size_t> v;
        for (size_t i = 0; i < devs_.size(); i++)
            if (devs_[i].alive)
                v.push_back(i);
        return v;
    }

    vs_placement decide(const MultiDataset &m, size_t n)
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

    void resize(MultiDataset &m)
    {
        size_t n = 0;
        for (Dataset *p : m.parts)
            n = m.placement == VS_PLACEMENT_SHARDED ? n + p->size() : std::max(n, p->size());
        m.set_size(n);
    }

public:
    void destroy_parts(MultiDataset &m)
    {
        for (size_t p = 0; p < m.parts.size(); p++)
            if (m.parts[p])
            {
                size_t d = static_cast<size_t>(m.devs[p]);
                Dataset *part = m.parts[p];
                on_thread(d, [part] { delete part; });
                m.parts[p] = nullptr;
            }
    }
    void dataset_destroyed(MultiDataset &m)
    {
        for (int d : m.devs)
            devs_[static_cast<size_t>(d)].datasets--;
        destroy_parts(m);
    }
    void ivfpq_destroyed(MultiIvfpq &m)
    {
        size_t d = static_cast<size_t>(m.dev);
        Ivfpq *inner = m.inner;
        on_thread(d, [inner] { delete inner; });
        m.inner = nullptr;
        devs_[d].ivfpq_objects--;
    }
    void graph_destroyed(MultiGraph &m)
    {
        size_t d = static_cast<size_t>(m.dev);
        Graph *inner = m.inner;
        on_thread(d, [inner] { delete inner; });
        m.inner = nullptr;
    }
    void metric_destroyed(MultiMetric &m)
    {
        size_t d = static_cast<size_t>(m.dev);
        MetricIndex *inner = m.inner;
        on_thread(d, [inner] { delete inner; });
        m.inner = nullptr;
    }

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

MultiDataset::~MultiDataset()
{
    if (owner)
        owner->dataset_destroyed(*this);
}

MultiIvfpq::~MultiIvfpq()
{
    if (owner)
        owner->ivfpq_destroyed(*this);
}

// ---- MultiIvfpqBackend ----------------------------------------------------------------------

Status MultiIvfpqBackend::create(const vs_ivfpq_params &params, const float *centroids,
                                 const float *codebooks, Ivfpq **out) noexcept
{
    return guarded([&] {
        size_t d = b_.least_used();
        std::unique_ptr<MultiIvfpq> m(new MultiIvfpq);
        m->dev = static_cast<int>(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->create(params, centroids, codebooks, &m->inner);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
        m->sync();
        b_.devs_[d].ivfpq_objects++;
        m->owner = &b_;
        *out = m.release();
    });
}

Status MultiIvfpqBackend::encode(const Ivfpq *ivf, const float *vectors, size_t n, int32_t *lists,
                                 uint8_t *codes) noexcept
{
    return guarded([&] {
        const MultiIvfpq &m = as_multi_ivfpq(ivf);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->encode(m.inner, vectors, n, lists, codes);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiIvfpqBackend::add(Ivfpq *ivf, size_t list, const int64_t *ids, const uint8_t *codes,
                              size_t n) noexcept
{
    return guarded([&] {
        MultiIvfpq &m = const_cast<MultiIvfpq &>(as_multi_ivfpq(ivf));
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(
            d, [&] { return b_.devs_[d].backend->ivfpq()->add(m.inner, list, ids, codes, n); });
        m.sync();
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiIvfpqBackend::search(const Ivfpq *ivf, const float *queries, size_t nq,
                                 size_t probe_first, size_t nprobe, size_t k, int64_t *out_ids,
                                 float *out_dists, int64_t *out_counts) noexcept
{
    return guarded([&] {
        const MultiIvfpq &m = as_multi_ivfpq(ivf);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->search(m.inner, queries, nq, probe_first, nprobe,
                                                        k, out_ids, out_dists, out_counts);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiIvfpqBackend::range(const Ivfpq *ivf, const float *queries, size_t nq,
                                size_t probe_first, size_t nprobe, float radius,
                                RangeCollector *collector) noexcept
{
    return guarded([&] {
        const MultiIvfpq &m = as_multi_ivfpq(ivf);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->ivfpq()->range(m.inner, queries, nq, probe_first, nprobe,
                                                       radius, collector);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

// ---- MultiGraphBackend ----------------------------------------------------------------------

MultiGraph::~MultiGraph()
{
    if (owner)
        owner->graph_destroyed(*this);
}

// A graph object whole on the least used device, made there by make(device's GraphBackend, &inner).
template <typename Make> Status create_multi_graph(MultiBackendImpl &b, Graph **out, Make &&make)
{
    return guarded([&] {
        size_t d = b.least_used();
        std::unique_ptr<MultiGraph> m(new MultiGraph);
        m->dev = static_cast<int>(d);
        Status st = b.call(d, [&] { return make(b.devs_[d].backend->graph(), &m->inner); });
        if (!st.ok())
            throw Error(st.code, st.message);
        m->sync();
        m->owner = &b;
        *out = m.release();
    });
}

Status MultiGraphBackend::create(const vs_graph_arrays &arrays, Graph **out) noexcept
{
    return create_multi_graph(b_, out, [&](GraphBackend *gb, Graph **inner) {
        return gb->create(arrays, inner);
    });
}

Status MultiGraphBackend::create_compressed(const vs_graph_arrays &arrays, const vs_graph_pq &pq,
                                            const uint8_t *codes, Graph **out) noexcept
{
    return create_multi_graph(b_, out, [&](GraphBackend *gb, Graph **inner) {
        return gb->create_compressed(arrays, pq, codes, inner);
    });
}

Status MultiGraphBackend::search(const Graph *g, const vs_graph_search_params &params,
                                 const float *queries, size_t nq, size_t k, int64_t *out_ids,
                                 float *out_dists, int64_t *out_counts) noexcept
{
    return guarded([&] {
        const MultiGraph &m = as_multi_graph(g);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->graph()->search(m.inner, params, queries, nq, k, out_ids,
                                                        out_dists, out_counts);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

// ---- MultiMetricBackend ---------------------------------------------------------------------

MultiMetric::~MultiMetric()
{
    if (owner)
        owner->metric_destroyed(*this);
}

template <typename Make> Status MultiMetricBackend::create(MetricIndex **out, Make &&make) noexcept
{
    return guarded([&] {
        size_t d = b_.least_used();
        std::unique_ptr<MultiMetric> m(new MultiMetric);
        m->dev = static_cast<int>(d);
        Status st = b_.call(d, [&] { return make(b_.devs_[d].backend->metric(), &m->inner); });
        if (!st.ok())
            throw Error(st.code, st.message);
        m->sync();
        m->owner = &b_;
        *out = m.release();
    });
}

Status MultiMetricBackend::create_list(const vs_lc &lc, MetricIndex **out) noexcept
{
    return create(out, [&](MetricBackend *mb, MetricIndex **o) { return mb->create_list(lc, o); });
}

Status MultiMetricBackend::create_pivots(const vs_sss &sss, MetricIndex **out) noexcept
{
    return create(out,
                  [&](MetricBackend *mb, MetricIndex **o) { return mb->create_pivots(sss, o); });
}

Status MultiMetricBackend::create_flat(const vs_mspace &objects, MetricIndex **out) noexcept
{
    return create(out,
                  [&](MetricBackend *mb, MetricIndex **o) { return mb->create_flat(objects, o); });
}

Status MultiMetricBackend::knn(const MetricIndex *index, const vs_mspace &queries, size_t k,
                               int64_t *out_ids, float *out_dists, int64_t *out_counts) noexcept
{
    return guarded([&] {
        const MultiMetric &m = as_multi_metric(index);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->metric()->knn(m.inner, queries, k, out_ids, out_dists,
                                                      out_counts);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

Status MultiMetricBackend::distances(const MetricIndex *flat, size_t from, const size_t *rows,
                                     size_t n, double *out) noexcept
{
    return guarded([&] {
        const MultiMetric &m = as_multi_metric(flat);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->metric()->distances(m.inner, from, rows, n, out);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
    });
}

// The device's matches are collected on its thread and delivered from the caller's.
Status MultiMetricBackend::range(const MetricIndex *index, const vs_mspace &queries,
                                 double radius, RangeCollector *collector) noexcept
{
    return guarded([&] {
        const MultiMetric &m = as_multi_metric(index);
        size_t d = static_cast<size_t>(m.dev);
        b_.check_device(d);
        struct Buffer final : RangeCollector
        {
            std::vector<int64_t> counts, ids;
            std::vector<float> dists;
            void add(size_t, size_t nq, const int64_t *c, const int64_t *i,
                     const float *ds) override
            {
                size_t total = 0;
                for (size_t q = 0; q < nq; q++)
                    total += static_cast<size_t>(c[q]);
                counts.insert(counts.end(), c, c + nq);
                ids.insert(ids.end(), i, i + total);
                dists.insert(dists.end(), ds, ds + total);
            }
        } buf;
        Status st = b_.call(d, [&] {
            return b_.devs_[d].backend->metric()->range(m.inner, queries, radius, &buf);
        });
        if (!st.ok())
            throw Error(st.code, st.message);
        collector->add(0, queries.n, buf.counts.data(), buf.ids.data(), buf.dists.data());
    });
}

} // namespace

std::unique_ptr<MultiBackend> make_multi_backend(const BackendConfig &base, const MultiConfig &mc,
                                                 const BackendFactory &factory, std::string *err)
{
    std::unique_ptr<MultiBackendImpl> b(new MultiBackendImpl(base, mc));
    if (!b->start(factory, err))
        return nullptr;
    return b;
}

} // namespace vs
