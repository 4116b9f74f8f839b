#!/usr/bin/env bash
# KV-cache generation on the GPU (issue 16 part 4): the CUDA target's
# kv_append and attention over the caches, checked and timed, in one call.
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_generate.sh generate   # here: the folders
#   bash bench/gpu_generate.sh run                                     # on the GPU machine
#
# run builds every folder; at small sizes (f32 and bf16, GPT-2 and LLaMA; bf16 with heads of 64 too)
# `bench_<model> --check` with older keys in the cache and
# `generate_<model> --check`: every decode step's logits against the float64
# reference of a full forward, prompts of three lengths in one batch; one
# folder under compute-sanitizer memcheck; then GPT-2 124M bf16 (random
# weights): a prompt of PROMPT tokens and STEPS new ones at B=1 and B=64,
# prefill ms and decode ms a token (generate_gpt2's median). One table at
# the end, also in $OUT. Then one decode step at S = PROMPT + STEPS/2 on
# staged device buffers (bench_gpt2's median, CUDA graphs off and on) with
# its kernel breakdown, and bench/gpt2_decode_torch.py (a static cache,
# eager and torch.compile MODES) at B=1 and B=64 in the same call.
# ctx is 640 there: 64 x 640 logits rows of 50257 fit the kernels' int indices.
# The decode step is also timed on gpt2_full_bf16_base, the same folder with
# the decode attention of a thread a key (the baseline of the same run), and
# on gpt2_full_bf16_skinny, the same folder built with -DNNC_SKINNY_ROWS=64 (the
# skinny GEMM's branch for every M <= 64, where the default takes it up to 16); then the floor: the weights' bytes and the
# kv caches' (12 layers x k, v x B x S x 768 bf16) over the device-to-device
# copy rate measured in the same run (gpt2_decode_torch.py --copy-bw), and
# each step time as a % of it.
# Environment: NNC, ARCH (sm_90a), PROMPT (512), STEPS (64), MODES (eager,default,reduce-overhead),
# BATCHES ("1 64": the decode step's and the peer's batch sizes)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_generate
ARCH=${ARCH:-sm_90a} PROMPT=${PROMPT:-512} STEPS=${STEPS:-64}
GSMALL="-D layers=2 -D d=64 -D heads=4 -D vocab=101 -D ctx=40 -D batch=4"
LSMALL="-D layers=2 -D d=48 -D heads=6 -D kv_heads=2 -D ffn=37 -D vocab=101 -D ctx=40 -D batch=4"
# heads of 64: a decode step takes the decode kernels, which append the kv caches' new rows themselves
# (attention_append.cuh); the small heads above take the copy kernel before the flash kernels
GHD64="-D layers=2 -D d=128 -D heads=2 -D vocab=101 -D ctx=40 -D batch=4"
LHD64="-D layers=2 -D d=192 -D heads=3 -D kv_heads=1 -D ffn=64 -D vocab=101 -D ctx=40 -D batch=4"
# name model precision defines
CASES="gpt2_f32 models/gpt2 f32 $GSMALL
gpt2_bf16 models/gpt2 bf16 $GSMALL
llama_f32 models/llama f32 $LSMALL
llama_bf16 models/llama bf16 $LSMALL
gpt2_hd64_bf16 models/gpt2 bf16 $GHD64
llama_hd64_bf16 models/llama bf16 $LHD64
gpt2_full_bf16 models/gpt2 bf16 -D batch=64 -D ctx=640"
BASE=gpt2_full_bf16_base SKINNY=gpt2_full_bf16_skinny

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r c model p defs; do
    # shellcheck disable=SC2086  # defs: several -D words
    "$nnc" "$ROOT/$model.lua" --generate $defs --target=cuda-${ARCH/_/} --precision="$p" -o "$G/$c" || exit 1
  done <<< "$CASES"
  # the baseline: the decode attention of a thread a key (session 18's) instead of a group of threads a key
  cp -r "$G/gpt2_full_bf16" "$G/$BASE"
  sed -E -i 's#nnc_attn_decode_groups_kernel<T, 64, [0-9]+, [0-9]+><<<\(unsigned\)rows, [0-9]+ \* 32#nnc_attn_decode_kernel<T, 64, 4><<<(unsigned)rows, 4 * 32#' "$G/$BASE/kernels/attention_decode.cuh"
  grep -q 'nnc_attn_decode_kernel<T, 64, 4><<<' "$G/$BASE/kernels/attention_decode.cuh" || { echo "no decode kernel to swap" >&2; exit 1; }
  # the same folder built with the skinny GEMM's branch for every M <= 64 (-DNNC_SKINNY_ROWS=64; 16 by default)
  cp -r "$G/gpt2_full_bf16" "$G/$SKINNY"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

# A file of $2 prompts (a line each) of $1 token ids below 50000: 64 of 512
# are more than one command-line argument may hold.
prompts() {
  python3 -c 'import sys; n, b = int(sys.argv[1]), int(sys.argv[2]); p = " ".join(str((i * 7919) % 50000) for i in range(n)); print("\n".join([p] * b))' "$1" "$2" > "$3"
}

run() {
  local out=$G/out sm=${ARCH#sm_} t=$G/out/table.txt status=0
  rm -rf "$out" && mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$t" 2>&1
  while read -r c _; do
    make -C "$G/$c" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$c.log" 2>&1 &
  done <<< "$CASES"
  make -C "$G/$BASE" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$BASE.log" 2>&1 &
  make -C "$G/$SKINNY" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" NVCCFLAGS="-O3 -DNNC_SKINNY_ROWS=64" \
    > "$out/make_$SKINNY.log" 2>&1 &
  wait
  while read -r c model _; do
    local m=${model#models/}
    [ -x "$G/$c/generate_$m" ] || { echo "$c: build failed: $(grep -m1 -i error "$out/make_$c.log")" >> "$t"; status=1; continue; }
    case $c in *full*) continue ;; esac
    (cd "$G/$c" && "./bench_$m" --check -d B=3 -d T=5 -d S=11 --runs 1 --warmup 0 > "$out/check_$c.log" 2>&1) || status=1
    echo "$c bench --check (T=5, S=11): $(grep -m1 'relative error' "$out/check_$c.log")" >> "$t"
    (cd "$G/$c" && "./generate_$m" --check --prompt '1,2,3;4,5,6,7,8,9,10;11' --steps 12 > "$out/gen_$c.log" 2>&1) || status=1
    echo "$c generate --check: $(grep -m1 '^check' "$out/gen_$c.log")" >> "$t"
  done <<< "$CASES"
  (cd "$G/gpt2_bf16" && timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./generate_gpt2 --check \
     --prompt '1,2,3;4,5,6,7,8' --steps 4 > "$out/memcheck.log" 2>&1)
  echo "memcheck generate_gpt2 (bf16): rc $? $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log")" >> "$t"
  # (this prompt, not '1,2,3;4,5,6,7,8': there bf16 LLaMA's decode steps and full forward differ by 0.0102 of
  # the logits' max, before and after the appends moved into the attention alike, f32 3.4e-7: rounding, not a bug)
  (cd "$G/llama_hd64_bf16" && timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./generate_llama --check \
     --prompt '3,1,4,1,5;9,2' --steps 4 > "$out/memcheck_hd64.log" 2>&1)
  echo "memcheck generate_llama (heads of 64, the decode kernels' appends): rc $? $(grep -m1 'ERROR SUMMARY' "$out/memcheck_hd64.log")" >> "$t"
  for b in 1 64; do
    prompts "$PROMPT" "$b" "$out/prompts_b$b.txt"
    (cd "$G/gpt2_full_bf16" && ./generate_gpt2 --prompt-file "$out/prompts_b$b.txt" --steps "$STEPS" > "$out/time_b$b.log" 2>&1)
    echo "gpt2 124M bf16 B=$b prompt $PROMPT, $STEPS new: $(grep -m1 '^prefill' "$out/time_b$b.log")" >> "$t"
  done
  # one decode step on staged device buffers (the harness's median), with
  # and without CUDA graphs, and its kernels; then the PyTorch peer
  local S=$((PROMPT + STEPS / 2))
  python3 "$ROOT/bench/gpt2_decode_torch.py" --copy-bw > "$out/copy_bw.json" 2> "$out/copy_bw.err"
  for b in ${BATCHES:-1 64}; do
    for gr in off on; do
      for f in gpt2_full_bf16 $BASE $SKINNY; do
        local tag=${f#gpt2_full_bf16}
        (cd "$G/$f" && ./bench_gpt2 -d B=$b -d T=1 -d S=$S --runs 50 --warmup 10 --cuda-graphs $gr --json \
           > "$out/step_b${b}_$gr$tag.json" 2> "$out/step_b${b}_$gr$tag.err")
        echo "gpt2 124M bf16 decode step B=$b S=$S graphs $gr${tag:+ ($tag)}: $(python3 -c 'import json,sys; print("%.4f ms" % json.load(open(sys.argv[1]))["median_ms"])' "$out/step_b${b}_$gr$tag.json" 2>&1 | tail -1)" >> "$t"
      done
    done
    python3 - "$G/gpt2_full_bf16/weights_manifest.json" "$out/copy_bw.json" "$b" "$S" "$out" >> "$t" 2>&1 <<'PY'
import json, sys
man, bw, b, S, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
n = 0
for t in json.load(open(man))["tensors"]:
    e = 1
    for d in t["shape"]:
        e *= d
    n += e
wbytes, cbytes = 2 * n, 12 * 2 * b * S * 768 * 2          # bf16 weights; k and v of 12 layers
rate = json.load(open(bw))["copy_GBps"] * 1e9
floor = (wbytes + cbytes) / rate * 1e3
print("floor B=%d S=%d: (weights %.0f MB + caches %.0f MB) / copy %.0f GB/s = %.4f ms" % (b, S, wbytes / 1e6, cbytes / 1e6, rate / 1e9, floor))
for gr in ("off", "on"):
    for tag, what in (("", "nnc"), ("_base", "nnc baseline (a thread a key)"), ("_skinny", "nnc + skinny GEMM up to 64 rows")):
        try:
            ms = json.load(open("%s/step_b%d_%s%s.json" % (out, b, gr, tag)))["median_ms"]
            print("  %s graphs %s: %.4f ms, %.0f%% of the floor" % (what, gr, ms, 100 * floor / ms))
        except (OSError, ValueError, KeyError) as e:
            print("  %s graphs %s: no result (%s)" % (what, gr, e))
PY
    python3 "$ROOT/bench/kernel_breakdown.py" --top 5 "$out/step_b${b}_off.json" > "$out/breakdown_b$b.txt" 2>&1
    timeout 400 python3 "$ROOT/bench/gpt2_decode_torch.py" --batch $b --prompt "$PROMPT" --steps "$STEPS" \
      --modes "${MODES:-eager,default,reduce-overhead}" > "$out/torch_b$b.txt" 2> "$out/torch_b$b.err"
    sed "s/^/torch B=$b: /" "$out/torch_b$b.txt" >> "$t"
  done
  cat "$t"
  [ -n "${OUT:-}" ] && cp -r "$out" "$OUT/"
  return $status
}

case ${1:-} in
  generate) generate ;;
  run) run ;;
  *) echo "usage: $0 generate|run" >&2; exit 2 ;;
esac
