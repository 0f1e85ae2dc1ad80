"""The --graph plan of bench/harness.py (issue 15): vs_graph against hnswlib and vs_ivfpq.

Per dataset, after the harness has loaded it, built vs_flat and taken the exact ground truth:

  1. vs_flat single queries through SQL on the plan's path (recall pass, pgbench at the plan's
     clients) and its exact batch: the baseline of the single-query target (skipped with
     --no-graph-sql);
  2. CREATE INDEX ... USING vs_graph (timed, all in; with client_min_messages = debug1 the build
     reports the seconds of its parts: load, seeds, upload, lists, knn, prune, edges, links,
     write) with max_parallel_maintenance_workers = CPUs - 1, so the backend's build engine runs a
     thread per CPU; index bytes per vector;
  3. vs_graph batch sweep: vsearch_knn_batch over B queries at each vsearch.graph_expand of the
     plan's `expands` (--graph-expands; default 1) and each vsearch.graph_ef: recall@10, the SQL
     call's QPS (median of reps) and, when the worker served, the QPS of its engine calls alone
     (vsearch_stat_stages' `engine` time of the timed calls);
  4. hnswlib (bench/graph_hnswlib.cpp, M 16, ef_construction 200) built and searched on every host
     thread by a C++ driver compiled here (c++ -O3 -march=native with Debian's libhnswlib-dev
     headers or those bench/stage-gpu packs), else the binary bench/stage-gpu built: build seconds,
     then per ef the B queries as one batch over every thread;
  5. vs_ivfpq (options of the plan or --ivfpq-options): build, then batch sweep over probes x
     rerank as in 3;
  6. if the budget has room: vs_graph single queries through SQL at the smallest swept graph_ef
     whose batch recall reaches 0.95 with the first of `expands` (the other indexes dropped
     first, so the plan uses it).

summary.md ends with graph_markdown(): builds, and per target recall the best QPS of each series
with the ratios the issue asks for.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

import numpy as np

import datasets as D
import groundtruth as GT
from sql_runs import PATHS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Per mode: datasets (name, queries), the SQL path of the searches (a PATHS key of sql_runs.py),
# batch size B and timed repetitions, the sweeps, and the single-query runs.
GRAPH_PLANS = {
    "gpu": {
        "datasets": [{"name": "fashion-mnist", "nq": 10000}, {"name": "synth-1M-128", "nq": 10000}],
        "path": "gpu", "batch_q": 10000, "reps": 2,
        "efs": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256],
        "hnswlib_efs": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384],
        "hnswlib_timeout": 900,
        "ivfpq_options": "store_vectors = on", "ivfpq_probes": [1, 2, 4, 8, 16],
        "ivfpq_rerank": [20, 50, 100],
        "recall_q": 1000, "clients": [1, 32], "seconds": 5, "sql_need_s": 45, "ivfpq_need_s": 60,
        "targets": [0.95, 0.99],
    },
    "cpu": {
        "datasets": [{"name": "synth-20k-64", "nq": 1000}, {"name": "fashion-mnist-10k", "nq": 1000}],
        "path": "worker-cpu", "batch_q": 1000, "reps": 2,
        "efs": [10, 16, 24, 32, 48, 64, 96, 128],
        "hnswlib_efs": [10, 16, 24, 32, 48, 64, 96, 128, 192],
        "hnswlib_timeout": 900,
        "ivfpq_options": "store_vectors = on", "ivfpq_probes": [1, 2, 4, 8], "ivfpq_rerank": [20, 50],
        "recall_q": 200, "clients": [1, 2], "seconds": 3, "sql_need_s": 30, "ivfpq_need_s": 30,
        "targets": [0.95, 0.99],
    },
    "smoke": {
        "datasets": [{"name": "synth-3000-32-s5", "nq": 50}],
        "path": "worker-cpu", "batch_q": 50, "reps": 1,
        "efs": [10, 40], "hnswlib_efs": [10, 40], "hnswlib_timeout": 120,
        "ivfpq_options": "store_vectors = on", "ivfpq_probes": [1, 4], "ivfpq_rerank": [20],
        "recall_q": 50, "clients": [1], "seconds": 1, "sql_need_s": 10, "ivfpq_need_s": 10,
        "targets": [0.95, 0.99],
    },
}

BUILD_PARTS = re.compile(r"vs_graph build: (\d+) rows, kNN graph in the (\w+); (.*)")
BUILD_SEEDS = re.compile(r"vs_graph build: (\d+) seeds, (\d+) nodes unreached from the start nodes")


def write_fvecs_prefix(src, dst, count):
    """The first count rows of an .fvecs file into dst."""
    x = D.read_fvecs(src, limit=count)
    with open(dst, "wb") as f:
        D.write_fvecs(f, x)


class GraphRuns:
    """Mixed into harness.Harness (self.pg, self.plan, self.add, self.log, ...)."""

    def graph_settings(self):
        """(path, settings, device column, via) of the searches: the plan's path (a worker's, or
        --graph-path cpu: the backend), or the backend on the CPU when the worker does not serve
        (noted)."""
        g = self.plan["graph"]
        P = PATHS[g["path"]]
        if P["via"] == "backend" or self.worker_ok():
            return g["path"], dict(P["settings"]), P["device"], P["via"]
        self.notes.append(f"the worker does not serve ({self.worker.get('worker_state')}): "
                          f"vs_graph and vs_ivfpq searched in the backend on the CPU")
        return "cpu", dict(PATHS["cpu"]["settings"]), "cpu", "backend"

    def engine_seconds(self):
        """The worker's engine time (s) and requests since the last reset."""
        for stage, req, total, _mean in self.pg.sql("SELECT stage, requests, total_us, mean_us "
                                                     "FROM vsearch_stat_stages"):
            if stage == "engine":
                return float(total) / 1e6, int(req)
        return 0.0, 0

    def timed_batch(self, idx, t, B, k, S, reps):
        """(recall inputs, median seconds, all times, engine seconds per call or None, split text,
        split params) of vsearch_knn_batch(idx) over the first B queries under settings S."""
        arr = f"ARRAY(SELECT v FROM {t}_q WHERE qid <= {B} ORDER BY qid)"
        rows = self.pg.sql(f"""
            SELECT b.query, t.id, b.distance FROM vsearch_knn_batch('{idx}', {arr}, {k}) b
              JOIN {t} t ON t.ctid = b.row_ctid ORDER BY 1, 3, 2""", S)
        # one untimed call first (the session's caches), then the statistics from zero
        setup = (f"SELECT count(*) FROM vsearch_knn_batch('{idx}', ARRAY(SELECT v FROM {t}_q "
                 f"WHERE qid = 1), {k}); SELECT vsearch_stat_reset();")
        times = self.pg.timed(f"SELECT count(*) FROM vsearch_knn_batch('{idx}', {arr}, {k})",
                              dict(S, client_min_messages="debug1"), reps, setup=setup)
        prm = {}
        split = self.batch_split(times, prm)
        eng, req = self.engine_seconds()
        st = self.stat()
        fb = int(st.get("cpu_fallbacks", 0)) + int(st.get("errors", 0))
        engine = eng / reps if req and not fb else None
        if fb:
            split += f"; {fb} fallbacks or errors: no engine-only QPS"
        med = sorted(times)[len(times) // 2]
        return rows, med, times, engine, split, prm

    def out_of_budget(self, ds, what, need=20):
        """True (noted) when less than need seconds of the budget are left."""
        if self.remaining() >= need:
            return False
        self.notes.append(f"{ds['name']}: stopped by the budget at the {what}")
        self.log(f"{ds['name']}: {what} SKIPPED: {self.remaining():.0f}s left of the budget")
        return True

    # -- the whole dataset -------------------------------------------------------------------
    def run_graph(self, ds, meta, base, li, gt_ids, gt_dist):
        g = self.plan["graph"]
        B = min(g["batch_q"], ds["nq"])
        path, S, dev, via = self.graph_settings()
        ds["clients"] = self.plan["clients"] if self.args.clients else g["clients"]
        sql = not self.args.no_graph_sql
        if sql:
            try:
                self.run_path(ds, path, base, li, {path: min(g["recall_q"], ds["nq"])}, {path: B},
                              gt_ids, gt_dist, None)
            except Exception as e:
                self.fail(f"{ds['name']} vs_flat {path}", e)
        graph = self.graph_build(ds, base, S, dev)
        sweep = self.graph_sweep(ds, base, graph, S, dev, via, B, gt_ids, gt_dist)
        if not self.args.no_hnswlib:
            try:
                self.run_hnswlib(ds, meta, base, B, gt_ids, gt_dist)
            except Exception as e:
                self.fail(f"{ds['name']} hnswlib", e)
        if not self.args.no_graph_ivfpq:
            try:
                self.graph_ivfpq(ds, base, S, dev, via, B, gt_ids, gt_dist)
            except Exception as e:
                self.fail(f"{ds['name']} vs_ivfpq (graph plan)", e)
        if sql:
            self.graph_single(ds, path, base, graph, sweep, gt_ids, gt_dist)

    # -- 2. build ------------------------------------------------------------------------------
    def graph_build(self, ds, base, S, dev):
        t, n = ds["table"], base["n"]
        opts = self.args.graph_options
        with_opts = f" WITH ({opts})" if opts else ""
        threads = os.cpu_count() or 1
        self.progress.step(f"{ds['name']}: vs_graph build", 20)
        self.reset_stats()
        bS = dict(S, client_min_messages="debug1", max_parallel_maintenance_workers=max(threads - 1, 0))
        t0 = time.time()
        _out, err = self.pg.run_messages(f"CREATE INDEX {t}_graph ON {t} USING vs_graph "
                                         f"(v vector_l2_ops){with_opts}", bS)
        build_s = time.time() - t0
        bpv = int(self.pg.value(f"SELECT pg_relation_size('{t}_graph')")) / n
        st = self.stat()
        m = BUILD_PARTS.search(err)
        parts = {}
        if m:
            for part in m.group(3).split(", "):
                name, secs, _unit = part.split(" ")
                parts[name] = float(secs)
        knn_in = m.group(2) if m else "?"
        cover = BUILD_SEEDS.search(err)
        seeds = f"; {cover.group(1)} seeds, {cover.group(2)} rows unreached from the start nodes" if cover else ""
        fb = int(st.get("cpu_fallbacks", 0))
        self.log(f"{ds['name']}: vs_graph build {build_s:.2f}s{with_opts}, {bpv:.0f} index bytes/vector; "
                 f"kNN graph in the {knn_in} ({st.get('requests')} worker requests, {fb} fallbacks; "
                 f"{threads} backend engine threads); parts: "
                 + (", ".join(f"{p} {s:.2f}s" for p, s in parts.items()) or "not reported") + seeds)
        if fb:
            self.notes.append(f"{ds['name']}: the vs_graph build fell back to the backend's CPU")
        return {"build_s": build_s, "bpv": bpv, "knn_in": knn_in, "parts": parts, "threads": threads,
                "device": "gpu" if knn_in == "worker" and dev == "gpu" else "cpu", "options": opts or ""}

    # -- 3. vs_graph batch sweep ------------------------------------------------------------------
    def graph_sweep(self, ds, base, graph, S, dev, via, B, gt_ids, gt_dist):
        g, t, k = self.plan["graph"], ds["table"], self.plan["k"]
        idx = f"{t}_graph"
        # the worker's first search loads the index into its cache
        t0 = time.time()
        self.pg.sql(f"SELECT count(*) FROM vsearch_knn_batch('{idx}', ARRAY(SELECT v FROM {t}_q "
                    f"WHERE qid = 1), {k})", S)
        self.log(f"{ds['name']}: first vs_graph search {time.time() - t0:.2f}s (the worker's copy of the index)")
        parts = ";".join(f"{p}_s={s:.3f}" for p, s in graph["parts"].items())
        common = dict(base, index="vs_graph", build_s=graph["build_s"], bytes_per_vector=graph["bpv"])
        sweep, first_qps = {}, {}  # at the first of expands, per graph_ef: recall, QPS
        expands = g.get("expands", [1])
        for x, ef in ((x, ef) for x in expands for ef in g["efs"]):
            at = f"ef={ef}" + (f" expand={x}" if expands != [1] else "")
            if self.out_of_budget(ds, f"vs_graph sweep at graph_ef {ef}, graph_expand {x}"):
                break
            self.progress.step(f"{ds['name']}: vs_graph {at}", 3)
            try:
                Sg = dict(S, **{"vsearch.graph_ef": ef, "vsearch.graph_expand": x})
                rows, med, times, engine, split, prm = self.timed_batch(idx, t, B, k, Sg, g["reps"])
            except Exception as e:
                self.fail(f"{ds['name']} vs_graph {at}", e)
                continue
            rec = self.recall_of(rows, B, gt_ids, gt_dist, k)
            if x == expands[0]:
                sweep[ef], first_qps[ef] = rec, B / med
            prm = dict({"mode": "batch", "via": via, "ef": ef, "expand": x, "batch": B, "reps": g["reps"],
                        "build_threads": graph["threads"], "knn_in": graph["knn_in"]}, **prm)
            if graph["options"]:
                prm["options"] = graph["options"]
            self.add(**common, device=dev, params=f"{params(prm)};{parts}", clients=1, recall=rec,
                     qps=B / med, p50_ms=med * 1e3, p99_ms=max(times) * 1e3,
                     gpu_mem_mb=self.gpu_mem() if dev == "gpu" else None)
            line = f"{ds['name']} vs_graph {at} batch of {B}: recall@{k} {rec:.4f}, {B / med:.0f} QPS ({med * 1e3:.1f} ms)"
            if x != expands[0] and ef in first_qps:
                line += f", {B / med / first_qps[ef]:.2f}x graph_expand {expands[0]}'s QPS"
            if engine:
                self.add(**common, device=dev, params=params({"mode": "engine", "via": via, "ef": ef, "expand": x,
                                                              "batch": B, "reps": g["reps"]}),
                         clients=1, recall=rec, qps=B / engine, p50_ms=engine * 1e3)
                line += f"; the worker's engine calls {engine * 1e3:.1f} ms ({B / engine:.0f} QPS)"
            self.log(line + split)
            if not 0.0 <= rec <= 1.0:
                self.check_failures.append(f"{ds['name']} vs_graph: recall outside [0, 1]")
        return sweep

    # -- 4. hnswlib ------------------------------------------------------------------------------
    def hnswlib_binary(self, work):
        """The driver: compiled here when a C++ compiler and the hnswlib headers are at hand (Debian's
        libhnswlib-dev, or the copy bench/stage-gpu packs), else bench/stage-gpu's build."""
        src = os.path.join(HERE, "graph_hnswlib.cpp")
        cxx = shutil.which("c++") or shutil.which("g++")
        inc = []
        if not os.path.exists("/usr/include/hnswlib/hnswlib.h"):
            packed = os.path.join(ROOT, ".bench-device", "include")
            inc = ["-I", packed] if os.path.exists(os.path.join(packed, "hnswlib", "hnswlib.h")) else None
        if cxx and inc is not None:
            out = os.path.join(work, "graph_hnswlib")
            p = subprocess.run([cxx, "-O3", "-march=native", "-std=c++17", "-pthread", *inc, "-o", out, src],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
            if p.returncode == 0:
                return out, f"{os.path.basename(cxx)} -O3 -march=native"
            self.log(f"hnswlib driver did not compile: {p.stdout.decode(errors='replace')[-500:]}")
        carried = os.environ.get("VSEARCH_HNSWLIB_BENCH", "")
        if carried and os.access(carried, os.X_OK):
            return carried, "bench/stage-gpu's build (-O3 -march=x86-64-v3)"
        raise RuntimeError("no C++ compiler with the hnswlib headers (libhnswlib-dev) and no "
                           "graph_hnswlib from bench/stage-gpu")

    def run_hnswlib(self, ds, meta, base, B, gt_ids, gt_dist):
        g, k = self.plan["graph"], self.plan["k"]
        work = tempfile.mkdtemp(prefix="hnswlib.")
        try:
            binary, how = self.hnswlib_binary(work)
            qf = os.path.join(work, "query.fvecs")
            write_fvecs_prefix(os.path.join(meta["folder"], "query.fvecs"), qf, B)
            self.progress.step(f"{ds['name']}: hnswlib build + sweep", 30)
            prefix = os.path.join(work, "res")
            # within the budget, leaving vs_ivfpq's build and sweep their time
            timeout = max(60, min(g["hnswlib_timeout"], self.remaining() - g["ivfpq_need_s"]))
            p = subprocess.run([binary, "--batch", "--out", prefix, os.path.join(meta["folder"], "base.fvecs"),
                                qf, *[str(e) for e in g["hnswlib_efs"]]],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
            out = p.stdout.decode(errors="replace")
            if p.returncode != 0:
                raise RuntimeError(f"graph_hnswlib failed ({p.returncode}): {out[-500:]}")
            m = re.search(r"\((M 16, ef_construction 200, (\d+) threads)\): build ([0-9.]+) s", out)
            build_s, threads = float(m.group(3)), int(m.group(2))
            self.log(f"{ds['name']}: hnswlib build {build_s:.2f}s on {threads} threads (driver: {how})")
            for ef, secs in re.findall(r"^ef (\d+): ([0-9.]+) s$", out, re.M):
                raw = np.fromfile(f"{prefix}.ef{ef}.bin", dtype=np.uint8)
                ids = raw[:B * k * 8].view(np.int64).reshape(B, k)
                dist = np.sqrt(np.maximum(raw[B * k * 8:].view(np.float32).reshape(B, k).astype(np.float64), 0))
                rec = GT.recall([[int(i) + 1 for i in row if i >= 0] for row in ids],
                                [list(row) for row in dist], gt_ids, gt_dist, k)
                s = float(secs)
                self.add(**base, index="hnswlib", device="cpu",
                         params=params({"mode": "batch", "via": "c++", "ef": ef, "batch": B, "threads": threads,
                                        "M": 16, "ef_construction": 200}),
                         clients=1, recall=rec, qps=B / s, p50_ms=s * 1e3, p99_ms=s * 1e3, build_s=build_s)
                self.log(f"{ds['name']} hnswlib ef={ef} batch of {B} on {threads} threads: recall@{k} {rec:.4f}, "
                         f"{B / s:.0f} QPS ({s * 1e3:.1f} ms)")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # -- 5. vs_ivfpq -----------------------------------------------------------------------------
    def graph_ivfpq(self, ds, base, S, dev, via, B, gt_ids, gt_dist):
        g, t, k, n = self.plan["graph"], ds["table"], self.plan["k"], base["n"]
        idx = f"{t}_ivf"
        opts = self.args.ivfpq_options or g["ivfpq_options"]
        self.progress.step(f"{ds['name']}: vs_ivfpq build", 10)
        self.reset_stats()
        t0 = time.time()
        self.pg.run(f"SET client_min_messages = warning; CREATE INDEX {idx} ON {t} USING vs_ivfpq "
                    f"(v vector_l2_ops) WITH ({opts})", S)
        build_s = time.time() - t0
        bpv = int(self.pg.value(f"SELECT pg_relation_size('{idx}')")) / n
        st = self.stat()
        self.log(f"{ds['name']}: vs_ivfpq build {build_s:.2f}s ({opts}), {bpv:.0f} index bytes/vector "
                 f"({st.get('requests')} worker requests, {st.get('cpu_fallbacks')} fallbacks)")
        lists = max(1, int(round(n ** 0.5)))
        common = dict(base, index="vs_ivfpq", build_s=build_s, bytes_per_vector=bpv)
        for rr in g["ivfpq_rerank"]:
            for pp in sorted({min(p, lists) for p in g["ivfpq_probes"]}):
                if self.out_of_budget(ds, f"vs_ivfpq sweep at probes {pp}, rerank {rr}"):
                    return
                self.progress.step(f"{ds['name']}: vs_ivfpq p={pp} r={rr}", 3)
                Si = dict(S, **{"vsearch.ivfpq_probes": pp, "vsearch.ivfpq_rerank": rr})
                try:
                    rows, med, times, engine, split, prm = self.timed_batch(idx, t, B, k, Si, g["reps"])
                except Exception as e:
                    self.fail(f"{ds['name']} vs_ivfpq p={pp} r={rr}", e)
                    continue
                rec = self.recall_of(rows, B, gt_ids, gt_dist, k)
                prm = dict({"mode": "batch", "via": via, "served": via, "probes": pp, "rerank": rr,
                            "batch": B, "reps": g["reps"], "lists": lists, "options": opts.replace(" ", "")}, **prm)
                self.add(**common, device=dev, params=params(prm), clients=1, recall=rec, qps=B / med,
                         p50_ms=med * 1e3, p99_ms=max(times) * 1e3)
                line = (f"{ds['name']} vs_ivfpq probes={pp} rerank={rr} batch of {B}: recall@{k} {rec:.4f}, "
                        f"{B / med:.0f} QPS ({med * 1e3:.1f} ms)")
                if engine:
                    self.add(**common, device=dev, params=params({"mode": "engine", "via": via, "served": via,
                                                                  "probes": pp, "rerank": rr, "batch": B,
                                                                  "reps": g["reps"]}),
                             clients=1, recall=rec, qps=B / engine, p50_ms=engine * 1e3)
                    line += f"; the worker's engine calls {engine * 1e3:.1f} ms ({B / engine:.0f} QPS)"
                self.log(line + split)

    # -- 6. vs_graph single queries ----------------------------------------------------------------
    def graph_single(self, ds, path, base, graph, sweep, gt_ids, gt_dist):
        g, t = self.plan["graph"], ds["table"]
        # a width below k takes a second, wider round per query: not what a user would set
        ok = sorted(ef for ef, rec in sweep.items() if rec >= 0.95 and ef >= self.plan["k"])
        if not ok:
            self.notes.append(f"{ds['name']}: no swept graph_ef reached recall 0.95: no vs_graph single queries")
            return
        if self.remaining() < g["sql_need_s"]:
            self.notes.append(f"{ds['name']}: vs_graph single queries skipped by the budget "
                              f"({self.remaining():.0f}s left)")
            self.log(f"{ds['name']}: vs_graph single queries SKIPPED by the budget")
            return
        ef, x = ok[0], g.get("expands", [1])[0]
        # only the graph left, under the name the single-query path checks the plan for
        self.pg.run(f"DROP INDEX IF EXISTS {t}_ivf; DROP INDEX IF EXISTS {t}_idx; "
                    f"ALTER INDEX {t}_graph RENAME TO {t}_idx")
        gpath = "graph-" + path
        if gpath not in PATHS:
            return
        for lanes in self.lanes_sweep(gpath):
            extra = dict({"ef": ef, "expand": x}, **self.set_worker_lanes(lanes))
            self.run_path(ds, gpath, base, {"build_s": graph["build_s"], "bpv": graph["bpv"]},
                          {gpath: min(g["recall_q"], ds["nq"])}, {}, gt_ids, gt_dist, None,
                          settings={"vsearch.graph_ef": ef, "vsearch.graph_expand": x}, extra=extra)


def params(d):
    return ";".join(f"{k}={v}" for k, v in d.items())


def graph_markdown(rows, targets=(0.95, 0.99)):
    """Per dataset: the builds, then per target recall the best QPS of each series (the batch
    sweeps; the engine-only QPS of the worker's calls where it served) and the ratios."""
    def f(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    def prm(r, key):
        m = re.search(rf"(?:^|;){key}=([^;]*)", r["params"])
        return m.group(1) if m else ""

    gr = [r for r in rows if r["index"] in ("vs_graph", "hnswlib")]
    if not gr:
        return ""
    out = []
    for ds in dict.fromkeys(r["dataset"] for r in gr):
        R = [r for r in rows if r["dataset"] == ds and f(r["recall"]) is not None and f(r["qps"])]

        def series(index, mode):
            return [r for r in R if r["index"] == index and prm(r, "mode") == mode]

        def best(rs, tg):
            ok = [r for r in rs if f(r["recall"]) >= tg]
            return max(ok, key=lambda r: f(r["qps"])) if ok else None

        n = next(r["n"] for r in gr if r["dataset"] == ds)
        dim = next(r["dim"] for r in gr if r["dataset"] == ds)
        out += ["", f"vs_graph, {ds} ({n} × {dim}), batches of "
                f"{next((prm(r, 'batch') for r in R if r['index'] == 'vs_graph'), '?')} queries", ""]
        g = series("vs_graph", "batch")
        h = series("hnswlib", "batch")
        iv = series("vs_ivfpq", "batch")
        builds = []
        if g:
            parts = ", ".join(f"{m.group(1)} {float(m.group(2)):.2f}"
                              for m in re.finditer(r"(\w+)_s=([0-9.]+)", g[0]["params"]))
            builds.append(f"vs_graph {f(g[0]['build_s']):.2f} s ({g[0]['device']}; kNN graph in the "
                          f"{prm(g[0], 'knn_in')}, {prm(g[0], 'build_threads')} backend threads; {parts}), "
                          f"{f(g[0]['bytes_per_vector']):.0f} B/vector")
        if h:
            builds.append(f"hnswlib {f(h[0]['build_s']):.2f} s ({prm(h[0], 'threads')} threads)")
        if iv:
            builds.append(f"vs_ivfpq {f(iv[0]['build_s']):.2f} s ({prm(iv[0], 'options')}), "
                          f"{f(iv[0]['bytes_per_vector']):.0f} B/vector")
        if g and h:
            builds.append(f"hnswlib / vs_graph build time: {f(h[0]['build_s']) / f(g[0]['build_s']):.2f}x")
        out += ["Builds: " + "; ".join(builds) + ".", "",
                "| recall@10 ≥ | vs_graph SQL batch | vs_graph engine | hnswlib (all threads) | vs_ivfpq SQL batch "
                "| vs_ivfpq engine | graph engine / hnswlib | graph SQL / hnswlib | graph / ivfpq engine "
                "| graph / ivfpq SQL |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for tg in targets:
            pts = {"gs": best(g, tg), "ge": best(series("vs_graph", "engine"), tg), "h": best(h, tg),
                   "is": best(iv, tg), "ie": best(series("vs_ivfpq", "engine"), tg)}

            have = {"gs": g, "ge": series("vs_graph", "engine"), "h": h, "is": iv,
                    "ie": series("vs_ivfpq", "engine")}

            def cell(key):
                r = pts[key]
                if r is None:
                    return "not reached" if have[key] else "(not run)"
                at = f"ef {prm(r, 'ef')}" if prm(r, "ef") else f"p{prm(r, 'probes')}/r{prm(r, 'rerank')}"
                if prm(r, "expand") not in ("", "1"):
                    at += f" x{prm(r, 'expand')}"
                return f"{f(r['qps']):,.0f} ({at}, {f(r['recall']):.4f})"

            def ratio(a, b):
                return f"{f(pts[a]['qps']) / f(pts[b]['qps']):.2f}x" if pts[a] and pts[b] else ""

            out.append(f"| {tg} | {cell('gs')} | {cell('ge')} | {cell('h')} | {cell('is')} | {cell('ie')} | "
                       f"{ratio('ge', 'h')} | {ratio('gs', 'h')} | {ratio('ge', 'ie')} | {ratio('gs', 'is')} |")
        single = [r for r in R if prm(r, "mode") == "single" and r["index"] in ("vs_graph", "vs_flat")]
        if single:
            out += ["", "Single queries through SQL (pgbench, steady state):", "",
                    "| clients | vs_graph QPS (graph_ef, recall) | vs_flat QPS | graph / flat |", "| ---: | ---: | ---: | ---: |"]
            for c in sorted({int(r["clients"]) for r in single}):
                gq = [r for r in single if r["index"] == "vs_graph" and int(r["clients"]) == c]
                fq = [r for r in single if r["index"] == "vs_flat" and int(r["clients"]) == c]
                gs = f"{f(gq[0]['qps']):,.0f} ({prm(gq[0], 'ef')}, {f(gq[0]['recall']):.4f})" if gq else ""
                fs = f"{f(fq[0]['qps']):,.0f}" if fq else ""
                rt = f"{f(gq[0]['qps']) / f(fq[0]['qps']):.2f}x" if gq and fq else ""
                out.append(f"| {c} | {gs} | {fs} | {rt} |")
    return "\n".join(out) + "\n"
