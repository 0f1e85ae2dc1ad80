"""Seeded forged worker requests for tests/fuzz: one vsearch_worker_probe call a line, each a valid
kNN request (k = 1) for one of the fuzz table's indexes whose header gets bytes written over one of
its fields (or a random span of them) before the backend submits it.  The worker must refuse or
answer every one and go on serving; the backend falls back (vsearch.device = auto) or raises its
ERROR (gpu).  Each line ends with a comment naming the field, for the per-field tally.

    /usr/bin/python3 tests/fuzz_requests.py SEED CASES > requests.sql

The values are written with fz_le(value, bytes) (little-endian, defined by tests/fuzz), so a
value may be an SQL expression (another relation's filenode, another database's OID).
"""
import random
import struct
import sys

seed, cases = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)

# VsRequest (extension/worker_internal.h) on 64-bit Linux: field -> (offset, size); tests/fuzz
# checks that the fields the backend writes end at PATCHABLE, as vsearch_worker_probe says.
FIELDS = {
    "magic": (0, 4), "protocol": (4, 4), "request_id": (8, 8), "op": (16, 4), "kind": (20, 4),
    "metric": (24, 4), "qformat": (28, 4), "dim": (32, 4), "nq": (36, 4), "k": (40, 4),
    "radius": (48, 8), "params": (56, 48), "generation": (104, 8), "ntuples": (112, 8),
    "dbid": (120, 4), "indexrelid": (124, 4), "locator.spc": (128, 4), "locator.db": (132, 4),
    "locator.rel": (136, 4), "relpersistence": (140, 1), "queries_off": (144, 8),
    "queries_len": (152, 8), "payload_off": (160, 8), "payload_len": (168, 8),
    "area_off": (176, 8), "area_len": (184, 8),
}
PATCHABLE = 192
# the header's size and the layout the backend writes for these requests: header | 8 floats | area
HEADER, QBYTES, SEGMENT = 528, 32, 65536

INDEXES = [("'fz_flat'", "NULL", "NULL"),
           ("'fz_ivf'", "2", "'\\x0000000004000000'::bytea"),  # probe window [0, 4)
           ("'fz_graph'", "3", "'\\x1000000001000000'::bytea")]  # ef 16, expand 1
OTHER_DB = "(SELECT oid::bigint FROM pg_database WHERE datname = 'fzother')"
RELATIONS = [f"pg_relation_filenode('{r}')::bigint" for r in ("fz_flat", "fz_ivf", "fz_graph", "fz", "fz_pkey")] + \
    ["0", ":other_filenode"]


def small_values():
    return [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 255, 1000, 16000, 16001, 1 << 24, (1 << 24) + 1,
            0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, rng.randrange(1 << 32)]


def layout_values():
    near = [HEADER, HEADER + QBYTES, SEGMENT, SEGMENT - HEADER - QBYTES, QBYTES]
    return ([v + d for v in near for d in (-8, -4, -1, 0, 1, 4, 8)] +
            [0, 1, 4, 8, 191, 192, 4095, 4096, 1 << 32, 1 << 63, (1 << 64) - 1,
             (1 << 64) - HEADER, rng.randrange(1 << 64), rng.randrange(SEGMENT * 2)])


def value(field, size):
    """An SQL expression for the bytes to write over field."""
    if field in ("metric", "op", "kind", "qformat", "dim", "nq", "k", "protocol", "magic"):
        v = rng.choice(small_values() + [0x56535251, 0x56535252])
    elif field == "radius":
        return "fz_f64('" + rng.choice(["NaN", "Infinity", "-Infinity", "-1", "0", "1e308",
                                        "5e-324", "3"]) + "')"
    elif field == "params":
        n = rng.randint(1, 48)
        return f"decode('{bytes(rng.randrange(256) for _ in range(n)).hex()}', 'hex')"
    elif field in ("generation", "ntuples", "request_id"):
        v = rng.choice([0, 1, 2, 499, 500, 501, 1 << 32, 1 << 62, 1 << 63, (1 << 63) + 1,
                        (1 << 64) - 1, rng.randrange(1 << 64)])
    elif field in ("dbid", "locator.db"):
        return rng.choice([f"fz_le({OTHER_DB}, 4)", "fz_le(0, 4)", "fz_le(1, 4)",
                           f"fz_le({rng.randrange(1 << 32)}, 4)"])
    elif field in ("indexrelid", "locator.rel"):
        return f"fz_le({rng.choice(RELATIONS + [str(rng.randrange(1 << 32))])}, 4)"
    elif field == "locator.spc":
        v = rng.choice([0, 1663, 1664, rng.randrange(1 << 32)])
    elif field == "relpersistence":
        v = rng.choice([ord("p"), ord("u"), ord("t"), 0, 0xFF, ord("P")])
    else:
        v = rng.choice(layout_values())
    return f"fz_le({v % (1 << (8 * size))}, {size})"


def case():
    idx, kind, params = rng.choice(INDEXES)
    query = "'[" + ",".join(repr(struct.unpack("f", struct.pack("f", rng.uniform(0, 1)))[0])
                           for _ in range(8)) + "]'::vector"
    if rng.random() < 0.15:  # a random span of bytes anywhere in the fields the backend writes
        off = rng.randrange(PATCHABLE)
        n = rng.randint(1, min(64, PATCHABLE - off))
        field, patch = "span", f"decode('{bytes(rng.randrange(256) for _ in range(n)).hex()}', 'hex')"
    else:
        field = rng.choice(sorted(FIELDS))
        off, size = FIELDS[field]
        patch = value(field, size)
    call = (f"SELECT 'probe {field} ' || vsearch_worker_probe({idx}, {query}, {kind}, {params}, "
            f"{off}, {patch});")
    if rng.random() < 0.25:  # the same request when the session insists on the worker
        call = f"SET vsearch.device = gpu; {call} SET vsearch.device = auto;"
    return f"{call} -- {field}"


for i in range(cases):
    print(case())
