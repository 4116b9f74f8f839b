#!/usr/bin/env bash
# tests/gpu/graphs_check.sh DIR: CUDA graphs of a generated GPT-2 (DIR is
# build/gpu/gpt2_bf16_graphs, from nnc --cuda-graphs; bench/gpu_check.sh
# generate writes it). Builds the folder, runs bench --check with graphs on
# at two sizes (each run captures, replays, and is compared with the float64
# reference), then tests/gpu/test_graphs.c against the folder's library:
# graph replays against runs kernel by kernel in one process, over more sizes
# than the model keeps graphs, other buffers and streams. Prints one line per
# step; exits non-zero when one failed. Run it through gpu_gate.sh (77 without
# a GPU).
set -uo pipefail
dir=${1:?usage: graphs_check.sh MODEL_DIR}
here=$(cd "$(dirname "$0")" && pwd)
NVCC=${NVCC:-nvcc}
# the toolkit nvcc belongs to, as the folder's Makefile finds it
CUDA=${CUDA_HOME:-$(dirname "$(dirname "$(command -v "$NVCC")")")}
status=0
# the folder's own ARCH (its target's) unless ARCH is given
make -s -C "$dir" -j16 ${ARCH:+ARCH="$ARCH"} > "$dir/make.log" 2>&1 \
  || { tail -30 "$dir/make.log"; echo "FAILED: make"; exit 1; }
for dims in "-d B=3 -d T=17" "-d B=2 -d T=33"; do
  "$dir/bench_gpt2" --check --cuda-graphs on $dims --runs 3 --warmup 1 --json > "$dir/graphs_check.json" 2> "$dir/graphs_check.err"
  rc=$?
  echo "bench --check --cuda-graphs on $dims: rc=$rc $(grep -o '"cuda_graphs": [a-z]*, "check": {[^}]*}}' "$dir/graphs_check.json")"
  [ "$rc" = 0 ] && grep -q '"cuda_graphs": true' "$dir/graphs_check.json" || { cat "$dir/graphs_check.err"; status=1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wpedantic -Werror -I"$dir" -I"$CUDA/include" \
  -c "$here/test_graphs.c" -o "$tmp/test_graphs.o" \
  && "$NVCC" -o "$tmp/test_graphs" "$tmp/test_graphs.o" "$dir/libgpt2.a" -lcublasLt -lcudart -lm -lpthread \
  || { echo "FAILED: building test_graphs"; exit 1; }
"$tmp/test_graphs" "$dir" || status=1
exit $status
