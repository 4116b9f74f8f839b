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

Eager SDPA picks one of its backends per shape; the table also times each
backend forced (torch.nn.attention.sdpa_kernel: flash, cuDNN, memory-
efficient; "-" where a backend refuses the shape) and names the kernel
eager SDPA ran (the longest CUDA kernel of one profiled call), so that a
ratio says which implementation it was measured against.
"""
import csv
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]

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


def forced_us(backend, sets, causal):
    """Eager SDPA with only this backend allowed; NaN where it refuses the shape."""
    def call(i):
        with sdpa_kernel([backend]):
            return sdpa(*sets[i], causal)
    try:
        call(0)
    except RuntimeError:
        return float("nan")
    return time_us(call, len(sets))


def kernel_name(sets, causal):
    """The longest CUDA kernel of one eager SDPA call."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        sdpa(*sets[0], causal)
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not events:
        return "?"
    name = max(events, key=lambda e: e.device_time_total).key
    return name[:60]


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
        forced = [forced_us(b, sets, causal) for _, b in BACKENDS]
        kname = kernel_name(sets, causal)
        print(f"  peer {name}: eager {eager:.2f} us ({kname}), compile {comp:.2f} us, "
              + ", ".join(f"{n} {t:.2f}" for (n, _), t in zip(BACKENDS, forced)), file=sys.stderr)
        table.append((name, float(us), float(tflops), eager, comp, forced, kname))
        del sets
        torch.cuda.empty_cache()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| case | ours us | ours TFLOP/s | sdpa eager us | compile us | "
          + " | ".join(f"{n} us" for n, _ in BACKENDS) + " | ratio (eager/ours) | best peer / ours | eager's kernel |")
    print("| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in BACKENDS) + " | ---: | ---: | --- |")
    fmt = lambda t: "-" if t != t else f"{t:.2f}"
    for name, us, tf, eager, comp, forced, kname in table:
        best = min(t for t in [eager, comp] + forced if t == t)
        print(f"| {name} | {us:.2f} | {tf:.1f} | {eager:.2f} | {fmt(comp)} | "
              + " | ".join(fmt(t) for t in forced) + f" | {eager / us:.2f} | {best / us:.2f} | {kname} |")


if __name__ == "__main__":
    main()
