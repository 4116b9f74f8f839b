#!/usr/bin/env bash
# Parallel plans on GPUs (issue 15): tensor and data parallelism through
# NCCL, checked and timed on a machine of 2 GPUs, in one call.
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_parallel.sh generate   # here: the folders
#   bash bench/gpu_parallel.sh run                                     # there (carry .ompi where
#                                                                      # the machine has no MPI)
#
# run builds every folder (comm_nccl.c with mpicc: NCCL's id over MPI), then
#   - tp:2 at small sizes, f32 and bf16: every rank's bench --check against
#     the float64 reference of the model without the plan;
#   - dp:2 training at small sizes (bf16): 6 updates of 2 ranks x 2 rows
#     against one process of 4 rows (loss and gradient norm);
#   - latency of the GPT-2 XL shape (layers 48, d 1600, 25 heads; and 24
#     heads of 64 at d 1536, whose attention splits too), B=1, T=128, bf16:
#     tp:1 (no plan) and tp:2, medians of bench_gpt2 on staged buffers;
#   - GPT-2 124M training, bf16, B=16 a rank, T=1024: one GPU against dp:2
#     (tokens/s per GPU: the scaling efficiency);
#   - ZeRO-1 (PARTS zero): dp:2,zero1 training at small sizes (bf16) against
#     one process of 4 rows, and GPT-2 124M's tokens/s with the optimizer
#     state a rank keeps, dp:2 without and with ZeRO-1;
#   - all_reduce bus bandwidth: nnc's communicator (tests/gpu/run_comm_nccl.sh)
#     beside torch.distributed (bench/allreduce_torch.py) at the same sizes;
#   - whole checkpoints under tp (PARTS ckpt, f32): tp:2's checkpoint after
#     3 SGD updates against one process's, one process's AdamW checkpoint
#     resumed by tp:2 and saved again (the same bytes), and its next updates
#     (tests/unit/parallel_mpi.sh's checks on C SIMD, here on 2 GPUs);
#   - four GPUs (PARTS four, on a machine of 4): tp:4 at small sizes (bf16)
#     against the float64 reference, dp:4 training (6 updates of 4 ranks x 1
#     row) against one process of 4 rows, and GPT-2 124M's tokens/s on 4
#     GPUs against one (the scaling efficiency at 4).
# One table at the end, also in $OUT/table.txt.
# Environment: NNC, ARCH (sm_90a), STEPS (8), PARTS ("check tp train comm": which to run; zero, ckpt and four on request),
# ONLY (the folders to generate and build, e.g. "big_dp1 big_dp2 big_dp4" for PARTS="train scale4")
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_parallel
ARCH=${ARCH:-sm_90a} STEPS=${STEPS:-8}
SMALL="-D layers=2 -D d=48 -D heads=4 -D vocab=101 -D ctx=16 -D batch=4"
XL="-D layers=48 -D d=1600 -D heads=25 -D batch=1 -D ctx=128"
CKPT="-D layers=2 -D d=36 -D heads=6 -D vocab=101 -D ctx=9 -D batch=3"
XL24="-D layers=48 -D d=1536 -D heads=24 -D batch=1 -D ctx=128"
# name precision options
CASES="tp2_f32 f32 --parallel=tp:2 $SMALL
tp2_bf16 bf16 --parallel=tp:2 $SMALL
train1 bf16 --train $SMALL
train2 bf16 --train --parallel=dp:2 $SMALL
xl_tp1 bf16 $XL
xl_tp2 bf16 --parallel=tp:2 $XL
xl24_tp1 bf16 $XL24
xl24_tp2 bf16 --parallel=tp:2 $XL24
big_dp1 bf16 --train -D batch=16
big_dp2 bf16 --train --parallel=dp:2 -D batch=16
zero2 bf16 --train --parallel=dp:2,zero1 $SMALL
big_zero2 bf16 --train --parallel=dp:2,zero1 -D batch=16
tp4_bf16 bf16 --parallel=tp:4 $SMALL
train4 bf16 --train --parallel=dp:4 $SMALL
big_dp4 bf16 --train --parallel=dp:4 -D batch=16
ck_one f32 --train $CKPT
ck_tp2 f32 --train --parallel=tp:2 $CKPT"
# ONLY="big_dp1 big_dp2": generate and build those folders alone (for a PARTS that needs no others)
if [ -n "${ONLY:-}" ]; then
  CASES=$(while read -r c rest; do [[ " $ONLY " == *" $c "* ]] && echo "$c $rest"; done <<< "$CASES")
fi

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r c p opts; do
    # shellcheck disable=SC2086  # opts: several words
    "$nnc" "$ROOT/models/gpt2.lua" $opts --target=cuda-${ARCH/_/} --precision="$p" -o "$G/$c" || exit 1
  done <<< "$CASES"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

# A token file of $2 random ids below $1 (llm.c's .bin format).
tokens() {
  python3 - "$1" "$2" "$3" <<'PY'
import random, struct, sys
vocab, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
random.seed(3)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[random.randrange(vocab) for _ in range(n)]))
PY
}

# The largest "median_ms" of the JSON lines in file $1 (one line a rank).
median() { python3 -c 'import json,sys; print(max(json.loads(l)["median_ms"] for l in open(sys.argv[1]) if l.startswith("{")))' "$1"; }
# tokens/s of the last JSON lines of a training run (the median over the updates after the first two).
train_rate() {
  python3 -c 'import json,sys; r=[json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if l.startswith("{")][2:]; r.sort(); print(r[len(r)//2] if r else 0)' "$1"
}

# Whether the 6 updates of JSON lines $3 (several ranks) match those of $2
# (one process) in loss and gradient norm within 1e-2 relative: one line, "$1: ...".
same_updates() {
  python3 - "$@" <<'PY'
import json, sys
label, a, b = sys.argv[1:4]
one = [json.loads(l) for l in open(a) if l.startswith("{")]
many = [json.loads(l) for l in open(b) if l.startswith("{")]
w = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(one, many) for k in ("loss", "grad_norm")) if one and many else float("inf")
print("%s: largest relative difference %.3g over %d updates" % (label, w, min(len(one), len(many))))
sys.exit(0 if len(one) == 6 and len(many) == 6 and w < 1e-2 else 1)
PY
}

# Whether part $1 is one of PARTS (default: all).
part() { [[ " ${PARTS:-check tp train comm} " == *" $1 "* ]]; }

run() {
  local out=$G/out sm=${ARCH#sm_} t=$G/out/table.txt status=0
  rm -rf "$out" && mkdir -p "$out"
  # MPI: the machine's, else the Open MPI carried in .ompi (its env.sh sets R and L)
  if ! command -v mpirun > /dev/null && [ -f "$ROOT/.ompi/env.sh" ]; then
    pushd "$ROOT" > /dev/null || exit 1
    # shellcheck disable=SC1091
    . .ompi/env.sh
    popd > /dev/null || exit 1
    export MPI_LIBS="-L$L/openmpi/lib -Wl,-rpath,$L/openmpi/lib -lmpi"
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 NNC_COMM_TIMEOUT=${NNC_COMM_TIMEOUT:-60}
  local nccl
  nccl=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  local mk=(ARCH="-gencode arch=compute_$sm,code=sm_$sm")
  # nvcc links: no -Wl, options; the library is found at run time through LD_LIBRARY_PATH
  if [ -n "$nccl" ]; then
    mk+=(NCCL_HOME="$nccl" NCCL_LIBS="-L$nccl/lib -l:libnccl.so.2")
    export LD_LIBRARY_PATH=$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$t" 2>&1
  while read -r c _; do
    make -C "$G/$c" -j8 "${mk[@]}" > "$out/make_$c.log" 2>&1 &
  done <<< "$CASES"
  wait
  while read -r c _; do
    ls "$G/$c"/bench_gpt2 > /dev/null 2>&1 || { echo "$c: build failed: $(grep -m2 -i error "$out/make_$c.log")" >> "$t"; status=1; }
  done <<< "$CASES"
  local mpi=(mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH)
  # correctness
  if part check; then
  for c in tp2_f32 tp2_bf16; do
    timeout 300 "${mpi[@]}" "$G/$c/bench_gpt2" --check --runs 3 > "$out/$c.log" 2>&1 || status=1
    echo "$c check: $(grep "max relative error" "$out/$c.log" | sort -u | tr -s ' ' | tr '\n' ';')" >> "$t"
  done
  tokens 101 4000 "$out/small.bin"
  local a=(--data "$out/small.bin" --steps 6 --seq 16 --json)
  timeout 300 "$G/train1/train_gpt2" "${a[@]}" --batch 4 > "$out/one.json" 2> "$out/one.err"
  timeout 300 "${mpi[@]}" "$G/train2/train_gpt2" "${a[@]}" --batch 2 > "$out/two.json" 2> "$out/two.err"
  same_updates "dp:2 training (bf16, 6 updates of 2 x 2 rows) against one process of 4 rows" "$out/one.json" "$out/two.json" >> "$t" || status=1
  fi
  # tensor-parallel latency, B=1 T=128
  # (CUDA graphs off, then on: one launch a forward, the all_reduces captured too)
  part tp && for s in xl xl24; do
    for gr in off on; do
      timeout 600 "$G/${s}_tp1/bench_gpt2" -d B=1 -d T=128 --runs 50 --json --no-peaks --cuda-graphs $gr > "$out/${s}_tp1.json" 2> "$out/${s}_tp1.err"
      timeout 600 "${mpi[@]}" "$G/${s}_tp2/bench_gpt2" -d B=1 -d T=128 --runs 50 --json --no-peaks --cuda-graphs $gr > "$out/${s}_tp2.json" 2> "$out/${s}_tp2.err"
      local m1 m2
      m1=$(median "$out/${s}_tp1.json" 2>/dev/null) m2=$(median "$out/${s}_tp2.json" 2>/dev/null)
      echo "$s B=1 T=128 bf16, graphs $gr: tp:1 ${m1:-?} ms, tp:2 ${m2:-?} ms, ratio $(python3 -c "print('%.3f' % ($m2 / $m1))" 2>/dev/null)" >> "$t"
      [ -n "$m2" ] || { tail -n 4 "$out/${s}_tp2.err" >> "$t"; status=1; }
    done
  done
  # data-parallel GPT-2 124M training
  if part train; then
  tokens 50257 2200000 "$out/big.bin"
  local b=(--data "$out/big.bin" --steps "$STEPS" --batch 16 --seq 1024 --json --no-peaks)
  timeout 600 "$G/big_dp1/train_gpt2" "${b[@]}" > "$out/big_dp1.json" 2> "$out/big_dp1.err"
  timeout 600 "${mpi[@]}" "$G/big_dp2/train_gpt2" "${b[@]}" > "$out/big_dp2.json" 2> "$out/big_dp2.err"
  local r1 r2
  r1=$(train_rate "$out/big_dp1.json" 2>/dev/null) r2=$(train_rate "$out/big_dp2.json" 2>/dev/null)
  [ -n "$r2" ] && [ "$r2" != 0 ] || { tail -n 4 "$out/big_dp2.err" >> "$t"; status=1; }
  echo "gpt2 124M train bf16 B=16/GPU T=1024: 1 GPU ${r1:-?} tokens/s, dp:2 ${r2:-?} tokens/s, efficiency $(python3 -c "print('%.1f%%' % (100 * $r2 / 2 / $r1))" 2>/dev/null)" >> "$t"
  fi
  # ZeRO-1: the same steps as one process; the optimizer state it saves
  if part zero; then
  tokens 101 4000 "$out/small.bin"
  local z=(--data "$out/small.bin" --steps 6 --seq 16 --json --clip 0.5 --accumulate 2)
  timeout 300 "$G/train1/train_gpt2" "${z[@]}" --batch 4 > "$out/zero_one.json" 2> "$out/zero_one.err"
  timeout 300 "${mpi[@]}" "$G/zero2/train_gpt2" "${z[@]}" --batch 2 > "$out/zero_two.json" 2> "$out/zero_two.err"
  same_updates "dp:2,zero1 training (bf16, clip 0.5, 2 micro-batches of 2 x 2 rows) against one process of 4 rows" "$out/zero_one.json" "$out/zero_two.json" >> "$t" || { tail -n 4 "$out/zero_two.err" >> "$t"; status=1; }
  tokens 50257 2200000 "$out/big.bin"
  local zb=(--data "$out/big.bin" --batch 16 --seq 1024 --no-peaks)
  for c in big_dp2 big_zero2; do
    timeout 600 "${mpi[@]}" "$G/$c/train_gpt2" "${zb[@]}" --steps "$STEPS" --json > "$out/$c.json" 2> "$out/$c.err"
    timeout 600 "${mpi[@]}" "$G/$c/train_gpt2" "${zb[@]}" --steps 1 > "$out/$c.log" 2>&1
    local rz
    rz=$(train_rate "$out/$c.json" 2>/dev/null)
    [ -n "$rz" ] && [ "$rz" != 0 ] || { tail -n 4 "$out/$c.err" >> "$t"; status=1; }
    echo "gpt2 124M train bf16 B=16/GPU T=1024, $c: ${rz:-?} tokens/s; $(grep -m1 -o "optimizer state.*" "$out/$c.log")" >> "$t"
  done
  fi
  # four GPUs: tp:4 and dp:4 checks, dp:4 scaling
  if part four; then
  local mpi4=(mpirun -np 4 --oversubscribe -x LD_LIBRARY_PATH)
  timeout 300 "${mpi4[@]}" "$G/tp4_bf16/bench_gpt2" --check --runs 3 > "$out/tp4_bf16.log" 2>&1 || status=1
  echo "tp4_bf16 check: $(grep "max relative error" "$out/tp4_bf16.log" | sort -u | tr -s ' ' | tr '\n' ';')" >> "$t"
  tokens 101 4000 "$out/small.bin"
  local a4=(--data "$out/small.bin" --steps 6 --seq 16 --json)
  timeout 300 "$G/train1/train_gpt2" "${a4[@]}" --batch 4 > "$out/one4.json" 2> "$out/one4.err"
  timeout 300 "${mpi4[@]}" "$G/train4/train_gpt2" "${a4[@]}" --batch 1 > "$out/four.json" 2> "$out/four.err"
  same_updates "dp:4 training (bf16, 6 updates of 4 x 1 row) against one process of 4 rows" "$out/one4.json" "$out/four.json" >> "$t" || { tail -n 4 "$out/one4.err" "$out/four.err" >> "$t"; status=1; }
  fi
  # dp:4 scaling (PARTS four, or scale4 alone)
  if part four || part scale4; then
  local mpi4=(mpirun -np 4 --oversubscribe -x LD_LIBRARY_PATH)
  tokens 50257 2200000 "$out/big.bin"
  local b4=(--data "$out/big.bin" --steps "$STEPS" --batch 16 --seq 1024 --json --no-peaks)
  timeout 600 "$G/big_dp1/train_gpt2" "${b4[@]}" > "$out/big_dp1.json" 2> "$out/big_dp1.err"
  timeout 600 "${mpi4[@]}" "$G/big_dp4/train_gpt2" "${b4[@]}" > "$out/big_dp4.json" 2> "$out/big_dp4.err"
  local q1 q4
  q1=$(train_rate "$out/big_dp1.json" 2>/dev/null) q4=$(train_rate "$out/big_dp4.json" 2>/dev/null)
  [ -n "$q4" ] && [ "$q4" != 0 ] || { tail -n 4 "$out/big_dp4.err" >> "$t"; status=1; }
  echo "gpt2 124M train bf16 B=16/GPU T=1024: 1 GPU ${q1:-?} tokens/s, dp:4 ${q4:-?} tokens/s, efficiency $(python3 -c "print('%.1f%%' % (100 * $q4 / 4 / $q1))" 2>/dev/null)" >> "$t"
  fi
  # whole checkpoints under tp:2 on GPUs (f32): the C SIMD test's steps
  if part ckpt; then
  local ts=$ROOT/tests/unit/train_steps.py
  tokens 101 3000 "$out/ck.bin"
  local k=(--data "$out/ck.bin" --steps 6 --seq 9 --batch 3 --no-peaks --json)
  timeout 300 "$G/ck_one/train_gpt2" "${k[@]}" > "$out/ck_one.json" 2> "$out/ck_one.err"
  timeout 300 "${mpi[@]}" "$G/ck_tp2/train_gpt2" "${k[@]}" > "$out/ck_tp2.json" 2> "$out/ck_tp2.err"
  python3 "$ts" compare "tp:2 training (f32) against one process" "$out/ck_one.json" "$out/ck_tp2.json" 1 >> "$t" 2>&1 || status=1
  timeout 300 "$G/ck_one/train_gpt2" "${k[@]}" --steps 3 --sgd --save "$out/sgd1.ckpt" > /dev/null 2>> "$out/ck.err"
  timeout 300 "$G/ck_one/train_gpt2" "${k[@]}" --steps 3 --save "$out/adam1.ckpt" > /dev/null 2>> "$out/ck.err"
  timeout 300 "${mpi[@]}" "$G/ck_tp2/train_gpt2" "${k[@]}" --steps 3 --sgd --save "$out/sgd2.ckpt" > /dev/null 2>> "$out/ck.err"
  python3 "$ts" checkpoints "tp:2's checkpoint after 3 SGD updates against one process's" "$out/sgd1.ckpt" "$out/sgd2.ckpt" >> "$t" 2>&1 || status=1
  timeout 300 "${mpi[@]}" "$G/ck_tp2/train_gpt2" "${k[@]}" --steps 3 --resume "$out/adam1.ckpt" --save "$out/again2.ckpt" > /dev/null 2>> "$out/ck.err"
  if cmp -s "$out/adam1.ckpt" "$out/again2.ckpt"; then echo "tp:2: one process's checkpoint resumed and saved again: the same bytes" >> "$t"
  else echo "tp:2: one process's checkpoint resumed and saved again: DIFFERENT ($(ls -l "$out/adam1.ckpt" "$out/again2.ckpt" 2>&1 | tr '\n' ' '))" >> "$t"; status=1; fi
  timeout 300 "${mpi[@]}" "$G/ck_tp2/train_gpt2" "${k[@]}" --resume "$out/adam1.ckpt" > "$out/resumed2.json" 2>> "$out/ck.err"
  python3 "$ts" compare "tp:2 resumed at update 3 against one process" "$out/ck_one.json" "$out/resumed2.json" 4 >> "$t" 2>&1 || status=1
  tail -n 3 "$out/ck.err" >> "$t"
  fi
  # all_reduce: ours and torch's
  part comm && {
  (cd "$ROOT" && OUT="$out/comm" timeout 300 bash tests/gpu/run_comm_nccl.sh > "$out/comm.log" 2>&1) || status=1
  grep -E "busbw|MB " "$out/comm.log" | sed 's/^/nnc /' >> "$t"
  timeout 300 torchrun --nproc_per_node=2 "$ROOT/bench/allreduce_torch.py" 1 16 64 256 > "$out/torch_ar.log" 2>&1
  grep "torch all_reduce" "$out/torch_ar.log" >> "$t"
  }
  echo "== $t"
  cat "$t"
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bench/gpu_parallel.sh generate|run" >&2; exit 2 ;;
esac
