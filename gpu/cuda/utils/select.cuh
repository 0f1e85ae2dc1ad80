// Warp-level buffered k-selection over 64-bit keys (engine/exact.h: distance image << 32 | row),
// after the "bits" design of Hanak's thesis: a running threshold (the current K'-th key) rejects
// almost every element with one compare and a ballot; survivors are appended to a shared-memory
// buffer (ballot compaction, no atomics); a full buffer is sorted (bitonic, in shared memory) and
// merged into the sorted top list (merge path by binary search), which lowers the threshold.
// K' and the buffer size are run-time values, so one instantiation serves every k up to 4096.
// Keys are unique (the row is in the low half), so ties are broken by row = id order.
#ifndef VSEARCH_CUDA_UTILS_SELECT_CUH
#define VSEARCH_CUDA_UTILS_SELECT_CUH

#include "engine/exact.h"

#include <cstdint>

namespace vs::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Ascending bitonic sort of n (a power of two >= 2) keys in shared memory by one warp.
__device__ __forceinline__ void warp_sort_smem(uint64_t *a, int n, int lane)
{
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1)
        {
            for (int i = lane; i < (n >> 1); i += 32)
            {
                int l = 2 * i - (i & (j - 1));
                int r = l + j;
                bool asc = (l & k) == 0;
                uint64_t x = a[l], y = a[r];
                if ((x > y) == asc)
                {
                    a[l] = y;
                    a[r] = x;
                }
            }
            __syncwarp();
        }
}

__device__ __forceinline__ int count_less(const uint64_t *a, int n, uint64_t v)
{
    int lo = 0, hi = n;
    while (lo < hi)
    {
        int mid = (lo + hi) >> 1;
        if (a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

__device__ __forceinline__ int count_leq(const uint64_t *a, int n, uint64_t v)
{
    int lo = 0, hi = n;
    while (lo < hi)
    {
        int mid = (lo + hi) >> 1;
        if (a[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// Shared-memory words one selector needs.
__host__ __device__ inline int warp_topk_words(int kp, int bcap) { return 2 * kp + bcap; }

// Buffer size for a K': large enough to amortise a merge, a power of two >= 32.
__host__ __device__ inline int warp_topk_bcap(int kp)
{
    return kp <= 128 ? 64 : (kp <= 512 ? 128 : (kp <= 2048 ? 256 : 512));
}

// The state that must survive between uses when a warp serves several selectors in turn.
struct WarpTopKState
{
    uint64_t thr;
    int count;
    int flipped; // the current top list is the second half
};

struct WarpTopK
{
    uint64_t *base; // 2 * kp + bcap words: two top lists (current and scratch) and the buffer
    uint64_t *top, *tmp, *buf;
    int kp, bcap, count;
    uint64_t thr0, thr; // keys >= thr are rejected; thr <= thr0 always

    // Empty selector with a rejection threshold thr0 (kNoKey: none).
    __device__ void init(uint64_t *smem, int kp_, int bcap_, uint64_t thr0_, int lane)
    {
        base = smem;
        kp = kp_;
        bcap = bcap_;
        top = smem;
        tmp = smem + kp;
        buf = smem + 2 * kp;
        count = 0;
        thr0 = thr = thr0_;
        for (int i = lane; i < kp; i += 32)
            top[i] = kNoKey;
        __syncwarp();
    }

    // Starts from a sorted list of kp keys (e.g. the state of earlier tiles).
    __device__ void load(const uint64_t *sorted, int lane)
    {
        for (int i = lane; i < kp; i += 32)
            top[i] = sorted[i];
        __syncwarp();
        uint64_t last = top[kp - 1];
        thr = last < thr0 ? last : thr0;
    }

    __device__ WarpTopKState save() const { return {thr, count, top != base}; }
    __device__ void restore(uint64_t *smem, int kp_, int bcap_, uint64_t thr0_, WarpTopKState s)
    {
        base = smem;
        kp = kp_;
        bcap = bcap_;
        top = s.flipped ? smem + kp : smem;
        tmp = s.flipped ? smem : smem + kp;
        buf = smem + 2 * kp;
        count = s.count;
        thr0 = thr0_;
        thr = s.thr;
    }

    // Every lane of the warp calls add together (kNoKey for "nothing").
    __device__ __forceinline__ void add(uint64_t key, int lane)
    {
        bool pass = key < thr;
        unsigned m = __ballot_sync(kFullMask, pass);
        if (m == 0)
            return;
        int c = __popc(m);
        if (count + c > bcap)
        {
            flush(lane);
            pass = key < thr;
            m = __ballot_sync(kFullMask, pass);
            if (m == 0)
                return;
            c = __popc(m);
        }
        if (pass)
            buf[count + __popc(m & ((1u << lane) - 1u))] = key;
        count += c;
    }

    // Adds list[from .. len) of a list sorted ascending, stopping at the first 32 keys that all
    // fail the threshold (nothing after them can pass).
    __device__ void add_sorted(const uint64_t *list, int from, int len, int lane)
    {
        for (int i = from; i < len; i += 32)
        {
            const uint64_t key = i + lane < len ? list[i + lane] : kNoKey;
            if (__all_sync(kFullMask, key >= thr))
                break;
            add(key, lane);
        }
    }

    // Merges the buffer into the top list.
    __device__ void flush(int lane)
    {
        if (count == 0)
            return;
        __syncwarp();
        int nb = count;
        int n2 = 32;
        while (n2 < nb)
            n2 <<= 1;
        for (int i = nb + lane; i < n2; i += 32)
            buf[i] = kNoKey;
        __syncwarp();
        warp_sort_smem(buf, n2, lane);
        for (int i = lane; i < kp; i += 32)
        {
            uint64_t a = top[i];
            int pos = i + count_less(buf, nb, a);
            if (pos < kp)
                tmp[pos] = a;
        }
        for (int j = lane; j < nb; j += 32)
        {
            uint64_t b = buf[j];
            int pos = j + count_leq(top, kp, b);
            if (pos < kp)
                tmp[pos] = b;
        }
        __syncwarp();
        uint64_t *t = top;
        top = tmp;
        tmp = t;
        count = 0;
        uint64_t last = top[kp - 1];
        thr = last < thr0 ? last : thr0;
        __syncwarp();
    }

    // Flushes and writes the sorted top list (kp keys, kNoKey padded) to out.
    __device__ void finish(uint64_t *out, int lane)
    {
        flush(lane);
        for (int i = lane; i < kp; i += 32)
            out[i] = top[i];
    }
};

} // namespace vs::cuda

#endif
