#!/usr/bin/env bash
# tests/gpu/run_rt_cuda.sh: the CUDA runtime (runtime/cuda) on a GPU machine,
# in one go: build the GPU test with gcc (plain and with ASan+UBSan), check
# that nnrt_cuda.h compiles as CUDA C++, run the test, the bf16 GEMM timings
# against PyTorch, the ASan build, and compute-sanitizer memcheck on the
# quick case. Run from the repository root; logs go to $OUT (default
# build/rt_cuda_gpu). Exits non-zero when anything failed.
set -uo pipefail
OUT=${OUT:-build/rt_cuda_gpu}
CUDA=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$OUT"
TMP=$(mktemp -d)
status=0
SRC="runtime/status.c runtime/half.c runtime/cuda/status.c runtime/cuda/device.c
     runtime/cuda/alloc.c runtime/cuda/host.c runtime/cuda/stream.c runtime/cuda/gemm.c
     tests/gpu/test_rt_cuda_gpu.c"
FLAGS="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter
       -Iruntime -Iruntime/cuda -I$CUDA/include"
LIBS="-L$CUDA/lib64 -Wl,-rpath,$CUDA/lib64 -lcudart -lcublasLt -lm"

step() { echo "== $*"; }
fail() { echo "FAILED: $*"; status=1; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

step "build"
gcc $FLAGS -O2 $SRC -o "$TMP/t" $LIBS >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
gcc $FLAGS -O1 -g -fsanitize=address,undefined $SRC -o "$TMP/t_asan" $LIBS \
  >>"$OUT/build.log" 2>&1 || fail "ASan build"
printf '#include "nnrt_cuda.h"\n__global__ void k(float *p) { *p = 1; }\n' >"$TMP/h.cu"
for arch in sm_80 sm_90; do
  nvcc -std=c++17 -O3 -arch=$arch -Iruntime -Iruntime/cuda -Xcompiler -Wall,-Wextra \
    -Werror all-warnings -c "$TMP/h.cu" -o "$TMP/h.o" >>"$OUT/build.log" 2>&1 ||
    fail "nnrt_cuda.h under nvcc -arch=$arch"
done
grep -i warning "$OUT/build.log" && fail "warnings"

step "test"
"$TMP/t" -v >"$OUT/test.log" 2>&1 || fail "test"
grep -E '^(FAIL|device|pinned|PASSED|FAILED)' "$OUT/test.log" | head -40
sed -n '/^types/,/^f16->f32/p' "$OUT/test.log"

step "bench: nnrt_cuda_gemm_run vs PyTorch"
"$TMP/t" --bench >"$OUT/bench.log" 2>&1 || fail "bench"
sed -n '/^bench/,/^$/p' "$OUT/bench.log"
PYTHONUNBUFFERED=1 python3 tests/gpu/bench_gemm_torch.py >"$OUT/bench_torch.log" 2>&1 ||
  fail "torch bench"
cat "$OUT/bench_torch.log" | tail -6

step "ASan + UBSan (quick)"
# The CUDA driver maps memory where ASan's shadow gap would be.
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  timeout 120 "$TMP/t_asan" --quick >"$OUT/asan.log" 2>&1 || fail "ASan run"
grep -E 'ERROR|SUMMARY|runtime error|PASSED|FAILED' "$OUT/asan.log" | head -10

step "compute-sanitizer memcheck (quick)"
# The test provokes API errors on purpose (out of memory, an unrecorded event).
timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
  "$TMP/t" --quick \
  >"$OUT/memcheck.log" 2>&1 || fail "memcheck (rc $?)"
grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck.log" | head -5

rm -rf "$TMP"
echo "status: $status"
exit $status
