"""Seeded SQL fuzz cases for tests/fuzz: one statement per line, each either a probe that must
fail cleanly or succeed, or a check that prints 'WRONG ...' when an answer differs from the
independent reference computed here (Python floats, double precision).

    /usr/bin/python3 tests/fuzz_gen.py SEED CASES > cases.sql
"""
import math
import random
import struct
import sys

seed, cases = int(sys.argv[1]), int(sys.argv[2])
settings_file = sys.argv[3] if len(sys.argv) > 3 else None  # name|vartype|min|max|enumvals|context
rng = random.Random(seed)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def num():
    r = rng.random()
    if r < 0.05:
        return rng.choice(["NaN", "Infinity", "-Infinity", "1e39", "-1e39", "1e-46", "0x10",
                           "1e", "--1", "+", ".", "1.2.3", "", " ", "\t2", "1e-320", "٣"])
    if r < 0.15:
        return repr(rng.choice([0.0, -0.0, 1e38, -1e38, 1e-38, 3.4028234e38]))
    return repr(round(rng.uniform(-100, 100), rng.randint(0, 6)))


def vec_text():
    r = rng.random()
    n = rng.choice([0, 1, 2, 3, 16, 17, rng.randint(1, 64), 16000, 16001]) if r < 0.2 else rng.randint(1, 24)
    if n > 2000:
        return "'[" + ",".join(["1"] * n) + "]'"
    body = ",".join(num() for _ in range(n))
    r = rng.random()
    if r < 0.05:
        body = body.replace(",", " ", 1)
    elif r < 0.08:
        return "'" + rng.choice(["[", "]", "[1,2", "1,2]", "[[1]]", "[1,,2]", "[,]", "{1,2}", "",
                                 "[1] x", " [1, 2] ", "[1;2]", "[\u00e9]", "[1,2]]"]) + "'"
    return "'[" + body + "]'"


def sparse_text():
    r = rng.random()
    if r < 0.08:
        return "'" + rng.choice(["{", "}", "{1:1", "{1:1}", "{1:1}/", "{}/", "{1:1}/2/3", "{1;1}/2",
                                 "{1:1,,2:1}/3", "{:}/1", "{1:1}/x", "[1,2]", "{1:1} 2", "/5",
                                 "{1:1}/-0", "{\u00e9:1}/2", "{1:1}/2 x", "{ 1 : 1 } / 2 "]) + "'"
    dim = rng.choice([1, 2, 5, 40, rng.randint(1, 100), 16000, 16001, 1000000000, 1000000001,
                      0, -1, 2147483648]) if r < 0.3 else rng.randint(1, 60)
    n = rng.choice([0, 1, 2, rng.randint(0, 30), 16001]) if r < 0.35 else rng.randint(0, 12)
    if n > 2000:
        return "'{" + ",".join(f"{i}:1" for i in range(1, n + 1)) + f"}}/{dim}'"
    def index():
        if rng.random() < 0.1:
            return rng.choice(["0", "-1", str(dim + 1), "2147483648", "1.5", "", "x", "+2"])
        return str(rng.randint(1, max(1, min(dim, 1 << 30))))
    return "'{" + ",".join(f"{index()}:{num()}" for _ in range(n)) + f"}}/{dim}'"


def good_vec(d):
    return [f32(rng.uniform(-10, 10)) for _ in range(d)]


def lit(v):
    return "'[" + ",".join(repr(x) for x in v) + "]'::vector"


def ref(metric, a, b):
    if metric == "<->":
        return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    if metric == "<#>":
        return -sum(x * y for x, y in zip(a, b))
    if metric == "<+>":
        return sum(abs(x - y) for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    return 1 - sum(x * y for x, y in zip(a, b)) / (na * nb)


def case():
    r = rng.random()
    if r < 0.30:
        return f"SELECT {vec_text()}::vector;"
    if r < 0.38:
        d = rng.randint(1, 20)
        return f"SELECT {vec_text()}::vector({d});"
    if r < 0.46:
        op = rng.choice(["<->", "<#>", "<=>", "<+>", "+", "-", "*", "=", "<"])
        return f"SELECT {vec_text()}::vector {op} {vec_text()}::vector;"
    if r < 0.52:
        rad = rng.choice(["'NaN'", "'Infinity'", "-1", "0", "1e30", "NULL", "2", "'-Infinity'"])
        return f"SELECT count(*) FROM fz WHERE v <<->> sphere({vec_text()}::vector, {rad});"
    if r < 0.60:
        k = rng.choice(["-1", "0", "1", "10", "2147483647", "NULL", "1000000"])
        idx = rng.choice(["'fz_flat'", "'fz_ivf'", "'fz_pkey'", "'fz'", "0", "'no_such'", "NULL", "'fz_graph'"])
        qs = rng.choice(["ARRAY[]::vector[]", "NULL", f"ARRAY[{vec_text()}::vector]",
                         f"ARRAY[{lit(good_vec(8))}, NULL]", f"ARRAY[{lit(good_vec(8))}]",
                         f"ARRAY[{lit(good_vec(3))}]"])
        fn = rng.choice(["vsearch_knn_batch", "vsearch_range_batch"])
        arg = k if fn == "vsearch_knn_batch" else rng.choice(["'NaN'", "-1", "0", "1e30", "NULL", "3"])
        return f"SELECT count(*) FROM {fn}({idx}::regclass, {qs}, {arg});"
    if r < 0.66:
        casts = [f"ARRAY[{num()},{num()}]::real[]::vector", "ARRAY[1,NULL]::real[]::vector",
                 "ARRAY[[1,2],[3,4]]::real[]::vector", "'{}'::real[]::vector",
                 f"ARRAY[{num()}]::float8[]::vector", f"ARRAY[{rng.randint(-5, 5)}]::int[]::vector",
                 f"{vec_text()}::vector::real[]", "ARRAY[1e300]::float8[]::vector"]
        return f"SELECT {rng.choice(casts)};"
    if r < 0.72:
        am, opt = rng.choice([("vs_ivfpq", "lists"), ("vs_ivfpq", "m"), ("vs_ivfpq", "nbits"),
                              ("vs_graph", "degree"), ("vs_lc", "bucket_size"), ("vs_flat", "nothing")])
        val = rng.choice(["-1", "0", "1", "3", "2147483647", "'abc'", "1e9", "65", "16"])
        return (f"CREATE INDEX fz_tmp ON fz USING {am} (v vector_l2_ops) WITH ({opt} = {val}); "
                f"DROP INDEX IF EXISTS fz_tmp;")
    if r < 0.76:
        s = rng.choice(["", "a", "año", "\u00f1" * rng.randint(1, 300), "x" * rng.randint(60, 70),
                        "".join(rng.choice("ab\u00e9\u4e2d") for _ in range(rng.randint(0, 90)))])
        t = rng.choice(["", "ano", "b" * rng.randint(0, 200), s[::-1]])
        return f"SELECT {pg_str(s)} <~> {pg_str(t)};"
    if r < 0.82:
        form = rng.choice(["{s}::sparsevec", "{s}::sparsevec(5)", "{s}::sparsevec::vector",
                           "{s}::sparsevec::halfvec", "l2_normalize({s}::sparsevec)",
                           "{s}::sparsevec {op} {t}::sparsevec"])
        op = rng.choice(["<->", "<#>", "<=>", "<+>", "=", "<"])
        return "SELECT " + form.format(s=sparse_text(), t=sparse_text(), op=op) + ";"
    if r < 0.86:
        # sparse checks: vectors with zeros, the sparse operators against the reference
        d = rng.randint(1, 70)
        a = [x if rng.random() < 0.3 else 0.0 for x in good_vec(d)]
        b = [x if rng.random() < 0.3 else 0.0 for x in good_vec(d)]
        op = rng.choice(["<->", "<#>", "<+>"])
        want = ref(op, a, b)
        tol = 1e-5 * max(1.0, abs(want)) + 1e-5
        return (f"SELECT 'WRONG sparsevec {op} d={d}: ' || x FROM (SELECT {lit(a)}::sparsevec {op} "
                f"{lit(b)}::sparsevec AS x) s WHERE abs(x - ({want!r})) > {tol!r} OR x IS NULL;")
    # checks against the reference (valid input must give the right answer)
    d = rng.randint(1, 40)
    a, b = good_vec(d), good_vec(d)
    op = rng.choice(["<->", "<#>", "<=>", "<+>"])
    want = ref(op, a, b)
    tol = 1e-5 * max(1.0, abs(want)) + 1e-5
    return (f"SELECT 'WRONG {op} d={d}: ' || x FROM (SELECT {lit(a)} {op} {lit(b)} AS x) s "
            f"WHERE abs(x - ({want!r})) > {tol!r} OR x IS NULL;")


def pg_str(s):
    return "'" + s.replace("'", "''") + "'"


# ---- binary input: COPY ... (FORMAT binary) hands a field's bytes to the type's receive
# function, so a bytea written to the file :'fzbin' arrives at vector_recv / halfvec_recv /
# sparsevec_recv as it is.  A valid payload must be accepted as the value its text form gives and
# sent back unchanged; a malformed one must be rejected.

def half_bits():
    # a finite half: sign, exponent 0..30, mantissa
    return (rng.randint(0, 1) << 15) | (rng.randint(0, 30) << 10) | rng.randint(0, 1023)


def half_value(h):
    sign = -1.0 if h >> 15 else 1.0
    e, m = (h >> 10) & 31, h & 1023
    return sign * (m / 1024.0 * 2.0 ** -14 if e == 0 else (1 + m / 1024.0) * 2.0 ** (e - 15))


def nonzero_f32():
    while True:
        x = f32(rng.uniform(-100, 100))
        if x != 0:
            return x


def binary_payload():
    """(table, payload bytes, text literal of the value or None when malformed, what)."""
    kind = rng.choice(["vector", "vector4", "halfvec", "sparsevec"])
    bad = rng.random() < 0.7
    if kind in ("vector", "vector4"):
        d = 4 if kind == "vector4" else rng.randint(1, 20)
        xs = [f32(rng.uniform(-100, 100)) for _ in range(d)]
        dim, unused, body = d, 0, b"".join(struct.pack(">f", x) for x in xs)
        text = "'[" + ",".join(repr(x) for x in xs) + "]'"
        how = None
        if bad:
            how = rng.choice(["dim", "unused", "short", "long", "nan", "inf", "header"]
                             + (["typmod"] if kind == "vector4" else []))
            if how == "dim":
                dim = rng.choice([0, -1, -32768, 16001, 32767])
            elif how == "typmod":
                dim = rng.choice([3, 5])
                body = b"".join(struct.pack(">f", 1.5) for _ in range(dim))
            elif how == "unused":
                unused = rng.choice([1, -1, 256])
            elif how == "short":
                body = body[:-rng.randint(1, 4)]
            elif how == "long":
                body += bytes(rng.randint(1, 4))
            elif how in ("nan", "inf"):
                i = rng.randrange(d)
                v = float("nan") if how == "nan" else rng.choice([float("inf"), float("-inf")])
                body = body[:4 * i] + struct.pack(">f", v) + body[4 * i + 4:]
        payload = struct.pack(">hh", dim, unused) + body
        if how == "header":
            payload = payload[:rng.randint(0, 3)]
        table = "fzb_v4" if kind == "vector4" else "fzb_v"
        return table, "vector_send", payload, None if bad else text, f"{kind} {how or 'valid'} d={d}"
    if kind == "halfvec":
        d = rng.randint(1, 20)
        hs = [half_bits() for _ in range(d)]
        dim, unused, body = d, 0, b"".join(struct.pack(">H", h) for h in hs)
        text = "'[" + ",".join(repr(half_value(h)) for h in hs) + "]'"
        how = None
        if bad:
            how = rng.choice(["dim", "unused", "short", "long", "special", "header"])
            if how == "dim":
                dim = rng.choice([0, -1, -32768, 16001, 32767])
            elif how == "unused":
                unused = rng.choice([1, -1])
            elif how == "short":
                body = body[:-1]
            elif how == "long":
                body += bytes(rng.randint(1, 2))
            elif how == "special":
                i = rng.randrange(d)
                body = body[:2 * i] + struct.pack(">H", rng.choice([0x7C00, 0xFC00, 0x7E00, 0x7C01])) + body[2 * i + 2:]
        payload = struct.pack(">hh", dim, unused) + body
        if how == "header":
            payload = payload[:rng.randint(0, 3)]
        return "fzb_h", "halfvec_send", payload, None if bad else text, f"halfvec {how or 'valid'} d={d}"
    d = rng.choice([rng.randint(1, 40), rng.randint(1, 1000000000)])
    nnz = rng.randint(0, min(d, 12))
    idx = sorted(rng.sample(range(d), nnz)) if d <= 1000 else sorted(set(rng.randrange(d) for _ in range(nnz)))
    nnz = len(idx)
    vals = [nonzero_f32() for _ in range(nnz)]
    dim, unused = d, 0
    how = None
    if bad:
        how = rng.choice(["dim", "nnz", "unused", "short", "long", "index", "order", "zero", "nan",
                          "header"])
        if how == "dim":
            dim = rng.choice([0, -1, 1000000001, 2147483647])
        elif how == "nnz":
            nnz = rng.choice([-1, d + 1, 16001])
        elif how == "unused":
            unused = 1
        elif how == "index":
            if not idx:
                idx, vals, nnz = [0], [1.0], 1
            idx[rng.randrange(nnz)] = rng.choice([-1, d, 2147483647])
        elif how == "order":
            if nnz < 2:
                idx, vals, nnz = [0, 1], [1.0, 2.0], 2
                dim = max(dim, 2)
            i = rng.randrange(1, nnz)
            idx[i] = idx[i - 1]
        elif how in ("zero", "nan"):
            if not idx:
                idx, vals, nnz = [0], [1.0], 1
            vals[rng.randrange(nnz)] = 0.0 if how == "zero" else rng.choice([float("nan"), float("inf")])
    body = b"".join(struct.pack(">i", i) for i in idx) + b"".join(struct.pack(">f", v) for v in vals)
    if how == "short":
        body = body[:-rng.randint(1, 8)] if body else b""
        if not idx:
            nnz = 1
    elif how == "long":
        body += bytes(rng.randint(1, 8))
    payload = struct.pack(">iii", dim, nnz, unused) + body
    if how == "header":
        payload = payload[:rng.randint(0, 11)]
    text = "'{" + ",".join(f"{i + 1}:{v!r}" for i, v in zip(idx, vals)) + f"}}/{d}'"
    return "fzb_s", "sparsevec_send", payload, None if bad else text, f"sparsevec {how or 'valid'} d={d}"


def binary_case():
    table, send, payload, text, what = binary_payload()
    hexed = payload.hex()
    write = f"COPY (SELECT decode('{hexed}', 'hex')) TO :'fzbin' (FORMAT binary);"
    read = f"COPY {table} FROM :'fzbin' (FORMAT binary);"
    if text is None:
        check = f"SELECT 'WRONG binary {what}: accepted' FROM {table};"
    else:
        typ = "vector" if table in ("fzb_v", "fzb_v4") else ("halfvec" if table == "fzb_h" else "sparsevec")
        check = (f"SELECT 'WRONG binary {what}: ' || count(*) || ' rows as sent' FROM {table} "
                 f"WHERE v = {text}::{typ} AND {send}(v) = decode('{hexed}', 'hex') HAVING count(*) <> 1;")
    return f"{write} {read} {check} TRUNCATE {table};"


for i in range(cases):
    print(case())
for i in range(max(1, cases // 10)):
    print(binary_case())


# ---- requests to the worker: vsearch_worker_probe (superuser only) sends one kNN request with a
# kind id and parameter block of the caller's choosing; the worker must refuse what it cannot
# serve and go on serving.
def probe_case():
    idx = rng.choice(["'fz_flat'", "'fz_ivf'", "'fz_graph'", "'fz'", "'fz_pkey'", "NULL"])
    query = rng.choice([lit(good_vec(8)), lit(good_vec(8)), lit(good_vec(3)), "NULL"])
    kind = rng.choice(["NULL", "-1", "0", "1", "2", "3", "4", "5", "6", "7", "255", "2147483647"])
    r = rng.random()
    if r < 0.2:
        params = "NULL"
    elif r < 0.6:  # little-endian uint32 words, as the kinds' parameter blocks are
        words = [rng.choice([0, 1, 4, 8, 0xFFFFFFFF, 0x7FFFFFFF, rng.randrange(1 << 32)])
                 for _ in range(rng.randint(0, 6))]
        params = f"decode('{b''.join(struct.pack('<I', w) for w in words).hex()}', 'hex')"
    else:
        params = f"decode('{bytes(rng.randrange(256) for _ in range(rng.randint(0, 80))).hex()}', 'hex')"
    return f"SELECT vsearch_worker_probe({idx}::regclass, {query}::vector, {kind}, {params});"


for i in range(max(1, cases // 20)):
    print(probe_case())
# round trips: text output parses back to the same vector
for i in range(max(1, cases // 20)):
    v = good_vec(rng.randint(1, 30))
    print(f"SELECT 'WRONG round trip' WHERE ({lit(v)})::text::vector <> {lit(v)} OR "
          f"({lit(v)} <-> {lit(v)}) <> 0;")


# ---- settings at their extremes: each vsearch.* setting (pg_settings, passed in by tests/fuzz)
# SET to its bounds, just outside them, garbage and random values, then a search whose answer is
# checked under the value in effect (the old one when SET was refused): exact kinds and settings
# that make an approximate index exact (every list and a re-rank of every row; a beam wider than
# the table) against a sequential scan, the rest for k distinct rows with the operator's distances.
GARBAGE = ["'abc'", "''", "'1e99'", "'-'", "'0x10'", "'NaN'", "'10 parsec'",
           "'99999999999999999999'", "'1.5'", "' 7 '", "'-0'"]
DEFAULTS = {"vsearch.ivfpq_probes": 10, "vsearch.ivfpq_rerank": 100, "vsearch.graph_ef": 40}
ROWS = 500  # the fuzz table's rows


def setting_values(vartype, lo, hi, enumvals):
    if vartype in ("integer", "real"):
        lo_n, hi_n = (int(lo), int(hi)) if vartype == "integer" else (float(lo), float(hi))
        vals = [lo_n, hi_n, lo_n - 1, hi_n + 1, -1, 0]
        if vartype == "integer":
            vals += [rng.randint(lo_n, hi_n), rng.randint(lo_n, min(hi_n, 2 * ROWS))]
        else:
            vals += [rng.uniform(lo_n, hi_n), lo_n - 1e-3, hi_n * 1.0001]
        return [repr(v) for v in vals] + GARBAGE
    if vartype == "enum":
        return [f"'{v}'" for v in enumvals.split(",")] + ["'GPU'", "'none'", "'on'", "'1'"] + GARBAGE
    return GARBAGE + ["'0'", "'0,1'", "'" + "x" * 5000 + "'"]


def effective(name, vartype, lo, hi, val):
    """The value in effect after SET name = val, for the settings that decide exactness: a plain
    integer is that value in range and the default outside; a quoted string may be read as a
    number ('1.5', ' 7 ', '0x10'), so its value is unknown (0: only the validity check)."""
    if name not in DEFAULTS:
        return None
    if not val.lstrip("-").isdigit():
        return 0
    return int(val) if int(lo) <= int(val) <= int(hi) else DEFAULTS[name]


def settings_case(name, vartype, lo, hi, val):
    q = lit([f32(rng.uniform(0, 1)) for _ in range(8)])
    k = rng.choice([1, 10, 50])
    pre, post = f"SET {name} = {val};", f"RESET {name};"
    v = effective(name, vartype, lo, hi, val)
    if name == "vsearch.ivfpq_probes":  # every row re-ranked: exact when every list (4) is probed
        pre, post = "SET vsearch.ivfpq_rerank = 1000000; " + pre, post + " RESET vsearch.ivfpq_rerank;"
        check = f"fz_knn_diff('fz_ivf', {q}, {k})" if v >= 4 else f"fz_knn_valid('fz_ivf', {q}, {k})"
    elif name == "vsearch.ivfpq_rerank":  # 10 probes: every list
        check = f"fz_knn_diff('fz_ivf', {q}, {k})" if v >= ROWS else f"fz_knn_valid('fz_ivf', {q}, {k})"
    elif name == "vsearch.graph_ef":
        check = f"fz_knn_diff('fz_graph', {q}, {k})" if v >= ROWS else f"fz_knn_valid('fz_graph', {q}, {k})"
    elif name == "vsearch.graph_expand":
        check = f"fz_knn_valid('fz_graph', {q}, {k})"
    else:
        check = f"fz_knn_diff('fz_flat', {q}, {k})"
    scan = f"fz_scan_count({q}, {k})"
    return (f"{pre} SELECT 'WRONG {name} = ' || {pg_str(val)} || ': ' || r FROM (SELECT "
            f"coalesce({check}, {scan}) AS r) t WHERE r IS NOT NULL; {post}")


if settings_file:
    with open(settings_file) as f:
        settings = [line.rstrip("\n").split("|") for line in f if line.strip()]
    for name, vartype, lo, hi, enumvals, context in settings:
        for val in setting_values(vartype, lo, hi, enumvals):
            print(settings_case(name, vartype, lo, hi, val))
    for i in range(max(1, cases // 30)):  # random values of the settings a user can SET
        name, vartype, lo, hi, enumvals, context = rng.choice(
            [s for s in settings if s[5] == "user"])
        val = rng.choice(setting_values(vartype, lo, hi, enumvals))
        print(settings_case(name, vartype, lo, hi, val))


# ---- another database's index: its OID (psql variable other_idx) names nothing here
for i in range(max(1, cases // 100)):
    q = lit(good_vec(8))
    print(rng.choice([
        f"SELECT count(*) FROM vsearch_knn_batch((:other_idx)::regclass, ARRAY[{q}], 10);",
        f"SELECT count(*) FROM vsearch_range_batch((:other_idx)::regclass, ARRAY[{q}], 1e30);",
        f"SELECT count(*) FROM vsearch_knn_batch((:other_idx)::regclass, ARRAY['abc'], 3);",
        f"SELECT vsearch_worker_probe((:other_idx)::regclass, {q});",
        f"SELECT vsearch_worker_probe((:other_idx)::regclass, {q}, 1, NULL, 40, '\\x02000000');",
        f"SELECT vsearch_index_check((:other_idx)::regclass, {rng.choice(['true', 'false'])});",
    ]))
