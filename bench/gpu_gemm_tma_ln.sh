#!/usr/bin/env bash
# bench/gpu_gemm_tma_ln.sh: templates/cuda/gemm_tma_ln.cuh on an H100/H200 in
# one GPU call of under 180 s: build test_gemm_tma_ln (sm_90a; ptxas -v's
# registers and spills to the log), a short smoke run first (a hang there
# costs 60 s, not the call), the float64 tests, the timings against
# gemm_tma.cuh and cuBLASLt plus layernorm.cuh's row kernel, then
# compute-sanitizer memcheck and racecheck on the small cases while the
# budget lasts, and the timing table last.
# The smoke run uses the watchdog build (a deadlocked barrier or exchange
# prints what it waited on and traps after 20 s); everything after it the
# plain build (the watchdog's printf makes ptxas serialize the wgmmas).
# Run from the repository root. Logs go to $OUT (build/gpu_gemm_tma_ln_out
# when unset). GEMM_TMA_LN_BIN: a folder holding test_gemm_tma_ln and
# test_gemm_tma_ln_wd (and test_gemm_tma_ln_trace, optional) built by the
# nvcc lines below where nvcc is (with build.log beside them): no build here
# when both run on this machine. The trace build's --trace table (each
# phase of the fused kernel, from in-kernel timer marks) prints last.
set -uo pipefail
OUT=${OUT:-build/gpu_gemm_tma_ln_out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
# BUDGET: seconds for the whole script; each step's timeout is cut to what
# is left, so the table still comes out
BUDGET=${BUDGET:-175}
# shellcheck source=bench/gpu_gemm_lib.sh
. "$(dirname "$0")/gpu_gemm_lib.sh"
device

runs() { # both binaries start and pass the argument checks on this machine (a build elsewhere may not)
  [ -x "$1/test_gemm_tma_ln" ] && [ -x "$1/test_gemm_tma_ln_wd" ] &&
    timeout 30 "$1/test_gemm_tma_ln" --args >"$OUT/probe.log" 2>&1 &&
    timeout 30 "$1/test_gemm_tma_ln_wd" --args >>"$OUT/probe.log" 2>&1
}

if [ -n "${GEMM_TMA_LN_BIN:-}" ] && runs "$GEMM_TMA_LN_BIN"; then
  BIN=$GEMM_TMA_LN_BIN
  step "build: using $BIN"
  [ -f "$BIN/build.log" ] && cp "$BIN/build.log" "$OUT/build.log"
else
  [ -n "${GEMM_TMA_LN_BIN:-}" ] && { echo "carried binaries do not run here:"; tail -5 "$OUT/probe.log"; }
  BIN=$(mktemp -d)
  step "build (test_gemm_tma_ln_wd: with the watchdog, for the smoke run; test_gemm_tma_ln: the rest)"
  flags="-std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda -Itests/gpu -I."
  flags="$flags -Xcompiler -Wall,-Wextra -Werror all-warnings -Xptxas -v"
  nvcc $flags -DNNC_GEMM_TMA_WATCHDOG -o "$BIN/test_gemm_tma_ln_wd" tests/gpu/test_gemm_tma_ln.cu -lcuda -lcublasLt \
    >"$OUT/build_wd.log" 2>&1 &
  p1=$!
  nvcc $flags -o "$BIN/test_gemm_tma_ln" tests/gpu/test_gemm_tma_ln.cu -lcuda -lcublasLt >"$OUT/build.log" 2>&1 &
  p2=$!
  nvcc $flags -DNNC_GEMM_TMA_LN_TRACE -o "$BIN/test_gemm_tma_ln_trace" tests/gpu/test_gemm_tma_ln.cu -lcuda \
    -lcublasLt >"$OUT/build_trace.log" 2>&1 &
  p3=$!
  wait $p1 || { tail -30 "$OUT/build_wd.log"; exit 1; }
  wait $p2 || { tail -30 "$OUT/build.log"; exit 1; }
  wait $p3 || tail -30 "$OUT/build_trace.log" # the trace is extra: the rest runs without it
fi
# the kernel's registers and spills, one line an instance (T, NH, warpgroups,
# blocks a cluster; with two warpgroups ptxas reports the launch's 168, the
# consumers run with setmaxnreg's 232)
registers nnc_gemm_tma_ln_kernel "$OUT/build.log"

step "smoke (--small, watchdog build, 60 s limit: a hang shows here)"
if ! smoke "$BIN/test_gemm_tma_ln_wd" 3; then
  grep -A1 '^FAIL\|watchdog' "$OUT/smoke.log" | head -30
  echo "overall status: 1 (smoke failed; nothing else run)"
  exit 1
fi

correctness "$BIN/test_gemm_tma_ln" 60 || status=1
# the timings before the sanitizers (the table matters more if the call runs short), printed last
timings "$BIN/test_gemm_tma_ln" 45 || status=1

# where the fused kernel's time goes (the trace build's phase marks)
if [ -x "$BIN/test_gemm_tma_ln_trace" ]; then
  step "phases (--trace)"
  timeout "$(limit 30)" "$BIN/test_gemm_tma_ln_trace" --trace >"$OUT/trace.log" 2>&1
  echo "trace exit status: $?"
fi

sanitizers "$BIN/test_gemm_tma_ln" 60 15

echo "overall status: $status (0: built clean, every check passed, sanitizers clean)"
sed -n '/^## gemm_tma_ln/,$p' "$OUT/time.log"
[ -f "$OUT/trace.log" ] && sed -n '/^## gemm_tma_ln phases/,$p' "$OUT/trace.log"
exit $status
