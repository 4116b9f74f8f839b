#!/usr/bin/env bash
# bench/gpu_train_f16.sh: f16 training with dynamic loss scaling on a GPU,
# against bf16, in one command (no PyTorch needed).
#
# Here (with Lua and nnc):   bash bench/gpu_train_f16.sh generate
#   writes build/gpu_train_f16/: the CUDA training folders (sources only) of
#   GPT-2 with 2 layers (d 768, 12 heads, vocab 50257, ctx 1024, B <= 8) at
#   --precision=f16 and bf16 for ARCH, and a token file of a fixed Markov
#   chain over 2000 ids (4 successors each: a loss floor of ln 4), so that
#   the loss falls fast.
# On the GPU machine:        bash bench/gpu_train_f16.sh run
#   builds both, runs train_gpt2 --check on f16 (every gradient against
#   float64, then two AdamW updates against double, the loss scale divided
#   out), STEPS updates of f16 and of bf16 at B=8 T=256 (loss curves side by
#   side, the f16 scale per update), f16 resume (2 updates, save, 2 more
#   against 4 in one run: the checkpoints must be the same bytes, the loss
#   scale and its counters in them), and f16 from a loss scale of 1e9
#   (infinite in f16): the skipped updates and the halvings until training
#   goes on. One table at the end; logs under build/gpu_train_f16/out and
#   in $OUT.
# Environment: NNC (nnc binary), ARCH (sm_90a), PY (python3), STEPS (40)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_train_f16
ARCH=${ARCH:-sm_90a}
PY=${PY:-python3}
STEPS=${STEPS:-40}

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  for p in f16 bf16; do
    "$nnc" "$ROOT/models/gpt2.lua" -D layers=2 --train --target=cuda-${ARCH/_/} --precision=$p -o "$G/gpt2_$p" || exit 1
  done
  "$PY" - "$G/tokens.bin" 400000 <<'EOF' || exit 1
import sys, numpy as np
n = int(sys.argv[2])
rng = np.random.default_rng(0)
succ = rng.integers(0, 2000, (2000, 4))
pick = rng.integers(0, 4, n)
t = np.empty(n, np.int64); t[0] = 0
for i in range(1, n):
    t[i] = succ[t[i - 1], pick[i]]
h = np.zeros(256, np.int32); h[:3] = (20240520, 1, n)
with open(sys.argv[1], "wb") as f:
    f.write(h.tobytes()); f.write(t.astype(np.uint16).tobytes())
EOF
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

run() {
  local out=$G/out sm=${ARCH#sm_} status=0 t=$G/out/table.txt
  rm -rf "$out" && mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
  for p in f16 bf16; do
    (make -C "$G/gpt2_$p" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" train_gpt2 > "$out/make_$p.log" 2>&1 \
       || echo "BUILD FAILED: gpt2_$p (see make_$p.log)" | tee -a "$t") &
  done
  wait
  local f=$G/gpt2_f16 common="--data $G/tokens.bin --lr 1e-3 --json --no-peaks"
  (cd "$f" && ./train_gpt2 --check > "$out/check_f16.log" 2>&1)
  local rc=$?
  [ $rc -ne 0 ] && status=1
  echo "gpt2_f16 --check: rc=$rc; $(grep -E 'FAIL|update [12]:' "$out/check_f16.log" | tr -s ' ' | tr '\n' ' ')" >> "$t"
  for p in f16 bf16; do
    # shellcheck disable=SC2086
    (cd "$G/gpt2_$p" && ./train_gpt2 $common --batch 8 --seq 256 --steps "$STEPS" > "$out/curve_$p.jsonl" \
       2> "$out/curve_$p.err") || status=1
  done
  # shellcheck disable=SC2086
  (cd "$f" && ./train_gpt2 $common --batch 4 --seq 128 --steps 4 --save "$out/full.st" > /dev/null &&
    ./train_gpt2 $common --batch 4 --seq 128 --steps 2 --save "$out/half.st" > /dev/null &&
    ./train_gpt2 $common --batch 4 --seq 128 --steps 4 --resume "$out/half.st" --save "$out/resumed.st" > /dev/null) \
    2> "$out/resume.err"
  if cmp -s "$out/full.st" "$out/resumed.st"; then echo "gpt2_f16 resume: checkpoints identical" >> "$t"
  else echo "gpt2_f16 resume: checkpoints DIFFER ($(head -c 300 "$out/resume.err"))" >> "$t"; status=1; fi
  # shellcheck disable=SC2086
  (cd "$f" && ./train_gpt2 $common --batch 4 --seq 128 --steps 3 --loss-scale 1e9 > "$out/overflow.jsonl" \
     2> "$out/overflow.err") || status=1
  "$PY" - "$out" >> "$t" <<'EOF'
import json, os, sys
out = sys.argv[1]
load = lambda n: [json.loads(l) for l in open(os.path.join(out, n)) if l.strip().startswith("{")]
h, b = load("curve_f16.jsonl"), load("curve_bf16.jsonl")
if h and b:
    for i in sorted({0, 4, 9, 19, len(h) - 1}):
        if i < len(h) and i < len(b):
            print(f"update {h[i]['step']:3d}: f16 loss {h[i]['loss']:.4f} (scale {h[i].get('loss_scale', '-')}, "
                  f"grad norm {h[i]['grad_norm']:.3f})   bf16 loss {b[i]['loss']:.4f} (grad norm {b[i]['grad_norm']:.3f})")
    n = min(len(h), len(b))
    d = max(abs(h[i]["loss"] - b[i]["loss"]) / b[i]["loss"] for i in range(n))
    med = lambda r: sorted(x["ms"] for x in r[5:])[len(r[5:]) // 2] if len(r) > 5 else 0
    print(f"f16 vs bf16 over {n} updates: largest relative loss difference {d:.2e}; f16 skipped "
          f"{h[-1].get('skipped_total', 0)}; median ms/update f16 {med(h):.2f}, bf16 {med(b):.2f}")
else:
    print("curves missing: see curve_*.err")
o = load("overflow.jsonl")
print("f16 from loss scale 1e9: " + ", ".join(
    f"{'skipped' if r.get('skipped') else 'update'} at {r.get('loss_scale')}" for r in o))
EOF
  cat "$out/gpu.txt" "$t"
  [ -z "${OUT:-}" ] || { cp "$t" "$OUT/f16_table.txt"; tar czf "$OUT/f16_logs.tgz" -C "$out" --exclude='*.st' . 2>/dev/null; }
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_train_f16.sh generate|run" >&2; exit 2 ;;
esac
