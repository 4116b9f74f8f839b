#!/usr/bin/env bash
# tests/unit/quantize_int4_c_simd.sh NNC: --quantize=int4w on c-simd end to
# end (tests/meson.build runs it). For mlp, bert and gpt2 (the default mlp
# and bert, odd small ones whose K is cut by the 128-k groups: 132, 150,
# 261, 600):
#  1. random weights scaled like PyTorch's init: bench --check against the
#     float64 reference of the float model passes (int4w's tolerance on the
#     max relative error, 2e-1) and each output's cosine is >= 0.995 (4 bits and a
#     scale per 128 weights: 0.9975 to 0.9997 measured, bench/NOTES.md);
#  2. weights already on each group's int4 grid (nnc weights
#     --quantize=int4w): the folder holds them exactly, so the check is the
#     kernels' against the dequantized weights, at f32's 1e-5.
# Then what is marked (--emit=ir) and the refusals.
set -euo pipefail
nnc=${1:?usage: quantize_int4_c_simd.sh NNC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# name model defines
models=(
  "mlp mlp"
  "mlp_odd mlp -D batch=5 -D pixels=13 -D hidden1=150 -D hidden2=7 -D classes=3"
  "bert bert"
  "bert_odd bert -D layers=2 -D hidden=132 -D heads=4 -D intermediate=261 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"
  "gpt2_odd gpt2 -D layers=2 -D heads=3 -D d=150 -D vocab=97 -D ctx=19 -D batch=3"
)
for spec in "${models[@]}"; do
  read -r name model defines <<< "$spec"
  dir="$work/$name"
  # shellcheck disable=SC2086
  "$nnc" "models/$model.lua" --quantize=int4w $defines -o "$dir"
  grep -q "b_q4" "$dir/$model.c" || fail "$name: no GEMM reads an int4 weight"
  make -s -C "$dir" -j2 "bench_$model" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; fail "$name: build"; }
  out=$("$dir/bench_$model" --check --runs 1 --warmup 0 --no-peaks 2>&1) || { echo "$out"; fail "$name: --check"; }
  lines=$(grep "max relative error\|top-1" <<< "$out")
  echo "$name (float weights): $lines"
  awk '{ for (i = 1; i < NF; i++) if ($i == "cosine") { c = $(i + 1) + 0; if (c < 0.995) bad = 1 } } END { exit bad }' \
    <<< "$lines" || fail "$name: cosine below 0.995"
  # shellcheck disable=SC2086
  "$nnc" weights "models/$model.lua" --quantize=int4w $defines -o "$dir/grid.safetensors"
  out=$("$dir/bench_$model" --check --runs 1 --warmup 0 --no-peaks --weights "$dir/grid.safetensors" 2>&1) \
    || { echo "$out"; fail "$name: --check on the int4 grid"; }
  lines=$(grep "max relative error" <<< "$out")
  echo "$name (int4-grid weights): $lines"
  awk '{ for (i = 1; i < NF; i++) if ($i == "error") { e = $(i + 1); sub(",", "", e); if (e + 0 > 1e-5) bad = 1 } } END { exit bad }' \
    <<< "$lines" || fail "$name: the int4 kernels are not within 1e-5 of the dequantized reference"
done

# the same 36 linear weights as int8w, held as int4; gpt2's tied wte stays f32
ir=$("$nnc" models/bert.lua --quantize=int4w --emit=ir)
[ "$(grep -c 'held as int4, a scale per 128 .*--quantize=int4w' <<< "$ir")" = 36 ] || fail "bert: expected 36 int4 weights"
! grep "embeddings.*held as int4\|LayerNorm.*held as int4\|bias.*held as int4" <<< "$ir" || fail "bert: a non-linear weight held as int4"
ir=$("$nnc" models/gpt2.lua --quantize=int4w --emit=ir -D layers=1)
! grep "wte.*held as int4" <<< "$ir" || fail "gpt2: the tied wte held as int4"
grep -q "c_fc.weight.*held as int4" <<< "$ir" || fail "gpt2: c_fc not held as int4"

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
refuse 6 "--quantize=int4w: target cuda-sm80 has no int4 GEMM yet" models/mlp.lua --quantize=int4w --target=cuda-sm80
refuse 6 "--quantize=int4w: target opencl has no int4 GEMM yet" models/mlp.lua --quantize=int4w --target=opencl
refuse 1 "--quantize=int4w: expected no --train" models/mlp.lua --quantize=int4w --train
refuse 1 "--quantize=int4w: expected no --parallel" models/mlp.lua --quantize=int4w --parallel=tp:2
echo "ok"
