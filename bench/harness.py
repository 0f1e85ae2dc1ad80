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
from graph_runs import GRAPH_PLANS, GraphRuns, graph_markdown  # noqa: E402
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
    # vs_graph single queries of the --graph plan (graph_runs.py: the graph is the only index then)
    "graph-gpu": {"device": "gpu", "index": "vs_graph", "via": "worker",
                  "settings": {"vsearch.device": "auto", "enable_seqscan": "off"}},
    "graph-worker-cpu": {"device": "cpu", "index": "vs_graph", "via": "worker(cpu)",
                         "settings": {"vsearch.device": "gpu", "enable_seqscan": "off"}},
    "graph-cpu": {"device": "cpu", "index": "vs_graph", "via": "backend",
                  "settings": {"vsearch.device": "cpu", "enable_seqscan": "off"}},
}

# vs_ivfpq search paths (run after the vs_flat paths, on the same table, which then has both
# indexes; the plan check makes sure the single queries use the vs_ivfpq one).  "auto" is the
# worker when it serves vs_ivfpq, else the backend: which one answered is read from vsearch_stat
# and reported (served=worker|backend), never a failure.  vsearch.ivfpq_probes / ivfpq_rerank are
# added per point.
IVFPQ_PATHS = {
    "ivfpq-cpu": {"via": "backend", "settings": {"vsearch.device": "cpu", "enable_seqscan": "off"}},
    "ivfpq-auto": {"via": "auto", "settings": {"vsearch.device": "auto", "enable_seqscan": "off"}},
}
# tried in order when the planner does not pick the vs_ivfpq index for a single query (noted in
# params as steer=...); the plan check fails the point if none does
IVFPQ_STEER = [{}, {"random_page_cost": "1.1"}, {"random_page_cost": "1.1", "seq_page_cost": "4"}]

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
        "engine": [{"backend": "cpu", "n": 100000, "d": 128, "nq": 200, "quick": True},
                   # IVF-PQ in the engine: small (CPU training is slow: ~1 GFLOP/s here)
                   {"backend": "cpu", "mode": "ivfpq", "n": 20000, "d": 64, "nq": 200, "nlist": 141,
                    "m": 16, "quick": True, "timeout": 240}],
        "torch": False,
        # vs_ivfpq: the sweep (probes x rerank) runs the batch function on sweep_path; the points
        # of highest batch QPS reaching each target recall are then measured on every path with
        # single queries (recall pass + pgbench) and the batch function
        "ivfpq": {"probes": [1, 2, 4, 8, 16, 32, 64], "rerank": [10, 50, 200],
                  "sweep_path": "ivfpq-cpu", "paths": ["ivfpq-cpu", "ivfpq-auto"],
                  "batch_q": {"worker": 1000, "backend": 200}, "batch_reps": 2, "recall_q": 200,
                  "clients": [1, 4], "seconds": 5, "targets": [0.9, 0.95, 0.99]},
        # Faiss CPU (Debian's python3-faiss) beside vs_ivfpq: the same lists and m, trained on as
        # many rows as the vs_ivfpq build's sample, the sweep's probes x rerank (and rerank 0)
        "faiss": {"single_q": 200, "timeout": 900},
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
                                           "recall_q": {"gpu": 200, "cpu": 200}, "ivfpq": False},
                        "synth-1M-128": {"recall_q": {"gpu": 1000, "cpu": 50, "seqscan": 10},
                                         "batch_q": {"gpu": 10000, "cpu": 200}}},
        "engine": [{"backend": "cuda", "n": 1000000, "d": 128, "nq": 10000, "quick": True,
                    "timeout": 180, "torch_timeout": 150},
                   {"backend": "cuda", "n": 10000000, "d": 96, "nq": 10000, "quick": True,
                    "optional": True, "need_s": 200, "timeout": 200, "torch_timeout": 150},
                   # IVF-PQ in the engine: GPU build and search, then the CPU backend at the same
                   # settings (fewer queries: QPS is per query), then 10M x 96 if time is left
                   {"backend": "cuda", "mode": "ivfpq", "n": 1000000, "d": 128, "nq": 10000, "nlist": 1024,
                    "m": 32, "quick": True, "optional": True, "need_s": 90, "timeout": 150},
                   {"backend": "cpu", "mode": "ivfpq", "n": 1000000, "d": 128, "nq": 1000, "nlist": 1024,
                    "m": 32, "quick": True, "optional": True, "need_s": 150, "timeout": 240},
                   {"backend": "cuda", "mode": "ivfpq", "n": 10000000, "d": 96, "nq": 10000, "nlist": 3162,
                    "m": 24, "quick": True, "optional": True, "need_s": 200, "timeout": 240}],
        "torch": True,
        # optional on the GPU machine (the vs_flat sweep alone takes ~470 s of the 570): each
        # dataset's vs_ivfpq build + sweep runs only with need_s left (plus reserve_s for the
        # engine's required phase); see bench/README.md for a run of vs_ivfpq alone
        "ivfpq": {"probes": [1, 2, 4, 8, 16, 32, 64], "rerank": [10, 50, 200],
                  "sweep_path": "ivfpq-auto", "paths": ["ivfpq-auto", "ivfpq-cpu"],
                  "batch_q": {"worker": 10000, "backend": 500}, "batch_reps": 3, "recall_q": 200,
                  "clients": [1, 32], "seconds": 5, "targets": [0.9, 0.95, 0.99],
                  "optional": True, "reserve_s": 150},
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
        "ivfpq": {"probes": [1, 4, 64], "rerank": [10, 50], "sweep_path": "ivfpq-cpu",
                  "paths": ["ivfpq-cpu", "ivfpq-auto"], "batch_q": {"worker": 50, "backend": 50},
                  "batch_reps": 1, "recall_q": 50, "clients": [1], "seconds": 1, "targets": [0.9, 0.99]},
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


def engine_ivfpq_recall(note):
    """recall@10 from an engine bench --mode ivfpq note: "recall@10 after exact re-rank 0.98", or
    "k=40; recall@10 after exact re-rank of kr candidates 10:0.70 40:0.98 ..." (the value at kr = k,
    the candidates the search returned)."""
    m = re.search(r"recall@10 after exact re-rank ([0-9.]+)", note)
    if m:
        return float(m.group(1))
    k = re.search(r"k=(\d+)", note)
    per = dict(re.findall(r"(\d+):([0-9.]+)", note.split("candidates", 1)[-1]))
    if k and k.group(1) in per:
        return float(per[k.group(1)])
    return None


def ivfpq_default_m(d):
    """vs_ivfpq's default m (docs/INDEXES.md): the largest divisor of d with d / m >= 4 and
    m <= 64, 1 below 8 dimensions."""
    if d < 8:
        return 1
    return max(m for m in range(1, 65) if d % m == 0 and d // m >= 4)


def params_str(d):
    return ";".join(f"{k}={v}" for k, v in d.items() if v is not None and v != "")


class Harness(GraphRuns):
    def __init__(self, mode, outdir, args):
        self.mode, self.outdir, self.args = mode, outdir, args
        self.plan = json.loads(json.dumps(PLANS[mode]))
        if args.graph:
            # vs_graph against hnswlib and vs_ivfpq (graph_runs.py) in place of the vs_flat sweep
            g = json.loads(json.dumps(GRAPH_PLANS[mode]))
            if args.graph_efs:
                g["efs"] = [int(x) for x in args.graph_efs.split(",")]
            if args.graph_expands:
                g["expands"] = [int(x) for x in args.graph_expands.split(",")]
            self.plan.update(datasets=g.pop("datasets"), engine=[], ivfpq=None, graph=g)
            self.plan["seconds"] = dict(self.plan["seconds"], **{p: g["seconds"] for p in PATHS})
        if args.seconds:
            self.plan["seconds"] = {p: args.seconds for p in self.plan["seconds"]}
        if args.clients:
            self.plan["clients"] = [int(c) for c in args.clients.split(",")]
        if args.datasets:
            # name or name:queries (a dataset outside the plan gets 1000 queries by default)
            asked = dict((x.split(":") + ["0"])[:2] for x in args.datasets.split(","))
            names = list(asked)
            self.plan["datasets"] = [d for d in self.plan["datasets"] if d["name"] in names] + \
                [{"name": n, "nq": 1000} for n in names if n not in [d["name"] for d in self.plan["datasets"]]]
            for d in self.plan["datasets"]:
                if int(asked[d["name"]]) > 0:
                    d["nq"] = int(asked[d["name"]])
        if args.no_engine:
            self.plan["engine"] = []
        if args.engine_modes:
            em = args.engine_modes.split(",")
            self.plan["engine"] = [e for e in self.plan["engine"] if e.get("mode", "exact") in em]
        # extra settings of every batch-function call, e.g. work_mem=64MB
        self.batch_settings = dict(kv.split("=", 1) for kv in args.batch_settings.split(",")) \
            if args.batch_settings else {}
        if args.paths:
            keep = args.paths.split(",")
            self.plan["paths"] = [x for x in self.plan["paths"] if x in keep]
            for over in self.plan.get("per_dataset", {}).values():
                if "paths" in over:
                    over["paths"] = [x for x in over["paths"] if x in keep]
            iv = self.plan.get("ivfpq")
            if iv:
                iv["paths"] = [x for x in iv["paths"] if x in keep]
                if iv["sweep_path"] not in keep:
                    iv["sweep_path"] = iv["paths"][0] if iv["paths"] else None
                if not iv["paths"]:
                    self.plan["ivfpq"] = None
        self.deadline = args.deadline or (time.time() + 3600)
        self.date = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        self.host = host_description()
        self.rows = []
        self.failures = []  # phases that failed
        self.notes = []  # optional phases the budget skipped or cut
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
            iv = p.get("ivfpq")
            if iv and over.get("ivfpq", True):
                t += 30 + 2 * len(iv["probes"]) * len(iv["rerank"]) + \
                    len(iv["targets"]) * len(iv["paths"]) * (3 + len(iv["clients"]) * (iv["seconds"] + 1.5))
        for e in p["engine"]:
            t += 60 if e["backend"] == "cuda" else 30
            t += 40 if p["torch"] and e.get("mode", "exact") == "exact" else 0
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

    def lanes_sweep(self, path):
        """--worker-lanes: the values of vsearch.worker_lanes a worker path runs with (None: as set)."""
        if not self.args.worker_lanes or not PATHS[path]["via"].startswith("worker"):
            return [None]
        return [int(x) for x in self.args.worker_lanes.split(",")]

    def set_worker_lanes(self, lanes):
        """Sets vsearch.worker_lanes (the worker restarts its engine: its cache is loaded again by
        the path's first query, before anything is timed) unless lanes is None (one of
        lanes_sweep's values); returns the params that name it in the results."""
        if lanes is None:
            return {}
        self.pg.run(f"ALTER SYSTEM SET vsearch.worker_lanes = {lanes}")
        self.pg.run("SELECT pg_reload_conf()")
        time.sleep(1.0)
        s = self.wait_worker()
        self.log(f"vsearch.worker_lanes = {lanes}: worker {s.get('worker_state')}")
        return {"worker_lanes": lanes}

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
        if p.get("graph"):
            return self.run_graph(ds, meta, base, li, gt_ids, gt_dist)
        for path in paths:
            for lanes in self.lanes_sweep(path):
                try:
                    extra = self.set_worker_lanes(lanes)
                    self.run_path(ds, path, base, li, recall_q, batch_q, gt_ids, gt_dist, cache_load,
                                  extra=extra)
                except Exception as e:  # keep going: other paths still give numbers
                    self.fail(f"{ds['name']} {path}", e)
        if self.args.pk_ceiling:
            try:
                self.run_pk_ceiling(ds, base)
            except Exception as e:
                self.fail(f"{ds['name']} pk-lookup", e)

        # vs_ivfpq on the same table (after the vs_flat paths, whose plans therefore never see it)
        iv = p.get("ivfpq")
        if iv and over.get("ivfpq", True) and not self.args.no_ivfpq:
            # build + sweep, roughly: on the GPU machine the build is fast and the sweep's exact
            # re-rank (heap reads, ~150 s) dominates; on the CPU the training grows with the data
            need = iv.get("need_s", 60) + (150 + n * dim / 2e7 if self.mode == "gpu" else n * dim / 2e6)
            reserve = iv.get("reserve_s", 0) if self.plan["engine"] else 0
            if iv.get("optional") and self.remaining() < need + reserve:
                self.log(f"{ds['name']}: vs_ivfpq SKIPPED (optional): {self.remaining():.0f}s left of the "
                         f"budget, about {need:.0f}s needed plus {reserve}s kept for the engine")
                self.notes.append(f"{ds['name']}: vs_ivfpq skipped by the budget")
            else:
                try:
                    self.run_ivfpq(ds, base, iv, gt_ids, gt_dist)
                except Exception as e:
                    self.fail(f"{ds['name']} vs_ivfpq", e)
                if p.get("faiss") and not self.args.no_faiss:
                    try:
                        self.run_faiss(ds, base, iv)
                    except Exception as e:
                        self.fail(f"{ds['name']} faiss", e)

    # -- vs_ivfpq --------------------------------------------------------------------------------
    def served(self, expected):
        """Who answered the searches since the last reset (vs_ivfpq paths): 'worker' (the worker
        answered every one), 'backend' (none: the backend searched itself), else 'mixed(...)'.
        Never a failure: the worker may not serve vs_ivfpq."""
        s = self.stat()
        self.last_stat = s
        req, fb, err = int(s.get("requests", 0)), int(s.get("cpu_fallbacks", 0)), int(s.get("errors", 0))
        if req == 0:
            return "backend", s
        if req >= expected and not fb and not err:
            return "worker", s
        return f"mixed({req} worker of {expected}, {fb} fallbacks, {err} errors)", s

    def served_device(self, served):
        if served == "worker":
            dev = str(self.worker.get("device", ""))
            return "cpu" if dev.startswith("cpu") else "gpu"
        return "cpu"

    def ivfpq_plan_ok(self, t, idx, k, S):
        """The settings (S plus the first steering set that works) under which both single-query
        forms (pgbench's and the recall pass's LATERAL) use the vs_ivfpq index, or None."""
        for extra in IVFPQ_STEER:
            s = dict(S, **extra)
            p1 = self.pg.run(f"EXPLAIN (COSTS OFF) SELECT id FROM {t} ORDER BY v <-> "
                             f"(SELECT v FROM {t}_q WHERE qid = 1) LIMIT {k}", s)
            p2 = self.pg.run(f"EXPLAIN (COSTS OFF) SELECT q.qid, s.id FROM {t}_q q CROSS JOIN LATERAL "
                             f"(SELECT id FROM {t} ORDER BY v <-> q.v LIMIT {k}) s WHERE q.qid <= 2", s)
            if f"Index Scan using {idx} " in p1 + " " and f"Index Scan using {idx} " in p2 + " ":
                return s, extra
        self.log(f"plan does not use {idx} under any steering settings:\n{p1}\n{p2}")
        return None, None

    def run_ivfpq(self, ds, base, iv, gt_ids, gt_dist):
        p, pr = self.plan, self.progress
        t, k, nq, n = ds["table"], p["k"], ds["nq"], base["n"]
        idx = f"{t}_ivf"
        # the vs_flat paths are done: without their index the single-query plans can only pick
        # vs_ivfpq or a seq scan (with both, the planner may rightly prefer exact vs_flat on a
        # small table, whose cached search costs less than the re-rank's heap reads)
        self.pg.run(f"DROP INDEX IF EXISTS {t}_idx")
        pr.step(f"{ds['name']}: vs_ivfpq build", 30)
        t0 = time.time()
        with_opts = f" WITH ({self.args.ivfpq_options})" if self.args.ivfpq_options else ""
        out = self.pg.run(f"SET client_min_messages = warning; "
                          f"CREATE INDEX {idx} ON {t} USING vs_ivfpq (v vector_l2_ops){with_opts}")
        build_s = time.time() - t0
        self.pg.run(f"ANALYZE {t}")
        isize = int(self.pg.value(f"SELECT pg_relation_size('{idx}')"))
        lists = int(round(n ** 0.5))
        m = ivfpq_default_m(base["dim"])
        self.log(f"{ds['name']}: vs_ivfpq build {build_s:.1f}s (lists {lists}, m {m}, nbits 8, by the "
                 f"defaults), {isize / n:.1f} index bytes/vector{(' ' + out.strip()) if out.strip() else ''}")
        common = dict(base, index="vs_ivfpq" + (f" ({self.args.ivfpq_options})" if with_opts else ""),
                      build_s=build_s, bytes_per_vector=isize / n)
        cpu_build = {}
        if self.args.ivfpq_cpu_build:
            # the same build trained and encoded in the backend on the CPU, for comparison
            # with every core: the build's engine runs max_parallel_maintenance_workers + 1 threads
            threads = os.cpu_count() or 1
            t0 = time.time()
            self.pg.run(f"SET client_min_messages = warning; CREATE INDEX {idx}_cpu ON {t} "
                        f"USING vs_ivfpq (v vector_l2_ops)",
                        {"vsearch.device": "cpu", "max_parallel_maintenance_workers": threads - 1})
            cpu_build = {"cpu_build_s": f"{time.time() - t0:.1f}", "cpu_build_threads": threads}
            self.pg.run(f"DROP INDEX {idx}_cpu")
            self.log(f"{ds['name']}: vs_ivfpq build in the backend on the CPU (vsearch.device = cpu, "
                     f"{threads} engine threads) {cpu_build['cpu_build_s']}s, against {build_s:.1f}s "
                     f"with vsearch.device = auto")
        shape = dict({"lists": lists, "m": m}, **cpu_build)

        def batch_point(path, probes, rerank, B, reps):
            """recall and QPS of vsearch_knn_batch over B queries at one point: (recall, qps, row)."""
            S = dict(IVFPQ_PATHS[path]["settings"], **{"vsearch.ivfpq_probes": probes,
                                                      "vsearch.ivfpq_rerank": rerank})
            arr = f"ARRAY(SELECT v FROM {t}_q WHERE qid <= {B} ORDER BY qid)"
            self.reset_stats()
            rows = self.pg.sql(f"""
                SELECT b.query, t.id, b.distance FROM vsearch_knn_batch('{idx}', {arr}, {k}) b
                  JOIN {t} t ON t.ctid = b.row_ctid ORDER BY 1, 3, 2""", S)
            rec = self.recall_of(rows, B, gt_ids, gt_dist, k)
            # each psql session is a new backend: one untimed 1-query call first loads the index
            # into its cache (the in-backend path's per-backend copy), so the timings are steady
            warm = f"SELECT count(*) FROM vsearch_knn_batch('{idx}', ARRAY(SELECT v FROM {t}_q WHERE qid = 1), {k});"
            times = self.pg.timed(f"SELECT count(*) FROM vsearch_knn_batch('{idx}', {arr}, {k})",
                                  dict(S, client_min_messages="debug1", **self.batch_settings), reps,
                                  setup=warm)
            served, st = self.served(2 + reps)
            prm = dict({"mode": "batch", "via": IVFPQ_PATHS[path]["via"], "served": served,
                        "probes": probes, "rerank": rerank, "batch": B, "reps": reps}, **shape)
            split = self.batch_split(times, prm)
            times.sort()
            med = times[len(times) // 2]
            if served == "worker":
                prm["mean_batch"] = f"{float(st.get('mean_batch_size') or 0):.2f}"
            self.add(**common, device=self.served_device(served), params=params_str(prm), clients=1,
                     recall=rec, qps=B / med, p50_ms=med * 1e3, p99_ms=times[-1] * 1e3,
                     gpu_mem_mb=self.gpu_mem() if served == "worker" and self.mode == "gpu" else None)
            self.log(f"{ds['name']} {path} probes={probes} rerank={rerank} batch of {B}: recall@{k} "
                     f"{rec:.4f}, {B / med:.0f} QPS ({med * 1e3:.0f} ms per batch; served by {served}){split}")
            return rec, B / med, served

        def batch_size(path):
            """The batch for a path: the worker's size when the worker answers vs_ivfpq, else the
            backend's (one probe query decides)."""
            self.reset_stats()
            S = dict(IVFPQ_PATHS[path]["settings"], **{"vsearch.ivfpq_probes": 1})
            self.pg.sql(f"SELECT id FROM {t} ORDER BY v <-> (SELECT v FROM {t}_q WHERE qid = 1) LIMIT {k}", S)
            served, _ = self.served(1)
            B = iv["batch_q"]["worker" if served == "worker" else "backend"]
            return min(B, nq), served

        # 1. the sweep: the batch function at every (probes, rerank) on the sweep path
        sp = iv["sweep_path"]
        B, served = batch_size(sp)
        self.log(f"{ds['name']}: vs_ivfpq sweep on {sp} (first query served by {served}), batches of {B}")
        probes = sorted({min(pp, lists) for pp in iv["probes"]})  # probes >= lists: every list
        pts = [(pp, rr) for rr in iv["rerank"] for pp in probes]
        sweep = {}
        for i, (pp, rr) in enumerate(pts):
            if iv.get("optional") and self.remaining() < iv.get("reserve_s", 0) + 30:
                self.log(f"{ds['name']}: vs_ivfpq sweep stopped by the budget after {i} of {len(pts)} points")
                self.notes.append(f"{ds['name']}: vs_ivfpq sweep cut to {i} of {len(pts)} points by the budget")
                break
            pr.step(f"{ds['name']}: vs_ivfpq {sp} p={pp} r={rr}", 2)
            try:
                rec, qps, _ = batch_point(sp, pp, rr, B, iv["batch_reps"])
                sweep[(pp, rr)] = (rec, qps)
            except Exception as e:
                self.fail(f"{ds['name']} vs_ivfpq {sp} probes={pp} rerank={rr}", e)
            if not 0.0 <= sweep.get((pp, rr), (0.0,))[0] <= 1.0:
                self.check_failures.append(f"{ds['name']} vs_ivfpq: recall outside [0, 1]")

        # 2. operating points: the highest batch QPS reaching each target recall
        chosen = []
        for tg in iv["targets"]:
            ok = [(q, key) for key, (r, q) in sweep.items() if r >= tg]
            if ok:
                key = max(ok)[1]
                self.log(f"{ds['name']}: recall@{k} >= {tg}: probes={key[0]} rerank={key[1]} "
                         f"(recall {sweep[key][0]:.4f}, batch {sweep[key][1]:.0f} QPS)")
                if key not in chosen:
                    chosen.append(key)
            else:
                self.log(f"{ds['name']}: no swept point reaches recall@{k} >= {tg}")

        # 3. at those points, every path: single queries (recall pass + pgbench) and the batch
        for path in iv["paths"]:
            Bp = None
            for pp, rr in chosen:
                if iv.get("optional") and self.remaining() < iv.get("reserve_s", 0) + 20:
                    self.notes.append(f"{ds['name']}: vs_ivfpq operating points cut by the budget")
                    self.log(f"{ds['name']}: vs_ivfpq operating points stopped by the budget")
                    return
                try:
                    if path != sp:
                        if Bp is None:
                            Bp, _ = batch_size(path)
                        batch_point(path, pp, rr, Bp, iv["batch_reps"])
                    self.ivfpq_single(ds, path, pp, rr, iv, common, shape, idx, gt_ids, gt_dist)
                except Exception as e:
                    self.fail(f"{ds['name']} vs_ivfpq {path} probes={pp} rerank={rr}", e)

    def ivfpq_train_rows(self, n, dim):
        """The rows the vs_ivfpq build trains on (extension/ivfpqbuild.c: at least 32768 and 64
        per list, at most half of maintenance_work_mem)."""
        mwm = int(self.pg.value("SELECT setting::bigint * 1024 FROM pg_settings "
                                "WHERE name = 'maintenance_work_mem'"))
        mem_rows = max(mwm // 2, 16 << 20) // (4 * dim + 6)
        want = max(32768, 64 * (int(n ** 0.5) + 1))
        return min(n, max(min(want, mem_rows), 256))

    def run_faiss(self, ds, base, iv):
        """bench/faiss_baseline.py on the same data and shape as vs_ivfpq: build seconds, then
        per (probes, rerank) the batch QPS (every core) and single-query QPS (one thread, in
        process: no SQL around it) at its recall."""
        f = self.plan["faiss"]
        n, dim, nq = base["n"], base["dim"], ds["nq"]
        lists, m = int(round(n ** 0.5)), ivfpq_default_m(dim)
        train_n = self.ivfpq_train_rows(n, dim)
        work = tempfile.mkdtemp(prefix="vsearch-faiss-", dir=os.environ.get("BENCH_TMP", "/tmp"))
        fj = os.path.join(work, "faiss.json")
        argv = ["/usr/bin/python3", os.path.join(ROOT, "bench/faiss_baseline.py"), ds["name"],
                "--nq", str(nq), "--lists", str(lists), "--m", str(m), "--train-n", str(train_n),
                "--probes", ",".join(map(str, iv["probes"])),
                "--rerank", ",".join(map(str, [0] + iv["rerank"])),
                "--single-q", str(f["single_q"]), "--out", fj]
        self.progress.step(f"{ds['name']}: faiss baseline", 60)
        t0 = time.time()
        limit = min(f.get("timeout", 900), max(30.0, self.remaining() - 20))
        with open(os.path.join(self.outdir, "engine.log"), "a") as elog:
            elog.write(f"\n==== {' '.join(argv)}\n")
            elog.flush()
            p = subprocess.Popen(argv, stdout=elog, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, PYTHONUNBUFFERED="1"))
            while p.poll() is None:
                self.progress.tick((time.time() - t0) / 60)
                time.sleep(0.5)
                if time.time() - t0 > limit:
                    p.kill()
                    raise RuntimeError(f"faiss baseline stopped after {limit:.0f}s (its limit or the budget)")
        if p.returncode != 0:
            raise RuntimeError(f"faiss baseline exited {p.returncode} (see engine.log)")
        res = json.load(open(fj))
        shutil.rmtree(work, ignore_errors=True)
        build = res["train_s"] + res["add_s"]
        bpv = m * res["nbits"] / 8 + 8
        shape = {"lists": lists, "m": m, "nbits": res["nbits"], "train_rows": res["train_n"],
                 "train_s": f"{res['train_s']:.2f}", "add_s": f"{res['add_s']:.2f}",
                 "faiss": res["faiss"], "threads": res["threads"]}
        common = dict(base, index="faiss-ivfpq", device="cpu", build_s=build, bytes_per_vector=bpv)
        self.log(f"{ds['name']}: faiss {res['faiss']} IVF{lists},PQ{m}: train {res['train_s']:.1f}s "
                 f"({res['train_n']} rows), add {res['add_s']:.1f}s, {res['threads']} threads")
        for r in res["rows"]:
            prm = dict({"mode": "batch", "via": "faiss", "probes": r["probes"], "rerank": r["rerank"],
                        "batch": nq, "reps": 3}, **shape)
            self.add(**common, params=params_str(prm), clients=1, recall=r["recall"],
                     qps=r["batch_qps"], p50_ms=r["batch_s"] * 1e3)
            prm = dict({"mode": "single", "via": "faiss (in process, 1 thread)", "probes": r["probes"],
                        "rerank": r["rerank"], "txns": r["single_q"],
                        "cpu_ms": f"{r.get('single_cpu_ms', 0):.3f}"}, **shape)
            self.add(**common, params=params_str(prm), clients=1, recall=r["recall"],
                     qps=r["single_qps"], p50_ms=r["single_ms"])
            self.log(f"{ds['name']} faiss probes={r['probes']} rerank={r['rerank']}: recall@10 "
                     f"{r['recall']:.4f}, batch {r['batch_qps']:.0f} QPS, single {r['single_qps']:.0f} QPS")

    def ivfpq_single(self, ds, path, probes, rerank, iv, common, shape, idx, gt_ids, gt_dist):
        t, k, nq, pr = ds["table"], self.plan["k"], ds["nq"], self.progress
        S0 = dict(IVFPQ_PATHS[path]["settings"], **{"vsearch.ivfpq_probes": probes,
                                                   "vsearch.ivfpq_rerank": rerank})
        S, steer = self.ivfpq_plan_ok(t, idx, k, S0)
        if S is None:
            self.check_failures.append(f"{ds['name']} {path} probes={probes} rerank={rerank}: "
                                       f"the single-query plan does not use {idx}")
            return
        R = min(iv["recall_q"], nq)
        pr.step(f"{ds['name']}: vs_ivfpq recall {path} p={probes} r={rerank}", 3)
        self.reset_stats()
        rows, lateral_s = self.pg.sql_timed(f"""
            SELECT q.qid, s.id, s.d FROM {t}_q q CROSS JOIN LATERAL
              (SELECT id, v <-> q.v AS d FROM {t} ORDER BY v <-> q.v LIMIT {k}) s
             WHERE q.qid <= {R} ORDER BY q.qid, s.d, s.id""", S)
        rec = self.recall_of(rows, R, gt_ids, gt_dist, k)
        served, _ = self.served(R)
        self.log(f"{ds['name']} {path} probes={probes} rerank={rerank}: recall@{k} {rec:.4f} over {R} "
                 f"single queries ({R / lateral_s:.1f} q/s in one session; served by {served})")
        script = (f"\\set qid random(1, {nq})\n"
                  f"SELECT id FROM {t} ORDER BY v <-> (SELECT v FROM {t}_q WHERE qid = :qid) LIMIT {k};\n")
        secs = iv["seconds"]
        for c in iv["clients"]:
            pr.step(f"{ds['name']}: pgbench vs_ivfpq {path} p={probes} r={rerank} c={c} ({secs}s)", secs + 1.5)
            self.reset_stats()
            r = self.pg.pgbench(script, c, secs, S, tick=pr.tick)
            served, st = self.served(r["count"])
            prm = dict({"mode": "single", "via": IVFPQ_PATHS[path]["via"], "served": served,
                        "probes": probes, "rerank": rerank, "T": f"{secs}s", "txns": r["steady_count"],
                        "recall_q": R, "first_txn_ms_max": f"{r['first_ms_max']:.1f}",
                        "tps_all": f"{r['tps']:.1f}", "steady": "yes" if r["steady"] else "no (all transactions)"},
                       **shape)
            if steer:
                prm["steer"] = ",".join(f"{a}={b}" for a, b in steer.items())
            split = ""
            if served == "worker":
                prm["mean_batch"] = f"{float(st.get('mean_batch_size') or 0):.2f}"
                split = self.stage_split(prm)
            if r["failed"]:
                prm["failed_txns"] = r["failed"]
            self.add(**common, device=self.served_device(served), params=params_str(prm), clients=c,
                     recall=rec, qps=r["qps"], p50_ms=r["p50_ms"], p99_ms=r["p99_ms"])
            self.log(f"{ds['name']} vs_ivfpq {path} p={probes} r={rerank} c={c}: {r['qps']:.1f} QPS, "
                     f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms (served by {served}){split}")

    def run_pk_ceiling(self, ds, base):
        """PostgreSQL's own ceiling for the single-query statement's shape: the same subselect with
        a primary-key lookup in place of the kNN, at the same client counts (index "pk-lookup";
        plot.py draws it on clients.png)."""
        t, nq, pr = ds["table"], ds["nq"], self.progress
        script = (f"\\set qid random(1, {nq})\n"
                  f"SELECT qid FROM {t}_q WHERE qid = (SELECT qid FROM {t}_q WHERE qid = :qid);\n")
        secs = min(self.plan["seconds"].values())
        for c in ds["clients"]:
            pr.step(f"{ds['name']}: pgbench pk-lookup clients={c} ({secs}s)", secs + 1.5)
            r = self.pg.pgbench(script, c, secs, {}, tick=pr.tick)
            prm = {"mode": "single", "what": "primary-key lookup, the same statement shape",
                   "T": f"{secs}s", "txns": r["steady_count"]}
            self.add(**base, index="pk-lookup", device="postgres", params=params_str(prm),
                     clients=c, qps=r["qps"], p50_ms=r["p50_ms"], p99_ms=r["p99_ms"])
            self.log(f"{ds['name']} pk-lookup c={c}: {r['qps']:.1f} QPS, p50 {r['p50_ms']:.3f} ms "
                     f"(PostgreSQL's ceiling for the statement's shape)")

    def worker_ok(self):
        s = self.worker
        if self.mode == "gpu":
            return s.get("worker_state") == "serving" and not str(s.get("device", "")).startswith("cpu")
        return s.get("worker_state") == "serving"

    def run_path(self, ds, path, base, li, recall_q, batch_q, gt_ids, gt_dist, cache_load,
                 settings=None, extra=None):
        """One path's single queries and batch on the index named {table}_idx (vs_flat, or for
        the graph- paths vs_graph); settings and extra: more settings and params."""
        p, P, pr = self.plan, PATHS[path], self.progress
        t, k, nq = ds["table"], p["k"], ds["nq"]
        if P["via"].startswith("worker") and not self.worker_ok():
            self.log(f"{ds['name']} {path}: SKIPPED, the worker does not serve "
                     f"({self.worker.get('worker_state')}: {self.worker.get('device')})")
            self.failures.append(f"{ds['name']} {path}: worker not serving")
            return
        S = dict(P["settings"], **(settings or {}))
        is_index = P["index"] != "seqscan"
        common = dict(base, index=P["index"], device=P["device"],
                      build_s=li["build_s"] if is_index else None,
                      bytes_per_vector=li["bpv"] if is_index else None)
        extra = dict({"via": P["via"]}, **(extra or {}))
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
        if P["index"] == "vs_flat" and rec < 1.0:
            self.check_failures.append(f"{ds['name']} {path}: vs_flat recall@{k} = {rec:.4f} < 1")
        gpu_mb = self.gpu_mem() if P["device"] == "gpu" else None

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
                ws += self.stage_split(prm)
            if r["failed"]:
                prm["failed_txns"] = r["failed"]
            self.add(**common, params=params_str(prm), clients=c, recall=rec, qps=r["qps"],
                     p50_ms=r["p50_ms"], p99_ms=r["p99_ms"], gpu_mem_mb=gpu_mb)
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
        times = self.pg.timed(f"SELECT count(*) FROM vsearch_knn_batch('{t}_idx', {arr}, {k})",
                              dict(S, client_min_messages="debug1", **self.batch_settings), reps)
        ws = self.worker_check(path, reps, quiet=True)  # one request per batch
        prm = dict({"mode": "batch", "batch": B, "reps": reps}, **extra)
        ws += self.batch_split(times, prm)
        if P["via"].startswith("worker"):
            ws += self.stage_split(prm)
        ws += self.array_split(arr, S, reps, prm)
        times.sort()
        med = times[len(times) // 2]
        if P["via"].startswith("worker"):
            prm["mean_batch"] = f"{float(self.last_stat.get('mean_batch_size') or 0):.2f}"
        self.add(**common, params=params_str(prm), clients=1, recall=brec, qps=B / med,
                 p50_ms=med * 1e3, p99_ms=times[-1] * 1e3, gpu_mem_mb=self.gpu_mem() if path == "gpu" else None)
        self.log(f"{ds['name']} {path} batch of {B}: recall@{k} {brec:.4f}, {B / med:.0f} QPS "
                 f"({med * 1e3:.0f} ms per batch){ws}")
        if brec < 1.0:
            self.check_failures.append(f"{ds['name']} {path} batch: recall@{k} = {brec:.4f} < 1")

    def batch_split(self, times, prm):
        """Adds the median run's DEBUG1 split to prm: engine calls, their time, candidate rows read
        and the time reading and checking them, and (newer builds) the rows of those on all-visible
        pages, the time opening the index and reading the queries, forming the answer rows, the
        whole call, and the statement's time around the call (building the query array, the
        executor); times is in run order."""
        splits = getattr(self.pg, "batch_splits", [])[-len(times):]  # a setup call may come first
        if len(splits) != len(times):
            return ""
        i = sorted(range(len(times)), key=times.__getitem__)[len(times) // 2]
        calls, search_ms, rows, heap_ms, read_ms, emit_ms, call_ms, vis_rows = splits[i]
        prm.update(engine_calls=calls, search_ms=search_ms, heap_rows=rows, heap_ms=heap_ms,
                   **self.batch_settings)
        text = f"; split: search {search_ms} ms in {calls} calls, {rows} rows read and checked in {heap_ms} ms"
        if vis_rows:
            prm["heap_rows_all_visible"] = vis_rows
            text += f" ({vis_rows} on all-visible pages)"
        if call_ms:
            around = times[i] * 1e3 - float(call_ms)
            prm.update(read_ms=read_ms, call_ms=call_ms, around_ms=f"{around:.1f}")
            text += f", queries read {read_ms} ms"
            if emit_ms:
                prm["emit_ms"] = emit_ms
                text += f", answer rows {emit_ms} ms"
            text += f"; the call {call_ms} ms of the statement's {times[i] * 1e3:.1f} (around it {around:.1f})"
        return text

    def array_split(self, arr, settings, reps, prm):
        """The median time of building the batch's query array alone (the SQL the call's argument
        is), into prm and as text for the log."""
        try:
            times = sorted(self.pg.timed(f"SELECT array_length({arr}, 1)", settings, reps))
        except PgError:
            return ""
        prm["array_ms"] = f"{times[len(times) // 2] * 1e3:.1f}"
        return f"; building the query array alone {prm['array_ms']} ms"

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

    def stage_split(self, prm):
        """The worker's mean wait and its stages (vsearch_stat_stages) since the last reset, into prm
        and as text for the log; nothing from a build without the view."""
        try:
            rows = self.pg.sql("SELECT stage, mean_us FROM vsearch_stat_stages")
            wait = float(self.pg.value("SELECT mean_wait_us FROM vsearch_stat"))
        except PgError:
            return ""
        prm["wait_us"] = f"{wait:.1f}"
        for stage, us in rows:
            prm[f"{stage}_us"] = f"{float(us):.1f}"
        return "; wait " + f"{wait:.0f} us = " + " + ".join(f"{st} {float(us):.0f}" for st, us in rows)

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
        if e.get("mode") == "ivfpq":  # its own (clustered) data
            name = name.replace("engine-", "engine-ivfpq-", 1)
        work = tempfile.mkdtemp(prefix="vsearch-engine-", dir=os.environ.get("BENCH_TMP", "/tmp"))
        ej = os.path.join(work, "engine.json")
        argv = [binary, "--backend", e["backend"], "--n", str(e["n"]), "--d", str(e["d"]),
                "--nq", str(e["nq"]), "--out", ej, "--skip-kmeans-cpu"]
        ivf = e.get("mode") == "ivfpq"
        if ivf:
            argv += ["--mode", "ivfpq", "--nlist", str(e["nlist"]), "--m", str(e["m"]),
                     "--nbits", str(e.get("nbits", 8))]
        if e.get("quick"):
            argv.append("--quick")
        torch = self.plan["torch"] and e["backend"] == "cuda" and not ivf
        if torch:
            argv += ["--data", work]
        self.progress.step(f"engine {e.get('mode', 'exact')} {e['backend']} {e['n']} x {e['d']}",
                           60 if e["backend"] == "cuda" else 30)
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
            if ivf:
                self.engine_ivfpq_rows(e, name, device, res, gm.mb() if device == "gpu" else None)
                return
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

    def engine_ivfpq_rows(self, e, name, device, res, gpu_mb):
        """The engine bench's --mode ivfpq rows: one build row (train + encode + add seconds) and one
        row per nprobe (QPS of the whole batch, recall@10 after the exact re-rank of 40 candidates)."""
        nbits = e.get("nbits", 8)
        shape = {"nlist": e["nlist"], "m": e["m"], "nbits": nbits,
                 "data": "clustered: 1000 centres 4 N(0 1) + N(0 1) noise, seed 42 (engine bench)"}
        secs = {}
        for r in res["rows"]:
            c = r["case"]
            if c.startswith("ivfpq train"):
                secs["train"] = r["seconds"]
            elif c.startswith("ivfpq encode"):
                secs["encode"] = r["seconds"]
            elif c.startswith("ivfpq add"):
                secs["add"] = r["seconds"]
        build = sum(secs.values())
        # codes + 8-byte ids: what the engine holds per vector (lists' own overhead aside)
        bpv = e["m"] * nbits / 8 + 8
        prm = dict({"mode": "engine", "case": "ivfpq build", "bpv": "codes + 8-byte ids",
                    "train_s": f"{secs.get('train', 0):.3f}", "encode_s": f"{secs.get('encode', 0):.3f}",
                    "add_s": f"{secs.get('add', 0):.3f}"}, **shape)
        self.add(dataset=name, n=e["n"], dim=e["d"], index="engine-ivfpq", device=device, clients=1,
                 params=params_str(prm), p50_ms=build * 1e3, build_s=build, bytes_per_vector=bpv,
                 gpu_mem_mb=gpu_mb)
        self.log(f"engine ivfpq {device} {e['n']} x {e['d']}: build {build:.2f}s (train "
                 f"{secs.get('train', 0):.2f}, encode {secs.get('encode', 0):.2f}, add {secs.get('add', 0):.2f})")
        for r in res["rows"]:
            mm = re.match(r"ivfpq search nq=(\d+) nprobe=(\d+)", r["case"])
            if not mm:
                continue
            rm = engine_ivfpq_recall(r.get("note", ""))
            prm = dict({"mode": "engine", "case": r["case"], "batch": mm.group(1), "probes": mm.group(2),
                        "candidates": 40, "note": r.get("note", "").replace(";", ",")}, **shape)
            self.add(dataset=name, n=e["n"], dim=e["d"], index="engine-ivfpq", device=device, clients=1,
                     k=10, params=params_str(prm), recall=rm,
                     qps=r["qps"] if r["qps"] else None, p50_ms=r["seconds"] * 1e3, build_s=build,
                     bytes_per_vector=bpv, gpu_mem_mb=gpu_mb)
            self.log(f"engine ivfpq {device} nprobe={mm.group(2)}: {r['qps']:.0f} QPS, "
                     f"recall@10 {rm if rm is not None else '?'}")

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
            what = f"engine {e.get('mode', 'exact')} {e['backend']} {e['n']} x {e['d']}"
            if e.get("optional") and self.remaining() < e.get("need_s", 200):
                self.log(f"{what}: skipped, {self.remaining():.0f}s left of the budget")
                self.notes.append(f"{what}: skipped by the budget ({self.remaining():.0f}s left)")
                continue
            try:
                self.run_engine(e)
            except Exception as ex:
                if e.get("optional") and "budget" in str(ex):
                    self.log(f"{what} (optional): {ex}")
                    self.notes.append(f"{what}: {ex}")
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
        md = summary_markdown(self.rows) + graph_markdown(self.rows)
        if self.notes:
            md += "\nNotes (optional phases and the budget):\n\n" + "".join(f"* {x}\n" for x in self.notes)
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


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=sorted(PLANS))
    ap.add_argument("outdir")
    ap.add_argument("--seconds", type=int, help="pgbench duration for every path")
    ap.add_argument("--deadline", type=float, help="epoch seconds: optional phases stop before it")
    ap.add_argument("--no-engine", action="store_true")
    ap.add_argument("--clients", help="comma-separated pgbench client counts (replaces the plan's)")
    ap.add_argument("--datasets", help="comma-separated dataset names (replaces the plan's)")
    ap.add_argument("--paths", help="comma-separated SQL paths to run (gpu, worker-cpu, cpu, seqscan, "
                    "ivfpq-cpu, ivfpq-auto; default: the plan's)")
    ap.add_argument("--engine-modes", help="engine bench modes to run: exact, ivfpq (default both)")
    ap.add_argument("--no-ivfpq", action="store_true", help="no vs_ivfpq build and sweep")
    ap.add_argument("--worker-lanes", help="comma-separated vsearch.worker_lanes values: each worker "
                    "path runs once per value (the worker's engine calls in flight at once)")
    ap.add_argument("--pk-ceiling", action="store_true",
                    help="also time a primary-key lookup of the same statement shape at every "
                         "client count: PostgreSQL's ceiling, drawn on clients.png")
    ap.add_argument("--ivfpq-options", help="the vs_ivfpq index's WITH options, e.g. store_vectors=on")
    ap.add_argument("--no-faiss", action="store_true", help="no Faiss CPU baseline (cpu mode)")
    ap.add_argument("--ivfpq-cpu-build", action="store_true",
                    help="also time the vs_ivfpq build in the backend on the CPU (cpu_build_s in params)")
    ap.add_argument("--batch-settings", help="k=v,... settings of every batch-function call "
                    "(e.g. work_mem=64MB); they go into params")
    ap.add_argument("--graph", action="store_true",
                    help="the vs_graph plan (graph_runs.py): vs_graph against hnswlib and vs_ivfpq")
    ap.add_argument("--graph-efs", help="--graph: the vsearch.graph_ef values swept (comma-separated)")
    ap.add_argument("--graph-expands", help="--graph: the vsearch.graph_expand values (1..4) swept "
                    "with every graph_ef (comma-separated; default 1); the first is the one the "
                    "single queries use")
    ap.add_argument("--graph-options", help="--graph: the vs_graph index's WITH options, e.g. degree=64")
    ap.add_argument("--no-hnswlib", action="store_true", help="--graph: no hnswlib baseline")
    ap.add_argument("--no-graph-ivfpq", action="store_true",
                    help="--graph: no vs_ivfpq build and sweep beside the graph (--no-ivfpq leaves them)")
    ap.add_argument("--no-graph-sql", action="store_true",
                    help="--graph: no single queries through SQL (vs_flat and vs_graph pgbench runs)")
    a = ap.parse_args(argv)
    return Harness(a.mode, a.outdir, a).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
