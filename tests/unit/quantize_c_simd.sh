#!/usr/bin/env bash
# tests/unit/quantize_c_simd.sh NNC MODE: --quantize=MODE (int8w, w8a8 or
# int4w) on c-simd end to end (tests/meson.build runs it once a mode). For
# mlp and bert (the default models, their linear layers' sizes, and odd
# small ones; int4w adds K cut by its 128-k groups and gpt2) and a small
# LSTM forecaster (its input projections stay GEMMs that read the
# quantized W_ih: the C SIMD scan takes them only unquantized):
#  1. random weights scaled like PyTorch's init: bench --check against the
#     float64 reference of the float model passes (the mode's tolerance on
#     the max relative error) and each output's cosine is at least the
#     mode's bound (int8w and w8a8 0.999; int4w 0.995: 4 bits and a scale
#     per 128 weights measured 0.9975 to 0.9997, bench/NOTES.md);
#  2. the weight-only modes: weights already on the grid (nnc weights
#     --quantize=MODE) are held exactly, so the check is the kernels'
#     against the dequantized weights, at f32's 1e-5. w8a8 has no such
#     check: it quantizes the activations as it runs, which the reference
#     does not (test_simd_gemm_w8a8 checks its GEMM against the dequantized
#     operands).
# Then what is marked (--emit=ir) and the refusals: targets without the
# GEMM (OpenCL for every mode), --train, --parallel, an unknown mode.
set -euo pipefail
nnc=${1:?usage: quantize_c_simd.sh NNC MODE}
mode=${2:?usage: quantize_c_simd.sh NNC MODE}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# name model defines (the odd ones: no size a multiple of a tile)
models=(
  "mlp mlp"
  "mlp_odd mlp -D batch=5 -D pixels=13 -D hidden1=21 -D hidden2=7 -D classes=3"
  "bert bert"
  "bert_odd bert -D layers=2 -D hidden=36 -D heads=4 -D intermediate=50 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"
  "lstm_odd lstm_forecast -D batch=4 -D window=11 -D features=5 -D hidden=13 -D horizon=3"
)
case "$mode" in
  int8w) cosine=0.999 grid=1 arg=b_q8 bits=int8 mark="held as int8" ;;
  w8a8) cosine=0.999 grid=0 arg=b_w8a8 bits=int8 mark="held as int8.*--quantize=w8a8" ;;
  int4w)
    cosine=0.995 grid=1 arg=b_q4 bits=int4 mark="held as int4, a scale per 128 .*--quantize=int4w"
    models=(
      "mlp mlp"
      "mlp_odd mlp -D batch=5 -D pixels=13 -D hidden1=150 -D hidden2=7 -D classes=3"
      "bert bert"
      "bert_odd bert -D layers=2 -D hidden=132 -D heads=4 -D intermediate=261 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"
      "gpt2_odd gpt2 -D layers=2 -D heads=3 -D d=150 -D vocab=97 -D ctx=19 -D batch=3"
      "lstm_odd lstm_forecast -D batch=4 -D window=11 -D features=5 -D hidden=13 -D horizon=3"
    ) ;;
  *) fail "expected a mode int8w, w8a8 or int4w, found \"$mode\"" ;;
esac

# the largest value after a word on lines of bench's check report
largest() { awk -v w="$1" '{ for (i = 1; i < NF; i++) if ($i == w) { v = $(i + 1); sub(",", "", v); print v + 0 } }' | sort -g | tail -1; }
smallest() { awk -v w="$1" '{ for (i = 1; i < NF; i++) if ($i == w) print $(i + 1) + 0 }' | sort -g | head -1; }

for spec in "${models[@]}"; do
  read -r name model defines <<< "$spec"
  dir="$work/$name"
  # shellcheck disable=SC2086
  "$nnc" "models/$model.lua" --quantize="$mode" $defines -o "$dir"
  grep -q "$arg" "$dir/$model.c" || fail "$name: no GEMM reads a $mode weight ($arg)"
  make -s -C "$dir" -j2 "bench_$model" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; fail "$name: build"; }
  out=$("$dir/bench_$model" --check --runs 1 --warmup 0 --no-peaks 2>&1) || { echo "$out"; fail "$name: --check"; }
  lines=$(grep "max relative error\|top-1 agreement" <<< "$out")
  echo "$name (float weights): $lines"
  c=$(grep "cosine" <<< "$lines" | smallest cosine)
  awk -v c="$c" -v b="$cosine" 'BEGIN { exit !(c >= b) }' || fail "$name: cosine $c below $cosine"
  [ "$grid" = 1 ] || continue
  # shellcheck disable=SC2086
  "$nnc" weights "models/$model.lua" --quantize="$mode" $defines -o "$dir/grid.safetensors"
  out=$("$dir/bench_$model" --check --runs 1 --warmup 0 --no-peaks --weights "$dir/grid.safetensors" 2>&1) \
    || { echo "$out"; fail "$name: --check on the $bits grid"; }
  lines=$(grep "max relative error" <<< "$out")
  echo "$name ($bits-grid weights): $lines"
  e=$(largest error <<< "$lines")
  awk -v e="$e" 'BEGIN { exit !(e <= 1e-5) }' \
    || fail "$name: the $bits kernels are $e from the dequantized reference, expected within 1e-5"
done

# what is held quantized: bert's 36 linear weights (6 layers x q, k, v,
# output, two FFN), no embedding or norm; gpt2's tied wte (the embedding
# and the head) stays f32
ir=$("$nnc" models/bert.lua --quantize="$mode" --emit=ir)
[ "$(grep -c "$mark" <<< "$ir")" = 36 ] || fail "bert: expected 36 $mode weights"
! grep "embeddings.*held as\|LayerNorm.*held as\|bias.*held as" <<< "$ir" || fail "bert: a non-linear weight held as $bits"
ir=$("$nnc" models/gpt2.lua --quantize="$mode" --emit=ir -D layers=1)
! grep "wte.*held as" <<< "$ir" || fail "gpt2: the tied wte held as $bits"
grep -q "c_fc.weight.*held as $bits" <<< "$ir" || fail "gpt2: c_fc not held as $bits"

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
# every mode runs on CUDA too (tests/unit/w8a8_cuda.sh and weight_only_cuda.sh have their refusals)
refuse 6 "--quantize=$mode: target opencl has no $bits GEMM yet" models/mlp.lua --quantize="$mode" --target=opencl
refuse 1 "--quantize=$mode: expected no --train" models/mlp.lua --quantize="$mode" --train
refuse 1 "--quantize=$mode: expected no --parallel" models/mlp.lua --quantize="$mode" --parallel=tp:2
refuse 1 "--quantize: expected none, int8w, w8a8 or int4w, found \"int4\"" models/mlp.lua --quantize=int4
echo "ok"
