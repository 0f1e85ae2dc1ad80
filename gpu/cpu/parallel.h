// A minimal parallel loop for the CPU backend: items [0, n) handed out one at a time to up to
// `threads` threads, the calling thread included.  Only the calling thread polls the cancel
// callback.  The first exception stops the loop and is rethrown on the calling thread.
#ifndef VSEARCH_CPU_PARALLEL_H
#define VSEARCH_CPU_PARALLEL_H

#include "engine/backend.h"

#include <atomic>
#include <cstddef>
#include <exception>
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

} // namespace vs

#endif
