#!/usr/bin/env bash
# tests/gpu/gpu_gate.sh: runs one GPU test, or reports it skipped (77) where
# there is no GPU.
#   gpu_gate.sh PROGRAM [ARGS...]   a test program
#   gpu_gate.sh --model DIR          a folder from nnc: make, then bench --check
set -uo pipefail
nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
if [ "${1:-}" = --model ]; then
  dir=$2
  make -s -C "$dir" -j8 ARCH="${ARCH:--gencode arch=compute_90,code=sm_90}" || exit 1
  name=$(basename "$dir")
  bench=$(ls "$dir"/bench_* | head -1)
  dims="-d B=3"
  # every symbolic dim but the MLP's batch is a sequence length T
  case "$name" in mlp_*) ;; *) dims="$dims -d T=17" ;; esac
  exec "$bench" --check $dims --runs 2 --warmup 1
fi
exec "$@"
