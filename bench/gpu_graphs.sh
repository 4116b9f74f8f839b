#!/usr/bin/env bash
# CUDA graphs on by default (issue 17 part 2), checked on a GPU in one call.
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_graphs.sh generate   # here: the folders
#   bash bench/gpu_graphs.sh run                                     # on the GPU machine
#
# Every folder is compiled without --cuda-graphs, so options.cuda_graphs is
# nnc's default (on). run builds them; each model's `bench_<model> --check`
# (the check's run replays a captured graph) must pass and report
# "cuda_graphs": true; a --generate decoder must report false (its default).
# The training step: train_gpt2 on random tokens for STEPS updates, from the
# default folder and from one compiled with --cuda-graphs=off; the two loss
# curves must be equal (the same kernels, replayed or launched). Then each
# model's median with graphs on (the default) and off, same call. One table
# at the end, also in $OUT/graphs_table.txt.
# Environment: NNC, ARCH (sm_90a), STEPS (6)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_graphs
ARCH=${ARCH:-sm_90a} STEPS=${STEPS:-6}
GSMALL="-D layers=2 -D d=64 -D heads=4 -D vocab=101 -D ctx=32 -D batch=4"
LSMALL="-D layers=2 -D d=48 -D heads=6 -D kv_heads=2 -D ffn=37 -D vocab=101 -D ctx=32 -D batch=4"
# name model precision expected-graphs defines
CASES="gpt2_bf16 models/gpt2 bf16 true $GSMALL
gpt2_f32 models/gpt2 f32 true $GSMALL
bert_bf16 models/bert bf16 true
mlp_f32 models/mlp f32 true
llama_bf16 models/llama bf16 true $LSMALL
gpt2_gen_bf16 models/gpt2 bf16 false $GSMALL --generate
gpt2_train_bf16 models/gpt2 bf16 - $GSMALL --train
gpt2_train_off_bf16 models/gpt2 bf16 - $GSMALL --train --cuda-graphs=off"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r c model p _ defs; do
    # shellcheck disable=SC2086  # defs: several words
    "$nnc" "$ROOT/$model.lua" $defs --target=cuda-${ARCH/_/} --precision="$p" -o "$G/$c" || exit 1
  done <<< "$CASES"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

run() {
  local out=$G/out sm=${ARCH#sm_} t=$G/out/table.txt status=0
  rm -rf "$out" && mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$t" 2>&1
  while read -r c _; do
    make -C "$G/$c" -j4 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$c.log" 2>&1 &
  done <<< "$CASES"
  wait
  while read -r c model _ want _; do
    [ "$want" = - ] && continue
    local m=${model#models/}
    (cd "$G/$c" && "./bench_$m" --check --runs 2 --warmup 1 --json > "$out/check_$c.json" 2> "$out/check_$c.err")
    local rc=$? got
    got=$(python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print("cuda_graphs %s, check ok %s, max relative error %s" % (str(j.get("cuda_graphs")).lower(), str(j["check"]["ok"]).lower(), j["check"]["max_rel_error"]))' "$out/check_$c.json" 2>&1 | tail -1)
    case "$got" in "cuda_graphs $want, check ok true"*) [ $rc = 0 ] || status=1 ;; *) status=1 ;; esac
    echo "$c bench --check (default options): rc $rc, $got" >> "$t"
  done <<< "$CASES"
  # llm.c's token file: a header of 256 int32 (magic, version, count), then uint16 ids
  python3 -c 'import struct, random; random.seed(1); n = 4096
h = [20240520, 1, n] + [0] * 253
open("'"$out"'/tok.bin", "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % n, *[random.randrange(101) for _ in range(n)]))'
  for c in gpt2_train_bf16 gpt2_train_off_bf16; do
    (cd "$G/$c" && ./train_gpt2 --data "$out/tok.bin" --steps "$STEPS" --batch 4 --seq 16 --json > "$out/train_$c.json" 2> "$out/train_$c.err") || status=1
  done
  python3 - "$out/train_gpt2_train_bf16.json" "$out/train_gpt2_train_off_bf16.json" >> "$t" 2>&1 <<'PY' || status=1
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if l.startswith("{") and '"step"' in l and '"loss"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
d = max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))
print("train_gpt2 %d steps, graphs on (default) vs off: losses %s vs %s, max difference %.3g" %
      (len(a), " ".join("%.5f" % x for x in a), " ".join("%.5f" % x for x in b), d))
sys.exit(0 if a and len(a) == len(b) and d <= 1e-6 else 1)
PY
  while read -r c model _ want _; do
    [ "$want" = true ] || continue
    local m=${model#models/} on off
    on=$(cd "$G/$c" && "./bench_$m" --runs 50 --warmup 10 --json 2>/dev/null | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["median_ms"])')
    off=$(cd "$G/$c" && "./bench_$m" --runs 50 --warmup 10 --json --cuda-graphs off 2>/dev/null | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["median_ms"])')
    echo "$c default dims: graphs on (default) $on ms, off $off ms" >> "$t"
  done <<< "$CASES"
  cat "$t"
  [ -z "${OUT:-}" ] || cp "$t" "$OUT/graphs_table.txt"
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_graphs.sh generate|run" >&2; exit 2 ;;
esac
