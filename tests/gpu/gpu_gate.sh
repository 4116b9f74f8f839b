#!/usr/bin/env bash
# tests/gpu/gpu_gate.sh: runs one GPU test, or reports it skipped (77) where
# there is no GPU.
#   gpu_gate.sh PROGRAM [ARGS...]   a test program
#   gpu_gate.sh --model DIR          a folder from nnc: make, then bench --check
set -uo pipefail
nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
if [ "${1:-}" = --model ]; then
  dir=$2
  # the folder's own ARCH (its target's, e.g. sm_90a) unless ARCH is given
  make -s -C "$dir" -j8 ${ARCH:+ARCH="$ARCH"} || exit 1
  name=$(basename "$dir")
  bench=$(ls "$dir"/bench_* | head -1)
  # odd sizes within each dim's maximum (the harness lists them: "dims: B<=8 T<=32"):
  # a batch of 3, 17 for every other dim
  dims=""
  for d in $("$bench" --help | sed -n 's/^dims: //p'); do
    sym=${d%%<=*} max=${d##*<=} want=17
    [ "$sym" = B ] && want=3
    [ "$max" -lt "$want" ] && want=$max
    dims="$dims -d $sym=$want"
  done
  exec "$bench" --check $dims --runs 2 --warmup 1
fi
exec "$@"
