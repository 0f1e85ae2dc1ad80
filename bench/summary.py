"""The rows of bench/harness.py's results.csv and its summary.md: the CSV's columns, how a value
is written, the params column, and the markdown tables (every row; vs_ivfpq's operating points and
the engine's IVF-PQ against its exact kNN).  bench/graph_runs.py adds the graph plan's tables."""
import re

COLUMNS = ["dataset", "n", "dim", "index", "params", "device", "clients", "k", "recall", "qps",
           "p50_ms", "p99_ms", "build_s", "bytes_per_vector", "gpu_mem_mb", "date", "host"]


def fmt(v, nd=4):
    """A number for the CSV: one decimal from 100 up, else nd significant digits."""
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        if v != v:
            return ""
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.{nd}g}"
    return str(v)


def params_str(d):
    return ";".join(f"{k}={v}" for k, v in d.items() if v is not None and v != "")


def summary_markdown(rows):
    def mode_of(r):
        m = re.search(r"mode=([^;]+)", r["params"])
        return m.group(1) if m else ""

    def via_of(r):
        m = re.search(r"via=([^;]+)", r["params"])
        return m.group(1) if m else ""

    def batch_of(r):
        m = re.search(r"(?:batch|case)=([^;]+)", r["params"])
        return m.group(1) if m else ""

    out = ["| dataset | n × dim | path | device | mode | clients / batch | recall@10 | QPS | p50 ms | p99 ms "
           "| build s | index B/vec | GPU MiB |",
           "| --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        mode = mode_of(r)
        cb = r["clients"] if mode == "single" else batch_of(r)
        path = r["index"] + (f" ({via_of(r)})" if r["index"] == "vs_flat" else "")
        if r["index"] == "vs_ivfpq":
            path = f"vs_ivfpq ({via_of(r)}→{prm_of(r, 'served')}; p{prm_of(r, 'probes')} r{prm_of(r, 'rerank')})"
        elif r["index"] in ("vs_graph", "hnswlib"):
            path = f"{r['index']} (ef {prm_of(r, 'ef')})" + (f" {via_of(r)}" if r["index"] == "vs_graph" else "")
        elif r["index"] == "engine-ivfpq":
            path = "engine-ivfpq" + (f" (nprobe {prm_of(r, 'probes')})" if prm_of(r, "probes") else "")
        out.append(f"| {r['dataset']} | {r['n']} × {r['dim']} | {path} | {r['device']} | {mode} | {cb} | "
                   f"{num(r['recall'], 4)} | {num(r['qps'], 0)} | {num(r['p50_ms'], 2)} | "
                   f"{num(r['p99_ms'], 2)} | {num(r['build_s'], 2)} | {num(r['bytes_per_vector'], 0)} | "
                   f"{r['gpu_mem_mb']} |")
    return "\n".join(out) + "\n" + ivfpq_markdown(rows)


def prm_of(r, key):
    m = re.search(rf"(?:^|;){key}=([^;]*)", r["params"])
    return m.group(1) if m else ""


def fnum(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def ivfpq_markdown(rows, targets=(0.9, 0.95, 0.99)):
    """vs_ivfpq's operating points: per dataset, path and target recall@10, the swept point of
    highest batch QPS reaching it, with its single-query QPS, next to vs_flat's exact QPS on the
    path that served it; then the engine's (nprobe of highest QPS reaching the target, against the
    engine's exact kNN and the other backend at the same nprobe)."""
    out = []
    iv = [r for r in rows if r["index"] == "vs_ivfpq" and fnum(r["recall"]) is not None and fnum(r["qps"])]
    if iv:
        out += ["", "vs_ivfpq operating points: the (probes, rerank) of highest batch QPS with recall@10 at "
                "least the target, its single-query QPS (pgbench, steady state) and vs_flat's exact QPS on the "
                "path that served it (worker or backend).", "",
                "| dataset | target | path → served | probes / rerank | recall@10 batch / single | batch QPS "
                "| 1 client QPS | most clients QPS | vs_flat batch QPS | vs_flat 1 client | vs_flat most clients |",
                "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for ds in dict.fromkeys(r["dataset"] for r in iv):
            for via in dict.fromkeys(prm_of(r, "via") for r in iv if r["dataset"] == ds):
                b = [r for r in iv if r["dataset"] == ds and prm_of(r, "via") == via
                     and prm_of(r, "mode") == "batch"]
                for tg in targets:
                    ok = [r for r in b if fnum(r["recall"]) >= tg]
                    if not ok:
                        out.append(f"| {ds} | {tg} | {via} | not reached | best "
                                   f"{max([fnum(r['recall']) for r in b] or [0]):.4f} | | | | | | |")
                        continue
                    best = max(ok, key=lambda r: fnum(r["qps"]))
                    pp, rr, served = prm_of(best, "probes"), prm_of(best, "rerank"), prm_of(best, "served")
                    single = [r for r in iv if r["dataset"] == ds and prm_of(r, "via") == via
                              and prm_of(r, "mode") == "single" and prm_of(r, "probes") == pp
                              and prm_of(r, "rerank") == rr]
                    single.sort(key=lambda r: int(r["clients"]))
                    fv = "backend" if served == "backend" else ("worker", "worker(cpu)")
                    flat = [r for r in rows if r["index"] == "vs_flat" and r["dataset"] == ds
                            and prm_of(r, "via") in (fv if isinstance(fv, tuple) else (fv,))]
                    fb = [r for r in flat if prm_of(r, "mode") == "batch"]
                    fs = sorted([r for r in flat if prm_of(r, "mode") == "single"], key=lambda r: int(r["clients"]))
                    srec = f" / {fnum(single[0]['recall']):.4f}" if single else ""
                    s1 = f"{num(single[0]['qps'], 0)}" if single else ""
                    sN = f"{num(single[-1]['qps'], 0)} ({single[-1]['clients']})" if len(single) > 1 else ""
                    f1 = f"{num(fs[0]['qps'], 0)}" if fs else ""
                    fN = f"{num(fs[-1]['qps'], 0)} ({fs[-1]['clients']})" if len(fs) > 1 else ""
                    fbq = f"{num(fb[0]['qps'], 0)} (batch {prm_of(fb[0], 'batch')})" if fb else ""
                    out.append(f"| {ds} | ≥ {tg} | {via} → {served} | {pp} / {rr} | {fnum(best['recall']):.4f}{srec} | "
                               f"{num(best['qps'], 0)} (batch {prm_of(best, 'batch')}) | {s1} | {sN} | {fbq} | {f1} | {fN} |")
    out += faiss_markdown(rows)
    ev = [r for r in rows if r["index"] == "engine-ivfpq" and fnum(r["recall"]) is not None and fnum(r["qps"])]
    if ev:
        out += ["", "The engine's IVF-PQ (gpu/bench `--mode ivfpq`, its clustered data; 40 candidates re-ranked "
                "exactly): the nprobe of highest QPS reaching each target, against the engine's exact kNN of "
                "the same shape (its Gaussian data) and the other backend at the same nprobe.", "",
                "| data | device | build s | bytes / vector | target | nprobe | recall@10 | QPS (batch) "
                "| exact kNN QPS, same device | other device, same nprobe: QPS (recall) |",
                "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |"]
        for ds in dict.fromkeys(r["dataset"] for r in ev):
            for dev in dict.fromkeys(r["device"] for r in ev if r["dataset"] == ds):
                e = [r for r in ev if r["dataset"] == ds and r["device"] == dev]
                exact = [r for r in rows if r["index"] == "engine" and r["dataset"] == ds.replace("-ivfpq", "")
                         and r["device"] == dev and re.search(r"case=knn nq=\d+ k=10 L2", r["params"])]
                exact.sort(key=lambda r: -int(re.search(r"nq=(\d+)", r["params"]).group(1)))
                for tg in targets[:2]:
                    ok = [r for r in e if fnum(r["recall"]) >= tg]
                    if not ok:
                        out.append(f"| {ds} | {dev} | {num(e[0]['build_s'], 2)} | {num(e[0]['bytes_per_vector'], 0)} "
                                   f"| ≥ {tg} | not reached (best {max(fnum(r['recall']) for r in e):.4f}) | | | | |")
                        continue
                    best = max(ok, key=lambda r: fnum(r["qps"]))
                    other = [r for r in ev if r["dataset"] == ds and r["device"] != dev
                             and prm_of(r, "probes") == prm_of(best, "probes")]
                    oth = f"{other[0]['device']}: {num(other[0]['qps'], 0)} ({fnum(other[0]['recall']):.4f})" if other else ""
                    out.append(f"| {ds} | {dev} | {num(best['build_s'], 2)} | {num(best['bytes_per_vector'], 0)} | "
                               f"≥ {tg} | {prm_of(best, 'probes')} | {fnum(best['recall']):.4f} | "
                               f"{num(best['qps'], 0)} (batch {prm_of(best, 'batch')}) | "
                               f"{num(exact[0]['qps'], 0) if exact else ''} | {oth} |")
    return "\n".join(out) + ("\n" if out else "")


def num(v, nd):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return ""
    return f"{x:,.{nd}f}" if x >= 100 or nd == 0 else f"{x:.{nd}f}"


def faiss_markdown(rows, targets=(0.9, 0.95, 0.98, 0.99)):
    """vs_ivfpq's batch on the CPU beside Faiss's (bench/faiss_baseline.py, the same run): per
    dataset and target recall@10, the highest batch QPS of each reaching it and their ratio."""
    def batch(index, ds, cpu_only):
        return [r for r in rows if r["index"] == index and r["dataset"] == ds
                and prm_of(r, "mode") == "batch" and fnum(r["recall"]) is not None and fnum(r["qps"])
                and (not cpu_only or r["device"] == "cpu")]

    out = []
    for ds in dict.fromkeys(r["dataset"] for r in rows if r["index"] == "faiss-ivfpq"):
        fa, iv = batch("faiss-ivfpq", ds, False), batch("vs_ivfpq", ds, True)
        if not fa or not iv:
            continue
        if not out:
            out += ["", "vs_ivfpq's batch on the CPU beside Faiss IVF-PQ + refine (same run, same lists and m): "
                    "the highest batch QPS of each reaching the target recall@10, and vs_ivfpq / Faiss.", "",
                    "| dataset | target | vs_ivfpq probes / rerank: recall@10, QPS | Faiss nprobe / rerank: "
                    "recall@10, QPS | ratio |", "| --- | --- | --- | --- | ---: |"]
        for tg in targets:
            a = [r for r in iv if fnum(r["recall"]) >= tg]
            b = [r for r in fa if fnum(r["recall"]) >= tg]
            if not a or not b:
                continue
            x, y = max(a, key=lambda r: fnum(r["qps"])), max(b, key=lambda r: fnum(r["qps"]))
            out.append(f"| {ds} | ≥ {tg} | {prm_of(x, 'probes')} / {prm_of(x, 'rerank')}: "
                       f"{fnum(x['recall']):.4f}, {num(x['qps'], 0)} | {prm_of(y, 'probes')} / "
                       f"{prm_of(y, 'rerank')}: {fnum(y['recall']):.4f}, {num(y['qps'], 0)} | "
                       f"{fnum(x['qps']) / fnum(y['qps']):.2f} |")
    return out
