#!/usr/bin/python3
"""The benchmark sweep behind bench/run (which installs, starts the cluster and calls this).

    harness.py cpu|gpu|smoke OUTDIR [--seconds S] [--deadline EPOCH] [--no-engine] [--datasets a,b]

For each dataset of the mode's plan: prepare it (bench/datasets.py, cached with checksums), load it
with binary COPY, build the vs_flat index (build time, index bytes per vector), get the exact
ground truth (bench/groundtruth.py: vsearch_knn_batch, cached; a float64 numpy cross-check of a
sample), then for each search path (GPU worker / worker on the CPU / in-backend CPU / sequential
scan):
  - recall@k of single queries (ORDER BY v <-> q LIMIT k, one statement over R queries),
  - pgbench with 1..N concurrent clients, each running single queries on random query ids
    (QPS, p50/p99 latency from pgbench's per-transaction log),
  - the batch function vsearch_knn_batch over B queries (recall, QPS, time per batch); for the
    sequential scan the batch is a LATERAL join over its R queries.
Then, with the cluster stopped, the engine directly (gpu/bench's vsearch_engine_bench) and, on a
GPU machine, the PyTorch baseline (gpu/bench/torch_baseline.py) on the same data.

Writes OUTDIR/results.csv (one row per measurement, the columns of COLUMNS), OUTDIR/summary.md,
the plots (bench/plot.py) and prints a summary.  Exit status 1 if a vs_flat recall is not 1.0 (it
is exact) or a ground-truth cross-check fails; 2 if a phase failed.
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import datasets as D  # noqa: E402
import groundtruth as GT  # noqa: E402
from progress import Progress  # noqa: E402
from sql_runner import Pg, PgError  # noqa: E402

ROOT = os.path.dirname(HERE)
COLUMNS = ["dataset", "n", "dim", "index", "params", "device", "clients", "k", "recall", "qps",
           "p50_ms", "p99_ms", "build_s", "bytes_per_vector", "gpu_mem_mb", "date", "host"]

# Search paths through SQL.  device is the CSV's device column.
PATHS = {
    "gpu": {"device": "gpu", "index": "vs_flat", "via": "worker",
            "settings": {"vsearch.device": "auto", "enable_seqscan": "off"}},
    "worker-cpu": {"device": "cpu", "index": "vs_flat", "via": "worker(cpu)",
                   "settings": {"vsearch.device": "gpu", "enable_seqscan": "off"}},
    "cpu": {"device": "cpu", "index": "vs_flat", "via": "backend",
            "settings": {"vsearch.device": "cpu", "enable_seqscan": "off"}},
    "seqscan": {"device": "seqscan", "index": "seqscan", "via": "seqscan",
                "settings": {"enable_indexscan": "off"}},
}

# Plans.  nq: queries loaded (ground truth for all of them); recall_q / batch_q: queries used by
# the recall pass / the batch per path; seconds: pgbench duration per path.
PLANS = {
    "cpu": {
        "datasets": [{"name": "fashion-mnist", "nq": 1000}, {"name": "synth-100k-128", "nq": 1000}],
        "paths": ["cpu", "worker-cpu", "seqscan"],
        "clients": [1, 2, 4],
        "seconds": {"cpu": 8, "worker-cpu": 5, "seqscan": 5},
        "recall_q": {"cpu": 200, "worker-cpu": 200, "seqscan": 50},
        "batch_q": {"cpu": 1000, "worker-cpu": 1000},
        "batch_reps": 3, "k": 10, "gt_chunk": 250, "gt_device": "cpu", "xcheck": 20,
        "engine": [{"backend": "cpu", "n": 100000, "d": 128, "nq": 200, "quick": True}],
        "torch": False,
    },
    "gpu": {
        # synth-1000-128: a table so small that searching it costs next to nothing on either path,
        # so its single-client latency through the worker less the in-backend one is what the
        # worker's round trip adds to a query
        "datasets": [{"name": "synth-1000-128", "nq": 1000}, {"name": "fashion-mnist", "nq": 10000},
                     {"name": "synth-1M-128", "nq": 10000}],
        "paths": ["gpu", "cpu", "seqscan"],
        "clients": [1, 8, 32],
        "seconds": {"gpu": 8, "cpu": 6, "seqscan": 5},
        "recall_q": {"gpu": 1000, "cpu": 100, "seqscan": 20},
        "batch_q": {"gpu": 10000, "cpu": 500},
        "batch_reps": 3, "k": 10, "gt_chunk": 2000, "gt_device": "auto", "xcheck": 20,
        # sized down on the 1M set: the CPU paths scan 1M x 128 per query (the in-backend batch
        # runs on one thread)
        "per_dataset": {"synth-1000-128": {"paths": ["gpu", "cpu"], "clients": [1],
                                           "recall_q": {"gpu": 200, "cpu": 200}},
                        "synth-1M-128": {"recall_q": {"gpu": 1000, "cpu": 50, "seqscan": 10},
                                         "batch_q": {"gpu": 10000, "cpu": 200}}},
        "engine": [{"backend": "cuda", "n": 1000000, "d": 128, "nq": 10000, "quick": True,
                    "timeout": 180, "torch_timeout": 150},
                   {"backend": "cuda", "n": 10000000, "d": 96, "nq": 10000, "quick": True,
                    "optional": True, "need_s": 200, "timeout": 200, "torch_timeout": 150}],
        "torch": True,
    },
    "smoke": {
        "datasets": [{"name": "synth-3000-32-s5", "nq": 50}],
        "paths": ["cpu", "worker-cpu", "seqscan"],
        "clients": [1, 2],
        "seconds": {"cpu": 1, "worker-cpu": 1, "seqscan": 1},
        "recall_q": {"cpu": 50, "worker-cpu": 50, "seqscan": 20},
        "batch_q": {"cpu": 50, "worker-cpu": 50},
        "batch_reps": 2, "k": 10, "gt_chunk": 50, "gt_device": "cpu", "xcheck": 50,
        "engine": [], "torch": False,
    },
}


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def host_description():
    cpu = "unknown cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    desc = f"{cpu} ({os.cpu_count()} cpus)"
    g = gpu_name()
    return desc + (f" + {g}" if g else "")


def gpu_name():
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return out.splitlines()[0] if out else None
    except Exception:
        return None


class GpuMem:
    """Peak GPU memory in use (MiB, nvidia-smi) during a block, less what was in use before."""

    def __init__(self):
        self.ok = shutil.which("nvidia-smi") is not None
        self.base = self.peak = None

    def _read(self):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
            return float(out.split()[0])
        except Exception:
            return None

    def __enter__(self):
        if self.ok:
            self.base = self._read()
            self.peak = self.base
            self.stop = threading.Event()
            self.t = threading.Thread(target=self._loop, daemon=True)
            self.t.start()
        return self

    def _loop(self):
        while not self.stop.wait(0.3):
            v = self._read()
            if v is not None and (self.peak is None or v > self.peak):
                self.peak = v

    def __exit__(self, *exc):
        if self.ok:
            self.stop.set()
            self.t.join()

    def mb(self):
        if not self.ok or self.base is None or self.peak is None:
            return ""
        return round(self.peak - self.base, 1)


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


class Harness:
    def __init__(self, mode, outdir, args):
        self.mode, self.outdir, self.args = mode, outdir, args
        self.plan = json.loads(json.dumps(PLANS[mode]))
        if args.seconds:
            self.plan["seconds"] = {p: args.seconds for p in self.plan["seconds"]}
        if args.datasets:
            names = args.datasets.split(",")
            self.plan["datasets"] = [d for d in self.plan["datasets"] if d["name"] in names] + \
                [{"name": n, "nq": 1000} for n in names if n not in [d["name"] for d in self.plan["datasets"]]]
        if args.no_engine:
            self.plan["engine"] = []
        self.deadline = args.deadline or (time.time() + 3600)
        self.date = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        self.host = host_description()
        self.rows = []
        self.failures = []  # phases that failed
        self.check_failures = []  # recall / ground-truth checks
        os.makedirs(outdir, exist_ok=True)
        self.csv_path = os.path.join(outdir, "results.csv")
        self.csv_f = open(self.csv_path, "w", newline="")
        self.csv = csv.DictWriter(self.csv_f, fieldnames=COLUMNS)
        self.csv.writeheader()
        self.csv_f.flush()
        self.log_f = open(os.path.join(outdir, "run.log"), "a")
        self.pg = None
        self.worker = {}
        self.last_stat = {}
        self.progress = Progress(self.estimate())

    # -- bookkeeping -----------------------------------------------------------------------------
    def log(self, msg):
        self.log_f.write(time.strftime("%H:%M:%S ") + msg + "\n")
        self.log_f.flush()
        self.progress.note(msg)

    def add(self, **kw):
        row = {c: "" for c in COLUMNS}
        row.update({"date": self.date, "host": self.host})
        for k, v in kw.items():
            row[k] = fmt(v, 6 if k == "recall" else 4) if isinstance(v, float) else ("" if v is None else v)
        self.rows.append(row)
        self.csv.writerow(row)
        self.csv_f.flush()

    def remaining(self):
        return self.deadline - time.time()

    def estimate(self):
        """Rough seconds of the whole plan (weights of the progress bar)."""
        p = self.plan
        t = 0.0
        for d in p["datasets"]:
            t += 20  # prepare, load, build, ground truth
            over = p.get("per_dataset", {}).get(d["name"], {})
            for path in over.get("paths", p["paths"]):
                t += 3 + len(over.get("clients", p["clients"])) * (p["seconds"][path] + 1.5) + \
                    (5 if path in p["batch_q"] else 0)
        for e in p["engine"]:
            t += 60 if e["backend"] == "cuda" else 30
            t += 40 if p["torch"] else 0
        return t

    # -- the database side ------------------------------------------------------------------------
    def stat(self):
        cols = ["worker_state", "device", "requests", "batches", "mean_batch_size", "mean_wait_us",
                "gpu_memory_in_use", "cpu_fallbacks", "errors", "index_loads"]
        r = self.pg.sql("SELECT " + ",".join(cols) + " FROM vsearch_stat")
        return dict(zip(cols, r[0])) if r else {}

    def wait_worker(self, timeout=90):
        t0 = time.time()
        s = {}
        while time.time() - t0 < timeout:
            s = self.stat()
            if s.get("worker_state") in ("serving", "unavailable"):
                return s
            time.sleep(0.2)
        return s

    def setup_db(self):
        self.pg = Pg.from_env()
        self.pg.run("SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS vsearch;")
        ver = self.pg.value("SHOW server_version")
        s = self.wait_worker()
        self.log(f"PostgreSQL {ver}; worker: {s.get('worker_state')} on {s.get('device')}")
        self.worker = s

    def load(self, ds, meta):
        t = ds["table"]
        n, dim, nq = meta["n"], meta["dim"], ds["nq"]
        self.pg.run(f"""DROP TABLE IF EXISTS {t}, {t}_q;
            CREATE TABLE {t} (id bigint NOT NULL, v vector({dim}) NOT NULL);
            CREATE TABLE {t}_q (qid bigint NOT NULL, v vector({dim}) NOT NULL);""")
        base = D.load(meta, "base")
        t0 = time.time()
        self.pg.copy_in(f"COPY {t} FROM STDIN (FORMAT binary)", lambda f: D.copy_binary(f, base))
        load_s = time.time() - t0
        self.pg.copy_in(f"COPY {t}_q FROM STDIN (FORMAT binary)",
                        lambda f: D.copy_binary(f, D.load(meta, "query", nq)))
        self.pg.run(f"ALTER TABLE {t}_q ADD PRIMARY KEY (qid); VACUUM ANALYZE {t}; VACUUM ANALYZE {t}_q;")
        t0 = time.time()
        self.pg.run(f"CREATE INDEX {t}_idx ON {t} USING vs_flat (v vector_l2_ops)")
        build_s = time.time() - t0
        self.pg.run(f"ANALYZE {t}")
        isize = int(self.pg.value(f"SELECT pg_relation_size('{t}_idx')"))
        tsize = int(self.pg.value(f"SELECT pg_total_relation_size('{t}')")) - isize
        return {"load_s": load_s, "build_s": build_s, "bpv": isize / n, "heap_bpv": tsize / n}

    # -- one dataset ----------------------------------------------------------------------------
    def run_dataset(self, ds):
        p = self.plan
        over = p.get("per_dataset", {}).get(ds["name"], {})
        recall_q = over.get("recall_q", p["recall_q"])
        batch_q = over.get("batch_q", p["batch_q"])
        paths = over.get("paths", p["paths"])
        ds["clients"] = over.get("clients", p["clients"])
        k = p["k"]
        ds["table"] = re.sub(r"[^a-z0-9]", "_", ds["name"].lower())
        pr = self.progress
        pr.step(f"{ds['name']}: prepare", 5)
        meta = D.prepare(ds["name"], progress=pr.tick)
        ds["nq"] = min(ds["nq"], meta["nq"])
        if self.mode == "gpu" and not self.worker_ok() and ds["nq"] > 1000:
            # no GPU worker: the ground truth would run on one CPU thread per query batch
            self.log(f"{ds['name']}: the GPU worker does not serve: 1000 queries instead of {ds['nq']}")
            ds["nq"] = 1000
        n, dim, nq, t = meta["n"], meta["dim"], ds["nq"], ds["table"]
        self.log(f"{ds['name']}: {n} x {dim}, {nq} queries ({'cached' if meta['cached'] else 'built'}; "
                 f"sha256 {meta['sha256']['base.fvecs'][:12]})")
        pr.step(f"{ds['name']}: load + build index", 8)
        li = self.load(ds, meta)
        self.log(f"{ds['name']}: COPY {li['load_s']:.1f}s; vs_flat build {li['build_s']:.2f}s, "
                 f"{li['bpv']:.0f} index bytes/vector (heap+toast {li['heap_bpv']:.0f})")

        # the worker's first search of this index loads it into its cache
        cache_load = None
        if any(PATHS[x]["via"].startswith("worker") for x in paths) and self.worker_ok():
            wpath = next(x for x in paths if PATHS[x]["via"].startswith("worker"))
            t0 = time.time()
            self.pg.sql(f"SELECT id FROM {t} ORDER BY v <-> (SELECT v FROM {t}_q WHERE qid = 1) LIMIT 1",
                        PATHS[wpath]["settings"])
            cache_load = time.time() - t0

        pr.step(f"{ds['name']}: ground truth", 5)
        gt_settings = {"vsearch.device": p["gt_device"]}
        if p["gt_device"] == "auto" and not self.worker_ok():
            gt_settings = {"vsearch.device": "cpu"}
        gt_ids, gt_dist, info = GT.get(self.pg, meta, t, f"{t}_idx", f"{t}_q", nq, k, gt_settings,
                                       chunk=p["gt_chunk"], tick=pr.tick, log=self.log)
        bad = GT.cross_check(meta, gt_ids, gt_dist, k, sample=min(p["xcheck"], nq))
        self.log(f"{ds['name']}: ground truth vs numpy float64 on {min(p['xcheck'], nq)} queries: "
                 f"{'ok' if bad == 0 else f'{bad} WRONG'}")
        if bad:
            self.check_failures.append(f"{ds['name']}: ground truth wrong on {bad} sampled queries")

        base = {"dataset": ds["name"], "n": n, "dim": dim, "k": k}
        for path in paths:
            try:
                self.run_path(ds, path, base, li, recall_q, batch_q, gt_ids, gt_dist, cache_load)
            except Exception as e:  # keep going: other paths still give numbers
                self.fail(f"{ds['name']} {path}", e)

    def worker_ok(self):
        s = self.worker
        if self.mode == "gpu":
            return s.get("worker_state") == "serving" and not str(s.get("device", "")).startswith("cpu")
        return s.get("worker_state") == "serving"

    def run_path(self, ds, path, base, li, recall_q, batch_q, gt_ids, gt_dist, cache_load):
        p, P, pr = self.plan, PATHS[path], self.progress
        t, k, nq = ds["table"], p["k"], ds["nq"]
        if P["via"].startswith("worker") and not self.worker_ok():
            self.log(f"{ds['name']} {path}: SKIPPED, the worker does not serve "
                     f"({self.worker.get('worker_state')}: {self.worker.get('device')})")
            self.failures.append(f"{ds['name']} {path}: worker not serving")
            return
        S = P["settings"]
        is_index = P["index"] == "vs_flat"
        common = dict(base, index=P["index"], device=P["device"],
                      build_s=li["build_s"] if is_index else None,
                      bytes_per_vector=li["bpv"] if is_index else None)
        extra = {"via": P["via"]}
        if path == "seqscan":
            extra["parallel_workers"] = self.pg.value("SHOW max_parallel_workers_per_gather")
        if P["via"].startswith("worker") and cache_load is not None:
            extra["cache_load_s"] = f"{cache_load:.2f}"

        # plan check: the index paths must use the vs_flat index, the seq scan must not
        plan = self.pg.run(f"EXPLAIN (COSTS OFF) SELECT id FROM {t} ORDER BY v <-> "
                           f"(SELECT v FROM {t}_q WHERE qid = 1) LIMIT {k}", S)
        uses = f"Index Scan using {t}_idx" in plan
        if uses != is_index:
            raise RuntimeError(f"unexpected plan for {path}:\n{plan}")

        # recall of single queries (one statement, R queries in a LATERAL join)
        R = min(recall_q[path], nq)
        pr.step(f"{ds['name']}: recall {path} ({R} queries)", 3)
        self.reset_stats()
        rows, lateral_s = self.pg.sql_timed(f"""
            SELECT q.qid, s.id, s.d FROM {t}_q q CROSS JOIN LATERAL
              (SELECT id, v <-> q.v AS d FROM {t} ORDER BY v <-> q.v LIMIT {k}) s
             WHERE q.qid <= {R} ORDER BY q.qid, s.d, s.id""", S)
        rec = self.recall_of(rows, R, gt_ids, gt_dist, k)
        ws = self.worker_check(path, R)
        self.log(f"{ds['name']} {path}: recall@{k} {rec:.4f} over {R} single queries "
                 f"({R / lateral_s:.1f} q/s in one session){ws}")
        if is_index and rec < 1.0:
            self.check_failures.append(f"{ds['name']} {path}: vs_flat recall@{k} = {rec:.4f} < 1")
        gpu_mb = self.gpu_mem() if path == "gpu" else None

        # concurrent single queries
        script = (f"\\set qid random(1, {nq})\n"
                  f"SELECT id FROM {t} ORDER BY v <-> (SELECT v FROM {t}_q WHERE qid = :qid) LIMIT {k};\n")
        secs = p["seconds"][path]
        for c in ds["clients"]:
            pr.step(f"{ds['name']}: pgbench {path} clients={c} ({secs}s)", secs + 1.5)
            self.reset_stats()
            r = self.pg.pgbench(script, c, secs, S, tick=pr.tick)
            ws = self.worker_check(path, r["count"], quiet=True)
            prm = dict({"mode": "single", "T": f"{secs}s", "txns": r["steady_count"], "recall_q": R,
                        "first_txn_ms_max": f"{r['first_ms_max']:.1f}", "tps_all": f"{r['tps']:.1f}",
                        "steady": "yes" if r["steady"] else "no (all transactions)"}, **extra)
            if P["via"].startswith("worker"):
                prm["mean_batch"] = f"{float(self.last_stat.get('mean_batch_size') or 0):.2f}"
            if r["failed"]:
                prm["failed_txns"] = r["failed"]
            self.add(**common, params=params_str(prm), clients=c, recall=rec, qps=r["qps"],
                     p50_ms=r["p50_ms"], p99_ms=r["p99_ms"],
                     gpu_mem_mb=gpu_mb if path == "gpu" else None)
            self.log(f"{ds['name']} {path} c={c}: {r['qps']:.1f} QPS, p50 {r['p50_ms']:.2f} ms, "
                     f"p99 {r['p99_ms']:.2f} ms ({r['steady_count']} queries after each client's first; "
                     f"first took up to {r['first_ms_max']:.0f} ms; all: {r['tps']:.1f} tps, "
                     f"p99 {r['all_p99_ms']:.2f} ms){ws}")

        # batch
        if path == "seqscan":
            self.add(**common, params=params_str(dict({"mode": "batch", "batch": R, "how": "lateral join",
                                                       "reps": 1}, **extra)),
                     clients=1, recall=rec, qps=R / lateral_s, p50_ms=lateral_s * 1e3, p99_ms=lateral_s * 1e3)
            return
        B = min(batch_q.get(path, 0), nq)
        if not B:
            return
        pr.step(f"{ds['name']}: batch {path} ({B} queries)", 5)
        arr = f"ARRAY(SELECT v FROM {t}_q WHERE qid <= {B} ORDER BY qid)"
        rows = self.pg.sql(f"""
            SELECT b.query, t.id, b.distance FROM vsearch_knn_batch('{t}_idx', {arr}, {k}) b
              JOIN {t} t ON t.ctid = b.row_ctid ORDER BY 1, 3, 2""", S)
        brec = self.recall_of(rows, B, gt_ids, gt_dist, k)
        self.reset_stats()
        reps = p["batch_reps"]
        times = self.pg.timed(f"SELECT count(*) FROM vsearch_knn_batch('{t}_idx', {arr}, {k})", S, reps)
        ws = self.worker_check(path, reps, quiet=True)  # one request per batch
        times.sort()
        med = times[len(times) // 2]
        prm = dict({"mode": "batch", "batch": B, "reps": reps}, **extra)
        if P["via"].startswith("worker"):
            prm["mean_batch"] = f"{float(self.last_stat.get('mean_batch_size') or 0):.2f}"
        self.add(**common, params=params_str(prm), clients=1, recall=brec, qps=B / med,
                 p50_ms=med * 1e3, p99_ms=times[-1] * 1e3, gpu_mem_mb=self.gpu_mem() if path == "gpu" else None)
        self.log(f"{ds['name']} {path} batch of {B}: recall@{k} {brec:.4f}, {B / med:.0f} QPS "
                 f"({med * 1e3:.0f} ms per batch){ws}")
        if brec < 1.0:
            self.check_failures.append(f"{ds['name']} {path} batch: recall@{k} = {brec:.4f} < 1")

    def recall_of(self, rows, nqueries, gt_ids, gt_dist, k):
        ids = [[] for _ in range(nqueries)]
        dist = [[] for _ in range(nqueries)]
        for q, i, d in rows:
            q = int(q) - 1
            if 0 <= q < nqueries:
                ids[q].append(int(i))
                dist[q].append(float(d))
        return GT.recall(ids, dist, gt_ids, gt_dist, k)

    def reset_stats(self):
        try:
            self.pg.run("SELECT vsearch_stat_reset()")
        except PgError:
            pass

    def worker_check(self, path, expected, quiet=False):
        """After a run through the worker: did it answer (no CPU fallback)?  Text for the log."""
        if not PATHS[path]["via"].startswith("worker"):
            return ""
        s = self.stat()
        self.last_stat = s
        req, fb, err = int(s.get("requests", 0)), int(s.get("cpu_fallbacks", 0)), int(s.get("errors", 0))
        if fb or err or req < expected:
            self.check_failures.append(f"{path}: worker answered {req} of {expected} searches, "
                                       f"{fb} CPU fallbacks, {err} errors")
            return f"  [WORKER: {req} answered, {fb} fallbacks, {err} errors]"
        return "" if quiet else f"  [worker answered {req}, mean batch {float(s.get('mean_batch_size', 0)):.1f}]"

    def gpu_mem(self):
        try:
            return round(int(self.stat().get("gpu_memory_in_use", 0)) / 2 ** 20, 1)
        except Exception:
            return None

    def stop_cluster(self):
        if self.pg is None:
            return
        try:
            subprocess.run(self.pg.cmd([os.path.join(self.pg.bindir, "pg_ctl"), "-D",
                                        os.path.join(self.pg.host, "data"), "-m", "fast", "-w", "stop"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, cwd=self.pg.host)
            self.log("cluster stopped (the GPU is the engine's alone from here)")
        except Exception as e:
            self.log(f"could not stop the cluster: {e}")

    # -- engine directly ----------------------------------------------------------------------
    def find_engine_bench(self):
        c = [os.environ.get("VSEARCH_ENGINE_BENCH", "")]
        c += [os.path.join(ROOT, p) for p in (
            ".bench-device/bin/vsearch_engine_bench", ".device/bin/vsearch_engine_bench",
            "build-cuda-dev/gpu/vsearch_engine_bench", "build/on/gpu/vsearch_engine_bench",
            "build/auto/gpu/vsearch_engine_bench", "build/off/gpu/vsearch_engine_bench", "build/bench/gpu/vsearch_engine_bench",
            "build-cuda/gpu/vsearch_engine_bench", "build/dev/gpu/vsearch_engine_bench")]
        for p in c:
            if p and os.access(p, os.X_OK):
                return p
        return None

    def run_engine(self, e):
        binary = self.find_engine_bench()
        if not binary:
            self.log("engine bench: no vsearch_engine_bench binary found (build it: "
                     "cmake --build build/<variant> --target vsearch_engine_bench); skipped")
            self.failures.append("engine bench binary missing")
            return
        name = f"engine-{e['n'] // 1000000}M-{e['d']}" if e["n"] >= 10 ** 6 else f"engine-{e['n'] // 1000}k-{e['d']}"
        work = tempfile.mkdtemp(prefix="vsearch-engine-", dir=os.environ.get("BENCH_TMP", "/tmp"))
        ej = os.path.join(work, "engine.json")
        argv = [binary, "--backend", e["backend"], "--n", str(e["n"]), "--d", str(e["d"]),
                "--nq", str(e["nq"]), "--out", ej, "--skip-kmeans-cpu"]
        if e.get("quick"):
            argv.append("--quick")
        torch = self.plan["torch"] and e["backend"] == "cuda"
        if torch:
            argv += ["--data", work]
        self.progress.step(f"engine {e['backend']} {e['n']} x {e['d']}", 60 if e["backend"] == "cuda" else 30)
        elog = open(os.path.join(self.outdir, "engine.log"), "a")
        elog.write(f"\n==== {' '.join(argv)}\n")
        elog.flush()
        t0 = time.time()
        limit = min(e.get("timeout", 300), max(30.0, self.remaining() - 20))
        try:
            with GpuMem() as gm:
                p = subprocess.Popen(argv, stdout=elog, stderr=subprocess.STDOUT)
                while p.poll() is None:
                    self.progress.tick((time.time() - t0) / 60)
                    time.sleep(0.5)
                    if time.time() - t0 > limit:
                        p.kill()
                        raise RuntimeError(f"engine bench stopped after {limit:.0f}s (its limit or the budget)")
            if p.returncode != 0:
                raise RuntimeError(f"engine bench exited {p.returncode} (see engine.log)")
            res = json.load(open(ej))
            self.log(f"engine bench {e['backend']} n={e['n']} d={e['d']}: {time.time() - t0:.0f}s on {res['device']}")
            device = "gpu" if e["backend"] == "cuda" else "cpu"
            for r in res["rows"]:
                m = re.match(r"knn nq=(\d+) k=(\d+) (\w+)", r["case"])
                prm = {"mode": "engine", "case": r["case"].replace(";", ","),
                       "data": "gaussian N(0 1) seeds 42/43 (engine bench)",
                       "note": r.get("note", "").replace(";", ",")}
                self.add(dataset=name, n=e["n"], dim=e["d"], index="engine", device=device, clients=1,
                         k=m.group(2) if m else "", params=params_str(prm),
                         qps=r["qps"] if r["qps"] else None, p50_ms=r["seconds"] * 1e3,
                         gpu_mem_mb=gm.mb() if device == "gpu" else None)
            if torch:
                self.run_torch(e, work, ej, name, res)
        finally:
            elog.close()
            shutil.rmtree(work, ignore_errors=True)

    def run_torch(self, e, work, ej, name, eng):
        tj = os.path.join(work, "torch.json")
        py = os.environ.get("BENCH_TORCH_PYTHON", "python3")
        argv = [py, os.path.join(ROOT, "gpu/bench/torch_baseline.py"), work, ej, "--n", str(e["n"]),
                "--d", str(e["d"]), "--nq", str(e["nq"]), "--out", tj] + (["--quick"] if e.get("quick") else [])
        self.progress.step(f"torch baseline {e['n']} x {e['d']}", 40)
        t0 = time.time()
        limit = min(e.get("torch_timeout", 300), max(30.0, self.remaining() - 15))
        with open(os.path.join(self.outdir, "engine.log"), "a") as elog, GpuMem() as gm:
            elog.write(f"\n==== {' '.join(argv)}\n")
            elog.flush()
            p = subprocess.Popen(argv, stdout=elog, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, PYTHONUNBUFFERED="1"))
            while p.poll() is None:
                self.progress.tick((time.time() - t0) / 40)
                time.sleep(0.5)
                if time.time() - t0 > limit:
                    p.kill()
                    raise RuntimeError(f"torch baseline stopped after {limit:.0f}s (its limit or the budget)")
        if p.returncode != 0:
            raise RuntimeError(f"torch baseline exited {p.returncode} (see engine.log)")
        res = json.load(open(tj))
        ag = res.get("agreement") or {}
        nq = e["nq"]
        cases = {"knn10": (nq, 10, "addmm+topk"), "knn10_cdist": (nq, 10, "cdist+topk"),
                 "knn10_b1": (1, 10, "addmm+topk"), "knn10_b16": (16, 10, "addmm+topk"),
                 "knn10_b64": (64, 10, "addmm+topk"), "knn1024": (nq, 1024, "addmm+topk"),
                 "knn10000": (min(nq, 1000), 10000, "addmm+topk")}
        for key, secs in res["torch_s"].items():
            b, kk, how = cases.get(key, (nq, "", key))
            prm = {"mode": "torch", "case": f"knn nq={b} k={kk} L2", "how": how, "tf32": "off",
                   "data": "gaussian N(0 1) seeds 42/43 (engine bench)"}
            self.add(dataset=name, n=e["n"], dim=e["d"], index="torch", device="torch", clients=1, k=kk,
                     params=params_str(prm), qps=b / secs if secs else None, p50_ms=secs * 1e3,
                     gpu_mem_mb=gm.mb())
        if ag:
            # the engine's recall@10 against PyTorch, mismatches checked in float64 (ties allowed)
            rec = 1.0 - ag["engine_worse"] / max(1, ag["queries"])
            for row in self.rows:
                if row["dataset"] == name and row["index"] == "engine" and \
                        row["params"].startswith(f"mode=engine;case=knn nq={nq} k=10 L2"):
                    row["recall"] = fmt(rec, 6)
                    row["params"] += f";recall_vs=torch fp32 ({ag['identical']}/{ag['queries']} identical)"
            self.rewrite_csv()
            if rec < 1.0:
                self.check_failures.append(f"{name}: engine worse than PyTorch on {ag['engine_worse']} queries")
        self.log(f"torch baseline n={e['n']} d={e['d']}: {time.time() - t0:.0f}s; agreement {ag}")

    def rewrite_csv(self):
        self.csv_f.close()
        self.csv_f = open(self.csv_path, "w", newline="")
        self.csv = csv.DictWriter(self.csv_f, fieldnames=COLUMNS)
        self.csv.writeheader()
        self.csv.writerows(self.rows)
        self.csv_f.flush()

    # -- the whole run ----------------------------------------------------------------------------
    def fail(self, what, e):
        self.failures.append(f"{what}: {e}")
        self.log(f"FAILED {what}: {e}")
        self.log_f.write(traceback.format_exc() + "\n")

    def run(self):
        self.log(f"bench {self.mode} -> {self.outdir}; host {self.host}; load average {loadavg()}")
        try:
            self.setup_db()
        except Exception as e:
            self.fail("database setup", e)
            return self.finish()
        for ds in self.plan["datasets"]:
            if ds["name"].startswith("fashion") and not D.fashion_available():
                self.fail(ds["name"], "Fashion-MNIST files not found (dataset-fashion-mnist)")
                continue
            try:
                self.run_dataset(ds)
            except Exception as e:
                self.fail(ds["name"], e)
            finally:
                try:  # free the space (and the worker's cache) before the next set
                    self.pg.run(f"DROP TABLE IF EXISTS {ds.get('table', 'x')}, {ds.get('table', 'x')}_q")
                except Exception:
                    pass
        if self.plan["engine"]:
            self.stop_cluster()
        for e in self.plan["engine"]:
            if e.get("optional") and self.remaining() < e.get("need_s", 200):
                self.log(f"engine {e['n']} x {e['d']}: skipped, {self.remaining():.0f}s left of the budget")
                continue
            try:
                self.run_engine(e)
            except Exception as ex:
                if e.get("optional") and "budget" in str(ex):
                    self.log(f"engine {e['n']} x {e['d']} (optional): {ex}")
                else:
                    self.fail(f"engine {e['backend']} {e['n']} x {e['d']}", ex)
        return self.finish()

    def finish(self):
        self.progress.finish()
        self.log(f"load average at the end {loadavg()} (other work on this machine skews the numbers)")
        self.csv_f.close()
        try:
            import plot
            made = plot.plot_all(self.csv_path, self.outdir)
            self.log("plots: " + ", ".join(os.path.basename(m) for m in made))
        except ImportError as e:
            self.log(f"no plots here ({e}): make them elsewhere with bench/plot.py {self.csv_path} DIR")
        except Exception as e:
            self.fail("plots", e)
        md = summary_markdown(self.rows)
        with open(os.path.join(self.outdir, "summary.md"), "w") as f:
            f.write(md)
        print(md)
        for c in self.check_failures:
            print("CHECK FAILED: " + c)
        for f in self.failures:
            print("PHASE FAILED: " + f)
        vs = [r for r in self.rows if r["index"] == "vs_flat"]
        print(f"vs_flat recall check: {len(vs)} rows, "
              f"{'all 1.0' if vs and all(r['recall'] == '1' for r in vs) else 'NOT all 1.0'}; "
              f"{len(self.rows)} rows in {self.csv_path}")
        self.log_f.close()
        if self.check_failures:
            return 1
        return 2 if self.failures else 0


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
        out.append(f"| {r['dataset']} | {r['n']} × {r['dim']} | {path} | {r['device']} | {mode} | {cb} | "
                   f"{num(r['recall'], 4)} | {num(r['qps'], 0)} | {num(r['p50_ms'], 2)} | "
                   f"{num(r['p99_ms'], 2)} | {num(r['build_s'], 2)} | {num(r['bytes_per_vector'], 0)} | "
                   f"{r['gpu_mem_mb']} |")
    return "\n".join(out) + "\n"


def num(v, nd):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return ""
    return f"{x:,.{nd}f}" if x >= 100 or nd == 0 else f"{x:.{nd}f}"


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=sorted(PLANS))
    ap.add_argument("outdir")
    ap.add_argument("--seconds", type=int, help="pgbench duration for every path")
    ap.add_argument("--deadline", type=float, help="epoch seconds: optional phases stop before it")
    ap.add_argument("--no-engine", action="store_true")
    ap.add_argument("--datasets", help="comma-separated dataset names (replaces the plan's)")
    a = ap.parse_args(argv)
    return Harness(a.mode, a.outdir, a).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
