#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA target on a GPU machine, in one command.
#
# Here (with Lua and nnc):   bash bench/gpu_check.sh generate
#   compiles every model of models/ for cuda-sm90 at f32, tf32 (GPT-2) and
#   bf16 into build/gpu/<model>_<precision>/ (sources only: they build with
#   nvcc alone).
# On the GPU machine:        bash bench/gpu_check.sh run   (and `tune`: --tune=measure)
#   builds each folder with make, checks it against the float64 reference at
#   odd sizes (B=3, T=17) with NaN-poisoned outputs, runs compute-sanitizer
#   memcheck on one model, times every model at the issue's sizes with the
#   generated harness, runs the same models in PyTorch eager and torch.compile
#   (bench/gpu_peers.py, same shapes, random weights of the same manifest),
#   and prints one table; everything is also written to $OUT (or build/gpu/out)
#   and the table to bench/gpu_results.md.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu
ARCH=${ARCH:-sm_90}
# the cases PyTorch runs too (torch.compile takes a minute a model)
PEERS=${PEERS:-"gpt2_bf16 gpt2_tf32 bert_bf16 mlp_bf16"}
# model precision B T (the issue's speed sizes)
CASES=${CASES:-"mlp f32 256 0
mlp bf16 256 0
gpt2 f32 8 1024
gpt2 tf32 8 1024
gpt2 bf16 8 1024
bert f32 32 128
bert bf16 32 128"}

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  # the copy for the GPU machine: no libclang there (meson setup build/devnnc -Dclang=disabled -Dtests=false)
  local dev_nnc=${DEV_NNC:-$ROOT/build/devnnc/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r m p _ _; do
    "$nnc" "$ROOT/models/$m.lua" --target=cuda-${ARCH/_/} --precision="$p" -o "$G/${m}_$p" || exit 1
  done <<< "$CASES"
  # GPT-2 bf16 with options.cuda_graphs on by default, for tests/gpu/graphs_check.sh
  "$nnc" "$ROOT/models/gpt2.lua" --target=cuda-${ARCH/_/} --precision=bf16 --cuda-graphs -o "$G/gpt2_bf16_graphs" || exit 1
  # the op families of tests/ops, for the GPU suite's checks (tests/gpu)
  mkdir -p "$G/ops"
  for f in "$ROOT"/tests/ops/*.lua; do
    for p in f32 bf16; do
      "$nnc" "$f" --target=cuda-${ARCH/_/} --precision="$p" -o "$G/ops/$(basename "$f" .lua)_$p" || exit 1
    done
  done
  # nnc itself for `tune` (the GPU machine has no Lua)
  mkdir -p "$G/bin" && cp "$dev_nnc" "$G/bin/nnc" && cp "$(ldd "$dev_nnc" | awk '/liblua/ {print $3}')" "$G/bin/"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

run() {
  # logs go to build/gpu/out; $OUT (the device tool's folder) gets only the
  # table, the checks, GPT-2's kernel table and one tarball of every log
  local out=$G/out
  rm -rf "$out" && mkdir -p "$out"
  local sm=${ARCH#sm_}
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
  # build every folder of the cases in parallel
  for n in $(echo "$CASES" | awk '{print $1 "_" $2}'); do
    d=$G/$n
    (make -C "$d" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$n.log" 2>&1 \
       || echo "BUILD FAILED: $n (see make_$n.log)") &
  done
  wait
  {
    echo "## checks against the float64 reference (B=3, T=17, outputs poisoned)"
    while read -r m p _ _; do
      b="$G/${m}_$p/bench_$m"
      [ -x "$b" ] || { echo "$m $p: not built"; continue; }
      dims="-d B=3"; [ "$m" = mlp ] || dims="-d B=3 -d T=17"
      "$b" --check $dims --runs 2 --warmup 1 > "$out/check_${m}_$p.log" 2>&1
      echo "$m $p: rc=$? $(grep -h 'max relative error' "$out/check_${m}_$p.log" | tr -s ' ' | tr '\n' ';')"
    done <<< "$CASES"
    [ -n "${MEMCHECK-1}" ] || exit 0
    echo "## compute-sanitizer memcheck, gpt2 bf16 at B=3 T=17"
    compute-sanitizer --tool memcheck --error-exitcode 9 "$G/gpt2_bf16/bench_gpt2" --check -d B=3 -d T=17 \
      --runs 1 --warmup 0 > "$out/memcheck_gpt2.log" 2>&1
    echo "memcheck rc=$? $(grep -h 'ERROR SUMMARY' "$out/memcheck_gpt2.log")"
  } | tee "$out/checks.txt"
  # where GPT-2's time goes: the harness's per-kernel table
  "$G/gpt2_bf16/bench_gpt2" -d B=8 -d T=1024 --runs 10 > "$out/kernels_gpt2_bf16.txt" 2>&1
  # CUDA graphs: the same binary with each run replayed from a graph, or kernel by kernel
  for c in "gpt2 8 1024" "bert 32 128" "bert 1 16"; do
    set -- $c
    for g in off on; do
      "$G/$1_bf16/bench_$1" --json --runs 30 --warmup 5 -d B=$2 -d T=$3 --cuda-graphs $g > "$out/graphs_$1_$2_$g.json" 2> "$out/graphs_$1_$2_$g.err"
    done
    echo "$1 bf16 B=$2 T=$3 median ms: CUDA graphs off $(grep -o '"median_ms": [^,]*' "$out/graphs_$1_$2_off.json" | cut -d' ' -f2), on $(grep -o '"median_ms": [^,]*' "$out/graphs_$1_$2_on.json" | cut -d' ' -f2)" | tee -a "$out/checks.txt"
  done
  # timings: ours, then the peers with random weights of the same manifest
  while read -r m p B T; do
    b="$G/${m}_$p/bench_$m"
    dims="-d B=$B"; [ "$T" = 0 ] || dims="$dims -d T=$T"
    [ -x "$b" ] && "$b" --json --runs 30 --warmup 5 $dims > "$out/time_${m}_$p.json" 2> "$out/time_${m}_$p.err"
    case " $PEERS " in *" ${m}_$p "*) ;; *) continue ;; esac
    python3 - "$G/${m}_$p/weights_manifest.json" "$out/w_$m.safetensors" <<'EOF'
import json, sys, torch
from safetensors.torch import save_file
man = json.load(open(sys.argv[1]))
g = torch.Generator().manual_seed(0)
ts = {}
for t in man["tensors"]:
    ts[t["name"]] = (torch.randn(t["shape"], generator=g) * 0.02).float()
save_file(ts, sys.argv[2])
EOF
    pd="B=$B"; [ "$T" = 0 ] || pd="$pd,T=$T"
    python3 "$ROOT/bench/gpu_peers.py" model --model "$m" --weights "$out/w_$m.safetensors" --precision "$p" \
      --dims "$pd" --runs 30 > "$out/peer_${m}_$p.json" 2> "$out/peer_${m}_$p.err"
    rm -f "$out/w_$m.safetensors"
  done <<< "$CASES"
  python3 - "$out" <<'EOF' | tee "$out/table.md"
import json, os, sys
out = sys.argv[1]
def load(p):
    try:
        txt = open(p).read().strip().splitlines()
        return json.loads(txt[-1]) if txt else None
    except Exception:
        return None
print("| model | precision | dims | nnc ms | eager ms | compile ms | nnc tok/s | eager/nnc | compile/nnc |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for f in sorted(os.listdir(out)):
    if not f.startswith("time_") or not f.endswith(".json"):
        continue
    key = f[5:-5]
    ours, peer = load(os.path.join(out, f)), load(os.path.join(out, "peer_" + key + ".json"))
    m, p = key.split("_")
    if not ours:
        print(f"| {m} | {p} | | failed | | | | | |")
        continue
    ms = ours.get("median_ms")
    dims = ",".join(f"{k}={v}" for k, v in (ours.get("dims") or {}).items())
    e = peer.get("eager_ms") if peer else None
    c = peer.get("compile_ms") if peer else None
    tps = ours.get("tokens_per_s") or ours.get("items_per_s")
    tps = f"{tps:.4g}" if tps else None
    fmt = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else "-"
    ratio = lambda v: f"{v / ms:.2f}" if isinstance(v, (int, float)) and ms else "-"
    print(f"| {m} | {p} | {dims} | {fmt(ms)} | {fmt(e)} | {fmt(c)} | {tps if tps else '-'} | {ratio(e)} | {ratio(c)} |")
EOF
  cp "$out/table.md" "$ROOT/bench/gpu_results.md" 2>/dev/null || true
  # one file to carry back: every log
  tar czf "$out/logs.tgz" -C "$out" --exclude logs.tgz . 2>/dev/null || true
  [ -z "${OUT:-}" ] || cp "$out/table.md" "$out/checks.txt" "$out/kernels_gpt2_bf16.txt" "$out/logs.tgz" "$OUT/"
}

# nnc --tune=measure on the GPU machine, which has no Lua: `generate` copies
# nnc and its liblua there (build/gpu/bin); this compiles GPT-2 and BERT bf16
# with measured implementations, checks and times them against the analytic
# folders of `run`, and prints the choices.
tune() {
  local out=$G/out_tune bin=$G/bin
  rm -rf "$out" && mkdir -p "$out"
  export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for m in ${TUNE_MODELS:-gpt2 bert}; do
    local d=$G/${m}_bf16_tuned
    ( time "$bin/nnc" "$ROOT/models/$m.lua" --target=cuda-${ARCH/_/} --precision=bf16 --tune=measure \
        --tune-file="$out/tuning.tsv" --explain -o "$d" ) > "$out/tune_$m.log" 2>&1 || { echo "$m: tune FAILED"; tail -5 "$out/tune_$m.log"; continue; }
    grep -h "measured on" "$out/tune_$m.log" | sed 's/.*measured on/measured on/' | sort | uniq -c | sort -rn | head -8
    grep -h "^real" "$out/tune_$m.log" | sed "s/^/$m compile with --tune=measure: /"
    make -C "$d" -j16 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" > "$out/make_$m.log" 2>&1 || { echo "$m: build FAILED"; continue; }
    dims="-d B=3 -d T=17"
    "$d/bench_$m" --check $dims --runs 2 --warmup 1 2>&1 | grep "max relative error" | sed "s/^/$m tuned check: /"
    local B=8 T=1024; [ "$m" = bert ] && B=32 T=128
    for v in "$G/${m}_bf16" "$d"; do
      [ -x "$v/bench_$m" ] || make -C "$v" -j16 ARCH="-gencode arch=compute_${ARCH#sm_},code=$ARCH" > /dev/null 2>&1
      echo "$(basename "$v") B=$B T=$T: $("$v/bench_$m" --json --runs 30 --warmup 5 -d B=$B -d T=$T | python3 -c 'import json,sys; print("%.3f ms" % json.loads(sys.stdin.read().strip().splitlines()[-1])["median_ms"])')"
    done
  done
  [ -z "${OUT:-}" ] || cp "$out"/*.log "$out/tuning.tsv" "$OUT/" 2>/dev/null
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  tune) tune ;;
  *) echo "usage: bench/gpu_check.sh generate|run|tune" >&2; exit 2 ;;
esac
