// A minimal parallel loop for the CPU backend: items [0, n) handed out one at a time to up to
// `threads` threads, the calling thread included.  Only the calling thread polls the cancel
// callback.  The first exception stops the loop and is rethrown on the calling thread.
#ifndef VSEARCH_CPU_PARALLEL_H
#define VSEARCH_CPU_PARALLEL_H

#include "engine/backend.h"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vs {

template <typename F>
void parallel_for(size_t n, int threads, const BackendConfig &config, F &&fn)
{
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    std::exception_ptr error;
    std::mutex mu;
    auto record = [&](std::exception_ptr e) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error)
            error = e;
        stop = true;
    };
    auto work = [&](bool caller) {
        try
        {
            for (;;)
            {
                if (stop.load(std::memory_order_relaxed))
                    return;
                if (caller && config.cancel && config.cancel(config.cancel_arg))
                    throw Error(VS_CANCELLED, "cancelled");
                size_t i = next.fetch_add(1);
                if (i >= n)
                    return;
                fn(i);
            }
        }
        catch (...)
        {
            record(std::current_exception());
        }
    };
    size_t nt = threads > 1 ? static_cast<size_t>(threads) : 1;
    if (nt > n)
        nt = n;
    std::vector<std::thread> pool;
    try
    {
        for (size_t t = 1; t < nt; t++)
            pool.emplace_back(work, false);
    }
    catch (...)
    {
        record(std::current_exception());
    }
    work(true);
    for (auto &t : pool)
        t.join();
    if (error)
        std::rethrow_exception(error);
}

// Threads kept for many short parallel steps (parallel_for starts its threads per call, which
// costs more than a step of a few hundred kilobytes): run(fn) calls fn(t) for t in [0, size()),
// t = 0 on the calling thread, and returns when every call has; the first exception is rethrown
// on the calling thread.
class Crew
{
public:
    explicit Crew(int threads)
    {
        try
        {
            for (int t = 1; t < threads; t++)
                pool_.emplace_back([this, t] { serve(t); });
        }
        catch (...)
        {
            stop();
            throw;
        }
    }
    ~Crew() { stop(); }
    Crew(const Crew &) = delete;
    Crew &operator=(const Crew &) = delete;

    int size() const { return static_cast<int>(pool_.size()) + 1; }

    void run(const std::function<void(int)> &fn)
    {
        {
            std::lock_guard<std::mutex> lock(mu_);
            fn_ = &fn;
            error_ = nullptr;
            pending_ = pool_.size();
            round_++;
        }
        go_.notify_all();
        try
        {
            fn(0);
        }
        catch (...)
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (!error_)
                error_ = std::current_exception();
        }
        std::unique_lock<std::mutex> lock(mu_);
        done_.wait(lock, [this] { return pending_ == 0; });
        fn_ = nullptr;
        if (error_)
            std::rethrow_exception(error_);
    }

private:
    void serve(int t)
    {
        uint64_t seen = 0;
        for (;;)
        {
            const std::function<void(int)> *fn;
            {
                std::unique_lock<std::mutex> lock(mu_);
                go_.wait(lock, [&] { return quit_ || round_ != seen; });
                if (quit_)
                    return;
                seen = round_;
                fn = fn_;
            }
            std::exception_ptr err;
            try
            {
                (*fn)(t);
            }
            catch (...)
            {
                err = std::current_exception();
            }
            std::lock_guard<std::mutex> lock(mu_);
            if (err && !error_)
                error_ = err;
            if (--pending_ == 0)
                done_.notify_one();
        }
    }
    void stop()
    {
        {
            std::lock_guard<std::mutex> lock(mu_);
            quit_ = true;
        }
        go_.notify_all();
        for (auto &t : pool_)
            t.join();
        pool_.clear();
    }

    std::vector<std::thread> pool_;
    std::mutex mu_;
    std::condition_variable go_, done_;
    const std::function<void(int)> *fn_ = nullptr;
    std::exception_ptr error_;
    size_t pending_ = 0;
    uint64_t round_ = 0;
    bool quit_ = false;
};

} // namespace vs

#endif
