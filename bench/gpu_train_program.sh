#!/usr/bin/env bash
# bench/gpu_train_program.sh: the CUDA target's training program
# (train_<model> of an `nnc --train --target=cuda-*` folder) on a GPU, in
# one command, against PyTorch's losses computed here on the CPU.
#
# Here (with Lua, nnc and PyTorch):   bash bench/gpu_train_program.sh generate
#   writes build/gpu_train_program/: bench/train_peers.py's initial weights,
#   token file and PyTorch f32 (eager) and f64 losses for GPT-2 at small odd
#   sizes (2 layers, d 48, 2 heads, vocab 101, ctx 33; B=3, T=17; AdamW lr
#   1e-3, wd 0.01; 20 updates), the same with --accumulate 2, --clip 0.05
#   and a warm-up and cosine schedule, and the digits classifier's data,
#   weights and PyTorch run; then the CUDA folders (sources only) of GPT-2
#   at those sizes in f32, tf32, bf16 and f16 (dynamic loss scaling; also
#   bench/gpu_train_f16.sh), of digits in f32, and of GPT-2
#   124M (12 layers, d 768, vocab 50257, B <= 16, T <= 1024) in bf16.
# On the GPU machine:                  bash bench/gpu_train_program.sh run
#   builds them, then per GPT-2 folder: train_gpt2 --check (the loss and
#   every gradient against float64, then two AdamW updates against double),
#   the 20-update loss curve against PyTorch f32 (goal: relative difference
#   <= 1e-4 in f32, <= 2e-2 in bf16 and f16; tf32 reported), the variant's curve
#   (f32), resume (2 updates, save, 2 more from the checkpoint, against 4 in
#   one run: the two checkpoints must be the same bytes; f16's carry the loss
#   scale), digits' test
#   accuracy against PyTorch's, compute-sanitizer memcheck and racecheck on
#   2 updates of 2 micro-batches of GPT-2 f32 (the update kernels included), and GPT-2
#   124M bf16 at B=16 T=1024 on random tokens: median ms per update after
#   the warm-up, tokens/s, MFU and the GPU memory in use at the peak
#   (nvidia-smi, sampled). One table at the end; logs under
#   build/gpu_train_program/out and in $OUT.
# Environment: NNC (nnc binary), ARCH (sm_90a), PY (python3), STEPS124 (30)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_train_program
ARCH=${ARCH:-sm_90a}
PY=${PY:-python3}
STEPS124=${STEPS124:-30}
SMALL="-D layers=2 -D d=48 -D heads=2 -D vocab=101 -D ctx=33 -D batch=3"
# folder, model, precision, -D overrides
CASES="gpt2_f32 gpt2 f32 $SMALL
gpt2_tf32 gpt2 tf32 $SMALL
gpt2_bf16 gpt2 bf16 $SMALL
gpt2_f16 gpt2 f16 $SMALL
digits_f32 digits f32 -D hidden=64
gpt2_124m gpt2 bf16 -D batch=16"
VARIANT="--accumulate 2 --clip 0.05 --warmup 3 --decay-steps 15 --min-lr-ratio 0.1"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc} d=$G/data
  rm -rf "$G" && mkdir -p "$d"
  "$PY" "$ROOT/bench/train_peers.py" gpt2 --out "$d" --steps 20 --impl torch-eager,torch-f64 > "$d/gpt2_torch.jsonl" || exit 1
  # shellcheck disable=SC2086  # VARIANT: several words
  "$PY" "$ROOT/bench/train_peers.py" gpt2 --out "$d" --steps 20 --impl torch-eager --no-write $VARIANT \
    > "$d/gpt2_torch_variant.jsonl" || exit 1
  "$PY" "$ROOT/bench/train_peers.py" digits --out "$d" --steps 300 --B 32 --lr 3e-3 --eval-every 100 \
    --impl torch-eager > "$d/digits_torch.jsonl" || exit 1
  while read -r c model p defs; do
    # shellcheck disable=SC2086  # defs: several -D words
    "$nnc" "$ROOT/models/$model.lua" $defs --train --target=cuda-${ARCH/_/} --precision="$p" -o "$G/$c" || exit 1
  done <<< "$CASES"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

# The largest relative difference of the "loss" of JSON lines in $1 (nnc)
# against impl $3's in $2 (PyTorch), over the steps both have.
curve_diff() {
  "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys
load = lambda p: [json.loads(l) for l in open(p) if l.strip().startswith("{")]
n = {r["step"]: r["loss"] for r in load(sys.argv[1]) if "loss" in r}
t = {r["step"]: r["loss"] for r in load(sys.argv[2]) if "loss" in r and r.get("impl") == sys.argv[3]}
steps = sorted(set(n) & set(t))
d = [abs(n[s] - t[s]) / abs(t[s]) for s in steps]
print(f"{max(d):.2e} over {len(steps)} steps (step 1 {n[1]:.6f} vs {t[1]:.6f}, step {steps[-1]} "
      f"{n[steps[-1]]:.6f} vs {t[steps[-1]]:.6f})" if d else "no common steps")
EOF
}

run() {
  local out=$G/out d=$G/data sm=${ARCH#sm_} status=0 t=$G/out/table.txt
  rm -rf "$out" && mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
  while read -r c _; do
    (make -C "$G/$c" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$c.log" 2>&1 \
       || echo "BUILD FAILED: $c (see make_$c.log)" | tee -a "$t") &
  done <<< "$CASES"
  wait
  local common="--data $d/gpt2_train.bin --weights $d/gpt2_init.safetensors --batch 3 --seq 17 --lr 1e-3 --wd 0.01 --json"
  for p in f32 tf32 bf16 f16; do
    local f=$G/gpt2_$p
    (cd "$f" && ./train_gpt2 --check > "$out/check_$p.log" 2>&1)
    local rc=$?
    [ $rc -ne 0 ] && status=1
    echo "gpt2_$p --check: rc=$rc $(grep -E 'max relative error|optimizer|update' "$out/check_$p.log" | tail -2 | tr -s ' ' | tr '\n' ' ')" >> "$t"
    # shellcheck disable=SC2086
    (cd "$f" && ./train_gpt2 $common --steps 20 > "$out/curve_$p.jsonl" 2> "$out/curve_$p.err") || status=1
    echo "gpt2_$p 20 updates vs torch f32: $(curve_diff "$out/curve_$p.jsonl" "$d/gpt2_torch.jsonl" torch-eager)" >> "$t"
  done
  # shellcheck disable=SC2086
  (cd "$G/gpt2_f32" && ./train_gpt2 $common --steps 20 $VARIANT > "$out/curve_variant.jsonl" 2> "$out/curve_variant.err") \
    || status=1
  echo "gpt2_f32 variant ($VARIANT) vs torch f32: $(curve_diff "$out/curve_variant.jsonl" \
    "$d/gpt2_torch_variant.jsonl" torch-eager)" >> "$t"
  for p in f32 bf16 f16; do
    local f=$G/gpt2_$p
    # shellcheck disable=SC2086
    (cd "$f" && ./train_gpt2 $common --steps 4 --save "$out/full_$p.st" > /dev/null &&
      ./train_gpt2 $common --steps 2 --save "$out/half_$p.st" > /dev/null &&
      ./train_gpt2 $common --steps 4 --resume "$out/half_$p.st" --save "$out/resumed_$p.st" > /dev/null) \
      2> "$out/resume_$p.err"
    if cmp -s "$out/full_$p.st" "$out/resumed_$p.st"; then echo "gpt2_$p resume: checkpoints identical" >> "$t"
    else echo "gpt2_$p resume: checkpoints DIFFER ($(head -c 300 "$out/resume_$p.err"))" >> "$t"; status=1; fi
  done
  (cd "$G/digits_f32" && ./train_digits --data "$d/digits_train.safetensors" --val "$d/digits_test.safetensors" \
     --weights "$d/digits_init.safetensors" --steps 300 --batch 32 --lr 3e-3 --wd 0.01 --eval-every 100 --json \
     > "$out/digits.jsonl" 2> "$out/digits.err") || status=1
  echo "digits 300 updates: nnc $(grep -o '"val_accuracy": [0-9.]*' "$out/digits.jsonl" | tail -1)," \
       "torch $(grep -o '"val_accuracy": [0-9.]*' "$d/digits_torch.jsonl" | tail -1);" \
       "loss curve vs torch: $(curve_diff "$out/digits.jsonl" "$d/digits_torch.jsonl" torch-eager)" >> "$t"
  for tool in memcheck racecheck; do
    local extra=()
    [ $tool = racecheck ] && extra=(--kernel-name-exclude kns=nvjet)
    # shellcheck disable=SC2086
    (cd "$G/gpt2_f32" && timeout 200 compute-sanitizer --tool $tool "${extra[@]}" --error-exitcode 9 \
       ./train_gpt2 $common --steps 2 --accumulate 2 --no-peaks > "$out/$tool.log" 2>&1)
    local rc=$?
    [ $rc -ne 0 ] && status=1
    echo "train_gpt2 f32 3 updates $tool: rc=$rc $(grep -h -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" \
      | head -1 | tr -s ' ')" >> "$t"
  done
  # GPT-2 124M: random tokens, the peak of the GPU's memory in use sampled alongside
  "$PY" - "$out/tok124.bin" $(( (STEPS124 + 1) * 16 * 1024 + 1 )) <<'EOF'
import sys, numpy as np
n = int(sys.argv[2])
h = np.zeros(256, np.int32); h[:3] = (20240520, 1, n)
with open(sys.argv[1], "wb") as f:
    f.write(h.tobytes()); f.write(np.random.default_rng(0).integers(0, 50257, n).astype(np.uint16).tobytes())
EOF
  (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.2; done) > "$out/mem124.txt" 2>/dev/null &
  local sampler=$!
  (cd "$G/gpt2_124m" && ./train_gpt2 --data "$out/tok124.bin" --steps "$STEPS124" --batch 16 --seq 1024 --lr 6e-4 \
     --wd 0.1 --beta2 0.95 --clip 1 --json > "$out/gpt2_124m.jsonl" 2> "$out/gpt2_124m.err") || status=1
  kill $sampler 2>/dev/null
  echo "gpt2_124m bf16 B=16 T=1024: $("$PY" - "$out/gpt2_124m.jsonl" "$out/mem124.txt" <<'EOF'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
mem = [int(x) for x in open(sys.argv[2]).read().split() if x.isdigit()]
if len(r) < 6:
    print("too few steps"); sys.exit()
ms = statistics.median(x["ms"] for x in r[5:])
print(f"median {ms:.1f} ms/update over steps 6-{len(r)}, {16 * 1024 / ms * 1e3:,.0f} tokens/s, "
      f"MFU {statistics.median(x['mfu'] for x in r[5:]) * 100:.1f}%, loss {r[0]['loss']:.3f} -> {r[-1]['loss']:.3f}, "
      f"GPU memory peak {max(mem) if mem else 0} MiB")
EOF
)" >> "$t"
  cat "$out/gpu.txt" "$t"
  [ -z "${OUT:-}" ] || { cp "$t" "$OUT/program_table.txt"; tar czf "$OUT/program_logs.tgz" -C "$out" --exclude='*.st' --exclude='*.bin' . 2>/dev/null; }
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_train_program.sh generate|run" >&2; exit 2 ;;
esac
