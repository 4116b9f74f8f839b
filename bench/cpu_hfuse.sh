#!/usr/bin/env bash
# bench/cpu_hfuse.sh: horizontal fusion (q, k, v as one GEMM) on and off
# (--hfuse=on|off) on c-simd, the same machine and run: BERT's forward
# (bench_bert, median ms) and LLaMA's decode step at B=1 (generate_llama's
# "decode ... ms a step" after a 16-token prompt). Builds each folder twice,
# alternates on and off ROUNDS times and prints the median over rounds of
# each side, their ratio (above 1: the pass is faster), the best round of
# each (on a machine others share, the least disturbed), and the kernels a
# forward runs (those made at load not counted).
#   NNC=build/release/compiler/nnc ROUNDS=7 RUNS=50 bash bench/cpu_hfuse.sh
# LLAMA_DEFINES (e.g. "-D layers=4") shrinks the decoder; default: 125M.
set -euo pipefail
nnc=${NNC:-build/release/compiler/nnc}
rounds=${ROUNDS:-7}
runs=${RUNS:-50}
steps=${STEPS:-32}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
read -r -a llama_defines <<< "${LLAMA_DEFINES:-}"
best() { sort -g | head -1; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { "$@" --json --no-peaks | grep -o '"median_ms": [0-9.e+-]*' | head -1 | awk '{ print $2 }'; }
decode_ms() { (cd "$1" && ./generate_llama --prompt "$2" --steps "$steps") | sed -n 's/.*decode \([0-9.]*\) ms a step.*/\1/p'; }
# kernels a run launches: every kernel but those prepare() runs once at load
kernels() {
  local src=$1 all load
  all=$(grep -c '^  {"' <(sed -n '/kernel_table\[/,/^};/p' "$src"))
  load=$(grep -o 'SKIP([0-9]*, [0-9]*);   /\* kernels\? [0-9 to]*: made once' "$src" |
         awk -F'[(,)]' '{ n += $3 - $2 + 1 } END { print n + 0 }')
  echo $((all - load))
}
build() {   # dir model target-make args...
  local dir=$1 model=$2 goal=$3
  shift 3
  [ -d "$dir" ] || "$nnc" "models/$model.lua" "$@" -o "$dir"
  make -s -C "$dir" -j2 "$goal" > /dev/null
}
for h in on off; do
  build "$work/bert_$h" bert bench_bert --hfuse=$h
  build "$work/llama_$h" llama generate_llama --generate --hfuse=$h "${llama_defines[@]}"
done
prompt=$(seq -s, 1 16)
for h in on off; do : > "$work/bert_$h.txt"; : > "$work/llama_$h.txt"; done
for _ in $(seq "$rounds"); do
  for h in on off; do
    ms "$work/bert_$h/bench_bert" -d B=1 -d T=16 --runs "$runs" >> "$work/bert_$h.txt"
    decode_ms "$work/llama_$h" "$prompt" >> "$work/llama_$h.txt"
  done
done
printf "%-20s %10s %10s %7s %10s %10s %7s %14s\n" case "on ms" "off ms" off/on "best on" "best off" off/on \
  "kernels on/off"
for c in "bert B=1 T=16:bert:bert.c" "llama decode B=1:llama:llama.c"; do
  IFS=: read -r name m src <<< "$c"
  on=$(median < "$work/${m}_on.txt")
  off=$(median < "$work/${m}_off.txt")
  bon=$(best < "$work/${m}_on.txt")
  boff=$(best < "$work/${m}_off.txt")
  printf "%-20s %10.3f %10.3f %7.3f %10.3f %10.3f %7.3f %14s\n" "$name" "$on" "$off" \
    "$(awk -v a="$on" -v b="$off" 'BEGIN { print b / a }')" "$bon" "$boff" \
    "$(awk -v a="$bon" -v b="$boff" 'BEGIN { print b / a }')" \
    "$(kernels "$work/${m}_on/$src")/$(kernels "$work/${m}_off/$src")"
done
