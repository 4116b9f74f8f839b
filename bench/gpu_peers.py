#!/usr/bin/env python3
"""bench/gpu_peers.py: the PyTorch peers (eager and torch.compile) of nnc's CUDA models.

Two commands, each printing JSON lines on stdout:

  python3 bench/gpu_peers.py model --model gpt2|bert|mlp --weights W.safetensors
      --precision f32|tf32|bf16 --dims B=8,T=1024 [--runs 50] [--warmup 10]
      [--modes default,reduce-overhead,max-autotune] [--partial]
      [--heads 12] [--check OUT.safetensors] [--device cuda|cpu]

    Builds the model of models/<model>.lua in PyTorch (parameter names, layouts,
    eps, gelu form and outputs as the Lua file has them; sizes read from the
    weights, heads from --heads), loads the weights nnc wrote with
    `nnc weights models/<model>.lua -o W.safetensors` (every parameter must be
    there with its shape; extra tensors are ignored, as nnc's loader ignores
    them), and times one forward under torch.no_grad(), eager and then
    torch.compile(fullgraph=True) in each of --modes (default all three:
    default, reduce-overhead, max-autotune), each mode after
    torch._dynamo.reset() and in its own try, so a mode that fails is
    reported and the others still run. Inputs are random: token ids
    uniform in the vocabulary, BERT's token types 0 and attention mask all ones,
    MLP images uniform in [0, 1); one input set (the weights are larger than
    L2). BERT passes its mask to SDPA as a boolean key mask even when it is all
    ones, since nnc's model computes it too (Hugging Face drops an all-ones
    mask, which lets SDPA take the flash kernel). One line:
      {"model", "precision", "dims", "modes", "eager_ms",
       "compile_ms": {mode: ms}, "best_compile_ms", "best_mode",
       "compile_s": {mode: s}, "compile_max_abs_diff": {mode: diff},
       "tokens_per_s_eager", "tokens_per_s_compile", "modes_done", "complete",
       "device", "torch", "runs"}   (+ "compile_errors": {mode: why})
    compile_ms: each mode's median (null where the mode failed);
    best_compile_ms and best_mode: the fastest mode that ran, the peer nnc is
    compared with (null when none ran). compile_s: wall seconds of each mode's
    first call, compilation included (inductor's on-disk caches, warm from an
    earlier mode or process, shorten it). tokens = B*T for gpt2 and bert, B
    (images) for mlp; tokens_per_s_compile is at best_compile_ms.
    compile_max_abs_diff: max |compiled - eager| over the outputs of the first
    input set, per mode (a compiled peer that computes something else shows
    here). compile_errors: why a mode failed, its first line. Before issue 17,
    compile_ms, compile_max_abs_diff and tokens_per_s_compile were single
    numbers of the default mode, and "compile_error" a string: today's
    compile_ms["default"] and compile_max_abs_diff["default"] are those.
    --partial also prints the record after eager and after each mode
    ("complete": false, modes_done the modes tried so far), so a run stopped
    during a slow mode (max-autotune on a large model) still leaves the
    finished ones; the last line is "complete": true only when every mode of
    --modes was tried.

    --check OUT.safetensors also runs the eager model once on seeded inputs
    and writes those inputs and the outputs, named as nnc's C API names them
    (gpt2: ids -> logits; bert: input_ids, token_type_ids, attention_mask ->
    last_hidden_state, sentence_embedding; mlp: image -> logits). Inputs are
    stored as the model takes them (i32 ids, f32 images), outputs as f32. In
    the check inputs BERT's token types are random 0/1 and sequence b pads
    its last b*T/(2B) tokens, so the masks and the pooling are exercised.
    --runs 0 skips the timing (the line then has null times).

  python3 bench/gpu_peers.py kernels [--precision bf16] [--runs 50] [--device cuda]
      [--modes default,reduce-overhead,max-autotune]
    Times the issue's kernel cases in eager and torch.compile (each of
    --modes, as for model), one line each:
      {"case", "precision", "eager_us", "compile_us": {mode: us},
       "best_compile_us", "best_mode", "compile_s": {mode: s}, "bytes", "flops",
       "sets", "compile_max_abs_diff": {mode: diff}, "device", "torch"}
      (+ "compile_errors": {mode: why}; sets: input buffer sets rotated;
      before issue 17 compile_us and compile_max_abs_diff were the default
      mode's single numbers)
      layernorm            32768x768, eps 1e-5
      softmax              32768x768, last axis
      layernorm_linear_gelu 8192x768 -> 3072: layernorm, x @ W + b with W
                           [in, out] (GPT-2's Conv1D), gelu tanh
      sdpa_causal          B=8 H=12 T=1024 D=64
      sdpa                 B=32 H=12 T=128 D=32, no mask
    bytes: what the kernel must read and write once (inputs, parameters,
    outputs). flops: 2*M*K*N for the GEMM plus the row work; attention
    4*B*H*T*T*D, halved for the causal case (only the lower triangle is
    needed); layernorm 8 and softmax 5 per element, gelu tanh 10.

torch.compile's modes: reduce-overhead and max-autotune replay CUDA graphs
(cudagraph trees); before each of their calls the script calls
torch.compiler.cudagraph_mark_step_begin(), as a caller that drops the
previous outputs would, and compares the outputs with eager's before the
next call. Their graphs copy each input that is not a parameter into the
graph's own buffers on every call; that copy is in their time, as it is for
a caller with fresh inputs. Every mode, and eager, is timed over the same
input sets in the same rotation.

Timing (the project's method): CUDA events around each call, the calls queued
back to back behind a short sleep kernel so the GPU, not Python, sets the
pace where it can; at least 10 warm-up calls first (torch.compile's compilation
happens in the first of them); the median over --runs calls. Inputs rotate
over enough buffer sets that one set's turn comes after more than twice the
L2 (50 MB) of other data, so memory-bound kernels read DRAM. On --device cpu
(for testing the script without a GPU) time.perf_counter replaces the events.

Precision: f32 turns TF32 off (torch.backends.cuda.matmul.allow_tf32 and
cudnn.allow_tf32 False), tf32 turns both on, bf16 casts the model and the
float inputs to bfloat16 (token ids and the mask stay integers).

Only torch and safetensors are needed; nothing is downloaded.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L2_BYTES = 50 * 1024 * 1024
MIN_WARMUP = 10
BATCH = 20  # calls per event batch queued behind one sleep
SLEEP_CYCLES = 4_000_000  # about 2 ms on an H100: lets the CPU get ahead


# --- the models ------------------------------------------------------------
# Attribute names follow Hugging Face's, so state_dict keys are the parameter
# names of models/*.lua and load_state_dict(strict=True) checks them all.

class Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored [in, out], as models/gpt2.lua's
    layout = "in_out" and Hugging Face's Conv1D (addmm on the 2-D view)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class GPT2Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)

        def split_heads(t):
            return t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(split_heads(q), split_heads(k), split_heads(v),
                                           is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Conv1D(d, 4 * d)
        self.c_proj = Conv1D(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, d, heads, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.attn = GPT2Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.mlp = GPT2MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """models/gpt2.lua: pre-norm blocks, eps 1e-5, causal attention, gelu tanh,
    LM head tied to wte (no bias). Output: logits [B, T, vocab]."""
    inputs = ("ids",)
    outputs = ("logits",)

    def __init__(self, layers, d, heads, vocab, ctx, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList(GPT2Block(d, heads, eps) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=eps)

    @staticmethod
    def from_weights(w, heads):
        vocab, d = w["wte.weight"].shape
        check_heads(heads, d)
        layers = count_layers(w, "h.", ".ln_1.weight")
        return GPT2(layers, d, heads, vocab, w["wpe.weight"].shape[0])

    def forward(self, ids):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        return (F.linear(self.ln_f(x), self.wte.weight),)


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, positions, type_vocab, eps):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, input_ids, token_type_ids):
        T = input_ids.shape[1]
        x = (self.word_embeddings(input_ids) + self.position_embeddings.weight[:T]
             + self.token_type_embeddings(token_type_ids))
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, x, keep):
        B, T, C = x.shape

        def split_heads(t):
            return t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(split_heads(self.query(x)), split_heads(self.key(x)),
                                           split_heads(self.value(x)), attn_mask=keep)
        return y.transpose(1, 2).reshape(B, T, C)


class BertSelfOutput(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)


class BertAttention(nn.Module):
    def __init__(self, hidden, heads, eps):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertSelfOutput(hidden, eps)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)


class BertOutput(nn.Module):
    def __init__(self, intermediate, hidden, eps):
        super().__init__()
        self.dense = nn.Linear(intermediate, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, eps):
        super().__init__()
        self.attention = BertAttention(hidden, heads, eps)
        self.intermediate = BertIntermediate(hidden, intermediate)
        self.output = BertOutput(intermediate, hidden, eps)

    def forward(self, x, keep):
        a = self.attention.output.dense(self.attention.self(x, keep))
        x = self.attention.output.LayerNorm(x + a)
        h = F.gelu(self.intermediate.dense(x))  # erf form, the DSL's default
        return self.output.LayerNorm(x + self.output.dense(h))


class BertEncoder(nn.Module):
    def __init__(self, layers, *args):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(*args) for _ in range(layers))


class Bert(nn.Module):
    """models/bert.lua: post-norm layers, eps 1e-12, padded keys masked (-inf),
    gelu erf. Outputs: last_hidden_state [B, T, hidden] and
    sentence_embedding = sum(x * m, T) / sum(m, T) [B, hidden]."""
    inputs = ("input_ids", "token_type_ids", "attention_mask")
    outputs = ("last_hidden_state", "sentence_embedding")

    def __init__(self, layers, hidden, heads, intermediate, vocab, positions, type_vocab,
                 eps=1e-12):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, positions, type_vocab, eps)
        self.encoder = BertEncoder(layers, hidden, heads, intermediate, eps)

    @staticmethod
    def from_weights(w, heads):
        vocab, hidden = w["embeddings.word_embeddings.weight"].shape
        check_heads(heads, hidden)
        return Bert(count_layers(w, "encoder.layer.", ".output.LayerNorm.weight"), hidden, heads,
                    w["encoder.layer.0.intermediate.dense.weight"].shape[0], vocab,
                    w["embeddings.position_embeddings.weight"].shape[0],
                    w["embeddings.token_type_embeddings.weight"].shape[0])

    def forward(self, input_ids, token_type_ids, attention_mask):
        x = self.embeddings(input_ids, token_type_ids)
        keep = (attention_mask != 0)[:, None, None, :]  # [B, 1, 1, T], True = attend
        for layer in self.encoder.layer:
            x = layer(x, keep)
        m = attention_mask.to(x.dtype).unsqueeze(-1)
        return x, (x * m).sum(1) / m.sum(1)


class MLP(nn.Module):
    """models/mlp.lua: relu(fc1), relu(fc2), out. Output: logits [B, classes]."""
    inputs = ("image",)
    outputs = ("logits",)

    def __init__(self, pixels, hidden1, hidden2, classes):
        super().__init__()
        self.fc1 = nn.Linear(pixels, hidden1)
        self.fc2 = nn.Linear(hidden1, hidden2)
        self.out = nn.Linear(hidden2, classes)

    @staticmethod
    def from_weights(w, heads):
        h1, pixels = w["fc1.weight"].shape
        return MLP(pixels, h1, w["fc2.weight"].shape[0], w["out.weight"].shape[0])

    def forward(self, image):
        return (self.out(F.relu(self.fc2(F.relu(self.fc1(image))))),)


MODELS = {"gpt2": GPT2, "bert": Bert, "mlp": MLP}


def count_layers(w, prefix, suffix):
    n = 0
    while f"{prefix}{n}{suffix}" in w:
        n += 1
    if n == 0:
        raise SystemExit(f"weights have no {prefix}0{suffix}: not this model's file?")
    return n


def check_heads(heads, width):
    if heads < 1 or width % heads:
        raise SystemExit(f"--heads {heads} must divide the model width {width}")


def load_model(name, path, heads, device, dtype):
    from safetensors.torch import load_file
    w = load_file(path)
    cls = MODELS[name]
    try:
        with torch.device("meta"):
            model = cls.from_weights(w, heads)
        model = model.to_empty(device="cpu")
        # Extra tensors are ignored, as nnc's loader ignores them; a missing
        # one or another shape is an error.
        missing = model.load_state_dict(w, strict=False).missing_keys
    except KeyError as e:
        raise SystemExit(f"{path} does not fit models/{name}.lua: it has no tensor {e}")
    except RuntimeError as e:
        raise SystemExit(f"{path} does not fit models/{name}.lua: {e}")
    if missing:
        raise SystemExit(f"{path} does not fit models/{name}.lua: it has no tensor "
                         f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return model.to(device=device, dtype=dtype).eval()


def model_inputs(name, model, dims, device, dtype, gen, check):
    """The inputs of one call, as torch tensors on device (ids int64)."""
    B = dims["B"]
    if name == "mlp":
        pixels = model.fc1.weight.shape[1]
        return (torch.rand(B, pixels, generator=gen).to(device=device, dtype=dtype),)
    T = dims["T"]
    if name == "gpt2":
        vocab, ctx = model.wte.weight.shape[0], model.wpe.weight.shape[0]
        check_dim("T", T, ctx)
        return (torch.randint(0, vocab, (B, T), generator=gen).to(device),)
    emb = model.embeddings
    vocab, positions = emb.word_embeddings.weight.shape[0], emb.position_embeddings.weight.shape[0]
    check_dim("T", T, positions)
    ids = torch.randint(0, vocab, (B, T), generator=gen)
    mask = torch.ones(B, T, dtype=torch.long)
    if check:
        types = torch.randint(0, emb.token_type_embeddings.weight.shape[0], (B, T), generator=gen)
        for b in range(B):
            pad = b * T // (2 * B)
            if pad:
                mask[b, T - pad:] = 0
    else:
        types = torch.zeros(B, T, dtype=torch.long)
    return ids.to(device), types.to(device), mask.to(device)


def check_dim(name, value, most):
    if not 1 <= value <= most:
        raise SystemExit(f"{name}={value} is outside 1..{most} (the weights' table size)")


# --- timing ----------------------------------------------------------------

def sets_for(bytes_per_set):
    """Buffer sets so that reuse comes after more than twice the L2 of data."""
    return max(3, min(64, math.ceil(2 * L2_BYTES / max(1, bytes_per_set)) + 1))


def time_calls(fn, args, runs, warmup, device):
    """Median milliseconds of one call of fn(*args[i % len(args)])."""
    k = 0

    def call():
        nonlocal k
        out = fn(*args[k % len(args)])
        k += 1
        return out

    for _ in range(max(warmup, MIN_WARMUP)):
        call()
    if device == "cpu":
        t = []
        for _ in range(runs):
            t0 = time.perf_counter()
            call()
            t.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(t)
    torch.cuda.synchronize()
    t = []
    while len(t) < runs:
        n = min(BATCH, runs - len(t))
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(SLEEP_CYCLES)
        for start, end in ev:
            start.record()
            call()
            end.record()
        torch.cuda.synchronize()
        t += [start.elapsed_time(end) for start, end in ev]
    return statistics.median(t)


MODES = ("default", "reduce-overhead", "max-autotune")
# the modes whose compiled code replays CUDA graphs (cudagraph trees): each
# call is marked as a new step so the previous replay's outputs may be reused
GRAPH_MODES = ("reduce-overhead", "max-autotune")


def parse_modes(text):
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise SystemExit(f"--modes: expected a comma-separated list of {', '.join(MODES)}, "
                         f"found '{text}'")
    return list(dict.fromkeys(modes))


def error_text(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def sync(device):
    if device != "cpu":
        torch.cuda.synchronize()


def clone_outputs(y):
    if isinstance(y, torch.Tensor):
        return y.clone()
    return tuple(t.clone() for t in y)


def timed_peers(fn, args, runs, warmup, device, modes, report=None):
    """Eager, then torch.compile(fn, mode=m, fullgraph=True) for each mode m, each
    timed by time_calls over the same input sets in the same rotation. Returns
    a dict: eager_ms, and per mode (dicts keyed by mode) compile_ms, compile_s
    (wall seconds of the first call, compilation included), max_abs_diff
    (|compiled - eager| on the first input set) and errors (the modes that
    failed: why); modes_done lists the modes tried so far, in order. A mode
    that fails leaves null figures and the others still run. report(res), when
    given, is called after eager and after each mode."""
    res = {"eager_ms": time_calls(fn, args, runs, warmup, device),
           "compile_ms": {}, "compile_s": {}, "max_abs_diff": {}, "errors": {},
           "modes_done": []}
    ref = clone_outputs(fn(*args[0]))
    sync(device)
    if report:
        report(res)
    for mode in modes:
        ms = secs = diff = None
        torch._dynamo.reset()
        try:
            compiled = torch.compile(fn, mode=mode, fullgraph=True)
            if mode in GRAPH_MODES:
                def call(*x, c=compiled):
                    torch.compiler.cudagraph_mark_step_begin()
                    return c(*x)
            else:
                call = compiled
            t0 = time.perf_counter()
            call(*args[0])
            sync(device)
            secs = time.perf_counter() - t0
            ms = time_calls(call, args, runs, warmup, device)
            # compared at once: a graph replay's outputs live until the next call
            diff = max_abs_diff(call(*args[0]), ref)
            sync(device)
        except Exception as e:  # report it in the JSON, keep the other modes
            res["errors"][mode] = error_text(e)
            ms = diff = None
        finally:
            compiled = call = None
            torch._dynamo.reset()
            if device != "cpu":
                torch.cuda.empty_cache()
        res["compile_ms"][mode], res["compile_s"][mode] = ms, secs
        res["max_abs_diff"][mode] = diff
        res["modes_done"].append(mode)
        if report:
            report(res)
    return res


def best_mode(times):
    """(mode, time) of the fastest mode that ran, or (None, None)."""
    ok = {m: t for m, t in times.items() if t is not None}
    if not ok:
        return None, None
    m = min(ok, key=ok.get)
    return m, ok[m]


def max_abs_diff(a, b):
    """Largest |a - b| over a tensor or a tuple of them (f32 arithmetic)."""
    if isinstance(a, torch.Tensor):
        a, b = (a,), (b,)
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b))


def set_precision(precision):
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return torch.bfloat16 if precision == "bf16" else torch.float32


# --- commands --------------------------------------------------------------

def parse_dims(text):
    dims = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        if not eq or not value.strip().isdigit():
            raise SystemExit(f"--dims: expected NAME=N[,NAME=N], found '{part}'")
        dims[name.strip()] = int(value)
    return dims


def cmd_model(a):
    dtype = set_precision(a.precision)
    dims = parse_dims(a.dims)
    modes = parse_modes(a.modes)
    need = ("B",) if a.model == "mlp" else ("B", "T")
    if set(dims) != set(need):
        raise SystemExit(f"--dims for {a.model}: expected {','.join(need)}, found {a.dims}")
    check_dim("B", dims["B"], 1 << 30)
    model = load_model(a.model, a.weights, a.heads, a.device, dtype)
    gen = torch.Generator().manual_seed(a.seed)
    items = dims["B"] * dims.get("T", 1)
    base = {"model": a.model, "precision": a.precision, "dims": dims, "modes": modes}

    def record(res, complete):
        rec = dict(base)
        eager = res.get("eager_ms")
        mode, best = best_mode(res.get("compile_ms", {}))
        rec.update(eager_ms=eager,
                   compile_ms={m: res["compile_ms"].get(m) for m in modes} if res else {},
                   best_compile_ms=best, best_mode=mode,
                   compile_s=res.get("compile_s", {}),
                   compile_max_abs_diff=res.get("max_abs_diff", {}),
                   tokens_per_s_eager=items / (eager * 1e-3) if eager else None,
                   tokens_per_s_compile=items / (best * 1e-3) if best else None,
                   modes_done=res.get("modes_done", []), complete=complete,
                   device=device_name(a.device), torch=torch.__version__, runs=a.runs)
        if res.get("errors"):
            rec["compile_errors"] = res["errors"]
        return rec

    def partial(res):
        print(json.dumps(record(res, False)), flush=True)

    with torch.no_grad():
        if a.check:
            write_check(a, model, dims, dtype)
        if a.runs > 0:
            x = model_inputs(a.model, model, dims, a.device, dtype, gen, check=False)
            res = timed_peers(model, [x], a.runs, a.warmup, a.device, modes,
                              report=partial if a.partial else None)
        else:
            res = {}
    print(json.dumps(record(res, True)), flush=True)


def write_check(a, model, dims, dtype):
    from safetensors.torch import save_file
    gen = torch.Generator().manual_seed(a.seed + 1)
    x = model_inputs(a.model, model, dims, a.device, dtype, gen, check=True)
    y = model(*x)
    t = {}
    for name, v in zip(model.inputs, x):
        t[name] = (v.to(torch.int32) if not v.is_floating_point() else v.float()).cpu().contiguous()
    for name, v in zip(model.outputs, y):
        t[name] = v.float().cpu().contiguous()
    save_file(t, a.check, metadata={"model": a.model, "precision": a.precision,
                                    "dims": json.dumps(dims), "torch": torch.__version__})


def kernel_cases(dt, device, gen):
    """Yields (case, fn, per-set input tuples, bytes, flops) for each of the issue's
    cases, one at a time so only one case's buffers are alive."""
    es = torch.empty((), dtype=dt).element_size()

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)
                * scale).to(dt)

    def sets(make, set_bytes):
        return [make() for _ in range(sets_for(set_bytes))]

    R, C = 32768, 768
    w, b = 1 + rand(C, scale=0.1), rand(C, scale=0.1)

    def layernorm(x):
        return F.layer_norm(x, (C,), w, b, 1e-5)
    yield ("layernorm", layernorm, sets(lambda: (rand(R, C),), 2 * R * C * es),
           (2 * R * C + 2 * C) * es, 8 * R * C)

    def softmax(x):
        return F.softmax(x, dim=-1)
    yield ("softmax", softmax, sets(lambda: (rand(R, C),), 2 * R * C * es),
           2 * R * C * es, 5 * R * C)

    M, K, N = 8192, 768, 3072
    lw, lb = 1 + rand(K, scale=0.1), rand(K, scale=0.1)
    W, bias = rand(K, N, scale=K ** -0.5), rand(N, scale=0.1)

    def ln_linear_gelu(x):
        h = F.layer_norm(x, (K,), lw, lb, 1e-5)
        return F.gelu(torch.addmm(bias, h, W), approximate="tanh")
    yield ("layernorm_linear_gelu", ln_linear_gelu,
           sets(lambda: (rand(M, K),), (M * K + M * N) * es),
           (M * K + 2 * K + K * N + N + M * N) * es, 2 * M * K * N + 8 * M * K + 10 * M * N)

    for case, (B, H, T, D), causal in (("sdpa_causal", (8, 12, 1024, 64), True),
                                       ("sdpa", (32, 12, 128, 32), False)):
        n = B * H * T * D

        def attn(q, k, v, causal=causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        flops = 4 * B * H * T * T * D // (2 if causal else 1)
        yield (case, attn, sets(lambda: tuple(rand(B, H, T, D) for _ in range(3)), 4 * n * es),
               4 * n * es, flops)


def cmd_kernels(a):
    dtype = set_precision(a.precision)
    modes = parse_modes(a.modes)
    gen = torch.Generator(device=a.device).manual_seed(a.seed)

    def us(v):
        return v * 1e3 if v is not None else None
    with torch.no_grad():
        for case, fn, args, nbytes, flops in kernel_cases(dtype, a.device, gen):
            res = timed_peers(fn, args, a.runs, a.warmup, a.device, modes)
            mode, best = best_mode(res["compile_ms"])
            rec = {"case": case, "precision": a.precision, "eager_us": us(res["eager_ms"]),
                   "compile_us": {m: us(v) for m, v in res["compile_ms"].items()},
                   "best_compile_us": us(best), "best_mode": mode,
                   "compile_s": res["compile_s"],
                   "bytes": nbytes, "flops": flops, "sets": len(args),
                   "compile_max_abs_diff": res["max_abs_diff"],
                   "device": device_name(a.device), "torch": torch.__version__}
            if res["errors"]:
                rec["compile_errors"] = res["errors"]
            print(json.dumps(rec), flush=True)
            del fn, args
            torch._dynamo.reset()
            if a.device != "cpu":
                torch.cuda.empty_cache()


def device_name(device):
    return "cpu" if device == "cpu" else torch.cuda.get_device_name(torch.device(device))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--precision", choices=["f32", "tf32", "bf16"], default="bf16")
    common.add_argument("--runs", type=int, default=50, help="timed calls; median reported")
    common.add_argument("--warmup", type=int, default=MIN_WARMUP,
                        help=f"warm-up calls (at least {MIN_WARMUP})")
    common.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--modes", default=",".join(MODES),
                        help=f"torch.compile modes to time, comma-separated (default {','.join(MODES)})")
    m = sub.add_parser("model", parents=[common], help="time a whole model")
    m.add_argument("--model", choices=sorted(MODELS), required=True)
    m.add_argument("--weights", required=True, help="safetensors from `nnc weights`")
    m.add_argument("--dims", required=True, help="B=8,T=1024 (mlp: B=256)")
    m.add_argument("--heads", type=int, default=12,
                   help="attention heads (not in the weights; the Lua default is 12)")
    m.add_argument("--check", metavar="OUT.safetensors",
                   help="also write seeded inputs and the eager outputs")
    m.add_argument("--partial", action="store_true",
                   help="also print the record after eager and after each mode")
    sub.add_parser("kernels", parents=[common], help="time the issue's kernel cases")
    a = ap.parse_args()
    if a.runs < 0 or (a.cmd == "kernels" and a.runs == 0):
        raise SystemExit("--runs must be at least 1 (0 only with model --check)")
    if a.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu to test the script")
    if a.cmd == "model":
        cmd_model(a)
    else:
        cmd_kernels(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
