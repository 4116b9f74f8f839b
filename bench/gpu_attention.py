"""bench/gpu_attention.py: the PyTorch peer of bench/gpu_attention.cu.

    python3 bench/gpu_attention.py OURS.csv

Reads the cases gpu_attention timed (OURS.csv, rows of kind 'case'), times
torch.nn.functional.scaled_dot_product_attention eager and under
torch.compile on the same shapes in bf16 ([B, H, T, D] contiguous, scale
1/sqrt(D), is_causal as ours) the same way (CUDA events around 20
back-to-back calls queued behind a sleep kernel, rotating as many input sets
as ours, after 10 warm-up calls, median of 31 samples), and prints the table:
case, ours us, ours TFLOP/s, sdpa eager us, compile us, ratio (eager / ours;
above 1 means ours is faster). SDPA_COMPILE=0 leaves torch.compile out
(its compilations take most of a short device call).
"""
import csv
import os
import statistics
import sys

import torch
import torch.nn.functional as F

WARM, SAMPLES, ITERS = 10, 31, 20


def time_us(fn, nsets):
    for i in range(WARM):
        fn(i % nsets)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t, k = [], 0
    for _ in range(SAMPLES):
        torch.cuda._sleep(2_000_000)
        start.record()
        for _ in range(ITERS):
            fn(k % nsets)
            k += 1
        end.record()
        end.synchronize()
        t.append(1000.0 * start.elapsed_time(end) / ITERS)
    return statistics.median(t)


def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0] == "case"]
    compiled = torch.compile(sdpa) if os.environ.get("SDPA_COMPILE", "1") != "0" else None
    table = []
    for _, name, B, H, T, S, D, causal, us, tflops, _diff in rows:
        B, H, T, S, D, causal = int(B), int(H), int(T), int(S), int(D), bool(int(causal))
        elems = B * H * T * D
        nsets = min(16, max(2, (128 << 20) // (4 * elems * 2) + 1))
        gen = torch.Generator(device="cuda").manual_seed(1)
        sets = [[torch.empty(B, H, T, D, device="cuda", dtype=torch.bfloat16).uniform_(-1.5, 1.5, generator=gen)
                 for _ in range(3)] for _ in range(nsets)]
        eager = time_us(lambda i: sdpa(*sets[i], causal), nsets)
        comp = time_us(lambda i: compiled(*sets[i], causal), nsets) if compiled else float("nan")
        print(f"  peer {name}: eager {eager:.2f} us, compile {comp:.2f} us", file=sys.stderr)
        table.append((name, float(us), float(tflops), eager, comp))
        del sets
        torch.cuda.empty_cache()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| case | ours us | ours TFLOP/s | sdpa eager us | compile us | ratio (eager/ours) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, us, tf, eager, comp in table:
        print(f"| {name} | {us:.2f} | {tf:.1f} | {eager:.2f} | {comp:.2f} | {eager / us:.2f} |")


if __name__ == "__main__":
    main()
