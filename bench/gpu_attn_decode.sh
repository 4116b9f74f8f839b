#!/usr/bin/env bash
# bench/gpu_attn_decode.sh: the decode attention (templates/cuda/
# attention_decode.cuh, issue 16) checked and timed on a GPU machine in one
# call, against a baseline of the templates at BASE_REF.
#
#   BASE_REF=<commit> bash bench/gpu_attn_decode.sh generate   # here: the folders, into $CARRY
#   bash bench/gpu_attn_decode.sh run                          # there, with $CARRY carried
#
# generate (here, after `NNC=... bash bench/gpu_generate.sh generate` and
# `... bench/gpu_llama.sh generate` have made GEN and LLAMA): copies
# gpu_generate.sh's folders and gpu_llama.sh's --generate ones into $CARRY,
# with SRC's decode template (SRC: this tree, or a copy of it holding only
# the change, when others' unfinished edits share the tree), and beside
# gpt2_full_bf16 and llama_full_gen_bf16 a _head copy holding BASE_REF's
# (the decode step before and after, built by the same nnc);
# $CARRY/tpl_head holds BASE_REF's templates/cuda for the kernel's own
# baseline, $CARRY/src SRC's templates, GPU tests and the kernel's bench.
# run (there): builds tests/gpu/test_attention.cu (sm_90a with the cluster
# split, and sm_90), bench/gpu_attn_decode.cu (this tree, and BASE_REF's
# templates with -DGAD_LAUNCHER_ONLY) and every folder at once; runs
# test_attention (float64 reference, all dtypes), compute-sanitizer memcheck
# (--small) and racecheck (three decode cases: split, 8 warps, rope), the
# kernel's timings at B=64 and B=1 (S=544), generate_llama --check, the
# decode steps of GPT-2 124M and the default LLaMA before and after
# (bench_<model>, CUDA graphs on and off, alternating rounds), then
# `BATCHES="1 64" MODES=eager bash bench/gpu_generate.sh run` (its checks,
# memchecks and the torch eager peer). A short table last, also in
# $OUT/summary.txt; logs in $OUT (at most 8 files).
# Environment: CARRY (build/h-dattn-carry), BASE_REF (generate), GEN, LLAMA,
# ROUNDS (2).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C=${CARRY:-$ROOT/build/h-dattn-carry}
GEN=${GEN:-$ROOT/build/gpu_generate} LLAMA=${LLAMA:-$ROOT/build/gpu_llama}
LLAMA_GEN="llama_gen_f32 llama_gen_bf16 llama_gen_mqa_bf16 llama_full_gen_bf16"
SRC=${SRC:-$ROOT}
ATTN="attention_decode.cuh" # the templates the change touches

generate() {
  local ref=${BASE_REF:?BASE_REF: the commit whose templates are the baseline}
  rm -rf "$C" && mkdir -p "$C/llama" "$C/tpl_head" "$C/src/templates" "$C/src/tests" "$C/src/bench"
  cp -r "$SRC/templates/cuda" "$C/src/templates/" && cp -r "$SRC/tests/gpu" "$C/src/tests/" &&
    cp "$SRC/bench/gpu_attn_decode.cu" "$C/src/bench/" || exit 1
  cp -r "$GEN" "$C/gen" || exit 1
  rm -rf "$C/gen/out"
  for f in $LLAMA_GEN; do cp -r "$LLAMA/$f" "$C/llama/" || exit 1; done
  (cd "$ROOT" && git archive "$ref" templates/cuda | tar -x -C "$C/tpl_head") || exit 1
  # the folders' attention templates: this tree's (the nnc that made them may be older), BASE_REF's in _head
  for d in "$C"/gen/* "$C"/llama/*; do
    case $d in *_base) continue ;; esac # gpu_generate.sh's thread-a-key baseline keeps its edited launcher
    for f in $ATTN; do cp "$SRC/templates/cuda/$f" "$d/kernels/$f"; done
  done
  cp -r "$C/gen/gpt2_full_bf16" "$C/gen/gpt2_full_bf16_head"
  cp -r "$C/llama/llama_full_gen_bf16" "$C/llama/llama_full_gen_bf16_head"
  for d in "$C/gen/gpt2_full_bf16_head" "$C/llama/llama_full_gen_bf16_head"; do
    for f in $ATTN; do cp "$C/tpl_head/templates/cuda/$f" "$d/kernels/$f"; done
  done
  du -sh "$C"
}

# The median of a decode step (bench_<model> in folder $1, batch $2, graphs $3), as "0.1234".
step_ms() {
  local d=$1 b=$2 gr=$3 m
  m=$(basename "$(ls "$d"/bench_* | head -1)")
  (cd "$d" && "./$m" -d B="$b" -d T=1 -d S=544 --runs 100 --warmup 10 --cuda-graphs "$gr" --json --no-peaks 2>/dev/null) |
    python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["median_ms"])' 2>/dev/null || echo "failed"
}

# A step's time limit: its own ($1 seconds), or what is left of the run's BUDGET seconds (the device
# call's limit less the table's few seconds), whichever is less.
lim() {
  local l=$((END - SECONDS))
  if [ "$l" -lt "$1" ]; then echo $((l > 1 ? l : 1)); else echo "$1"; fi
}

# test_attention built as $1 (in $T), run whole within $2 seconds (or what is left): its line in $S.
attn_test() {
  [ -x "$T/$1" ] || { echo "$1: build failed: $(grep -m1 error "$T/b_$1.log")" >> "$S"; return; }
  timeout "$(lim "$2")" "$T/$1" > "$T/$1.log" 2>&1
  local rc=$?
  cat "$T/$1.log" >> "$O/tests.log"
  echo "test_attention $1: rc $rc, $(grep -c '^PASS' "$T/$1.log") PASS, $(grep -c '^FAIL' "$T/$1.log") FAIL" >> "$S"
  grep '^FAIL' "$T/$1.log" | head -5 >> "$S"
}

run() {
  O=${OUT:-$ROOT/build/gpu_attn_decode} S=${OUT:-$ROOT/build/gpu_attn_decode}/summary.txt
  local sm90a="-gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A"
  local flags="-std=c++17 -O3 -Xcompiler -Wall,-Wextra -Werror all-warnings" arch="-gencode arch=compute_90a,code=sm_90a"
  T=$(mktemp -d) END=$((SECONDS + ${BUDGET:-330})) # globals: lim and attn_test read them
  export PATH=/usr/local/cuda/bin:$PATH
  mkdir -p "$O"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$S" 2>&1
  rm -rf "$ROOT/build/gpu_generate" && cp -r "$C/gen" "$ROOT/build/gpu_generate"
  local G=$ROOT/build/gpu_generate
  echo "== build" >&2
  cd "$C/src" || exit 1
  {
    nvcc $flags $sm90a -Xptxas -v -Itemplates/cuda -o "$T/ta90a" tests/gpu/test_attention.cu > "$T/b_ta90a.log" 2>&1 &
    nvcc $flags -arch=sm_90 -Itemplates/cuda -o "$T/ta90" tests/gpu/test_attention.cu > "$T/b_ta90.log" 2>&1 &
    nvcc -std=c++17 -O3 $sm90a -Itemplates/cuda -o "$T/gad" bench/gpu_attn_decode.cu > "$T/b_gad.log" 2>&1 &
    nvcc -std=c++17 -O3 $sm90a -DGAD_LAUNCHER_ONLY -I"$C/tpl_head/templates/cuda" -o "$T/gad_head" bench/gpu_attn_decode.cu \
      > "$T/b_gad_head.log" 2>&1 &
    for d in "$G"/* "$C"/llama/*; do
      local fl="-O3"
      case $d in *skinny) fl="-O3 -DNNC_SKINNY_ROWS=64" ;; esac
      make -C "$d" -j4 ARCH="$arch" NVCCFLAGS="$fl" > "$T/make_$(basename "$d").log" 2>&1 &
    done
    wait
  } 2>/dev/null
  cat "$T"/b_*.log > "$O/build.log"
  for d in "$G"/* "$C"/llama/*; do
    ls "$d"/bench_* > /dev/null 2>&1 || echo "build failed: $(basename "$d"): $(grep -m1 -i error "$T/make_$(basename "$d").log")" >> "$S"
  done
  echo "ptxas, decode groups kernels (registers / spills):" >> "$S"
  grep -A3 "Compiling entry function '_Z29nnc_attn_decode_groups_kernel" "$O/build.log" | grep -E "spill|Used" |
    sed -E 's/.*(Used [0-9]+ registers).*/\1/; s/^ +//' | sort | uniq -c | sed 's/^/  /' >> "$S"
  grep -qi "warning" "$T/b_ta90a.log" "$T/b_ta90.log" && echo "test_attention: WARNINGS (see build.log)" >> "$S"
  cd "$ROOT" || exit 1

  echo "== tests" >&2
  : > "$O/tests.log"
  attn_test ta90a 120
  timeout "$(lim 100)" compute-sanitizer --tool memcheck --error-exitcode 3 "$T/ta90a" --small > "$T/mc.log" 2>&1
  echo "memcheck ta90a --small: rc $? $(grep -m1 'ERROR SUMMARY' "$T/mc.log")" >> "$S"
  cat "$T/mc.log" >> "$O/tests.log"
  for c in append_decode_T1_S545_mask rope_gqa_decode_T1_S299_mask append_decode_B28_T1_S77; do
    timeout "$(lim 45)" compute-sanitizer --tool racecheck --error-exitcode 3 "$T/ta90a" --case "$c" > "$T/rc.log" 2>&1
    echo "racecheck ta90a --case $c: rc $? $(grep -m1 'RACECHECK SUMMARY' "$T/rc.log") ($(grep -c '^PASS' "$T/rc.log") PASS)" >> "$S"
    cat "$T/rc.log" >> "$O/tests.log"
  done

  echo "== kernel timings" >&2
  : > "$O/bench.log"
  for b in 64 1; do
    for x in gad gad_head; do
      echo "### $x $b 544" >> "$O/bench.log"
      timeout "$(lim 40)" "$T/$x" "$b" 544 >> "$O/bench.log" 2>&1 || echo "$x $b: rc $?" >> "$S"
    done
  done

  echo "== decode steps before / after" >&2
  local r b gr
  : > "$T/steps.txt"
  for r in $(seq "${ROUNDS:-1}"); do
    for b in 64 1; do
      for gr in on off; do
        echo "round $r gpt2 B=$b S=544 graphs $gr: after $(step_ms "$G/gpt2_full_bf16" $b $gr) ms, before $(step_ms "$G/gpt2_full_bf16_head" $b $gr) ms" >> "$T/steps.txt"
      done
      echo "round $r llama B=$b S=544 graphs on: after $(step_ms "$C/llama/llama_full_gen_bf16" $b on) ms, before $(step_ms "$C/llama/llama_full_gen_bf16_head" $b on) ms" >> "$T/steps.txt"
    done
  done
  # where the B=64 step goes, per kernel kind (graphs off: each kernel timed by events)
  for x in "" _head; do
    (cd "$G/gpt2_full_bf16$x" && ./bench_gpt2 -d B=64 -d T=1 -d S=544 --runs 20 --warmup 5 --cuda-graphs off --json \
       2>/dev/null | python3 "$ROOT/bench/kernel_breakdown.py" --top 4 > "$T/kern$x.txt" 2>&1)
  done
  { echo "### after"; cat "$T/kern.txt"; echo "### before"; cat "$T/kern_head.txt"; } > "$O/kernels_b64.txt"

  echo "== sm_90 tests, llama checks" >&2
  attn_test ta90 60
  for c in llama_gen_f32 llama_gen_bf16 llama_gen_mqa_bf16; do
    (cd "$C/llama/$c" && timeout "$(lim 30)" ./generate_llama --check --prompt '3,1,4,1,5;9,2' --steps 7 > "$T/gl.log" 2>&1)
    echo "$c generate --check: rc $? $(grep -m1 '^check' "$T/gl.log")" >> "$S"
  done

  echo "== gpu_generate.sh run" >&2
  (unset OUT; BATCHES="1 64" MODES=eager timeout "$(lim 600)" bash bench/gpu_generate.sh run > "$T/gen.log" 2>&1)
  echo "gpu_generate.sh run: rc $? (124: stopped at the time budget)" >> "$S"
  tar -czf "$O/gen_out.tgz" -C "$G" out 2>/dev/null
  cp "$T/gen.log" "$O/gen.log"

  {
    echo "--- gpu_generate.sh table"
    grep -E "check|memcheck|decode step|floor|graphs|torch|prefill" "$G/out/table.txt" 2>/dev/null
    echo "--- kernel alone (bench/gpu_attn_decode.cu; gad: this tree, gad_head: BASE_REF's templates)"
    grep -E "^###|^\| |^PASS|^FAIL|copy [0-9]+ GB" "$O/bench.log"
    echo "--- decode steps (median ms of 100, bench_<model>)"
    cat "$T/steps.txt"
    echo "--- attention kernels in the GPT-2 B=64 step (graphs off; after, then before)"
    grep -m2 -i "attention" "$T/kern.txt"
    grep -m2 -i "attention" "$T/kern_head.txt"
  } >> "$S"
  cat "$S"
}

case ${1:-} in
  generate) generate ;;
  run) run ;;
  *) echo "usage: $0 generate|run" >&2; exit 2 ;;
esac
