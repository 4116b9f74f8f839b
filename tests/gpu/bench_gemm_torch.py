"""tests/gpu/bench_gemm_torch.py: the PyTorch peer of test_rt_cuda_gpu --bench.

The same bf16 nn.Linear GEMMs (x [M,K] . W[N,K]^T + b, GELU-tanh on fc1;
GPT-2's at B=8 T=1024, BERT MiniLM's at B=32 T=128), timed the same way:
CUDA events, 5 warm-ups, median of 30. 'eager' is F.linear then F.gelu (two
kernels); 'fused' is torch._addmm_activation, which PyTorch routes to
cuBLASLt's GELU epilogue; 'bare' is x @ W^T alone (torch.mm: what
torch.compile hands cuBLAS when its own kernel takes the bias and
activation). The residual of nnc's '+res' rows is not added here."""
import statistics

import torch
import torch.nn.functional as F

CASES = [
    (8192, 2304, 768, False, "gpt2 qkv"),
    (8192, 768, 768, False, "gpt2 proj"),
    (8192, 3072, 768, True, "gpt2 fc1+gelu"),
    (8192, 768, 3072, False, "gpt2 fc2"),
    (4096, 1152, 384, False, "bert qkv"),
    (4096, 384, 384, False, "bert ao"),
    (4096, 1536, 384, False, "bert inter"),
    (4096, 384, 1536, False, "bert out"),
    (8192, 8192, 8192, False, "8k cube"),
]


def median_ms(fn):
    for _ in range(5):
        fn()
    times = []
    for _ in range(30):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times)


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'torch (bf16)':16} {'M':>6} {'N':>6} {'K':>6} {'eager ms':>10} {'fused ms':>10} {'TFLOP/s':>10}"
          f" {'bare ms':>10} {'TFLOP/s':>10}")
    for M, N, K, gelu, name in CASES:
        x = torch.rand(M, K, device="cuda", dtype=torch.bfloat16) * 2 - 1
        w = torch.rand(N, K, device="cuda", dtype=torch.bfloat16) * 2 - 1
        b = torch.rand(N, device="cuda", dtype=torch.bfloat16) * 2 - 1
        if gelu:
            eager = median_ms(lambda: F.gelu(F.linear(x, w, b), approximate="tanh"))
            fused = median_ms(lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True))
        else:
            eager = median_ms(lambda: F.linear(x, w, b))
            fused = eager
        bare = median_ms(lambda: torch.mm(x, w.t()))
        best = min(eager, fused)
        flop = 2 * M * N * K
        print(f"{name:16} {M:6d} {N:6d} {K:6d} {eager:10.4f} {fused:10.4f} "
              f"{flop / (best * 1e-3) / 1e12:10.1f} {bare:10.4f} {flop / (bare * 1e-3) / 1e12:10.1f}")


if __name__ == "__main__":
    main()
