#!/usr/bin/env bash
# bench/gpu_ab.sh: model folders side by side on one GPU, in one command:
# the A/B of a change (the folder before it against the folder after it).
#
#   FOLDERS="build/ab/bert_base build/ab/bert_new" CASES="32 128
#   1 16" bash bench/gpu_ab.sh
#
# Each folder (generated here by nnc, built there) is built with make (all at
# once), checked against the float64 reference at CHECK (default "3 17":
# B=3 T=17) with its harness's NaN-poisoned outputs, then timed: ROUNDS rounds
# (default 3), each running every case (B T lines, or B T S for a --generate
# folder's cached keys) on every folder in turn,
# `bench_<model> --json --runs RUNS --warmup 10 -d B -d T [-d S] --cuda-graphs
# GRAPHS` (RUNS 100, GRAPHS on), so that a drift of the GPU's clocks falls
# on all folders alike. MEMCHECK names folders to run under compute-sanitizer
# memcheck at CHECK. Prints one table: a row a case, the folders' medians
# (lowest-highest over the rounds) and each folder's ratio to the first.
# Logs go to $OUT (or build/ab/out). BUDGET (seconds, default 540): no round
# starts after it. Exits 1 when a build or check fails.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/build/ab/out}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-100}
GRAPHS=${GRAPHS:-on}
CHECK=${CHECK:-"3 17"}
BUDGET=${BUDGET:-540}
MEMCHECK=${MEMCHECK:-}
T0=$(date +%s)
mkdir -p "$OUT"
status=0

# the model of a folder: its bench_<model>.c
model_of() { basename "$(ls "$1"/bench_*.c)" .c | sed 's/^bench_//'; }
dims_of() { set -- $1; echo "-d B=$1${2:+ -d T=$2}${3:+ -d S=$3}"; }
median_of() { grep -o '"median_ms": [0-9.e+-]*' "$1" 2>/dev/null | tail -1 | cut -d' ' -f2 | grep . || echo -; }

echo "== build"
for f in $FOLDERS; do
  (make -C "$f" -j"$(nproc)" > "$OUT/build_$(basename "$f").log" 2>&1 && echo "built $f" ||
    { echo "FAIL build $f: $(tail -3 "$OUT/build_$(basename "$f").log")"; exit 1; }) &
done
wait
for f in $FOLDERS; do [ -x "$f/bench_$(model_of "$f")" ] || status=1; done
[ $status -eq 0 ] || exit 1

echo "== check ($(dims_of "$CHECK"))"
for f in $FOLDERS; do
  m=$(model_of "$f")
  "$f/bench_$m" --check $(dims_of "$CHECK") --runs 2 --warmup 1 > "$OUT/check_$(basename "$f").log" 2>&1
  rc=$?
  echo "$(basename "$f"): rc $rc $(grep -m3 -i "max relative error\|cosine\|FAIL" "$OUT/check_$(basename "$f").log" | tr '\n' ' ')"
  [ $rc -eq 0 ] || status=1
done
for f in $MEMCHECK; do
  m=$(model_of "$f")
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$f/bench_$m" --check $(dims_of "$CHECK") \
    --runs 1 --warmup 0 > "$OUT/memcheck_$(basename "$f").log" 2>&1
  rc=$?
  echo "memcheck $(basename "$f"): rc $rc $(grep -m1 "ERROR SUMMARY" "$OUT/memcheck_$(basename "$f").log")"
  [ $rc -eq 0 ] || status=1
done

echo "== time (graphs $GRAPHS, $RUNS runs, $ROUNDS rounds)"
for r in $(seq "$ROUNDS"); do
  if [ $(($(date +%s) - T0)) -gt "$BUDGET" ]; then echo "budget spent before round $r"; break; fi
  while read -r c; do
    [ -n "$c" ] || continue
    for f in $FOLDERS; do
      m=$(model_of "$f")
      timeout 120 "$f/bench_$m" --json --runs "$RUNS" --warmup 10 $(dims_of "$c") --cuda-graphs "$GRAPHS" \
        < /dev/null > "$OUT/time_$(basename "$f")_${c// /_}_$r.json" 2>&1
    done
  done <<< "$CASES"
done

echo "== table: median ms (lowest-highest of the rounds), ratio of the lowest to the first folder's"
printf "%-10s" "B T"
for f in $FOLDERS; do printf " | %-24s" "$(basename "$f")"; done
echo
while read -r c; do
  [ -n "$c" ] || continue
  printf "%-10s" "$c"
  first=""
  for f in $FOLDERS; do
    vals=$(for j in "$OUT"/time_"$(basename "$f")"_"${c// /_}"_*.json; do median_of "$j"; done | grep -v '^-$' | sort -g)
    lo=$(head -1 <<< "$vals"); hi=$(tail -1 <<< "$vals")
    [ -n "$first" ] || first=$lo
    ratio=$(awk -v a="$first" -v b="$lo" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", b / a; else print "-" }')
    printf " | %-24s" "${lo:--}-${hi:--} (${ratio})"
  done
  echo
done <<< "$CASES"
exit $status
