#!/usr/bin/env bash
# The recurrent layers on the GPU (issue 16 part 2): correctness of the CUDA
# target's lstm_scan and gru_scan, and the LSTM forecaster's speed beside
# PyTorch's torch.nn.LSTM (cuDNN), in one call.
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_rnn.sh generate   # here: the folders
#   bash bench/gpu_rnn.sh run                                     # on the GPU machine
#
# run builds every folder, checks each against the float64 reference with
# poisoned outputs (tests/ops/recurrent.lua in f32 and bf16, both models at
# odd sizes and their training steps, backward through time, the LSTM at
# hidden 512 in bf16; `bench_<model> --check`), builds and runs
# tests/gpu/test_recurrent.cu (the persistent scan kernel of
# templates/cuda/recurrent.cuh against float64, then its --time), runs
# compute-sanitizer memcheck on the ops, then times
# models/lstm_forecast.lua at its full size (B=64, T=48, hidden 64, 2
# layers; f32: the harness's median after warm-up) and at the issue's goal
# (B=64, T=256, hidden 512, 2 layers, bf16), each beside
# bench/gpu_rnn_torch.py (eager and torch.compile MODES) at the same size
# and dtype, in the same call. One table at the end, also in $OUT.
# Environment: NNC, ARCH (sm_90a), B (64), MODES (eager,default,reduce-overhead)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_rnn
ARCH=${ARCH:-sm_90a} B=${B:-64} MODES=${MODES:-eager,default,reduce-overhead}
LSTM_SMALL="-D batch=4 -D window=11 -D features=5 -D hidden=13 -D horizon=3"
GRU_SMALL="-D batch=4 -D seq=11 -D vocab=37 -D embed=9 -D hidden=7 -D classes=3"
# name model precision check-dims defines
CASES="rnn_f32 tests/ops/recurrent f32 -d_B=3_-d_T=4
rnn_bf16 tests/ops/recurrent bf16 -d_B=3
lstm_small_f32 models/lstm_forecast f32 -d_B=3_-d_T=7 $LSTM_SMALL
gru_small_f32 models/gru f32 -d_B=3_-d_T=7 $GRU_SMALL
gru_small_bf16 models/gru bf16 -d_B=3 $GRU_SMALL
lstm_train_f32 models/lstm_forecast f32 -d_B=3_-d_T=7 $LSTM_SMALL --train
gru_train_f32 models/gru f32 -d_B=3_-d_T=7 $GRU_SMALL --train
lstm_h512_bf16 models/lstm_forecast bf16 -d_B=5_-d_T=9 -D batch=8 -D window=16 -D hidden=512
lstm_small_bf16 models/lstm_forecast bf16 -d_B=3_-d_T=7 $LSTM_SMALL
lstm_full models/lstm_forecast f32 - -D batch=$B
lstm_goal models/lstm_forecast bf16 - -D batch=$B -D window=256 -D hidden=512 -D layers=2"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r c model p _ defs; do
    # shellcheck disable=SC2086  # defs: several -D words
    "$nnc" "$ROOT/$model.lua" $defs --target=cuda-${ARCH/_/} --precision="$p" -o "$G/$c" || exit 1
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
  while read -r c model _ dims _; do
    local bin
    bin=$(ls "$G/$c"/bench_* 2>/dev/null | head -1)
    [ -x "$bin" ] || { echo "$c: build failed: $(grep -m1 -i error "$out/make_$c.log")" >> "$t"; status=1; continue; }
    [ "$dims" = - ] && continue
    # shellcheck disable=SC2086  # dims: -d words joined by _
    (cd "$G/$c" && "./$(basename "$bin")" --check ${dims//_/ } --runs 2 --warmup 1 > "$out/check_$c.log" 2>&1) || status=1
    echo "$c --check ${dims//_/ }: $(grep -c ' ok$' "$out/check_$c.log") ok, $(grep -c 'FAILED' "$out/check_$c.log") failed" >> "$t"
  done <<< "$CASES"
  if nvcc -std=c++17 -O3 -arch="$ARCH" -I"$ROOT/templates/cuda" "$ROOT/tests/gpu/test_recurrent.cu" -o "$out/test_recurrent" \
       > "$out/test_recurrent_build.log" 2>&1; then
    "$out/test_recurrent" > "$out/test_recurrent.log" 2>&1 || status=1
    echo "test_recurrent: $(grep -c '^PASS' "$out/test_recurrent.log") passed, $(grep -c '^FAIL' "$out/test_recurrent.log") failed" >> "$t"
    "$out/test_recurrent" --time 2>&1 | grep '^time' >> "$t"
  else
    echo "test_recurrent: build failed: $(grep -m1 -i error "$out/test_recurrent_build.log")" >> "$t"; status=1
  fi
  (cd "$G/rnn_f32" && timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 ./bench_recurrent --check -d B=3 \
     --runs 1 --warmup 0 --no-peaks > "$out/memcheck.log" 2>&1)
  echo "rnn_f32 memcheck: rc=$? $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log")" >> "$t"
  (cd "$G/lstm_full" && ./bench_lstm_forecast -d B="$B" --runs 50 --warmup 10 --json > "$out/lstm_full.json" \
     2> "$out/lstm_full.err") || status=1
  echo "nnc lstm_forecast B=$B T=48 f32: $(python3 -c 'import json, sys; print("%.3f ms" % json.load(open(sys.argv[1]))["median_ms"])' "$out/lstm_full.json" 2>&1 | tail -1)" >> "$t"
  python3 "$ROOT/bench/gpu_rnn_torch.py" --batch "$B" --modes "$MODES" > "$out/torch.jsonl" 2> "$out/torch.err" || status=1
  python3 - "$out/torch.jsonl" >> "$t" <<'EOF2'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        print(f"{r['impl']} B={r['batch']} T={r['window']} {r['dtype']}: {r['median_ms']:.3f} ms (warm-up {r['warmup_s']} s)")
EOF2
  (cd "$G/lstm_goal" && ./bench_lstm_forecast -d B="$B" -d T=256 --runs 50 --warmup 10 --json > "$out/lstm_goal.json" \
     2> "$out/lstm_goal.err") || status=1
  echo "nnc lstm_forecast B=$B T=256 hidden 512 bf16: $(python3 -c 'import json, sys; print("%.3f ms" % json.load(open(sys.argv[1]))["median_ms"])' "$out/lstm_goal.json" 2>&1 | tail -1)" >> "$t"
  python3 "$ROOT/bench/gpu_rnn_torch.py" --batch "$B" --window 256 --hidden 512 --layers 2 --dtype bf16 --modes "$MODES" \
    >> "$out/torch.jsonl" 2>> "$out/torch.err" || status=1
  python3 - "$out/torch.jsonl" >> "$t" <<'EOF2'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        if r["window"] == 256:
            print(f"{r['impl']} B={r['batch']} T={r['window']} hidden {r['hidden']} {r['dtype']}: {r['median_ms']:.3f} ms (warm-up {r['warmup_s']} s)")
EOF2
  (cd "$G/lstm_full" && ./bench_lstm_forecast -d B="$B" --runs 20 --warmup 5 > "$out/lstm_full_kernels.txt" 2>&1)
  (cd "$G/lstm_goal" && ./bench_lstm_forecast -d B="$B" -d T=256 --runs 20 --warmup 5 > "$out/lstm_goal_kernels.txt" 2>&1)
  cat "$t"
  [ -z "${OUT:-}" ] || { cp "$t" "$OUT/rnn_table.txt"; cp "$out/lstm_full_kernels.txt" "$out/lstm_goal_kernels.txt" "$out/test_recurrent.log" "$out"/check_*.log "$OUT/" 2>/dev/null; }
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_rnn.sh generate|run" >&2; exit 2 ;;
esac
