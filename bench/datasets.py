#!/usr/bin/python3
"""Benchmark datasets, built locally (never downloaded) and cached on disk with checksums.

Every vector set lives in its own folder under the cache directory:

    <cache>/<name>/base.fvecs      n rows  (.fvecs: per row an int32 dimension, then dim float32)
    <cache>/<name>/query.fvecs     nq rows (held out: never in the base set)
    <cache>/<name>/meta.json       name, n, nq, dim, source, generator parameters, sha256 of each file
    <cache>/<name>/SHA256SUMS      the same checksums, `sha256sum -c` compatible (the sidecar)

Sets:
    fashion-mnist[-N]   Debian's dataset-fashion-mnist: base = the train split (60000 x 784, or its
                        first N rows), queries = the test split (10000); pixels 0..255 as floats.
    synth-N-D[-sS]      seeded clustered Gaussian mixture: sqrt(N) clusters of uneven weight, a
                        decaying per-dimension spectrum (scale (1 + j)^-0.6, j = 0..D-1) and a random
                        rotation, so the variance is spread like real embeddings rather than i.i.d.;
                        N accepts k/M suffixes (synth-1M-128, synth-100k-128-s7).  10000 queries from
                        the same mixture, drawn from an independent stream.  Deterministic for a seed
                        whatever the chunking.
    wspanish            Debian's wspanish word list (/usr/share/dict/spanish) for edit-distance range
                        search: words.txt (one word a line, UTF-8) and queries.txt (1000 seeded
                        words with one or two random edits).

    datasets.py prepare NAME [--cache DIR]   # builds (or verifies) the set, prints its folder
    datasets.py verify NAME [--cache DIR]    # recomputes the checksums
    datasets.py copy NAME base|query [--limit N] [--cache DIR]
                                             # COPY BINARY stream "(id int8, v vector)" on stdout

The cache directory is $VSEARCH_BENCH_CACHE, else ~/.cache/vsearch-bench.  Fashion-MNIST is read
from $VSEARCH_FASHION_DIR (else /usr/share/datasets/fashion-mnist); .gz or .xz files are accepted.
"""
import gzip
import hashlib
import json
import lzma
import os
import re
import struct
import sys

import numpy as np

FORMAT_VERSION = 1
FASHION_DIRS = [os.environ.get("VSEARCH_FASHION_DIR", ""), "/usr/share/datasets/fashion-mnist"]
WSPANISH = "/usr/share/dict/spanish"
SYNTH_QUERIES = 10000
CHUNK = 1 << 20


def cache_root(cache=None):
    return cache or os.environ.get("VSEARCH_BENCH_CACHE") or os.path.expanduser("~/.cache/vsearch-bench")


# ---- files and checksums -------------------------------------------------------------------------

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 24)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def write_fvecs(f, x):
    """Appends rows of x (float32, n x d) to an open binary file in .fvecs layout."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    rec = np.empty((n, d + 1), dtype=np.float32)
    rec[:, 0] = np.array([d], dtype=np.int32).view(np.float32)[0]
    rec[:, 1:] = x
    rec.tofile(f)


def read_fvecs(path, limit=None, mmap=True):
    """n x d float32 view of an .fvecs file (memory-mapped unless mmap=False)."""
    with open(path, "rb") as f:
        d = struct.unpack("<i", f.read(4))[0]
    size = os.path.getsize(path)
    n = size // (4 * (d + 1))
    if n * 4 * (d + 1) != size:
        raise ValueError(f"{path}: size {size} is not a multiple of the row size for dim {d}")
    if limit is not None:
        n = min(n, limit)
    if mmap:
        a = np.memmap(path, dtype=np.float32, mode="r", shape=(n, d + 1))
    else:
        a = np.fromfile(path, dtype=np.float32, count=n * (d + 1)).reshape(n, d + 1)
    return a[:, 1:]


def write_ivecs(path, a):
    a = np.ascontiguousarray(a, dtype=np.int64)
    n, k = a.shape
    with open(path, "wb") as f:
        rec = np.empty((n, k + 1), dtype=np.int64)
        rec[:, 0] = k
        rec[:, 1:] = a
        rec.tofile(f)


def read_ivecs(path):
    """int64 variant of .ivecs (per row an int64 count, then the values): n x k int64."""
    with open(path, "rb") as f:
        k = struct.unpack("<q", f.read(8))[0]
    a = np.fromfile(path, dtype=np.int64)
    return a.reshape(-1, k + 1)[:, 1:]


def write_sums(folder, files):
    sums = {f: sha256_file(os.path.join(folder, f)) for f in files}
    with open(os.path.join(folder, "SHA256SUMS"), "w") as out:
        for f in sorted(sums):
            out.write(f"{sums[f]}  {f}\n")
    return sums


def read_sums(folder):
    p = os.path.join(folder, "SHA256SUMS")
    sums = {}
    if os.path.exists(p):
        for line in open(p):
            h, f = line.strip().split(None, 1)
            sums[f.lstrip("*")] = h
    return sums


def add_sum(folder, fname):
    """Adds or refreshes one file's line in SHA256SUMS."""
    sums = read_sums(folder)
    sums[fname] = sha256_file(os.path.join(folder, fname))
    with open(os.path.join(folder, "SHA256SUMS"), "w") as out:
        for f in sorted(sums):
            out.write(f"{sums[f]}  {f}\n")
    return sums[fname]


# ---- Fashion-MNIST -------------------------------------------------------------------------------

def _open_any(stem):
    for d in FASHION_DIRS:
        if not d:
            continue
        for ext, opener in ((".gz", gzip.open), (".xz", lzma.open), ("", open)):
            p = os.path.join(d, stem + ext)
            if os.path.exists(p):
                return opener(p, "rb")
    raise FileNotFoundError(f"{stem}(.gz|.xz) not found in {[d for d in FASHION_DIRS if d]} "
                            "(Debian package dataset-fashion-mnist, or set VSEARCH_FASHION_DIR)")


def fashion_available():
    try:
        _open_any("t10k-images-idx3-ubyte").close()
        return True
    except FileNotFoundError:
        return False


def read_idx(stem):
    with _open_any(stem) as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def build_fashion(folder, limit):
    train = read_idx("train-images-idx3-ubyte")
    test = read_idx("t10k-images-idx3-ubyte")
    n = train.shape[0] if not limit else min(limit, train.shape[0])
    base = train[:n].reshape(n, -1).astype(np.float32)
    query = test.reshape(test.shape[0], -1).astype(np.float32)
    with open(os.path.join(folder, "base.fvecs"), "wb") as f:
        write_fvecs(f, base)
    with open(os.path.join(folder, "query.fvecs"), "wb") as f:
        write_fvecs(f, query)
    return {"n": n, "nq": int(query.shape[0]), "dim": int(base.shape[1]),
            "source": "Debian dataset-fashion-mnist: base = train split, queries = test split",
            "params": {"limit": limit}}


# ---- synthetic clustered mixture ------------------------------------------------------------------

def synth_model(n, dim, seed, clusters=None, decay=0.6, spread=1.0, within=0.45):
    """The mixture's parameters (deterministic for the seed)."""
    rng = np.random.default_rng([seed, 0x5EED])
    c = clusters or max(8, int(round(np.sqrt(n))))
    scale = (1.0 + np.arange(dim)) ** -decay
    scale *= np.sqrt(dim / np.sum(scale ** 2))  # total variance ~ dim per unit of spread
    centers = rng.standard_normal((c, dim)) * scale * spread
    w = (1.0 + np.arange(c)) ** -0.5  # uneven cluster weights (Zipf-like), shuffled
    rng.shuffle(w)
    w /= w.sum()
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    rot = q * np.sign(np.diag(r))  # Haar-random rotation
    return {"clusters": c, "scale": scale, "centers": centers, "weights": w, "rot": rot,
            "within": within, "decay": decay, "spread": spread}


def synth_rows(model, count, seed, stream, chunk_index):
    rng = np.random.default_rng([seed, stream, chunk_index])
    lab = rng.choice(model["clusters"], size=count, p=model["weights"])
    x = model["centers"][lab] + rng.standard_normal((count, model["scale"].size)) * (
        model["scale"] * model["within"])
    return (x @ model["rot"]).astype(np.float32)


def build_synth(folder, n, dim, seed, nq=SYNTH_QUERIES, progress=None):
    m = synth_model(n, dim, seed)
    with open(os.path.join(folder, "base.fvecs"), "wb") as f:
        for ci, start in enumerate(range(0, n, CHUNK)):
            write_fvecs(f, synth_rows(m, min(CHUNK, n - start), seed, 1, ci))
            if progress:
                progress(min(n, start + CHUNK) / n)
    with open(os.path.join(folder, "query.fvecs"), "wb") as f:
        write_fvecs(f, synth_rows(m, nq, seed, 2, 0))
    return {"n": n, "nq": nq, "dim": dim,
            "source": "seeded clustered Gaussian mixture (bench/datasets.py)",
            "params": {"seed": seed, "clusters": m["clusters"], "decay": m["decay"],
                       "spread": m["spread"], "within": m["within"], "rotation": "Haar-random",
                       "chunk": CHUNK}}


# ---- wspanish ------------------------------------------------------------------------------------

def build_wspanish(folder, nq=1000, seed=1):
    words = [w.strip() for w in open(WSPANISH, encoding="utf-8") if w.strip()]
    rng = np.random.default_rng(seed)
    alphabet = sorted(set("".join(words)))
    queries = []
    for i in rng.choice(len(words), size=nq, replace=False):
        w = list(words[i])
        for _ in range(int(rng.integers(1, 3))):
            op = int(rng.integers(0, 3))
            pos = int(rng.integers(0, len(w) + (op == 1)))
            ch = alphabet[int(rng.integers(0, len(alphabet)))]
            if op == 0 and w:
                w[min(pos, len(w) - 1)] = ch          # substitute
            elif op == 1:
                w.insert(pos, ch)                     # insert
            elif len(w) > 1:
                del w[min(pos, len(w) - 1)]           # delete
        queries.append("".join(w))
    with open(os.path.join(folder, "words.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")
    with open(os.path.join(folder, "queries.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(queries) + "\n")
    return {"n": len(words), "nq": nq, "dim": 0, "source": "Debian wspanish (" + WSPANISH + ")",
            "params": {"seed": seed, "edits": "1-2 random substitutions/insertions/deletions"}}


# ---- names, prepare, verify ----------------------------------------------------------------------

def parse_count(s):
    m = re.fullmatch(r"(\d+)([kKmM]?)", s)
    if not m:
        raise ValueError(f"bad count {s!r}")
    return int(m.group(1)) * {"": 1, "k": 1000, "K": 1000, "m": 10 ** 6, "M": 10 ** 6}[m.group(2)]


def describe(name):
    """(kind, args) for a dataset name."""
    if name == "wspanish":
        return "wspanish", {}
    m = re.fullmatch(r"fashion-mnist(?:-(\d+[kKmM]?))?", name)
    if m:
        return "fashion", {"limit": parse_count(m.group(1)) if m.group(1) else None}
    m = re.fullmatch(r"synth-(\d+[kKmM]?)-(\d+)(?:-s(\d+))?", name)
    if m:
        return "synth", {"n": parse_count(m.group(1)), "dim": int(m.group(2)),
                         "seed": int(m.group(3) or 1)}
    raise ValueError(f"unknown dataset {name!r} (fashion-mnist[-N], synth-N-D[-sSEED], wspanish)")


def files_of(kind):
    return ["words.txt", "queries.txt"] if kind == "wspanish" else ["base.fvecs", "query.fvecs"]


def verify(name, cache=None):
    folder = os.path.join(cache_root(cache), name)
    meta_p = os.path.join(folder, "meta.json")
    if not os.path.exists(meta_p):
        return False
    meta = json.load(open(meta_p))
    if meta.get("format") != FORMAT_VERSION:
        return False
    sums = read_sums(folder)
    for f, h in meta["sha256"].items():
        p = os.path.join(folder, f)
        if not os.path.exists(p) or sums.get(f) != h or sha256_file(p) != h:
            return False
    return True


def prepare(name, cache=None, progress=None, check=True):
    """Builds the set unless a verified copy is cached; returns its meta (with 'folder')."""
    kind, args = describe(name)
    folder = os.path.join(cache_root(cache), name)
    meta_p = os.path.join(folder, "meta.json")
    if os.path.exists(meta_p) and (verify(name, cache) if check else True):
        meta = json.load(open(meta_p))
        meta["folder"] = folder
        meta["cached"] = True
        return meta
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):  # stale or corrupt: rebuild everything, ground truth included
        os.remove(os.path.join(folder, f))
    if kind == "fashion":
        meta = build_fashion(folder, args["limit"])
    elif kind == "synth":
        meta = build_synth(folder, args["n"], args["dim"], args["seed"], progress=progress)
    else:
        meta = build_wspanish(folder)
    meta.update({"name": name, "kind": kind, "format": FORMAT_VERSION})
    meta["sha256"] = write_sums(folder, files_of(kind))
    with open(meta_p, "w") as f:
        json.dump(meta, f, indent=1)
    meta["folder"] = folder
    meta["cached"] = False
    return meta


def load(meta, which, limit=None):
    return read_fvecs(os.path.join(meta["folder"], which + ".fvecs"), limit)


# ---- PostgreSQL COPY BINARY ---------------------------------------------------------------------

def copy_binary(out, x, first_id=1, chunk=65536):
    """Writes rows (id int8, v vector) in PostgreSQL's binary COPY format to a binary stream;
    ids are first_id, first_id + 1, ...  The vector's wire format is pgvector's (int16 dim,
    int16 unused, dim float4, all big-endian)."""
    n, d = x.shape
    rec = np.dtype([("nf", ">i2"), ("l1", ">i4"), ("id", ">i8"), ("l2", ">i4"), ("dim", ">i2"),
                    ("unused", ">i2"), ("v", ">f4", (d,))])
    out.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        r = np.empty(e - s, dtype=rec)
        r["nf"] = 2
        r["l1"] = 8
        r["id"] = np.arange(first_id + s, first_id + e, dtype=np.int64)
        r["l2"] = 4 + 4 * d
        r["dim"] = d
        r["unused"] = 0
        r["v"] = x[s:e]
        out.write(r.tobytes())
    out.write(struct.pack(">h", -1))
    out.flush()


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["prepare", "verify", "copy"])
    ap.add_argument("name")
    ap.add_argument("which", nargs="?", default="base", choices=["base", "query"])
    ap.add_argument("--cache")
    ap.add_argument("--limit", type=int)
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        m = prepare(a.name, a.cache)
        print(m["folder"])
        print(f"{a.name}: n={m['n']} nq={m['nq']} dim={m['dim']} "
              f"{'cached, checksums verified' if m['cached'] else 'built'}", file=sys.stderr)
    elif a.cmd == "verify":
        ok = verify(a.name, a.cache)
        print(f"{a.name}: {'ok' if ok else 'MISSING OR CORRUPT'}")
        return 0 if ok else 1
    else:
        m = prepare(a.name, a.cache, check=False)
        copy_binary(sys.stdout.buffer, load(m, a.which, a.limit))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
