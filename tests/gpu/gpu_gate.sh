#!/usr/bin/env bash
# tests/gpu/gpu_gate.sh: runs one GPU test, or reports it skipped (77) where
# there is no GPU.
#   gpu_gate.sh [OPTIONS] PROGRAM [ARGS...]   a test program
#   gpu_gate.sh --model DIR          a folder from nnc: make, then bench --check
#   gpu_gate.sh --script SCRIPT [ARGS...]   a script of several steps (bash)
# NNC_SANITIZE=memcheck or racecheck (meson test --setup memcheck|racecheck)
# runs the program or the benchmark under compute-sanitizer with that tool,
# the sanitizer's errors an exit status of 9:
#   --sanitize-arg A   A is appended to the program's arguments (--small: its
#                      cases sized for a sanitizer)
#   --sanitizer-opt O  O is given to compute-sanitizer
#   --no-racecheck     skipped under racecheck: the program runs cuBLASLt and no
#                      kernel of nnc's (racecheck cannot follow the TMA and
#                      mbarrier synchronisation of cuBLASLt's Hopper kernels
#                      and reports races inside them)
#   a model folder whose code calls cuBLASLt is skipped under racecheck for
#   the same reason (bench/gpu_racecheck.sh racechecks GPT-2 and BERT with
#   nnc's own GEMMs in every GEMM; the suite's racecheck_models runs it); its
#   benchmark gets --no-peaks under both tools (the device's rate is a large
#   cuBLASLt GEMM's). Scripts are skipped under a sanitizer.
set -uo pipefail
nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
tool=${NNC_SANITIZE:-}
case "$tool" in
  "" | memcheck | racecheck) ;;
  *) echo "NNC_SANITIZE: expected memcheck or racecheck, found \"$tool\""; exit 1 ;;
esac
sanitizer=()
[ -n "$tool" ] && sanitizer=(compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20)

if [ "${1:-}" = --script ]; then
  [ -n "$tool" ] && { echo "$tool: scripts are not run under a sanitizer: skipped"; exit 77; }
  shift
  exec bash "$@"
fi

if [ "${1:-}" = --model ]; then
  dir=$2
  # the folder's own ARCH (its target's, e.g. sm_90a) unless ARCH is given
  make -s -C "$dir" -j8 ${ARCH:+ARCH="$ARCH"} || exit 1
  name=$(basename "$dir")
  bench=$(ls "$dir"/bench_* | head -1)
  extra=()
  if [ -n "$tool" ]; then
    if [ "$tool" = racecheck ] && grep -q 'nnrt_cuda_gemm_run(' "$dir"/*.cu; then
      echo "racecheck: $name calls cuBLASLt, whose Hopper kernels racecheck cannot follow: skipped" \
           "(racecheck_models checks the models with nnc's GEMMs)"
      exit 77
    fi
    extra=(--no-peaks)
  fi
  # odd sizes within each dim's maximum (the harness lists them: "dims: B<=8 T<=32"):
  # a batch of 3, 17 for every other dim
  dims=""
  for d in $("$bench" --help | sed -n 's/^dims: //p'); do
    sym=${d%%<=*} max=${d##*<=} want=17
    [ "$sym" = B ] && want=3
    [ "$max" -lt "$want" ] && want=$max
    dims="$dims -d $sym=$want"
  done
  exec "${sanitizer[@]}" "$bench" --check $dims --runs 2 --warmup 1 "${extra[@]}"
fi

more=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize-arg) more+=("$2"); shift 2 ;;
    --sanitizer-opt) [ -n "$tool" ] && sanitizer+=("$2"); shift 2 ;;
    --no-racecheck)
      [ "$tool" = racecheck ] && { echo "racecheck: $2 runs cuBLASLt and no kernel of nnc's: skipped"; exit 77; }
      shift ;;
    *) break ;;
  esac
done
[ -n "$tool" ] || more=()
exec "${sanitizer[@]}" "$@" "${more[@]}"
