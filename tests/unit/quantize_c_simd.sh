#!/usr/bin/env bash
# tests/unit/quantize_c_simd.sh NNC: --quantize=int8w on c-simd end to end
# (tests/meson.build runs it). For mlp and bert (the default models, their
# linear layers' sizes, and odd small ones):
#  1. random weights scaled like PyTorch's init: bench --check against the
#     float64 reference of the float model, each output's cosine >= 0.999
#     (and the int8 tolerance, 2e-2, on the max relative error);
#  2. weights already on each channel's int8 grid (nnc weights
#     --quantize=int8w): the folder holds them exactly, so the check is the
#     kernels' against the dequantized weights, at f32's 1e-5.
# Then what is marked (--emit=ir) and the refusals: targets without an int8
# GEMM, --train, --parallel, an unknown mode.
set -euo pipefail
nnc=${1:?usage: quantize_c_simd.sh NNC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# name model defines (the odd ones: no size a multiple of a tile)
models=(
  "mlp mlp"
  "mlp_odd mlp -D batch=5 -D pixels=13 -D hidden1=21 -D hidden2=7 -D classes=3"
  "bert bert"
  "bert_odd bert -D layers=2 -D hidden=36 -D heads=4 -D intermediate=50 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"
)
for spec in "${models[@]}"; do
  read -r name model defines <<< "$spec"
  dir="$work/$name"
  # shellcheck disable=SC2086
  "$nnc" "models/$model.lua" --quantize=int8w $defines -o "$dir"
  make -s -C "$dir" -j2 "bench_$model" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; fail "$name: build"; }
  out=$("$dir/bench_$model" --check --runs 1 --warmup 0 --no-peaks 2>&1) || { echo "$out"; fail "$name: --check"; }
  lines=$(grep "max relative error" <<< "$out")
  echo "$name (float weights): $lines"
  # every output: cosine >= 0.999 against the float model
  awk '{ for (i = 1; i < NF; i++) if ($i == "cosine") { c = $(i + 1) + 0; if (c < 0.999) bad = 1 } } END { exit bad }' \
    <<< "$lines" || fail "$name: cosine below 0.999"
  # shellcheck disable=SC2086
  "$nnc" weights "models/$model.lua" --quantize=int8w $defines -o "$dir/grid.safetensors"
  out=$("$dir/bench_$model" --check --runs 1 --warmup 0 --no-peaks --weights "$dir/grid.safetensors" 2>&1) \
    || { echo "$out"; fail "$name: --check on the int8 grid"; }
  lines=$(grep "max relative error" <<< "$out")
  echo "$name (int8-grid weights): $lines"
  awk '{ for (i = 1; i < NF; i++) if ($i == "error") { e = $(i + 1); sub(",", "", e); if (e + 0 > 1e-5) bad = 1 } } END { exit bad }' \
    <<< "$lines" || fail "$name: the int8 kernels are not within 1e-5 of the dequantized reference"
done

# what is held as int8: bert's 36 linear weights (6 layers x q, k, v, output, two FFN), no embedding or norm
ir=$("$nnc" models/bert.lua --quantize=int8w --emit=ir)
[ "$(grep -c 'held as int8' <<< "$ir")" = 36 ] || fail "bert: expected 36 int8 weights"
! grep "embeddings.*held as int8\|LayerNorm.*held as int8\|bias.*held as int8" <<< "$ir" || fail "bert: a non-linear weight held as int8"
# gpt2's tied wte (the embedding and the head) stays f32
ir=$("$nnc" models/gpt2.lua --quantize=int8w --emit=ir -D layers=1)
! grep "wte.*held as int8" <<< "$ir" || fail "gpt2: the tied wte held as int8"
grep -q "c_fc.weight.*held as int8" <<< "$ir" || fail "gpt2: c_fc not held as int8"

# refusals: exit code and message, nothing written
refuse() {
  local want=$1 msg=$2
  shift 2
  set +e
  err=$("$nnc" "$@" -o "$work/refused" 2>&1)
  rc=$?
  set -e
  [ "$rc" = "$want" ] || fail "nnc $*: exit $rc, expected $want ($err)"
  grep -qF -- "$msg" <<< "$err" || fail "nnc $*: expected \"$msg\", found: $err"
  [ ! -e "$work/refused" ] || fail "nnc $*: wrote $work/refused"
  echo "refused (exit $rc): $err" | head -1
}
refuse 6 "--quantize=int8w: target cuda-sm80 has no int8 GEMM yet" models/mlp.lua --quantize=int8w --target=cuda-sm80
refuse 6 "--quantize=int8w: target opencl has no int8 GEMM yet" models/mlp.lua --quantize=int8w --target=opencl
refuse 1 "--quantize=int8w: expected no --train" models/mlp.lua --quantize=int8w --train
refuse 1 "--quantize=int8w: expected no --parallel" models/mlp.lua --quantize=int8w --parallel=tp:2
refuse 1 "--quantize: expected none, int8w, w8a8 or int4w, found \"int4\"" models/mlp.lua --quantize=int4
echo "ok"
