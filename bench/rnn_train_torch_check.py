"""Backward through time against PyTorch's autograd (issue 16): the training
step of models/lstm_forecast.lua (a 2-layer LSTM and a linear head, mean
squared error) compiled for c-simd with --train, its library loaded with
ctypes, the same weights, window and target given to torch.nn.LSTM +
nn.Linear in float64; the loss and every weight's gradient compared. The
folder's own `bench_lstm_forecast --check` ties the library to the float64
reference (whose gradient tests/unit/test_autodiff checks by central
differences), so this ties both to PyTorch.

    nnc models/lstm_forecast.lua --train -D batch=4 -D window=11 -D features=5 -D hidden=13 -D horizon=3 \\
        -o build/lstm_train && make -C build/lstm_train
    python3 bench/rnn_train_torch_check.py build/lstm_train

Prints one line per gradient (max relative error) and exits 1 above 1e-5.
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


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "build/lstm_train"
    header = open(f"{folder}/lstm_forecast.h").read()
    lib = ctypes.CDLL(f"{folder}/liblstm_forecast.so")
    manifest = json.load(open(f"{folder}/weights_manifest.json"))["tensors"]
    ins, outs = fields(header, "lstm_forecast_inputs"), fields(header, "lstm_forecast_outputs")
    shape = {t["name"]: t["shape"] for t in manifest}
    features, hidden, horizon = shape["lstm.weight_ih_l0"][1], shape["lstm.weight_hh_l0"][1], shape["head.weight"][0]
    layers = sum(1 for n in shape if n.startswith("lstm.weight_ih_l"))

    class Opts(ctypes.Structure):
        _fields_ = [("threads", ctypes.c_int), ("max_B", ctypes.c_int64), ("max_T", ctypes.c_int64)]

    P = ctypes.POINTER(ctypes.c_float)
    Inputs = type("Inputs", (ctypes.Structure,), {"_fields_": [(n, P) for n in ins]})
    Outputs = type("Outputs", (ctypes.Structure,), {"_fields_": [(n, P) for n in outs]})
    lib.lstm_forecast_last_error.restype = ctypes.c_char_p
    opts, model = Opts(), ctypes.c_void_p()
    lib.lstm_forecast_options_default(ctypes.byref(opts))
    assert lib.lstm_forecast_create(ctypes.byref(opts), ctypes.byref(model)) == 0

    g = torch.Generator().manual_seed(0)
    lstm = torch.nn.LSTM(features, hidden, layers, batch_first=True).double()
    head = torch.nn.Linear(hidden, horizon).double()
    params = dict([("lstm." + k, v) for k, v in lstm.named_parameters()] +
                  [("head." + k, v) for k, v in head.named_parameters()])
    keep = {}
    for t in manifest:
        a = np.ascontiguousarray(((torch.rand(t["shape"], generator=g, dtype=torch.float64) - 0.5)).numpy()
                                 .astype(np.float32))
        keep[t["name"]] = a
        with torch.no_grad():
            params[t["name"]].copy_(torch.from_numpy(a).double())
        rc = lib.lstm_forecast_set_weight(model, t["name"].encode(), a.ctypes.data_as(P), ctypes.c_size_t(a.size))
        assert rc == 0, lib.lstm_forecast_last_error(model)
    assert set(params) == set(keep), "the manifest names PyTorch's parameters"

    B, T = 3, 7
    window = np.ascontiguousarray((torch.rand(B, T, features, generator=g, dtype=torch.float64) * 2 - 1).numpy()
                                  .astype(np.float32))
    target = np.ascontiguousarray(torch.rand(B, horizon, generator=g, dtype=torch.float64).numpy().astype(np.float32))
    scale = np.ones(1, np.float32)
    arrays = {"window": window, "target": target, "loss_scale": scale}
    inp = Inputs(*[arrays[n].ctypes.data_as(P) for n in ins])

    _, (h, _) = lstm(torch.from_numpy(window).double())
    forecast = head(h[-1])
    loss = ((forecast - torch.from_numpy(target).double()) ** 2).mean()
    loss.backward()
    want = {"loss": loss.detach().reshape(()), "forecast": forecast.detach()}
    for name, p in params.items():
        want["grad_" + name.replace(".", "_")] = p.grad
    bufs = {n: np.full(tuple(want[n].shape), np.nan, np.float32) for n in outs}
    out = Outputs(*[bufs[n].ctypes.data_as(P) for n in outs])
    dims = (ctypes.c_int64 * 2)(B, T)
    rc = lib.lstm_forecast_run(model, dims, ctypes.byref(inp), ctypes.byref(out))
    assert rc == 0, lib.lstm_forecast_last_error(model)
    worst = 0.0
    for n in outs:
        ref = want[n].numpy()
        err = float(np.max(np.abs(bufs[n] - ref)) / max(np.max(np.abs(ref)), 1e-30))
        worst = max(worst, err if np.isfinite(err) else np.inf)
        print(f"{n:26} {str(list(ref.shape)):10} max relative error against PyTorch autograd {err:.2e}")
    lib.lstm_forecast_destroy(model)
    print(f"worst {worst:.2e}: {'ok' if worst <= 1e-5 else 'FAILED'}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
