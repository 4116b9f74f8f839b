#!/usr/bin/env python3
"""bench/digits_data.py: scikit-learn's bundled digits as train_digits' data files.

Writes two safetensors files, the format train_<model> reads for a classifier:
  x  F32 [N, 64]  the 8 x 8 pixels, row by row, divided by 16 (so in [0, 1])
  y  I32 [N]      the digit, 0..9
The split is deterministic: the 1797 images are permuted with numpy's
default_rng(--seed) (seed 0 by default), the first --test (360) of the
permutation go to the test file and the other 1437 to the training file, each
kept in the permutation's order (so the training file is already shuffled
once; train_digits without --shuffle then reads it in that order every pass).
--no-shuffle keeps load_digits' order (the test set is then its last --test
images).

Needs scikit-learn (load_digits reads a file inside the package: no download),
numpy and safetensors:  pip install scikit-learn safetensors

Usage: python3 bench/digits_data.py [--out DIR] [--seed N] [--test N] [--no-shuffle]
Prints one JSON line: {"train": path, "test": path, "n_train": ..., "n_test": ...}
"""
import argparse
import json
import os
import sys


def load(seed=0, test=360, shuffle=True):
    """(x_train, y_train, x_test, y_test) as numpy float32 / int32 arrays."""
    import numpy as np
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data.astype(np.float64) / 16.0).astype(np.float32)
    y = d.target.astype(np.int32)
    n = len(y)
    if not 0 < test < n:
        raise ValueError(f"--test {test}: expected 1..{n - 1}")
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    te, tr = order[:test], order[test:]
    if not shuffle:
        tr, te = order[:n - test], order[n - test:]
    return (np.ascontiguousarray(x[tr]), np.ascontiguousarray(y[tr]),
            np.ascontiguousarray(x[te]), np.ascontiguousarray(y[te]))


def write(out, seed=0, test=360, shuffle=True):
    from safetensors.numpy import save_file
    os.makedirs(out, exist_ok=True)
    xtr, ytr, xte, yte = load(seed, test, shuffle)
    paths = {"train": os.path.join(out, "digits_train.safetensors"),
             "test": os.path.join(out, "digits_test.safetensors")}
    save_file({"x": xtr, "y": ytr}, paths["train"])
    save_file({"x": xte, "y": yte}, paths["test"])
    return dict(paths, n_train=len(ytr), n_test=len(yte))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/digits_data", help="folder for the two files")
    ap.add_argument("--seed", type=int, default=0, help="seed of the split's permutation")
    ap.add_argument("--test", type=int, default=360, help="images in the test file")
    ap.add_argument("--no-shuffle", action="store_true", help="keep load_digits' order")
    a = ap.parse_args()
    print(json.dumps(write(a.out, a.seed, a.test, not a.no_shuffle)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
