"""The CPU peers of models/mnist_cnn.lua and models/lstm_forecast.lua: the
same layers in PyTorch, eager and under torch.compile's three modes (the
peer is the fastest), at the models' default sizes, for issue 16's C SIMD
goal (>= 1.0x PyTorch CPU in the same run; bench/cpu_conv_rnn.sh runs both
sides, alternating).

    python3 bench/cpu_conv_rnn.py --threads 2 --runs 30
Prints one JSON line per model and mode: {"model", "mode", "median_ms"}.
"""
import argparse
import json
import statistics
import time

import torch
from torch import nn


class MnistCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * 12 * 12, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        x = torch.flatten(nn.functional.max_pool2d(x, 2), 1)
        return self.fc2(torch.relu(self.fc1(x)))


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(8, 64, 2, batch_first=True), nn.Linear(64, 4)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


def median_ms(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default="eager,default,reduce-overhead,max-autotune",
                    help="eager and torch.compile modes, comma-separated")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cases = [("mnist_cnn", MnistCnn(), torch.randn(64, 1, 28, 28)),
             ("lstm_forecast", Forecaster(), torch.randn(64, 48, 8))]
    with torch.inference_mode():
        for name, model, x in cases:
            model.eval()
            for mode in a.modes.split(","):
                fn = model if mode == "eager" else torch.compile(model, mode=mode)
                fn(x)   # compiles outside the timing
                print(json.dumps({"model": name, "mode": mode,
                                  "median_ms": round(median_ms(lambda: fn(x), a.runs, a.warmup), 4)}), flush=True)
                torch._dynamo.reset()


if __name__ == "__main__":
    main()
