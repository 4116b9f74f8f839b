#!/usr/bin/env bash
# bench/cpu_w8a8.sh: nnc's f32 against --quantize=int8w and --quantize=w8a8
# on c-simd, the same machine and run. Builds each model's three folders,
# then alternates them ROUNDS times (bench_<model> --runs RUNS each) and
# prints, per size, the median over rounds of each side's median ms and the
# ratios f32 / int8w and f32 / w8a8 (above 1: faster than f32).
#   NNC=build/release/compiler/nnc ROUNDS=5 RUNS=10 bash bench/cpu_w8a8.sh
set -euo pipefail
nnc=${NNC:-build/release/compiler/nnc}
rounds=${ROUNDS:-5}
runs=${RUNS:-10}
work=${WORK:-$(mktemp -d)}
# model, then the sizes (bench -d flags, comma separated)
cases=(
  "bert B=1,T=128 B=8,T=128"
)
modes=(none int8w w8a8)
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { "$@" --json --no-peaks | grep -o '"median_ms": [0-9.e+-]*' | head -1 | awk '{ print $2 }'; }
printf "%-6s %-12s %10s %10s %10s %11s %10s\n" model dims "f32 ms" "int8w ms" "w8a8 ms" "f32/int8w" "f32/w8a8"
for spec in "${cases[@]}"; do
  read -r model sizes <<< "$spec"
  for q in "${modes[@]}"; do
    [ -x "$work/${model}_$q/bench_$model" ] && continue
    "$nnc" "models/$model.lua" --quantize=$q -o "$work/${model}_$q"
    make -s -C "$work/${model}_$q" -j2 "bench_$model" > /dev/null
  done
  for size in $sizes; do
    flags=$(tr ',' '\n' <<< "$size" | sed 's/^/-d /' | tr '\n' ' ')
    for q in "${modes[@]}"; do : > "$work/$q.txt"; done
    for _ in $(seq "$rounds"); do
      for q in "${modes[@]}"; do
        # shellcheck disable=SC2086
        ms "$work/${model}_$q/bench_$model" $flags --runs "$runs" >> "$work/$q.txt"
      done
    done
    f=$(median < "$work/none.txt")
    i=$(median < "$work/int8w.txt")
    w=$(median < "$work/w8a8.txt")
    printf "%-6s %-12s %10.3f %10.3f %10.3f %11.2f %10.2f\n" "$model" "$size" "$f" "$i" "$w" \
      "$(awk -v f="$f" -v q="$i" 'BEGIN { print f / q }')" "$(awk -v f="$f" -v q="$w" 'BEGIN { print f / q }')"
  done
done
