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

This file holds the plans, the per-dataset preparation and the order of the run; Harness mixes in
the parts: sql_runs.py (the vs_flat SQL paths), ivfpq_runs.py (vs_ivfpq and the Faiss baseline),
engine_runs.py (the engine and PyTorch), graph_runs.py (--graph); summary.py writes the rows and
summary.md.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import datasets as D  # noqa: E402
import groundtruth as GT  # noqa: E402
from engine_runs import EngineRuns, gpu_name  # noqa: E402
from graph_runs import GRAPH_PLANS, GraphRuns, graph_markdown  # noqa: E402
from ivfpq_runs import IvfpqRuns  # noqa: E402
from progress import Progress  # noqa: E402
from sql_runner import Pg  # noqa: E402
from sql_runs import PATHS, SqlRuns  # noqa: E402
from summary import COLUMNS, fmt, summary_markdown  # noqa: E402

ROOT = os.path.dirname(HERE)

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
        # single queries (recall pass + pgbench) and the batch function; batches of the Faiss
        # baseline's size, the median of 3 calls (the first of a session is the slowest)
        "ivfpq": {"probes": [1, 2, 4, 8, 16, 32, 64], "rerank": [10, 50, 200],
                  "sweep_path": "ivfpq-cpu", "paths": ["ivfpq-cpu", "ivfpq-auto"],
                  "batch_q": {"worker": 1000, "backend": 1000}, "batch_reps": 3, "recall_q": 200,
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


class Harness(SqlRuns, IvfpqRuns, EngineRuns, GraphRuns):
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
            if args.graph_path:
                g["path"] = args.graph_path
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

    def rewrite_csv(self):
        self.csv_f.close()
        self.csv_f = open(self.csv_path, "w", newline="")
        self.csv = csv.DictWriter(self.csv_f, fieldnames=COLUMNS)
        self.csv.writeheader()
        self.csv.writerows(self.rows)
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
    ap.add_argument("--graph-path", choices=["gpu", "worker-cpu", "cpu"],
                    help="--graph: where the vs_graph and vs_ivfpq searches run (default: the plan's, "
                    "the worker; cpu: the backend, vsearch.device = cpu)")
    ap.add_argument("--no-hnswlib", action="store_true", help="--graph: no hnswlib baseline")
    ap.add_argument("--no-graph-ivfpq", action="store_true",
                    help="--graph: no vs_ivfpq build and sweep beside the graph (--no-ivfpq leaves them)")
    ap.add_argument("--no-graph-sql", action="store_true",
                    help="--graph: no single queries through SQL (vs_flat and vs_graph pgbench runs)")
    a = ap.parse_args(argv)
    return Harness(a.mode, a.outdir, a).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
