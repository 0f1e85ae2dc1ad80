#!/usr/bin/python3
"""Plots of a benchmark CSV (bench/harness.py's results.csv), with matplotlib's Agg backend:

    recall_qps.png       recall@k against queries per second, one panel per dataset (log x): every
                         path and mode; vs_ivfpq's batch sweep as one curve over probes per rerank
                         (points labelled by probes), its single-query runs as points labelled
                         c<clients> p<probes>/r<rerank>; the engine's IVF-PQ as a curve over nprobe;
                         vs_flat and the seq scan as points (exact: recall 1); thin lines at 0.9,
                         0.95, 0.99
    clients.png          p50 (solid) and p99 (dashed) latency and QPS against concurrent clients,
                         one row of panels per dataset (pgbench single-query runs)
    engine.png           the engine directly against PyTorch brute force, QPS per case (when the
                         CSV has engine rows)

    plot.py results.csv OUTDIR [--prefix NAME-]
"""
import csv
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"gpu": "tab:green", "cpu": "tab:blue", "seqscan": "tab:gray", "torch": "tab:orange"}
# one colour per search path (label, device)
PATH_COLORS = {("vs_flat worker", "gpu"): "tab:green", ("vs_flat backend", "cpu"): "tab:blue",
               ("vs_flat worker(cpu)", "cpu"): "tab:purple", ("seqscan", "seqscan"): "tab:gray",
               ("engine", "gpu"): "darkgreen", ("engine", "cpu"): "navy", ("torch", "torch"): "tab:orange"}
SPARE = ["tab:red", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]


def color(lab, dev):
    if (lab, dev) not in PATH_COLORS:
        PATH_COLORS[(lab, dev)] = SPARE[len(PATH_COLORS) % len(SPARE)]
    return PATH_COLORS[(lab, dev)]
MARKERS = {"single": "o", "batch": "s", "engine": "D", "torch": "^"}


def prm(row, key):
    m = re.search(rf"(?:^|;){key}=([^;]*)", row["params"])
    return m.group(1) if m else ""


def f(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def label(row):
    via = prm(row, "via")
    if row["index"] == "vs_flat":
        return f"vs_flat {via}" if via else "vs_flat"
    if row["index"] == "vs_ivfpq":
        served = prm(row, "served")
        return f"vs_ivfpq {via}→{served}" if served and served != via else f"vs_ivfpq {via}"
    return row["index"]


def sweep_key(row):
    """Rows of a parameter sweep are drawn as one curve per fixed parameter: vs_ivfpq's batch rows
    per rerank (a curve over probes), the engine's IVF-PQ rows as one curve over nprobe."""
    if row["index"] == "vs_ivfpq" and prm(row, "mode") == "batch":
        return f"rerank={prm(row, 'rerank')}"
    return ""


def read(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def title_of(rows, ds):
    r = next(r for r in rows if r["dataset"] == ds)
    return f"{ds} ({r['n']} × {r['dim']})"


def plot_recall_qps(rows, out):
    sets = [d for d in dict.fromkeys(r["dataset"] for r in rows)
            if any(f(r["recall"]) is not None and f(r["qps"]) for r in rows if r["dataset"] == d)]
    if not sets:
        return None
    fig, axes = plt.subplots(1, len(sets), figsize=(5.2 * len(sets), 4.2), squeeze=False)
    for ax, ds in zip(axes[0], sets):
        groups = {}
        for r in rows:
            if r["dataset"] != ds or f(r["recall"]) is None or not f(r["qps"]):
                continue
            mode = prm(r, "mode")
            key = (label(r), r["device"], mode, sweep_key(r))
            groups.setdefault(key, []).append(r)
        styles = ["-", "--", ":", "-."]
        for (lab, dev, mode, sk), rs in sorted(groups.items()):
            sweep = prm(rs[0], "probes") != ""
            if sweep:
                # a sweep: one curve over probes (nprobe), each point labelled by it
                pts = sorted(((f(r["qps"]), f(r["recall"]), r) for r in rs), key=lambda p: int(prm(p[2], "probes")))
            else:
                # one point per run; single-query runs are labelled by client count
                pts = sorted(((f(r["qps"]), f(r["recall"]), r) for r in rs), key=lambda p: p[0])
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ls = "none" if mode == "single" else "-"
            if sk:
                reranks = sorted({prm(r, "rerank") for r in rows if r["dataset"] == ds and r["index"] == "vs_ivfpq"},
                                 key=lambda v: int(v or 0))
                ls = styles[reranks.index(sk.split("=")[1]) % len(styles)] if sk.split("=")[1] in reranks else "-"
            ax.plot(xs, ys, marker=MARKERS.get(mode, "o"), color=color(lab, dev), markersize=4 if sweep else 6,
                    linestyle=ls, alpha=0.85, label=f"{lab} [{dev}] {mode}" + (f" {sk}" if sk else ""))
            if mode == "single":
                for x, y, r in pts:
                    tag = f"c{r['clients']}" + (f" p{prm(r, 'probes')}/r{prm(r, 'rerank')}" if sweep else "")
                    ax.annotate(tag, (x, y), fontsize=5 if sweep else 6, xytext=(2, 3),
                                textcoords="offset points")
            elif sweep:
                for x, y, r in pts:
                    ax.annotate(prm(r, "probes"), (x, y), fontsize=5, xytext=(2, -7),
                                textcoords="offset points", color=color(lab, dev))
        ax.set_xscale("log")
        ax.set_xlabel("queries per second (log)")
        ax.set_ylabel(f"recall@{rows[0]['k'] or 10}")
        lo = min(f(r["recall"]) for r in rows if r["dataset"] == ds and f(r["recall"]) is not None)
        ax.set_ylim(max(0.0, min(0.9, lo - 0.02)), 1.01)
        for tg in (0.9, 0.95, 0.99):
            if lo < tg:
                ax.axhline(tg, color="k", linewidth=0.4, alpha=0.4)
        ax.set_title(title_of(rows, ds), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(f"recall vs throughput — {rows[0]['host']}, {rows[0]['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_clients(rows, out):
    single = [r for r in rows if prm(r, "mode") == "single" and f(r["clients"])]
    sets = list(dict.fromkeys(r["dataset"] for r in single))
    if not sets:
        return None
    fig, axes = plt.subplots(len(sets), 2, figsize=(10, 3.6 * len(sets)), squeeze=False)
    for (axl, axq), ds in zip(axes, sets):
        groups = {}
        for r in single:
            if r["dataset"] == ds:
                pt = f" p{prm(r, 'probes')}/r{prm(r, 'rerank')}" if prm(r, "probes") else ""
                groups.setdefault((label(r) + pt, r["device"]), []).append(r)
        for (lab, dev), rs in sorted(groups.items()):
            rs.sort(key=lambda r: f(r["clients"]))
            c = [f(r["clients"]) for r in rs]
            col = color(lab, dev)
            axl.plot(c, [f(r["p50_ms"]) for r in rs], marker="o", color=col, label=f"{lab} [{dev}] p50")
            axl.plot(c, [f(r["p99_ms"]) for r in rs], marker="x", color=col, linestyle="--",
                     label=f"{lab} [{dev}] p99")
            axq.plot(c, [f(r["qps"]) for r in rs], marker="o", color=col, label=f"{lab} [{dev}]")
        for ax in (axl, axq):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("concurrent clients (pgbench)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
            cl = sorted({int(f(r["clients"])) for r in single if r["dataset"] == ds})
            ax.set_xticks(cl)
            ax.set_xticklabels([str(x) for x in cl])
        axl.set_ylabel("latency ms (log)")
        axq.set_ylabel("queries per second (log)")
        axl.set_title(f"{title_of(rows, ds)}: latency", fontsize=10)
        axq.set_title(f"{title_of(rows, ds)}: throughput", fontsize=10)
    fig.suptitle(f"single queries under concurrency — {rows[0]['host']}, {rows[0]['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_engine(rows, out):
    er = [r for r in rows if prm(r, "mode") in ("engine", "torch") and f(r["qps"])
          and prm(r, "case").startswith("knn")]
    sets = list(dict.fromkeys(r["dataset"] for r in er))
    if not sets:
        return None
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4), squeeze=False)
    for ax, ds in zip(axes[0], sets):
        cases = list(dict.fromkeys(prm(r, "case") for r in er if r["dataset"] == ds and prm(r, "how") != "cdist+topk"))
        kinds = [idx for idx in ("engine", "torch") if any(r["index"] == idx and r["dataset"] == ds for r in er)]
        width = 0.8 / len(kinds)
        lo = None
        for j, idx in enumerate(kinds):
            vals = []
            for c in cases:
                m = [f(r["qps"]) for r in er if r["dataset"] == ds and r["index"] == idx
                     and prm(r, "case") == c and prm(r, "how") != "cdist+topk"]
                vals.append(m[0] if m else 0)
            lo = min([v for v in vals if v] + ([lo] if lo else []))
            devs = sorted({r["device"] for r in er if r["dataset"] == ds and r["index"] == idx})
            ax.bar([i + (j - (len(kinds) - 1) / 2) * width for i in range(len(cases))], vals, width,
                   color=color(idx, devs[0] if devs else ""), label=f"{idx} [{', '.join(devs)}]")
        ax.set_ylim(bottom=lo / 3 if lo else None)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("queries per second (log)")
        ax.set_title(title_of(rows, ds), fontsize=10)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"the engine directly (PyTorch brute force where run) — {rows[0]['host']}, {rows[0]['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_all(csv_path, outdir, prefix=""):
    rows = read(csv_path)
    os.makedirs(outdir, exist_ok=True)
    made = []
    if not rows:
        return made
    for fn, name in ((plot_recall_qps, "recall_qps.png"), (plot_clients, "clients.png"),
                     (plot_engine, "engine.png")):
        p = fn(rows, os.path.join(outdir, prefix + name))
        if p:
            made.append(p)
    return made


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("outdir")
    ap.add_argument("--prefix", default="")
    a = ap.parse_args()
    for p in plot_all(a.csv, a.outdir, a.prefix):
        print(p)
