#!/usr/bin/env bash
# tests/unit/gelu_tanh.sh NNC [opencl]: --gelu=tanh (compiler/passes/gelu_tanh.c)
# end to end (tests/meson.build runs it).
#  1. The refusals: a value other than erf or tanh, f32 activations (the
#     tanh form's 4.7e-4 is above their rounding), --train; --emit=ir
#     shows the nodes as gelu(tanh) with the option only.
#  2. cuda-sm90a bf16 BERT: the intermediate GEMMs take cuBLASLt's GELU
#     epilogue (NNRT_EPI_GELU_TANH, a GELU_TANH act for the skinny branch)
#     and no erf kernel after them is left; without the option, the erf
#     kernels are there, calling nnc_gelu_erf16 in bf16 and erff in f32.
#     Text only (no GPU here).
#  3. opencl-cpu (PoCL) f16 and bf16 BERT at odd sizes: the GEMMs' activation
#     is the tanh form (NNC_ACT 3, erf's is 2), the folder's reference graph
#     (bert_graph.c) is the model as written (no GELU in the tanh form: the
#     driver hands the emitter the graph before the pass, also with
#     --hfuse=off, where nothing else keeps it), and bench --check passes.
set -euo pipefail
nnc=${1:?usage: gelu_tanh.sh NNC [opencl]}
opencl=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bert_odd="-D layers=2 -D hidden=36 -D heads=4 -D intermediate=50 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"

# 1. refusals: exit 1 and the message
refused() {   # expected-message args...
  local want=$1 out rc=0
  shift
  out=$("$nnc" models/bert.lua "$@" -o "$work/refused" 2>&1) || rc=$?
  [ "$rc" = 1 ] && grep -qF -- "$want" <<< "$out" || fail "nnc $*: exit $rc, expected 1 and \"$want\" ($out)"
  [ ! -e "$work/refused" ] || fail "nnc $*: wrote a folder"
}
refused '--gelu: expected --gelu=erf or --gelu=tanh, found "--gelu=maybe"' --gelu=maybe
refused '--gelu=tanh: expected --precision=bf16, f16 or fp8' --gelu=tanh
refused '--gelu=tanh: expected --precision=bf16, f16 or fp8' --gelu=tanh --target=cuda-sm90a --precision=tf32
refused '--gelu=tanh: expected no --train' --gelu=tanh --train --target=cuda-sm90a --precision=bf16
out=$("$nnc" models/bert.lua --gelu=tanh --emit=ir 2>&1) && fail "--emit=ir --gelu=tanh in f32 ran: $out"
grep -qF -- "--gelu=tanh: expected --precision=bf16, f16 or fp8" <<< "$out" || fail "--emit=ir in f32: no message ($out)"
echo "refusals: ok"

# the views show the tanh form (the IR's op column), and only with the option
n=$("$nnc" models/bert.lua --target=cuda-sm90a --precision=bf16 --gelu=tanh --emit=ir | grep -c " gelu(tanh) " || true)
[ "$n" = 6 ] || fail "--emit=ir --gelu=tanh: expected 6 gelu(tanh) nodes, found $n"
n=$("$nnc" models/bert.lua --target=cuda-sm90a --precision=bf16 --emit=ir | grep -c "gelu(tanh)" || true)
[ "$n" = 0 ] || fail "--emit=ir without --gelu: expected no gelu(tanh), found $n"

# 2. CUDA text
cuda() {   # dir gelu-form
  "$nnc" models/bert.lua --target=cuda-sm90a --precision=bf16 --gelu="$2" -o "$1" --explain > "$1.explain"
}
cuda "$work/cuda_tanh" tanh
cuda "$work/cuda_erf" erf
grep -q "^--gelu=tanh: 6 erf-form GELUs computed in the tanh form" "$work/cuda_tanh.explain" \
  || fail "cuda: expected --explain to name 6 GELUs in the tanh form: $(cat "$work/cuda_tanh.explain" | head -3)"
! grep -q "^--gelu=tanh" "$work/cuda_erf.explain" || fail "cuda: --gelu=erf explained as tanh"
n=$(grep -c "g.epilogue = NNRT_EPI_GELU_TANH;" "$work/cuda_tanh/bert.cu" || true)
[ "$n" = 6 ] || fail "cuda --gelu=tanh: expected 6 GEMMs with cuBLASLt's GELU epilogue, found $n"
n=$(grep -c "erff\|nnc_gelu_erf16" "$work/cuda_tanh/bert.cu" || true)
[ "$n" = 0 ] || fail "cuda --gelu=tanh: expected no erf left, found $n lines"
n=$(grep -c "sk.act = NNC_CUDA_ACT_GELU_TANH;" "$work/cuda_tanh/bert.cu" || true)
[ "$n" = 6 ] || fail "cuda --gelu=tanh: expected the skinny branch's act in the tanh form 6 times, found $n"
n=$(grep -cE "_post<<<|launch\(k[0-9]+_post," "$work/cuda_erf/bert.cu" || true)   # launched early (nnc_pdl::launch) since 4257cdb
[ "$n" = 6 ] || fail "cuda --gelu=erf: expected 6 erf kernels after cuBLASLt, found $n"
# 16-bit storage: the erf form as nnc_gelu_erf16 (nnc_cuda.cuh); f32 keeps erff
n=$(grep -c "return nnc_gelu_erf16(v);" "$work/cuda_erf/bert.cu" || true)
[ "$n" = 6 ] || fail "cuda bf16 --gelu=erf: expected the 6 kernels to call nnc_gelu_erf16, found $n"
"$nnc" models/bert.lua --target=cuda-sm90a --precision=f32 -o "$work/cuda_f32" > /dev/null
n=$(grep -c "erff(v \* 0.707106781f)" "$work/cuda_f32/bert.cu" || true)
m=$(grep -c "nnc_gelu_erf16" "$work/cuda_f32/bert.cu" || true)
[ "$n" = 6 ] && [ "$m" = 0 ] || fail "cuda f32: expected 6 GELUs with erff and no nnc_gelu_erf16, found $n and $m"
echo "cuda-sm90a: 6 GEMMs with the GELU epilogue, no erf kernel (6 without the option: nnc_gelu_erf16 in bf16, erff in f32)"

# 3. OpenCL folders, --check'ed against the model as written
if [ "$opencl" = opencl ]; then
  for p in f16 bf16; do
    for h in on off; do
      d="$work/ocl_${p}_$h"
      # shellcheck disable=SC2086
      "$nnc" models/bert.lua $bert_odd --target=opencl-cpu --precision=$p --gelu=tanh --hfuse=$h -o "$d"
      n=$(grep -c "^#define NNC_ACT 3" "$d/bert.cl" || true)
      [ "$n" -ge 1 ] && ! grep -q "^#define NNC_ACT 2" "$d/bert.cl" \
        || fail "opencl $p hfuse=$h: expected the GEMMs' activation 3 (GELU, tanh form) only"
      n=$(grep -c "gelu_tanh = 1" "$d/bert_graph.c" || true)
      [ "$n" = 0 ] || fail "opencl $p hfuse=$h: the reference graph holds $n GELUs in the tanh form (expected the model as written)"
      make -s -C "$d" -j2 bench_bert > "$d.make.log" 2>&1 || { cat "$d.make.log"; fail "opencl $p: build"; }
      out=$("$d/bench_bert" --check --runs 1 --warmup 0 --no-peaks -d B=3 -d T=7 2>&1) \
        || { echo "$out"; fail "opencl $p hfuse=$h: --check"; }
      grep "max relative error" <<< "$out" | sed "s/^/opencl $p hfuse=$h: /"
    done
  done
else
  echo "no OpenCL: the opencl-cpu folders are skipped"
fi
echo "gelu_tanh: all passed"
