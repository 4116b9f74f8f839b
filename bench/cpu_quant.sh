#!/usr/bin/env bash
# bench/cpu_quant.sh: nnc's f32 against each --quantize mode on c-simd
# (int8w, w8a8, int4w), the same machine and run. Builds each model's
# folders, then alternates them ROUNDS times (bench_<model> --runs RUNS
# each) and prints, per size, the median over rounds of each mode's median
# ms and its ratio f32 / mode (above 1: faster than f32).
#   NNC=build/release/compiler/nnc ROUNDS=5 RUNS=10 bash bench/cpu_quant.sh
# MODES (default "int8w w8a8 int4w") and CASES ("model size size ...", a
# size is bench's -d flags comma separated; ';' between models) pick others.
set -euo pipefail
nnc=${NNC:-build/release/compiler/nnc}
rounds=${ROUNDS:-5}
runs=${RUNS:-10}
work=${WORK:-$(mktemp -d)}
IFS=';' read -r -a cases <<< "${CASES:-bert B=1,T=16 B=1,T=128 B=8,T=128;gpt2 B=1,T=16}"
read -r -a modes <<< "none ${MODES:-int8w w8a8 int4w}"
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { "$@" --json --no-peaks | grep -o '"median_ms": [0-9.e+-]*' | head -1 | awk '{ print $2 }'; }
printf "%-6s %-12s %10s" model dims "f32 ms"
for q in "${modes[@]:1}"; do printf " %10s %10s" "$q ms" "f32/$q"; done
printf "\n"
for spec in "${cases[@]}"; do
  read -r model sizes <<< "$spec"
  for q in "${modes[@]}"; do
    [ -x "$work/${model}_$q/bench_$model" ] && continue
    "$nnc" "models/$model.lua" --quantize="$q" -o "$work/${model}_$q"
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
    printf "%-6s %-12s %10.3f" "$model" "$size" "$f"
    for q in "${modes[@]:1}"; do
      m=$(median < "$work/$q.txt")
      printf " %10.3f %10.2f" "$m" "$(awk -v f="$f" -v q="$m" 'BEGIN { print f / q }')"
    done
    printf "\n"
  done
done
