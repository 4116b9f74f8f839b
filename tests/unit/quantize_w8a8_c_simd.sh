#!/usr/bin/env bash
# tests/unit/quantize_w8a8_c_simd.sh NNC: --quantize=w8a8 on c-simd end to
# end (tests/meson.build runs it). For mlp and bert (the default models and
# odd small ones), random weights scaled like PyTorch's init: bench --check
# against the float64 reference of the float model passes (w8a8's 5e-2 on
# the max relative error) and each output's cosine is >= 0.999. There is no
# exact check on grid weights as int8w has: the activations are quantized
# as the model runs, which the reference does not do (test_simd_gemm_w8a8
# checks the GEMM against its dequantized operands). Then what is marked
# (--emit=ir) and the refusals.
set -euo pipefail
nnc=${1:?usage: quantize_w8a8_c_simd.sh NNC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

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
  "$nnc" "models/$model.lua" --quantize=w8a8 $defines -o "$dir"
  grep -q "b_w8a8" "$dir/$model.c" || fail "$name: no GEMM reads a w8a8 weight"
  make -s -C "$dir" -j2 "bench_$model" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; fail "$name: build"; }
  out=$("$dir/bench_$model" --check --runs 1 --warmup 0 --no-peaks 2>&1) || { echo "$out"; fail "$name: --check"; }
  lines=$(grep "max relative error" <<< "$out")
  echo "$name: $lines"
  awk '{ for (i = 1; i < NF; i++) if ($i == "cosine") { c = $(i + 1) + 0; if (c < 0.999) bad = 1 } } END { exit bad }' \
    <<< "$lines" || fail "$name: cosine below 0.999"
done

# the same 36 linear weights as int8w, marked w8a8
ir=$("$nnc" models/bert.lua --quantize=w8a8 --emit=ir)
[ "$(grep -c 'held as int8.*--quantize=w8a8' <<< "$ir")" = 36 ] || fail "bert: expected 36 w8a8 weights"

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
refuse 6 "--quantize=w8a8: target cuda-sm80 has no int8 GEMM yet" models/mlp.lua --quantize=w8a8 --target=cuda-sm80
refuse 6 "--quantize=w8a8: target opencl has no int8 GEMM yet" models/mlp.lua --quantize=w8a8 --target=opencl
refuse 1 "--quantize=w8a8: expected no --train" models/mlp.lua --quantize=w8a8 --train
refuse 1 "--quantize=w8a8: expected no --parallel" models/mlp.lua --quantize=w8a8 --parallel=tp:2
echo "ok"
