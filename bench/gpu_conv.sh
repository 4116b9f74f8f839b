#!/usr/bin/env bash
# The image models on the GPU (issue 16 part 1): correctness of the CUDA
# target's convolution family and ResNet-18's speed beside PyTorch, in one
# call.
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_conv.sh generate   # here: the folders
#   bash bench/gpu_conv.sh run                                     # on the GPU machine
#
# run builds every folder, checks each against the float64 reference with
# poisoned outputs (tests/ops/conv.lua in f32 and bf16, the MNIST CNN, a
# small ResNet-18 in both layouts (its NHWC bf16 convolutions and max
# pooling read their images straight on sm_90a), tests/ops/conv_wide.lua
# (every implicit-GEMM convolution and pool of sm_90a: strides, dilation,
# 8 to 128 channels, each epilogue);
# the MNIST CNN's training step in f32, whose
# gradients go through col2im; `bench_<model> --check`), runs
# compute-sanitizer memcheck on the ops, then times ResNet-18 at B, 224x224,
# bf16 (NCHW and NHWC: the harness's median after warm-up) and PyTorch's
# (bench/gpu_resnet_torch.py: eager and torch.compile MODES, channels_last)
# in the same call. One table at the end, also in $OUT.
# Environment: NNC, ARCH (sm_90a), B (32), MODES (eager,default,reduce-overhead)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=${G:-$ROOT/build/gpu_conv}   # G=: another folder (engineers sharing a tree)
ARCH=${ARCH:-sm_90a} B=${B:-32} MODES=${MODES:-eager,default,reduce-overhead}
SMALL="-D size=33 -D width=4 -D classes=7 -D batch=4"
# name model precision defines
CASES="conv_f32 tests/ops/conv f32
conv_bf16 tests/ops/conv bf16
conv_wide_f32 tests/ops/conv_wide f32
conv_wide_bf16 tests/ops/conv_wide bf16
conv_wide_f16 tests/ops/conv_wide f16
mnist_bf16 models/mnist_cnn bf16
mnist_train_f32 models/mnist_cnn f32 --train
resnet_small_f32 models/resnet18 f32 $SMALL
resnet_small_nhwc_bf16 models/resnet18 bf16 $SMALL -D layout=nhwc
resnet_nchw models/resnet18 bf16 -D batch=$B
resnet_nhwc models/resnet18 bf16 -D batch=$B -D layout=nhwc"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r c model p defs; do
    # shellcheck disable=SC2086  # defs: several -D words
    "$nnc" "$ROOT/$model.lua" --target=cuda-${ARCH/_/} --precision="$p" $defs -o "$G/$c" || exit 1
  done <<< "$CASES"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

run() {
  local out=$G/out sm=${ARCH#sm_} t=$G/out/table.txt status=0
  rm -rf "$out" && mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$t" 2>&1
  while read -r c _; do
    make -C "$G/$c" -j4 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$c.log" 2>&1 &
  done <<< "$CASES"
  wait
  while read -r c model _; do
    local bin
    bin=$(ls "$G/$c"/bench_* 2>/dev/null | head -1)
    [ -x "$bin" ] || { echo "$c: build failed: $(grep -m1 -i error "$out/make_$c.log")" >> "$t"; status=1; continue; }
    case $c in resnet_nchw|resnet_nhwc) continue ;; esac
    (cd "$G/$c" && "./$(basename "$bin")" --check -d B=3 --runs 2 --warmup 1 > "$out/check_$c.log" 2>&1) || status=1
    echo "$c --check: $(grep -c ' ok$' "$out/check_$c.log") ok, $(grep -c 'FAILED' "$out/check_$c.log") failed" >> "$t"
    grep -q FAILED "$out/check_$c.log" && grep -i "error\|FAILED" "$out/check_$c.log" | head -4 >> "$t"
  done <<< "$CASES"
  (cd "$G/conv_bf16" && timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 ./bench_conv --check -d B=3 \
     --runs 1 --warmup 0 --no-peaks > "$out/memcheck.log" 2>&1)
  echo "conv_bf16 memcheck: rc=$? $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log")" >> "$t"
  (cd "$G/conv_wide_bf16" && timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 ./bench_conv_wide --check \
     -d B=1 --runs 1 --warmup 0 --no-peaks > "$out/memcheck_wide.log" 2>&1)
  echo "conv_wide_bf16 memcheck: rc=$? $(grep -m1 'ERROR SUMMARY' "$out/memcheck_wide.log")" >> "$t"
  for c in resnet_nchw resnet_nhwc; do
    (cd "$G/$c" && ./bench_resnet18 -d B="$B" --runs 50 --warmup 10 --cuda-graphs off --json > "$out/$c.json" 2> "$out/$c.err") || status=1
    echo "$c B=$B --cuda-graphs off: $(python3 -c 'import json, sys; print("%.3f ms" % json.load(open(sys.argv[1]))["median_ms"])' "$out/$c.json" 2>&1 | tail -1)" >> "$t"
  done
  (cd "$G/resnet_nhwc" && ./bench_resnet18 -d B="$B" --runs 50 --warmup 10 --cuda-graphs on --json > "$out/graphs.json" 2>&1)
  echo "resnet_nhwc B=$B --cuda-graphs on (the default): $(python3 -c 'import json, sys; print("%.3f ms" % json.load(open(sys.argv[1]))["median_ms"])' "$out/graphs.json" 2>&1 | tail -1)" >> "$t"
  python3 "$ROOT/bench/gpu_resnet_torch.py" --batch "$B" --modes "$MODES" > "$out/torch.jsonl" 2> "$out/torch.err" || status=1
  python3 - "$out/torch.jsonl" >> "$t" <<'EOF2'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        print(f"{r['impl']} B={r['batch']}: {r['median_ms']:.3f} ms (warm-up {r['warmup_s']} s)")
EOF2
  (cd "$G/resnet_nhwc" && ./bench_resnet18 -d B="$B" --runs 20 --warmup 5 > "$out/resnet_nhwc_kernels.txt" 2>&1)
  cat "$t"
  [ -z "${OUT:-}" ] || { cp "$t" "$OUT/conv_table.txt"; cp "$out/resnet_nhwc_kernels.txt" "$OUT/" 2>/dev/null; }
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_conv.sh generate|run" >&2; exit 2 ;;
esac
