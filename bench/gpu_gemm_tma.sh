#!/usr/bin/env bash
# bench/gpu_gemm_tma.sh: templates/cuda/gemm_tma.cuh on an H100/H200 in one
# GPU call: build test_gemm_tma (sm_90a; ptxas -v's registers and spills to
# the log), a short smoke run first (a hang there costs 60 s, not the call),
# the float64 tests, the timings against cuBLASLt and gemm_wgmma.cuh, then
# compute-sanitizer memcheck and racecheck on the small cases while the
# budget lasts, and the timing table last.
# The smoke run uses the watchdog build (a deadlock prints the barrier it
# waited on and traps after 20 s); everything after it the plain build, as
# the watchdog's printf makes ptxas serialize the wgmmas (info C7510), which
# could hide a stage released too early.
# Run from the repository root. Logs go to $OUT (build/gpu_gemm_tma_out when
# unset). GEMM_TMA_BIN: a folder holding test_gemm_tma and test_gemm_tma_wd
# built by the nvcc lines below (built where nvcc is, carried to the GPU
# machine): no build here.
set -uo pipefail
OUT=${OUT:-build/gpu_gemm_tma_out}
mkdir -p "$OUT"
# BUDGET: seconds for the whole script (a device call allows 600); each
# step's timeout is cut to what is left, so the table still comes out
BUDGET=${BUDGET:-560}
# shellcheck source=bench/gpu_gemm_lib.sh
. "$(dirname "$0")/gpu_gemm_lib.sh"

device

if [ -n "${GEMM_TMA_BIN:-}" ] && [ -x "$GEMM_TMA_BIN/test_gemm_tma" ] && [ -x "$GEMM_TMA_BIN/test_gemm_tma_wd" ]; then
  BIN=$GEMM_TMA_BIN
  step "build: using $BIN"
else
  BIN=$(mktemp -d)
  step "build (test_gemm_tma_wd: with the watchdog, for the smoke run; test_gemm_tma: the rest)"
  flags="-std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda -Itests/gpu -I."
  flags="$flags -Xcompiler -Wall,-Wextra -Werror all-warnings -Xptxas -v"
  nvcc $flags -DNNC_GEMM_TMA_WATCHDOG -o "$BIN/test_gemm_tma_wd" tests/gpu/test_gemm_tma.cu -lcuda -lcublasLt \
    >"$OUT/build_wd.log" 2>&1 &
  p1=$!
  nvcc $flags -o "$BIN/test_gemm_tma" tests/gpu/test_gemm_tma.cu -lcuda -lcublasLt >"$OUT/build.log" 2>&1 &
  p2=$!
  wait $p1 || { tail -30 "$OUT/build_wd.log"; exit 1; }
  wait $p2 || { tail -30 "$OUT/build.log"; exit 1; }
  registers nnc_gemm_tma_kernel "$OUT/build.log"
fi

step "smoke (--small, 60 s limit: a hang shows here)"
if ! smoke "$BIN/test_gemm_tma_wd" 3; then
  grep '^FAIL' "$OUT/smoke.log" | head -20
  echo "overall status: 1 (smoke failed; nothing else run)"
  exit 1
fi

correctness "$BIN/test_gemm_tma" 180 || status=1

# the timings before the sanitizers (the table matters more than the
# sanitizers if the call runs short), printed last
timings "$BIN/test_gemm_tma" 150 || status=1

sanitizers "$BIN/test_gemm_tma" 120 30

echo "overall status: $status (0: built clean, every check passed, sanitizers clean)"
sed -n '/^## gemm_tma/,$p' "$OUT/time.log"
exit $status
