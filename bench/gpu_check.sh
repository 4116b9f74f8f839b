#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA target on a GPU machine, in one command.
#
# Here (with Lua and nnc):   bash bench/gpu_check.sh generate
#   compiles every model of models/ for cuda-sm90a (ARCH) at f32, tf32 (GPT-2) and
#   bf16 into build/gpu/<model>_<precision>/ (sources only: they build with
#   nvcc alone).
# On the GPU machine:        bash bench/gpu_check.sh run   (and `tune`: --tune=measure)
#   builds each folder with make, checks it against the float64 reference at
#   odd sizes (B=3, T=17) with NaN-poisoned outputs, runs compute-sanitizer
#   memcheck on one model (RACECHECK=1: racecheck on three), times every
#   case (model, precision, sizes: CASES) with the generated harness, kernel by
#   kernel and replayed from CUDA graphs (--cuda-graphs off, on), runs the
#   same models in PyTorch eager and torch.compile's default, reduce-overhead
#   and max-autotune modes (bench/gpu_peers.py, same shapes, random weights
#   of the same manifest), and prints one table with nnc's ratio against the
#   fastest mode; everything is also written to $OUT (or build/gpu/out) and
#   the table to bench/gpu_results.md.
#   Parts of it, so the work fits in device calls of 600 s: STEPS (default
#   "build checks time peers table"; build also empties build/gpu/out, the
#   other steps add to it), CASES, PEERS (the cases whose peers run: "all",
#   or keys <model>_<precision> or <model>_<precision>_<B>_<T>, T 0 for the
#   MLP), PEER_MODES (default default,reduce-overhead,max-autotune) and
#   DEADLINE (seconds after run starts: no peer starts later, and one still
#   running then is stopped; the modes it finished are kept and the others
#   show as not finished). E.g. STEPS="build checks time" MEMCHECK= first,
#   then STEPS=peers PEERS="gpt2_bf16 bert_bf16" DEADLINE=560, then
#   STEPS="peers table" with the rest, in calls that keep build/gpu.
# Anywhere:                  bash bench/gpu_check.sh table [DIR]
#   prints the table of run's files in DIR (default build/gpu/out), e.g. of
#   logs.tgz unpacked here.
# NVIDIA's OpenCL against the CUDA target: opencl-generate here (generate runs
#   it too), opencl-run there; see opencl_run below.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu
ARCH=${ARCH:-sm_90a}   # the H100: cuda-sm90a (wgmma attention and GEMM)
# the cases PyTorch runs too: all, or keys <model>_<precision>[_<B>_<T>]
# (torch.compile takes a minute or more a model and mode)
PEERS=${PEERS:-all}
PEER_MODES=${PEER_MODES:-default,reduce-overhead,max-autotune}
PEER_DEVICE=${PEER_DEVICE:-cuda}   # cpu: try the peers step without a GPU
STEPS=${STEPS:-"build checks time peers table"}
# model precision B T (T 0: the MLP has none): the issue's speed sizes and
# the small-batch latency cases (issue 17)
CASES=${CASES:-"mlp f32 256 0
mlp bf16 256 0
gpt2 f32 8 1024
gpt2 tf32 8 1024
gpt2 bf16 8 1024
gpt2 bf16 1 16
gpt2 bf16 1 128
bert f32 32 128
bert bf16 32 128
bert bf16 1 16
bert bf16 1 128"}

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  # the copy for the GPU machine: no libclang there (meson setup build/devnnc -Dclang=disabled -Dtests=false)
  local dev_nnc=${DEV_NNC:-$ROOT/build/devnnc/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  # one folder a model and precision (the sizes are the harness's -d)
  while read -r m p; do
    "$nnc" "$ROOT/models/$m.lua" --target=cuda-${ARCH/_/} --precision="$p" -o "$G/${m}_$p" || exit 1
  done < <(awk 'NF {print $1, $2}' <<< "$CASES" | sort -u)
  # GPT-2 and BERT bf16 with their outputs left bf16 (--outputs=storage), as the
  # bf16 PyTorch peer returns them: run builds, checks and times them as <m>_bf16_out
  for m in gpt2 bert; do
    "$nnc" "$ROOT/models/$m.lua" --target=cuda-${ARCH/_/} --precision=bf16 --outputs=storage -o "$G/${m}_bf16_out" || exit 1
  done
  # GPT-2 bf16 with options.cuda_graphs on by default, for tests/gpu/graphs_check.sh
  "$nnc" "$ROOT/models/gpt2.lua" --target=cuda-${ARCH/_/} --precision=bf16 --cuda-graphs -o "$G/gpt2_bf16_graphs" || exit 1
  # the quantized folders (issue 17 part 4), for the GPU suite's checks: weight-only int8 and int4, W8A8
  for mq in gpt2:int8w gpt2:int4w bert:w8a8; do
    "$nnc" "$ROOT/models/${mq%%:*}.lua" --target=cuda-${ARCH/_/} --precision=bf16 --quantize=${mq#*:} \
      -o "$G/${mq%%:*}_bf16_${mq#*:}" || exit 1
  done
  # the op families of tests/ops, for the GPU suite's checks (tests/gpu)
  mkdir -p "$G/ops"
  for f in "$ROOT"/tests/ops/*.lua; do
    for p in f32 bf16; do
      "$nnc" "$f" --target=cuda-${ARCH/_/} --precision="$p" -o "$G/ops/$(basename "$f" .lua)_$p" || exit 1
    done
  done
  # f16 for the GPUs before Ampere (cuda-sm70, cuda-sm75): the GPU suite builds
  # them for the GPU at hand (its ARCH) and checks them
  mkdir -p "$G/f16"
  for mt in gpt2:sm70 bert:sm70 mlp:sm75; do
    "$nnc" "$ROOT/models/${mt%%:*}.lua" --target=cuda-${mt#*:} --precision=f16 -o "$G/f16/${mt%%:*}_${mt#*:}" || exit 1
  done
  # nnc itself for `tune` (the GPU machine has no Lua)
  mkdir -p "$G/bin" && cp "$dev_nnc" "$G/bin/nnc" && cp "$(ldd "$dev_nnc" | awk '/liblua/ {print $3}')" "$G/bin/"
  # the OpenCL folders of opencl-run (a failure there does not stop this)
  opencl_generate || echo "generate: opencl-generate failed (the CUDA folders are complete)"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

has_step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

# Whether the case (model precision B T) is one of PEERS.
peer_wanted() {
  [ "$PEERS" = all ] && return 0
  case " $PEERS " in *" $1_$2 "*|*" $1_$2_$3_$4 "*) return 0 ;; esac
  return 1
}

run() {
  # logs go to build/gpu/out; $OUT (the device tool's folder) gets only the
  # table, the checks, GPT-2's kernel table and one tarball of every log
  local out=$G/out start=$SECONDS
  has_step build && rm -rf "$out"
  mkdir -p "$out"
  local sm=${ARCH#sm_}
  # the cases and generate's bf16-output folders (precision "bf16_out": folder <m>_bf16_out)
  local cases="$CASES"$'\n'"gpt2 bf16_out 8 1024"$'\n'"bert bf16_out 32 128"
  local folders
  folders=$(awk 'NF {print $1 "_" $2}' <<< "$cases" | sort -u)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
  python3 -c 'import torch; print(torch.__version__)' > "$out/torch.txt" 2>&1
  if has_step build; then
    # build every folder of the cases in parallel
    for n in $folders; do
      (make -C "$G/$n" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_$n.log" 2>&1 \
         || echo "BUILD FAILED: $n (see make_$n.log)") &
    done
    wait
    echo "build: $((SECONDS - start)) s"
  fi
  has_step checks && {
    echo "## checks against the float64 reference (B=3, T=17, outputs poisoned)"
    for n in $folders; do
      m=${n%%_*} p=${n#*_}
      b="$G/$n/bench_$m"
      [ -x "$b" ] || { echo "$m $p: not built"; continue; }
      dims="-d B=3"; [ "$m" = mlp ] || dims="-d B=3 -d T=17"
      "$b" --check $dims --runs 2 --warmup 1 > "$out/check_$n.log" 2>&1
      echo "$m $p: rc=$? $(grep -h 'max relative error' "$out/check_$n.log" | tr -s ' ' | tr '\n' ';')"
    done
    [ -n "${MEMCHECK-1}" ] || exit 0
    echo "## compute-sanitizer memcheck, gpt2 bf16 at B=3 T=17"
    compute-sanitizer --tool memcheck --error-exitcode 9 "$G/gpt2_bf16/bench_gpt2" --check -d B=3 -d T=17 \
      --runs 1 --warmup 0 > "$out/memcheck_gpt2.log" 2>&1
    echo "memcheck rc=$? $(grep -h 'ERROR SUMMARY' "$out/memcheck_gpt2.log")"
    [ -n "${RACECHECK:-}" ] || exit 0
    # racecheck of whole models: which kernels does the sanitizer fail on?
    # mlp has only cuBLASLt GEMMs and elementwise kernels, bert adds row
    # kernels and attention; gpt2 again with cuBLASLt's kernels excluded
    echo "## compute-sanitizer racecheck (B=3, T=17)"
    for c in "mlp_bf16 mlp" "bert_bf16 bert" "gpt2_bf16 gpt2" "gpt2_bf16 gpt2 nvjet"; do
      set -- $c
      local ex=() dims="-d B=3 -d T=17" tag=$1${3:+_no_$3}
      [ "$2" = mlp ] && dims="-d B=3"
      [ -n "${3:-}" ] && ex=(--kernel-name-exclude "kns=$3")
      timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 "${ex[@]}" "$G/$1/bench_$2" --check $dims \
        --runs 1 --warmup 0 > "$out/racecheck_$tag.log" 2>&1
      echo "racecheck $tag rc=$? $(grep -h -E 'RACECHECK SUMMARY|Internal Sanitizer Error|max relative error' "$out/racecheck_$tag.log" | head -3 | tr '\n' ' ')"
    done
  } | tee -a "$out/checks.txt"
  if has_step time; then
    # where GPT-2's time goes: the harness's per-kernel table
    "$G/gpt2_bf16/bench_gpt2" -d B=8 -d T=1024 --runs 10 > "$out/kernels_gpt2_bf16.txt" 2>&1
    # ours: every case kernel by kernel and replayed from a CUDA graph
    while read -r m p B T; do
      [ -n "$m" ] || continue
      b="$G/${m}_$p/bench_$m" key=${m}_${p}_${B}_$T
      dims="-d B=$B"; [ "$T" = 0 ] || dims="$dims -d T=$T"
      [ -x "$b" ] || { echo "time $key: not built"; continue; }
      for g in off on; do
        "$b" --json --runs 30 --warmup 5 $dims --cuda-graphs $g < /dev/null > "$out/time_${key}_$g.json" 2> "$out/time_${key}_$g.err"
      done
      echo "time $key: graphs off $(ms_of "$out/time_${key}_off.json") ms, on $(ms_of "$out/time_${key}_on.json") ms"
    done <<< "$cases" | tee -a "$out/checks.txt"
  fi
  if has_step peers; then
    # the peers, with random weights of the same manifest, one case at a time
    # (bf16_out cases are compared with the bf16 peer of their sizes)
    while read -r m p B T; do
      [ -n "$m" ] && [ "$p" != bf16_out ] && peer_wanted "$m" "$p" "$B" "$T" || continue
      local key=${m}_${p}_${B}_$T limit=""
      if [ -n "${DEADLINE:-}" ] && [ $((DEADLINE - (SECONDS - start))) -lt 30 ]; then
        echo "peer $key: not started (DEADLINE)"
        continue
      fi
      [ -f "$out/w_$m.safetensors" ] || python3 - "$G/${m}_$p/weights_manifest.json" "$out/w_$m.safetensors" <<'EOF'
import json, sys, torch
from safetensors.torch import save_file
man = json.load(open(sys.argv[1]))
g = torch.Generator().manual_seed(0)
ts = {}
for t in man["tensors"]:
    ts[t["name"]] = (torch.randn(t["shape"], generator=g) * 0.02).float()
save_file(ts, sys.argv[2])
EOF
      local pd="B=$B" t0=$SECONDS
      [ -z "${DEADLINE:-}" ] || limit=$((DEADLINE - (SECONDS - start)))
      [ "$T" = 0 ] || pd="$pd,T=$T"
      ${limit:+timeout -k 10 $limit} python3 "$ROOT/bench/gpu_peers.py" model --model "$m" --weights "$out/w_$m.safetensors" \
        --precision "$p" --dims "$pd" --runs 30 --modes "$PEER_MODES" --device "$PEER_DEVICE" --partial < /dev/null > "$out/peer_$key.json" 2> "$out/peer_$key.err"
      echo "peer $key: rc=$? $((SECONDS - t0)) s: $(tail -1 "$out/peer_$key.json" | python3 -c "$PEER_SUMMARY")"
    done <<< "$cases" | tee -a "$out/checks.txt"
    rm -f "$out"/w_*.safetensors
  fi
  if has_step table; then
    table "$out" | tee "$out/table.md"
    cp "$out/table.md" "$ROOT/bench/gpu_results.md" 2>/dev/null || true
  fi
  # one file to carry back: every log
  tar czf "$out/logs.tgz" -C "$out" --exclude logs.tgz --exclude 'w_*' . 2>/dev/null || true
  [ -z "${OUT:-}" ] || cp "$out/checks.txt" "$out/logs.tgz" "$OUT/" 2>/dev/null
  [ -z "${OUT:-}" ] || cp "$out/table.md" "$out/kernels_gpt2_bf16.txt" "$OUT/" 2>/dev/null
  echo "run: $((SECONDS - start)) s"
}

# The median of a harness --json file, or "-".
ms_of() { grep -o '"median_ms": [^,]*' "$1" 2>/dev/null | tail -1 | cut -d' ' -f2 | grep . || echo -; }

# The table of run's files in $1 (default build/gpu/out): a row a case
# (bf16_out rows against the bf16 peer of their sizes), nnc with CUDA graphs
# off and on, PyTorch eager and each torch.compile mode, the fastest mode,
# and best peer / nnc.
table() {
  python3 - "${1:-$G/out}" "$CASES"$'\n'"gpt2 bf16_out 8 1024"$'\n'"bert bf16_out 32 128" <<'EOF'
import json, os, sys
out, cases = sys.argv[1], [l.split() for l in sys.argv[2].splitlines() if l.strip()]
MODES = ("default", "reduce-overhead", "max-autotune")


def load(p):
    try:
        txt = open(p).read().strip().splitlines()
        return json.loads(txt[-1]) if txt else None
    except Exception:
        return None


def fmt(v):
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


print("| model | precision | dims | nnc ms (graphs off) | nnc ms (graphs on) | eager ms "
      "| compile default ms | reduce-overhead ms | max-autotune ms | best peer ms (mode) "
      "| best / nnc off | best / nnc on |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
info = set()
for m, p, B, T in cases:
    off = load(f"{out}/time_{m}_{p}_{B}_{T}_off.json")
    on = load(f"{out}/time_{m}_{p}_{B}_{T}_on.json")
    peer = load(f"{out}/peer_{m}_{p.replace('_out', '')}_{B}_{T}.json")
    peer_ran = os.path.exists(f"{out}/peer_{m}_{p.replace('_out', '')}_{B}_{T}.json")
    if off is None and on is None and peer is None and not peer_ran:
        continue
    dims = f"B={B}" + (f",T={T}" if T != "0" else "")
    prec = p.replace("bf16_out", "bf16, bf16 outputs")
    a, b = (off or {}).get("median_ms"), (on or {}).get("median_ms")
    cells, best, mode, eager = ["not finished" if peer_ran else "not run"] * 3, None, None, None
    if peer:
        info.add((peer.get("device"), peer.get("torch")))
        eager = peer.get("eager_ms")
        cm, errs = peer.get("compile_ms") or {}, peer.get("compile_errors") or {}
        done = peer.get("modes_done") or []
        for i, md in enumerate(MODES):
            if md not in (peer.get("modes") or MODES):
                continue
            cells[i] = "failed" if md in errs else fmt(cm.get(md)) if md in done else "not finished"
        best, mode = peer.get("best_compile_ms"), peer.get("best_mode")

    def ratio(ours):
        return f"{best / ours:.2f}" if best and ours else "-"
    bp = f"{fmt(best)} ({mode})" if best else "-"
    print(f"| {m} | {prec} | {dims} | {fmt(a)} | {fmt(b)} | {fmt(eager)} | {cells[0]} | {cells[1]} "
          f"| {cells[2]} | {bp} | {ratio(a)} | {ratio(b)} |")
for dev, tv in sorted(info, key=str):
    print(f"\nPeers on {dev}, torch {tv}. Ratios: the fastest torch.compile mode's ms over nnc's "
          "(> 1: nnc is faster); \"not finished\": the mode was stopped by the call's time limit.")
EOF
}

# One line of a peer record (stdin, JSON): eager, each mode (compile seconds), the best.
PEER_SUMMARY='
import json, sys
try:
    r = json.loads(sys.stdin.read())
except Exception:
    sys.exit(print("no result"))
f = lambda v: "%.3f" % v if isinstance(v, (int, float)) else "-"
print("eager", f(r.get("eager_ms")), " ".join("%s %s (%s s)" % (m, f(v), f(r["compile_s"].get(m)))
      for m, v in r["compile_ms"].items()), "best", r.get("best_mode"),
      "" if r.get("complete") else "INCOMPLETE", r.get("compile_errors") or "")'

# nnc --tune=measure on the GPU machine, which has no Lua: `generate` copies
# nnc and its liblua there (build/gpu/bin); this compiles GPT-2 and BERT bf16
# with measured implementations, checks and times them against the analytic
# folders of `run`, and prints the choices, then per GEMM key cuBLASLt's
# first heuristic algorithm against the best of its 2nd-4th (cublaslt-aN).
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
  # cuBLASLt's heuristic order: the first algorithm against the best of the
  # next three, per GEMM key (the split LM head's first call likewise)
  [ -f "$out/tuning.tsv" ] && python3 - "$out/tuning.tsv" <<'EOF' | tee "$out/algos.md"
import sys
times = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if len(f) == 5 and not line.startswith("#"):
        times.setdefault(f[2], {})[f[3]] = f[4]   # the last line wins
print("| GEMM key | way | first algo us | best of algo 1-3 | us | first/best | unavailable | fastest overall |")
print("| --- | --- | ---: | --- | ---: | ---: | --- | --- |")
for key, d in times.items():
    us = {k: float(v) for k, v in d.items() if v != "unavailable"}
    fastest = min(us, key=us.get) if us else "-"
    for way in ("cublaslt", "cublaslt-split"):
        alts = [k for k in d if k.startswith(way + "-a") and k[len(way) + 2:].isdigit()]
        if way not in us or not alts:
            continue
        ok = [k for k in alts if k in us]
        gone = ",".join(k[len(way) + 1:] for k in sorted(alts) if k not in us) or "-"
        best = min(ok, key=us.get) if ok else None
        b = f"{best} | {us[best]:.1f} | {us[way] / us[best]:.3f}" if best else "- | - | -"
        print(f"| {key} | {way} | {us[way]:.1f} | {b} | {gone} | {fastest} |")
EOF
  [ -z "${OUT:-}" ] || cp "$out"/*.log "$out/tuning.tsv" "$out/algos.md" "$OUT/" 2>/dev/null
}

# ------------------------------------------------------------------ OpenCL
# NVIDIA's OpenCL against the CUDA target (issue 5).
#
# Here (with Lua and nnc):   bash bench/gpu_check.sh opencl-generate
#   (also run at the end of `generate`) emits GPT-2 and BERT for --target=opencl
#   in f32 into build/gpu/ocl/{gpt2,bert} and with f16 storage into
#   build/gpu/ocl/{gpt2,bert}_f16, the CUDA target at f32, tf32 and f16 into
#   build/gpu/ocl/cuda/<model>_<precision> (generate has no BERT tf32), a
#   platform lister (cl_list.c) and this machine's CL headers (the GPU machine
#   may have none).
# On the GPU machine:        NNC_OCL_ICD_WRITE=1 bash bench/gpu_check.sh opencl-run
#   (as root) writes /etc/OpenCL/vendors/nvidia.icd (only with NNC_OCL_ICD_WRITE=1),
#   lists the platforms with diagnostics when NVIDIA's is missing (then retries
#   with OCL_ICD_VENDORS and LD_LIBRARY_PATH), builds the folders, checks both
#   models in f32 and f16 on NVIDIA's OpenCL and on PoCL, times them at the
#   issue's sizes (GPT-2 B=1 T=128, BERT B=8 T=128) and GPT-2 B=8 T=1024 on
#   NVIDIA's OpenCL, PoCL (small sizes only) and the CUDA target (f32 rows
#   against CUDA f32 and tf32, f16 rows against CUDA f16), and prints one
#   table (also $OUT/opencl_table.md). A failed step is reported and the next
#   one runs.
OCL=$G/ocl
NV_LIB=${NV_LIB:-/usr/local/nvidia/lib64/libnvidia-opencl.so.1}
# model, storage precision, B, T, and whether PoCL times it too
OCL_CASES=${OCL_CASES:-"gpt2 f32 1 128 pocl
bert f32 8 128 pocl
gpt2 f32 8 1024 -
gpt2 f16 1 128 pocl
bert f16 8 128 pocl
gpt2 f16 8 1024 -"}
# the OpenCL folder of a model at a precision: gpt2, gpt2_f16
ocl_dir() { if [ "$2" = f32 ]; then echo "$OCL/$1"; else echo "$OCL/$1_$2"; fi; }

opencl_generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  [ -n "${NNC:-}" ] || meson compile -C "$ROOT/build/release" compiler/nnc > /dev/null || { echo "opencl-generate: building nnc failed"; return 1; }
  rm -rf "$OCL" && mkdir -p "$OCL/cuda" "$OCL/include"
  local m p rc=0
  for m in gpt2 bert; do
    for p in f32 f16; do
      "$nnc" "$ROOT/models/$m.lua" --target=opencl --precision=$p -o "$(ocl_dir $m $p)" \
        || { echo "opencl-generate: $m for opencl $p FAILED"; rc=1; }
    done
    for p in f32 tf32 f16; do
      "$nnc" "$ROOT/models/$m.lua" --target=cuda-${ARCH/_/} --precision=$p -o "$OCL/cuda/${m}_$p" \
        || { echo "opencl-generate: $m for cuda $p FAILED"; rc=1; }
    done
  done
  cp -r /usr/include/CL "$OCL/include/" || { echo "opencl-generate: no CL headers here"; rc=1; }
  cat > "$OCL/cl_list.c" <<'EOF'
/* Every OpenCL platform and device as "P:D platform | device | type | driver". */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
int main(void) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(16, ps, &np);
  if (e != CL_SUCCESS || np == 0) {
    printf("no OpenCL platform (clGetPlatformIDs: %d, %u platforms)\n", (int)e, np);
    return 1;
  }
  for (cl_uint p = 0; p < np; p++) {
    char pn[256] = "", dn[256] = "", dv[128] = "";
    clGetPlatformInfo(ps[p], CL_PLATFORM_NAME, sizeof pn, pn, NULL);
    cl_device_id ds[16];
    cl_uint nd = 0;
    e = clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 16, ds, &nd);
    if (e != CL_SUCCESS) printf("%u: %s | no devices (clGetDeviceIDs: %d)\n", p, pn, (int)e);
    for (cl_uint d = 0; e == CL_SUCCESS && d < nd; d++) {
      cl_device_type t = 0;
      clGetDeviceInfo(ds[d], CL_DEVICE_NAME, sizeof dn, dn, NULL);
      clGetDeviceInfo(ds[d], CL_DRIVER_VERSION, sizeof dv, dv, NULL);
      clGetDeviceInfo(ds[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
      printf("%u:%u %s | %s | %s | %s\n", p, d, pn, dn, t & CL_DEVICE_TYPE_GPU ? "GPU" : t & CL_DEVICE_TYPE_CPU ? "CPU" : "other", dv);
    }
  }
  return 0;
}
EOF
  echo "opencl-generate: $(cd "$OCL" && ls | tr '\n' ' ')cuda/{$(ls "$OCL/cuda" | tr '\n' ' ')}"
  return $rc
}

# The median of one harness --json run (stdin), or "-".
ocl_median() { grep -o '"median_ms": [0-9.e+-]*' | tail -1 | cut -d' ' -f2 | grep . || echo -; }

# What the loader sees: the ICD files, NVIDIA's library and what it links,
# the loader's own trace of a platform listing, the device nodes.
ocl_diagnose() {
  echo "--- /etc/OpenCL/vendors:"; ls -l /etc/OpenCL/vendors 2>&1
  for f in /etc/OpenCL/vendors/*.icd; do echo "$f: $(cat "$f" 2>&1)"; done
  echo "--- $(dirname "$NV_LIB"):"; ls -l "$(dirname "$NV_LIB")" 2>&1 | head -40
  echo "--- ldd $NV_LIB:"; ldd "$NV_LIB" 2>&1
  echo "--- dlopen $NV_LIB:"; python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('loads')" "$NV_LIB" 2>&1 | tail -1
  echo "--- nvidia-smi:"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  echo "--- libOpenCL (the ICD loader):"; ldconfig -p 2>/dev/null | grep -i opencl
  echo "--- device nodes:"; ls -l /dev/nvidia* 2>&1
  echo "--- platform listing with OCL_ICD_DEBUG=7 (ocl-icd) and OCL_ICD_ENABLE_TRACE=1 (Khronos loader):"
  OCL_ICD_DEBUG=7 OCL_ICD_ENABLE_TRACE=1 "$OCL/cl_list" 2>&1 | tail -60
}

opencl_run() {
  local out=$G/out_ocl
  rm -rf "$out" && mkdir -p "$out" "$out/lib"
  export NNC_OPENCL_CACHE=$out/cache
  local sm=${ARCH#sm_} m p B T pocl d
  {
    # the CUDA folders build while the OpenCL steps run
    for d in "$OCL"/cuda/*/; do
      d=${d%/}
      (make -C "$d" -j8 ARCH="-gencode arch=compute_$sm,code=sm_$sm" > "$out/make_cuda_$(basename "$d").log" 2>&1 \
         || echo "STEP FAILED: building $d (see $out/make_cuda_$(basename "$d").log)") &
    done
    echo "## ICD"
    if [ "${NNC_OCL_ICD_WRITE:-0}" = 1 ]; then
      mkdir -p /etc/OpenCL/vendors && echo "$NV_LIB" > /etc/OpenCL/vendors/nvidia.icd \
        && echo "wrote /etc/OpenCL/vendors/nvidia.icd: $(cat /etc/OpenCL/vendors/nvidia.icd)" \
        || echo "STEP FAILED: writing /etc/OpenCL/vendors/nvidia.icd"
    else
      echo "NNC_OCL_ICD_WRITE is not 1: /etc/OpenCL/vendors left as it is"
    fi
    # link against the loader even where only libOpenCL.so.1 is installed
    local so
    so=$(ldconfig -p 2>/dev/null | awk '/libOpenCL\.so\.1 / {print $NF; exit}')
    [ -n "$so" ] && ln -sf "$so" "$out/lib/libOpenCL.so"
    CL_LIBS="-L$out/lib -lOpenCL -lm -lpthread"
    gcc -O2 -I"$OCL/include" "$OCL/cl_list.c" -o "$OCL/cl_list" $CL_LIBS || echo "STEP FAILED: building cl_list"
    echo "## platforms"
    "$OCL/cl_list" | tee "$out/platforms.txt"
    if ! grep -qi nvidia "$out/platforms.txt"; then
      echo "NVIDIA's platform is missing; diagnostics:"
      ocl_diagnose
      echo "## retry: OCL_ICD_VENDORS=/etc/OpenCL/vendors, LD_LIBRARY_PATH with $(dirname "$NV_LIB")"
      export OCL_ICD_VENDORS=/etc/OpenCL/vendors
      export LD_LIBRARY_PATH=$(dirname "$NV_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      "$OCL/cl_list" | tee "$out/platforms.txt"
      grep -qi nvidia "$out/platforms.txt" || echo "STEP FAILED: no NVIDIA platform after the retry"
    fi
    # NNC_OPENCL_DEVICE takes "P:D" or part of the device name
    NV_DEV=$(awk -F' [|] ' 'tolower($1) ~ /nvidia/ || tolower($2) ~ /nvidia/ {split($1, a, " "); print a[1]; exit}' "$out/platforms.txt")
    POCL_DEV=$(awk -F' [|] ' 'tolower($1) ~ /portable|pocl/ {split($1, a, " "); print a[1]; exit}' "$out/platforms.txt")
    echo "NVIDIA device: ${NV_DEV:-none}; PoCL device: ${POCL_DEV:-none}"
    echo "## build"
    local p dir
    for m in gpt2 bert; do
      for p in f32 f16; do
        dir=$(ocl_dir $m $p)
        make -C "$dir" -j16 CFLAGS="-O2 -I$OCL/include" LDLIBS="$CL_LIBS" > "$out/make_ocl_${m}_$p.log" 2>&1 \
          && echo "$m $p: built" || { echo "STEP FAILED: building $dir"; tail -5 "$out/make_ocl_${m}_$p.log"; }
      done
    done
    echo "## checks (B=3, T=17, against the float64 reference at 1e-5; f16 storage at 1e-2)"
    for m in gpt2 bert; do
      for p in f32 f16; do
        dir=$(ocl_dir $m $p)
        for dev in nvidia pocl; do
          local spec=$NV_DEV; [ $dev = pocl ] && spec=$POCL_DEV
          [ -n "$spec" ] && [ -x "$dir/bench_$m" ] || { echo "$m $p $dev: skipped (no device or no build)"; echo "skipped" > "$out/check_${m}_${p}_$dev.txt"; continue; }
          NNC_OPENCL_DEVICE=$spec timeout 300 "$dir/bench_$m" --check -d B=3 -d T=17 --runs 1 --warmup 0 > "$out/check_${m}_${p}_$dev.log" 2>&1
          local rc=$?
          local r; r=$(grep -h 'max relative error' "$out/check_${m}_${p}_$dev.log" | tr -s ' ' | sed 's/^ //' | tr '\n' ';')
          [ $rc = 0 ] || { r="FAILED rc=$rc $r"; tail -3 "$out/check_${m}_${p}_$dev.log"; }
          echo "${r:-no result}" > "$out/check_${m}_${p}_$dev.txt"
          echo "$m $p $dev: $(cat "$out/check_${m}_${p}_$dev.txt")"
        done
      done
      [ -z "$NV_DEV" ] || NNC_OPENCL_DEVICE=$NV_DEV "$OCL/$m/bench_$m" --runs 1 --warmup 0 -d B=1 -d T=17 2>&1 | grep -i "device\|options\|peak" | head -4
    done
    echo "## timings"
    wait   # the CUDA builds
    while read -r m p B T pocl; do
      local dims="-d B=$B -d T=$T" runs="--runs 10 --warmup 2" k=${m}_${p}_${B}_${T} cprec
      [ "$T" -ge 1024 ] && runs="--runs 5 --warmup 1"
      dir=$(ocl_dir $m $p)
      if [ -n "$NV_DEV" ] && [ -x "$dir/bench_$m" ]; then
        NNC_OPENCL_DEVICE=$NV_DEV timeout 240 "$dir/bench_$m" --json $runs $dims > "$out/time_${k}_nvidia.json" 2> "$out/time_${k}_nvidia.err" \
          || echo "STEP FAILED: $m $p B=$B T=$T on NVIDIA OpenCL ($(tail -1 "$out/time_${k}_nvidia.err"))"
      fi
      if [ "$pocl" = pocl ] && [ -n "$POCL_DEV" ] && [ -x "$dir/bench_$m" ]; then
        NNC_OPENCL_DEVICE=$POCL_DEV timeout 240 "$dir/bench_$m" --json --runs 3 --warmup 1 $dims > "$out/time_${k}_pocl.json" 2> "$out/time_${k}_pocl.err" \
          || echo "STEP FAILED: $m $p B=$B T=$T on PoCL ($(tail -1 "$out/time_${k}_pocl.err"))"
      fi
      # the CUDA target at the same storage (f32 rows: also tf32)
      for cprec in $p $([ "$p" = f32 ] && echo tf32); do
        local b=$OCL/cuda/${m}_$cprec/bench_$m
        [ -x "$b" ] || { echo "STEP FAILED: $b not built"; continue; }
        timeout 240 "$b" --json --runs 20 --warmup 3 $dims > "$out/time_${k}_cuda_$cprec.json" 2> "$out/time_${k}_cuda_$cprec.err" \
          || echo "STEP FAILED: $m B=$B T=$T on CUDA $cprec ($(tail -1 "$out/time_${k}_cuda_$cprec.err"))"
      done
      echo "$m $p B=$B T=$T: timed"
    done <<< "$OCL_CASES"
  } 2>&1 | tee "$out/steps.txt"
  # the table
  {
    echo "| model | storage | size | OpenCL-NVIDIA ms | CUDA ms (same storage) | CUDA tf32 ms | OpenCL / CUDA | PoCL ms | check (NVIDIA; PoCL) |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"
    while read -r m p B T pocl; do
      local k=${m}_${p}_${B}_${T} nv cs ct pc ratio
      nv=$(ocl_median 2>/dev/null < "$out/time_${k}_nvidia.json" || echo -)
      cs=$(ocl_median 2>/dev/null < "$out/time_${k}_cuda_$p.json" || echo -)
      ct=$(ocl_median 2>/dev/null < "$out/time_${k}_cuda_tf32.json" || echo -)
      pc=$(ocl_median 2>/dev/null < "$out/time_${k}_pocl.json" || echo -)
      ratio=$(awk -v a="${nv:--}" -v b="${cs:--}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
      echo "| $m | $p | B=$B T=$T | ${nv:--} | ${cs:--} | ${ct:--} | $ratio | ${pc:--} | $(cat "$out/check_${m}_${p}_nvidia.txt" 2>/dev/null || echo -) / $(cat "$out/check_${m}_${p}_pocl.txt" 2>/dev/null || echo -) |"
    done <<< "$OCL_CASES"
  } > "$out/opencl_table.md"
  echo
  cat "$out/opencl_table.md"
  tar czf "$out/logs.tgz" -C "$out" --exclude logs.tgz --exclude cache --exclude lib . 2>/dev/null || true
  [ -z "${OUT:-}" ] || cp "$out/opencl_table.md" "$out/steps.txt" "$out/logs.tgz" "$OUT/" 2>/dev/null || true
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  table) table "${2:-}" ;;
  tune) tune ;;
  opencl-generate) opencl_generate ;;
  opencl-run) opencl_run ;;
  *) echo "usage: bench/gpu_check.sh generate|run|table [DIR]|tune|opencl-generate|opencl-run" >&2; exit 2 ;;
esac
