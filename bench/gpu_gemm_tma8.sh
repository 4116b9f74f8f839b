#!/usr/bin/env bash
# bench/gpu_gemm_tma8.sh: templates/cuda/gemm_tma8.cuh (e4m3 and s8 operands
# on gemm_tma.cuh's pipeline) on an H100/H200 in one GPU call: the build
# (sm_90a, -Werror; ptxas -v's registers and spills to the log), a short
# smoke run first under the watchdog (a hang costs 60 s, not the call), the
# float64 tests, test_gemm_tma --small (the bf16 kernel shares the
# pipeline), the timings against cuBLASLt FP8 and bf16, gemm_wgmma_fp8,
# gemm_w8a8 and gemm_tma, compute-sanitizer memcheck and racecheck on the
# small cases while the budget lasts, and the timing table last.
# Run from the repository root. Logs go to $OUT (build/gpu_gemm_tma8_out
# when unset). TMA8_BIN: a folder holding test_gemm_tma8, test_gemm_tma8_wd
# and test_gemm_tma built by the nvcc lines below where nvcc is (with
# build.log, their ptxas report), carried to the GPU machine; they are
# rebuilt here when missing or when a library they need is not found.
set -uo pipefail
OUT=${OUT:-build/gpu_gemm_tma8_out}
mkdir -p "$OUT"
BUDGET=${BUDGET:-200}
# shellcheck source=bench/gpu_gemm_lib.sh
. "$(dirname "$0")/gpu_gemm_lib.sh"

device

runnable() { [ -x "$1" ] && ! ldd "$1" 2>&1 | grep -q "not found"; }
BIN=${TMA8_BIN:-}
if [ -n "$BIN" ] && runnable "$BIN/test_gemm_tma8" && runnable "$BIN/test_gemm_tma8_wd" && runnable "$BIN/test_gemm_tma"; then
  step "build: using $BIN"
  cp "$BIN"/build*.log "$OUT/" 2>/dev/null
else
  BIN=$(mktemp -d)
  step "build (test_gemm_tma8_wd: with the watchdog, for the smoke run; test_gemm_tma8, test_gemm_tma: the rest)"
  inc="-Itemplates/cuda -Itests/gpu -I. -Iruntime -Iruntime/cuda"
  flags="-std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A $inc"
  flags="$flags -Xcompiler -Wall,-Wextra -Werror all-warnings -Xptxas -v"
  rt="runtime/status.c runtime/half.c runtime/cuda/status.c runtime/cuda/device.c runtime/cuda/alloc.c"
  rt="$rt runtime/cuda/host.c runtime/cuda/stream.c runtime/cuda/gemm.c runtime/cuda/peaks.c"
  # shellcheck disable=SC2086  # word lists
  nvcc $flags -DNNC_GEMM_TMA_WATCHDOG -o "$BIN/test_gemm_tma8_wd" tests/gpu/test_gemm_tma8.cu $rt -lcuda -lcublasLt \
    >"$OUT/build_wd.log" 2>&1 &
  p1=$!
  # shellcheck disable=SC2086
  nvcc $flags -o "$BIN/test_gemm_tma8" tests/gpu/test_gemm_tma8.cu $rt -lcuda -lcublasLt >"$OUT/build.log" 2>&1 &
  p2=$!
  # shellcheck disable=SC2086
  nvcc $flags -o "$BIN/test_gemm_tma" tests/gpu/test_gemm_tma.cu -lcuda -lcublasLt >"$OUT/build_bf16.log" 2>&1 &
  p3=$!
  wait $p1 || { tail -30 "$OUT/build_wd.log"; exit 1; }
  wait $p2 || { tail -30 "$OUT/build.log"; exit 1; }
  wait $p3 || { tail -30 "$OUT/build_bf16.log"; exit 1; }
fi
# the 168 registers and 3 barriers every instance reports, left out
registers nnc_gemm_tma8_kernel "$OUT/build.log" |
  sort | sed 's/Used 168 registers, used 3 barriers, //'

step "smoke (--small under the watchdog, 60 s limit: a hang shows here)"
smoke "$BIN/test_gemm_tma8_wd" 2
rc=$?
grep -A1 '^FAIL' "$OUT/smoke.log" | head -30
# a hang (124) or a crash (a signal, or the watchdog's trap: CUDA errors exit 1 with "FAIL cuda") stops here;
# cases over their tolerance go on to the full run, which says more
if [ $rc -eq 124 ] || [ $rc -ge 128 ] || grep -q '^FAIL cuda' "$OUT/smoke.log"; then
  echo "overall status: 1 (smoke hung or crashed; nothing else run)"
  exit 1
fi
[ $rc -ne 0 ] && status=1

correctness "$BIN/test_gemm_tma8" 60 || status=1
# the largest error of each type pair, over every case and tile
awk '/^PASS|^FAIL/ && /max rel error/ { t = $3; e = $9 + 0; if (!(t in m) || e > m[t]) m[t] = e }
     END { for (t in m) printf "max rel error %s: %.3g\n", t, m[t] }' "$OUT/test.log" | sort

step "bf16 gemm_tma --small (the shared pipeline)"
timeout "$(limit 40)" "$BIN/test_gemm_tma" --small >"$OUT/test_bf16.log" 2>&1
rc=$?
grep -A1 '^FAIL' "$OUT/test_bf16.log" | head -10
tail -1 "$OUT/test_bf16.log"
[ $rc -ne 0 ] && status=1

timings "$BIN/test_gemm_tma8" 60 || status=1

sanitizers "$BIN/test_gemm_tma8" 60 15

echo "overall status: $status (0: every check passed, sanitizers clean) after $(($(date +%s) - T0)) s"
sed -n '/^## gemm_tma8/,$p' "$OUT/time.log"
exit $status
