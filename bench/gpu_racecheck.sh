#!/usr/bin/env bash
# bench/gpu_racecheck.sh: compute-sanitizer racecheck of whole models with
# nnc's own kernels only, on the GPU machine. racecheck cannot follow
# cuBLASLt's Hopper kernels (TMA and mbarrier synchronisation: it reports
# races inside nvjet_sm90 and then fails with an internal error), so every
# GEMM here runs on nnc's GEMM: --tune=measure times every implementation
# (tuning file under build/gpu/race), the times of nnc's GEMMs (the
# mma.sync one at 128x128x32, the wgmma one) are then set to 0.001 us in a
# copy of that file, and a second compile from the copy picks them. The
# benchmark runs with --no-peaks: the device's rate is a cuBLASLt GEMM's.
# A GEMM + layernorm under 4096 rows is still cuBLASLt's GEMM and the row
# kernel (BERT's 12 at B=3 T=17; test_gemm_tma_ln racechecks the fused
# kernel): a run whose hazards all lie inside cuBLASLt's kernels (nvjet_*)
# passes on its check. (compute-sanitizer's --kernel-name-exclude kns=nvjet
# made that run fail with an illegal address inside the sanitizer, session
# 42, where memcheck of the same run is clean.)
# Needs `bash bench/gpu_check.sh generate` run where Lua is (nnc and its
# liblua in build/gpu/bin). Usage, from the repository root there:
#   bash bench/gpu_racecheck.sh          (MODELS="bert gpt2" ARCH=sm_90a)
# Each MODELS gets a folder of its own (build/gpu/race, or race_gpt2 for
# MODELS=gpt2), so that runs of one model each can go side by side: BERT
# then GPT-2 outlasts one device call of 600 s.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu
W=$G/race${MODELS:+_${MODELS// /_}}
ARCH=${ARCH:-sm_90a}
bin=$G/bin
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
rm -rf "$W" && mkdir -p "$W"
status=0
for m in ${MODELS:-bert gpt2}; do
  t=$W/tuning_$m.tsv
  "$bin/nnc" "$ROOT/models/$m.lua" --target=cuda-${ARCH/_/} --precision=bf16 --tune=measure --tune-file="$t" \
    -o "$W/${m}_measured" > "$W/tune_$m.log" 2>&1 || { echo "$m: --tune=measure FAILED"; tail -5 "$W/tune_$m.log"; status=1; continue; }
  awk -F'\t' 'BEGIN { OFS = "\t" } $4 == "nnc-128x128x32" || $4 == "wgmma" { $5 = "0.001" } { print }' "$t" > "$t.own"
  d=$W/${m}_own
  "$bin/nnc" "$ROOT/models/$m.lua" --target=cuda-${ARCH/_/} --precision=bf16 --tune=measure --tune-file="$t.own" \
    -o "$d" > "$W/own_$m.log" 2>&1 || { echo "$m: compile from the edited tuning file FAILED"; status=1; continue; }
  echo "$m: GEMM calls in $m.cu: nnc's mma.sync GEMM $(grep -c 'nnc_cuda_gemm_ex(' "$d/$m.cu"), nnc's wgmma GEMM $(grep -c 'nnc_cuda_gemm_wgmma(g' "$d/$m.cu"), cuBLASLt $(grep -c 'nnrt_cuda_gemm_run(' "$d/$m.cu")"
  make -C "$d" -j16 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" > "$W/make_$m.log" 2>&1 \
    || { echo "$m: build FAILED"; tail -5 "$W/make_$m.log"; status=1; continue; }
  for tool in memcheck racecheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$d/bench_$m" --check -d B=3 -d T=17 --runs 1 \
      --warmup 0 --no-peaks > "$W/${tool}_$m.log" 2>&1
    rc=$?
    # hazards inside cuBLASLt's kernels alone: the run's check decides
    if [ $tool = racecheck ] && [ $rc -eq 9 ] && ! grep -q 'Internal Sanitizer Error' "$W/${tool}_$m.log" &&
       ! grep 'Race reported' "$W/${tool}_$m.log" | grep -v -q ' at nvjet_'; then
      grep -q 'relative error.* ok' "$W/${tool}_$m.log" && rc=0
      echo "$m racecheck: $(grep -c 'Race reported' "$W/${tool}_$m.log") hazards, every one inside cuBLASLt (nvjet_*)"
    fi
    echo "$m $tool: rc=$rc $(grep -h -E 'ERROR SUMMARY|RACECHECK SUMMARY|Internal Sanitizer Error|max relative error' "$W/${tool}_$m.log" | head -3 | tr -s ' ' | tr '\n' ' ')"
    [ $rc -ne 0 ] && status=1
  done
done
[ -z "${OUT:-}" ] || tar czf "$OUT/race_logs${MODELS:+_${MODELS// /_}}.tgz" -C "$W" --exclude '*_measured' --exclude '*_own' . 2>/dev/null
exit $status
