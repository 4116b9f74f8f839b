"""bench/gpu_rows.py: the PyTorch peer of bench/gpu_rows.cu.

    python3 bench/gpu_rows.py OURS.csv PEER.csv

Reads the kernels that gpu_rows --bench timed (OURS.csv), times PyTorch eager
and torch.compile on the same shapes and dtypes the same way (CUDA events
around 20 back-to-back calls queued behind a sleep kernel, rotating 4 input
sets, median of 31 samples), writes PEER.csv and prints the table:
kernel, dtype, shape, ours us, ours TB/s, fraction of the copy floor,
eager us, compile us, and eager/ours and compile/ours time ratios.
"""
import csv
import statistics
import sys

import torch
import torch.nn.functional as F

SETS, WARM, SAMPLES, ITERS = 4, 10, 31, 20
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def time_us(fn):
    for i in range(WARM):
        fn(i % SETS)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t, k = [], 0
    for _ in range(SAMPLES):
        torch.cuda._sleep(4_000_000)  # queue the iterations behind it
        start.record()
        for _ in range(ITERS):
            fn(k % SETS)
            k += 1
        end.record()
        end.synchronize()
        t.append(1000.0 * start.elapsed_time(end) / ITERS)
    return statistics.median(t)


def make_fn(kernel, dtype, rows, cols):
    dt = DTYPES[dtype]
    gen = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.empty(rows, cols, device="cuda", dtype=dt).uniform_(-3, 3, generator=gen)
          for _ in range(SETS)]
    w = torch.empty(cols, device="cuda", dtype=dt).uniform_(0.5, 1.5, generator=gen)
    b = torch.empty(cols, device="cuda", dtype=dt).uniform_(-0.5, 0.5, generator=gen)
    if kernel == "layernorm":
        def f(x):
            return F.layer_norm(x, (cols,), w, b, 1e-5)
        args = [(x,) for x in xs]
    elif kernel == "softmax":
        def f(x):
            return F.softmax(x, dim=-1)
        args = [(x,) for x in xs]
    elif kernel == "rmsnorm":
        def f(x):
            return F.rms_norm(x, (cols,), w, 1e-5)
        args = [(x,) for x in xs]
    elif kernel == "add_gelu":
        ys = [torch.empty(rows, cols, device="cuda", dtype=dt).uniform_(-1, 1, generator=gen)
              for _ in range(SETS)]

        def f(x, y):
            return F.gelu(x + y, approximate="tanh")
        args = list(zip(xs, ys))
    else:
        raise ValueError(kernel)
    return f, args


def main():
    ours_path, peer_path = sys.argv[1], sys.argv[2]
    with open(ours_path) as fh:
        ours = list(csv.reader(fh))
    copy_tbs = float(next(r for r in ours if r[0] == "copy")[6])
    rows_out = []
    for kernel, dtype, rows, cols, nbytes, us, tbs, floor_us in (r for r in ours if r[0] != "copy"):
        rows_i, cols_i = int(rows), int(cols)
        f, args = make_fn(kernel, dtype, rows_i, cols_i)
        eager = time_us(lambda i: f(*args[i]))
        cf = torch.compile(f, dynamic=False)
        try:
            comp = time_us(lambda i: cf(*args[i]))
        except Exception as e:  # report, keep the other rows
            print(f"torch.compile failed for {kernel} {dtype}: {e}", file=sys.stderr)
            comp = float("nan")
        print(f"  peer {kernel} {dtype} {rows}x{cols}: eager {eager:.2f} us, compile {comp:.2f} us",
              file=sys.stderr, flush=True)
        rows_out.append((kernel, dtype, f"{rows}x{cols}", float(us), float(tbs), float(floor_us),
                         eager, comp))
        del f, args, cf
        torch.cuda.empty_cache()
    with open(peer_path, "w") as fh:
        w = csv.writer(fh)
        for r in rows_out:
            w.writerow([r[0], r[1], r[2], f"{r[6]:.3f}", f"{r[7]:.3f}"])
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"device-to-device copy {copy_tbs:.3f} TB/s (read + write); floor = bytes / copy rate")
    hdr = ("kernel", "dtype", "shape", "ours us", "ours TB/s", "of floor", "eager us", "compile us",
           "eager/ours", "compile/ours")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for k, d, s, us, tbs, fl, e, c in rows_out:
        print(f"| {k} | {d} | {s} | {us:.2f} | {tbs:.3f} | {fl / us:.0%} | {e:.2f} | {c:.2f} "
              f"| {e / us:.2f} | {c / us:.2f} |")


if __name__ == "__main__":
    main()
