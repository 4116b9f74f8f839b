"""What the MPI training tests (parallel_mpi.sh, parallel_zero_mpi.sh) share.

    python3 train_steps.py tokens PATH
        a token file in llm.c's format: 3000 ids below 53, seed 5
    python3 train_steps.py compare LABEL ONE RANKS FIRST
        the train harness's JSON lines: one process's 6 updates (ONE) against
        the ranks' (RANKS) from update FIRST on; loss and gradient norm within
        1e-6 relative, else exit 1
"""
import json
import random
import struct
import sys


def tokens(path):
    random.seed(5)
    n = 3000
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *[random.randrange(53) for _ in range(n)]))


def steps(path):
    return {r["step"]: r for r in map(json.loads, (l for l in open(path) if l.startswith("{")))}


def compare(label, a, b, first):
    one, par = steps(a), steps(b)
    done = [s for s in sorted(par) if s >= first]
    assert len(one) == 6 and done == list(range(first, 7)), (sorted(one), sorted(par))
    worst = max(abs(one[s][k] - par[s][k]) / abs(one[s][k]) for s in done for k in ("loss", "grad_norm"))
    print("%s: largest relative difference %.3g (loss and gradient norm, updates %d-6)" % (label, worst, first))
    return worst <= 1e-6


if __name__ == "__main__":
    if sys.argv[1] == "tokens":
        tokens(sys.argv[2])
    else:
        sys.exit(0 if compare(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])) else 1)
