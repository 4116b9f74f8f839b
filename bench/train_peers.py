#!/usr/bin/env python3
"""bench/train_peers.py: the PyTorch side of bench/train_compare.sh (training on the CPU).

For one model it writes, under --out,
  <model>_init.safetensors   the initial weights under nnc's names and layouts
                             (weights_manifest.json of an `nnc --train` folder)
  gpt2: gpt2_train.bin       tokens in llm.c's .bin format (256 int32 header:
                             20240520, 1, count; then uint16 tokens)
  digits: digits_train.safetensors, digits_test.safetensors (bench/digits_data.py)
then trains from those weights on exactly the micro-batches train_<model>
takes without --shuffle (or with it, for digits: the same splitmix64
Fisher-Yates shuffle as nnc's support/nnc_train_data.c), with AdamW (betas,
eps, weight decay only on weights of rank >= 2; rank-1 weights, biases and
norm weights, in a no-decay group: nnc's default) or SGD, at a constant
learning rate (or train_<model>'s warm-up and cosine schedule), with
train_<model>'s micro-batch accumulation and clipping, and prints one JSON object per line:
  {"model", "impl", "step", "loss", "grad_norm", "lr", "ms"}   an update (1-based)
  {"model", "impl", "step", "val_loss", "val_accuracy"}  digits, --eval-every
  {"model", "impl", "summary": true, "median_ms", ...}   per implementation
"loss" is the mean loss of the update's micro-batches, before the update, and
"grad_norm" the global norm of their mean gradient before clipping (as
train_<model> prints them). Timing: each update (micro-batches, forward,
backward, norm, optimizer) under time.perf_counter; median_ms is the median
over the updates after the first --skip.

Implementations (--impl, comma-separated):
  torch-eager    float32, eager
  torch-compile  float32, forward+backward through torch.compile (inductor,
                 --compile-mode: default, reduce-overhead or max-autotune)
                 and the optimizer step compiled too; falls back to an eager
                 optimizer when that does not compile, recorded in the summary
  torch-f64      the same steps in float64 (weights, data and optimizer state
                 widened from the same f32 values): a reference for how far
                 float32 rounding alone moves the losses

Models:
  gpt2    models/gpt2.lua: token + position embeddings, pre-norm blocks
          (layernorm eps 1e-5, Conv1D weights stored [in, out], causal
          SDPA with scale 1/sqrt(d/heads), gelu tanh), ln_f, the LM head tied
          to wte, mean cross-entropy over B*T tokens.
          Initial weights: normal(0, 0.02) for matrices, biases 0, norm
          weights 1 (GPT-2's own init), from torch.manual_seed(--seed).
  digits  models/digits.lua: fc1 (64 -> hidden, relu), fc2 (-> 10); PyTorch's
          default nn.Linear init from torch.manual_seed(--seed).

Usage:
  python3 bench/train_peers.py gpt2 --out DIR [--layers 2 --d 48 --heads 2
      --vocab 101 --ctx 33 --B 3 --T 17 --tokens N] [common]
  python3 bench/train_peers.py digits --out DIR [--hidden 64 --B 32] [common]
  common: --steps 20 --lr 1e-3 --wd 0.01 --beta1 0.9 --beta2 0.999 --eps 1e-8
          [--sgd] [--accumulate K] [--clip X] [--warmup N --decay-steps N
          --min-lr-ratio R] --threads N --seed 0 --skip 3 --impl torch-eager[,...]
          [--eval-every N] [--shuffle] [--shuffle-seed 1] [--prepare-only]
          [--no-write]
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

MASK64 = (1 << 64) - 1


def emit(rec):
    print(json.dumps(rec), flush=True)


# ---------------------------------------------------------------- data


def write_tokens(path, tokens):
    """llm.c's .bin: 256 int32 (magic 20240520, version 1, count), uint16 tokens."""
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def make_tokens(n, vocab, seed):
    """A learnable sequence: each token is followed by one of 3 successors
    drawn once per token (a random sparse bigram chain), so the loss can fall
    below log(vocab) and toward log(3)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    succ = rng.integers(0, vocab, size=(vocab, 3))
    toks = [int(rng.integers(0, vocab))]
    pick = rng.integers(0, 3, size=n)
    for k in range(1, n):
        toks.append(int(succ[toks[-1], pick[k]]))
    return toks


class TokenBatches:
    """train_<model>'s micro-batch i of a token file: p_0 = 0, p_{i+1} = p_i + B*T,
    back to 0 when p + B*T + 1 exceeds the count; ids = tok[p .. p+B*T),
    targets = tok[p+1 .. p+B*T], row r being the r-th T of them."""

    def __init__(self, tokens, B, T):
        import torch
        self.tok = torch.tensor(tokens, dtype=torch.long)
        self.B, self.T = B, T
        self.n = len(tokens)
        if self.n < B * T + 1:
            raise ValueError(f"{self.n} tokens; a batch needs {B * T + 1}")

    def start(self, i):
        span, p = self.B * self.T, 0
        for _ in range(i):
            p += span
            if p + span + 1 > self.n:
                p = 0
        return p

    def __call__(self, i):
        p, span = self.start(i), self.B * self.T
        ids = self.tok[p:p + span].view(self.B, self.T)
        tgt = self.tok[p + 1:p + span + 1].view(self.B, self.T)
        return ids, tgt


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def nnc_permutation(n, seed, epoch):
    """support/nnc_train_data.c's sample_at: Fisher-Yates from splitmix64
    seeded with seed ^ (0xD1B54A32D192ED03 * (epoch + 1))."""
    s = (seed ^ ((0xD1B54A32D192ED03 * (epoch + 1)) & MASK64)) & MASK64
    perm = list(range(n))
    for k in range(n - 1, 0, -1):
        s, r = splitmix64(s)
        j = r % (k + 1)
        perm[k], perm[j] = perm[j], perm[k]
    return perm


class SampleBatches:
    """train_<model>'s micro-batch i of a sample file: nb = N // B batches a
    pass (the last partial one dropped), pass e = i // nb, batch j = i % nb,
    samples j*B .. j*B+B-1 in file order (or of pass e's shuffle)."""

    def __init__(self, x, y, B, shuffle=False, seed=1):
        import torch
        self.x, self.y, self.B = torch.as_tensor(x), torch.as_tensor(y).long(), B
        self.n = len(self.y)
        self.nb = self.n // B
        if self.nb < 1:
            raise ValueError(f"{self.n} samples; a batch needs {B}")
        self.shuffle, self.seed = shuffle, seed
        self.perm_epoch, self.perm = -1, None

    def __call__(self, i):
        import torch
        e, j = divmod(i, self.nb)
        idx = list(range(j * self.B, j * self.B + self.B))
        if self.shuffle:
            if self.perm_epoch != e:
                self.perm = nnc_permutation(self.n, self.seed, e)
                self.perm_epoch = e
            idx = [self.perm[k] for k in idx]
        idx = torch.tensor(idx, dtype=torch.long)
        return self.x[idx], self.y[idx]


# ---------------------------------------------------------------- models


def gpt2_init(a):
    """nnc's names and layouts (Conv1D weights [in, out]); GPT-2's init."""
    import torch
    g = torch.Generator().manual_seed(a.seed)
    d, w = a.d, {}

    def normal(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    w["wte.weight"] = normal(a.vocab, d)
    w["wpe.weight"] = normal(a.ctx, d)
    for i in range(a.layers):
        p = f"h.{i}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = torch.ones(d), torch.zeros(d)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = normal(d, 3 * d), torch.zeros(3 * d)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = normal(d, d), torch.zeros(d)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = torch.ones(d), torch.zeros(d)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = normal(d, 4 * d), torch.zeros(4 * d)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = normal(4 * d, d), torch.zeros(d)
    w["ln_f.weight"], w["ln_f.bias"] = torch.ones(d), torch.zeros(d)
    return w


def gpt2_loss_fn(a):
    import torch.nn.functional as F
    d, H, eps = a.d, a.heads, 1e-5

    def conv1d(x, w, b):       # GPT-2's Conv1D: x @ W[in, out] + b
        return x @ w + b

    def loss_fn(w, ids, targets):
        B, T = ids.shape
        x = F.embedding(ids, w["wte.weight"]) + w["wpe.weight"][:T]
        for i in range(a.layers):
            p = f"h.{i}."
            h = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
            q, k, v = conv1d(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]).split(d, dim=-1)

            def heads(t):
                return t.view(B, T, H, d // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
            y = y.transpose(1, 2).reshape(B, T, d)
            x = x + conv1d(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
            h = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
            h = F.gelu(conv1d(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]), approximate="tanh")
            x = x + conv1d(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
        x = F.layer_norm(x, (d,), w["ln_f.weight"], w["ln_f.bias"], eps)
        logits = x @ w["wte.weight"].t()          # tied head
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T)), None

    return loss_fn


def digits_init(a):
    """PyTorch's default nn.Linear init (kaiming-uniform weights, uniform
    biases), out of torch.manual_seed(seed)."""
    import torch
    import torch.nn as nn
    torch.manual_seed(a.seed)
    fc1, fc2 = nn.Linear(64, a.hidden), nn.Linear(a.hidden, 10)
    return {"fc1.weight": fc1.weight.detach().clone(), "fc1.bias": fc1.bias.detach().clone(),
            "fc2.weight": fc2.weight.detach().clone(), "fc2.bias": fc2.bias.detach().clone()}


def digits_loss_fn(a):
    import torch.nn.functional as F

    def loss_fn(w, x, y):
        h = F.relu(F.linear(x, w["fc1.weight"], w["fc1.bias"]))
        logits = F.linear(h, w["fc2.weight"], w["fc2.bias"])
        return F.cross_entropy(logits, y), logits

    return loss_fn


# ---------------------------------------------------------------- training


def make_optimizer(a, params):
    import torch
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    if a.sgd:
        # nnc's SGD: m = beta1*m + g; w -= lr*(m + wd*w): decoupled decay, so
        # plain SGD with momentum (no dampening, no decay of its own: it
        # would add wd*w to the gradient) and run_impl's decay step.
        return torch.optim.SGD(list(params.values()), lr=a.lr, momentum=a.beta1, weight_decay=0.0)
    groups = [{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)


def lr_at(a, t):
    """The learning rate of update t (1-based): train_<model>'s schedule, a
    linear warm-up over --warmup updates, then a cosine decay over
    --decay-steps updates to lr * --min-lr-ratio (constant without them)."""
    if a.warmup > 0 and t <= a.warmup:
        return a.lr * t / a.warmup
    if a.decay_steps <= 0:
        return a.lr
    p = min(1.0, (t - a.warmup) / a.decay_steps)
    return a.lr * (a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def run_impl(a, impl, init, loss_fn, batch, evaluate):
    """One implementation over a.steps updates. An update: --accumulate
    micro-batches (step*K + k), their gradients summed; the global norm of
    their mean (reported as grad_norm); the mean scaled to norm <= --clip;
    the scheduled learning rate; the optimizer. As train_<model> does."""
    import torch
    dtype = torch.float64 if impl == "torch-f64" else torch.float32
    params = {k: v.to(dtype).clone().requires_grad_(True) for k, v in init.items()}
    plist = list(params.values())
    opt = make_optimizer(a, params)
    decay_params = [p for p in plist if p.dim() >= 2]
    fn, step_fn, summary = loss_fn, opt.step, {}
    if impl == "torch-compile":
        fn = torch.compile(loss_fn, mode=a.compile_mode)
        if a.warmup or a.decay_steps:
            summary["optimizer"] = "eager (a learning-rate schedule: a compiled step would recompile)"
        else:
            step_fn = torch.compile(opt.step, mode=a.compile_mode)
            summary["optimizer"] = "compiled"
    K = a.accumulate

    def one_step(s):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(K):
            xb, yb = batch(s * K + k)
            if xb.is_floating_point():
                xb = xb.to(dtype)
            loss, _ = fn(params, xb, yb)
            loss.backward()
            total += loss.item()
        with torch.no_grad():
            grads = [p.grad for p in plist]
            norm = math.sqrt(sum(float(torch.sum(g.double() * g.double())) for g in grads)) / K
            scale = (a.clip / norm if a.clip > 0 and norm > a.clip else 1.0) / K
            if scale != 1.0:
                for g in grads:
                    g.mul_(scale)
            lr = lr_at(a, s + 1)
            for grp in opt.param_groups:
                grp["lr"] = lr
            if a.sgd:
                for p in decay_params:
                    p.mul_(1 - lr * a.wd)
        step_fn()
        return total / K, norm, lr

    times = []
    t_all = time.perf_counter()
    for s in range(a.steps):
        t0 = time.perf_counter()
        try:
            loss, norm, lr = one_step(s)
        except Exception as e:  # noqa: BLE001
            if impl == "torch-compile" and s == 0 and step_fn is not opt.step:
                # the compiled optimizer failed at its first call, before any
                # update: the eager one from the same state
                summary["optimizer"] = f"eager ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
                step_fn = opt.step
                loss, norm, lr = one_step(s)
            else:
                raise
        ms = (time.perf_counter() - t0) * 1e3
        times.append(ms)
        emit({"model": a.model, "impl": impl, "step": s + 1, "loss": loss, "grad_norm": norm, "lr": lr,
              "ms": round(ms, 4)})
        done = s + 1
        if evaluate and a.eval_every > 0 and done % a.eval_every == 0 and done < a.steps:
            emit(dict(evaluate(params, fn, dtype), model=a.model, impl=impl, step=done))
    total_s = time.perf_counter() - t_all
    if evaluate:
        emit(dict(evaluate(params, fn, dtype), model=a.model, impl=impl, step=a.steps))
    timed = times[a.skip:] if len(times) > a.skip else times
    summary.update(model=a.model, impl=impl, summary=True, compile_mode=a.compile_mode, steps=a.steps, skip=a.skip,
                   median_ms=statistics.median(timed), min_ms=min(timed), first_ms=times[0],
                   total_s=total_s, threads=torch.get_num_threads(), torch=torch.__version__)
    emit(summary)


def digits_evaluator(a, xte, yte):
    import torch

    def evaluate(params, fn, dtype):
        with torch.no_grad():
            loss, logits = fn(params, torch.as_tensor(xte).to(dtype), torch.as_tensor(yte).long())
            acc = (logits.argmax(-1) == torch.as_tensor(yte).long()).double().mean().item()
        return {"val_loss": loss.item(), "val_accuracy": acc}

    return evaluate


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=["gpt2", "digits"])
    ap.add_argument("--out", required=True, help="folder for the weights and data files")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=48)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=101)
    ap.add_argument("--ctx", type=int, default=33)
    ap.add_argument("--hidden", type=int, default=64, help="digits: fc1's width")
    ap.add_argument("--B", type=int, default=0, help="batch (default: 3 gpt2, 32 digits)")
    ap.add_argument("--T", type=int, default=17, help="gpt2: tokens per row")
    ap.add_argument("--tokens", type=int, default=0,
                    help="gpt2: tokens in the file (default 7*B*T+B*T//2: the batches wrap after 7)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--sgd", action="store_true", help="SGD with momentum beta1 (nnc's --sgd)")
    ap.add_argument("--accumulate", type=int, default=1, help="micro-batches per update")
    ap.add_argument("--clip", type=float, default=0.0, help="largest global gradient norm (0: none)")
    ap.add_argument("--warmup", type=int, default=0, help="linear learning-rate warm-up updates")
    ap.add_argument("--decay-steps", type=int, default=0, help="cosine decay updates after the warm-up")
    ap.add_argument("--min-lr-ratio", type=float, default=0.0, help="the decay's end, a fraction of --lr")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="weights and tokens")
    ap.add_argument("--skip", type=int, default=3, help="first steps left out of median_ms")
    ap.add_argument("--impl", default="torch-eager", help="comma-separated: torch-eager,torch-compile,torch-f64")
    ap.add_argument("--compile-mode", default="default",
                    help="torch-compile's mode: default, reduce-overhead, max-autotune")
    ap.add_argument("--eval-every", type=int, default=0, help="digits: test loss and accuracy every N steps")
    ap.add_argument("--shuffle", action="store_true", help="digits: nnc's --shuffle order")
    ap.add_argument("--shuffle-seed", type=int, default=1, help="digits: nnc's --seed for --shuffle")
    ap.add_argument("--prepare-only", action="store_true", help="write the files, do not train")
    ap.add_argument("--no-write", action="store_true", help="reuse the files already under --out")
    a = ap.parse_args()
    if not a.B:
        a.B = 3 if a.model == "gpt2" else 32
    if a.model == "gpt2" and a.d % a.heads:
        ap.error(f"--heads {a.heads} must divide --d {a.d}")

    import torch
    from safetensors.torch import load_file, save_file
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    wpath = os.path.join(a.out, f"{a.model}_init.safetensors")
    evaluate = None
    if a.model == "gpt2":
        if a.T > a.ctx:
            ap.error(f"--T {a.T} exceeds --ctx {a.ctx}")
        tpath = os.path.join(a.out, "gpt2_train.bin")
        if a.no_write:
            init = load_file(wpath)
            with open(tpath, "rb") as f:
                n = struct.unpack("<256i", f.read(1024))[2]
                tokens = list(struct.unpack(f"<{n}H", f.read(2 * n)))
        else:
            init = gpt2_init(a)
            n = a.tokens or 7 * a.B * a.T + a.B * a.T // 2
            tokens = make_tokens(n, a.vocab, a.seed)
            write_tokens(tpath, tokens)
        batch, loss_fn = TokenBatches(tokens, a.B, a.T), gpt2_loss_fn(a)
        files = {"weights": wpath, "data": tpath, "tokens": len(tokens)}
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import digits_data
        if not a.no_write:
            digits_data.write(a.out, seed=0)
        tr = load_file(os.path.join(a.out, "digits_train.safetensors"))
        te = load_file(os.path.join(a.out, "digits_test.safetensors"))
        init = load_file(wpath) if a.no_write else digits_init(a)
        batch = SampleBatches(tr["x"], tr["y"], a.B, a.shuffle, a.shuffle_seed)
        loss_fn, evaluate = digits_loss_fn(a), digits_evaluator(a, te["x"], te["y"])
        files = {"weights": wpath, "data": os.path.join(a.out, "digits_train.safetensors"),
                 "val": os.path.join(a.out, "digits_test.safetensors"), "samples": batch.n}
    if not a.no_write:
        save_file({k: v.contiguous() for k, v in init.items()}, wpath)
    emit(dict(files, model=a.model, files=True))
    if a.prepare_only:
        return 0
    for impl in a.impl.split(","):
        if impl not in ("torch-eager", "torch-compile", "torch-f64"):
            ap.error(f"--impl {impl}: expected torch-eager, torch-compile or torch-f64")
        try:
            run_impl(a, impl, init, loss_fn, batch, evaluate)
        except Exception as e:  # noqa: BLE001  report it, keep going
            emit({"model": a.model, "impl": impl, "summary": True,
                  "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
