#!/usr/bin/env python3
"""bench/gpu_train_torch.py: PyTorch's GPT-2 124M training step, the GPU peer of
nnc's train_<model> (bench/gpu_train_peers.sh runs it beside llm.c).

The model: GPT-2 small (12 layers, d 768, 12 heads, vocab 50257, ctx 1024),
token and position embeddings, pre-LayerNorm blocks (eps 1e-5), fused qkv,
causal attention through F.scaled_dot_product_attention (the flash kernel under
bf16 on the GPU), GELU tanh MLP (4d), ln_f, the LM head tied to wte, mean
cross-entropy over B*T tokens. Init: normal(0, 0.02), the two residual
projections of each block normal(0, 0.02/sqrt(2*layers)), biases 0,
LayerNorm weights 1 (GPT-2's, as llm.c's `-e d12`). --pad-vocab N pads wte
(and so the logits) to N rows, as llm.c (50304) and nanoGPT do; the loss is
then a softmax over all N logits (llm.c's is over the first 50257 only).
Default: no padding.

One step, timed whole with CUDA events (time.perf_counter on the CPU): forward
and loss under torch.autocast(bfloat16) (f32 master weights: the parameters
stay f32), backward, torch.nn.utils.clip_grad_norm_(1.0), AdamW (lr 6e-4,
betas 0.9/0.95, eps 1e-8, weight decay 0.1 on parameters of rank >= 2: wte,
wpe and the matrices, 0 on biases and LayerNorms; fused=True, falling back to
foreach where the device has no fused kernel), zero_grad(set_to_none=True).
Each step is synchronised before the next (as llm.c's loop does).

Modes: eager, or the model (forward and loss) through torch.compile in mode
default, reduce-overhead (CUDA graphs) or max-autotune; backward runs through
AOTAutograd's compiled backward, clipping and the fused optimizer eagerly.

Data: --data FILE reads tokens from an llm.c .bin (256 int32 header: 20240520,
1, count; then uint16 tokens), consecutive batches of B*T+1 (wrapping);
without it, uniform random ids from --seed. Every batch is put on the device
before the timed steps.

--warmup steps run first and are left out of the statistics (they include
compilation and CUDA-graph recording); then --steps timed steps. Output: one
line on stderr, and with --json one JSON object on stdout:
  {"peer": "torch-<mode>", "mode", "B", "T", "steps", "warmup", "median_ms",
   "mean_ms", "min_ms", "max_ms", "tokens_per_s" (B*T / median), "first_step_s"
   (wall, compilation included), "setup_s", "max_memory_allocated_mib",
   "max_memory_reserved_mib" (torch.cuda peaks over the whole run, warm-up and
   compilation included; null on the CPU), "loss_first", "loss_last",
   "params", "vocab", "padded_vocab", "layers", "d", "heads", "precision",
   "optimizer" ("fused" or "foreach"), "device", "device_name", "torch"}
On failure the object has "error" (and the process exits 1).

Tiny CPU check:
  python3 bench/gpu_train_torch.py --device cpu --layers 2 --d 64 --heads 2 \\
      --vocab 101 --T 32 --B 2 --steps 3 --warmup 1 --mode eager --json
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", default="eager", choices=["eager", "default", "reduce-overhead", "max-autotune"])
    p.add_argument("--B", type=int, default=16)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--json", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--pad-vocab", type=int, default=0, help="pad wte/logits to this many rows (0: none)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "f32"],
                   help="bf16: autocast(bfloat16) over f32 weights; f32: no autocast")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--data", default=None, help="an llm.c .bin token file")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def build_model(a, vp):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = a.d
            self.ln_1 = nn.LayerNorm(d, eps=1e-5)
            self.c_attn = nn.Linear(d, 3 * d)
            self.attn_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d, eps=1e-5)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            h = a.heads
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(B, T, h, C // h).transpose(1, 2)
            k = k.view(B, T, h, C // h).transpose(1, 2)
            v = v.view(B, T, h, C // h).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vp, a.d)
            self.wpe = nn.Embedding(a.ctx, a.d)
            self.h = nn.ModuleList([Block() for _ in range(a.layers)])
            self.ln_f = nn.LayerNorm(a.d, eps=1e-5)

        def forward(self, ids, targets):
            T = ids.shape[1]
            pos = torch.arange(T, device=ids.device)
            x = self.wte(ids) + self.wpe(pos)
            for blk in self.h:
                x = blk(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # the LM head, tied to wte
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    g = torch.Generator(device=a.device).manual_seed(a.seed)
    with torch.device(a.device):
        m = GPT()
    resid_std = 0.02 / math.sqrt(2 * a.layers)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln_" in name or name.startswith("ln_"):
                p.fill_(1.0)
            elif name.endswith("attn_proj.weight") or name.endswith("mlp_proj.weight"):
                p.normal_(0.0, resid_std, generator=g)
            else:
                p.normal_(0.0, 0.02, generator=g)
    return m


def batches(a, n, vocab):
    import torch
    span = a.B * a.T
    if a.data:
        import numpy as np
        head = np.fromfile(a.data, dtype="<i4", count=256)
        if head[0] != 20240520 or head[1] != 1:
            raise ValueError(f"{a.data}: not an llm.c .bin (magic {head[0]}, version {head[1]})")
        tok = np.memmap(a.data, dtype="<u2", mode="r", offset=256 * 4, shape=(int(head[2]),))
        if len(tok) < span + 1:
            raise ValueError(f"{a.data}: {len(tok)} tokens; a batch needs {span + 1}")
        out, p = [], 0
        for _ in range(n):
            if p + span + 1 > len(tok):
                p = 0
            w = torch.from_numpy(np.asarray(tok[p:p + span + 1], dtype=np.int64)) % vocab
            out.append((w[:-1].view(a.B, a.T).to(a.device), w[1:].view(a.B, a.T).to(a.device)))
            p += span
        return out
    g = torch.Generator().manual_seed(a.seed + 1)
    out = []
    for _ in range(n):
        w = torch.randint(0, vocab, (span + 1,), generator=g)
        out.append((w[:-1].view(a.B, a.T).to(a.device), w[1:].view(a.B, a.T).to(a.device)))
    return out


def main():
    a = parse()
    rec = {"peer": f"torch-{a.mode}", "mode": a.mode, "B": a.B, "T": a.T, "steps": a.steps,
           "warmup": a.warmup, "layers": a.layers, "d": a.d, "heads": a.heads, "vocab": a.vocab,
           "precision": a.precision}
    try:
        run(a, rec)
        rc = 0
    except Exception as e:  # reported in the JSON line, the caller's table shows it
        import traceback
        traceback.print_exc()
        msg = f"{type(e).__name__}: {e}".strip().splitlines()
        rec["error"] = msg[0][:300] if msg else type(e).__name__
        rc = 1
    if "median_ms" in rec:
        print(f"{rec['peer']}: median {rec['median_ms']:.3f} ms/step ({rec['tokens_per_s']:.0f} tokens/s), "
              f"first step {rec['first_step_s']:.1f} s, max allocated "
              f"{rec.get('max_memory_allocated_mib')} MiB, loss {rec['loss_first']:.4f} -> {rec['loss_last']:.4f}",
              file=sys.stderr)
    if a.json:
        print(json.dumps(rec), flush=True)
    return rc


def run(a, rec):
    t_setup = time.perf_counter()
    import torch
    rec["torch"] = torch.__version__
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    if a.T > a.ctx:
        raise ValueError(f"T={a.T} > ctx={a.ctx}")
    if a.d % a.heads:
        raise ValueError(f"d={a.d} is not a multiple of heads={a.heads}")
    torch.manual_seed(a.seed)
    # f32 matmuls, if any were left outside autocast, on TF32 (nanoGPT's setting)
    torch.set_float32_matmul_precision("high")
    vp = max(a.vocab, a.pad_vocab)
    rec["padded_vocab"] = vp
    rec["device"] = a.device
    rec["device_name"] = torch.cuda.get_device_name(a.device) if cuda else "cpu"
    model = build_model(a, vp)
    params = list(model.parameters())
    rec["params"] = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
        rec["optimizer"] = "fused"
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)
        rec["optimizer"] = "foreach"
    fwd = model if a.mode == "eager" else torch.compile(model, mode=None if a.mode == "default" else a.mode)
    mark = a.mode in ("reduce-overhead", "max-autotune") and hasattr(torch.compiler, "cudagraph_mark_step_begin")
    dev_type = "cuda" if cuda else "cpu"
    data = batches(a, a.warmup + a.steps, a.vocab)

    def step(ids, tgt):
        if mark:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = fwd(ids, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    rec["setup_s"] = time.perf_counter() - t_setup
    ms, losses = [], []
    for i, (ids, tgt) in enumerate(data):
        t0 = time.perf_counter()
        if cuda:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
            loss = step(ids, tgt)
            ev1.record()
            ev1.synchronize()
            dt = ev0.elapsed_time(ev1)
        else:
            loss = step(ids, tgt)
            dt = (time.perf_counter() - t0) * 1e3
        losses.append(float(loss.detach().item()))
        if i == 0:
            rec["first_step_s"] = time.perf_counter() - t0
        if i >= a.warmup:
            ms.append(dt)
    if not all(math.isfinite(x) for x in losses):
        raise FloatingPointError(f"non-finite loss: {losses}")
    med = statistics.median(ms)
    rec.update(median_ms=med, mean_ms=statistics.fmean(ms), min_ms=min(ms), max_ms=max(ms),
               tokens_per_s=a.B * a.T / med * 1e3, loss_first=losses[0], loss_last=losses[-1])
    if cuda:
        rec["max_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated(a.device) / 2**20, 1)
        rec["max_memory_reserved_mib"] = round(torch.cuda.max_memory_reserved(a.device) / 2**20, 1)
    else:
        rec["max_memory_allocated_mib"] = rec["max_memory_reserved_mib"] = None


if __name__ == "__main__":
    sys.exit(main())
