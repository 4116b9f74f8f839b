#!/usr/bin/env bash
# tests/unit/w8a8_cuda.sh NNC: --quantize=w8a8 on the CUDA targets without a
# GPU (tests/meson.build runs it; bench/gpu_w8a8.sh runs the folders).
#  1. small GPT-2 (Conv1D weights [K, N], tied head, pre-norms) and BERT
#     (nn.Linear [N, K], q/k/v of one input, erf-GELU after its GEMM,
#     residuals) folders for cuda-sm90a and cuda-sm80 under --precision=bf16:
#     --emit=ir marks the linear weights int8 [N, K]; the tied wte stays
#     bf16; a weight whose K is not a multiple of 16 stays bf16; the .cu
#     quantizes the weights at load on the GPU, each GEMM's A in the norm
#     kernel where there is one (no separate layernorm before an int8 GEMM:
#     GPT-2's pre-norms), BERT's k and v reuse q's int8 rows, the erf-GELU
#     and the residuals run in the int8 GEMM's epilogue (no epilogue
#     kernel), bench --check has w8a8's tolerance; the folder builds with
#     nvcc -Werror for its architecture (skipped without nvcc); a small
#     LLaMA's SwiGLU (SiLU in the gate's epilogue, the gate product in the
#     epilogue kernel); f16 and f32 folders emit;
#  2. --explain says what is held;
#  3. the refusals, one a case, each with its message: targets without the
#     int8 GEMM (cuda-sm75, opencl), int4w on CUDA, --precision=fp8
#     with --quantize, --train, --parallel; none leaves an output folder
#     behind.
set -euo pipefail
nnc=${1:?usage: w8a8_cuda.sh NNC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

gpt2="-D layers=2 -D d=64 -D heads=2 -D vocab=101 -D ctx=32 -D batch=3"
bert="-D layers=2 -D hidden=64 -D heads=4 -D intermediate=128 -D vocab=31 -D positions=16 -D seq=16 -D batch=3"
q="--precision=bf16 --quantize=w8a8"

# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a $q $gpt2 --emit=ir > "$work/gpt2.ir"
[ "$(grep -c 'w8a8, \[N, K\]' "$work/gpt2.ir")" -eq 8 ] || fail "gpt2: expected 8 int8 weights (4 a layer)"
grep -q "param.*wte.weight bf16.*held as" "$work/gpt2.ir" && fail "gpt2: the tied wte must stay bf16"
grep -q "6-bit" "$work/gpt2.ir" && fail "gpt2: CUDA's w8a8 weights are on the 8-bit grid, not C SIMD's 6-bit"
# d = 72: c_attn, attn.c_proj and c_fc have K = 72 (not a multiple of 16) and stay bf16; mlp.c_proj's K is 288
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --target=cuda-sm90a $q ${gpt2/d=64/d=72} --emit=ir > "$work/gpt2_72.ir"
[ "$(grep -c 'w8a8, \[N, K\]' "$work/gpt2_72.ir")" -eq 2 ] || fail "gpt2 d=72: expected 2 int8 weights (mlp.c_proj's)"
grep -q "param.*h.0.mlp.c_proj.weight bf16\[288,72\].*w8a8" "$work/gpt2_72.ir" || fail "gpt2 d=72: mlp.c_proj not int8"
# shellcheck disable=SC2086
"$nnc" models/bert.lua --target=cuda-sm90a $q $bert --emit=ir > "$work/bert.ir"
[ "$(grep -c 'w8a8, \[N, K\]' "$work/bert.ir")" -eq 12 ] || fail "bert: expected 12 int8 weights (6 a layer)"

# shellcheck disable=SC2086
"$nnc" models/bert.lua --target=cuda-sm90a $q $bert --explain > "$work/explain.txt"
grep -q -- "--quantize=w8a8: 12 linear weights held as int8 \[N, K\] with a scale per output channel (K a multiple of 16), quantized when the f32 weights load, on the GPU" \
  "$work/explain.txt" || fail "--explain: $(grep quantize "$work/explain.txt")"

have_nvcc=1
command -v nvcc > /dev/null 2>&1 || { have_nvcc=0; echo "no nvcc: the folders are emitted, not built"; }
for target in cuda-sm90a cuda-sm80; do
  arch=$([ "$target" = cuda-sm90a ] && echo "-gencode arch=compute_90a,code=sm_90a" || echo "-gencode arch=compute_80,code=sm_80")
  for model in gpt2 bert; do
    dir="$work/${model}_$target"
    defines=$([ "$model" = gpt2 ] && echo "$gpt2" || echo "$bert")
    # shellcheck disable=SC2086
    "$nnc" "models/$model.lua" --target=$target $q $defines -o "$dir"
    cu="$dir/$model.cu"
    grep -q '#include "kernels/w8a8.cuh"' "$cu" || fail "$model $target: no kernels/w8a8.cuh"
    calls=$(grep -c "nnc_cuda_w8a8_gemm(f, s, &e)" "$cu")
    [ "$calls" -eq "$(grep -c 'w8a8, \[N, K\]' "$work/$model.ir")" ] || fail "$model $target: $calls int8 GEMMs"
    grep -q "if (qweight_layout\[i\].n) return upload_qweight(m, i, data, count);" "$cu" ||
      fail "$model $target: the weights are not quantized at load"
    grep -q "nnc_cuda_w8a8_weight(dev," "$cu" || fail "$model $target: no quantization on the GPU"
    # the plan's reason, in the launcher's first comment: sm_90a's kernel is gemm_tma8.cuh (wgmma) from
    # 1024 rows (w8a8.cuh's NNC_W8A8_TMA8_ROWS), sm_80's mma.sync
    kernel=$([ "$target" = cuda-sm90a ] && echo "TMA wgmma (mma.sync under 1024 rows)" || echo "mma.sync")
    [ "$(grep -c "/\* W8A8: A's rows to int8 with a scale each.*then nnc's int8 $kernel GEMM (int32 sums) with the row and channel scales, bias, activation and residual in its epilogue \*/" "$cu")" -eq "$calls" ] ||
      fail "$model $target: the int8 GEMMs' comments"
    # no GEMM of an int8 weight through cuBLASLt or an epilogue kernel
    both=$(awk '/^static int k[0-9]+\(/ { w = 0; o = 0 } /nnc_cuda_w8a8_gemm\(f/ { w = 1 }
                /nnrt_cuda_gemm_run|_post<<<|nnc_cuda_layernorm\(/ { o = 1 } w && o { print; w = 0 }' "$cu")
    [ -z "$both" ] || fail "$model $target: cuBLASLt, a layernorm or an epilogue kernel beside an int8 GEMM: $both"
    if [ "$model" = gpt2 ]; then
      # the pre-norms fuse into the quantization
      [ "$(grep -c "nnc_cuda_w8a8_rows<__nv_bfloat16>(NNC_QUANT_LAYERNORM" "$cu")" -eq 4 ] ||
        fail "$model $target: expected 4 layernorms fused into A's quantization (ln_1, ln_2 a layer)"
    else
      # k and v read q's int8 rows; the erf-GELU and the residuals in the epilogue
      [ "$(grep -c "A's int8 rows and scales: kernel [0-9]*'s, which read the same input just before" "$cu")" -eq 4 ] ||
        fail "$model $target: expected k and v to reuse q's int8 rows (2 a layer)"
      [ "$(grep -c "f.act = NNC_CUDA_ACT_GELU_ERF;" "$cu")" -eq 2 ] || fail "$model $target: the erf-GELU not in the epilogue"
      [ "$(grep -c "  f.residual = " "$cu")" -eq 4 ] || fail "$model $target: expected 4 residuals in the epilogue"
    fi
    grep -q "w8a8 GEMMs and bf16 storage against the float model: 5e-2" "$dir/bench_$model.c" ||
      fail "$model $target: not w8a8's tolerance"
    if [ $have_nvcc = 1 ]; then
      make -s -C "$dir" -j4 ARCH="$arch" "bench_$model" > "$dir.make.log" 2>&1 ||
        { tail -30 "$dir.make.log"; fail "$model $target: nvcc build"; }
    fi
  done
done
# LLaMA (rmsnorm, SwiGLU): the gate's SiLU in its GEMM's epilogue; up_proj's product times the gate is
# the epilogue kernel's (a residual that multiplies), after the int8 GEMM's bias-only epilogue
llama="-D layers=2 -D d=64 -D heads=4 -D kv_heads=2 -D ffn=128 -D vocab=101 -D ctx=32 -D batch=3"
# shellcheck disable=SC2086
"$nnc" models/llama.lua --target=cuda-sm90a $q $llama -o "$work/llama"
cu="$work/llama/llama.cu"
[ "$(grep -c "nnc_cuda_w8a8_gemm(f, s, &e)" "$cu")" -eq 15 ] || fail "llama: expected 15 int8 GEMMs (7 a layer, the head)"
[ "$(grep -c "f.act = NNC_CUDA_ACT_SILU;" "$cu")" -eq 2 ] || fail "llama: the gate's SiLU not in the epilogue"
[ "$(grep -c "the activation and the residual: the epilogue kernel's, after" "$cu")" -eq 2 ] ||
  fail "llama: up_proj's gate product not left to the epilogue kernel"

# f16 and f32 storage: the GEMMs write their dtype
for p in f16 f32; do
  # shellcheck disable=SC2086
  "$nnc" models/bert.lua --target=cuda-sm80 --precision=$p --quantize=w8a8 $bert -o "$work/bert_$p"
  ty=$([ $p = f16 ] && echo __half || echo float)
  [ "$(grep -c "nnc_cuda_w8a8_gemm_args<$ty> f = {};" "$work/bert_$p/bert.cu")" -eq 12 ] || fail "bert $p: GEMMs not of $ty"
done

# refusal EXIT PATTERN ARGS...: exits EXIT, says PATTERN, leaves no folder
refusal() {
  local want=$1 pattern=$2
  shift 2
  local out rc=0
  out=$("$nnc" "$@" -o "$work/refused" 2>&1) || rc=$?
  [ "$rc" -eq "$want" ] || { echo "$out"; fail "$*: exit $rc, expected $want"; }
  grep -qF -- "$pattern" <<< "$out" || { echo "$out"; fail "$*: expected a message with '$pattern'"; }
  [ ! -e "$work/refused" ] || fail "$*: left an output folder"
}
refusal 6 "--quantize=w8a8: target cuda-sm75 is not built for (its int8 kernels are sm_80 and up: int8 mma.sync m16n8k32); expected cuda-sm80 or newer" \
  models/mlp.lua --target=cuda-sm75 --precision=f16 --quantize=w8a8
refusal 6 "--quantize=w8a8: target opencl has no int8 GEMM yet; expected a c-simd target (c-simd, c-avx2, ...) or --quantize=none" \
  models/mlp.lua --target=opencl --quantize=w8a8
refusal 6 "--quantize=int4w: target opencl has no int4 GEMM yet; expected a c-simd target (c-simd, c-avx2, ...) or --quantize=none" \
  models/mlp.lua --target=opencl --quantize=int4w
refusal 1 "--precision=fp8: expected no --quantize (fp8 already holds the linear weights as e4m3), found --quantize=w8a8" \
  models/mlp.lua --target=cuda-sm90a --precision=fp8 --quantize=w8a8
refusal 1 "--quantize=w8a8: expected no --train" models/mlp.lua --target=cuda-sm90a --quantize=w8a8 --train
refusal 1 "--quantize=w8a8: expected no --parallel" models/mlp.lua --target=cuda-sm90a --quantize=w8a8 --parallel=tp:2
echo "ok"
