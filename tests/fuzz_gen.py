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


for i in range(cases):
    print(case())
# round trips: text output parses back to the same vector
for i in range(max(1, cases // 20)):
    v = good_vec(rng.randint(1, 30))
    print(f"SELECT 'WRONG round trip' WHERE ({lit(v)})::text::vector <> {lit(v)} OR "
          f"({lit(v)} <-> {lit(v)}) <> 0;")
