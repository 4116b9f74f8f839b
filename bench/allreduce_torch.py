"""The peer of nnc's gradient all_reduce (issue 15): torch.distributed's NCCL
all_reduce of f32 buffers of the given sizes, bus bandwidth as nccl-tests
define it (bytes * 2 (n - 1) / n over the time), CUDA events, median of 20
after 5 warm-ups. Run under torchrun --nproc_per_node=N; rank 0 prints one
line per size: "torch all_reduce <MB> MB: <ms> ms, busbw <GB/s> GB/s"."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    sizes = [float(s) for s in (sys.argv[1:] or ["1", "16", "64", "256"])]
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    for mb in sizes:
        x = torch.ones(int(mb * 1e6 / 4), dtype=torch.float32, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dist.all_reduce(x)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        ms = sorted(times)[len(times) // 2]
        bus = x.numel() * 4 * 2 * (n - 1) / n / (ms * 1e-3) / 1e9
        if rank == 0:
            print("torch all_reduce %g MB: %.3f ms, busbw %.1f GB/s" % (mb, ms, bus), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
