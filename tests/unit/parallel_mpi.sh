#!/usr/bin/env bash
# tests/unit/parallel_mpi.sh NNC MPIRUN: tensor-parallel plans end to end on
# c-simd (tests/meson.build runs it). Each model at odd sizes is compiled
# with --parallel=tp:N, built with mpicc and run under mpirun -np N; every
# rank's bench --check compares its outputs with the float64 reference of
# the model without the plan, on the same random weights, which each rank
# slices. Then the refusals: a world that does not match the plan. Then
# training against one process: dp:2, tp:2 and tp:4 (with checkpoints),
# tp:2,dp:2.
set -euo pipefail
nnc=${1:?usage: parallel_mpi.sh NNC MPIRUN}
mpirun=${2:?}
here=$(cd "$(dirname "$0")" && pwd)   # train_steps.py, tp_logits.c
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# name model plan defines: gpt2v and llamav have an odd vocabulary (101 rows:
# 51 a rank over 2 with one zero row, 26 over 4 with three), split by rows
# with gpt2's tied head and llama's untied lm_head
models=(
  "gpt2_2 gpt2 tp:2 -D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3"
  "gpt2_3 gpt2 tp:3 -D layers=1 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3"
  "bert_4 bert tp:4 -D layers=1 -D hidden=20 -D heads=4 -D intermediate=28 -D vocab=31 -D positions=9 -D seq=7 -D batch=2"
  "mlp_2 mlp tp:2 -D batch=5 -D pixels=13 -D hidden1=10 -D hidden2=6 -D classes=3"
  "llama_2 llama tp:2 -D layers=2 -D d=32 -D heads=4 -D kv_heads=2 -D ffn=24 -D vocab=37 -D ctx=7 -D batch=2"
  "gpt2v_2 gpt2 tp:2 -D layers=2 -D d=36 -D heads=6 -D vocab=101 -D ctx=9 -D batch=3"
  "gpt2v_4 gpt2 tp:4 -D layers=2 -D d=36 -D heads=6 -D vocab=101 -D ctx=9 -D batch=3"
  "llamav_2 llama tp:2 -D layers=2 -D d=32 -D heads=4 -D kv_heads=2 -D ffn=24 -D vocab=101 -D ctx=7 -D batch=2"
  "llamav_4 llama tp:4 -D layers=2 -D d=32 -D heads=4 -D kv_heads=2 -D ffn=24 -D vocab=101 -D ctx=7 -D batch=2"
)
for spec in "${models[@]}"; do
  read -r name model plan defines <<< "$spec"
  n=${plan#tp:}
  dir="$work/$name"
  # shellcheck disable=SC2086
  "$nnc" "models/$model.lua" --parallel="$plan" $defines -o "$dir"
  make -s -C "$dir" -j2 "bench_$model" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; exit 1; }
  out=$(timeout 300 "$mpirun" -np "$n" --oversubscribe "$dir/bench_$model" --check --runs 2 --warmup 0 --threads 1 --no-peaks 2>&1) \
    || { echo "$out"; echo "FAIL: $model $plan"; exit 1; }
  oks=$(grep -c "max relative error .* ok" <<< "$out" || true)
  bad=$(grep -c "max relative error" <<< "$out" || true)
  echo "$name: $model $plan over $n ranks: $oks of $bad outputs ok (rank 0 reports; every rank checks and fails the job on a miss)"
  grep "max relative error" <<< "$out" | sort -u
  [ "$oks" -gt 0 ] && [ "$oks" -eq "$bad" ] || { echo "$out"; echo "FAIL: $model $plan"; exit 1; }
done
# The harness reports what the collectives moved (runtime/nnrt_comm.h: an
# all_reduce counts the tensor it sums, bus traffic 2 (n-1)/n of it; an
# all_gather the slice each rank sends, bus traffic n - 1 times it).
# gpt2 tp:2 at B=3 T=9 d=36: 2 layers x 2 pairs sum [3, 9, 36] f32 (3888
# bytes), and so does the vocabulary-split embedding: 5 x 3888 = 19440; the
# head gathers [3, 9, 27] f32 (ceil(53 / 2) = 27 rows a rank), 2916 bytes:
# 22356 a run, and at 2 ranks the bus traffic is the same
out=$(timeout 120 "$mpirun" -np 2 --oversubscribe "$work/gpt2_2/bench_gpt2" --runs 3 --warmup 1 --threads 1 --no-peaks \
      --json 2>&1) || { echo "$out"; echo "FAIL: gpt2 tp:2 --json"; exit 1; }
grep -q '"comm": {"bytes_per_run": 22356, "bus_bytes_per_run": 22356, "wait_ms_per_run": [0-9.e-]*, "bus_gbps": [0-9.e+-]*}' \
  <<< "$out" || { echo "$out"; echo "FAIL: the collectives' bytes a run"; exit 1; }
echo "gpt2 tp:2: 22356 bytes of collectives a run reported"
# gpt2 tp:4, vocabulary 101: 6 heads do not split 4 ways, so 2 MLP pairs and
# the embedding sum [3, 9, 36] f32: 3 x 3888 = 11664 bytes (bus 3 x 3888 x
# 2 x 3/4 = 17496); the head gathers [3, 9, 26] f32 (ceil(101 / 4) = 26),
# 2808 bytes (bus 3 x 2808 = 8424): 14472 a run, 25920 on the bus
out=$(timeout 120 "$mpirun" -np 4 --oversubscribe "$work/gpt2v_4/bench_gpt2" --runs 3 --warmup 1 --threads 1 --no-peaks \
      --json 2>&1) || { echo "$out"; echo "FAIL: gpt2 tp:4 --json"; exit 1; }
grep -q '"comm": {"bytes_per_run": 14472, "bus_bytes_per_run": 25920, ' \
  <<< "$out" || { echo "$out"; echo "FAIL: the collectives' bytes a run at tp:4"; exit 1; }
echo "gpt2 tp:4, vocabulary 101: 14472 bytes of collectives a run reported, 25920 on the bus"

# The odd vocabularies against one process: the same weights file and ids
# (tp_logits.c) through the model compiled without the plan and with it;
# every rank's logits within 1e-6 (relative to the largest) of the one
# process's.
for spec in "${models[@]}"; do
  read -r name model plan defines <<< "$spec"
  case $name in gpt2v_*|llamav_*) ;; *) continue ;; esac
  n=${plan#tp:}
  ids=ids
  [ "$model" = llama ] && ids=input_ids
  one="$work/${model}_one"
  if [ ! -d "$one" ]; then
    # shellcheck disable=SC2086
    "$nnc" "models/$model.lua" $defines -o "$one"
    # shellcheck disable=SC2086
    "$nnc" weights "models/$model.lua" $defines -o "$one/w.safetensors"
    make -s -C "$one" -j2 "lib$model.a" > "$one.make.log" 2>&1 || { cat "$one.make.log"; exit 1; }
  fi
  make -s -C "$work/$name" -j2 "lib$model.a" > "$work/$name.make.log" 2>&1 || { cat "$work/$name.make.log"; exit 1; }
  for d in "$one" "$work/$name"; do
    mpicc -std=c11 -O2 -Wall -Wextra -Werror -I"$d" -DMODEL="$model" -DIDS="$ids" "$here/tp_logits.c" "$d/lib$model.a" \
      -lm -lpthread -o "$d/tp_logits"
  done
  B=$(sed -n 's/.*batch=\([0-9]*\).*/\1/p' <<< "$defines")
  T=$(sed -n 's/.*ctx=\([0-9]*\).*/\1/p' <<< "$defines")
  [ -f "$work/${model}_one.logits.0" ] || "$one/tp_logits" "$one/w.safetensors" "$work/${model}_one.logits" "$B" "$T" 101
  timeout 300 "$mpirun" -np "$n" --oversubscribe "$work/$name/tp_logits" "$one/w.safetensors" "$work/$name.logits" "$B" "$T" 101
  python3 - "$work/${model}_one.logits.0" "$work/$name.logits" "$n" "$name" <<'PY'
import sys
from array import array
def load(path):
    a = array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a
one = load(sys.argv[1])
scale = max(abs(v) for v in one)
for r in range(int(sys.argv[3])):
    got = load("%s.%d" % (sys.argv[2], r))
    err = max(abs(a - b) for a, b in zip(got, one)) / scale if len(got) == len(one) else float("inf")
    print("%s rank %d: logits within %.3g of one process's (relative to the largest, %.3g)" % (sys.argv[4], r, err, scale))
    if not err <= 1e-6:
        sys.exit("FAIL: %s rank %d differs from one process by %g" % (sys.argv[4], r, err))
PY
done
# the plan was compiled for 2 ranks: 3 is refused on every rank, with the reason
out=$(timeout 120 "$mpirun" -np 3 --oversubscribe "$work/gpt2_2/bench_gpt2" --runs 1 --no-peaks 2>&1) && {
  echo "$out"; echo "FAIL: 3 ranks ran a plan for 2"; exit 1; }
grep -q "compiled for 2 ranks (--parallel=tp:2), launched with 3" <<< "$out" || { echo "$out"; echo "FAIL: no clear message"; exit 1; }
echo "a world of 3 for a plan of 2: refused"

# One weights file: each rank reads its slices of it (F32 straight from the
# mapped file) and checks against the reference that reads it whole.
"$nnc" weights models/gpt2.lua -D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=3 -o "$work/w.safetensors"
out=$(timeout 300 "$mpirun" -np 2 --oversubscribe "$work/gpt2_2/bench_gpt2" --check --weights "$work/w.safetensors" \
      --runs 1 --warmup 0 --threads 1 --no-peaks 2>&1) || { echo "$out"; echo "FAIL: tp:2 from a weights file"; exit 1; }
grep "max relative error" <<< "$out"
# a rank that cannot read the file: the job ends, promptly, naming the file
cat > "$work/rank1_lost.sh" <<'SH'
#!/bin/sh
# rank 1 is given a path it cannot read; the others the real file
w=$1
shift
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && w=/nonexistent/w.safetensors
exec "$@" --weights "$w"
SH
start=$(date +%s)
out=$(timeout 120 "$mpirun" -np 2 --oversubscribe sh "$work/rank1_lost.sh" "$work/w.safetensors" \
      "$work/gpt2_2/bench_gpt2" --runs 1 --warmup 0 --threads 1 --no-peaks 2>&1) && {
  echo "$out"; echo "FAIL: a rank without its weights ran"; exit 1; }
took=$(( $(date +%s) - start ))
grep -q "/nonexistent/w.safetensors" <<< "$out" || { echo "$out"; echo "FAIL: no message naming the file"; exit 1; }
[ "$took" -lt 60 ] || { echo "FAIL: the job took $took s to end"; exit 1; }
echo "a rank that cannot read the weights: the job ends in ${took} s, naming the file"

# Data parallelism: gpt2 trained by 2 ranks of 2 rows each takes the same
# steps (loss, gradient norm) as one process with batches of 4 rows.
python3 "$here/train_steps.py" tokens "$work/tokens.bin"
defines="-D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=4"
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --train $defines -o "$work/train1"
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --train --parallel=dp:2 $defines -o "$work/train2"
for d in train1 train2; do
  make -s -C "$work/$d" -j2 train_gpt2 > "$work/$d.make.log" 2>&1 || { cat "$work/$d.make.log"; exit 1; }
done
args=(--data "$work/tokens.bin" --steps 6 --seq 9 --threads 1 --no-peaks --json)
"$work/train1/train_gpt2" "${args[@]}" --batch 4 > "$work/one.json"
timeout 300 "$mpirun" -np 2 --oversubscribe "$work/train2/train_gpt2" "${args[@]}" --batch 2 > "$work/two.json"
python3 "$here/train_steps.py" compare "dp:2 against one process" "$work/one.json" "$work/two.json" 1
# every step sums the f32 gradients of the 34344 parameters (137376 bytes)
# and the loss (4): the harness reports each step's bytes from rank 0
python3 - "$work/two.json" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bad = [s for s in steps if s.get("comm_bytes") != 137380 or s.get("comm_bus_bytes") != 137380]
if not steps or bad:
    sys.exit("FAIL: dp:2 steps' collective bytes, expected 137380 each: %s" % (bad or "no steps"))
print("dp:2: 137380 bytes of collectives a step reported, %d steps" % len(steps))
PY
# Tensor parallelism: gpt2 trained by 2 and 4 ranks sharing each batch
# (heads, MLP columns and the 101-token vocabulary split; the loss over each
# rank's classes) takes the same steps as one process.
python3 - "$work/tokens101.bin" <<'PY'
import random, struct, sys
random.seed(5)
n = 3000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[random.randrange(101) for _ in range(n)]))
PY
defines="-D layers=2 -D d=36 -D heads=6 -D vocab=101 -D ctx=9 -D batch=3"
targs=(--data "$work/tokens101.bin" --steps 6 --seq 9 --batch 3 --threads 1 --no-peaks --json)
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --train $defines -o "$work/ttrain1"
make -s -C "$work/ttrain1" -j2 train_gpt2 > "$work/ttrain1.make.log" 2>&1 || { cat "$work/ttrain1.make.log"; exit 1; }
"$work/ttrain1/train_gpt2" "${targs[@]}" > "$work/tone.json"
for n in 2 4; do
  # shellcheck disable=SC2086
  "$nnc" models/gpt2.lua --train --parallel=tp:$n $defines -o "$work/ttp$n"
  make -s -C "$work/ttp$n" -j2 train_gpt2 > "$work/ttp$n.make.log" 2>&1 || { cat "$work/ttp$n.make.log"; exit 1; }
  timeout 300 "$mpirun" -np $n --oversubscribe "$work/ttp$n/train_gpt2" "${targs[@]}" > "$work/ttp$n.json"
  python3 "$here/train_steps.py" compare "tp:$n training against one process" "$work/tone.json" "$work/ttp$n.json" 1
done
# Whole checkpoints under tp: every rank calls _save, rank 0 writes the
# whole tensors (the slices gathered, the padded vocabulary rows dropped).
# 3 SGD updates by tp:N and by one process: the same tensors (AdamW would
# turn the rounding noise of c_attn's key bias, whose gradient is 0 in exact
# arithmetic, into lr-sized steps); one process's AdamW checkpoint resumed
# by tp:N and saved again without an update: the same bytes; its next
# updates: one process's.
"$work/ttrain1/train_gpt2" "${targs[@]}" --steps 3 --sgd --save "$work/sgd1.ckpt" > /dev/null
"$work/ttrain1/train_gpt2" "${targs[@]}" --steps 3 --save "$work/adam1.ckpt" > /dev/null
for n in 2 4; do
  timeout 300 "$mpirun" -np $n --oversubscribe "$work/ttp$n/train_gpt2" "${targs[@]}" --steps 3 --sgd \
    --save "$work/sgd$n.ckpt" > /dev/null
  python3 "$here/train_steps.py" checkpoints "tp:$n's checkpoint after 3 SGD updates against one process's" \
    "$work/sgd1.ckpt" "$work/sgd$n.ckpt"
  timeout 300 "$mpirun" -np $n --oversubscribe "$work/ttp$n/train_gpt2" "${targs[@]}" --steps 3 \
    --resume "$work/adam1.ckpt" --save "$work/again$n.ckpt" > /dev/null
  cmp "$work/adam1.ckpt" "$work/again$n.ckpt" || { echo "FAIL: tp:$n resumed and saved: not the same file"; exit 1; }
  echo "tp:$n: one process's checkpoint resumed and saved again: the same bytes"
  timeout 300 "$mpirun" -np $n --oversubscribe "$work/ttp$n/train_gpt2" "${targs[@]}" \
    --resume "$work/adam1.ckpt" > "$work/resumed$n.json"
  python3 "$here/train_steps.py" compare "tp:$n resumed at update 3 against one process" "$work/tone.json" \
    "$work/resumed$n.json" 4
done
# a checkpoint without one moment: every rank names it
python3 - "$work/adam1.ckpt" "$work/bad.ckpt" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(data.replace(b'"optim.v.wte.weight"', b'"optim.v.wte.weighX"', 1))
PY
out=$(timeout 120 "$mpirun" -np 2 --oversubscribe "$work/ttp2/train_gpt2" "${targs[@]}" --resume "$work/bad.ckpt" 2>&1) && {
  echo "$out"; echo "FAIL: tp:2 resumed from a checkpoint without optim.v.wte.weight"; exit 1; }
grep -q 'no tensor "optim.v.wte.weight" in the file' <<< "$out" || { echo "$out"; echo "FAIL: no message"; exit 1; }
# --check stays one process's (a rank's gradients are slices), saying so
out=$("$work/ttp2/train_gpt2" --check 2>&1) && { echo "$out"; echo "FAIL: tp:2 --check ran"; exit 1; }
grep -q "build without --parallel to check it" <<< "$out" || { echo "$out"; echo "FAIL: no message"; exit 1; }

# Tensor and data parallelism together: tp:2,dp:2 on 4 ranks (rank = dp
# index * 2 + tp index), written dp:2,tp:2 (the same plan). Each tp pair
# trains on its dp group's 2 rows of every 4-row batch (train1's sizes and
# tokens above; 53 tokens split 27 + 26 and a zero row). Clip 0.3 makes
# every update clip, so the norm (the slices' squares summed in a tp group,
# the whole weights' once, after the dp group's sum) moves the weights;
# SGD as for tp's checkpoints: 3 updates give one process's losses, norms
# and checkpoint.
defines="-D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=4"
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua --train --parallel=dp:2,tp:2 $defines -o "$work/tpdp"
make -s -C "$work/tpdp" -j2 train_gpt2 > "$work/tpdp.make.log" 2>&1 || { cat "$work/tpdp.make.log"; exit 1; }
sargs=(--data "$work/tokens.bin" --steps 3 --seq 9 --threads 1 --no-peaks --json --sgd --clip 0.3)
"$work/train1/train_gpt2" "${sargs[@]}" --batch 4 --save "$work/tpdp1.ckpt" > "$work/tpdp1.json"
timeout 300 "$mpirun" -np 4 --oversubscribe "$work/tpdp/train_gpt2" "${sargs[@]}" --batch 2 --save "$work/tpdp4.ckpt" \
  > "$work/tpdp4.json"
python3 "$here/train_steps.py" compare "tp:2,dp:2 training against one process (SGD, clipped)" "$work/tpdp1.json" \
  "$work/tpdp4.json" 1
python3 "$here/train_steps.py" checkpoints "tp:2,dp:2's checkpoint after 3 SGD updates against one process's" \
  "$work/tpdp1.ckpt" "$work/tpdp4.ckpt"
# a world of 3 for the plan of 4: every rank refuses by itself, naming both
# (mpirun told not to end the job at the first failure, so that each rank's
# own exit status and message are seen)
cat > "$work/rank_status.sh" <<'SH'
#!/bin/sh
# runs the command, leaving its exit status in $RANK_STATUS.<rank>
"$@"
echo $? > "$RANK_STATUS.${OMPI_COMM_WORLD_RANK:-0}"
SH
out=$(RANK_STATUS="$work/status" timeout 120 "$mpirun" --mca orte_abort_on_non_zero_status 0 -x RANK_STATUS -np 3 \
      --oversubscribe sh "$work/rank_status.sh" "$work/tpdp/train_gpt2" "${sargs[@]}" --batch 2 2>&1) || true
n=$(grep -c "compiled for 4 ranks (--parallel=tp:2,dp:2), launched with 3" <<< "$out" || true)
failed=$(cat "$work"/status.* 2>/dev/null | grep -cv '^0$' || true)
[ "$n" -eq 3 ] && [ "$failed" -eq 3 ] || { echo "$out"; echo "FAIL: $failed of 3 ranks failed, $n said why"; exit 1; }
echo "a world of 3 for tp:2,dp:2: each of the 3 ranks refused it"
echo "PASS"
