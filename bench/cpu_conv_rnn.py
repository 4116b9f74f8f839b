"""The CPU peers of models/mnist_cnn.lua and models/lstm_forecast.lua: the
same layers in PyTorch (eager), at the models' default sizes, for issue 16's
C SIMD goal (>= 1.0x PyTorch CPU in the same run; bench/cpu_conv_rnn.sh runs
both sides, alternating).

    python3 bench/cpu_conv_rnn.py --threads 2 --runs 30
Prints one JSON line per model: {"model", "median_ms"}.
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
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cases = [("mnist_cnn", MnistCnn(), torch.randn(64, 1, 28, 28)),
             ("lstm_forecast", Forecaster(), torch.randn(64, 48, 8))]
    with torch.inference_mode():
        for name, model, x in cases:
            model.eval()
            print(json.dumps({"model": name, "median_ms": round(median_ms(lambda: model(x), a.runs, a.warmup), 4)}),
                  flush=True)


if __name__ == "__main__":
    main()
