"""Exact ground truth through the engine's exact path, cached on disk with checksums.

The truth is computed in SQL with vsearch_knn_batch over the vs_flat index of the loaded table: one
engine call per chunk of queries (the engine's exact kNN, on the GPU worker when it serves, else on
the CPU).  It is stored beside the dataset:

    <dataset>/gt-l2-k<K>-nq<NQ>.ids.i64vecs    per query an int64 K, then K row ids (1-based: row i
                                               of base.fvecs is id i + 1), nearest first
    <dataset>/gt-l2-k<K>-nq<NQ>.dist.fvecs     the K distances (float32)
    <dataset>/gt-l2-k<K>-nq<NQ>.json           how and from what (the dataset's checksums)

and its checksums go into the dataset's SHA256SUMS.  A cached truth is used only when its recorded
base/query checksums match the dataset's and its own files match SHA256SUMS.

Because the truth comes from the engine, it is also checked independently: cross_check() recomputes
a sample of queries in float64 with numpy and compares, tie-aware.

recall() is tie-aware: a returned row counts if its id is in the true top K or if its distance is
not above the true K-th distance (the rows at a tie are interchangeable).
"""
import json
import os
import time

import numpy as np

import datasets as D


def gt_name(k, nq):
    return f"gt-l2-k{k}-nq{nq}"


def load_cached(meta, k, nq):
    folder = meta["folder"]
    name = gt_name(k, nq)
    jp = os.path.join(folder, name + ".json")
    if not os.path.exists(jp):
        return None
    info = json.load(open(jp))
    if info.get("base_sha256") != meta["sha256"]["base.fvecs"] or \
            info.get("query_sha256") != meta["sha256"]["query.fvecs"]:
        return None
    sums = D.read_sums(folder)
    for f in (name + ".ids.i64vecs", name + ".dist.fvecs"):
        p = os.path.join(folder, f)
        if not os.path.exists(p) or sums.get(f) != D.sha256_file(p):
            return None
    ids = D.read_ivecs(os.path.join(folder, name + ".ids.i64vecs"))
    dist = np.asarray(D.read_fvecs(os.path.join(folder, name + ".dist.fvecs"), mmap=False))
    return ids, dist, info


def compute_sql(pg, table, index, qtable, nq, k, settings, chunk=1000, tick=None):
    """(ids, distances) of the k nearest rows of queries 1..nq of qtable, through
    vsearch_knn_batch(index, ..., k) in chunks of `chunk` queries."""
    ids = np.full((nq, k), -1, dtype=np.int64)
    dist = np.full((nq, k), np.inf, dtype=np.float32)
    for off in range(0, nq, chunk):
        hi = min(nq, off + chunk)
        rows = pg.sql(f"""
            SELECT b.query + {off}, t.id, b.distance
              FROM vsearch_knn_batch('{index}',
                     ARRAY(SELECT v FROM {qtable} WHERE qid > {off} AND qid <= {hi} ORDER BY qid), {k}) b
              JOIN {table} t ON t.ctid = b.row_ctid
             ORDER BY 1, 3, 2""", settings)
        pos = {}
        for q, i, d in rows:
            q = int(q) - 1
            j = pos.get(q, 0)
            if j < k:
                ids[q, j] = int(i)
                dist[q, j] = float(d)
            pos[q] = j + 1
        if tick:
            tick(hi / nq)
    return ids, dist


def get(pg, meta, table, index, qtable, nq, k, settings, chunk=1000, tick=None, log=print):
    """Cached or freshly computed truth: (ids, dist, info)."""
    c = load_cached(meta, k, nq)
    if c is not None:
        log(f"ground truth {meta['name']} k={k} nq={nq}: cached ({c[2]['method']}, "
            f"{c[2]['device']}, {c[2]['date']})")
        return c
    t0 = time.time()
    ids, dist = compute_sql(pg, table, index, qtable, nq, k, settings, chunk, tick)
    secs = time.time() - t0
    if (ids < 0).any():
        raise RuntimeError(f"ground truth for {meta['name']}: some queries got fewer than {k} rows")
    folder, name = meta["folder"], gt_name(k, nq)
    D.write_ivecs(os.path.join(folder, name + ".ids.i64vecs"), ids)
    with open(os.path.join(folder, name + ".dist.fvecs"), "wb") as f:
        D.write_fvecs(f, dist)
    D.add_sum(folder, name + ".ids.i64vecs")
    D.add_sum(folder, name + ".dist.fvecs")
    info = {"method": "vsearch_knn_batch over vs_flat (engine exact path)",
            "device": (settings or {}).get("vsearch.device", "auto"),
            "seconds": round(secs, 3), "k": k, "nq": nq, "metric": "l2",
            "base_sha256": meta["sha256"]["base.fvecs"], "query_sha256": meta["sha256"]["query.fvecs"],
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(os.path.join(folder, name + ".json"), "w") as f:
        json.dump(info, f, indent=1)
    log(f"ground truth {meta['name']} k={k} nq={nq}: computed in {secs:.1f}s and cached")
    return ids, dist, info


def exact_numpy(base, queries, k, block=131072):
    """float64 exact k nearest (ids 1-based, distances) by brute force: the independent check."""
    q = np.asarray(queries, dtype=np.float64)
    best_d = np.full((q.shape[0], 0), 0.0)
    best_i = np.zeros((q.shape[0], 0), dtype=np.int64)
    for s in range(0, base.shape[0], block):
        x = np.asarray(base[s:s + block], dtype=np.float64)
        d = (q * q).sum(1)[:, None] - 2.0 * q @ x.T + (x * x).sum(1)[None, :]
        kk = min(k + 8, d.shape[1])
        part = np.argpartition(d, kk - 1, axis=1)[:, :kk]
        cand_d = np.take_along_axis(d, part, 1)
        best_d = np.concatenate([best_d, cand_d], 1)
        best_i = np.concatenate([best_i, part + s], 1)
        if best_d.shape[1] > 4 * (k + 8):
            o = np.argsort(best_d, 1, kind="stable")[:, :k + 8]
            best_d, best_i = np.take_along_axis(best_d, o, 1), np.take_along_axis(best_i, o, 1)
    # recompute the candidates' distances directly (no cancellation), then sort by (d, id)
    xd = np.asarray(base[best_i.ravel()], dtype=np.float64).reshape(best_i.shape + (-1,))
    exact = np.sqrt(((xd - q[:, None, :]) ** 2).sum(-1))
    o = np.argsort(exact, 1, kind="stable")
    exact = np.take_along_axis(exact, o, 1)[:, :k]
    ids = np.take_along_axis(best_i, o, 1)[:, :k] + 1
    return ids, exact


def cross_check(meta, gt_ids, gt_dist, k, sample=20, rtol=1e-5):
    """Checks the first `sample` queries of the truth against numpy float64.  Returns the number
    of queries whose truth is wrong (a true neighbour missing without a tie)."""
    base = D.load(meta, "base")
    queries = np.asarray(D.load(meta, "query", sample))
    ids, exact = exact_numpy(base, queries, k)
    bad = 0
    for i in range(queries.shape[0]):
        kth = exact[i, k - 1]
        tol = rtol * max(1.0, abs(kth))
        # every truth row must be within the true k-th distance, and the k-th distances agree
        td = np.sqrt(((np.asarray(base[gt_ids[i] - 1], dtype=np.float64) - queries[i]) ** 2).sum(1))
        if (td > kth + tol).any() or abs(gt_dist[i, k - 1] - kth) > tol or len(set(gt_ids[i])) != k:
            bad += 1
    return bad


def recall(res_ids, res_dist, gt_ids, gt_dist, k, rtol=1e-6):
    """Mean tie-aware recall@k.  res_ids/res_dist: lists (one per query) of returned ids and
    their distances (as the path under test computed them); missing queries count as 0."""
    total = 0.0
    for q in range(len(res_ids)):
        truth = set(int(x) for x in gt_ids[q, :k])
        kth = float(gt_dist[q, k - 1])
        tol = rtol * max(1.0, abs(kth))
        seen, hits = set(), 0
        for i, d in zip(res_ids[q][:k], res_dist[q][:k]):
            if i in seen:
                continue
            seen.add(i)
            if i in truth or d <= kth + tol:
                hits += 1
        total += min(hits, k) / k
    return total / max(1, len(res_ids))
