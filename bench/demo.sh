#!/usr/bin/env bash
# The README's first command: installs what is missing, builds nnc, compiles
# models from models/ for the default target (c-simd) and runs their
# benchmark harness: the MLP checked against the float64 reference, then
# GPT-2 124M (random weights) at B=1, T=128.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/install_deps.sh
[ -d build/release ] || meson setup build/release --buildtype=release -Dtests=false >/dev/null
ninja -C build/release >/dev/null
nnc=build/release/compiler/nnc

echo "== nnc models/mlp.lua -o build/mlp && make -C build/mlp && build/mlp/bench_mlp --check"
$nnc models/mlp.lua -o build/mlp
make -s -C build/mlp -j"$(nproc)" >/dev/null
build/mlp/bench_mlp --check

echo "== nnc models/gpt2.lua -o build/gpt2 && build/gpt2/bench_gpt2 -d B=1 -d T=128"
$nnc models/gpt2.lua -o build/gpt2
make -s -C build/gpt2 -j"$(nproc)" >/dev/null
build/gpt2/bench_gpt2 -d B=1 -d T=128 --runs 10 --warmup 2
