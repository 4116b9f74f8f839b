#!/usr/bin/env bash
# tests/unit/fp8_cuda.sh NNC: --precision=fp8 on the CUDA targets without a
# GPU (tests/meson.build runs it; bench/gpu_fp8.sh runs the folders).
#  1. small GPT-2 (Conv1D weights [K, N], tied head) and BERT (nn.Linear
#     [N, K], erf-GELU after its GEMM) folders for cuda-sm90a and cuda-sm89:
#     --emit=ir marks the linear weights e4m3; the tied wte keeps bf16 (its
#     vocabulary of 101 is not a multiple of 16), and with a vocabulary of
#     112 gets an e4m3 copy for the head after its bf16 values (which the
#     gather reads); the .cu quantizes each GEMM's A in the norm kernel where there is one
#     (no separate layernorm before an FP8 GEMM: GPT-2's pre-norms), and the folder builds
#     with nvcc for its architecture (skipped without nvcc);
#  2. nnc calibrate on the small GPT-2 (random weights, a batch of ids): one
#     input_scale a e4m3 weight (max |A| / 448) beside the weights' tensors,
#     a percentile below the max, a second calibration of its own output
#     replacing the scales, the folders' loader reading them; its refusals;
#  3. the refusals, one a case, each with its message: targets without FP8
#     tensor cores (c-simd, opencl, cuda-sm80, cuda-sm86), --train,
#     --quantize, --parallel; none leaves an output folder behind.
set -euo pipefail
nnc=${1:?usage: fp8_cuda.sh NNC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

gpt2="-D layers=2 -D d=64 -D heads=2 -D vocab=101 -D ctx=32 -D batch=3"
bert="-D layers=2 -D hidden=64 -D heads=4 -D intermediate=128 -D vocab=31 -D positions=16 -D seq=16 -D batch=3"

# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a --precision=fp8 $gpt2 --emit=ir > "$work/gpt2.ir"
[ "$(grep -c 'held as e4m3' "$work/gpt2.ir")" -eq 8 ] || fail "gpt2: expected 8 e4m3 weights (4 a layer)"
grep -q "param.*wte.weight.*e4m3" "$work/gpt2.ir" && fail "gpt2: the tied wte of 101 rows must stay bf16"
# a vocabulary of a multiple of 16: the head reads an e4m3 copy of wte, the gather its bf16 values
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a --precision=fp8 ${gpt2/vocab=101/vocab=112} --emit=ir > "$work/gpt2_112.ir"
grep -q "param.*wte.weight bf16\[112,64\].*tied: bf16 for its other readers, and an e4m3 copy" "$work/gpt2_112.ir" ||
  fail "gpt2 vocab 112: wte must stay bf16 with an e4m3 copy for the head"
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a --precision=fp8 ${gpt2/vocab=101/vocab=112} -o "$work/gpt2_112"
cu="$work/gpt2_112/gpt2.cu"
[ "$(grep -c "nnc_cuda_gemm_fp8(m->blas" "$cu")" -eq 9 ] || fail "gpt2 vocab 112: expected 9 FP8 GEMMs (the head's too)"
# the copy after the bf16 values (112 x 64 x 2 bytes), its scales after it (112 x 64)
grep -q "{112, 64, 0, 14336, 21504},   /\* wte.weight: tied" "$cu" || fail "gpt2 vocab 112: wte's copy's layout"
grep -q "if (fp8_layout\[i\].q) return upload_fp8(m, i, data, count);" "$cu" || fail "gpt2 vocab 112: no copy at load"
if command -v nvcc > /dev/null 2>&1; then
  make -s -C "$work/gpt2_112" -j2 ARCH="-gencode arch=compute_90a,code=sm_90a" bench_gpt2 > "$work/gpt2_112.make.log" 2>&1 ||
    { tail -30 "$work/gpt2_112.make.log"; fail "gpt2 vocab 112: nvcc build"; }
fi
# shellcheck disable=SC2086
"$nnc" models/bert.lua --target=cuda-sm90a --precision=fp8 $bert --emit=ir > "$work/bert.ir"
[ "$(grep -c 'held as e4m3' "$work/bert.ir")" -eq 12 ] || fail "bert: expected 12 e4m3 weights (6 a layer)"

have_nvcc=1
command -v nvcc > /dev/null 2>&1 || { have_nvcc=0; echo "no nvcc: the folders are emitted, not built"; }
for target in cuda-sm90a cuda-sm89; do
  arch=$([ "$target" = cuda-sm90a ] && echo "-gencode arch=compute_90a,code=sm_90a" || echo "-gencode arch=compute_89,code=sm_89")
  for model in gpt2 bert; do
    dir="$work/${model}_$target"
    defines=$([ "$model" = gpt2 ] && echo "$gpt2" || echo "$bert")
    # shellcheck disable=SC2086
    "$nnc" "models/$model.lua" --target=$target --precision=fp8 $defines -o "$dir"
    cu="$dir/$model.cu"
    grep -q '#include "kernels/fp8.cuh"' "$cu" || fail "$model $target: no kernels/fp8.cuh"
    calls=$(grep -c "nnc_cuda_gemm_fp8(m->blas" "$cu")
    [ "$calls" -eq "$(grep -c 'held as e4m3' "$work/$model.ir")" ] || fail "$model $target: $calls FP8 GEMMs"
    # GPT-2's pre-norms fuse into the quantization (BERT's post-norms are stored: they are the residual too)
    if [ "$model" = gpt2 ]; then
      grep -q "nnc_cuda_fp8_rows<__nv_bfloat16>(NNC_FP8_LAYERNORM" "$cu" || fail "$model $target: no fused layernorm"
    fi
    both=$(awk '/^static int k[0-9]+\(/ { f = 0; n = 0 } /nnc_cuda_layernorm\(/ { n = 1 } /nnc_cuda_gemm_fp8\(m->blas/ { f = 1 }
                f && n { print; f = 0 }' "$cu")
    [ -z "$both" ] || fail "$model $target: a layernorm kernel before an FP8 GEMM"
    grep -q "upload_fp8(m, i, data, count)" "$cu" || fail "$model $target: the weights are not quantized at load"
    grep -q "fp8 GEMMs against the float model" "$dir/bench_$model.c" || fail "$model $target: not fp8's tolerance"
    if [ $have_nvcc = 1 ]; then
      make -s -C "$dir" -j2 ARCH="$arch" "bench_$model" > "$dir.make.log" 2>&1 || { tail -30 "$dir.make.log"; fail "$model $target: nvcc build"; }
    fi
  done
done

# nnc calibrate: the weights' tensors plus a scale a e4m3 weight
# shellcheck disable=SC2086
"$nnc" weights models/gpt2.lua $gpt2 -o "$work/w.safetensors"
python3 - "$work/data.safetensors" <<'EOF'
import json, struct, sys
ids = [(i * 37 + 11) % 101 for i in range(2 * 9)]
data = struct.pack("<%di" % len(ids), *ids)
hdr = json.dumps({"ids": {"dtype": "I32", "shape": [2, 9], "data_offsets": [0, len(data)]}}).encode()
hdr += b" " * ((8 - len(hdr) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
EOF
# the tensors of a safetensors file: name, dtype, shape (and the value of a one-float tensor) a line
tensors() {
  python3 - "$1" <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
for name, t in sorted(json.loads(raw[8:8 + n]).items()):
    if name == "__metadata__": continue
    a, b = t["data_offsets"]
    vals = struct.unpack("<f", raw[8 + n + a:8 + n + b]) if t["dtype"] == "F32" and b - a == 4 else ()
    print(name, t["dtype"], t["shape"], *vals)
EOF
}
# shellcheck disable=SC2086
cal() { "$nnc" calibrate models/gpt2.lua $gpt2 --weights "$1" --data "$work/data.safetensors" -o "$2" "${@:3}"; }
cal "$work/w.safetensors" "$work/cal.safetensors" > "$work/cal.log" || fail "calibrate"
[ "$(grep -c '\.input_scale ' "$work/cal.log")" -eq 8 ] || fail "calibrate: expected 8 scales"
tensors "$work/w.safetensors" > "$work/w.txt"
tensors "$work/cal.safetensors" > "$work/cal.txt"
[ "$(grep -c '\.input_scale F32 \[1\] ' "$work/cal.txt")" -eq 8 ] || fail "calibrate: expected 8 input_scale tensors"
grep -v input_scale "$work/cal.txt" | cmp -s - "$work/w.txt" || fail "calibrate: the weights' tensors changed"
grep -q "^h.0.attn.c_attn.weight.input_scale " "$work/cal.txt" || fail "calibrate: no scale for h.0.attn.c_attn.weight"
! grep -q "^wte.weight.input_scale" "$work/cal.txt" || fail "calibrate: a scale for the bf16 wte"
# the scale is max |A| / 448 as printed ("NAME SCALE (max |A| V of N values)")
awk '{ v = $5; if ($2 <= 0 || $2 * 448 < v * 0.999 || $2 * 448 > v * 1.001) bad = 1 } END { exit bad }' \
  "$work/cal.log" || fail "calibrate: a scale is not max |A| / 448"
cal "$work/w.safetensors" "$work/p90.safetensors" --method=percentile:90 > "$work/p90.log" || fail "calibrate percentile"
# field 10: the percentile line's scale after the 8 fields of the max's
paste -d ' ' "$work/cal.log" "$work/p90.log" | awk '{ if (!($10 < $2)) bad = 1 } END { exit bad }' ||
  fail "calibrate: percentile:90 not below the max"
# its own output again: the scales replaced, not added
cal "$work/cal.safetensors" "$work/cal2.safetensors" > /dev/null || fail "calibrate of a calibrated file"
tensors "$work/cal2.safetensors" | cmp -s - "$work/cal.txt" || fail "calibrate: recalibrating changed the file"
grep -q "load_input_scales(m, st)" "$work/gpt2_cuda-sm90a/gpt2.cu" || fail "the folder does not read input_scale"
out=$(cal "$work/w.safetensors" "$work/x.safetensors" --method=percentile:0 2>&1) && fail "percentile:0 accepted"
grep -q "expected absmax or percentile:P with 0 < P <= 100" <<< "$out" || fail "percentile:0: $out"
# shellcheck disable=SC2086
out=$("$nnc" calibrate models/gpt2.lua $gpt2 --weights "$work/w.safetensors" --data "$work/w.safetensors" \
      -o "$work/x.safetensors" 2>&1) && fail "data without the input accepted"
grep -q "expected the input ids, found none" <<< "$out" || fail "data without ids: $out"
# shellcheck disable=SC2086
out=$("$nnc" calibrate models/gpt2.lua $gpt2 --data "$work/data.safetensors" -o "$work/x.safetensors" 2>&1) &&
  fail "calibrate without --weights accepted"
grep -q "nnc calibrate: expected MODEL.lua --weights" <<< "$out" || fail "no --weights: $out"
[ ! -e "$work/x.safetensors" ] || fail "a refused calibration wrote its output"
# the scales are of the model as written: --gelu=tanh (a compile option) is refused, not ignored
# shellcheck disable=SC2086
out=$("$nnc" calibrate models/gpt2.lua $gpt2 --weights "$work/w.safetensors" --data "$work/data.safetensors" \
      --gelu=tanh -o "$work/x.safetensors" 2>&1) && fail "calibrate --gelu=tanh accepted"
grep -q "nnc calibrate: expected MODEL.lua --weights" <<< "$out" || fail "calibrate --gelu=tanh: $out"
[ ! -e "$work/x.safetensors" ] || fail "a refused calibration wrote its output"

# refusal CMD... EXIT PATTERN: exits EXIT, says PATTERN, leaves no folder
refusal() {
  local want=$1 pattern=$2
  shift 2
  local out rc=0
  out=$("$nnc" "$@" -o "$work/refused" 2>&1) || rc=$?
  [ "$rc" -eq "$want" ] || { echo "$out"; fail "$*: exit $rc, expected $want"; }
  grep -q -- "$pattern" <<< "$out" || { echo "$out"; fail "$*: expected a message matching '$pattern'"; }
  [ ! -e "$work/refused" ] || fail "$*: left an output folder"
}
for t in c-simd opencl cuda-sm80 cuda-sm86; do
  refusal 6 "--precision=fp8: target $t has no FP8 tensor cores; expected cuda-sm89, cuda-sm90 or cuda-sm90a" \
    models/mlp.lua --target=$t --precision=fp8
done
refusal 1 "--precision=fp8: expected no --train" models/mlp.lua --target=cuda-sm90a --precision=fp8 --train
refusal 1 "--precision=fp8: expected no --quantize (fp8 already holds the linear weights as e4m3), found --quantize=int8w" \
  models/mlp.lua --target=cuda-sm90a --precision=fp8 --quantize=int8w
refusal 1 "--precision=fp8: expected no --parallel" models/mlp.lua --target=cuda-sm90a --precision=fp8 --parallel=tp:2
echo "ok"
