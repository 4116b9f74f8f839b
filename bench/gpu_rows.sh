#!/usr/bin/env bash
# bench/gpu_rows.sh: the CUDA row kernels on a GPU machine, in one go: build
# (nvcc -O3 -arch=sm_90), correctness tests, compute-sanitizer memcheck and
# racecheck on the small case, timings, the PyTorch peer, and one table last.
# Run from the repository root. Logs go to $OUT (or build/gpu_rows when unset).
set -uo pipefail
OUT=${OUT:-build/gpu_rows}
mkdir -p "$OUT"
TMP=$(mktemp -d)
BIN=$TMP/gpu_rows
status=0

step() { echo "== $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  2>&1 | tee "$OUT/bench.log"

step "build"
if ! nvcc -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra -Xptxas -v -o "$BIN" bench/gpu_rows.cu \
    >"$OUT/build.log" 2>&1; then
  cat "$OUT/build.log"; exit 1
fi
grep -i "warning" "$OUT/build.log" && status=1

step "correctness (float64 reference)"
"$BIN" --test >"$OUT/test.log" 2>&1
rc=$?
grep -c '^PASS' "$OUT/test.log" | sed 's/^/passed: /'
grep '^FAIL' "$OUT/test.log" | head -20
tail -1 "$OUT/test.log"
[ $rc -ne 0 ] && status=1

: >"$OUT/sanitizer.log"
for tool in memcheck racecheck; do
  step "compute-sanitizer $tool (small case)"
  timeout 300 compute-sanitizer --tool $tool --error-exitcode 3 "$BIN" --test --small \
    >"$TMP/$tool.log" 2>&1
  rc=$?
  cat "$TMP/$tool.log" >>"$OUT/sanitizer.log"
  tail -3 "$TMP/$tool.log"
  echo "$tool exit status: $rc"
  [ $rc -ne 0 ] && status=1
done

step "timings (ours)"
"$BIN" --bench "$OUT/ours.csv" 2>&1 | tee -a "$OUT/bench.log" | grep -v samples
[ ${PIPESTATUS[0]} -ne 0 ] && status=1

step "PyTorch peer and table"
PYTHONUNBUFFERED=1 python3 bench/gpu_rows.py "$OUT/ours.csv" "$TMP/peer.csv" \
  >"$OUT/table.md" 2>"$OUT/peer.log" || { status=1; tail -20 "$OUT/peer.log"; }
grep '^  peer' "$OUT/peer.log"
echo "overall status: $status (0: built clean, every check passed, sanitizers clean)"
cat "$OUT/table.md"
exit $status
