"""nnc's recurrent layers against PyTorch (issue 16): tests/ops/recurrent.lua
compiled for c-simd, its library loaded with ctypes, the same weights (PyTorch's
own names: weight_ih_l0, ..._reverse) and inputs given to torch.nn.LSTM and
torch.nn.GRU, every output and final state compared. The folder's own
`bench_recurrent --check` ties the library to the float64 reference, so this
ties that reference to PyTorch.

    nnc tests/ops/recurrent.lua -o build/rnn_ops && make -C build/rnn_ops
    python3 bench/rnn_torch_check.py build/rnn_ops          # PyTorch on the CPU

Runs at B=3 and the full T=5, then at T=3 (a shorter run of the symbolic T).
Prints one line per output (max relative error) and exits 1 above 1e-5.
"""
import ctypes
import json
import re
import sys

import numpy as np
import torch


def fields(header, struct):
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), header, re.S).group(1)
    return re.findall(r"\*(\w+);", body)


def torch_layers(w):
    """The three layers of tests/ops/recurrent.lua as PyTorch modules holding the same weights."""
    mods = {
        "lstm": torch.nn.LSTM(7, 6, num_layers=2, bidirectional=True),
        "gru": torch.nn.GRU(7, 5, batch_first=True),
        "gru2": torch.nn.GRU(7, 3, num_layers=2, batch_first=True),
    }
    for scope, m in mods.items():
        m.double()
        state = {k: w[f"{scope}.{k}"] for k in m.state_dict()}
        m.load_state_dict(state, strict=True)
    return mods


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "build/rnn_ops"
    header = open(f"{folder}/recurrent.h").read()
    lib = ctypes.CDLL(f"{folder}/librecurrent.so")
    manifest = json.load(open(f"{folder}/weights_manifest.json"))["tensors"]
    ins, outs = fields(header, "recurrent_inputs"), fields(header, "recurrent_outputs")

    class Opts(ctypes.Structure):
        _fields_ = [("threads", ctypes.c_int), ("max_B", ctypes.c_int64), ("max_T", ctypes.c_int64)]

    P = ctypes.POINTER(ctypes.c_float)
    Inputs = type("Inputs", (ctypes.Structure,), {"_fields_": [(n, P) for n in ins]})
    Outputs = type("Outputs", (ctypes.Structure,), {"_fields_": [(n, P) for n in outs]})
    lib.recurrent_last_error.restype = ctypes.c_char_p
    opts, model = Opts(), ctypes.c_void_p()
    lib.recurrent_options_default(ctypes.byref(opts))
    assert lib.recurrent_create(ctypes.byref(opts), ctypes.byref(model)) == 0

    g = torch.Generator().manual_seed(0)
    w = {}
    for t in manifest:
        v = torch.rand(t["shape"], generator=g, dtype=torch.float64) - 0.5
        # the weights as the library holds them: f32, so both sides start from the same values
        a = np.ascontiguousarray(v.numpy().astype(np.float32))
        w[t["name"]] = torch.from_numpy(a).double()
        rc = lib.recurrent_set_weight(model, t["name"].encode(), a.ctypes.data_as(P), ctypes.c_size_t(a.size))
        assert rc == 0, lib.recurrent_last_error(model)
    mods = torch_layers(w)

    worst = 0.0
    for B, T in ((3, 5), (3, 3)):
        shapes = {"x": (T, B, 7), "xb": (B, T, 7), "h0": (4, B, 6), "c0": (4, B, 6), "g0": (1, B, 5)}
        keep = {n: np.ascontiguousarray((torch.rand(shapes[n], generator=g, dtype=torch.float64) * 2 - 1)
                                        .numpy().astype(np.float32)) for n in ins}
        inp = Inputs(*[keep[n].ctypes.data_as(P) for n in ins])
        x, xb, h0, c0, g0 = (torch.from_numpy(keep[n]).double() for n in ("x", "xb", "h0", "c0", "g0"))
        with torch.no_grad():
            ly, (lh, lc) = mods["lstm"](x, (h0, c0))
            gy, gh = mods["gru"](xb, g0)
            g2y, g2h = mods["gru2"](xb)
        want = {"lstm_y": ly, "lstm_hn": lh, "lstm_cn": lc, "gru_y": gy, "gru_hn": gh, "gru2_y": g2y, "gru2_hn": g2h}
        bufs = {n: np.full(tuple(want[n].shape), np.nan, np.float32) for n in outs}
        out = Outputs(*[bufs[n].ctypes.data_as(P) for n in outs])
        dims = (ctypes.c_int64 * 2)(B, T)
        rc = lib.recurrent_run(model, dims, ctypes.byref(inp), ctypes.byref(out))
        assert rc == 0, lib.recurrent_last_error(model)
        for n in outs:
            ref = want[n].numpy()
            err = float(np.max(np.abs(bufs[n] - ref)) / max(np.max(np.abs(ref)), 1e-30))
            worst = max(worst, err if np.isfinite(err) else np.inf)
            print(f"B={B} T={T}  {n:10} {str(list(ref.shape)):12} max relative error against PyTorch {err:.2e}")
    lib.recurrent_destroy(model)
    print(f"worst {worst:.2e}: {'ok' if worst <= 1e-5 else 'FAILED'}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
