"""The SQL paths of bench/harness.py's vs_flat plan: per path (the GPU worker, the worker on the
CPU, the in-backend CPU search, the sequential scan) the recall of single queries, pgbench at each
client count and the batch function, with the worker's and the batch call's time splits; and
PostgreSQL's ceiling for the statement's shape (--pk-ceiling).  Mixed into harness.Harness."""
import groundtruth as GT
from sql_runner import PgError
from summary import params_str

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


class SqlRuns:
    """Mixed into harness.Harness (self.pg, self.plan, self.add, self.log, ...)."""

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
