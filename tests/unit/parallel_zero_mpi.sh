#!/usr/bin/env bash
# tests/unit/parallel_zero_mpi.sh NNC MPIRUN: ZeRO-1 (--parallel=dp:M,zero1)
# on c-simd under mpirun (tests/meson.build runs it). Ranks that keep and
# update a shard of the optimizer state each must take the same steps (loss,
# gradient norm) as one process with all the rows, with clipping and
# gradient accumulation on; at 3 ranks the weights' 14,752 floats do not
# divide by 3 (nor does any weight), so the shards cut across weights and the
# last one is short. Rank 0's checkpoint must be the one dp:M without ZeRO
# writes, and resuming from it must repeat the uninterrupted run.
set -euo pipefail
nnc=${1:?usage: parallel_zero_mpi.sh NNC MPIRUN}
mpirun=${2:?}
here=$(cd "$(dirname "$0")" && pwd)   # train_steps.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/train_steps.py" tokens "$work/tokens.bin"
two="-D layers=2 -D d=36 -D heads=6 -D vocab=53 -D ctx=9 -D batch=4"
three="-D layers=1 -D d=32 -D heads=4 -D vocab=53 -D ctx=9 -D batch=6"
build() {   # folder, then nnc's options
  local dir=$work/$1
  shift
  "$nnc" models/gpt2.lua --train "$@" -o "$dir"
  make -s -C "$dir" -j2 train_gpt2 > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; exit 1; }
}
# shellcheck disable=SC2086  # the defines: several words
{
  build one2 $two
  build dp2 --parallel=dp:2 $two
  build zero2 --parallel=dp:2,zero1 $two
  build one3 $three
  build zero3 --parallel=dp:3,zero1 $three
}
numel=$(sed -n 's/^#define TRAIN_NUMEL ((int64_t)\([0-9]*\))$/\1/p' "$work/zero3/gpt2.c")
[ $((numel % 3)) -ne 0 ] || { echo "FAIL: $numel weights divide by 3: pick other sizes"; exit 1; }

# the clip (0.3) is below every update's norm (about 2.4): every update clips
args=(--data "$work/tokens.bin" --seq 9 --threads 1 --no-peaks --clip 0.3 --accumulate 2)
compare() {   # label, one process's JSON, the ranks' JSON, first update compared
  python3 "$here/train_steps.py" compare "$@"
}
"$work/one2/train_gpt2" "${args[@]}" --steps 6 --batch 4 --json > "$work/one2.json"
timeout 300 "$mpirun" -np 2 --oversubscribe "$work/zero2/train_gpt2" "${args[@]}" --steps 6 --batch 2 --json \
  --save "$work/zero2.ckpt" > "$work/zero2.json"
compare "dp:2,zero1 against one process of 4 rows, clip 0.3, 2 micro-batches" "$work/one2.json" "$work/zero2.json" 1
"$work/one3/train_gpt2" "${args[@]}" --steps 6 --batch 6 --json > "$work/one3.json"
timeout 300 "$mpirun" -np 3 --oversubscribe "$work/zero3/train_gpt2" "${args[@]}" --steps 6 --batch 2 --json \
  > "$work/zero3.json"
compare "dp:3,zero1 ($numel weights) against one process of 6 rows" "$work/one3.json" "$work/zero3.json" 1

# the optimizer state a rank keeps: half of dp:2's
out=$(timeout 300 "$mpirun" -np 2 --oversubscribe "$work/dp2/train_gpt2" "${args[@]}" --steps 6 --batch 2 \
      --save "$work/dp2.ckpt")
grep "optimizer state" <<< "$out"
full=$(sed -n 's/.*optimizer state \([0-9]*\) bytes.*/\1/p' <<< "$out")
out=$(timeout 300 "$mpirun" -np 2 --oversubscribe "$work/zero2/train_gpt2" "${args[@]}" --steps 1 --batch 2)
grep "optimizer state" <<< "$out"
shard=$(sed -n 's/.*optimizer state \([0-9]*\) bytes.*/\1/p' <<< "$out")
[ "$shard" -eq $(( (full / 8 + 1) / 2 * 8 )) ] || { echo "FAIL: $shard bytes a rank, expected half of $full"; exit 1; }

# rank 0's checkpoint: the tensors dp:2 without ZeRO writes, the same values
python3 - "$work/dp2.ckpt" "$work/zero2.ckpt" <<'PY'
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    head.pop("__metadata__", None)
    return head, data[8 + n:]
(ha, a), (hb, b) = read(sys.argv[1]), read(sys.argv[2])
assert {k: (v["dtype"], v["shape"]) for k, v in ha.items()} == {k: (v["dtype"], v["shape"]) for k, v in hb.items()}
worst = 0.0
for k, v in ha.items():
    if v["dtype"] != "F32":
        assert a[slice(*v["data_offsets"])] == b[slice(*hb[k]["data_offsets"])], k
        continue
    x = struct.unpack("<%df" % (len(a[slice(*v["data_offsets"])]) // 4), a[slice(*v["data_offsets"])])
    y = struct.unpack("<%df" % (len(x)), b[slice(*hb[k]["data_offsets"])])
    scale = max(max(abs(t) for t in x), 1e-30)
    worst = max(worst, max(abs(p - q) for p, q in zip(x, y)) / scale)
print("checkpoint of dp:2,zero1 against dp:2's: %d tensors, largest difference %.3g of each one's largest" %
      (len(ha), worst))
sys.exit(0 if worst <= 1e-6 else 1)
PY

# 3 updates, a checkpoint, then 3 more from it: the uninterrupted run's steps
timeout 300 "$mpirun" -np 2 --oversubscribe "$work/zero2/train_gpt2" "${args[@]}" --steps 3 --batch 2 --json \
  --save "$work/half.ckpt" > /dev/null
timeout 300 "$mpirun" -np 2 --oversubscribe "$work/zero2/train_gpt2" "${args[@]}" --steps 6 --batch 2 --json \
  --resume "$work/half.ckpt" > "$work/resumed.json"
compare "dp:2,zero1 resumed at update 3 against one process" "$work/one2.json" "$work/resumed.json" 4
echo "PASS"
