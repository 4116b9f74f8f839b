#!/usr/bin/env bash
# tests/unit/neon_qemu.sh NNC: the c-neon target run, on an x86 machine,
# under QEMU's user-mode AArch64 emulation (tests/meson.build runs it). The
# NEON paths of templates/c_simd (the f32 micro-kernel, the rows and
# attention kernels, int8 and int4 weights, W8A8's sdot products) are compiled
# for nothing else here, so without this they would ship untested. Each
# folder is cross-built with Debian's aarch64-linux-gnu-gcc for Armv8.2 with
# the dot-product extension (the sdot path; the plain-C W8A8 product is the
# generic tests') and its bench --check compares the outputs with the
# float64 reference at odd sizes. Emulation runs ~30x slower than the host:
# small models, one timed run, one thread (emulated threads waiting on each
# other crawl when the host is busy).
set -euo pipefail
nnc=${1:?usage: neon_qemu.sh NNC}
cc=aarch64-linux-gnu-gcc
sysroot=/usr/aarch64-linux-gnu
for tool in "$cc" qemu-aarch64; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool not found (tests/install_deps.sh installs it)"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# name, model, --quantize (or none), then nnc's -D defines
models=(
  "mlp mlp none -D batch=5 -D pixels=13 -D hidden1=21 -D hidden2=7 -D classes=3"
  "bert bert none -D layers=2 -D hidden=36 -D heads=4 -D intermediate=50 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"
  "bert_int8w bert int8w -D layers=2 -D hidden=72 -D heads=6 -D intermediate=100 -D vocab=31 -D positions=15 -D seq=13 -D batch=3"
  "bert_w8a8 bert w8a8 -D layers=2 -D hidden=72 -D heads=6 -D intermediate=100 -D vocab=31 -D positions=15 -D seq=13 -D batch=3"
  "bert_int4w bert int4w -D layers=2 -D hidden=72 -D heads=6 -D intermediate=100 -D vocab=31 -D positions=15 -D seq=13 -D batch=3"
  "gpt2 gpt2 none -D layers=2 -D heads=3 -D d=150 -D vocab=97 -D ctx=19 -D batch=3"
  "cnn mnist_cnn none -D batch=3 -D size=13 -D conv1=5 -D conv2=7 -D hidden=11 -D classes=3"
  "lstm lstm_forecast none -D batch=3 -D window=9 -D features=5 -D hidden=13 -D layers=2 -D horizon=2"
  "gru gru none -D batch=3 -D seq=9 -D vocab=23 -D embed=10 -D hidden=13 -D layers=2 -D classes=3"
  "llama llama none -D layers=2 -D d=32 -D heads=4 -D kv_heads=2 -D ffn=24 -D vocab=37 -D ctx=7 -D batch=2"
)
for spec in "${models[@]}"; do
  read -r name model quant defines <<< "$spec"
  dir="$work/$name"
  # shellcheck disable=SC2086
  "$nnc" "models/$model.lua" --target=c-neon --quantize="$quant" $defines -o "$dir"
  grep -q "target c-neon" "$dir/Makefile" || fail "$name: the folder is not for c-neon"
  make -s -C "$dir" -j2 CC="$cc" CFLAGS="-O2 -march=armv8.2-a+dotprod" "bench_$model" > "$dir.make.log" 2>&1 \
    || { cat "$dir.make.log"; fail "$name: cross build"; }
  out=$(qemu-aarch64 -L "$sysroot" "$dir/bench_$model" --check --threads 1 --runs 1 --warmup 0 --no-peaks 2>&1) \
    || { echo "$out"; fail "$name: --check under qemu-aarch64"; }
  [ "$(strings "$dir/obj/kernels/isa.o" | grep -cx neon)" = 1 ] || fail "$name: the kernels were not compiled for NEON"
  if [ "$quant" = w8a8 ]; then
    [ "$(aarch64-linux-gnu-objdump -d "$dir/obj/kernels/gemm_w8a8.o" | grep -c sdot)" -gt 0 ] || fail "$name: no sdot in the W8A8 GEMM"
  fi
  lines=$(grep "max relative error" <<< "$out")
  echo "$name ($quant):"
  echo "$lines"
  awk '{ for (i = 1; i < NF; i++) if ($i == "cosine") { c = $(i + 1) + 0; if (c < 0.999) bad = 1 } } END { exit bad }' \
    <<< "$lines" || fail "$name: cosine below 0.999"
done
echo "ok"
