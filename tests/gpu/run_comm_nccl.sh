#!/usr/bin/env bash
# tests/gpu/run_comm_nccl.sh: the NCCL communicator (runtime/cuda/comm_nccl.c)
# on a GPU machine, in one go: builds tests/gpu/test_comm_nccl.c with gcc
# (and with mpicc and -DNNRT_COMM_WITH_MPI when mpicc is there), then runs it
#   - alone (world 1, no launcher),
#   - as 2 background processes joined through NNC_RENDEZVOUS (2+ GPUs),
#   - the same with rank 1 sleeping past NNC_COMM_TIMEOUT=5 (rank 0 must
#     fail in time), and rank 1 alone waiting for a rank 0 that never starts,
#   - under mpirun -np 2 and -np 4 when mpirun is there and that many GPUs.
# Run from the repository root; logs go to $OUT (default build/comm_nccl).
# Exits non-zero when anything failed.
set -uo pipefail
OUT=${OUT:-build/comm_nccl}
CUDA=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$OUT"
TMP=$(mktemp -d)
status=0
# NVLink multicast stays off on shared machines
export NCCL_NVLS_ENABLE=0
step() { echo "== $*"; }
fail() { echo "FAILED: $*"; status=1; }

# NCCL: next to the toolkit, else the pip package PyTorch uses
NCCL_INC=$CUDA/include NCCL_LIB=$CUDA/lib64 NCCL_L=-lnccl
if [ ! -f "$NCCL_INC/nccl.h" ] || ! ls "$NCCL_LIB"/libnccl.so* > /dev/null 2>&1; then
  root=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  NCCL_INC=$root/include NCCL_LIB=$root/lib
  [ -f "$NCCL_LIB/libnccl.so" ] || NCCL_L=-l:libnccl.so.2
fi
step "device"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ngpu=$(nvidia-smi -L | wc -l)
echo "$ngpu GPU(s); NCCL from $NCCL_INC"
grep -m1 "define NCCL_VERSION_CODE" "$NCCL_INC/nccl.h"

SRC="runtime/status.c runtime/dtype.c runtime/half.c runtime/timer.c runtime/comm.c runtime/comm_launch.c
     runtime/comm_rendezvous.c runtime/cuda/comm_nccl.c tests/gpu/test_comm_nccl.c"
FLAGS="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter -O2
       -Iruntime -Iruntime/cuda -I$NCCL_INC -I$CUDA/include"
LIBS="-L$NCCL_LIB -Wl,-rpath,$NCCL_LIB -L$CUDA/lib64 -Wl,-rpath,$CUDA/lib64 $NCCL_L -lcudart -lm"

step "build"
gcc $FLAGS $SRC -o "$TMP/t" $LIBS > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
have_mpi=0
if command -v mpicc > /dev/null && command -v mpirun > /dev/null; then
  mpicc $FLAGS -DNNRT_COMM_WITH_MPI $SRC -o "$TMP/t_mpi" $LIBS >> "$OUT/build.log" 2>&1 && have_mpi=1 \
    || { cat "$OUT/build.log"; fail "mpicc build"; }
else
  echo "no mpicc/mpirun: the MPI launches are skipped"
fi

step "world 1"
timeout 300 "$TMP/t" 2>&1 | tee "$OUT/world1.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "world 1"

# N processes through the rendezvous file; extra env for rank 1 in $R1ENV
rendezvous() {
  local n=$1 mode=$2 log=$3
  local id="$TMP/id.$RANDOM" pids=() rc=0
  for ((r = 0; r < n; r++)); do
    local extra=()
    [ "$r" -eq 1 ] && [ -n "${R1ENV:-}" ] && extra=($R1ENV)
    env NNC_RANK=$r NNC_WORLD_SIZE=$n NNC_RENDEZVOUS="$id" "${extra[@]}" \
      timeout 300 "$TMP/t" $mode > "$log.$r" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do wait "${pids[$r]}" || rc=$?; done
  cat "$log".*
  [ -e "$id" ] && echo "(the rendezvous file was left behind)"
  return $rc
}

if [ "$ngpu" -ge 2 ]; then
  step "2 processes, NNC_RENDEZVOUS"
  rendezvous 2 "" "$OUT/rdv2.log" || fail "2 processes through the rendezvous file"

  step "2 processes, rank 1 sleeps past NNC_COMM_TIMEOUT=5"
  start=$(date +%s)
  (export NNC_COMM_TIMEOUT=5; rendezvous 2 timeout "$OUT/timeout.log")
  echo "took $(( $(date +%s) - start )) s"
  grep -q "PASS timeout" "$OUT/timeout.log.0" || fail "rank 0 did not fail in time"
else
  echo "one GPU: the 2-process runs are skipped"
fi

step "rank 1 alone: no rank 0 (NNC_COMM_TIMEOUT=3)"
out=$(NNC_RANK=1 NNC_WORLD_SIZE=2 NNC_RENDEZVOUS="$TMP/never" NNC_COMM_TIMEOUT=3 timeout 60 "$TMP/t" 2>&1)
echo "$out"
grep -q "no rendezvous file .* after 3 s: did rank 0 start?" <<< "$out" || fail "no clear error without rank 0"

if [ "$have_mpi" -eq 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for np in 2 4; do
    [ "$ngpu" -ge "$np" ] || { echo "mpirun -np $np: $ngpu GPU(s), skipped"; continue; }
    step "mpirun -np $np"
    timeout 300 mpirun -np "$np" -x NCCL_NVLS_ENABLE "$TMP/t_mpi" 2>&1 | tee "$OUT/mpi$np.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "mpirun -np $np"
  done
fi

rm -rf "$TMP"
[ "$status" -eq 0 ] && echo "ALL PASSED" || echo "SOME FAILED"
exit $status
