"""The vs_ivfpq plan of bench/harness.py, run on each dataset's table after the vs_flat paths:
the build, a sweep of the batch function over probes x rerank on the plan's sweep path, at the
points of highest batch QPS reaching each target recall single queries (recall pass, pgbench) and
the batch on every vs_ivfpq path, and (cpu plan) the Faiss CPU baseline of the same shape
(bench/faiss_baseline.py).  Which side answered (the worker or the backend) is read from
vsearch_stat and reported, never a failure.  Mixed into harness.Harness."""
import json
import os
import shutil
import subprocess
import tempfile
import time

from summary import params_str

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

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


def ivfpq_default_m(d):
    """vs_ivfpq's default m (docs/INDEXES.md): the largest divisor of d with d / m >= 4 and
    m <= 64, 1 below 8 dimensions."""
    if d < 8:
        return 1
    return max(m for m in range(1, 65) if d % m == 0 and d // m >= 4)


class IvfpqRuns:
    """Mixed into harness.Harness (self.pg, self.plan, self.add, self.log, ...)."""

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
            # each psql session is a new backend: one untimed 1-query call first maps the index's
            # pages; the first timed call still pays the first touches of the rows it re-ranks
            # (docs/BENCHMARKS.md, "where a new session's first vs_ivfpq query goes"), which the
            # median of the plan's 3 leaves out
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
