#!/usr/bin/env bash
# LLaMA-family decoders on the GPU (issue 16 part 3): correctness of the CUDA
# target's rope, grouped-query attention and models/llama.lua, and the
# default (~125M) model's speed, in one call.
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_llama.sh generate   # here: the folders
#   bash bench/gpu_llama.sh run                                     # on the GPU machine
#
# run builds every folder, checks each against the float64 reference with
# poisoned outputs (`bench_<model> --check`): tests/ops/rope.lua and
# tests/ops/gqa.lua in f32 and bf16, llama at odd sizes (6 query heads over
# 2 kv heads, head size 8, ffn 37; and multi-query, 5 heads over 1) in f32
# and bf16, its training step in f32 (bf16 gradients at these sizes are
# 1-2% off the reference, GPT-2's as much, above --check's 1e-2), and the
# default config at a short T; runs compute-sanitizer memcheck on the two op folders; then
# times the default config (B=8, T=1024 unless B, T say otherwise) in f32
# and bf16, inference and the training step. One table at the end, also in
# $OUT. Grouped-query attention is the fused attention kernel reading k
# and v head h / G for query head h (kv_group; on sm_90a the wgmma path
# with tensor maps over the kv heads); its training step differentiates the
# primitive ops.
# The --generate folders also run generate_llama --check (each decode
# step's logits against a full forward), memcheck on the small bf16 one,
# and the default config's decode step is timed at B=1 and B=64 over 511
# cached tokens (grouped-query attention reading the caches in place).
# Environment: NNC, ARCH (sm_90a), B (8), T (1024)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_llama
ARCH=${ARCH:-sm_90a} B=${B:-8} T=${T:-1024}
SMALL="-D layers=2 -D d=48 -D heads=6 -D kv_heads=2 -D ffn=37 -D vocab=101 -D ctx=64 -D batch=4"
MQA="-D layers=1 -D d=40 -D heads=5 -D kv_heads=1 -D ffn=23 -D vocab=53 -D ctx=32 -D batch=4"
# name model precision check-dims (- : time only) defines
CASES="rope_f32 tests/ops/rope f32 -d_B=3_-d_T=17
rope_bf16 tests/ops/rope bf16 -d_B=3
gqa_f32 tests/ops/gqa f32 -d_B=3_-d_T=11
gqa_bf16 tests/ops/gqa bf16 -d_B=3
llama_small_f32 models/llama f32 -d_B=3_-d_T=17 $SMALL
llama_small_bf16 models/llama bf16 -d_B=3_-d_T=17 $SMALL
llama_mqa_f32 models/llama f32 -d_B=2_-d_T=9 $MQA
llama_train_f32 models/llama f32 -d_B=3_-d_T=17 $SMALL --train
llama_full_f32 models/llama f32 -d_B=1_-d_T=33 -D batch=$B -D ctx=$T
llama_full_bf16 models/llama bf16 - -D batch=$B -D ctx=$T
llama_full_train_bf16 models/llama bf16 - -D batch=$B -D ctx=$T --train
llama_gen_f32 models/llama f32 -d_B=3_-d_T=5_-d_S=11 $SMALL --generate
llama_gen_bf16 models/llama bf16 -d_B=3_-d_T=5_-d_S=11 $SMALL --generate
llama_gen_mqa_bf16 models/llama bf16 -d_B=2_-d_T=4_-d_S=9 $MQA --generate
llama_full_gen_bf16 models/llama bf16 - -D batch=64 -D ctx=1024 --generate"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r c model p _ defs; do
    # shellcheck disable=SC2086  # defs: several -D words
    "$nnc" "$ROOT/$model.lua" $defs --target=cuda-${ARCH/_/} --precision="$p" -o "$G/$c" || exit 1
  done <<< "$CASES"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

# The harness's median of folder $1 at dims $2 (a JSON run), as "12.345 ms".
median() {
  local c=$1 dims=$2 out=$G/out bin
  bin=$(ls "$G/$c"/bench_* 2>/dev/null | head -1)
  [ -x "$bin" ] || { echo "build failed"; return 1; }
  # shellcheck disable=SC2086  # dims: several -d words
  (cd "$G/$c" && "./$(basename "$bin")" $dims --runs 20 --warmup 5 --json > "$out/time_$c.json" 2> "$out/time_$c.err") ||
    { echo "failed: $(tail -1 "$out/time_$c.err")"; return 1; }
  python3 -c 'import json, sys; print("%.3f ms" % json.load(open(sys.argv[1]))["median_ms"])' "$out/time_$c.json" 2>&1 | tail -1
}

run() {
  local out=$G/out sm=${ARCH#sm_} t=$G/out/table.txt status=0
  rm -rf "$out" && mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$t" 2>&1
  while read -r c _; do
    make -C "$G/$c" -j4 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$c.log" 2>&1 &
  done <<< "$CASES"
  wait
  while read -r c model _ dims _; do
    local bin
    bin=$(ls "$G/$c"/bench_* 2>/dev/null | head -1)
    [ -x "$bin" ] || { echo "$c: build failed: $(grep -m1 -i error "$out/make_$c.log")" >> "$t"; status=1; continue; }
    [ "$dims" = - ] && continue
    # shellcheck disable=SC2086  # dims: -d words joined by _
    (cd "$G/$c" && "./$(basename "$bin")" --check ${dims//_/ } --runs 2 --warmup 1 > "$out/check_$c.log" 2>&1) || status=1
    echo "$c --check ${dims//_/ }: $(grep -c ' ok$' "$out/check_$c.log") ok, $(grep -c 'FAILED' "$out/check_$c.log") failed" >> "$t"
  done <<< "$CASES"
  for c in rope_f32 gqa_f32; do
    (cd "$G/$c" && timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "./bench_${c%_f32}" --check -d B=3 \
       --runs 1 --warmup 0 --no-peaks > "$out/memcheck_$c.log" 2>&1)
    echo "$c memcheck: rc=$? $(grep -m1 'ERROR SUMMARY' "$out/memcheck_$c.log")" >> "$t"
  done
  for c in llama_gen_f32 llama_gen_bf16 llama_gen_mqa_bf16; do
    (cd "$G/$c" && ./generate_llama --check --prompt '3,1,4,1,5;9,2' --steps 7 > "$out/gen_$c.log" 2>&1)
    echo "$c generate --check: rc=$? $(grep -m1 '^check' "$out/gen_$c.log")" >> "$t"
  done
  (cd "$G/llama_gen_bf16" && timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./generate_llama --check \
     --prompt '3,1,4,1,5;9,2' --steps 4 > "$out/memcheck_gen.log" 2>&1)
  echo "llama_gen_bf16 generate memcheck: rc=$? $(grep -m1 'ERROR SUMMARY' "$out/memcheck_gen.log")" >> "$t"
  for c in llama_full_f32 llama_full_bf16 llama_full_train_bf16; do
    echo "nnc $c B=$B T=$T: $(median "$c" "-d B=$B -d T=$T")" >> "$t"
  done
  for b in 1 64; do
    echo "nnc llama_full_gen_bf16 decode B=$b S=512: $(median llama_full_gen_bf16 "-d B=$b -d T=1 -d S=512")" >> "$t"
  done
  (cd "$G/llama_full_bf16" && ./bench_llama -d B="$B" -d T="$T" --runs 10 --warmup 3 > "$out/llama_full_bf16_kernels.txt" 2>&1)
  cat "$t"
  [ -z "${OUT:-}" ] || { cp "$t" "$OUT/llama_table.txt"; cp "$out/llama_full_bf16_kernels.txt" "$out"/check_*.log "$OUT/" 2>/dev/null; }
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_llama.sh generate|run" >&2; exit 2 ;;
esac
