#!/usr/bin/python3
"""Faiss CPU baseline for vs_ivfpq (Debian's python3-faiss, run with /usr/bin/python3): the same
IVF-PQ shape on the same data, timed in this process.

    faiss_baseline.py DATASET --nq NQ --lists L --m M [--nbits 8] [--train-n N]
                      [--probes 1,2,4] [--rerank 0,10,50] [--single-q 200] [--threads T]
                      [--gt DIR] --out results.json

Build: IndexIVFPQ (L2, residuals, nbits) trained on a seeded random sample of --train-n base rows
(default: every row), then every row added; train and add seconds.  Search, per (nprobe, rerank):
rerank 0 is the IVF-PQ estimates alone; rerank R wraps the index in IndexRefineFlat with k_factor
R / 10 (the R best estimates re-ranked with exact float distances, as vs_ivfpq's rerank setting
does).  Batch: all NQ queries in one search call on --threads threads (default: every core), median
of 3; single: the first --single-q queries one search call each on one thread (wall and process
CPU time per query).  Recall@10 is
tie-aware against the harness's cached ground truth (bench/groundtruth.py) when it exists, else
float64 numpy brute force.  Writes JSON: build seconds and one row per point.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import datasets as D  # noqa: E402
import groundtruth as GT  # noqa: E402


def ints(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--lists", type=int, required=True)
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--nbits", type=int, default=8)
    ap.add_argument("--train-n", type=int, default=0)
    ap.add_argument("--probes", type=ints, default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--rerank", type=ints, default=[0, 10, 50, 200])
    ap.add_argument("--single-q", type=int, default=200)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import faiss  # Debian: python3-faiss

    meta = D.prepare(a.dataset)
    base = np.ascontiguousarray(D.load(meta, "base"), dtype=np.float32)
    nq = min(a.nq, meta["nq"])
    queries = np.ascontiguousarray(D.load(meta, "query", nq), dtype=np.float32)
    n, d, k = base.shape[0], base.shape[1], a.k
    cached = GT.load_cached(meta, k, nq)
    if cached is not None:
        gt_ids, gt_dist = cached[0], cached[1]
        gt_from = "cached ground truth (" + GT.gt_name(k, nq) + ")"
    else:
        gt_ids, gt_dist = GT.exact_numpy(base, queries, k)
        gt_from = "numpy float64 brute force"

    faiss.omp_set_num_threads(a.threads)
    train_n = a.train_n if 0 < a.train_n < n else n
    rng = np.random.default_rng(12345)
    sample = base[np.sort(rng.choice(n, train_n, replace=False))] if train_n < n else base
    quantizer = faiss.IndexFlatL2(d)
    ivf = faiss.IndexIVFPQ(quantizer, d, a.lists, a.m, a.nbits)
    t0 = time.time()
    ivf.train(sample)
    train_s = time.time() - t0
    t0 = time.time()
    ivf.add(base)
    add_s = time.time() - t0
    refine = faiss.IndexRefineFlat(ivf, faiss.swig_ptr(base))
    out = {"dataset": a.dataset, "n": n, "dim": d, "nq": nq, "lists": a.lists, "m": a.m,
           "nbits": a.nbits, "train_n": train_n, "threads": a.threads, "train_s": train_s,
           "add_s": add_s, "faiss": faiss.__version__, "ground_truth": gt_from, "rows": []}
    print(f"faiss {faiss.__version__}: IVF{a.lists},PQ{a.m}x{a.nbits} on {n} x {d}: train {train_s:.2f}s "
          f"({train_n} rows), add {add_s:.2f}s, {a.threads} threads", flush=True)

    def search(index, x, kk):
        dist, ids = index.search(x, kk)
        return dist, ids

    def recall_of(dist, ids):
        res_ids = [[int(i) + 1 for i in row if i >= 0] for row in ids]
        res_d = [[float(np.sqrt(max(v, 0.0))) for v, i in zip(drow, irow) if i >= 0]
                 for drow, irow in zip(dist, ids)]
        return GT.recall(res_ids, res_d, gt_ids, gt_dist, k)

    for nprobe in sorted({min(p, a.lists) for p in a.probes}):
        ivf.nprobe = nprobe
        for rr in a.rerank:
            index = ivf
            if rr > 0:
                refine.k_factor = max(1.0, rr / k)
                index = refine
            # batch: every query in one call, every thread
            faiss.omp_set_num_threads(a.threads)
            dist, ids = search(index, queries, k)
            # estimates are not distances: recall of the ids from exact distances
            if rr == 0:
                xd = base[np.clip(ids, 0, n - 1)].astype(np.float64)
                dist = ((xd - queries[:, None, :].astype(np.float64)) ** 2).sum(-1)
            rec = recall_of(dist, ids)
            times = []
            for _ in range(3):
                t0 = time.time()
                search(index, queries, k)
                times.append(time.time() - t0)
            med = statistics.median(times)
            # single queries: one call per query, one thread
            faiss.omp_set_num_threads(1)
            sq = min(a.single_q, nq)
            t0, c0 = time.time(), time.process_time()
            for i in range(sq):
                search(index, queries[i:i + 1], k)
            single_s = (time.time() - t0) / max(sq, 1)
            single_cpu_s = (time.process_time() - c0) / max(sq, 1)
            row = {"probes": nprobe, "rerank": rr, "recall": rec, "batch_qps": nq / med,
                   "batch_s": med, "single_qps": 1.0 / single_s if single_s > 0 else None,
                   "single_ms": single_s * 1e3, "single_cpu_ms": single_cpu_s * 1e3, "single_q": sq}
            out["rows"].append(row)
            print(f"nprobe {nprobe} rerank {rr}: recall@{k} {rec:.4f}, batch {nq / med:.0f} QPS "
                  f"({a.threads} threads), single {row['single_qps']:.0f} QPS (1 thread, "
                  f"{single_cpu_s * 1e3:.3f} ms CPU per query)", flush=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
