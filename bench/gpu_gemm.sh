#!/usr/bin/env bash
# bench/gpu_gemm.sh: the CUDA GEMM (templates/cuda/gemm.cuh) on a GPU machine,
# in one go: build (nvcc -O3 -arch=sm_90, plain sm_90), correctness tests,
# compute-sanitizer memcheck and racecheck on the small case, timings, the
# PyTorch peer, and one table last. Run from the repository root.
# Logs go to $OUT (or build/gpu_gemm_out when unset). When GPU_GEMM_BIN names
# a folder holding test_gemm and gpu_gemm built by the same nvcc line, the
# build step is skipped (the build takes minutes; the GPU time is scarcer).
set -uo pipefail
OUT=${OUT:-build/gpu_gemm_out}
mkdir -p "$OUT"
status=0

step() { echo "== $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  2>&1 | tee "$OUT/bench.log"

if [ -n "${GPU_GEMM_BIN:-}" ] && [ -x "$GPU_GEMM_BIN/test_gemm" ] && [ -x "$GPU_GEMM_BIN/gpu_gemm" ]; then
  BIN=$GPU_GEMM_BIN
  step "build: using $BIN"
else
  BIN=$(mktemp -d)
  step "build"
  flags="-std=c++17 -O3 -arch=sm_90 -I. -Xcompiler -Wall,-Wextra -Werror all-warnings -Xptxas -v"
  nvcc $flags -o "$BIN/test_gemm" tests/gpu/test_gemm.cu >"$OUT/build.log" 2>&1 &
  p1=$!
  nvcc $flags -o "$BIN/gpu_gemm" bench/gpu_gemm.cu >"$OUT/build_bench.log" 2>&1 &
  p2=$!
  wait $p1 || { cat "$OUT/build.log"; exit 1; }
  wait $p2 || { cat "$OUT/build_bench.log"; exit 1; }
fi

step "correctness (float64 reference)"
"$BIN/test_gemm" >"$OUT/test.log" 2>&1
rc=$?
grep -c '^PASS' "$OUT/test.log" | sed 's/^/passed: /'
grep '^FAIL' "$OUT/test.log" | head -20
tail -1 "$OUT/test.log"
[ $rc -ne 0 ] && status=1

for tool in memcheck racecheck; do
  step "compute-sanitizer $tool (small case)"
  timeout 70 compute-sanitizer --tool $tool --error-exitcode 3 "$BIN/test_gemm" --small \
    >"$OUT/$tool.log" 2>&1
  rc=$?
  tail -3 "$OUT/$tool.log"
  echo "$tool exit status: $rc"
  [ $rc -ne 0 ] && status=1
done

step "timings (ours)"
"$BIN/gpu_gemm" "$OUT/ours.csv" 2>&1 | tee -a "$OUT/bench.log"
[ ${PIPESTATUS[0]} -ne 0 ] && status=1

step "ncu: stall reasons of the AUTO GEMM (ln_gelu_tanh, ln_gelu_erf, linear)"
timeout 60 ncu --clock-control none -k regex:nnc_gemm_kernel --section SpeedOfLight \
  --section WarpStateStats --section Occupancy "$BIN/gpu_gemm" --profile >"$OUT/ncu.log" 2>&1 ||
  echo "ncu exit status: $? (not counted)"
grep -E "nnc_gemm_kernel|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Warp Cycles Per Issued" \
  "$OUT/ncu.log" | sed -E 's/\(nnc_cuda_gemm_args.*//' | head -24

step "PyTorch peer and table"
PYTHONUNBUFFERED=1 python3 bench/gpu_gemm.py "$OUT/ours.csv" >"$OUT/table.md" 2>"$OUT/peer.log" ||
  { status=1; tail -20 "$OUT/peer.log"; }
grep '^  peer' "$OUT/peer.log"
echo "overall status: $status (0: built clean, every check passed, sanitizers clean)"
cat "$OUT/table.md"
exit $status
