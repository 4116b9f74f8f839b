#!/usr/bin/env bash
# tests/unit/parallel_mpi.sh NNC MPIRUN: tensor-parallel plans end to end on
# c-simd (tests/meson.build runs it). Each model at odd sizes is compiled
# with --parallel=tp:N, built with mpicc and run under mpirun -np N; every
# rank's bench --check compares its outputs with the float64 reference of
# the model without the plan, on the same random weights, which each rank
# slices. Then the refusals: a world that does not match the plan.
set -euo pipefail
nnc=${1:?usage: parallel_mpi.sh NNC MPIRUN}
mpirun=${2:?}
here=$(cd "$(dirname "$0")" && pwd)   # train_steps.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
models=(
  "gpt2 tp:2 -D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3"
  "gpt2 tp:3 -D layers=1 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3"
  "bert tp:4 -D layers=1 -D hidden=20 -D heads=4 -D intermediate=28 -D vocab=31 -D positions=9 -D seq=7 -D batch=2"
  "mlp tp:2 -D batch=5 -D pixels=13 -D hidden1=10 -D hidden2=6 -D classes=3"
  "llama tp:2 -D layers=2 -D d=32 -D heads=4 -D kv_heads=2 -D ffn=24 -D vocab=37 -D ctx=7 -D batch=2"
)
for spec in "${models[@]}"; do
  read -r model plan defines <<< "$spec"
  n=${plan#tp:}
  dir="$work/${model}_$n"
  # shellcheck disable=SC2086
  "$nnc" "models/$model.lua" --parallel="$plan" $defines -o "$dir"
  make -s -C "$dir" -j2 "bench_$model" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; exit 1; }
  out=$(timeout 300 "$mpirun" -np "$n" --oversubscribe "$dir/bench_$model" --check --runs 2 --warmup 0 --threads 1 --no-peaks 2>&1) \
    || { echo "$out"; echo "FAIL: $model $plan"; exit 1; }
  oks=$(grep -c "max relative error .* ok" <<< "$out" || true)
  bad=$(grep -c "max relative error" <<< "$out" || true)
  echo "$model $plan over $n ranks: $oks of $bad outputs ok (rank 0 reports; every rank checks and fails the job on a miss)"
  grep "max relative error" <<< "$out" | sort -u
  [ "$oks" -gt 0 ] && [ "$oks" -eq "$bad" ] || { echo "$out"; echo "FAIL: $model $plan"; exit 1; }
done
# the harness reports what the collectives moved: gpt2 tp:2 at B=3 T=9 d=36
# sums 2 x 2 layers of [3, 9, 36] f32, 15552 bytes a run; at 2 ranks the bus
# traffic of an all_reduce (2 (n-1)/n of it) is the same
out=$(timeout 120 "$mpirun" -np 2 --oversubscribe "$work/gpt2_2/bench_gpt2" --runs 3 --warmup 1 --threads 1 --no-peaks \
      --json 2>&1) || { echo "$out"; echo "FAIL: gpt2 tp:2 --json"; exit 1; }
grep -q '"comm": {"bytes_per_run": 15552, "bus_bytes_per_run": 15552, "wait_ms_per_run": [0-9.e-]*, "bus_gbps": [0-9.e+-]*}' \
  <<< "$out" || { echo "$out"; echo "FAIL: the collectives' bytes a run"; exit 1; }
echo "gpt2 tp:2: 15552 bytes of collectives a run reported"
# the plan was compiled for 2 ranks: 3 is refused on every rank, with the reason
out=$(timeout 120 "$mpirun" -np 3 --oversubscribe "$work/gpt2_2/bench_gpt2" --runs 1 --no-peaks 2>&1) && {
  echo "$out"; echo "FAIL: 3 ranks ran a plan for 2"; exit 1; }
grep -q "compiled for 2 ranks (--parallel=tp:2), launched with 3" <<< "$out" || { echo "$out"; echo "FAIL: no clear message"; exit 1; }
echo "a world of 3 for a plan of 2: refused"

# One weights file: each rank reads its slices of it (F32 straight from the
# mapped file) and checks against the reference that reads it whole.
"$nnc" weights models/gpt2.lua -D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3 -o "$work/w.safetensors"
out=$(timeout 300 "$mpirun" -np 2 --oversubscribe "$work/gpt2_2/bench_gpt2" --check --weights "$work/w.safetensors" \
      --runs 1 --warmup 0 --threads 1 --no-peaks 2>&1) || { echo "$out"; echo "FAIL: tp:2 from a weights file"; exit 1; }
grep "max relative error" <<< "$out"
# a rank that cannot read the file: the job ends, promptly, naming the file
cat > "$work/rank1_lost.sh" <<'SH'
#!/bin/sh
# rank 1 is given a path it cannot read; the others the real file
w=$1
shift
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && w=/nonexistent/w.safetensors
exec "$@" --weights "$w"
SH
start=$(date +%s)
out=$(timeout 120 "$mpirun" -np 2 --oversubscribe sh "$work/rank1_lost.sh" "$work/w.safetensors" \
      "$work/gpt2_2/bench_gpt2" --runs 1 --warmup 0 --threads 1 --no-peaks 2>&1) && {
  echo "$out"; echo "FAIL: a rank without its weights ran"; exit 1; }
took=$(( $(date +%s) - start ))
grep -q "/nonexistent/w.safetensors" <<< "$out" || { echo "$out"; echo "FAIL: no message naming the file"; exit 1; }
[ "$took" -lt 60 ] || { echo "FAIL: the job took $took s to end"; exit 1; }
echo "a rank that cannot read the weights: the job ends in ${took} s, naming the file"

# Data parallelism: gpt2 trained by 2 ranks of 2 rows each takes the same
# steps (loss, gradient norm) as one process with batches of 4 rows.
python3 "$here/train_steps.py" tokens "$work/tokens.bin"
defines="-D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=4"
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --train $defines -o "$work/train1"
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --train --parallel=dp:2 $defines -o "$work/train2"
for d in train1 train2; do
  make -s -C "$work/$d" -j2 train_gpt2 > "$work/$d.make.log" 2>&1 || { cat "$work/$d.make.log"; exit 1; }
done
args=(--data "$work/tokens.bin" --steps 6 --seq 9 --threads 1 --no-peaks --json)
"$work/train1/train_gpt2" "${args[@]}" --batch 4 > "$work/one.json"
timeout 300 "$mpirun" -np 2 --oversubscribe "$work/train2/train_gpt2" "${args[@]}" --batch 2 > "$work/two.json"
python3 "$here/train_steps.py" compare "dp:2 against one process" "$work/one.json" "$work/two.json" 1
# every step sums the f32 gradients of the 34344 parameters (137376 bytes)
# and the loss (4): the harness reports each step's bytes from rank 0
python3 - "$work/two.json" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bad = [s for s in steps if s.get("comm_bytes") != 137380 or s.get("comm_bus_bytes") != 137380]
if not steps or bad:
    sys.exit("FAIL: dp:2 steps' collective bytes, expected 137380 each: %s" % (bad or "no steps"))
print("dp:2: 137380 bytes of collectives a step reported, %d steps" % len(steps))
PY
echo "PASS"
