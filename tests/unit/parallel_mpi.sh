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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
models=(
  "gpt2 tp:2 -D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3"
  "gpt2 tp:3 -D layers=1 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3"
  "bert tp:4 -D layers=1 -D hidden=20 -D heads=4 -D intermediate=28 -D vocab=31 -D positions=9 -D seq=7 -D batch=2"
  "mlp tp:2 -D batch=5 -D pixels=13 -D hidden1=10 -D hidden2=6 -D classes=3"
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
  echo "$model $plan: $oks of $bad checked outputs ok over $n ranks"
  grep "max relative error" <<< "$out" | sort -u
  [ "$oks" -gt 0 ] && [ "$oks" -eq "$bad" ] || { echo "$out"; echo "FAIL: $model $plan"; exit 1; }
done
# the plan was compiled for 2 ranks: 3 is refused on every rank, with the reason
out=$(timeout 120 "$mpirun" -np 3 --oversubscribe "$work/gpt2_2/bench_gpt2" --runs 1 --no-peaks 2>&1) && {
  echo "$out"; echo "FAIL: 3 ranks ran a plan for 2"; exit 1; }
grep -q "compiled for 2 ranks (--parallel=tp:2), launched with 3" <<< "$out" || { echo "$out"; echo "FAIL: no clear message"; exit 1; }
echo "a world of 3 for a plan of 2: refused"
echo "PASS"
