#!/usr/bin/env bash
# tests/unit/smooth_w8a8.sh NNC: `nnc calibrate --smooth=ALPHA` (compiler/smooth.c),
# SmoothQuant's scale migration for --quantize=w8a8, on C SIMD folders:
#  1. a small GPT-2 (random weights) whose ln_1 and ln_2 gammas have two
#     outlier channels (x40): one line a pre-norm (4), each into the linear
#     behind it; the migrated model's outputs on the float64 reference within
#     1e-6 of the original's; the file keeps every tensor, the norms' gamma
#     and beta and those weights changed (F32), nothing else; the w8a8
#     folder's --check error on the migrated file below 0.8 of the original
#     file's (the outliers' range moved into the weights' scales);
#  2. a small LLaMA: rmsnorms into q, k, v, gate and up, and the final norm
#     into the untied head (5 lines);
#  3. a small BERT (post-norm: its norms' outputs feed the residuals too)
#     whose LayerNorm gammas have two outlier channels: 4 lines, each
#     "as the .smooth of" the linears behind it (q, k, v or intermediate);
#     the file keeps every tensor byte for byte and adds the 8 factors; the
#     w8a8 folder's --check error below 0.85 of the original file's; a
#     quantized checkpoint saved from it carries the 8 factors and loads
#     back to the same bytes; an f32 folder ignores them (--check 1e-5);
#     a factor of 0 or of the wrong shape is refused by name; calibrating
#     the migrated file again is refused;
#  4. refusals: --smooth=0, --smooth=1, --smooth with --method, each
#     without output.
set -euo pipefail
nnc=${1:?usage: smooth_w8a8.sh NNC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# a safetensors file of I32 tensors: NAME=d0xd1:MOD ... (values (i * 37 + 11) % MOD, or 0/1 for MOD 0/1)
ids() {
  python3 - "$@" <<'PY'
import json, struct, sys
hdr, data = {}, b""
for spec in sys.argv[2:]:
    name, rest = spec.split("=")
    shape, mod = rest.split(":")
    shape = [int(x) for x in shape.split("x")]
    n, mod = shape[0] * shape[1], int(mod)
    vals = [(i * 37 + 11) % mod if mod > 1 else mod for i in range(n)]
    b = struct.pack("<%di" % n, *vals)
    hdr[name] = {"dtype": "I32", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}
# name dtype [shape] sha1-of-bytes a line
tensors() {
  python3 - "$1" <<'PY'
import hashlib, json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
for name, t in sorted(json.loads(raw[8:8 + n]).items()):
    if name == "__metadata__": continue
    a, b = t["data_offsets"]
    print(name, t["dtype"], json.dumps(t["shape"], separators=(",", ":")), hashlib.sha1(raw[8 + n + a:8 + n + b]).hexdigest())
PY
}

gpt2="-D layers=2 -D d=64 -D heads=2 -D vocab=101 -D ctx=32 -D batch=3"
# shellcheck disable=SC2086
"$nnc" weights models/gpt2.lua $gpt2 -o "$work/w0.safetensors"
python3 - "$work/w0.safetensors" "$work/w.safetensors" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
for name, t in json.loads(raw[8:8 + n]).items():
    if name.endswith("ln_1.weight") or name.endswith("ln_2.weight"):
        at = 8 + n + t["data_offsets"][0]
        for c in (3, 17):
            struct.pack_into("<f", raw, at + 4 * c, struct.unpack_from("<f", raw, at + 4 * c)[0] * 40.0)
open(sys.argv[2], "wb").write(raw)
PY
ids "$work/data.safetensors" ids=3x16:101
# shellcheck disable=SC2086
"$nnc" calibrate models/gpt2.lua $gpt2 --weights "$work/w.safetensors" --data "$work/data.safetensors" \
  -o "$work/s.safetensors" --smooth=0.5 > "$work/cal.log" || { cat "$work/cal.log"; fail "gpt2: calibrate --smooth"; }
cat "$work/cal.log"
[ "$(grep -c "^h\.[01]\.ln_[12]\.weight: s from .* into h\.[01]\.\(attn\.c_attn\|mlp\.c_fc\)\.weight$" "$work/cal.log")" -eq 4 ] ||
  fail "gpt2: expected 4 norms migrated into c_attn and c_fc"
diff=$(sed -n 's/^the outputs with the migrated weights: max relative difference //p' "$work/cal.log")
awk -v d="$diff" 'BEGIN { exit !(d != "" && d + 0 <= 1e-6) }' || fail "gpt2: the migrated outputs differ by $diff"
tensors "$work/w.safetensors" > "$work/w.txt"
tensors "$work/s.safetensors" > "$work/s.txt"
[ "$(wc -l < "$work/w.txt")" -eq "$(wc -l < "$work/s.txt")" ] || fail "gpt2: the tensors' count changed"
# changed: 4 norms' weight and bias, c_attn and c_fc of both layers (12); the rest byte for byte
changed=$( (diff <(cut -d' ' -f1,4 "$work/w.txt") <(cut -d' ' -f1,4 "$work/s.txt") || true) |
          sed -n 's/^> \([^ ]*\) .*/\1/p' | sort)
want=$(printf '%s\n' h.{0,1}.ln_{1,2}.{weight,bias} h.{0,1}.attn.c_attn.weight h.{0,1}.mlp.c_fc.weight | sort)
[ "$changed" = "$want" ] || fail "gpt2: changed tensors: $changed"
# shellcheck disable=SC2086
"$nnc" models/gpt2.lua $gpt2 --quantize=w8a8 -o "$work/f" > /dev/null
make -s -C "$work/f" -j2 bench_gpt2 > "$work/make.log" 2>&1 || { tail -20 "$work/make.log"; fail "gpt2 w8a8 build"; }
err() { (cd "$work/f" && ./bench_gpt2 --weights "$1" --check --runs 1 --warmup 0 --threads 2) |
        sed -n 's/^ *logits *f32 *max relative error \([^,]*\),.*/\1/p'; }
before=$(err "$work/w.safetensors") after=$(err "$work/s.safetensors")
echo "w8a8 --check: max relative error $before, migrated $after"
awk -v b="$before" -v a="$after" 'BEGIN { exit !(b != "" && a != "" && a + 0 < 0.8 * b) }' ||
  fail "gpt2: the migration did not lower w8a8's error ($before -> $after)"

# LLaMA: rmsnorms, q/k/v and gate/up behind them, the final norm into the untied head
llama="-D layers=2 -D d=64 -D heads=4 -D kv_heads=2 -D ffn=96 -D vocab=101 -D ctx=32 -D batch=3"
# shellcheck disable=SC2086
"$nnc" weights models/llama.lua $llama -o "$work/lw.safetensors"
ids "$work/ldata.safetensors" input_ids=3x16:101
# shellcheck disable=SC2086
"$nnc" calibrate models/llama.lua $llama --weights "$work/lw.safetensors" --data "$work/ldata.safetensors" \
  -o "$work/ls.safetensors" --smooth=0.5 > "$work/lcal.log" || { cat "$work/lcal.log"; fail "llama: calibrate --smooth"; }
[ "$(grep -c "layernorm.weight: s from\|^model.norm.weight: s from .* into lm_head.weight$" "$work/lcal.log")" -eq 5 ] ||
  { cat "$work/lcal.log"; fail "llama: expected 5 norms migrated"; }
grep -q "input_layernorm.weight: s from .* into .*q_proj.weight .*k_proj.weight .*v_proj.weight$" "$work/lcal.log" ||
  fail "llama: q, k and v behind one norm"

# refusals, no output left
refuse() {
  local msg=$1 out rc=0
  shift
  out=$("$nnc" calibrate "$@" -o "$work/x.safetensors" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || fail "calibrate $*: accepted"
  grep -qF -- "$msg" <<< "$out" || fail "calibrate $*: expected '$msg', found: $out"
  [ ! -e "$work/x.safetensors" ] || fail "calibrate $*: wrote its output"
}
bert="-D layers=2 -D hidden=64 -D heads=4 -D intermediate=128 -D vocab=31 -D positions=16 -D seq=16 -D batch=3"
# shellcheck disable=SC2086
"$nnc" weights models/bert.lua $bert -o "$work/bw.safetensors"
ids "$work/bdata.safetensors" input_ids=3x16:31 token_type_ids=3x16:0 attention_mask=3x16:1
python3 - "$work/bw.safetensors" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
for name, t in json.loads(raw[8:8 + n]).items():
    if name.endswith("LayerNorm.weight"):
        at = 8 + n + t["data_offsets"][0]
        for c in (3, 17):
            struct.pack_into("<f", raw, at + 4 * c, struct.unpack_from("<f", raw, at + 4 * c)[0] * 40.0)
open(sys.argv[1], "wb").write(raw)
PY
# shellcheck disable=SC2086
"$nnc" calibrate models/bert.lua $bert --weights "$work/bw.safetensors" --data "$work/bdata.safetensors" \
  -o "$work/bs.safetensors" --smooth=0.5 > "$work/bcal.log" || { cat "$work/bcal.log"; fail "bert: calibrate --smooth"; }
cat "$work/bcal.log"
[ "$(grep -c "LayerNorm.weight: s from .* as the .smooth of encoder.layer.[01].\(attention.self.query.weight encoder.layer.[01].attention.self.key.weight encoder.layer.[01].attention.self.value.weight\|intermediate.dense.weight\)$" "$work/bcal.log")" -eq 4 ] ||
  fail "bert: expected 4 norms' factors for q, k, v and intermediate"
tensors "$work/bw.safetensors" > "$work/bw.txt"
tensors "$work/bs.safetensors" > "$work/bs.txt"
added=$( (diff "$work/bw.txt" "$work/bs.txt" || true) | grep '^[<>]' | sed 's/ [0-9a-f]*$//')
want=$(printf '> %s F32 [64]\n' encoder.layer.{0,1}.attention.self.{query,key,value}.weight.smooth \
         encoder.layer.{0,1}.intermediate.dense.weight.smooth)
[ "$(sort <<< "$added")" = "$(sort <<< "$want")" ] || fail "bert: expected the file unchanged and 8 factors added, found: $added"
# shellcheck disable=SC2086
"$nnc" models/bert.lua $bert --quantize=w8a8 -o "$work/bf" > /dev/null
# shellcheck disable=SC2086
"$nnc" models/bert.lua $bert -o "$work/bf32" > /dev/null
for f in bf bf32; do
  make -s -C "$work/$f" -j2 bench_bert > "$work/make.log" 2>&1 || { tail -20 "$work/make.log"; fail "bert $f build"; }
done
# the larger max relative error of bert's two outputs
berr() { (cd "$work/$1" && ./bench_bert --weights "$2" --check --runs 1 --warmup 0 --threads 2) |
         sed -n 's/^ *[a-z_]* *f32 *max relative error \([^,]*\),.*/\1/p' | sort -g | tail -1; }
before=$(berr bf "$work/bw.safetensors") after=$(berr bf "$work/bs.safetensors")
echo "bert w8a8 --check: max relative error $before, with the factors $after"
awk -v b="$before" -v a="$after" 'BEGIN { exit !(b != "" && a != "" && a + 0 < 0.85 * b) }' ||
  fail "bert: the factors did not lower w8a8's error ($before -> $after)"
f32=$(berr bf32 "$work/bs.safetensors")
awk -v e="$f32" 'BEGIN { exit !(e != "" && e + 0 <= 1e-5) }' || fail "bert: the f32 folder with the factors' file: $f32"
(cd "$work/bf" && ./bench_bert --weights "$work/bs.safetensors" --save-quantized "$work/bq.safetensors" --runs 1 \
   --warmup 0 --threads 2 > /dev/null) || fail "bert: --save-quantized"
[ "$(tensors "$work/bq.safetensors" | grep -c '\.smooth F32 \[64\]')" -eq 8 ] || fail "bert: the quantized checkpoint's factors"
(cd "$work/bf" && ./bench_bert --weights "$work/bq.safetensors" --save-quantized "$work/bq2.safetensors" --runs 1 \
   --warmup 0 --threads 2 > /dev/null) || fail "bert: loading the quantized checkpoint"
cmp -s "$work/bq.safetensors" "$work/bq2.safetensors" || fail "bert: the quantized checkpoint did not load as saved"
# a zero factor, a wrong shape: refused by name
python3 - "$work/bs.safetensors" "$work/bad0.safetensors" "$work/bad1.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
name = "encoder.layer.1.intermediate.dense.weight.smooth"
zero = bytearray(raw)
struct.pack_into("<f", zero, 8 + n + hdr[name]["data_offsets"][0] + 4 * 5, 0.0)
open(sys.argv[2], "wb").write(zero)
hdr[name]["shape"] = [8, 8]
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(sys.argv[3], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
badload() {
  local out rc=0
  out=$(cd "$work/bf" && ./bench_bert --weights "$1" --runs 1 --warmup 0 --threads 2 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || fail "bert: $1 accepted"
  grep -qF -- "$2" <<< "$out" || fail "bert: $1: expected '$2', found: $out"
}
badload "$work/bad0.safetensors" "encoder.layer.1.intermediate.dense.weight.smooth: factor 5 is 0, expected a finite value > 0"
badload "$work/bad1.safetensors" "encoder.layer.1.intermediate.dense.weight.smooth: expected F32 [64]"
# shellcheck disable=SC2086
refuse "expected a weights file without encoder.layer.0.attention.self.query.weight.smooth, found one" \
  models/bert.lua $bert --weights "$work/bs.safetensors" --data "$work/bdata.safetensors" --smooth=0.5
for a in 0 1 x; do
  # shellcheck disable=SC2086
  refuse "--smooth: expected an alpha with 0 < alpha < 1" models/gpt2.lua $gpt2 --weights "$work/w.safetensors" \
    --data "$work/data.safetensors" --smooth=$a
done
# shellcheck disable=SC2086
refuse "expected --smooth or --method, found both" models/gpt2.lua $gpt2 --weights "$work/w.safetensors" \
  --data "$work/data.safetensors" --smooth=0.5 --method=absmax
echo "ok"
