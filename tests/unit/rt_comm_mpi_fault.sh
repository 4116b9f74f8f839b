#!/usr/bin/env bash
# tests/unit/rt_comm_mpi_fault.sh MPIRUN PROGRAM MODE: the MPI communicator
# when a rank fails, two ranks under mpirun (tests/meson.build runs it).
#   timeout  rank 1 sleeps instead of calling: rank 0 must print "PASS
#            timeout" (NNRT_E_COMM within NNC_COMM_TIMEOUT=3). mpirun itself
#            then reports rank 0 exiting without MPI_Finalize (a failed
#            communicator is abandoned, not finalized): its status is not ours.
#   exit     rank 1 exits before the all_reduce: mpirun must end the job with
#            a non-zero status well before 60 s, never hang.
set -uo pipefail
mpirun=${1:?usage: rt_comm_mpi_fault.sh MPIRUN PROGRAM timeout|exit}
prog=${2:?}
mode=${3:?}
start=$(date +%s)
out=$(NNC_COMM_TIMEOUT=3 timeout 60 "$mpirun" -np 2 --oversubscribe "$prog" "$mode" 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
echo "$out"
echo "mpirun: status $rc after ${took} s"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: the job hung (killed after 60 s)"
  exit 1
fi
case "$mode" in
  timeout)
    grep -q "PASS timeout" <<< "$out" || { echo "FAIL: rank 0 did not fail in time with a clear message"; exit 1; } ;;
  exit)
    [ "$rc" -ne 0 ] || { echo "FAIL: mpirun returned 0 though rank 1 exited with 3"; exit 1; }
    [ "$took" -lt 30 ] || { echo "FAIL: mpirun took ${took} s to notice"; exit 1; } ;;
  *) echo "unknown mode $mode"; exit 1 ;;
esac
echo PASS
