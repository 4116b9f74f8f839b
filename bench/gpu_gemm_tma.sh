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
status=0
# BUDGET: seconds for the whole script (a device call allows 600); each
# step's timeout is cut to what is left, so the table still comes out
BUDGET=${BUDGET:-560}
T0=$(date +%s)
limit() { # the step's own limit $1, or what is left of the budget if less (at least 1: timeout 0 never stops)
  local left=$((BUDGET - ($(date +%s) - T0)))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

step() { echo "== $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 |
  tee "$OUT/device.log"

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
  # the kernel's registers and spills, one line an instance (ptxas reports the
  # launch's 168; the consumers run with setmaxnreg's 232, the producer 40)
  awk '/Compiling entry function .*nnc_gemm_tma_kernel/ { sub(/.*nnc_gemm_tma_kernelI/, ""); sub(/EEv.*/, ""); k = $0 }
       k != "" && /spill stores/ { sp = $0; sub(/^ +/, "", sp) }
       k != "" && /Used [0-9]+ registers/ { sub(/.*Used/, "Used"); print k ": " $0 ", " sp; k = "" }' "$OUT/build.log"
fi

step "smoke (--small, 60 s limit: a hang shows here)"
timeout 60 "$BIN/test_gemm_tma_wd" --small >"$OUT/smoke.log" 2>&1
rc=$?
tail -3 "$OUT/smoke.log"
echo "smoke exit status: $rc"
if [ $rc -ne 0 ]; then
  grep '^FAIL' "$OUT/smoke.log" | head -20
  echo "overall status: 1 (smoke failed; nothing else run)"
  exit 1
fi

step "correctness (float64 reference, every case)"
timeout "$(limit 180)" "$BIN/test_gemm_tma" >"$OUT/test.log" 2>&1
rc=$?
grep -c '^PASS' "$OUT/test.log" | sed 's/^/passed: /'
grep -A1 '^FAIL' "$OUT/test.log" | head -30
tail -1 "$OUT/test.log"
[ $rc -ne 0 ] && status=1

# the timings before the sanitizers (the table matters more than the
# sanitizers if the call runs short), printed last
step "timings"
timeout "$(limit 150)" "$BIN/test_gemm_tma" --time >"$OUT/time.log" 2>&1
rc=$?
[ $rc -ne 0 ] && status=1
grep -v '^|\|^## \|^$' "$OUT/time.log" | head -20
echo "timing exit status: $rc"

for tool in memcheck racecheck; do
  step "compute-sanitizer $tool (--small)"
  if [ "$(limit 120)" -lt 30 ]; then
    echo "skipped: $(($(date +%s) - T0)) s of the ${BUDGET} s budget used"
    status=1
    continue
  fi
  timeout "$(limit 120)" compute-sanitizer --tool $tool --error-exitcode 3 "$BIN/test_gemm_tma" --small \
    >"$OUT/$tool.log" 2>&1
  rc=$?
  tail -3 "$OUT/$tool.log"
  echo "$tool exit status: $rc"
  [ $rc -ne 0 ] && status=1
done

echo "overall status: $status (0: built clean, every check passed, sanitizers clean)"
sed -n '/^## gemm_tma/,$p' "$OUT/time.log"
exit $status
