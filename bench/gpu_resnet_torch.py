"""ResNet-18 inference in PyTorch on the GPU, the peer of nnc's
models/resnet18.lua (bench/gpu_conv.sh runs both in one call).

The network is torchvision's resnet18 written out here (torchvision is not
needed): conv 7x7/2, max pool, four stages of two basic blocks, global
average pool, fc. Random weights, bf16 (or --dtype f32/f16), channels_last
memory format (the fastest for cuDNN on tensor cores), batch norm in
inference mode. Times eager and each torch.compile mode given with CUDA
events: median of --runs after --warmup, one JSON line per mode.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.down = None
        if stride != 1 or cin != c:
            self.down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    def __init__(self, width=64, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.pool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], width
        for stage in range(4):
            c = width * 2 ** stage
            for b in range(2):
                blocks.append(Block(cin, c, 2 if stage > 0 and b == 0 else 1))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.blocks(x)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--modes", default="eager,default,reduce-overhead")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.dtype == "f32"
    model = ResNet18().cuda().eval().to(dt).to(memory_format=torch.channels_last)
    x = torch.randn(a.batch, 3, a.size, a.size, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
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
        print(json.dumps({"impl": "torch-" + mode, "batch": a.batch, "size": a.size, "dtype": a.dtype,
                          "median_ms": statistics.median(ms), "min_ms": min(ms), "warmup_s": round(compile_s, 1),
                          "images_per_s": a.batch / statistics.median(ms) * 1e3}), flush=True)


if __name__ == "__main__":
    main()
