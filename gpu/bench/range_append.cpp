// Host cost of a range call's results: the collector's appends (engine/range_result.h) of one
// call's chunks as the CUDA backend hands them over (a chunk of 256 queries per step, read from
// one reused, already touched buffer as from its pinned buffer), then the hand-over of the
// arrays (taken over, or copied into a caller's allocator as the extension's palloc) and their
// release.  Side by side, interleaved run by run:
//   before       the collector before its result blocks: malloc'd arrays grown by realloc,
//                appends through copy_parallel (a thread per 4 MiB, started per append);
//   collector    the collector (result blocks, appends split over kept threads): cold (nothing
//                kept, VSEARCH_HOST_KEEP_MB=0: fresh pages every call, as a first call), warm
//                (the blocks of the previous call's result kept and reused, the default, what
//                a worker repeating such calls gets), and cold with its mappings advised for
//                huge pages (VSEARCH_HOST_HUGEPAGES=1);
//   touched      the same copies into memory touched before the timing: the floor without
//                first touch.
//
//   vsearch_range_append_bench [--matches 16700000] [--steps 40] [--threads 0] [--runs 5]
//
// Defaults: the 0.1 % range case of 10 000 queries over 1M rows (1.67e7 matches in 40 steps);
// the 1 % case is --matches 132000000.  Prints medians (ms), GB/s of 12 bytes per match and each
// case's time over the "before" one.
#include "engine/host_common.h"
#include "engine/range_result.h"
#include "engine/result_memory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Times
{
    std::vector<double> append, deliver, release;
};

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// A call's steps: `steps` chunks of `per_query` x 256 queries from one source buffer.
struct Call
{
    size_t steps, qn = 256, per_query;
    std::vector<int64_t> counts, ids;
    std::vector<float> dists;
    Call(size_t matches, size_t nsteps) : steps(nsteps), per_query(matches / nsteps / 256)
    {
        counts.assign(qn, static_cast<int64_t>(per_query));
        ids.resize(qn * per_query);
        dists.resize(qn * per_query);
        for (size_t i = 0; i < ids.size(); i++)
        {
            ids[i] = static_cast<int64_t>(i * 7);
            dists[i] = static_cast<float>(i);
        }
    }
    size_t chunk() const { return qn * per_query; }
    size_t nq() const { return steps * qn; }
};

// The collector before result blocks: realloc growth, copy_parallel appends.
void run_before(const Call &c, Times &t)
{
    double t0 = now();
    int64_t *ids = nullptr;
    float *dists = nullptr;
    size_t size = 0, cap = 0;
    for (size_t s = 0; s < c.steps; s++)
    {
        const size_t total = c.chunk();
        if (size + total > cap)
        {
            cap = std::max({size + total, cap * 2, size_t{1024}});
            ids = static_cast<int64_t *>(std::realloc(ids, cap * sizeof(int64_t)));
            dists = static_cast<float *>(std::realloc(dists, cap * sizeof(float)));
            if (!ids || !dists)
            {
                std::fprintf(stderr, "out of memory\n");
                std::exit(1);
            }
        }
        int64_t *to_ids = ids + size;
        float *to_d = dists + size;
        vs::copy_parallel(total, 12, [&](size_t b, size_t e) {
            std::memcpy(to_ids + b, c.ids.data() + b, (e - b) * sizeof(int64_t));
            std::memcpy(to_d + b, c.dists.data() + b, (e - b) * sizeof(float));
        });
        size += total;
    }
    double t1 = now();
    ids = static_cast<int64_t *>(std::realloc(ids, size * sizeof(int64_t)));
    dists = static_cast<float *>(std::realloc(dists, size * sizeof(float)));
    double t2 = now();
    std::free(ids);
    std::free(dists);
    double t3 = now();
    t.append.push_back(t1 - t0);
    t.deliver.push_back(t2 - t1);
    t.release.push_back(t3 - t2);
}

void *caller_alloc(void *, size_t bytes) { return std::malloc(bytes); }

void run_collector(const Call &c, int threads, bool caller, vs_context *ctx, Times &t)
{
    double t0 = now();
    vs::api::Collector col(c.nq(), threads);
    for (size_t s = 0; s < c.steps; s++)
        col.add(s * c.qn, c.qn, c.counts.data(), c.ids.data(), c.dists.data());
    double t1 = now();
    vs_range_result r;
    vs::api::clear_range_out(ctx, &r);
    if (vs::api::deliver_range(ctx, col, c.nq(), caller ? caller_alloc : nullptr, nullptr, &r) !=
        VS_OK)
    {
        std::fprintf(stderr, "delivery failed: %s\n", vs_last_error(ctx));
        std::exit(1);
    }
    double t2 = now();
    if (caller)
    {
        std::free(r.offsets);
        std::free(r.ids);
        std::free(r.distances);
    }
    else
        vs_range_result_free(&r);
    double t3 = now();
    t.append.push_back(t1 - t0);
    t.deliver.push_back(t2 - t1);
    t.release.push_back(t3 - t2);
}

// The collector's copies into arrays touched before the timing.
void run_touched(const Call &c, int threads, int64_t *ids, float *dists, Times &t)
{
    vs::ParallelCopy copy(threads);
    double t0 = now();
    for (size_t s = 0; s < c.steps; s++)
    {
        int64_t *to_ids = ids + s * c.chunk();
        float *to_d = dists + s * c.chunk();
        copy.run(c.chunk(), 12, [&](size_t b, size_t e) {
            std::memcpy(to_ids + b, c.ids.data() + b, (e - b) * sizeof(int64_t));
            std::memcpy(to_d + b, c.dists.data() + b, (e - b) * sizeof(float));
        });
    }
    t.append.push_back(now() - t0);
    t.deliver.push_back(0);
    t.release.push_back(0);
}

} // namespace

int main(int argc, char **argv)
{
    size_t matches = 16700000, steps = 40;
    int threads = 0, runs = 5;
    for (int i = 1; i + 1 < argc; i += 2)
    {
        std::string a = argv[i];
        if (a == "--matches")
            matches = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--steps")
            steps = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--threads")
            threads = std::atoi(argv[i + 1]);
        else if (a == "--runs")
            runs = std::atoi(argv[i + 1]);
        else
        {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (steps == 0 || matches / steps / 256 == 0 || runs < 1)
    {
        std::fprintf(stderr, "need --matches >= 256 x --steps, --runs >= 1\n");
        return 2;
    }
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    vs_context *ctx = nullptr;
    char err[256];
    if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
    {
        std::fprintf(stderr, "context: %s\n", err);
        return 1;
    }
    Call c(matches, steps);
    const size_t total = c.chunk() * steps;
    std::vector<int64_t> touched_ids(total, 1);
    std::vector<float> touched_d(total, 1.0f);
    // the warm case keeps within the caller's VSEARCH_HOST_KEEP_MB (default 1024)
    const char *keep_env = std::getenv("VSEARCH_HOST_KEEP_MB");
    const std::string keep = keep_env ? keep_env : "";
    auto keep_default = [&] {
        if (keep.empty())
            unsetenv("VSEARCH_HOST_KEEP_MB");
        else
            setenv("VSEARCH_HOST_KEEP_MB", keep.c_str(), 1);
    };
    Times before, cold, warm, huge, caller, touched;
    size_t kept = 0;
    for (int r = 0; r < runs; r++)
    {
        run_before(c, before);
        unsetenv("VSEARCH_HOST_HUGEPAGES");
        setenv("VSEARCH_HOST_KEEP_MB", "0", 1);
        run_collector(c, threads, false, ctx, cold);
        run_collector(c, threads, true, ctx, caller);
        setenv("VSEARCH_HOST_HUGEPAGES", "1", 1);
        run_collector(c, threads, false, ctx, huge);
        unsetenv("VSEARCH_HOST_HUGEPAGES");
        keep_default();
        Times first; // fills the kept set
        run_collector(c, threads, false, ctx, first);
        run_collector(c, threads, false, ctx, warm);
        kept = vs::result_kept_bytes();
        run_touched(c, threads, touched_ids.data(), touched_d.data(), touched);
    }
    std::printf("%zu matches (%.1f MB) in %zu steps of %zu, %d runs, threads %d (0: hardware, "
                "at most 8)\n",
                total, total * 12 / 1e6, steps, c.chunk(), runs, threads);
    std::printf("%-44s %10s %10s %10s %10s %8s\n", "case", "append ms", "deliver ms",
                "free ms", "GB/s", "x before");
    const double base = median(before.append) + median(before.deliver) + median(before.release);
    auto line = [&](const char *name, const Times &t) {
        const double a = median(t.append), d = median(t.deliver), f = median(t.release);
        std::printf("%-44s %10.2f %10.2f %10.2f %10.2f %8.3f\n", name, a * 1e3, d * 1e3, f * 1e3,
                    total * 12 / 1e9 / (a + d), (a + d + f) / base);
    };
    line("before (realloc, copy_parallel)", before);
    line("collector, taken over, cold", cold);
    line("collector, taken over, warm (kept blocks)", warm);
    line("collector, taken over, cold, huge pages", huge);
    line("collector, caller's allocator (malloc), cold", caller);
    line("copies into touched memory (floor)", touched);
    std::printf("kept after a warm call: %.1f MB (VSEARCH_HOST_KEEP_MB=%s)\n", kept / 1e6,
                keep.empty() ? "1024, the default" : keep.c_str());
    vs_context_destroy(ctx);
    return 0;
}
