"""nnc's LLaMA pieces against plain PyTorch (issue 16): rope, grouped-query
attention and models/llama.lua, each compiled for c-simd and its library
loaded with ctypes, given the same weights and inputs as a PyTorch
implementation written the way Hugging Face's modeling_llama.py writes it
(rotate_half with inv_freq = base^(-2i/dims), repeat_kv, RMSNorm, SwiGLU),
in float64. Each folder's own `bench_* --check` ties the library to nnc's
float64 reference, so this ties that reference to PyTorch. When the
transformers package is importable, the model's logits are also compared
with transformers' LlamaForCausalLM holding the same weights.

    nnc tests/ops/rope.lua -o build/rope_ops && make -C build/rope_ops
    nnc tests/ops/gqa.lua -o build/gqa_ops && make -C build/gqa_ops
    nnc models/llama.lua -D layers=2 -D d=48 -D heads=6 -D kv_heads=2 -D ffn=37 \\
        -D vocab=101 -D ctx=64 -D batch=4 -o build/llama_small && make -C build/llama_small
    python3 bench/llama_torch_check.py build/rope_ops build/gqa_ops build/llama_small

The model's weights go through a safetensors file (llama_load_weights_file)
under Hugging Face's names. Prints one line per output (max relative error)
and exits 1 above 1e-5.
"""
import ctypes
import json
import os
import re
import sys
import tempfile

import numpy as np
import torch

TOL = 1e-5
F64 = torch.float64


# ----------------------------------------------------------- the library

class Lib:
    """A generated folder's shared library: create, set or load weights, run."""

    def __init__(self, folder):
        self.name = re.search(r"lib(\w+)\.so", " ".join(os.listdir(folder))).group(1)
        header = open(f"{folder}/{self.name}.h").read()
        self.lib = ctypes.CDLL(f"{folder}/lib{self.name}.so")
        self.manifest = json.load(open(f"{folder}/weights_manifest.json"))["tensors"]
        self.ins = self.fields(header, "inputs")
        self.outs = self.fields(header, "outputs")
        self.dims = re.findall(r"int64_t (\w+);", self.struct(header, "dims"))
        opts = re.findall(r"(int|int64_t) (\w+);", self.struct(header, "options"))
        ctype = {"int": ctypes.c_int, "int64_t": ctypes.c_int64}
        self.Opts = type("Opts", (ctypes.Structure,), {"_fields_": [(n, ctype[t]) for t, n in opts]})
        getattr(self.lib, f"{self.name}_last_error").restype = ctypes.c_char_p
        o, self.model = self.Opts(), ctypes.c_void_p()
        self.call("options_default", ctypes.byref(o))
        assert self.call("create", ctypes.byref(o), ctypes.byref(self.model)) == 0

    def struct(self, header, kind):
        return re.search(r"typedef struct %s_%s \{(.*?)\} %s_%s;" % (self.name, kind, self.name, kind), header,
                         re.S).group(1)

    def fields(self, header, kind):
        """[(name, numpy dtype)] of the inputs or outputs struct."""
        found = re.findall(r"(float|int32_t|uint16_t) \*(\w+);", self.struct(header, kind))
        return [(n, np.int32 if t == "int32_t" else np.float32) for t, n in found]

    def call(self, fn, *args):
        return getattr(self.lib, f"{self.name}_{fn}")(*args)

    def error(self):
        return self.call("last_error", self.model).decode()

    def set_random_weights(self, g):
        """Uniform [-0.5, 0.5) weights, returned as float64 tensors of the f32 values the library holds."""
        w = {}
        P = ctypes.POINTER(ctypes.c_float)
        for t in self.manifest:
            a = np.ascontiguousarray(((torch.rand(t["shape"], generator=g, dtype=F64) - 0.5)).numpy().astype(np.float32))
            w[t["name"]] = torch.from_numpy(a).to(F64)
            rc = self.call("set_weight", self.model, t["name"].encode(), a.ctypes.data_as(P), ctypes.c_size_t(a.size))
            assert rc == 0, self.error()
        return w

    def run(self, dims, inputs, out_shapes):
        """Runs with dims (by name) and inputs (numpy arrays by name); returns the outputs as float64 arrays."""
        keep = {n: np.ascontiguousarray(inputs[n].astype(t)) for n, t in self.ins}
        In = type("In", (ctypes.Structure,), {"_fields_": [(n, ctypes.c_void_p) for n, _ in self.ins]})
        Out = type("Out", (ctypes.Structure,), {"_fields_": [(n, ctypes.c_void_p) for n, _ in self.outs]})
        bufs = {n: np.full(out_shapes[n], np.nan, np.float32) for n, _ in self.outs}
        i = In(*[keep[n].ctypes.data for n, _ in self.ins])
        o = Out(*[bufs[n].ctypes.data for n, _ in self.outs])
        d = (ctypes.c_int64 * len(self.dims))(*[dims[n] for n in self.dims])
        assert self.call("run", self.model, d, ctypes.byref(i), ctypes.byref(o)) == 0, self.error()
        return {n: b.astype(np.float64) for n, b in bufs.items()}

    def close(self):
        self.call("destroy", self.model)


def compare(label, got, want):
    want = want.detach().numpy()
    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    err = err if np.isfinite(err) else float("inf")
    print(f"{label:34} {str(list(want.shape)):18} max relative error against PyTorch {err:.2e}")
    return err


# ------------------------------------------------- plain PyTorch, HF's way

def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(pos, dims, base):
    """cos, sin [..., T, dims] for positions [..., T] (LlamaRotaryEmbedding)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dims, 2, dtype=F64) / dims))
    freqs = pos.to(F64)[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin, dims):
    """x [..., T, D] with cos, sin broadcasting to [..., T, dims]; entries past dims pass through."""
    xr, xp = x[..., :dims], x[..., dims:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def repeat_kv(x, g):
    """[B, Hkv, S, D] -> [B, Hkv*g, S, D], each kv head repeated for its g query heads."""
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, g, s, d).reshape(b, h * g, s, d)


def attend(q, k, v, causal, mask=None):
    """softmax(q k^T / sqrt(D) + masks) v with k, v repeated to q's heads; causal aligned to the last key."""
    k, v = repeat_kv(k, q.shape[1] // k.shape[1]), repeat_kv(v, q.shape[1] // v.shape[1])
    T, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
        s = s.masked_fill(j > i + (S - T), float("-inf"))
    if mask is not None:
        s = s.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


# ------------------------------------------------------------- the checks

def check_rope(folder, g):
    lib = Lib(folder)
    w = lib.set_random_weights(g)
    worst = 0.0
    for B, T in ((3, 17), (2, 5)):
        x = torch.rand(B, 3, T, 10, generator=g, dtype=F64) * 2 - 1
        xt = torch.rand(B, T, 3, 6, generator=g, dtype=F64) * 2 - 1
        pos = torch.randint(0, 1000, (B, T), generator=g, dtype=torch.int32)
        pos1 = torch.randint(0, 1000, (T,), generator=g, dtype=torch.int32)
        x, xt = x.float().to(F64), xt.float().to(F64)
        t = torch.arange(T)
        want = {
            "plain": apply_rope(x, *rope_cos_sin(t, 10, 10000.0), 10),
            "positions": apply_rope(x, *(c[:, None] for c in rope_cos_sin(pos, 10, 500.0)), 10),
            "positions_t": apply_rope(x, *rope_cos_sin(pos1, 10, 10000.0), 10),
            "partial": apply_rope(x @ w["w"], *(c[:, None] for c in rope_cos_sin(pos, 4, 10000.0)), 4),
            # time on axis 2 of [B, T, 3, 6]: the cos/sin rows broadcast over the 3 heads
            "axis": apply_rope(xt, *(c[:, None] for c in rope_cos_sin(t, 6, 10.0)), 6),
        }
        got = lib.run({"B": B, "T": T}, {"x": x.numpy(), "xt": xt.numpy(), "pos": pos.numpy(), "pos1": pos1.numpy()},
                      {n: tuple(v.shape) for n, v in want.items()})
        for n in want:
            worst = max(worst, compare(f"rope B={B} T={T} {n}", got[n], want[n]))
    lib.close()
    return worst


def check_gqa(folder, g):
    lib = Lib(folder)
    w = lib.set_random_weights(g)
    worst = 0.0
    for B, T in ((3, 13), (2, 4)):
        r = lambda *s: (torch.rand(*s, generator=g, dtype=F64) * 2 - 1).float().to(F64)
        ins = {"q": r(B, 6, T, 10), "k": r(B, 2, T, 10), "v": r(B, 2, T, 7), "k2": r(B, 2, T, 10),
               "v2": r(B, 2, T, 7), "k1": r(B, 1, 15, 10), "v1": r(B, 1, 15, 10), "k3": r(B, 1, 15, 10),
               "v3": r(B, 1, 15, 10)}
        mask = torch.randint(0, 2, (B, T), generator=g, dtype=torch.int32)
        mask[:, 0] = 1   # a row with every key masked is zeros in nnc, NaN in PyTorch
        qw = ins["q"] @ w["w"]
        want = {
            "gqa_causal": attend(qw, ins["k"], ins["v"], True),
            "gqa": attend(qw, ins["k2"], ins["v2"], False, mask),
            "mqa_causal": attend(qw, ins["k1"], ins["v1"], True),
            "mqa": attend(ins["q"], ins["k3"], ins["v3"], False),
        }
        arrays = {n: v.numpy() for n, v in ins.items()}
        arrays["mask"] = mask.numpy()
        got = lib.run({"B": B, "T": T}, arrays, {n: tuple(v.shape) for n, v in want.items()})
        for n in want:
            worst = max(worst, compare(f"gqa B={B} T={T} {n}", got[n], want[n]))
    lib.close()
    return worst


def llama_config(lib):
    """The config the folder was compiled with, read off its weights' shapes."""
    shapes = {t["name"]: t["shape"] for t in lib.manifest}
    vocab, d = shapes["model.embed_tokens.weight"]
    layers = len({n.split(".")[2] for n in shapes if n.startswith("model.layers.")})
    ffn = shapes["model.layers.0.mlp.gate_proj.weight"][0]
    kv = shapes["model.layers.0.self_attn.k_proj.weight"][0]
    return vocab, d, layers, ffn, kv


def llama_torch(w, ids, heads, kv_heads, eps=1e-6, theta=10000.0):
    """LlamaForCausalLM's forward, plainly, in float64."""
    B, T = ids.shape
    d = w["model.embed_tokens.weight"].shape[1]
    hd = d // heads

    def norm(x, name):
        return w[name] * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))

    def lin(x, name):
        return x @ w[name].T

    cos, sin = rope_cos_sin(torch.arange(T), hd, theta)
    x = w["model.embed_tokens.weight"][ids.long()]
    layers = len({n.split(".")[2] for n in w if n.startswith("model.layers.")})
    for i in range(layers):
        p = f"model.layers.{i}."
        h = norm(x, p + "input_layernorm.weight")
        q = lin(h, p + "self_attn.q_proj.weight").view(B, T, heads, hd).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj.weight").view(B, T, kv_heads, hd).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj.weight").view(B, T, kv_heads, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, hd), apply_rope(k, cos, sin, hd)
        y = attend(q, k, v, True).transpose(1, 2).reshape(B, T, d)
        x = x + lin(y, p + "self_attn.o_proj.weight")
        h = norm(x, p + "post_attention_layernorm.weight")
        g = lin(h, p + "mlp.gate_proj.weight")
        x = x + lin(torch.nn.functional.silu(g) * lin(h, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight")
    x = norm(x, "model.norm.weight")
    return x @ w["lm_head.weight"].T


def llama_transformers(w, ids, heads, kv_heads, vocab, d, layers, ffn):
    """The same through transformers' LlamaForCausalLM, or None when it is not installed."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return None
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, rms_norm_eps=1e-6,
                      rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=False,
                      attention_bias=False, mlp_bias=False)
    m = LlamaForCausalLM(cfg).to(F64).eval()
    m.load_state_dict(w, strict=True)
    with torch.no_grad():
        return m(input_ids=ids.long()).logits


def check_llama(folder, g, heads):
    lib = Lib(folder)
    vocab, d, layers, ffn, kv = llama_config(lib)
    kv_heads = kv // (d // heads)
    # the weights through a safetensors file under Hugging Face's names, as a checkpoint loads
    from safetensors.torch import save_file
    w = {t["name"]: ((torch.rand(t["shape"], generator=g, dtype=F64) - 0.5) * 0.5).float() for t in lib.manifest}
    with tempfile.TemporaryDirectory() as tmp:
        save_file(w, f"{tmp}/model.safetensors")
        assert lib.call("load_weights_file", lib.model, f"{tmp}/model.safetensors".encode()) == 0, lib.error()
    w = {n: v.to(F64) for n, v in w.items()}
    worst = 0.0
    for B, T in ((3, 17), (1, 9)):
        ids = torch.randint(0, vocab, (B, T), generator=g, dtype=torch.int32)
        with torch.no_grad():
            want = llama_torch(w, ids, heads, kv_heads)
        got = lib.run({"B": B, "T": T}, {"input_ids": ids.numpy()}, {"logits": tuple(want.shape)})
        worst = max(worst, compare(f"llama B={B} T={T} logits", got["logits"], want))
        hf = llama_transformers(w, ids, heads, kv_heads, vocab, d, layers, ffn)
        if hf is not None:
            worst = max(worst, compare(f"llama B={B} T={T} logits (transformers)", got["logits"], hf))
            worst = max(worst, compare(f"  plain PyTorch vs transformers", want.numpy(), hf))
        else:
            print("  (transformers is not installed: its LlamaForCausalLM is not compared)")
    lib.close()
    return worst


def main():
    args = sys.argv[1:] or ["build/rope_ops", "build/gqa_ops", "build/llama_small"]
    heads = 6
    for a in list(args):
        if a.startswith("--heads="):
            heads = int(a.split("=")[1])
            args.remove(a)
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for folder in args:
        name = re.search(r"lib(\w+)\.so", " ".join(os.listdir(folder))).group(1)
        if name == "rope":
            worst = max(worst, check_rope(folder, g))
        elif name == "gqa":
            worst = max(worst, check_gqa(folder, g))
        elif name == "llama":
            worst = max(worst, check_llama(folder, g, heads))
        else:
            print(f"{folder}: not a rope, gqa or llama folder")
            return 2
    print(f"worst {worst:.2e}: {'ok' if worst <= TOL else 'FAILED'}")
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    sys.exit(main())
