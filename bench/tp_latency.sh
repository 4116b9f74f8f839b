#!/usr/bin/env bash
# Tensor-parallel latency (issue 15): GPT-2 XL's shape at B=1, T=128, bf16,
# tp:1 against tp:2 on a machine of 2 GPUs, with the all_reduce's variants
# side by side in one call:
#
#   NNC=build/h-tp/compiler/nnc bash bench/tp_latency.sh generate   # here
#   bash bench/tp_latency.sh run                                    # there (carry .ompi
#                                                                   # and build/tp_latency)
#
# run builds every folder, checks tp:2 (bench --check, f32 and bf16, every
# rank against the float64 reference of the model without the plan), then
# times bench_gpt2 medians (CUDA graphs off and on) of
#   - tp:1 (the model without a plan) and tp:2 as built;
#   - tp:2 with NCCL's variants (VARIANTS below);
# and keeps one per-kernel table of each (graphs off) and, where nsys is
# there, one profile's kernel summary. The table is printed as it grows; the
# logs stay in build/tp_latency/out, copied to $OUT (table.txt, logs.tgz)
# when the device machine sets it.
# Environment: NNC, ARCH (sm_90a), SHAPES ("xl xl24"), GRAPHS ("on off"), RUNS (50), VARIANTS (tp:2 of the
# first shape again with: sym / plain: NNRT_NCCL_SYMMETRIC=1 / 0; LL, LL128,
# Simple: NCCL_PROTO; nomix: NCCL_GRAPH_MIXING_SUPPORT=0; ring1: one LL ring channel),
# PROFILE (0; 1: NCCL's INFO lines, per-kernel tables, an nsys profile where nsys is).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/tp_latency
ARCH=${ARCH:-sm_90a} RUNS=${RUNS:-50} SHAPES=${SHAPES:-xl xl24} VARIANTS=${VARIANTS-sym plain LL LL128 nomix} PROFILE=${PROFILE:-0} GRAPHS=${GRAPHS:-on off}
SMALL="-D layers=2 -D d=48 -D heads=4 -D vocab=101 -D ctx=16 -D batch=4"
XL="-D layers=48 -D d=1600 -D heads=25 -D batch=1 -D ctx=128"
XL24="-D layers=48 -D d=1536 -D heads=24 -D batch=1 -D ctx=128"
# name precision options
CASES="tp2_f32 f32 --parallel=tp:2 $SMALL
tp2_bf16 bf16 --parallel=tp:2 $SMALL
xl_tp1 bf16 $XL
xl_tp2 bf16 --parallel=tp:2 $XL
xl24_tp1 bf16 $XL24
xl24_tp2 bf16 --parallel=tp:2 $XL24"

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  while read -r c p opts; do
    # shellcheck disable=SC2086  # opts: several words
    "$nnc" "$ROOT/models/gpt2.lua" $opts --target=cuda-${ARCH/_/} --precision="$p" -o "$G/$c" ||
      echo "$c: not generated" > "$G/$c.skipped"
  done <<< "$CASES"
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

# The largest "median_ms" of the JSON lines in file $1 (one line a rank).
median() { python3 -c 'import json,sys; print(max(json.loads(l)["median_ms"] for l in open(sys.argv[1]) if l.startswith("{")))' "$1"; }

run() {
  # logs stay in the build folder (a device call brings back few files);
  # the table is printed as it grows, so a run cut short still shows it
  local out=$G/out sm=${ARCH#sm_} status=0
  local t=$out/table.txt
  rm -rf "$out" && mkdir -p "$out"
  # MPI: the machine's, else the Open MPI carried in .ompi (its env.sh sets R and L)
  local mpi_from=machine
  if ! command -v mpirun > /dev/null && [ -f "$ROOT/.ompi/env.sh" ]; then
    pushd "$ROOT" > /dev/null || exit 1
    # shellcheck disable=SC1091
    . .ompi/env.sh
    popd > /dev/null || exit 1
    export MPI_LIBS="-L$L/openmpi/lib -Wl,-rpath,$L/openmpi/lib -lmpi"
    mpi_from=.ompi
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 NNC_COMM_TIMEOUT=${NNC_COMM_TIMEOUT:-60}
  local nccl
  nccl=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  local mk=(ARCH="-gencode arch=compute_$sm,code=sm_$sm")
  if [ -n "$nccl" ]; then
    mk+=(NCCL_HOME="$nccl" NCCL_LIBS="-L$nccl/lib -l:libnccl.so.2")
    export LD_LIBRARY_PATH=$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  {
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "mpirun from $mpi_from; NCCL $(grep -m1 -o 'NCCL_VERSION_CODE [0-9]*' "${nccl:-/usr/local/cuda}/include/nccl.h") from ${nccl:-the toolkit}"
    nvidia-smi topo -m | head -3
  } > "$t" 2>&1
  cat "$t"
  tail -F -n 0 "$t" 2> /dev/null &
  local tail_pid=$!
  local nsys
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  echo "nsys: ${nsys:-none}" >> "$t"
  local start=$SECONDS builds=()
  while read -r c _; do
    [ -d "$G/$c" ] || continue
    make -C "$G/$c" -j4 "${mk[@]}" > "$out/make_$c.log" 2>&1 &
    builds+=($!)
  done <<< "$CASES"
  # the builds only: a bare wait would also wait for the table's tail
  wait "${builds[@]}"
  echo "built in $((SECONDS - start)) s" >> "$t"
  while read -r c _; do
    [ -d "$G/$c" ] || continue
    ls "$G/$c"/bench_gpt2 > /dev/null 2>&1 || { echo "$c: build failed: $(grep -m2 -i error "$out/make_$c.log")" >> "$t"; status=1; }
  done <<< "$CASES"
  # the ranks' environment: mpirun -x NAME=VALUE for each variable of a run
  local mpi=(mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NNC_COMM_TIMEOUT)
  # correctness (the symmetric window on, then off)
  for c in tp2_f32 tp2_bf16; do
    [ -x "$G/$c/bench_gpt2" ] || continue
    for sym in 1 0; do
      timeout 300 "${mpi[@]}" -x NNRT_NCCL_SYMMETRIC=$sym "$G/$c/bench_gpt2" --check --runs 3 > "$out/${c}_s$sym.log" 2>&1 || status=1
      echo "$c check (symmetric $sym): $(grep "max relative error" "$out/${c}_s$sym.log" | sort -u | tr -s ' ' | tr '\n' ';')" >> "$t"
    done
  done
  # whether NCCL took its symmetric kernels (its INFO lines name them)
  if [ "$PROFILE" = 1 ] && [ -x "$G/xl_tp2/bench_gpt2" ]; then
    timeout 300 "${mpi[@]}" -x NNRT_NCCL_SYMMETRIC=1 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,TUNING,REG "$G/xl_tp2/bench_gpt2" -d B=1 -d T=128 --runs 3 --no-peaks > "$out/nccl_info.log" 2>&1
    echo "NCCL INFO lines naming symmetric/window: $(grep -ci "symmetric\|window\|symm" "$out/nccl_info.log")" >> "$t"
    grep -i "symmetric\|window\|symm" "$out/nccl_info.log" | head -4 | cut -c1-200 >> "$t"
  fi
  # latency: tp:1, tp:2 (symmetric), variants
  local s gr
  for s in $SHAPES; do
    [ -x "$G/${s}_tp1/bench_gpt2" ] && [ -x "$G/${s}_tp2/bench_gpt2" ] || continue
    for gr in $GRAPHS; do
      local b=(-d B=1 -d T=128 --runs "$RUNS" --json --no-peaks --cuda-graphs $gr) m1 line
      timeout 600 "$G/${s}_tp1/bench_gpt2" "${b[@]}" > "$out/${s}_g${gr}_tp1.json" 2> "$out/${s}_g${gr}_tp1.err"
      m1=$(median "$out/${s}_g${gr}_tp1.json" 2>/dev/null)
      line="$s graphs $gr: tp:1 ${m1:-?} ms"
      local v names="default"
      # the variants: the first shape only (half a minute each)
      [ "$s" = "${SHAPES%% *}" ] && names+=" $VARIANTS"
      for v in $names; do
        local env=()
        case $v in
          sym) env=(-x NNRT_NCCL_SYMMETRIC=1) ;;
          plain) env=(-x NNRT_NCCL_SYMMETRIC=0) ;;
          LL|LL128|Simple) env=(-x NNRT_NCCL_SYMMETRIC=0 -x NCCL_PROTO=$v) ;;
          nomix) env=(-x NCCL_GRAPH_MIXING_SUPPORT=0) ;;
          ring1) env=(-x NNRT_NCCL_SYMMETRIC=0 -x NCCL_ALGO=Ring -x NCCL_PROTO=LL -x NCCL_MAX_NCHANNELS=1) ;;
        esac
        timeout 600 "${mpi[@]}" "${env[@]}" "$G/${s}_tp2/bench_gpt2" "${b[@]}" > "$out/${s}_g${gr}_$v.json" 2> "$out/${s}_g${gr}_$v.err"
        local m2
        m2=$(median "$out/${s}_g${gr}_$v.json" 2>/dev/null)
        [ -n "$m2" ] || { tail -n 3 "$out/${s}_g${gr}_$v.err" >> "$t"; status=1; }
        line+=", tp:2 $v ${m2:-?} ms ($(python3 -c "print('%.3f' % ($m2 / $m1))" 2>/dev/null)x)"
      done
      echo "$line" >> "$t"
    done
    # per-kernel tables (graphs off): where the time goes
    [ "$PROFILE" = 1 ] || continue
    timeout 600 "$G/${s}_tp1/bench_gpt2" -d B=1 -d T=128 --runs 20 --no-peaks --cuda-graphs off > "$out/${s}_kernels_tp1.txt" 2>&1
    timeout 600 "${mpi[@]}" -x NNRT_NCCL_SYMMETRIC=1 "$G/${s}_tp2/bench_gpt2" -d B=1 -d T=128 --runs 20 --no-peaks --cuda-graphs off > "$out/${s}_kernels_tp2.txt" 2>&1
  done
  # one nsys profile of a tp:2 step (graphs on): the all_reduce kernels' times
  if [ "$PROFILE" = 1 ] && [ -n "$nsys" ] && [ -x "$G/xl_tp2/bench_gpt2" ]; then
    local prof=$out/prof
    mkdir -p "$prof"
    for sym in 1 0; do
      timeout 300 "${mpi[@]}" -x NNRT_NCCL_SYMMETRIC=$sym "$nsys" profile -t cuda --force-overwrite true \
        -o "$prof/xl_tp2_s${sym}_r%q{OMPI_COMM_WORLD_RANK}" "$G/xl_tp2/bench_gpt2" -d B=1 -d T=128 --runs 20 --no-peaks --cuda-graphs on \
        > "$prof/run_s$sym.log" 2>&1
      timeout 300 "$nsys" stats --report cuda_gpu_kern_sum --format csv -o "$prof/kern_s$sym" "$prof/xl_tp2_s${sym}_r0.nsys-rep" > /dev/null 2>&1
      echo "nsys xl tp:2 symmetric $sym, rank 0, kernels by total time (top 6):" >> "$t"
      head -7 "$prof"/kern_s${sym}*.csv 2>/dev/null | cut -d, -f1-4,9 | cut -c1-160 >> "$t"
      rm -f "$prof"/*.sqlite "$prof"/*.nsys-rep
    done
  fi
  echo "total $((SECONDS - start)) s" >> "$t"
  sleep 1
  kill "$tail_pid" 2> /dev/null
  if [ -n "${OUT:-}" ]; then
    cp "$t" "$OUT/" && tar czf "$OUT/logs.tgz" -C "$out" . 2> /dev/null
  fi
  return $status
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bench/tp_latency.sh generate|run" >&2; exit 2 ;;
esac
