#!/usr/bin/env bash
# The README's first command: installs what is missing, builds nnc, compiles a
# model from models/ and shows what the compiler made of it.
# (Code generation for the c-simd target is the next issue; until it lands the
# demo stops at the checked, fused graph and its memory plan.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/install_deps.sh
[ -d build/release ] || meson setup build/release --buildtype=release -Dtests=false >/dev/null
ninja -C build/release >/dev/null
echo "== nnc models/mlp.lua --emit=ir"
build/release/compiler/nnc models/mlp.lua --emit=ir
echo "== nnc models/gpt2.lua --emit=plan (GPT-2 124M, B=8, T=1024)"
build/release/compiler/nnc models/gpt2.lua --emit=plan | tail -n 3
echo "== nnc models/bert.lua (all-MiniLM-L6-v2 shape)"
build/release/compiler/nnc models/bert.lua
