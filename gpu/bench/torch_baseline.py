#!/usr/bin/env python3
"""PyTorch baseline for the engine benchmark, on the same data (written by vsearch_engine_bench).

Exact fp32 kNN the way a PyTorch user writes it: ||y||^2 - 2 q.y^T with torch.addmm (TF32 off),
then torch.topk, in query chunks that fit the GPU; also torch.cdist + topk for the main case, and
range search as torch.cdist + (d <= r).nonzero() at the engine's two radii (~0.1% and ~1% of the
set; results left on the GPU, and with their copy to the host).
Data and queries resident on the GPU, CUDA-event timing, medians.  Also measures the two
ceilings (device-to-device copy bandwidth, fp32 and TF32 GEMM rates), prints the floors, checks
the engine's k=10 ids against PyTorch's (with a float64 tie check), and prints a side-by-side
table with the engine's JSON.

usage: torch_baseline.py DIR ENGINE_JSON [--n N] [--d D] [--nq NQ] [--quick]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch


def median_time(fn, warm=2, runs=7):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def knn_mm(x, xn, q, k, chunk):
    ids, ds = [], []
    for i in range(0, q.shape[0], chunk):
        qq = q[i:i + chunk]
        dist = torch.addmm(xn.unsqueeze(0), qq, x.t(), beta=1.0, alpha=-2.0)
        d, idx = torch.topk(dist, k, dim=1, largest=False, sorted=True)
        ds.append(d + (qq * qq).sum(1, keepdim=True))
        ids.append(idx)
    return torch.cat(ids), torch.cat(ds)


def knn_cdist(x, q, k, chunk):
    ids = []
    for i in range(0, q.shape[0], chunk):
        d, idx = torch.topk(torch.cdist(q[i:i + chunk], x), k, dim=1, largest=False, sorted=True)
        ids.append(idx)
    return torch.cat(ids)


def range_cdist(x, q, radius, chunk, to_host):
    """Every (query, row) with distance <= radius: ids, query offsets and distances."""
    ids, ds, counts = [], [], []
    for i in range(0, q.shape[0], chunk):
        dist = torch.cdist(q[i:i + chunk], x)
        mask = dist <= radius
        nz = mask.nonzero()
        ids.append(nz[:, 1])
        ds.append(dist[mask])
        counts.append(mask.sum(1))
    out = torch.cat(ids), torch.cat(ds), torch.cat(counts)
    if to_host:
        out = tuple(t.cpu() for t in out)
    return out


def range_radius(x, q, frac, engine_rows, nq):
    """The engine's radius (its JSON note), else the same pooled quantile it computes: the
    (frac * n * 100)-th smallest of 100 queries' 4 frac n nearest distances."""
    key = "range nq=%d L2 ~%s%%" % (nq, ("%f" % (frac * 100))[:3])
    note = engine_rows.get(key, {}).get("note", "")
    if note.startswith("radius "):
        return float(note.split()[1].rstrip(","))
    n = x.shape[0]
    kk = int(4 * frac * n)
    d = torch.cdist(q[:100], x)
    near = torch.topk(d, kk, dim=1, largest=False).values.flatten()
    want = int(frac * n * 100)
    return float(torch.kthvalue(near.cpu(), want).values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("engine_json")
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--nq", type=int, default=10000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    runs = 3 if a.quick else 7

    # Ceilings.
    buf = torch.empty(1 << 30, dtype=torch.uint8, device=dev)  # 1 GiB
    dst = torch.empty_like(buf)
    t = median_time(lambda: dst.copy_(buf), 2, 10)
    bw = 2 * buf.numel() / t  # bytes read + written
    del buf, dst
    m = torch.randn(8192, 8192, device=dev)
    t32 = median_time(lambda: torch.mm(m, m), 1, 5)
    torch.backends.cuda.matmul.allow_tf32 = True
    ttf = median_time(lambda: torch.mm(m, m), 1, 5)
    torch.backends.cuda.matmul.allow_tf32 = False
    fp32_peak = 2 * 8192 ** 3 / t32
    tf32_peak = 2 * 8192 ** 3 / ttf
    del m

    x = torch.from_numpy(np.fromfile(os.path.join(a.dir, "data.f32"), dtype=np.float32)
                         .reshape(a.n, a.d)).to(dev)
    q = torch.from_numpy(np.fromfile(os.path.join(a.dir, "queries.f32"), dtype=np.float32)
                         .reshape(a.nq, a.d)).to(dev)
    xn = (x * x).sum(1)
    chunk = max(1, min(a.nq, int(6e9 // (4 * a.n))))

    res = {}
    res["knn10"] = median_time(lambda: knn_mm(x, xn, q, 10, chunk), 1, runs)
    res["knn10_cdist"] = median_time(lambda: knn_cdist(x, q, 10, chunk), 1, 3)
    for b in (1, 16, 64):
        res["knn10_b%d" % b] = median_time(lambda: knn_mm(x, xn, q[:b], 10, chunk), 3, 21 if not a.quick else 5)
    res["knn1024"] = median_time(lambda: knn_mm(x, xn, q, 1024, chunk), 1, 3)
    nq_big = min(a.nq, 1000)
    res["knn10000"] = median_time(lambda: knn_mm(x, xn, q[:nq_big], 10000, chunk), 1, 1 if a.quick else 3)
    eng_json = json.load(open(a.engine_json)) if os.path.exists(a.engine_json) else {"rows": []}
    rows = {r["case"]: r for r in eng_json["rows"]}
    range_found = {}
    for frac, tag in ((0.001, "range01"), (0.01, "range1")):
        r = range_radius(x, q, frac, rows, a.nq)
        res[tag] = median_time(lambda: range_cdist(x, q, r, chunk, False), 1, 3)
        res[tag + "_host"] = median_time(lambda: range_cdist(x, q, r, chunk, True), 1, 3)
        range_found[tag] = (r, int(range_cdist(x, q, r, chunk, False)[0].numel()))

    # Agreement with the engine's k = 10 answer (float64 tie check on mismatches).
    agree = None
    p = os.path.join(a.dir, "knn10_ids.i64")
    if os.path.exists(p):
        eng = torch.from_numpy(np.fromfile(p, dtype=np.int64).reshape(a.nq, 10)).to(dev)
        ti, _ = knn_mm(x, xn, q, 10, chunk)
        same = (eng == ti).all(1)
        bad = (~same).nonzero().flatten()
        real = 0
        xd, qd = x.double(), q.double()
        for i in bad.tolist():
            # The engine ranks by the float32 rounding of the exact distance, ties by id: compare
            # in that rounding (float64 values of a float tie may look out of order).
            de = ((xd[eng[i]] - qd[i]) ** 2).sum(1).sqrt().float()
            dt = ((xd[ti[i]] - qd[i]) ** 2).sum(1).sqrt().float()
            # The engine is exact: its k-th distance must not exceed PyTorch's (fp32 GEMM) one.
            if de.max() > dt.max() or not torch.all(de[1:] >= de[:-1]):
                real += 1
        agree = {"queries": a.nq, "identical": int(same.sum()), "differ": int(bad.numel()),
                 "engine_worse": real}

    n, d, nq = a.n, a.d, a.nq
    data_bytes = n * d * 4
    flops = 2.0 * nq * n * d
    floors = {
        "bandwidth_GBps": bw / 1e9, "fp32_TFLOPs": fp32_peak / 1e12, "tf32_TFLOPs": tf32_peak / 1e12,
        "read_dataset_ms": 1e3 * data_bytes / bw,
        "knn_large_fp32_ms": 1e3 * flops / fp32_peak, "knn_large_tf32_ms": 1e3 * flops / tf32_peak,
    }
    out = {"device": name, "torch": torch.__version__, "floors": floors, "torch_s": res,
           "agreement": agree}
    if a.out:
        json.dump(out, open(a.out, "w"), indent=1)

    def eng_ms(key):
        r = rows.get(key)
        return r["seconds"] * 1e3 if r else float("nan")

    print("\n== PyTorch %s on %s ==" % (torch.__version__, name))
    print("copy bandwidth %.0f GB/s (read+write); fp32 GEMM %.1f TFLOP/s; TF32 GEMM %.1f TFLOP/s"
          % (bw / 1e9, fp32_peak / 1e12, tf32_peak / 1e12))
    print("floors: read 1M x 128 once = %.3f ms; 2*nq*n*d flops = %.1f ms fp32 / %.1f ms TF32"
          % (floors["read_dataset_ms"], floors["knn_large_fp32_ms"], floors["knn_large_tf32_ms"]))
    if agree:
        print("k=10 ids vs PyTorch: %d/%d queries identical, %d differ, %d where the engine is worse"
              % (agree["identical"], agree["queries"], agree["differ"], agree["engine_worse"]))
    table = [
        ("knn nq=%d k=10 L2" % nq, "knn10", "%.1f ms fp32 / %.1f ms tf32 flops; %.2f ms bytes"
         % (floors["knn_large_fp32_ms"], floors["knn_large_tf32_ms"], floors["read_dataset_ms"])),
        ("knn nq=1 k=10 L2", "knn10_b1", "%.3f ms bytes" % floors["read_dataset_ms"]),
        ("knn nq=16 k=10 L2", "knn10_b16", "%.3f ms bytes" % floors["read_dataset_ms"]),
        ("knn nq=64 k=10 L2", "knn10_b64", "%.3f ms bytes" % floors["read_dataset_ms"]),
        ("knn nq=%d k=1024 L2" % nq, "knn1024", ""),
        ("knn nq=%d k=10000 L2" % nq_big, "knn10000", ""),
        ("range nq=%d L2 ~0.1%%" % nq, "range01", "radius %.4f, %d results; %.3f ms with the copy to the host"
         % (range_found["range01"][0], range_found["range01"][1], res["range01_host"] * 1e3)),
        ("range nq=%d L2 ~1.0%%" % nq, "range1", "radius %.4f, %d results; %.3f ms with the copy to the host"
         % (range_found["range1"][0], range_found["range1"][1], res["range1_host"] * 1e3)),
    ]
    print("\n%-26s %12s %12s %8s  %s" % ("case", "engine ms", "torch ms", "speedup", "floors"))
    for case, tk, fl in table:
        e, t = eng_ms(case), res[tk] * 1e3
        print("%-26s %12.3f %12.3f %7.2fx  %s" % (case, e, t, t / e if e == e else float("nan"), fl))
    print("%-26s %12s %12.3f" % ("(torch cdist k=10)", "", res["knn10_cdist"] * 1e3))
    for r in eng_json["rows"]:
        if not any(r["case"] == c for c, _, _ in table):
            print("%-40s %12.3f ms  %s" % (r["case"], r["seconds"] * 1e3, r.get("note", "")))


if __name__ == "__main__":
    sys.exit(main())
