#!/usr/bin/env bash
# bench/train_compare.sh: nnc's training program (train_<model>, c-simd) against
# PyTorch on the CPU, from the same initial weights, on the same batches, with
# the same AdamW (betas 0.9/0.999, eps 1e-8, weight decay on weights of rank
# >= 2 only, constant learning rate).
#
#   gpt2    models/gpt2.lua at small odd sizes (default layers=2, d=48, heads=2,
#           vocab=101, ctx=33, B=3, T=17), a token file in llm.c's .bin format
#           whose batches wrap after 7: per step, the loss of nnc, of PyTorch
#           f32 eager and of PyTorch f64, their relative differences (goal: nnc
#           against PyTorch f32 <= 1e-4 at every step), and the median ms per
#           step after warm-up of nnc, PyTorch eager and torch.compile
#           (PyTorch's ms / nnc's ms: > 1 means nnc is faster)
#   digits  models/digits.lua on scikit-learn's digits (bench/digits_data.py:
#           1437 train / 360 test): DIGITS_STEPS updates of DIGITS_B images,
#           test accuracy every EVAL_EVERY updates and at the end (goal >= 95%),
#           wall time of train_digits against PyTorch's training loop
#
# bench/train_peers.py writes the initial weights (nnc's names) and the data,
# and runs the PyTorch side; this script compiles, builds and runs nnc's side
# and prints the tables.
#
#   gpt2-variants, digits-variants   train_<model>'s other options (--accumulate,
#           --clip, --warmup/--decay-steps/--min-lr-ratio, --sgd, betas/eps/wd,
#           --shuffle, a batch that does not divide the samples) against the
#           same PyTorch loop: one line each, largest relative differences
#
# Run from anywhere:  bench/train_compare.sh [gpt2] [digits] [gpt2-variants] [digits-variants]
#                     (default: all four)
# Environment:
#   NNC       the nnc binary (default build/release/compiler/nnc)
#   WORK      scratch folder (default /tmp/nnc-train-compare)
#   PY        python with torch (default python3; safetensors, scikit-learn and
#             numpy are pip-installed into it when missing)
#   THREADS   threads of every side (default 2)
#   COMPILE   1 = also time torch.compile (default 1; ~30 s of compilation)
#   COMPILE_MODE  its mode for GPT-2 (default max-autotune, the fastest on this
#             CPU; default and reduce-overhead were 2-8% slower)
#   ROUNDS    GPT-2's timing: rounds of nnc and PyTorch, alternating (default 3;
#             round 1 also gives the losses and runs torch-f64)
#   STEPS     steps shown in GPT-2's table (default 20)
#   TIME_STEPS  steps every GPT-2 side runs, timed after WARMUP (default 100)
#   WARMUP    steps left out of the medians (default 3)
#   LAYERS D HEADS VOCAB CTX B T LR WD   GPT-2's sizes and optimizer
#   DIGITS_STEPS DIGITS_B DIGITS_LR DIGITS_HIDDEN EVAL_EVERY   digits' run
#             (default 900 updates of 32 images, lr 3e-3, hidden 64, every 100)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NNC=${NNC:-$ROOT/build/release/compiler/nnc}
WORK=${WORK:-/tmp/nnc-train-compare}
PY=${PY:-python3}
THREADS=${THREADS:-2}
COMPILE=${COMPILE:-1}
COMPILE_MODE=${COMPILE_MODE:-max-autotune}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
TIME_STEPS=${TIME_STEPS:-100}
WARMUP=${WARMUP:-3}
LAYERS=${LAYERS:-2} D=${D:-48} HEADS=${HEADS:-2} VOCAB=${VOCAB:-101} CTX=${CTX:-33}
B=${B:-3} T=${T:-17} LR=${LR:-1e-3} WD=${WD:-0.01}
DIGITS_STEPS=${DIGITS_STEPS:-900} DIGITS_B=${DIGITS_B:-32} DIGITS_LR=${DIGITS_LR:-3e-3}
DIGITS_HIDDEN=${DIGITS_HIDDEN:-64} EVAL_EVERY=${EVAL_EVERY:-100}
WHAT=("$@")
[ ${#WHAT[@]} -gt 0 ] || WHAT=(gpt2 digits gpt2-variants digits-variants)
[ "$TIME_STEPS" -ge "$STEPS" ] || TIME_STEPS=$STEPS
mkdir -p "$WORK"

if [ ! -x "$NNC" ]; then
  echo "train_compare.sh: no nnc at $NNC (build it, or set NNC=...)" >&2
  exit 1
fi
"$PY" -c 'import torch' || { echo "train_compare.sh: $PY has no torch" >&2; exit 1; }
"$PY" -c 'import safetensors, sklearn, numpy' 2>/dev/null \
  || "$PY" -m pip install -q safetensors scikit-learn numpy
"$PY" -c 'import torch, sklearn; print("torch", torch.__version__, "scikit-learn", sklearn.__version__,
"threads", '"$THREADS"')'
# The machine's load before the runs: the timings mean little when other
# jobs share its cores (PyTorch's OpenMP threads suffer most there).
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
IMPLS=torch-eager,torch-f64
[ "$COMPILE" = 1 ] && IMPLS=$IMPLS,torch-compile

# nnc model dir [-D ...]: compile with --train and build (again only when
# nnc, the model or the options changed since the last build in dir)
build() {
  local model=$1 dir=$2 stamp
  shift 2
  stamp="$(sha1sum "$NNC" "$ROOT/models/$model.lua" | cut -c1-40 | tr '\n' ' ') $*"
  if [ -x "$dir/train_$model" ] && [ "$(cat "$dir.stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  rm -rf "$dir" "$dir.stamp"
  "$NNC" "$ROOT/models/$model.lua" --train "$@" -o "$dir"
  make -C "$dir" -j"$THREADS" >"$dir.make.log" 2>&1 || { cat "$dir.make.log" >&2; exit 1; }
  echo "$stamp" >"$dir.stamp"
}

now_s() { date +%s.%N; }

# ------------------------------------------------------------------ GPT-2
run_gpt2() {
  local dir=$WORK/gpt2 data=$WORK/gpt2_data
  echo
  echo "== GPT-2 layers=$LAYERS d=$D heads=$HEADS vocab=$VOCAB ctx=$CTX, B=$B T=$T, AdamW lr $LR wd $WD," \
       "$TIME_STEPS steps, $THREADS threads"
  build gpt2 "$dir" -D layers="$LAYERS" -D d="$D" -D heads="$HEADS" -D vocab="$VOCAB" -D ctx="$CTX" \
    -D batch="$B"
  # Round 1: every implementation, the files written; later rounds time
  # nnc and PyTorch again, alternating (the medians move between runs here).
  local r impls write
  for ((r = 1; r <= ROUNDS; r++)); do
    impls=$IMPLS write=
    [ "$r" -gt 1 ] && impls=${IMPLS/torch-f64,/} write=--no-write
    "$PY" "$ROOT/bench/train_peers.py" gpt2 --out "$data" --layers "$LAYERS" --d "$D" --heads "$HEADS" \
      --vocab "$VOCAB" --ctx "$CTX" --B "$B" --T "$T" --steps "$TIME_STEPS" --lr "$LR" --wd "$WD" \
      --threads "$THREADS" --skip "$WARMUP" --impl "$impls" --compile-mode "$COMPILE_MODE" $write \
      >"$WORK/gpt2_torch.$r.jsonl" \
      2>"$WORK/gpt2_torch.$r.err" || { cat "$WORK/gpt2_torch.$r.err" >&2; exit 1; }
    "$dir/train_gpt2" --data "$data/gpt2_train.bin" --weights "$data/gpt2_init.safetensors" \
      --steps "$TIME_STEPS" --batch "$B" --seq "$T" --lr "$LR" --wd "$WD" --threads "$THREADS" --json \
      >"$WORK/gpt2_nnc.$r.jsonl"
  done
  "$PY" - "$WORK" "$ROUNDS" "$STEPS" "$WARMUP" <<'EOF'
import json, statistics, sys
work, rounds, show, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
load = lambda p: [json.loads(l) for l in open(p) if l.strip()]
nnc, peer = load(f"{work}/gpt2_nnc.1.jsonl"), load(f"{work}/gpt2_torch.1.jsonl")
n = {r["step"]: r for r in nnc if "loss" in r}
loss = {}
for r in peer:
    if "loss" in r:
        loss.setdefault(r["impl"], {})[r["step"]] = r["loss"]
summ = {r["impl"]: r for r in peer if r.get("summary")}
e, f, c = loss.get("torch-eager", {}), loss.get("torch-f64", {}), loss.get("torch-compile", {})
rel = lambda a, b: abs(a - b) / abs(b)
print(f"{'step':>4} {'nnc loss':>12} {'torch f32':>12} {'rel diff':>9} {'torch f64':>12} "
      f"{'nnc-f64':>9} {'f32-f64':>9} {'compile-f64':>11} {'nnc ms':>8} {'torch ms':>8}")
worst, worst_all, worst_c = 0.0, 0.0, 0.0
for s in sorted(n):
    if s not in e:
        continue
    d = rel(n[s]["loss"], e[s])
    worst_all = max(worst_all, d)
    if s in c:
        worst_c = max(worst_c, rel(n[s]["loss"], c[s]))
    if s > show:
        continue
    worst = max(worst, d)
    tm = next((r["ms"] for r in peer if r.get("impl") == "torch-eager" and r.get("step") == s), float("nan"))
    print(f"{s:>4} {n[s]['loss']:>12.7f} {e[s]:>12.7f} {d:>9.2e} {f.get(s, float('nan')):>12.7f} "
          f"{rel(n[s]['loss'], f[s]) if s in f else float('nan'):>9.2e} "
          f"{rel(e[s], f[s]) if s in f else float('nan'):>9.2e} "
          f"{rel(c[s], f[s]) if s in c and s in f else float('nan'):>11.2e} {n[s]['ms']:>8.3f} {tm:>8.3f}")
last = max(n)
print(f"max rel diff nnc vs torch f32: steps 1-{min(show, last)} {worst:.2e}, all {last} steps {worst_all:.2e} "
      f"(goal <= 1e-4: {'ok' if worst_all <= 1e-4 else 'MISSED'})"
      + (f"; nnc vs torch.compile {worst_c:.2e}" if c else ""))
# Timing: per round the median ms of the steps after the warm-up; over the
# rounds their median and range.
med = lambda xs: statistics.median(xs)
ms = {"nnc": []}
for r in range(1, rounds + 1):
    rn = [x for x in load(f"{work}/gpt2_nnc.{r}.jsonl") if "ms" in x]
    ms["nnc"].append(med([x["ms"] for x in rn][warmup:]))
    for x in load(f"{work}/gpt2_torch.{r}.jsonl"):
        if x.get("summary") and "median_ms" in x:
            ms.setdefault(x["impl"], []).append(x["median_ms"])
fmt = lambda v: f"{med(v):8.3f} ms ({min(v):.3f}..{max(v):.3f})"
nnc_ms = med(ms["nnc"])
print(f"ms/step, median of steps {warmup + 1}-{last} per round, median (range) of {rounds} round(s):")
print(f"  {'nnc':<14} {fmt(ms['nnc'])}")
for impl in ("torch-eager", "torch-compile", "torch-f64"):
    r = summ.get(impl)
    if r and "error" in r:
        print(f"  {impl:<14} failed: {r['error']}")
    if impl not in ms:
        continue
    extra = f"  first step {r['first_ms'] / 1e3:.1f} s (compilation)" if impl == "torch-compile" and r else ""
    if r and r.get("optimizer"):
        extra += f", optimizer {r['optimizer']}"
    print(f"  {impl:<14} {fmt(ms[impl])}   PyTorch/nnc {med(ms[impl]) / nnc_ms:5.2f}x{extra}")
EOF
}

# ----------------------------------------------------------------- digits
run_digits() {
  local dir=$WORK/digits data=$WORK/digits_data
  echo
  echo "== digits (64 -> $DIGITS_HIDDEN relu -> 10), $DIGITS_STEPS updates of $DIGITS_B images, AdamW lr $DIGITS_LR," \
       "wd $WD, test every $EVAL_EVERY, $THREADS threads"
  build digits "$dir" -D hidden="$DIGITS_HIDDEN"
  local t0 t1
  t0=$(now_s)
  "$PY" "$ROOT/bench/train_peers.py" digits --out "$data" --hidden "$DIGITS_HIDDEN" --B "$DIGITS_B" \
    --steps "$DIGITS_STEPS" --lr "$DIGITS_LR" --wd "$WD" --threads "$THREADS" --skip "$WARMUP" \
    --eval-every "$EVAL_EVERY" --impl torch-eager,torch-f64 >"$WORK/digits_torch.jsonl" 2>"$WORK/digits_torch.err" \
    || { cat "$WORK/digits_torch.err" >&2; exit 1; }
  t1=$(now_s)
  local torch_proc
  torch_proc=$(echo "$t1 - $t0" | bc)
  t0=$(now_s)
  "$dir/train_digits" --data "$data/digits_train.safetensors" --val "$data/digits_test.safetensors" \
    --weights "$data/digits_init.safetensors" --steps "$DIGITS_STEPS" --batch "$DIGITS_B" --lr "$DIGITS_LR" \
    --wd "$WD" --eval-every "$EVAL_EVERY" --threads "$THREADS" --save "$WORK/digits_nnc.safetensors" --json \
    >"$WORK/digits_nnc.jsonl"
  t1=$(now_s)
  local nnc_wall
  nnc_wall=$(echo "$t1 - $t0" | bc)
  "$PY" - "$WORK/digits_nnc.jsonl" "$WORK/digits_torch.jsonl" "$nnc_wall" "$torch_proc" \
    "$WORK/digits_nnc.safetensors" "$data/digits_test.safetensors" <<'EOF'
import json, sys
import numpy as np
from safetensors.numpy import load_file
nnc_path, torch_path, nnc_wall, torch_proc = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
# The test accuracy of the weights train_digits saved, computed here (numpy):
# the same figure as its last val_accuracy
w, te = load_file(sys.argv[5]), load_file(sys.argv[6])
h = np.maximum(te["x"] @ w["fc1.weight"].T + w["fc1.bias"], 0)
saved_acc = float(np.mean((h @ w["fc2.weight"].T + w["fc2.bias"]).argmax(-1) == te["y"]))
nnc = [json.loads(l) for l in open(nnc_path) if l.strip()]
peer = [json.loads(l) for l in open(torch_path) if l.strip()]
nl = {r["step"]: r["loss"] for r in nnc if "loss" in r}
nv = {r["step"]: r for r in nnc if "val_loss" in r}
tl = {r["step"]: r["loss"] for r in peer if r.get("impl") == "torch-eager" and "loss" in r}
fl = {r["step"]: r["loss"] for r in peer if r.get("impl") == "torch-f64" and "loss" in r}
tv = {r["step"]: r for r in peer if r.get("impl") == "torch-eager" and "val_loss" in r}
summ = {r["impl"]: r for r in peer if r.get("summary")}
rel = lambda a, b: abs(a - b) / abs(b)
print(f"{'step':>5} {'nnc acc':>8} {'torch acc':>9} {'nnc val loss':>12} {'torch val loss':>14} {'train loss rel diff':>19}")
for s in sorted(nv):
    t = tv.get(s, {})
    print(f"{s:>5} {100 * nv[s]['val_accuracy']:>7.2f}% {100 * t.get('val_accuracy', float('nan')):>8.2f}% "
          f"{nv[s]['val_loss']:>12.6f} {t.get('val_loss', float('nan')):>14.6f} "
          f"{rel(nl[s], tl[s]) if s in tl else float('nan'):>19.2e}")
common = [s for s in nl if s in tl]
d = max(rel(nl[s], tl[s]) for s in common)
df = max(rel(nl[s], fl[s]) for s in common if s in fl) if fl else float("nan")
dtf = max(rel(tl[s], fl[s]) for s in common if s in fl) if fl else float("nan")
first95 = min((s for s in nv if nv[s]["val_accuracy"] >= 0.95), default=None)
last = max(nv)
print(f"train loss, max rel diff over {len(common)} steps: nnc vs torch f32 {d:.2e}, nnc vs torch f64 {df:.2e}, "
      f"torch f32 vs f64 {dtf:.2e}")
print(f"test accuracy after {last} updates: nnc {100 * nv[last]['val_accuracy']:.2f}% "
      f"({'>= 95%' if nv[last]['val_accuracy'] >= 0.95 else 'BELOW 95%'}; first >= 95% at update {first95}), "
      f"PyTorch {100 * tv[last]['val_accuracy']:.2f}%" if last in tv else "")
print(f"the saved checkpoint's test accuracy (numpy): {100 * saved_acc:.2f}% "
      f"({'the same' if abs(saved_acc - nv[last]['val_accuracy']) < 1e-6 else 'DIFFERENT from train_digits'})")
nsum = sum(r["ms"] for r in nnc if "ms" in r) / 1e3
e = summ.get("torch-eager", {})
print(f"time: nnc train_digits {nnc_wall:.3f} s wall (whole process: load, {last} updates, evaluations; "
      f"updates alone {nsum:.3f} s)")
if "total_s" in e:
    tsum = sum(r["ms"] for r in peer if r.get("impl") == "torch-eager" and "ms" in r) / 1e3
    print(f"      PyTorch eager f32 {e['total_s']:.3f} s training loop (updates and evaluations; updates alone "
          f"{tsum:.3f} s; the python process, all impls and data, {torch_proc:.1f} s)"
          f"  PyTorch/nnc: loop/wall {e['total_s'] / nnc_wall:.1f}x, updates {tsum / nsum:.1f}x")
EOF
}

# --------------------------------------------------------------- variants
# train_<model>'s other options against the same PyTorch loop, STEPS updates
# each (at least VARIANT_STEPS): one line per variant with the largest
# relative differences of the loss, gradient norm and learning rate.
# A variant: "options of both|nnc only|PyTorch only".
GPT2_VARIANTS=(
  "--accumulate 3||"
  "--clip 0.3||"
  "--warmup 5 --decay-steps 12 --min-lr-ratio 0.1||"
  "--sgd --lr 0.05||"
  "--wd 0.1 --beta1 0.8 --beta2 0.95 --eps 1e-6 --lr 3e-3||"
  "--accumulate 2 --clip 0.5 --warmup 3 --decay-steps 20 --lr 2e-3||"
)
DIGITS_VARIANTS=(
  "|--batch 100|--B 100"
  "--shuffle|--batch 100 --seed 7|--B 100 --shuffle-seed 7"
  "--shuffle --accumulate 2 --clip 1|--batch 64 --seed 3|--B 64 --shuffle-seed 3"
  "--sgd --lr 0.05|--batch 32|--B 32"
)
VARIANT_STEPS=${VARIANT_STEPS:-40}

run_variants() {
  local model=$1 dir data v both mine theirs i=0 steps=$STEPS
  [ "$steps" -ge "$VARIANT_STEPS" ] || steps=$VARIANT_STEPS
  local -a list
  if [ "$model" = gpt2 ]; then
    dir=$WORK/gpt2 data=$WORK/gpt2_data list=("${GPT2_VARIANTS[@]}")
    build gpt2 "$dir" -D layers="$LAYERS" -D d="$D" -D heads="$HEADS" -D vocab="$VOCAB" -D ctx="$CTX" \
      -D batch="$B"
  else
    dir=$WORK/digits data=$WORK/digits_data list=("${DIGITS_VARIANTS[@]}")
    build digits "$dir" -D hidden="$DIGITS_HIDDEN"
  fi
  echo
  echo "== $model: train_$model's options against PyTorch f32 (and f64), $steps updates each, $THREADS threads"
  for v in "${list[@]}"; do
    IFS='|' read -r both mine theirs <<<"$v"
    i=$((i + 1))
    # shellcheck disable=SC2086
    if [ "$model" = gpt2 ]; then
      "$PY" "$ROOT/bench/train_peers.py" gpt2 --out "$data" --layers "$LAYERS" --d "$D" --heads "$HEADS" \
        --vocab "$VOCAB" --ctx "$CTX" --B "$B" --T "$T" --steps "$steps" --wd "$WD" --lr "$LR" \
        --threads "$THREADS" --impl torch-eager,torch-f64 $both $theirs >"$WORK/var_$model.$i.torch.jsonl"
      "$dir/train_gpt2" --data "$data/gpt2_train.bin" --weights "$data/gpt2_init.safetensors" --steps "$steps" \
        --batch "$B" --seq "$T" --wd "$WD" --lr "$LR" --threads "$THREADS" --json $both $mine \
        >"$WORK/var_$model.$i.nnc.jsonl"
    else
      "$PY" "$ROOT/bench/train_peers.py" digits --out "$data" --hidden "$DIGITS_HIDDEN" --steps "$steps" \
        --wd "$WD" --lr "$DIGITS_LR" --threads "$THREADS" --impl torch-eager,torch-f64 $both $theirs \
        >"$WORK/var_$model.$i.torch.jsonl"
      "$dir/train_digits" --data "$data/digits_train.safetensors" --weights "$data/digits_init.safetensors" \
        --steps "$steps" --wd "$WD" --lr "$DIGITS_LR" --threads "$THREADS" --json $both $mine \
        >"$WORK/var_$model.$i.nnc.jsonl"
    fi
    "$PY" - "$WORK/var_$model.$i.nnc.jsonl" "$WORK/var_$model.$i.torch.jsonl" "$both $mine" <<'EOF'
import json, sys
load = lambda p: [json.loads(l) for l in open(p) if l.strip()]
n = {r["step"]: r for r in load(sys.argv[1]) if "loss" in r}
t = {}
for r in load(sys.argv[2]):
    if "loss" in r:
        t.setdefault(r["impl"], {})[r["step"]] = r
e, f = t["torch-eager"], t["torch-f64"]
rel = lambda a, b: abs(a - b) / max(abs(b), 1e-30)
steps = [s for s in sorted(n) if s in e and s in f]
worst = lambda k, x, y: max(rel(x[s][k], y[s][k]) for s in steps)
dl, dn, dr = worst("loss", n, e), worst("grad_norm", n, e), worst("lr", n, e)
ok = max(dl, dn, dr) <= 1e-4 and len(steps) == len(n) == len(e)
print(f"  {' '.join(sys.argv[3].split()):<56} loss {dl:8.2e} (nnc-f64 {worst('loss', n, f):8.2e}, f32-f64 "
      f"{worst('loss', e, f):8.2e})  grad norm {dn:8.2e}  lr {dr:8.2e}  "
      f"last loss {n[steps[-1]]['loss']:.4f}  {'ok' if ok else 'ABOVE 1e-4'}")
EOF
  done
}

for w in "${WHAT[@]}"; do
  case $w in
    gpt2) run_gpt2 ;;
    digits) run_digits ;;
    gpt2-variants) run_variants gpt2 ;;
    digits-variants) run_variants digits ;;
    *) echo "train_compare.sh: $w: expected gpt2, digits, gpt2-variants or digits-variants" >&2; exit 1 ;;
  esac
done
