#!/usr/bin/env bash
# Peak GPU memory and speed of GPT-2 124M's bf16 training step at each
# --recompute setting (issue 14 part 5 and its memory goal), beside llm.c at
# its own recompute settings (-r 0, 1, 2) in the same call.
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_train_memory.sh generate   # here: four folders
#   bash bench/gpu_train_memory.sh run                                     # on the GPU machine
#
# `run` builds each folder, trains STEPS updates on random tokens at B, T
# while nvidia-smi samples memory.used every 100 ms, and prints one row per
# setting: the peak sampled less the GPU's use before the run (and the
# peak as sampled, which llm.c's row gives; the baseline is printed), and the
# median ms per update after the third. llm.c's rows come from
# bench/gpu_train_peers.sh (MODES="" so PyTorch does not run), which needs
# build/llmc (a `git archive` of karpathy/llm.c). nnc's folders and llm.c
# have the same recompute meaning at gelu (llm.c -r 1) and norm (-r 2).
#
# Environment: NNC, ARCH (sm_90a), B (8), T (1024), STEPS (10), OUT (a folder
# for the table), LLMC (1: run llm.c too).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_train_memory
ARCH=${ARCH:-sm_90a} B=${B:-8} T=${T:-1024} STEPS=${STEPS:-10} LLMC=${LLMC:-1}
SETTINGS="none gelu norm block"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  for r in $SETTINGS; do
    "$nnc" "$ROOT/models/gpt2.lua" --train --target=cuda-${ARCH/_/} --precision=bf16 -D batch="$B" \
      --recompute="$r" -o "$G/$r" || exit 1
    echo "$r: $("$nnc" "$ROOT/models/gpt2.lua" --train --precision=bf16 -D batch="$B" --recompute="$r" --emit=plan \
      | grep '^peak')" >> "$G/plans.txt"
  done
  cat "$G/plans.txt"
}

run() {
  local out=$G/out sm=${ARCH#sm_} t=$G/out/table.txt status=0
  rm -rf "$out" && mkdir -p "$out"
  for r in $SETTINGS; do
    make -C "$G/$r" -j4 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$r.log" 2>&1 &
  done
  wait
  python3 - "$out/tok.bin" $(( (STEPS + 1) * B * T + 1 )) <<'EOF'
import sys, numpy as np
n = int(sys.argv[2])
h = np.zeros(256, np.int32); h[:3] = (20240520, 1, n)
with open(sys.argv[1], "wb") as f:
    f.write(h.tobytes()); f.write(np.random.default_rng(0).integers(0, 50257, n).astype(np.uint16).tobytes())
EOF
  printf '%-8s %12s %14s %10s %10s  %s\n' "nnc" "peak MiB" "(nvidia-smi)" "ms/update" "tokens/s" "loss" > "$t"
  for r in $SETTINGS; do
    local base
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/mem_$r.txt" 2>/dev/null &
    local sampler=$!
    (cd "$G/$r" && ./train_gpt2 --data "$out/tok.bin" --steps "$STEPS" --batch "$B" --seq "$T" --lr 6e-4 --json \
      > "$out/$r.jsonl" 2> "$out/$r.err") || status=1
    kill $sampler 2>/dev/null
    wait $sampler 2>/dev/null
    python3 - "$r" "$out/$r.jsonl" "$out/mem_$r.txt" "$base" "$B" "$T" >> "$t" <<'EOF'
import json, statistics, sys
name, log, mem, base, B, T = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
r = [json.loads(l) for l in open(log) if l.strip().startswith("{")]
m = [int(x) for x in open(mem).read().split() if x.isdigit()]
if len(r) < 4:
    print(f"{name:<8} {'-':>12} {'-':>10} {'-':>10}  too few steps"); sys.exit()
ms = statistics.median(x["ms"] for x in r[3:])
peak = max(m) if m else 0
print(f"{name:<8} {peak - base:>12} {peak:>14} {ms:>10.1f} {B * T / ms * 1e3:>10,.0f}  {r[0]['loss']:.3f} -> {r[-1]['loss']:.3f}")
EOF
  done
  cat "$t"
  if [ "$LLMC" = 1 ]; then
    OUT=$out/peers MODES="" LLMC_VARIANTS="-r 0;-r 1;-r 2" B=$B T=$T STEPS=$STEPS DEADLINE=240 \
      bash "$ROOT/bench/gpu_train_peers.sh" > "$out/peers.log" 2>&1 || status=1
    grep -E 'llm.c' "$out/peers/table.txt" 2>/dev/null | tee -a "$t" || tail -20 "$out/peers.log"
    grep -m1 'baseline' "$out/peers.log" | tee -a "$t"
  fi
  [ -z "${OUT:-}" ] || cp "$t" "$OUT/memory_table.txt"
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_train_memory.sh generate|run" >&2; exit 2 ;;
esac
