#!/usr/bin/python3
"""Writes Debian's Fashion-MNIST (package dataset-fashion-mnist) as COPY text rows
"id<TAB>label<TAB>[p0,...,p783]" on stdout: the train split (60000 rows) or the test split
(10000 rows), pixels 0..255 as vector components.

    fashion_mnist.py train|test [limit]
"""
import gzip
import struct
import sys

DIR = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def main():
    split = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else None
    images, labels = FILES[split]
    (n, rows, cols), pixels = read_idx(f"{DIR}/{images}")
    (_,), label_bytes = read_idx(f"{DIR}/{labels}")
    d = rows * cols
    n = min(n, limit) if limit else n
    out = sys.stdout
    for i in range(n):
        row = pixels[i * d:(i + 1) * d]
        out.write(f"{i}\t{label_bytes[i]}\t[{','.join(map(str, row))}]\n")


if __name__ == "__main__":
    main()
