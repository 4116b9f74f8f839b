"""What the MPI training tests (parallel_mpi.sh, parallel_zero_mpi.sh) share.

    python3 train_steps.py tokens PATH
        a token file in llm.c's format: 3000 ids below 53, seed 5
    python3 train_steps.py compare LABEL ONE RANKS FIRST
        the train harness's JSON lines: one process's updates (ONE: 1 to n)
        against the ranks' (RANKS) from update FIRST on to n; loss and gradient
        norm within 1e-6 relative, else exit 1
    python3 train_steps.py checkpoints LABEL A B
        two checkpoints (safetensors) hold the same tensors (names, dtypes,
        shapes), non-F32 ones equal and F32 ones within 1e-6 of each
        tensor's largest magnitude, else exit 1
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
    n = len(one)
    assert n >= first and sorted(one) == list(range(1, n + 1)) and done == list(range(first, n + 1)), (sorted(one), sorted(par))
    worst = max(abs(one[s][k] - par[s][k]) / abs(one[s][k]) for s in done for k in ("loss", "grad_norm"))
    print("%s: largest relative difference %.3g (loss and gradient norm, updates %d-%d)" % (label, worst, first, n))
    return worst <= 1e-6


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    head.pop("__metadata__", None)
    return head, data[8 + n:]


def checkpoints(label, a, b):
    (ha, da), (hb, db) = read_safetensors(a), read_safetensors(b)
    shapes = lambda h: {k: (v["dtype"], v["shape"]) for k, v in h.items()}
    if shapes(ha) != shapes(hb):
        print("%s: the tensors differ: %s against %s" % (label, shapes(ha), shapes(hb)))
        return False
    worst, where = 0.0, ""
    for k, v in ha.items():
        x, y = da[slice(*v["data_offsets"])], db[slice(*hb[k]["data_offsets"])]
        if v["dtype"] != "F32":
            if x != y:
                print("%s: %s differs" % (label, k))
                return False
            continue
        x, y = struct.unpack("<%df" % (len(x) // 4), x), struct.unpack("<%df" % (len(y) // 4), y)
        d = max((abs(p - q) for p, q in zip(x, y)), default=0.0) / max(max((abs(t) for t in x), default=0.0), 1e-30)
        if d >= worst:
            worst, where = d, k
    print("%s: %d tensors, largest difference %.3g of the tensor's largest magnitude (%s)" % (label, len(ha), worst, where))
    return worst <= 1e-6


if __name__ == "__main__":
    if sys.argv[1] == "tokens":
        tokens(sys.argv[2])
    elif sys.argv[1] == "checkpoints":
        sys.exit(0 if checkpoints(sys.argv[2], sys.argv[3], sys.argv[4]) else 1)
    else:
        sys.exit(0 if compare(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])) else 1)
