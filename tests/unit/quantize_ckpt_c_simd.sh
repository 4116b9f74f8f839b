#!/usr/bin/env bash
# tests/unit/quantize_ckpt_c_simd.sh NNC CC: quantized checkpoints on c-simd
# (tests/meson.build runs it). For int4w, int8w and w8a8 folders of mlp and
# of a small gpt2 (its Conv1D weights are [K, N]: the other layout):
#  1. bench_<model> --weights F32 --save-quantized Q writes the held
#     weights; loading Q and saving again gives a byte-identical file (the
#     loaded values are the saved ones), with the mode in the metadata;
#  2. --check on Q compares with the reference of the dequantized weights
#     it reads from Q (int4w, int8w: within f32's 1e-5);
#  3. mlp: a model that loads F32 and one that loads Q give bit-identical
#     logits (tests/unit/quantize_ckpt_mlp.c, built against the folder);
# then the refusals: a file of another mode, another group size, a value
# off the grid, a missing scale tensor, a truncated file, and a quantized
# file given to an f32 folder; each message names the tensor.
set -euo pipefail
nnc=${1:?usage: quantize_ckpt_c_simd.sh NNC CC}
cc=${2:-cc}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() { "$@" --runs 1 --warmup 0 --no-peaks; }

# mode model name defines
cases=(
  "int4w mlp mlp"
  "int4w gpt2 gpt2_odd -D layers=2 -D heads=3 -D d=150 -D vocab=97 -D ctx=19 -D batch=3"
  "int8w mlp mlp"
  "int8w gpt2 gpt2_odd -D layers=2 -D heads=3 -D d=150 -D vocab=97 -D ctx=19 -D batch=3"
  "w8a8 mlp mlp"
)
for spec in "${cases[@]}"; do
  read -r mode model name defines <<< "$spec"
  dir="$work/${name}_$mode"
  # shellcheck disable=SC2086
  "$nnc" "models/$model.lua" --quantize="$mode" $defines -o "$dir"
  make -s -C "$dir" -j2 "bench_$model" "lib$model.a" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; fail "$name $mode: build"; }
  # shellcheck disable=SC2086
  "$nnc" weights "models/$model.lua" $defines -o "$dir/f32.safetensors"
  out=$(run "$dir/bench_$model" --weights "$dir/f32.safetensors" --save-quantized "$dir/q.safetensors" 2>&1) \
    || { echo "$out"; fail "$name $mode: --save-quantized"; }
  out=$(run "$dir/bench_$model" --weights "$dir/q.safetensors" --save-quantized "$dir/q2.safetensors" --check 2>&1) \
    || { echo "$out"; fail "$name $mode: loading the quantized checkpoint"; }
  cmp "$dir/q.safetensors" "$dir/q2.safetensors" || fail "$name $mode: saved, loaded and saved again: the files differ"
  python3 - "$dir/q.safetensors" "$mode" <<'PY' || fail "$name $mode: the file's metadata"
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
assert h['__metadata__']['nnc.quantize'] == sys.argv[2], h['__metadata__']
assert any(k.endswith('.scale') for k in h), 'no scale tensor'
PY
  lines=$(grep "max relative error" <<< "$out")
  echo "$name $mode (its quantized checkpoint, $(stat -c %s "$dir/q.safetensors") bytes against $(stat -c %s "$dir/f32.safetensors")): $lines"
  if [ "$mode" != w8a8 ]; then   # w8a8 quantizes its activations too: not exact against any f32 reference
    awk '{ for (i = 1; i < NF; i++) if ($i == "error") { e = $(i + 1); sub(",", "", e); if (e + 0 > 1e-5) bad = 1 } } END { exit bad }' \
      <<< "$lines" || fail "$name $mode: the checkpoint's model is not within 1e-5 of its dequantized reference"
  fi
  if [ "$model" = mlp ]; then
    "$cc" -std=c11 -O1 -I"$dir" "$here/quantize_ckpt_mlp.c" "$dir/libmlp.a" -lm -lpthread -o "$dir/outputs" \
      || fail "$name $mode: build quantize_ckpt_mlp"
    "$dir/outputs" "$dir/f32.safetensors" "$dir/q.safetensors" || fail "$name $mode: the outputs differ"
  fi
done

# a copy of a file with its header or data changed by a Python expression on h (header) and d (data)
doctor() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h, d = json.loads(b[8:8 + n]), bytearray(b[8 + n:])
exec(sys.argv[3])
s = json.dumps(h, separators=(',', ':')).encode()
s += b' ' * (-len(s) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(s)) + s + bytes(d))
PY
}
refuse() {
  local folder=$1 model=$2 file=$3 msg=$4
  set +e
  err=$(run "$work/$folder/bench_$model" --weights "$file" 2>&1)
  rc=$?
  set -e
  [ "$rc" = 1 ] || fail "$folder with $file: exit $rc, expected 1 ($err)"
  grep -qF -- "$msg" <<< "$err" || fail "$folder with $file: expected \"$msg\", found: $err"
  echo "refused: $(grep -F -- "$msg" <<< "$err" | head -1)"
}
q4="$work/mlp_int4w/q.safetensors"
refuse mlp_int4w mlp "$work/mlp_int8w/q.safetensors" \
  "fc1.weight: expected f32 values or int4w's quantized ones, found I8 values quantized as int8w (the file's nnc.quantize)"
refuse mlp_int8w mlp "$work/mlp_w8a8/q.safetensors" \
  "fc1.weight: expected f32 values or int8w's quantized ones, found I8 values quantized as w8a8"
refuse mlp_w8a8 mlp "$work/mlp_int8w/q.safetensors" \
  "fc1.weight: expected f32 values or w8a8's quantized ones, found I8 values quantized as int8w"
doctor "$q4" "$work/g64.safetensors" "h['__metadata__']['nnc.group_size'] = '64'"
refuse mlp_int4w mlp "$work/g64.safetensors" \
  "fc1.weight: expected int4w's groups of 128 k (nnc.group_size), found 64 (the file's nnc.group_size)"
doctor "$q4" "$work/nometa.safetensors" "del h['__metadata__']"
refuse mlp_int4w mlp "$work/nometa.safetensors" "fc1.weight: expected f32 values or int4w's quantized ones, found U8 values and no nnc.quantize"
doctor "$q4" "$work/minus8.safetensors" "d[h['out.weight']['data_offsets'][0]] = 0x08"
refuse mlp_int4w mlp "$work/minus8.safetensors" "out.weight: byte 0 holds -8, expected int4w's values in [-7, 7]"
doctor "$q4" "$work/noscale.safetensors" "del h['fc2.weight.scale']"
refuse mlp_int4w mlp "$work/noscale.safetensors" "no tensor \"fc2.weight.scale\""
doctor "$q4" "$work/i8.safetensors" "h['fc2.weight']['dtype'] = 'I8'"
refuse mlp_int4w mlp "$work/i8.safetensors" "fc2.weight: expected U8 [256, 256] (int4w), found I8 [256, 256]"
head -c $(($(stat -c %s "$q4") - 100)) "$q4" > "$work/truncated.safetensors"
refuse mlp_int4w mlp "$work/truncated.safetensors" "truncated.safetensors"
# an f32 folder takes no quantized file
"$nnc" models/mlp.lua -o "$work/mlp_f32"
make -s -C "$work/mlp_f32" -j2 bench_mlp > /dev/null 2>&1 || fail "mlp f32: build"
refuse mlp_f32 mlp "$q4" "fc1.weight"
echo "ok"
