#!/usr/bin/env python3
"""bench/cpu_peers.py: the PyTorch/numpy side of bench/cpu_compare.sh.

Measures, on the CPU, with the shapes nnc's harness uses and random weights:
  gemm  numpy `a @ b`, M=512 K=768 N=3072 f32 (OpenBLAS; set
        OPENBLAS_NUM_THREADS before starting Python, the script cannot)
  gpt2  GPT-2 124M forward (12 layers, d=768, 12 heads, vocab 50257,
        gelu tanh, tied head), ids [B, T]
  bert  BERT in the all-MiniLM-L6-v2 shape (6 layers, hidden 384, 12 heads,
        intermediate 1536, vocab 30522) with mean pooling, ids [B, T],
        attention mask all ones
PyTorch runs in inference mode: torch.no_grad(), float32, eval(),
torch.set_num_threads(--threads). Attention goes through
F.scaled_dot_product_attention, as Hugging Face's models do by default.
--compile wraps the model in torch.compile (inductor) after eager timing.

Each result is one JSON object per line on stdout:
  {"what": ..., "shape": ..., "impl": ..., "median_ms": ..., "p90_ms": ...,
   "min_ms": ..., "runs": ..., "gflops": ...}
(gflops only for the GEMM).

Usage: python3 bench/cpu_peers.py [gemm] [gpt2] [bert] [--runs N]
       [--warmup N] [--threads N] [--compile] [--B N] [--T N]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def summarize(times_s):
    ms = sorted(t * 1e3 for t in times_s)
    p90 = ms[min(len(ms) - 1, math.ceil(0.9 * len(ms)) - 1)]
    return {"median_ms": statistics.median(ms), "p90_ms": p90,
            "min_ms": ms[0], "runs": len(ms)}


def time_fn(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return summarize(times)


def emit(rec):
    print(json.dumps(rec), flush=True)


def bench_gemm(args):
    import numpy as np
    M, K, N = 512, 768, 3072
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.empty((M, N), dtype=np.float32)
    runs = max(args.runs, 50)
    r = time_fn(lambda: np.matmul(a, b, out=c), runs, max(args.warmup, 5))
    r.update(what="gemm", shape=f"{M}x{K}x{N}", impl="numpy",
             threads=os.environ.get("OPENBLAS_NUM_THREADS", "default"),
             gflops=2.0 * M * K * N / (r["median_ms"] * 1e-3) / 1e9)
    emit(r)


def build_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class GPT2Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln_1 = nn.LayerNorm(d, eps=1e-5)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d, eps=1e-5)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            hd = C // self.heads
            q = q.view(B, T, self.heads, hd).transpose(1, 2)
            k = k.view(B, T, self.heads, hd).transpose(1, 2)
            v = v.view(B, T, self.heads, hd).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
            h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
            return x + self.mlp_proj(h)

    class GPT2(nn.Module):
        def __init__(self, layers=12, d=768, heads=12, vocab=50257, ctx=1024):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.wpe = nn.Embedding(ctx, d)
            self.h = nn.ModuleList(GPT2Block(d, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d, eps=1e-5)
            for p in self.parameters():
                nn.init.normal_(p, std=0.02)

        def forward(self, ids):
            T = ids.shape[1]
            x = self.wte(ids) + self.wpe.weight[:T]
            for blk in self.h:
                x = blk(x)
            # Tied head: logits = ln_f(x) @ wte^T.
            return F.linear(self.ln_f(x), self.wte.weight)

    class BertLayer(nn.Module):
        def __init__(self, d, heads, inter):
            super().__init__()
            self.heads = heads
            self.query = nn.Linear(d, d)
            self.key = nn.Linear(d, d)
            self.value = nn.Linear(d, d)
            self.attn_out = nn.Linear(d, d)
            self.ln_attn = nn.LayerNorm(d, eps=1e-12)
            self.inter = nn.Linear(d, inter)
            self.out = nn.Linear(inter, d)
            self.ln_out = nn.LayerNorm(d, eps=1e-12)

        def forward(self, x, mask):
            B, T, C = x.shape
            hd = C // self.heads

            def heads(t):
                return t.view(B, T, self.heads, hd).transpose(1, 2)
            y = F.scaled_dot_product_attention(
                heads(self.query(x)), heads(self.key(x)), heads(self.value(x)),
                attn_mask=mask)
            x = self.ln_attn(x + self.attn_out(y.transpose(1, 2).reshape(B, T, C)))
            h = F.gelu(self.inter(x))
            return self.ln_out(x + self.out(h))

    class Bert(nn.Module):
        def __init__(self, layers=6, d=384, heads=12, inter=1536, vocab=30522,
                     positions=512, type_vocab=2):
            super().__init__()
            self.word = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(positions, d)
            self.tok_type = nn.Embedding(type_vocab, d)
            self.ln = nn.LayerNorm(d, eps=1e-12)
            self.layers = nn.ModuleList(BertLayer(d, heads, inter) for _ in range(layers))
            for p in self.parameters():
                nn.init.normal_(p, std=0.02)

        def forward(self, ids, types, mask):
            T = ids.shape[1]
            x = self.ln(self.word(ids) + self.pos.weight[:T] + self.tok_type(types))
            # Boolean key mask [B, 1, 1, T]: True = attend.
            keep = (mask != 0)[:, None, None, :]
            for layer in self.layers:
                x = layer(x, keep)
            m = mask.to(x.dtype).unsqueeze(-1)
            return x, (x * m).sum(1) / m.sum(1)

    return GPT2, Bert


def bench_models(args, names):
    import torch
    torch.set_num_threads(args.threads)
    GPT2, Bert = build_models()
    g = torch.Generator().manual_seed(0)
    cases = []
    if "gpt2" in names:
        B, T = args.B or 1, args.T or 128
        ids = torch.randint(0, 50257, (B, T), generator=g, dtype=torch.long)
        cases.append(("gpt2", f"B={B} T={T}", GPT2().eval(), (ids,)))
    if "bert" in names:
        B, T = args.B or 8, args.T or 128
        ids = torch.randint(0, 30522, (B, T), generator=g, dtype=torch.long)
        types = torch.zeros(B, T, dtype=torch.long)
        mask = torch.ones(B, T, dtype=torch.long)
        cases.append(("bert", f"B={B} T={T}", Bert().eval(), (ids, types, mask)))
    for what, shape, model, inputs in cases:
        with torch.no_grad():
            r = time_fn(lambda: model(*inputs), args.runs, args.warmup)
        r.update(what=what, shape=shape, impl="torch-eager",
                 threads=torch.get_num_threads(), torch=torch.__version__)
        emit(r)
        if args.compile:
            rec = {"what": what, "shape": shape, "impl": "torch-compile",
                   "threads": torch.get_num_threads()}
            try:
                cm = torch.compile(model)
                with torch.no_grad():
                    t0 = time.perf_counter()
                    cm(*inputs)
                    rec["compile_s"] = time.perf_counter() - t0
                    rec.update(time_fn(lambda: cm(*inputs), args.runs, args.warmup))
            except Exception as e:  # report the failure as a result, keep going
                rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            emit(rec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="*", default=["gemm", "gpt2", "bert"],
                    choices=["gemm", "gpt2", "bert"])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--B", type=int, default=0, help="batch (default: 1 gpt2, 8 bert)")
    ap.add_argument("--T", type=int, default=0, help="tokens (default 128)")
    args = ap.parse_args()
    if "gemm" in args.what:
        bench_gemm(args)
    models = [w for w in args.what if w != "gemm"]
    if models:
        bench_models(args, models)
    return 0


if __name__ == "__main__":
    sys.exit(main())
