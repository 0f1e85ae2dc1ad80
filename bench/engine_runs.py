"""The engine and PyTorch runs of bench/harness.py, after the cluster is stopped: gpu/bench's
vsearch_engine_bench (exact kNN and IVF-PQ cases, each with its own data) and, on a GPU machine,
the PyTorch brute-force baseline (gpu/bench/torch_baseline.py) on the engine bench's data, whose
agreement with the engine becomes the engine rows' recall.  Mixed into harness.Harness."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from summary import fmt, params_str

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


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


class EngineRuns:
    """Mixed into harness.Harness (self.plan, self.add, self.log, self.rows, ...)."""

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
