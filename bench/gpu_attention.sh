#!/usr/bin/env bash
# bench/gpu_attention.sh: flash attention (templates/cuda/attention.cuh) on a
# GPU machine, in one go: build for sm_90a (the wgmma path), sm_90 and sm_80
# (warnings checked); on sm_90a and sm_90, the float64-reference test and
# compute-sanitizer memcheck and racecheck on its small cases; timings of ours and of the tile variants, the PyTorch SDPA
# peer (eager and torch.compile), and one table last. PROFILE=1 adds an
# Nsight Compute report of the main causal case (ncu_attention.txt).
# Run from the repository root. Logs go to $OUT (or build/gpu_attention).
set -uo pipefail
OUT=${OUT:-build/gpu_attention}
mkdir -p "$OUT"
TMP=$(mktemp -d)
FLAGS="-std=c++17 -O3 -Xcompiler -Wall,-Wextra -Werror all-warnings -Itemplates/cuda"
status=0

step() { echo "== $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  2>&1 | tee "$OUT/bench.log"

step "build (sm_90a with the wgmma path, sm_90 and sm_80 without)"
SM90A="-gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A"
: >"$OUT/build.log"
nvcc $FLAGS $SM90A -Xptxas -v -o "$TMP/test_attention_sm90a" tests/gpu/test_attention.cu >>"$OUT/build.log" 2>&1 \
  || { cat "$OUT/build.log"; exit 1; }
nvcc $FLAGS -arch=sm_90 -o "$TMP/test_attention_sm90" tests/gpu/test_attention.cu >>"$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log"; status=1; }
nvcc $FLAGS -arch=sm_80 -o "$TMP/test_attention_sm80" tests/gpu/test_attention.cu >>"$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log"; status=1; }
nvcc $FLAGS $SM90A -Xptxas -v -o "$TMP/gpu_attention" bench/gpu_attention.cu >>"$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 1; }
grep -i "warning" "$OUT/build.log" && status=1
grep -E "spill" "$OUT/build.log" | grep -v " 0 bytes spill stores, 0 bytes spill loads" | head -5

: >"$OUT/test.log"
: >"$OUT/sanitizer.log"
for arch in sm90a sm90; do
  step "correctness on $arch (float64 reference)"
  "$TMP/test_attention_$arch" >"$TMP/test_$arch.log" 2>&1
  rc=$?
  cat "$TMP/test_$arch.log" >>"$OUT/test.log"
  grep -c '^PASS' "$TMP/test_$arch.log" | sed 's/^/passed: /'
  grep '^FAIL' "$TMP/test_$arch.log" | head -20
  tail -1 "$TMP/test_$arch.log"
  [ $rc -ne 0 ] && status=1
  # the small cases, and on sm_90a one grid of 528 blocks: the wgmma
  # kernel's BK = 64 path, which small grids do not take
  sets="--small"
  [ $arch = sm90a ] && sets="--small|--case d64_grid528_fused_qkv_causal"
  IFS='|' read -ra runs <<<"$sets"
  for tool in memcheck racecheck; do
    for r in "${runs[@]}"; do
      step "compute-sanitizer $tool on $arch ($r)"
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 "$TMP/test_attention_$arch" $r \
        >"$TMP/$tool.log" 2>&1
      rc=$?
      cat "$TMP/$tool.log" >>"$OUT/sanitizer.log"
      tail -2 "$TMP/$tool.log"
      echo "$tool exit status: $rc"
      [ $rc -ne 0 ] && status=1
    done
  done
done

step "timings (ours and tile variants)"
"$TMP/gpu_attention" "$OUT/ours.csv" 2>&1 | tee -a "$OUT/bench.log"
[ ${PIPESTATUS[0]} -ne 0 ] && status=1

if [ -n "${PROFILE:-}" ]; then
  # where the causal bf16 D=64 kernel's time goes: Nsight Compute's sections
  # for one launch of the default path (the first shape's 11th launch)
  step "ncu profile (causal_b8_h12_t1024_d64, bf16, default tiles)"
  timeout 300 ncu --target-processes all -k regex:nnc_attn_wgmma_kernel --launch-skip 10 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
    "$TMP/gpu_attention" "$TMP/prof.csv" >"$OUT/ncu_attention.txt" 2>&1
  echo "ncu exit status: $? (report in ncu_attention.txt)"
  # its static instruction mix (SASS opcodes, the main loop unrolled)
  {
    echo "== SASS opcode counts, nnc_attn_wgmma_kernel<bf16, 64, 64, 1, 2, 3, 0> (the default)"
    cuobjdump -sass "$TMP/gpu_attention" \
      | awk '/Function : .*nnc_attn_wgmma_kernelI13__nv_bfloat16Li64ELi64ELi1ELi2ELi3ELi0EE/ {f = 1; next} /Function :/ {f = 0} f' \
      | grep -E '/\*[0-9a-f]{4}\*/' | sed -E 's@^ */\*[0-9a-f]+\*/ *@@; s/^@!?U?P[0-9T]+ +//' \
      | awk '{split($1, o, "."); print o[1]}' | sort | uniq -c | sort -rn | head -30
  } >>"$OUT/ncu_attention.txt" 2>&1
fi

step "PyTorch SDPA peer and table"
PYTHONUNBUFFERED=1 python3 bench/gpu_attention.py "$OUT/ours.csv" >"$OUT/table.md" 2>"$OUT/peer.log" \
  || { status=1; tail -20 "$OUT/peer.log"; }
grep '^  peer' "$OUT/peer.log"
echo "overall status: $status (0: built clean, every check passed, sanitizers clean)"
cat "$OUT/table.md"
exit $status
