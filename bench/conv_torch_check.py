"""nnc's image ops against PyTorch (issue 16's test of the reference's new
ops "against PyTorch"): tests/ops/conv.lua compiled for c-simd, its library
loaded with ctypes, the same weights and inputs given to torch.nn.functional,
every output compared. The folder's own `bench_conv --check` ties the
library to the float64 reference, so this ties that reference to PyTorch.

    nnc tests/ops/conv.lua -o build/conv_ops && make -C build/conv_ops
    python3 bench/conv_torch_check.py build/conv_ops          # PyTorch on the CPU

Prints one line per output (max relative error) and exits 1 above 1e-5.
"""
import ctypes
import json
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F


def fields(header, struct):
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), header, re.S).group(1)
    return re.findall(r"\*(\w+);", body)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "build/conv_ops"
    header = open(f"{folder}/conv.h").read()
    lib = ctypes.CDLL(f"{folder}/libconv.so")
    manifest = json.load(open(f"{folder}/weights_manifest.json"))["tensors"]
    ins, outs = fields(header, "conv_inputs"), fields(header, "conv_outputs")

    class Opts(ctypes.Structure):
        _fields_ = [("threads", ctypes.c_int), ("max_B", ctypes.c_int64)]

    P = ctypes.POINTER(ctypes.c_float)
    Inputs = type("Inputs", (ctypes.Structure,), {"_fields_": [(n, P) for n in ins]})
    Outputs = type("Outputs", (ctypes.Structure,), {"_fields_": [(n, P) for n in outs]})
    lib.conv_last_error.restype = ctypes.c_char_p
    opts, model = Opts(), ctypes.c_void_p()
    lib.conv_options_default(ctypes.byref(opts))
    assert lib.conv_create(ctypes.byref(opts), ctypes.byref(model)) == 0

    g = torch.Generator().manual_seed(0)
    w = {}
    for t in manifest:
        v = torch.rand(t["shape"], generator=g, dtype=torch.float64) * 2 - 1
        if t["name"].endswith("running_var"):
            v = v.abs() + 0.5
        w[t["name"]] = v
        a = np.ascontiguousarray(v.numpy().astype(np.float32))
        rc = lib.conv_set_weight(model, t["name"].encode(), a.ctypes.data_as(P), ctypes.c_size_t(a.size))
        assert rc == 0, lib.conv_last_error(model)
    B = 3
    x = torch.rand(B, 6, 11, 9, generator=g, dtype=torch.float64) * 2 - 1
    xh = torch.rand(B, 10, 7, 6, generator=g, dtype=torch.float64) * 2 - 1
    s = torch.rand(B, 4, 13, generator=g, dtype=torch.float64) * 2 - 1
    xr = torch.rand(B, 9, 10, 3, generator=g, dtype=torch.float64) * 2 - 1
    arrays = {"x": x, "xh": xh, "s": s, "xr": xr}
    keep = {n: np.ascontiguousarray(arrays[n].numpy().astype(np.float32)) for n in ins}
    inp = Inputs(*[keep[n].ctypes.data_as(P) for n in ins])
    # the model's inputs as PyTorch sees them: the same f32 values, in float64
    x, xh, s, xr = (torch.from_numpy(keep[n]).double() for n in ("x", "xh", "s", "xr"))

    def bn(t, p, eps=1e-5):
        return F.batch_norm(t, w[p + ".running_mean"], w[p + ".running_var"], w[p + ".weight"], w[p + ".bias"],
                            False, 0.0, eps)

    nchw = lambda t: t.permute(0, 3, 1, 2)
    want = {
        "plain": F.conv2d(x, w["c1.weight"], w["c1.bias"]),
        "strided": F.conv2d(x, w["c2.weight"], w["c2.bias"], stride=(2, 3), padding=(1, 0)),
        "dilated": F.conv2d(x, w["c3.weight"], None, dilation=(2, 1), padding=2),
        "grouped": F.conv2d(x, w["c4.weight"], w["c4.bias"], groups=3),
        "depthwise": F.conv2d(x, w["c5.weight"], w["c5.bias"], groups=6, padding=1, stride=2),
        "nhwc": F.relu(F.conv2d(nchw(xh), w["c6.weight"], w["c6.bias"], stride=2, padding=1)).permute(0, 2, 3, 1),
        "rgb": F.relu(F.conv2d(nchw(xr), w["c11.weight"], w["c11.bias"], stride=2, padding=3)).permute(0, 2, 3, 1),
        "conv1d": F.conv1d(s, w["c7.weight"], w["c7.bias"], padding=1),
        "conv1d_nlc": F.conv1d(s, w["c8.weight"], w["c8.bias"], stride=2, dilation=2).transpose(1, 2),
        "maxpool": F.max_pool2d(x, 3, stride=2, padding=1),
        "maxpool_dilated": F.max_pool2d(nchw(xh), 2, dilation=2).permute(0, 2, 3, 1),
        "avgpool": F.avg_pool2d(x, (2, 3), padding=1),
        "adaptive": F.adaptive_avg_pool2d(x, (1, 3)),
        "batchnorm": bn(x, "bn"),
        "batchnorm1d": bn(x.flatten(1), "bn1", 1e-3),
        "flatten": x.flatten(2),
        "conv_bn": F.relu(bn(F.conv2d(x, w["c9.weight"], None, padding=1), "bn2")),
        "conv_bn_nhwc": F.relu(bn(F.conv2d(nchw(xh), w["c10.weight"], w["c10.bias"], padding=1), "bn3")
                               + nchw(xh)).permute(0, 2, 3, 1),
    }
    bufs = {n: np.full(tuple(want[n].shape), np.nan, np.float32) for n in outs}
    out = Outputs(*[bufs[n].ctypes.data_as(P) for n in outs])
    dims = (ctypes.c_int64 * 1)(B)
    rc = lib.conv_run(model, dims, ctypes.byref(inp), ctypes.byref(out))
    assert rc == 0, lib.conv_last_error(model)
    worst = 0.0
    for n in outs:
        ref = want[n].numpy()
        err = float(np.max(np.abs(bufs[n] - ref)) / max(np.max(np.abs(ref)), 1e-30))
        worst = max(worst, err if np.isfinite(err) else np.inf)
        print(f"{n:16} {str(list(ref.shape)):18} max relative error against PyTorch {err:.2e}")
    lib.conv_destroy(model)
    print(f"worst {worst:.2e}: {'ok' if worst <= 1e-5 else 'FAILED'}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
