# bench/gpu_gemm_lib.sh: what the TMA GEMM scripts (gpu_gemm_tma.sh,
# gpu_gemm_tma8.sh, gpu_gemm_tma_ln.sh) share, sourced once they set OUT
# and BUDGET: the time budget, the step lines, the device line, the
# registers of a kernel's instances and the steps run the same way
# on each test binary. A step's exit status is its test's; the caller
# decides what a failure stops.
# shellcheck shell=bash disable=SC2034  # status: read by the sourcing script
status=0
T0=$(date +%s)
limit() { # the step's own limit $1, or what is left of the budget if less (at least 1: timeout 0 never stops)
  local left=$((BUDGET - ($(date +%s) - T0)))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

step() { echo "== $*"; }

device() {
  step "device"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 |
    tee "$OUT/device.log"
}

# registers and spills of kernel $1's instances in ptxas -v's log $2, one
# line an instance (ptxas reports the launch's 168; the consumers run with
# setmaxnreg's 232, the producer 40)
registers() {
  awk -v k0="$1" '$0 ~ "Compiling entry function .*" k0 { sub(".*" k0 "I", ""); sub(/EEv.*/, ""); k = $0 }
       k != "" && /spill stores/ { sp = $0; sub(/^ +/, "", sp) }
       k != "" && /Used [0-9]+ registers/ { sub(/.*Used/, "Used"); print k ": " $0 ", " sp; k = "" }' "$2"
}

# the watchdog build $1 on --small, 60 s at most (a hang costs that, not
# the call); the last $2 lines of its log
smoke() {
  timeout 60 "$1" --small >"$OUT/smoke.log" 2>&1
  local rc=$?
  tail -"$2" "$OUT/smoke.log"
  echo "smoke exit status: $rc"
  return $rc
}

# every case of $1 against the float64 reference, $2 s at most (log: $OUT/test.log)
correctness() {
  step "correctness (float64 reference, every case)"
  timeout "$(limit "$2")" "$1" >"$OUT/test.log" 2>&1
  local rc=$?
  grep -c '^PASS' "$OUT/test.log" | sed 's/^/passed: /'
  grep -A1 '^FAIL' "$OUT/test.log" | head -30
  tail -1 "$OUT/test.log"
  return $rc
}

# $1 --time, $2 s at most (log: $OUT/time.log; its table is printed last by the caller)
timings() {
  step "timings"
  timeout "$(limit "$2")" "$1" --time >"$OUT/time.log" 2>&1
  local rc=$?
  grep -v '^|\|^## \|^$' "$OUT/time.log" | head -20
  echo "timing exit status: $rc"
  return $rc
}

# compute-sanitizer memcheck and racecheck on $1 --small, $2 s each at most,
# skipped (a failure) when less than $3 s of the budget is left
sanitizers() {
  local tool rc
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool (--small)"
    if [ "$(limit "$2")" -lt "$3" ]; then
      echo "skipped: $(($(date +%s) - T0)) s of the ${BUDGET} s budget used"
      status=1
      continue
    fi
    timeout "$(limit "$2")" compute-sanitizer --tool $tool --error-exitcode 3 "$1" --small >"$OUT/$tool.log" 2>&1
    rc=$?
    grep -c '^PASS' "$OUT/$tool.log" | sed 's/^/passed: /'
    tail -2 "$OUT/$tool.log"
    echo "$tool exit status: $rc$([ $rc -eq 124 ] && echo ' (timed out: the cases it finished were clean)')"
    [ $rc -ne 0 ] && status=1
  done
}
