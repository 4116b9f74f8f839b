#!/usr/bin/env bash
# tests/unit/hfuse.sh NNC [opencl]: horizontal fusion (compiler/passes/hfuse.c) end to
# end (tests/meson.build runs it).
#  1. --emit=ir: BERT's and LLaMA's q, k and v are one linear a layer (three
#     with --hfuse=off), its split after it; tests/ops/hfuse.lua fuses its two
#     groups and leaves every case that must stay apart (different inputs,
#     one bias of two, a tied weight, a graph output, a SwiGLU epilogue);
#     --train, --parallel and --quantize leave the linears alone.
#  2. c-simd and opencl-cpu (PoCL) folders at odd sizes, --check'ed: the
#     folder's reference is the model as written (driver.c hands the emitter
#     the graph before the pass), so a fusion that cut the wrong columns
#     fails; LLaMA's generate_llama --check (each decode step against a full
#     forward) on c-simd.
#  3. _set_weight of a fused weight after a run rebuilds the concatenation
#     (tests/ops/hfuse_set_weight.c against the c-simd folder of hfuse.lua).
#  4. Weights joined in place (compiler/passes/join_weights.c): BERT with
#     hidden 64, whose q, k, v weights and biases are multiples of 256 bytes,
#     holds the joined weight as its members' memory: each concatenation is
#     a view ("nothing to copy"), the arena is no larger than with
#     --hfuse=off (the copies lived there), --check passes, on c-simd and
#     opencl-cpu; the odd sizes above keep the copy.
set -euo pipefail
nnc=${1:?usage: hfuse.sh NNC [opencl]}
opencl=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

bert_odd="-D layers=2 -D hidden=36 -D heads=4 -D intermediate=50 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"
llama_odd="-D layers=2 -D d=48 -D heads=6 -D kv_heads=2 -D ffn=37 -D vocab=101 -D ctx=64 -D batch=4"

# 1. the IR: linear nodes with and without the pass
linears() { grep -cE '^%[0-9]+ +linear ' <<< "$1" || true; }
# shellcheck disable=SC2086
on=$("$nnc" models/bert.lua $bert_odd --emit=ir)
# shellcheck disable=SC2086
off=$("$nnc" models/bert.lua $bert_odd --emit=ir --hfuse=off)
[ "$(linears "$on")" = 8 ] || fail "bert: expected 8 linears with the pass (2 layers x qkv, out, ffn x 2), found $(linears "$on")"
[ "$(linears "$off")" = 12 ] || fail "bert: expected 12 linears with --hfuse=off, found $(linears "$off")"
for l in 0 1; do
  grep -qE "^%[0-9]+ +linear .*f32\[B,T,108\] .*encoder\.layer\.$l\.attention\.self\.query\|key\|value \(lines 51, 52, 53\)" \
    <<< "$on" || fail "bert: layer $l's fused q|k|v GEMM (N 108) with the Lua lines of the three"
  grep -qE "^%[0-9]+ +split .*encoder\.layer\.$l\.attention\.self\.query\|key\|value" <<< "$on" \
    || fail "bert: layer $l's split"
done
# shellcheck disable=SC2086
on=$("$nnc" models/llama.lua $llama_odd --emit=ir)
# shellcheck disable=SC2086
off=$("$nnc" models/llama.lua $llama_odd --emit=ir --hfuse=off)
# per layer q|k|v, o, gate, up, down, and the head: gate and up stay apart (silu(gate) * up is up's epilogue)
[ "$(linears "$on")" = 11 ] || fail "llama: expected 11 linears with the pass, found $(linears "$on")"
[ "$(linears "$off")" = 15 ] || fail "llama: expected 15 linears with --hfuse=off, found $(linears "$off")"
grep -qE "^%[0-9]+ +linear .*f32\[B,T,80\] .*model\.layers\.1\.self_attn\.q_proj\|k_proj\|v_proj" <<< "$on" \
  || fail "llama: the fused q|k|v GEMM (N 48+16+16)"
! grep -E "gate_proj\|" <<< "$on" || fail "llama: gate and up fused (their SwiGLU epilogue lost)"

ir=$("$nnc" tests/ops/hfuse.lua --emit=ir)
[ "$(linears "$ir")" = 13 ] || fail "hfuse.lua: expected 13 linears (2 fused groups, 11 apart), found $(linears "$ir")"
grep -qE "^%[0-9]+ +linear .*f32\[B,21\] .*qkv\.a\|b\|c \(lines 8, 9, 10\)" <<< "$ir" || fail "hfuse.lua: qkv.a|b|c"
grep -qE "^%[0-9]+ +concat .*f32\[13,14\] .*io\.d\|e" <<< "$ir" || fail "hfuse.lua: the [in, out] weights joined along N"
for apart in apart.x2 apart.x3 bias.with bias.without tied.other out.y out.w mlp.gate mlp.up; do
  grep -qE "^%[0-9]+ +linear .* $apart +tests/ops" <<< "$ir" || fail "hfuse.lua: $apart fused, expected apart"
done

# the options the pass must not run under
# shellcheck disable=SC2086
for opt in "--train" "--parallel=tp:2" "--quantize=int8w"; do
  ir=$("$nnc" models/llama.lua $llama_odd $opt --emit=ir)
  ! grep -q "q_proj|k_proj|v_proj" <<< "$ir" || fail "llama $opt: fused"
  grep -q "self_attn.v_proj " <<< "$ir" || fail "llama $opt: no v_proj linear"
done
set +e
err=$("$nnc" models/bert.lua --hfuse=maybe --emit=ir 2>&1)
rc=$?
set -e
[ "$rc" = 1 ] && grep -qF -- '--hfuse: expected on or off, found "maybe"' <<< "$err" || fail "--hfuse=maybe: exit $rc ($err)"

# 2. folders, checked against the model as written
check() {   # name target model dims defines...
  local name=$1 target=$2 model=$3 dims=$4
  shift 4
  local dir="$work/$name" base
  base=$(basename "$model" .lua)
  "$nnc" "$model" --target="$target" "$@" -o "$dir" --explain > "$dir.explain"
  grep -q "^hfuse: " "$dir.explain" || fail "$name: no fused GEMM in --explain"
  make -s -C "$dir" -j2 "bench_$base" > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; fail "$name: build"; }
  # shellcheck disable=SC2086
  out=$("$dir/bench_$base" --check --runs 1 --warmup 0 --no-peaks $dims 2>&1) || { echo "$out"; fail "$name: --check"; }
  grep "max relative error" <<< "$out" | sed "s/^/$name: /"
}
targets=(c-simd)
# opencl-cpu where the build found OpenCL (PoCL in CI)
[ "$opencl" = opencl ] && targets+=(opencl-cpu)
for t in "${targets[@]}"; do
  # shellcheck disable=SC2086
  check "bert_$t" "$t" models/bert.lua "-d B=3 -d T=7" $bert_odd
  # shellcheck disable=SC2086
  check "llama_$t" "$t" models/llama.lua "-d B=3 -d T=17" $llama_odd
  check "ops_$t" "$t" tests/ops/hfuse.lua ""
done

# LLaMA under --generate: q, k, v fused, the kv caches appended from the split's pieces
gen="$work/llama_gen"
# shellcheck disable=SC2086
"$nnc" models/llama.lua $llama_odd --generate -o "$gen" --explain > "$gen.explain"
[ "$(grep -c '^hfuse: ' "$gen.explain")" = 2 ] || fail "llama --generate: expected 2 fused GEMMs"
make -s -C "$gen" -j2 > "$gen.make.log" 2>&1 || { cat "$gen.make.log"; fail "llama --generate: build"; }
(cd "$gen" && ./generate_llama --check --prompt '3,1,4,1,5;9,2' --steps 7) > "$gen.log" 2>&1 \
  || { cat "$gen.log"; fail "llama --generate: --check"; }
grep "^check:" "$gen.log"

# 3. set_weight after a run
dir="$work/ops_c-simd"
"$nnc" weights tests/ops/hfuse.lua -o "$work/hfuse.safetensors"
cc -std=c11 -Wall -Wextra -Werror -I"$dir" tests/ops/hfuse_set_weight.c "$dir/libhfuse.a" -o "$work/set_weight" \
  -lm -lpthread || fail "hfuse_set_weight: build"
"$work/set_weight" "$work/hfuse.safetensors" || fail "set_weight after a run"
grep -q "nothing to copy" "$dir/hfuse.c" && fail "hfuse.lua: odd sizes joined in place, expected copies"

# 4. joined in place
bert64="-D layers=2 -D hidden=64 -D heads=4 -D intermediate=50 -D vocab=31 -D positions=9 -D seq=7 -D batch=3"
arena() { sed -nE 's/.*"arena_bytes": ([0-9]+).*/\1/p' <<< "$1"; }
for t in "${targets[@]}"; do
  for h in on off; do
    dir="$work/bert64_${t}_$h"
    # shellcheck disable=SC2086
    "$nnc" models/bert.lua $bert64 --target="$t" --hfuse=$h -o "$dir"
    make -s -C "$dir" -j2 bench_bert > "$dir.make.log" 2>&1 || { cat "$dir.make.log"; fail "bert64 $t $h: build"; }
    out=$("$dir/bench_bert" --check --runs 1 --warmup 0 --no-peaks -d B=3 -d T=7 --json 2>&1) \
      || { echo "$out"; fail "bert64 $t --hfuse=$h: --check"; }
    eval "arena_$h=$(arena "$out")"
  done
  src=$(ls "$work/bert64_${t}_on"/bert.c)
  [ "$(grep -c "nothing to copy" "$src")" = 4 ] || fail "bert64 $t: expected 4 joined views (2 layers x weight, bias)"
  # shellcheck disable=SC2154  # set by eval above
  [ "$arena_on" -le "$arena_off" ] || fail "bert64 $t: arena $arena_on bytes with the joined weights, $arena_off without"
  echo "bert64 $t: joined in place, arena $arena_on bytes (--hfuse=off $arena_off)"
done
echo "ok"
