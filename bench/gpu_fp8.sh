#!/usr/bin/env bash
# bench/gpu_fp8.sh: --precision=fp8 on a GPU (issue 17 part 3), in one call.
#
# Here (with Lua and nnc):   NNC=build/h-fp8/compiler/nnc bash bench/gpu_fp8.sh generate
#   small GPT-2 and BERT fp8 folders (cuda-sm90a), and GPT-2 124M at B=8
#   T=1024 in bf16 and fp8 (cuda-sm90a), into build/gpu_fp8/; with
#   NNC_BASE=<an nnc built from another commit>, that nnc's fp8 GPT-2 124M
#   too (gpt2_fp8_base: checked and timed beside, the same run's before).
# On the GPU machine:        bash bench/gpu_fp8.sh run
#   1. tests/gpu/test_fp8.cu built (sm_90a: with nnc's wgmma FP8 GEMM) and
#      run with --time: the e4m3 kernels bit for bit against runtime/half.c,
#      the FP8 GEMM every way (cuBLASLt with row/channel scale vectors, the
#      fallback, our kernel) against float64, our kernel alone at odd sizes
#      with every epilogue and output type, and GPT-2's GEMMs at B=8 T=1024
#      (head, c_attn, c_proj, c_fc, mlp.c_proj): ours against cuBLASLt FP8
#      and bf16; then its --small cases under compute-sanitizer memcheck;
#   2. every folder built; the small ones' bench --check at odd sizes, one
#      under compute-sanitizer memcheck; the small GPT-2 also with weights
#      from `nnc weights` as they are (each row's scale) and as `nnc
#      calibrate` wrote them for a batch of ids (fixed scales); a small
#      --generate GPT-2 fp8: generate_gpt2 --check (every decode step's
#      logits against a full forward of the float model); the small GPT-2
#      fp8 with bf16 logits (--outputs=storage) checked too;
#   3. GPT-2 124M (random weights scaled like PyTorch's init), bf16 and fp8,
#      each with f32 logits and with bf16 logits (--outputs=storage: half
#      the bytes, what PyTorch's bf16 model returns): bench --check against
#      the float model's float64 reference at B=1 T=CHECK_T (max relative
#      error, cosine, top-1), then B=8 T=1024 timed (CUDA graphs on, the
#      default) in ROUNDS alternating rounds: the median of the rounds'
#      medians, in ms and tokens/s; fp8_own: the fp8 folder built with
#      -DNNC_FP8_OWN_ALL=1 (our kernel for every FP8 GEMM, not only where
#      cuBLASLt has none); per-kernel profiles of the fp8 runs;
#   4. torch.compile's MODES on the same GPT-2 (bench/gpu_peers.py, bf16,
#      random weights from the manifest), unless PEERS=0.
# Prints one table last, also in $OUT/table.txt; logs in $OUT (or
# build/gpu_fp8/out). Environment: ROUNDS (3), RUNS (50), CHECK_T (64),
# MODES (default,reduce-overhead), PEERS (1), ARCH (sm_90a).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_fp8
ROUNDS=${ROUNDS:-3} RUNS=${RUNS:-50} CHECK_T=${CHECK_T:-64} MODES=${MODES:-default,reduce-overhead}
PEERS=${PEERS:-1} ARCH=${ARCH:-sm_90a}
GSMALL="-D layers=2 -D d=64 -D heads=2 -D vocab=101 -D ctx=32 -D batch=3"
BSMALL="-D layers=2 -D hidden=64 -D heads=4 -D intermediate=128 -D vocab=31 -D positions=16 -D seq=16 -D batch=3"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  # shellcheck disable=SC2086  # several -D words
  "$nnc" "$ROOT/models/gpt2.lua" --target=cuda-${ARCH/_/} --precision=fp8 $GSMALL -o "$G/gpt2_small_fp8" || exit 1
  # shellcheck disable=SC2086
  "$nnc" "$ROOT/models/gpt2.lua" --target=cuda-${ARCH/_/} --precision=fp8 --outputs=storage $GSMALL \
    -o "$G/gpt2_small_fp8_st" || exit 1
  # shellcheck disable=SC2086
  "$nnc" "$ROOT/models/gpt2.lua" --generate --target=cuda-${ARCH/_/} --precision=fp8 $GSMALL -o "$G/gpt2_gen_fp8" || exit 1
  # shellcheck disable=SC2086
  "$nnc" "$ROOT/models/bert.lua" --target=cuda-${ARCH/_/} --precision=fp8 $BSMALL -o "$G/bert_small_fp8" || exit 1
  for p in bf16 fp8; do
    "$nnc" "$ROOT/models/gpt2.lua" --target=cuda-${ARCH/_/} --precision=$p -D batch=8 -o "$G/gpt2_$p" || exit 1
    "$nnc" "$ROOT/models/gpt2.lua" --target=cuda-${ARCH/_/} --precision=$p --outputs=storage -D batch=8 \
      -o "$G/gpt2_${p}_st" || exit 1
  done
  # the same sources, built with our FP8 GEMM for every GEMM (run's NNC_FP8_OWN_ALL=1)
  cp -r "$G/gpt2_fp8" "$G/gpt2_fp8_own"
  if [ -n "${NNC_BASE:-}" ]; then
    "$NNC_BASE" "$ROOT/models/gpt2.lua" --target=cuda-${ARCH/_/} --precision=fp8 -D batch=8 -o "$G/gpt2_fp8_base" || exit 1
  fi
  # static activation scales: random weights, calibrated on 3 x 17 ids
  # shellcheck disable=SC2086
  "$nnc" weights "$ROOT/models/gpt2.lua" $GSMALL -o "$G/w_small.safetensors" || exit 1
  python3 - "$G/ids_small.safetensors" <<'EOF'
import json, struct, sys
ids = [(i * 37 + 11) % 101 for i in range(3 * 17)]
data = struct.pack("<%di" % len(ids), *ids)
hdr = json.dumps({"ids": {"dtype": "I32", "shape": [3, 17], "data_offsets": [0, len(data)]}}).encode()
hdr += b" " * ((8 - len(hdr) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
EOF
  # shellcheck disable=SC2086
  "$nnc" calibrate "$ROOT/models/gpt2.lua" $GSMALL --weights "$G/w_small.safetensors" --data "$G/ids_small.safetensors" \
    -o "$G/w_small_cal.safetensors" > "$G/calibrate.log" || exit 1
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { "$@" --json --no-peaks 2>/dev/null | grep -o '"median_ms": [0-9.e+-]*' | head -1 | awk '{ print $2 }'; }
# "max relative error X, cosine Y ok" and the top-1 line of an output of a check log
figures() {
  local log=$1 out=$2
  awk -v o="$out" '$1 == o && /max relative error/ { for (i = 1; i <= NF; i++) { if ($i == "error") e = $(i + 1); if ($i == "cosine") c = $(i + 1) } }
                   $1 == o && /top-1 agreement/ && !/warning/ { for (i = 1; i <= NF; i++) if ($i == "agreement") t = $(i + 1) " " $(i + 2) " " $(i + 3) " " $(i + 4) " " $(i + 5) }
                   END { sub(",", "", e); print e, c, (t == "" ? "-" : t) }' "$log"
}

run() {
  local out=${OUT:-$G/out}
  mkdir -p "$out"
  : > "$out/checks.txt"
  # 1. the kernels alone
  local a90
  a90=$([ "$ARCH" = sm_90a ] && echo -DNNC_CUDA_SM90A)
  (nvcc -std=c++17 -O3 -gencode arch=compute_${ARCH#sm_},code=$ARCH $a90 -I"$ROOT/templates/cuda" -I"$ROOT/tests/gpu" -I"$ROOT" \
     -I"$ROOT/runtime" -I"$ROOT/runtime/cuda" -o "$G/test_fp8" "$ROOT/tests/gpu/test_fp8.cu" "$ROOT"/runtime/status.c \
     "$ROOT"/runtime/half.c "$ROOT"/runtime/cuda/{status,device,alloc,host,stream,gemm,peaks}.c -lcublasLt \
     > "$out/make_test_fp8.log" 2>&1 && "$G/test_fp8" --time > "$out/test_fp8.log" 2>&1; echo "test_fp8 rc=$?" >> "$out/checks.txt") &
  # 2. the folders
  (make -s -C "$G/gpt2_gen_fp8" -j4 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" generate_gpt2 > "$out/make_gpt2_gen_fp8.log" 2>&1 ||
     echo "build gpt2_gen_fp8 failed" >> "$out/checks.txt") &
  for d in gpt2_small_fp8 gpt2_small_fp8_st gpt2_bf16 gpt2_fp8 gpt2_bf16_st gpt2_fp8_st; do
    (make -s -C "$G/$d" -j6 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" bench_gpt2 > "$out/make_$d.log" 2>&1 || echo "build $d failed" >> "$out/checks.txt") &
  done
  [ -d "$G/gpt2_fp8_base" ] && (make -s -C "$G/gpt2_fp8_base" -j6 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" bench_gpt2 \
    > "$out/make_gpt2_fp8_base.log" 2>&1 || echo "build gpt2_fp8_base failed" >> "$out/checks.txt") &
  (make -s -C "$G/gpt2_fp8_own" -j6 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" NVCCFLAGS="-O3 -DNNC_FP8_OWN_ALL=1" \
     bench_gpt2 > "$out/make_gpt2_fp8_own.log" 2>&1 || echo "build gpt2_fp8_own failed" >> "$out/checks.txt") &
  (make -s -C "$G/bert_small_fp8" -j4 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" bench_bert > "$out/make_bert_small_fp8.log" 2>&1 ||
     echo "build bert_small_fp8 failed" >> "$out/checks.txt") &
  wait
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$G/test_fp8" --small > "$out/memcheck_test_fp8.log" 2>&1
  echo "memcheck test_fp8 --small rc=$?" >> "$out/checks.txt"
  "$G/gpt2_small_fp8/bench_gpt2" --check -d B=3 -d T=17 --runs 3 --no-peaks > "$out/check_gpt2_small_fp8.log" 2>&1
  echo "gpt2_small_fp8 check rc=$?" >> "$out/checks.txt"
  "$G/gpt2_small_fp8_st/bench_gpt2" --check -d B=3 -d T=17 --runs 3 --no-peaks > "$out/check_gpt2_small_fp8_st.log" 2>&1
  echo "gpt2_small_fp8_st (bf16 logits) check rc=$?" >> "$out/checks.txt"
  "$G/bert_small_fp8/bench_bert" --check -d B=3 -d T=13 --runs 3 --no-peaks > "$out/check_bert_small_fp8.log" 2>&1
  echo "bert_small_fp8 check rc=$?" >> "$out/checks.txt"
  for w in w_small w_small_cal; do
    "$G/gpt2_small_fp8/bench_gpt2" --weights "$G/$w.safetensors" --check -d B=3 -d T=17 --runs 3 --no-peaks \
      > "$out/check_gpt2_small_fp8_$w.log" 2>&1
    echo "gpt2_small_fp8 --weights $w check rc=$?" >> "$out/checks.txt"
  done
  (cd "$G/gpt2_gen_fp8" && ./generate_gpt2 --check --prompt '3,1,4,1,5;9,2' --steps 7 > "$out/check_gpt2_gen_fp8.log" 2>&1)
  echo "gpt2_gen_fp8 generate --check rc=$?" >> "$out/checks.txt"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$G/gpt2_small_fp8/bench_gpt2" --check -d B=3 -d T=17 \
    --runs 1 --warmup 0 --no-peaks --cuda-graphs off > "$out/memcheck_gpt2_small_fp8.log" 2>&1
  echo "memcheck gpt2_small_fp8 rc=$?" >> "$out/checks.txt"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$G/gpt2_small_fp8/bench_gpt2" --check -d B=3 -d T=17 \
    --weights "$G/w_small_cal.safetensors" --runs 1 --warmup 0 --no-peaks --cuda-graphs off \
    > "$out/memcheck_gpt2_small_fp8_cal.log" 2>&1
  echo "memcheck gpt2_small_fp8 (calibrated: fixed scales) rc=$?" >> "$out/checks.txt"
  # 3. GPT-2 124M: accuracy, then speed
  local variants="bf16 fp8 bf16_st fp8_st fp8_own"
  [ -d "$G/gpt2_fp8_base" ] && variants="$variants fp8_base"
  for p in $variants; do
    "$G/gpt2_$p/bench_gpt2" --check -d B=1 -d T="$CHECK_T" --runs 1 --warmup 0 --no-peaks > "$out/check_gpt2_$p.log" 2>&1
    echo "gpt2_$p check rc=$?" >> "$out/checks.txt"
  done
  for p in $variants; do : > "$out/t_$p.txt"; done
  for _ in $(seq "$ROUNDS"); do
    for p in $variants; do ms "$G/gpt2_$p/bench_gpt2" -d B=8 -d T=1024 --runs "$RUNS" --warmup 10 >> "$out/t_$p.txt"; done
  done
  for p in fp8 fp8_st fp8_own; do
    "$G/gpt2_$p/bench_gpt2" -d B=8 -d T=1024 --runs 20 --warmup 5 --no-peaks > "$out/profile_gpt2_$p.log" 2>&1
  done
  # 4. the peer: torch.compile on the same model (its random weights from the manifest)
  if [ "$PEERS" = 1 ]; then
    python3 - "$G/gpt2_bf16/weights_manifest.json" "$out/w_gpt2.safetensors" <<'EOF'
import json, sys, torch
from safetensors.torch import save_file
man = json.load(open(sys.argv[1]))
g = torch.Generator().manual_seed(0)
save_file({t["name"]: (torch.randn(t["shape"], generator=g) * 0.02).float() for t in man["tensors"]}, sys.argv[2])
EOF
    timeout -k 10 200 python3 "$ROOT/bench/gpu_peers.py" model --model gpt2 --weights "$out/w_gpt2.safetensors" \
      --precision bf16 --dims B=8,T=1024 --heads 12 --modes "$MODES" --runs 50 --partial > "$out/peer_gpt2.json" 2> "$out/peer_gpt2.err"
    rm -f "$out/w_gpt2.safetensors"
  fi
  {
    echo
    nvidia-smi --query-gpu=name --format=csv,noheader | head -1
    cat "$out/checks.txt"
    grep -E "FAIL|failures|^time|asked path 0.*ran path [123]|e4m3 out|probe" "$out/test_fp8.log" | sed 's/^/test_fp8: /' | tail -60
    grep -cE "^ok +own" "$out/test_fp8.log" | sed 's/^/test_fp8: own-kernel cases passed: /'
    grep -E "ERROR SUMMARY" "$out/memcheck_test_fp8.log" | sed 's/^/memcheck test_fp8 --small: /'
    echo "small folders:"
    grep -E "max relative error|top-1" "$out/check_gpt2_small_fp8.log" "$out/check_gpt2_small_fp8_st.log" "$out/check_bert_small_fp8.log" \
      "$out/check_gpt2_small_fp8_w_small.log" "$out/check_gpt2_small_fp8_w_small_cal.log" | sed "s#^$out/##; s/^/  /"
    grep -E "ERROR SUMMARY" "$out/memcheck_gpt2_small_fp8.log" "$out/memcheck_gpt2_small_fp8_cal.log" | sed "s#^$out/##; s/^/  /"
    echo "GPT-2 124M (random weights), check at B=1 T=$CHECK_T against the float model's float64 reference; B=8 T=1024 timed, graphs on"
    echo "(_st: --outputs=storage, bf16 logits; _own: every FP8 GEMM ours; _base: NNC_BASE's folder):"
    printf "%-12s %12s %10s %-28s %10s %14s\n" prec "max rel err" cosine "top-1" "ms" "tokens/s"
    for p in $variants; do
      local t e c t1
      t=$(median < "$out/t_$p.txt")
      read -r e c t1 <<< "$(figures "$out/check_gpt2_$p.log" logits)"
      printf "%-12s %12s %10s %-28s %10.3f %14.0f\n" "$p" "$e" "$c" "$t1" "$t" "$(awk -v m="$t" 'BEGIN { print (m > 0) ? 8192 / m * 1000 : 0 }')"
    done
    echo "the head's kernels (gpt2.lua:9x) in the per-kernel profiles, fp8 f32 logits, bf16 logits, all ours:"
    grep -h "gpt2.lua:9[0-9]" "$out/profile_gpt2_fp8.log" "$out/profile_gpt2_fp8_st.log" "$out/profile_gpt2_fp8_own.log" | cut -c1-150 | sed 's/^/  /'
    echo "layer 0's kernels: fp8 bf16 logits, then every FP8 GEMM ours:"
    grep -h "h\.0\." "$out/profile_gpt2_fp8_st.log" "$out/profile_gpt2_fp8_own.log" | cut -c1-150 | sed 's/^/  /'
    if [ "$PEERS" = 1 ]; then
      echo "peer (torch.compile, GPT-2 bf16 B=8 T=1024):"
      tail -1 "$out/peer_gpt2.json"
      tail -2 "$out/peer_gpt2.err"
    fi
  } | tee "$out/table.txt"
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_fp8.sh generate|run"; exit 2 ;;
esac
