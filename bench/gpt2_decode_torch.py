"""GPT-2 decoding in PyTorch with a static kv cache: the peer of nnc's
generate_gpt2 (issue 16 part 4's speed goal).

A plain PyTorch GPT-2 (Hugging Face's parameter layout, random weights of
the same shapes) whose decode step writes the new key and value at the
current position of a preallocated cache [layers, B, heads, ctx, 64] and
attends over every cache row with a mask, so that every step has the same
shapes: what transformers' StaticCache does, and what lets
torch.compile(mode="reduce-overhead") replay one CUDA graph a step. The
prompt is prefilled eagerly; the decode steps are timed with CUDA events,
median over the steps, in eager mode and under each torch.compile MODE.
Without a GPU it runs in f32 on the CPU, timed by the host clock: the peer
of the C SIMD generate_gpt2 (--threads as nnc's).

    python3 bench/gpt2_decode_torch.py --batch 1 --prompt 512 --steps 64 --modes eager,reduce-overhead
Prints one JSON line per mode: {"mode", "batch", "prompt", "decode_ms"}.
    python3 bench/gpt2_decode_torch.py --copy-bw    # {"copy_GBps"}: the floor's bandwidth
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class GPT2:
    def __init__(self, layers, d, heads, vocab, ctx, batch, dtype, dev):
        g = torch.Generator(device="cpu").manual_seed(0)

        def w(*shape, scale):
            return (torch.rand(*shape, generator=g) * 2 - 1).mul_(scale).to(dev, dtype)

        s = 1 / math.sqrt(d)
        self.L, self.d, self.H, self.hd = layers, d, heads, d // heads
        self.wte, self.wpe = w(vocab, d, scale=s), w(ctx, d, scale=s)
        self.blocks = [dict(ln1=(torch.ones(d, device=dev, dtype=dtype), torch.zeros(d, device=dev, dtype=dtype)),
                            attn_w=w(d, 3 * d, scale=s), attn_b=w(3 * d, scale=s),
                            proj_w=w(d, d, scale=s), proj_b=w(d, scale=s),
                            ln2=(torch.ones(d, device=dev, dtype=dtype), torch.zeros(d, device=dev, dtype=dtype)),
                            fc_w=w(d, 4 * d, scale=s), fc_b=w(4 * d, scale=s),
                            fc2_w=w(4 * d, d, scale=1 / math.sqrt(4 * d)), fc2_b=w(d, scale=s))
                       for _ in range(layers)]
        self.lnf = (torch.ones(d, device=dev, dtype=dtype), torch.zeros(d, device=dev, dtype=dtype))
        self.k = torch.zeros(layers, batch, heads, ctx, self.hd, device=dev, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        # the caches keep one address, so the CUDA graphs of reduce-overhead
        # may write them in place (transformers' StaticCache does the same)
        if hasattr(torch, "_dynamo"):
            torch._dynamo.mark_static_address(self.k)
            torch._dynamo.mark_static_address(self.v)
        self.ctx = ctx

    def forward(self, ids, pos):
        """ids [B, T] at positions pos [T] (a tensor): writes the cache rows pos and
        attends over every row, those after a query's position masked."""
        B, T = ids.shape
        x = self.wte[ids] + self.wpe[pos]
        rows = torch.arange(self.ctx, device=ids.device)
        mask = rows[None, :] <= pos[:, None]   # [T, ctx]
        for i, p in enumerate(self.blocks):
            h = F.layer_norm(x, (self.d,), *p["ln1"])
            q, k, v = (h @ p["attn_w"] + p["attn_b"]).split(self.d, dim=-1)
            q, k, v = (t.view(B, T, self.H, self.hd).transpose(1, 2) for t in (q, k, v))
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(q, self.k[i], self.v[i], attn_mask=mask)
            x = x + y.transpose(1, 2).reshape(B, T, self.d) @ p["proj_w"] + p["proj_b"]
            h = F.layer_norm(x, (self.d,), *p["ln2"])
            x = x + F.gelu(h @ p["fc_w"] + p["fc_b"], approximate="tanh") @ p["fc2_w"] + p["fc2_b"]
        x = F.layer_norm(x[:, -1], (self.d,), *self.lnf)
        return x @ self.wte.t()


def copy_rate(nbytes=1 << 30, reps=20):
    """Bytes read + written a second by a device-to-device copy of nbytes,
    the median of reps copies timed with CUDA events."""
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    times = []
    for i in range(reps + 3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        y.copy_(x)
        e1.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(e0.elapsed_time(e1) / 1e3)
    times.sort()
    return 2 * nbytes / times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--modes", default="eager,reduce-overhead")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    ap.add_argument("--copy-bw", action="store_true",
                    help="print the device-to-device copy rate (the decode floor's bandwidth) and stop")
    a = ap.parse_args()
    if a.copy_bw:
        print(json.dumps({"copy_GBps": round(copy_rate() / 1e9, 1)}), flush=True)
        return
    dev = "cuda" if torch.cuda.is_available() else "cpu"   # cpu: f32, timed by the host clock
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    ctx = a.prompt + a.steps
    m = GPT2(a.layers, 768, 12, 50257, ctx, a.batch, torch.bfloat16 if dev == "cuda" else torch.float32, dev)
    ids = torch.randint(0, 50257, (a.batch, a.prompt), device=dev)
    for mode in a.modes.split(","):
        step = m.forward if mode == "eager" else torch.compile(m.forward, mode=mode, fullgraph=True)
        with torch.no_grad():
            m.forward(ids, torch.arange(a.prompt, device=dev))   # prefill, eager
            tok = torch.zeros(a.batch, 1, dtype=torch.long, device=dev)
            # warm-up: compilation and graph capture on positions that the timed steps rewrite
            for s in range(3):
                step(tok, torch.tensor([a.prompt + s], device=dev))
            times = []
            for s in range(a.steps):
                pos = torch.tensor([a.prompt + s], device=dev)
                if dev == "cpu":
                    t0 = time.perf_counter()
                    tok = step(tok, pos).argmax(-1, keepdim=True)
                    times.append((time.perf_counter() - t0) * 1e3)
                    continue
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                logits = step(tok, pos)
                tok = logits.argmax(-1, keepdim=True)
                e1.record()
                torch.cuda.synchronize()
                times.append(e0.elapsed_time(e1))
        times.sort()
        print(json.dumps({"mode": mode, "batch": a.batch, "prompt": a.prompt,
                          "decode_ms": round(times[len(times) // 2], 4)}), flush=True)


if __name__ == "__main__":
    main()
