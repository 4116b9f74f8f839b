#!/usr/bin/env python3
"""Where the time of one bench run goes: the per-kernel table of a
`bench_<model> --json` line, summed by kernel kind and fused ops.

    ./bench_gpt2 -d B=16 -d T=1024 --json | python3 bench/kernel_breakdown.py [--top N]

Prints the total, then one row per (kind, ops) with its kernel count, ms,
share and achieved rates, the largest first; then the N slowest kernels.
"""
import argparse
import json
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=12, help="slowest single kernels to list")
    ap.add_argument("file", nargs="?", help="a file of the JSON line (default: stdin)")
    a = ap.parse_args()
    text = open(a.file).read() if a.file else sys.stdin.read()
    run = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"kernels"' in line:
            run = json.loads(line)
    if run is None:
        sys.exit("kernel_breakdown: expected a JSON line with \"kernels\" (bench_<model> --json)")
    ks = run["kernels"]
    total = sum(k["ms"] for k in ks)
    groups = defaultdict(lambda: [0, 0.0, 0.0, 0.0])   # count, ms, gflop, gbyte
    for k in ks:
        g = groups[(k["kind"], k["ops"])]
        g[0] += 1
        g[1] += k["ms"]
        g[2] += k["gflops"] * k["ms"] * 1e-3
        g[3] += k["gbps"] * k["ms"] * 1e-3
    print(f"{len(ks)} kernels, {total:.3f} ms in all (the sum of the per-kernel events)")
    print(f"{'kind':<15} {'ops':<44} {'n':>4} {'ms':>9} {'share':>6} {'TFLOP/s':>8} {'GB/s':>7}")
    for (kind, ops), (n, ms, gf, gb) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        if ms < 0.005 * total:
            continue
        s = ms * 1e-3
        print(f"{kind:<15} {ops[:44]:<44} {n:>4} {ms:>9.3f} {100 * ms / total:>5.1f}% "
              f"{gf / s * 1e-3 if s else 0:>8.1f} {gb / s if s else 0:>7.0f}")
    print(f"\nthe {a.top} slowest kernels")
    for k in sorted(ks, key=lambda k: -k["ms"])[:a.top]:
        print(f"  {k['name']:<10} {k['where']:<22} {k['kind']:<14} {k['ops'][:40]:<40} {k['ms']:8.3f} ms "
              f"{k['gflops'] * 1e-3:7.1f} TFLOP/s {k['gbps']:6.0f} GB/s")


if __name__ == "__main__":
    main()
