#!/usr/bin/env bash
# tests/unit/weight_only_cuda.sh NNC MODE: --quantize=int8w or int4w (MODE) on
# the CUDA targets without a GPU (tests/meson.build runs it for both;
# bench/NOTES.md has the H200 runs). Below, "int8" stands for MODE's int8 or
# int4, nnc_cuda_w8_gemm for nnc_cuda_w4_gemm, and 16 for int4's 32.
#  1. small GPT-2 (Conv1D weights [K, N], tied head, pre-norms) for
#     cuda-sm90a and cuda-sm80 and BERT (nn.Linear [N, K], erf-GELU after
#     its GEMM, residuals) under --precision=bf16: --emit=ir marks the
#     linear weights int8w; the tied wte stays bf16; a weight whose K is not
#     a multiple of 16 stays bf16; the .cu quantizes the weights at load on
#     the GPU and reads quantized checkpoints of mode int8w; each int8 GEMM
#     is nnc_cuda_w8_gemm on A as it is (no row quantization), after the
#     layernorm where one comes first, with the bias, activation and
#     residual in its epilogue, except what cuBLASLt's epilogue lacks (the
#     erf-GELU, SiLU, the gate product: the epilogue kernel's, as for the
#     float GEMM, so that many rows stay on cuBLASLt); bench --check has int8
#     weights' tolerance; the folder builds with nvcc -Werror for its
#     architecture (skipped without nvcc); a --generate folder (decode
#     steps: the few-rows path) builds; a small LLaMA (rmsnorm, SwiGLU's
#     SiLU and gate product in the epilogue kernel, f32 logits) builds; f16 and f32
#     folders emit their types; cuda-sm75 is refused; the weights block
#     holds the quantized bytes; _save_quantized is declared and the
#     benchmark's --save-quantized wired;
#  2. --explain says what is held.
set -euo pipefail
nnc=${1:?usage: weight_only_cuda.sh NNC int8w|int4w}
mode=${2:?usage: weight_only_cuda.sh NNC int8w|int4w}
case $mode in
  int8w) bits=int8 w=w8 tol=5e-2 form='{"int8w", 8, 0, 127}' quant=nnc_cuda_w8a8_weight
         held="int8 \[N, K\] with a scale per output channel (K a multiple of 16)" ;;
  int4w) bits=int4 w=w4 tol=2e-1 form='{"int4w", 4, 128, 7}' quant=nnc_cuda_w4_weight
         held="int4 \[N, K \/ 2\] with a scale per group of 128 k of an output channel (K a multiple of 32)" ;;
  *) echo "usage: weight_only_cuda.sh NNC int8w|int4w"; exit 2 ;;
esac
MODE=$(tr a-z A-Z <<< "$mode")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

gpt2="-D layers=2 -D d=64 -D heads=2 -D vocab=101 -D ctx=32 -D batch=3"
bert="-D layers=2 -D hidden=64 -D heads=4 -D intermediate=128 -D vocab=31 -D positions=16 -D seq=16 -D batch=3"
q="--precision=bf16 --quantize=$mode"

# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a $q $gpt2 --emit=ir > "$work/gpt2.ir"
[ "$(grep -c "held as $bits.*--quantize=$mode" "$work/gpt2.ir")" -eq 8 ] || fail "gpt2: expected 8 $bits weights (4 a layer)"
grep -q "param.*wte.weight bf16.*held as" "$work/gpt2.ir" && fail "gpt2: the tied wte must stay bf16"
# d = 72: c_attn, attn.c_proj and c_fc have K = 72 (not a multiple of 16 or 32) and stay bf16; mlp.c_proj's 288 is
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a $q ${gpt2/d=64/d=72} --emit=ir > "$work/gpt2_72.ir"
[ "$(grep -c "held as $bits" "$work/gpt2_72.ir")" -eq 2 ] || fail "gpt2 d=72: expected 2 $bits weights (mlp.c_proj's)"
# shellcheck disable=SC2086
"$nnc" models/bert.lua --target=cuda-sm90a $q $bert --emit=ir > "$work/bert.ir"
[ "$(grep -c "held as $bits.*--quantize=$mode" "$work/bert.ir")" -eq 12 ] || fail "bert: expected 12 $bits weights (6 a layer)"

# shellcheck disable=SC2086
"$nnc" models/bert.lua --target=cuda-sm90a $q $bert --explain > "$work/explain.txt"
grep -q -- "--quantize=$mode: 12 linear weights held as $held, quantized when the f32 weights load, on the GPU (--emit=ir marks them)$" \
  "$work/explain.txt" || fail "--explain: $(grep quantize "$work/explain.txt")"

have_nvcc=1
command -v nvcc > /dev/null 2>&1 || { have_nvcc=0; echo "no nvcc: the folders are emitted, not built"; }
build() {   # build DIR ARCH TARGET...
  local dir=$1 arch=$2
  shift 2
  [ $have_nvcc = 1 ] || return 0
  make -s -C "$dir" -j4 ARCH="$arch" "$@" > "$dir.make.log" 2>&1 || { tail -30 "$dir.make.log"; fail "$dir: nvcc build"; }
}
for target in cuda-sm90a cuda-sm80; do
  arch=$([ "$target" = cuda-sm90a ] && echo "-gencode arch=compute_90a,code=sm_90a" || echo "-gencode arch=compute_80,code=sm_80")
  for model in gpt2 bert; do
    dir="$work/${model}_$target"
    defines=$([ "$model" = gpt2 ] && echo "$gpt2" || echo "$bert")
    # shellcheck disable=SC2086
    "$nnc" "models/$model.lua" --target=$target $q $defines -o "$dir"
    cu="$dir/$model.cu"
    grep -q '#include "kernels/w8a8.cuh"' "$cu" || fail "$model $target: no kernels/w8a8.cuh"
    calls=$(grep -c "if (nnc_cuda_${w}_gemm(m->blas, f, ws, s, &e))" "$cu")
    [ "$calls" -eq "$(grep -c "held as $bits" "$work/$model.ir")" ] || fail "$model $target: $calls $mode GEMMs"
    grep -q "nnc_cuda_w8a8_rows\|nnc_cuda_w8a8_gemm(" "$cu" && fail "$model $target: $mode quantizes no rows of A"
    grep -q "if (qweight_layout\[i\].n) return upload_qweight(m, i, data, count);" "$cu" ||
      fail "$model $target: the weights are not quantized at load"
    grep -q "$quant(dev," "$cu" || fail "$model $target: no quantization on the GPU"
    grep -qF "static const nnc_weights_qform qweight_form = $form;" "$cu" ||
      fail "$model $target: quantized checkpoints of another mode than $mode"
    [ "$(grep -c "/\* $MODE: .*the $bits weight read as it is for a few rows" "$cu")" -eq "$calls" ] ||
      fail "$model $target: the $mode GEMMs' comments"
    # the quantized checkpoint: <model>_save_quantized, and the benchmark's --save-quantized
    grep -q "^int gpt2_save_quantized(gpt2_model \*m, const char \*path);\|^int bert_save_quantized(bert_model \*m, const char \*path);" \
      "$dir/$model.h" || fail "$model $target: no _save_quantized"
    grep -q "NULL, b_save_quantized,   /\* no collectives; a quantized checkpoint \*/" "$dir/bench_$model.c" ||
      fail "$model $target: bench without --save-quantized"
    # no weight-only GEMM beside a cuBLASLt call of the folder's own in its launcher
    both=$(awk '/^static int k[0-9]+\(/ { w = 0; o = 0 } /nnc_cuda_w[48]_gemm\(m->blas/ { w = 1 }
                /nnrt_cuda_gemm_run/ { o = 1 } w && o { print; w = 0 }' "$cu")
    [ -z "$both" ] || fail "$model $target: cuBLASLt beside a $mode GEMM: $both"
    if [ "$model" = gpt2 ]; then
      # ln_1 before c_attn and ln_2 before c_fc: the rows normalized into the workspace first
      [ "$(grep -c "$MODE: A's rows normalized, then" "$cu")" -eq 4 ] || fail "$model $target: expected 4 layernorms before $mode GEMMs"
      # the tanh GELU and the residuals are cuBLASLt's too: no epilogue kernel
      [ "$(grep -c "epilogue kernel's, after" "$cu")" -eq 0 ] || fail "$model $target: an epilogue kernel after a $mode GEMM"
      [ "$(grep -c "f.act = NNC_CUDA_ACT_GELU_TANH;" "$cu")" -eq 2 ] || fail "$model $target: the GELU not in the epilogue"
    else
      # the erf-GELU (cuBLASLt has none) is the epilogue kernel's; the residuals are the GEMM's
      [ "$(grep -c "f.act = NNC_CUDA_ACT_GELU_ERF;" "$cu")" -eq 0 ] || fail "$model $target: the erf-GELU in the $mode GEMM"
      [ "$(grep -c "the activation and the residual: the epilogue kernel's, after" "$cu")" -eq 2 ] ||
        fail "$model $target: the erf-GELU not left to the epilogue kernel"
      [ "$(grep -c "  f.residual = " "$cu")" -eq 4 ] || fail "$model $target: expected 4 residuals in the epilogue"
    fi
    grep -q "$bits weights and bf16 storage against the float model: $tol" "$dir/bench_$model.c" ||
      fail "$model $target: not $bits weights' tolerance"
    build "$dir" "$arch" "bench_$model"
  done
done
# the weights block holds the quantized bytes (and scales), not the bf16 ones
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a --precision=bf16 $gpt2 -o "$work/gpt2_bf16"
wb() { sed -n 's/^#define WEIGHT_BYTES \([0-9]*\)u$/\1/p' "$1/gpt2.cu"; }
float_bytes=$(wb "$work/gpt2_bf16") held_bytes=$(wb "$work/gpt2_cuda-sm90a")
[ -n "$held_bytes" ] && [ "$held_bytes" -lt $((float_bytes * 3 / 4)) ] ||
  fail "gpt2: the weights block takes $held_bytes bytes, bf16's $float_bytes"
# a decoder for generation: its decode steps are the few-rows path
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a $q $gpt2 --generate -o "$work/gpt2_gen"
# one launcher a GEMM serves prefill and decode alike: 4 weight-only GEMMs a layer
[ "$(grep -c "if (nnc_cuda_${w}_gemm(m->blas, f, ws, s, &e))" "$work/gpt2_gen/gpt2.cu")" -eq 8 ] || fail "gpt2 --generate: $mode GEMMs"
build "$work/gpt2_gen" "-gencode arch=compute_90a,code=sm_90a" generate_gpt2

# LLaMA (rmsnorm, SwiGLU, an untied head writing the f32 logits): the final rmsnorm's rows first, the gate's
# SiLU and up_proj's product times the gate in the epilogue kernel after their GEMMs (cuBLASLt has neither)
llama="-D layers=2 -D d=64 -D heads=4 -D kv_heads=2 -D ffn=128 -D vocab=101 -D ctx=32 -D batch=3"
# shellcheck disable=SC2086
"$nnc" models/llama.lua --target=cuda-sm90a $q $llama -o "$work/llama"
cu="$work/llama/llama.cu"
[ "$(grep -c "if (nnc_cuda_${w}_gemm(m->blas, f, ws, s, &e))" "$cu")" -eq 15 ] || fail "llama: expected 15 $mode GEMMs (7 a layer, the head)"
[ "$(grep -c "nnc_cuda_rmsnorm(M, K," "$cu")" -eq 1 ] || fail "llama: the final rmsnorm's rows first in the head's launcher"
[ "$(grep -c "f.act = NNC_CUDA_ACT_SILU;" "$cu")" -eq 0 ] || fail "llama: the gate's SiLU in the $mode GEMM"
[ "$(grep -c "the activation and the residual: the epilogue kernel's, after" "$cu")" -eq 4 ] ||
  fail "llama: the gate's SiLU and up_proj's gate product not left to the epilogue kernel"
grep -q "nnc_cuda_${w}_gemm_args<__nv_bfloat16, float> f = {};" "$cu" || fail "llama: the head's f32 logits"
build "$work/llama" "-gencode arch=compute_90a,code=sm_90a" bench_llama

# before sm_80: refused (the folder carries the int8 kernels of sm_80 and up), no folder left behind
rc=0
out=$("$nnc" models/mlp.lua --target=cuda-sm75 --precision=f16 --quantize=$mode -o "$work/refused" 2>&1) || rc=$?
[ "$rc" -eq 6 ] || { echo "$out"; fail "cuda-sm75 $mode: exit $rc, expected 6"; }
grep -qF -- "--quantize=$mode: target cuda-sm75 is not built for (its $bits kernels are sm_80 and up); expected cuda-sm80 or newer" <<< "$out" ||
  { echo "$out"; fail "cuda-sm75 $mode: the message"; }
[ ! -e "$work/refused" ] || fail "cuda-sm75 $mode: left an output folder"

# f16 and f32 storage: the GEMMs read and write their dtype
for p in f16 f32; do
  # shellcheck disable=SC2086
  "$nnc" models/bert.lua --target=cuda-sm80 --precision=$p --quantize=$mode $bert -o "$work/bert_$p"
  ty=$([ $p = f16 ] && echo __half || echo float)
  [ "$(grep -c "nnc_cuda_${w}_gemm_args<$ty, $ty> f = {};" "$work/bert_$p/bert.cu")" -eq 12 ] || fail "bert $p: GEMMs not of $ty"
done
echo "ok"
