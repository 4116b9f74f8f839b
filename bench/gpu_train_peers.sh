#!/usr/bin/env bash
# bench/gpu_train_peers.sh: the GPU training peers of nnc's train_<model> on
# GPT-2 124M (12 layers, d 768, 12 heads, vocab 50257, ctx 1024), bf16 with
# f32 master weights, random init, random tokens, B x T per step, AdamW
# (lr 6e-4 constant, betas 0.9/0.95, weight decay 0.1 on the matrices and
# embeddings), gradients clipped at 1.0. Run on the GPU machine from anywhere,
# in one command:
#
#   bash bench/gpu_train_peers.sh          (about 6-8 minutes on an H100)
#
#   1. writes a train and a val token file in llm.c's .bin format (256 int32
#      header: 20240520, 1, count; then uint16 tokens uniform in [0, 50257))
#   2. llm.c (karpathy/llm.c's train_gpt2cu): copies the source snapshot
#      build/llmc (ignored; carry it to the machine) to $WORK, patches its one
#      pre-CUDA-13 call (cudaMemAdvise's location, on its out-of-memory path)
#      when nvcc is 13 or later, builds it with its Makefile (bf16, no cuDNN:
#      its own attention kernels, no NCCL, no MPI, sm_<compute capability>),
#      then runs `-e d12` (GPT-2 124M from its random init) for STEPS steps,
#      eval and sampling off (-v huge, -m 1: one val batch before and after,
#      outside the timed steps; -s 0), once per LLMC_VARIANTS entry. ms/step:
#      the median of its per-step CUDA-event times after the first SKIP steps
#      (each step's forward, backward, norm, clip and AdamW; the batch's read
#      and copy to the GPU too). Memory: its "device memory usage" line
#      (cudaMemGetInfo after it allocated everything: the whole device, CUDA
#      context included).
#   3. PyTorch (bench/gpu_train_torch.py, its docstring says what it runs): one
#      process per mode of MODES (eager, torch.compile default,
#      reduce-overhead, max-autotune), WARMUP untimed steps then STEPS timed
#      steps on the same train file, CUDA-event median. Memory:
#      torch.cuda.max_memory_allocated (reserved in the log).
#   4. for every peer, the peak of nvidia-smi's memory.used sampled every
#      100 ms while it ran (the whole device: context and allocator caches
#      included; the idle baseline is printed), then one table: peer, status,
#      ms/step, tokens/s, reported MiB, nvidia-smi peak MiB.
#
# A peer that fails or runs out of time is a row of the table; the others
# still run. Rows are printed as each peer ends, the table at the end.
# Logs, results.tsv and table.txt go to $OUT (the device tool's folder) when
# set, else $WORK/out.
#
# Environment (defaults):
#   B T STEPS        16, 1024, 30
#   SKIP             llm.c's first steps left out of its median (3)
#   WARMUP           PyTorch's untimed steps before the STEPS timed (5)
#   MODES            "eager default reduce-overhead max-autotune"
#   LLMC             1 = run llm.c (0: PyTorch only)
#   LLMC_SRC         llm.c's source (build/llmc)
#   LLMC_VARIANTS    ';'-separated train_gpt2cu flag sets, one run each;
#                    "" is llm.c's defaults (recompute GELU in backward, -r 1)
#                    (default ";-r 0": its defaults, then no recomputation)
#   LLMC_CC          compute capability to build for, e.g. 90 (default: nvidia-smi's)
#   LLMC_GPUS        world sizes llm.c runs at, e.g. "1 2 4" (default 1). Above 1 it is
#                    built with NCCL (the Python package nvidia-nccl's when dpkg has
#                    none; no MPI) and started as N processes of one GPU each that
#                    find each other through a folder (-pi fs); B is per GPU, so the
#                    tokens/s is per GPU and the row's note gives the scaling
#                    efficiency against the first world size
#   PAD_VOCAB        PyTorch's wte/logit rows (0: 50257, unpadded; llm.c pads to 50304
#                    but takes the loss over the first 50257)
#   TORCH_ARGS       more gpu_train_torch.py options (e.g. "--device cpu --layers 2
#                    --d 64 --heads 2 --vocab 101" to try the script without a GPU)
#   DEADLINE         seconds after the start past which no peer starts and to
#                    which every time limit is cut (480)
#   TIMEOUT          limit of llm.c's build, of each llm.c run and of each PyTorch
#                    mode but max-autotune (150 s)
#   AUTOTUNE_TIMEOUT max-autotune's limit (240 s; its compilation and autotuning
#                    of forward and backward take minutes)
#   WORK             scratch folder (/tmp/nnc-gpu-train-peers)
#   PY               python with torch (python3)
#   GPU              nvidia-smi's index of the GPU sampled (0)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-16} T=${T:-1024} STEPS=${STEPS:-30} SKIP=${SKIP:-3} WARMUP=${WARMUP:-5}
MODES=${MODES-"eager default reduce-overhead max-autotune"}
LLMC=${LLMC:-1}
LLMC_SRC=${LLMC_SRC:-$ROOT/build/llmc}
LLMC_VARIANTS=${LLMC_VARIANTS-";-r 0"}
LLMC_CC=${LLMC_CC:-}
LLMC_GPUS=${LLMC_GPUS:-1}
PAD_VOCAB=${PAD_VOCAB:-0}
TORCH_ARGS=${TORCH_ARGS:-}
DEADLINE=${DEADLINE:-480}
TIMEOUT=${TIMEOUT:-150}
AUTOTUNE_TIMEOUT=${AUTOTUNE_TIMEOUT:-240}
WORK=${WORK:-/tmp/nnc-gpu-train-peers}
PY=${PY:-python3}
GPU=${GPU:-0}
LOGS=${OUT:-$WORK/out}
DATA=$WORK/data
mkdir -p "$WORK" "$LOGS" "$DATA"
RES=$LOGS/results.tsv
: >"$RES"
[ "$LLMC" != 1 ] || [ "$STEPS" -gt "$SKIP" ] || { echo "gpu_train_peers.sh: STEPS ($STEPS) must exceed SKIP ($SKIP)" >&2; exit 1; }

have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------- helpers
# limit CAP: the seconds a peer may take now (CAP cut to what is left before
# DEADLINE); 0 when less than 20 s are left
limit() {
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 20 ]; then echo 0; elif [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

SMI_PID=
smi_start() {  # smi_start NAME: sample memory.used into $LOGS/NAME.smi
  SMI_FILE=$LOGS/$1.smi
  : >"$SMI_FILE"
  if have nvidia-smi; then
    nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$SMI_FILE" 2>/dev/null &
    SMI_PID=$!
  fi
}
smi_stop() {  # prints the peak MiB sampled, or -
  if [ -n "$SMI_PID" ]; then
    kill "$SMI_PID" 2>/dev/null
    wait "$SMI_PID" 2>/dev/null
    SMI_PID=
  fi
  local peak
  peak=$(grep -E '^ *[0-9]+ *$' "$SMI_FILE" 2>/dev/null | sort -n | tail -1 | tr -d ' ')
  echo "${peak:--}"
}

# row PEER STATUS MS TOKS REPORTED SMI NOTE: one result, printed and kept
row() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RES"
  printf '  -> %-26s %-10s %10s ms/step %12s tokens/s  reported %s MiB  nvidia-smi peak %s MiB  %s\n' "$@"
}

# status RC SECONDS: ok, timeout or failed
status() {
  case $1 in
    0) echo ok ;;
    124 | 137) echo "timeout(${2}s)" ;;
    *) echo "failed(rc=$1)" ;;
  esac
}

# ------------------------------------------------------------------ setup
echo "== gpu_train_peers.sh: GPT-2 124M training, B=$B T=$T, $STEPS steps, $(date -u +%FT%TZ)"
if have nvidia-smi; then
  nvidia-smi -i "$GPU" --query-gpu=name,driver_version,memory.total,memory.used,compute_cap --format=csv,noheader \
    | sed 's/^/GPU: /'
  BASELINE=$(nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' ')
  echo "nvidia-smi memory.used at the start (baseline): $BASELINE MiB"
else
  echo "no nvidia-smi: no memory sampling"
fi
have nvcc && nvcc --version | tail -2 | head -1 | sed 's/^/nvcc: /'
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1

# 1. the token files (uniform random ids; enough for every peer's steps)
NTRAIN=$(( (STEPS + WARMUP + 1) * B * T + 1 ))
MOST=1  # llm.c's data loader wants a shard of (processes x B x T + 1) tokens
for n in $LLMC_GPUS; do [ "$n" -le "$MOST" ] || MOST=$n; done
NVAL=$(( MOST * B * T + 1 ))
"$PY" - "$DATA" "$NTRAIN" "$NVAL" <<'EOF' || { echo "gpu_train_peers.sh: could not write the token files" >&2; exit 1; }
import sys
import numpy as np
out, sizes = sys.argv[1], {"train": int(sys.argv[2]), "val": int(sys.argv[3])}
rng = np.random.default_rng(1234)
for name, n in sizes.items():
    head = np.zeros(256, dtype="<i4")
    head[:3] = (20240520, 1, n)
    tok = rng.integers(0, 50257, size=n, dtype=np.int64).astype("<u2")
    path = f"{out}/{name}.bin"
    with open(path, "wb") as f:
        f.write(head.tobytes())
        f.write(tok.tobytes())
    back = np.fromfile(path, dtype="<i4", count=256)
    body = np.fromfile(path, dtype="<u2", offset=1024)
    assert tuple(back[:3]) == (20240520, 1, n) and len(body) == n and body.max() < 50257, path
    print(f"{path}: {n} tokens")
EOF

# ------------------------------------------------------------------ llm.c
run_llmc() {
  local src=$WORK/llmc bin cc nv cuda ldflags="-lcublas -lcublasLt" ldlibs="" t rc t0 lib
  if [ ! -f "$LLMC_SRC/train_gpt2.cu" ]; then
    row "llm.c" "missing" - - - - "no $LLMC_SRC/train_gpt2.cu (carry build/llmc)"
    return
  fi
  if ! have nvcc; then
    row "llm.c" "failed" - - - - "no nvcc"
    return
  fi
  rm -rf "$src" && mkdir -p "$src" && cp -r "$LLMC_SRC/." "$src/" && rm -rf "$src/build" "$src/train_gpt2cu"
  nv=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  if [ "${nv:-0}" -ge 13 ]; then
    # CUDA 13 dropped cudaMemAdvise's int-device form: the host as a cudaMemLocation
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      "$src/llmc/cuda_utils.cuh"
  fi
  cc=$LLMC_CC
  [ -n "$cc" ] || cc=$(nvidia-smi -i "$GPU" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .')
  [ -n "$cc" ] || cc=$("$PY" -c 'import torch; print("%d%d" % torch.cuda.get_device_capability())' 2>/dev/null)
  # llm.c's mfu.h uses NVML when nvml.h is on the include path, and its Makefile
  # links -lnvidia-ml: link the driver's library (or the toolkit's stub)
  # through a folder of our own when the header is there
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")
  printf '#include <nvml.h>\nint main() { return 0; }\n' >"$WORK/nvml_probe.cu"
  if nvcc -E "$WORK/nvml_probe.cu" -o /dev/null >/dev/null 2>&1; then
    lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 /{print $NF; exit}')
    for c in "$cuda/lib64/stubs/libnvidia-ml.so" "$cuda"/targets/*/lib/stubs/libnvidia-ml.so; do
      [ -n "$lib" ] || { [ -f "$c" ] && lib=$c; }
    done
    if [ -n "$lib" ]; then
      mkdir -p "$WORK/nvml" && ln -sf "$lib" "$WORK/nvml/libnvidia-ml.so"
      ldflags="$ldflags -lnvidia-ml" ldlibs="-L$WORK/nvml"
    else  # no library: build without NVML (only its -lg GPU-state lines use it)
      sed -i 's/^#if __has_include(<nvml.h>)/#if 0/' "$src/llmc/mfu.h"
    fi
  fi
  echo "llm.c NVML: ${lib:-not linked}"
  local multi="NO_MULTI_GPU=1" nccl=""
  if [ "$LLMC_GPUS" != 1 ]; then
    # NCCL: the system's (dpkg), else the one PyTorch ships (headers and libnccl.so.2), linked
    # through a folder of our own since the package has no unversioned libnccl.so
    nccl=$("$PY" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    if dpkg -l 2>/dev/null | grep -q nccl; then
      multi="" nccl="" ldlibs="$ldlibs -lnccl"   # the command line's NVCC_LDLIBS replaces the Makefile's
    elif [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ]; then
      mkdir -p "$WORK/nccl" && ln -sf "$(find "$nccl/lib" -name 'libnccl.so*' | head -1)" "$WORK/nccl/libnccl.so"
      sed -i 's/dpkg -l | grep -q nccl/true/' "$src/Makefile"
      multi="" ldflags="$ldflags -I$nccl/include" ldlibs="$ldlibs -L$WORK/nccl -lnccl"
      export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
      echo "llm.c: no NCCL found: world sizes above 1 will fail"
    fi
  fi
  echo "llm.c NCCL: ${multi:-built with it${nccl:+ ($nccl)}}"
  t=$(limit "$TIMEOUT")
  [ "$t" -gt 0 ] || { row "llm.c" "skipped" - - - - "no time left"; return; }
  echo
  echo "== llm.c: build train_gpt2cu (sm_${cc:-?}, nvcc $nv, limit ${t}s)"
  t0=$SECONDS
  # shellcheck disable=SC2086  # multi: empty or one word
  timeout -k 5 "$t" make -C "$src" train_gpt2cu $multi NO_USE_MPI=1 USE_CUDNN=0 PRECISION=BF16 \
    ${cc:+GPU_COMPUTE_CAPABILITY=$cc} NVCC_LDFLAGS="$ldflags" NVCC_LDLIBS="$ldlibs" >"$LOGS/llmc_build.log" 2>&1
  rc=$?
  echo "   build: rc $rc, $((SECONDS - t0)) s (log llmc_build.log)"
  bin=$src/train_gpt2cu
  if [ "$rc" -ne 0 ] || [ ! -x "$bin" ]; then
    tail -15 "$LOGS/llmc_build.log"
    row "llm.c" "build-$(status "$rc" "$t")" - - - - "$(grep -m1 -i 'error' "$LOGS/llmc_build.log" | cut -c1-120)"
    return
  fi
  local v i=0 name log
  local -a vars
  IFS=';' read -r -a vars <<<"$LLMC_VARIANTS"
  [ ${#vars[@]} -gt 0 ] || vars=("")
  local n r base_ms=""
  for n in $LLMC_GPUS; do
  for v in "${vars[@]}"; do
    i=$((i + 1))
    name="llm.c${v:+ $v}"
    [ "$LLMC_GPUS" = 1 ] || name="$name x$n GPUs"
    log=$LOGS/llmc_$i.log
    t=$(limit "$TIMEOUT")
    [ "$t" -gt 0 ] || { row "$name" "skipped" - - - - "no time left"; continue; }
    echo
    echo "== $name: -e d12 -b $B -t $T -x $STEPS (limit ${t}s, log $(basename "$log"))"
    mkdir -p "$WORK/llmc_run" && cd "$WORK/llmc_run" || return
    smi_start "llmc_$i"
    t0=$SECONDS
    # one process a GPU; rank 0's log is the row's (every rank prints the same step times)
    local fs=$WORK/llmc_fs_$i pids=()
    rm -rf "$fs" && mkdir -p "$fs"
    for ((r = n - 1; r >= 0; r--)); do
      local rlog=$log world=()
      [ "$r" = 0 ] || rlog=$LOGS/llmc_${i}_rank$r.log
      # built with NCCL, even one process must be told how to find the others (its default asks MPI)
      [ "$LLMC_GPUS" = 1 ] || world=(-pn "$n" -pr "$r" -pg "$n" -pi fs -pf "$fs")
      # shellcheck disable=SC2086  # v: several flags
      LD_LIBRARY_PATH="$cuda/lib64:$cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 5 "$t" \
        "$bin" -i "$DATA/train.bin" -j "$DATA/val.bin" -e d12 -b "$B" -t "$T" -x "$STEPS" \
        -k constant -l 6e-4 -u 0 -c 0.1 -v 1000000 -m 1 -s 0 -h 0 -n 0 -y 0 \
        "${world[@]}" $v >"$rlog" 2>&1 &
      pids+=($!)
    done
    rc=0
    for r in "${pids[@]}"; do wait "$r" || rc=$?; done
    local smi
    smi=$(smi_stop)
    cd "$ROOT" || return
    echo "   rc $rc, $((SECONDS - t0)) s"
    grep -E '^\| (device|precision|num_parameters|padded_vocab|recompute|gelu_fusion) ' "$log" | sed 's/^/   /'
    grep -E '^(device memory usage|allocating .* activations)' "$log" | sed 's/^/   /'
    # the median of its per-step times after SKIP steps, and its reported memory
    local parsed
    parsed=$("$PY" - "$log" "$SKIP" "$B" "$T" <<'EOF'
import re, statistics, sys
log, skip, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ms, mem, loss = [], "-", []
for line in open(log, errors="replace"):
    m = re.match(r"step\s+(\d+)/\d+ \| loss\s+(\S+) .*\| ([0-9.]+) ms \|", line)
    if m:
        loss.append(m.group(2))
        if int(m.group(1)) > skip:
            ms.append(float(m.group(3)))
    m = re.match(r"device memory usage: (\d+) MiB", line)
    if m:
        mem = m.group(1)
if ms:
    med = statistics.median(ms)
    print(f"{med:.3f} {B * T / med * 1e3:.0f} {mem} {len(ms)} steps, loss {loss[0]}->{loss[-1]}, "
          f"min {min(ms):.3f} max {max(ms):.3f} ms")
else:
    print(f"- - {mem} no step lines")
EOF
)
    local ms toks mem note
    read -r ms toks mem note <<<"$parsed"
    if [ "$rc" -ne 0 ]; then
      tail -8 "$log"
      note="$(grep -m1 -A1 -iE 'error|assert|fail' "$log" | tr '\n' ' ' | cut -c1-160)"
    fi
    if [ "$LLMC_GPUS" != 1 ] && [ "$ms" != - ]; then
      [ -n "$base_ms" ] || base_ms=$ms
      note="$note; scaling efficiency $("$PY" -c "print('%.1f%%' % (100 * $base_ms / $ms))") of the first world size"
    fi
    row "$name" "$(status "$rc" "$t")" "$ms" "$toks" "$mem" "$smi" "$note"
  done
  done
}

# ---------------------------------------------------------------- PyTorch
run_torch() {
  local m t cap rc t0 smi log json
  for m in $MODES; do
    cap=$TIMEOUT
    [ "$m" = max-autotune ] && cap=$AUTOTUNE_TIMEOUT
    t=$(limit "$cap")
    [ "$t" -gt 0 ] || { row "torch-$m" "skipped" - - - - "no time left"; continue; }
    log=$LOGS/torch_$m.log json=$LOGS/torch_$m.json
    echo
    echo "== torch-$m: WARMUP $WARMUP + $STEPS timed steps (limit ${t}s, log $(basename "$log"))"
    smi_start "torch_$m"
    t0=$SECONDS
    # shellcheck disable=SC2086  # TORCH_ARGS: several words
    timeout -k 10 "$t" "$PY" "$ROOT/bench/gpu_train_torch.py" --mode "$m" --B "$B" --T "$T" --steps "$STEPS" \
      --warmup "$WARMUP" --pad-vocab "$PAD_VOCAB" --data "$DATA/train.bin" --json $TORCH_ARGS >"$json" 2>"$log"
    rc=$?
    smi=$(smi_stop)
    echo "   rc $rc, $((SECONDS - t0)) s"
    grep -v '^ *$' "$log" | tail -3 | sed 's/^/   /'
    local parsed ms toks mem note
    parsed=$("$PY" - "$json" <<'EOF'
import json, sys
rec = {}
for line in open(sys.argv[1]):
    if line.strip().startswith("{"):
        rec = json.loads(line)
if "median_ms" in rec:
    print(f"{rec['median_ms']:.3f} {rec['tokens_per_s']:.0f} {rec['max_memory_allocated_mib']} "
          f"first step {rec['first_step_s']:.1f} s, reserved {rec['max_memory_reserved_mib']} MiB, "
          f"loss {rec['loss_first']:.3f}->{rec['loss_last']:.3f}, {rec['optimizer']} AdamW")
else:
    print("- - - " + rec.get("error", "no result").replace("\t", " ")[:120])
EOF
)
    read -r ms toks mem note <<<"$parsed"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && note="killed at the limit (compilation?)"
    row "torch-$m" "$(status "$rc" "$t")" "$ms" "$toks" "$mem" "$smi" "$note"
  done
}

[ "$LLMC" = 1 ] && run_llmc
run_torch

# ------------------------------------------------------------------ table
{
  echo
  echo "GPT-2 124M training step, B=$B T=$T (tokens/s = B*T / median ms), $STEPS steps; $(date -u +%FT%TZ)"
  echo "reported MiB: llm.c's cudaMemGetInfo after allocation (whole device), torch.cuda.max_memory_allocated;"
  echo "nvidia-smi peak: memory.used sampled every 100 ms during the peer (baseline ${BASELINE:-?} MiB)"
  printf '%-26s %-14s %10s %12s %13s %16s  %s\n' peer status ms/step tokens/s "reported MiB" "nvidia-smi MiB" note
  while IFS=$'\t' read -r p s ms toks mem smi note; do
    printf '%-26s %-14s %10s %12s %13s %16s  %s\n' "$p" "$s" "$ms" "$toks" "$mem" "$smi" "$note"
  done <"$RES"
  echo "total $SECONDS s; logs in $LOGS"
} | tee "$LOGS/table.txt"
