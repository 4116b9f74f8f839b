#!/usr/bin/env bash
# bench/gpu_suite.sh [SETUP...]: the GPU suite of tests/gpu on the GPU
# machine, in one command. Configures build/gpu-tests, builds its test
# programs and every model folder of build/gpu (from `bash bench/gpu_check.sh
# generate`, run where nnc is built) in parallel, then runs `meson test
# --suite gpu` under each SETUP in turn: "plain" (no sanitizer), "memcheck",
# "racecheck" (default: all three). Prints each run's summary and failures;
# the logs go to $OUT (the device tool's folder) or build/gpu-tests/out.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/build/gpu-tests
out=${OUT:-$B/out}
mkdir -p "$out"
cd "$ROOT"
[ -d "$B" ] || meson setup "$B" tests/gpu > "$out/setup.log" 2>&1 || { tail -20 "$out/setup.log"; exit 1; }
t0=$(date +%s)
ninja -C "$B" > "$out/ninja.log" 2>&1 || { tail -20 "$out/ninja.log"; exit 1; }
# the folders' own ARCH; the f16 ones (cuda-sm70/sm75) for this GPU, as the suite builds them
{ ls -d build/gpu/*_*/ build/gpu/ops/*_*/ | xargs -P 6 -I{} make -s -C {} -j4 > "$out/make.log" 2>&1
  ls -d build/gpu/f16/*_*/ | xargs -P 3 -I{} make -s -C {} -j4 ARCH="-gencode arch=compute_90,code=sm_90" >> "$out/make.log" 2>&1
} || { tail -20 "$out/make.log"; echo "a folder did not build (make.log)"; }
echo "built in $(( $(date +%s) - t0 )) s"
status=0
for setup in ${@:-plain memcheck racecheck}; do
  t0=$(date +%s)
  args=()
  [ "$setup" = plain ] || args=(--setup "$setup")
  meson test -C "$B" --suite gpu --num-processes 8 --print-errorlogs "${args[@]}" > "$out/suite_$setup.log" 2>&1 || status=1
  cp "$B/meson-logs/testlog${args:+-$setup}.txt" "$out/testlog_$setup.txt" 2>/dev/null
  echo "## $setup ($(( $(date +%s) - t0 )) s)"
  grep -E '^ *[0-9]+/[0-9]+ ' "$out/suite_$setup.log" | sed 's/^ *//'
  grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/suite_$setup.log" | tr '\n' ' '; echo
done
exit $status
