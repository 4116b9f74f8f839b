#!/usr/bin/env python3
"""bench/st_compare.py A.safetensors B.safetensors: two checkpoints tensor by
tensor (names, dtypes, shapes, how many elements differ and by how much), and
their metadata. Used to check that two targets' quantized checkpoints
(`bench_<model> --save-quantized`) of the same f32 weights hold the same
values: C SIMD's and CUDA's quantizers follow one rule. Exit 1 when any
tensor differs, 2 when the files do not describe the same tensors."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I8": np.int8, "U8": np.uint8,
          "BF16": np.uint16, "I64": np.int64}


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, d in header.items():
        a, b = d["data_offsets"]
        out[name] = (d["dtype"], tuple(d["shape"]), np.frombuffer(data[a:b], dtype=DTYPES[d["dtype"]]))
    return meta, out


def main():
    ma, ta = read(sys.argv[1])
    mb, tb = read(sys.argv[2])
    print("metadata: %s / %s" % (ma, mb))
    if set(ta) != set(tb):
        print("tensors only in A: %s; only in B: %s" % (sorted(set(ta) - set(tb)), sorted(set(tb) - set(ta))))
        return 2
    differ = 0
    for name in sorted(ta):
        (da, sa, va), (db, sb, vb) = ta[name], tb[name]
        if da != db or sa != sb:
            print("%s: %s%s / %s%s" % (name, da, list(sa), db, list(sb)))
            return 2
        if da == "U8":   # packed int4: compare the nibbles
            va = np.stack([va & 15, va >> 4], axis=-1).ravel()
            vb = np.stack([vb & 15, vb >> 4], axis=-1).ravel()
        n = int(np.count_nonzero(va != vb))
        if n:
            differ += 1
            fa, fb = va.astype(np.float64), vb.astype(np.float64)
            print("%s %s%s: %d of %d differ, max |a - b| %g" % (name, da, list(sa), n, va.size, np.max(np.abs(fa - fb))))
    print("%d of %d tensors equal" % (len(ta) - differ, len(ta)))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
