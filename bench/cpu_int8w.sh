#!/usr/bin/env bash
# bench/cpu_int8w.sh: nnc's f32 against --quantize=int8w on c-simd, the same
# machine and run. Builds each model's two folders, then alternates them
# ROUNDS times (bench_<model> --runs RUNS each) and prints, per size, the
# median over rounds of each side's median ms and the ratio f32 / int8w
# (above 1: int8w faster).
#   NNC=build/release/compiler/nnc ROUNDS=5 RUNS=20 bash bench/cpu_int8w.sh
set -euo pipefail
nnc=${NNC:-build/release/compiler/nnc}
rounds=${ROUNDS:-5}
runs=${RUNS:-20}
work=${WORK:-$(mktemp -d)}
# model, then the sizes (bench -d flags, comma separated)
cases=(
  "mlp B=1 B=256"
  "bert B=1,T=16 B=1,T=128 B=8,T=128"
)
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { "$@" --json --no-peaks | grep -o '"median_ms": [0-9.e+-]*' | head -1 | awk '{ print $2 }'; }
printf "%-6s %-12s %10s %10s %8s\n" model dims "f32 ms" "int8w ms" "f32/int8w"
for spec in "${cases[@]}"; do
  read -r model sizes <<< "$spec"
  for q in none int8w; do
    [ -x "$work/${model}_$q/bench_$model" ] && continue
    "$nnc" "models/$model.lua" --quantize=$q -o "$work/${model}_$q"
    make -s -C "$work/${model}_$q" -j2 "bench_$model" > /dev/null
  done
  for size in $sizes; do
    flags=$(tr ',' '\n' <<< "$size" | sed 's/^/-d /' | tr '\n' ' ')
    : > "$work/f32.txt"
    : > "$work/q8.txt"
    for _ in $(seq "$rounds"); do
      # shellcheck disable=SC2086
      ms "$work/${model}_none/bench_$model" $flags --runs "$runs" >> "$work/f32.txt"
      # shellcheck disable=SC2086
      ms "$work/${model}_int8w/bench_$model" $flags --runs "$runs" >> "$work/q8.txt"
    done
    f=$(median < "$work/f32.txt")
    q=$(median < "$work/q8.txt")
    printf "%-6s %-12s %10.3f %10.3f %8.2f\n" "$model" "$size" "$f" "$q" "$(awk -v f="$f" -v q="$q" 'BEGIN { print f / q }')"
  done
done
