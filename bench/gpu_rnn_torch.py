"""The LSTM forecaster in PyTorch on the GPU, the peer of nnc's
models/lstm_forecast.lua (bench/gpu_rnn.sh runs both in one call):
torch.nn.LSTM (cuDNN) of --layers layers, --hidden units over --features
inputs, batch first, then nn.Linear on the top layer's final state. Random
weights, f32 (or --dtype bf16/f16). Times eager and each torch.compile mode
given with CUDA events: median of --runs after --warmup, one JSON line per
mode.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn


class Forecast(nn.Module):
    def __init__(self, features, hidden, layers, horizon):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, horizon)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--window", type=int, default=48)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--horizon", type=int, default=4)
    ap.add_argument("--dtype", default="f32", choices=["bf16", "f16", "f32"])
    ap.add_argument("--modes", default="eager,default,reduce-overhead")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model = Forecast(a.features, a.hidden, a.layers, a.horizon).cuda().eval().to(dt)
    x = torch.randn(a.batch, a.window, a.features, device="cuda", dtype=dt)
    for mode in a.modes.split(","):
        t0 = time.time()
        fn = model if mode == "eager" else torch.compile(model, mode=mode)
        with torch.inference_mode():
            for _ in range(a.warmup):
                fn(x)
            torch.cuda.synchronize()
            compile_s = time.time() - t0
            ms = []
            for _ in range(a.runs):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn(x)
                e.record()
                e.synchronize()
                ms.append(s.elapsed_time(e))
        print(json.dumps({"impl": "torch-" + mode, "batch": a.batch, "window": a.window, "hidden": a.hidden,
                          "dtype": a.dtype, "median_ms": statistics.median(ms), "min_ms": min(ms),
                          "warmup_s": round(compile_s, 1)}), flush=True)


if __name__ == "__main__":
    main()
