#!/usr/bin/env bash
# bench/cpu_compare.sh: nnc's c-simd target against numpy/PyTorch on the CPU.
#
# Builds bench/bench_gemm.c and nnc's folders for GPT-2 and BERT, installs the
# peers (numpy, torch: for this benchmark only, not dependencies of nnc) into
# a virtual environment, then runs each side ROUNDS times, alternating nnc and
# peer, and prints one table: the median over rounds of each round's median,
# and the spread (lowest..highest round median).
#
# Run from anywhere:  bench/cpu_compare.sh
# Environment:
#   NNC      the nnc binary (default build/release/compiler/nnc)
#   WORK     scratch folder for folders, venv and results (default /tmp/nnc-cpu-compare)
#   THREADS  threads for every side (default 2)
#   ROUNDS   alternating rounds per figure (default 2)
#   RUNS     timed runs per round (default 20)
#   COMPILE  1 = also time torch.compile (needs a working C++ toolchain)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NNC=${NNC:-$ROOT/build/release/compiler/nnc}
WORK=${WORK:-/tmp/nnc-cpu-compare}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-20}
COMPILE=${COMPILE:-0}
VENV=$WORK/venv
PY=$VENV/bin/python
RESULTS=$WORK/results.jsonl
mkdir -p "$WORK"

# --- peers -----------------------------------------------------------------
# PyPI's Linux torch wheel is a CUDA build; its full dependency set is
# gigabytes of nvidia-* wheels. Install torch without them plus the pure-
# Python packages it imports, then add only the shared libraries the loader
# still misses (where the system has a CUDA toolkit, the four below suffice),
# and fall back to the full dependency set if the import still fails.
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  "$PY" -m pip install -q numpy
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  "$PY" -m pip install -q --no-deps torch
  "$PY" -m pip install -q filelock 'typing-extensions>=4.13.0' 'setuptools>=77.0.3' \
    'sympy>=1.13.3' 'networkx>=2.5.1' jinja2 'fsspec>=0.8.5'
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  # Versions pinned by torch 2.15.0's metadata; adjust with the torch version.
  "$PY" -m pip install -q --no-deps 'nvidia-cufile==1.17.1.22.*' \
    nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  "$PY" -m pip install -q torch
fi
"$PY" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)'

# --- nnc -------------------------------------------------------------------
gcc -std=c11 -D_GNU_SOURCE -O3 -march=native -I"$ROOT/templates/c_simd" \
  "$ROOT/bench/bench_gemm.c" "$ROOT"/templates/c_simd/[a-z]*.c \
  -o "$WORK/bench_gemm" -lpthread -lm
for m in gpt2 bert; do
  "$NNC" "$ROOT/models/$m.lua" -o "$WORK/$m"
  make -C "$WORK/$m" -j"$THREADS" >"$WORK/make_$m.log"
done

# --- runs ------------------------------------------------------------------
# One JSON object per line; nnc's are tagged here so the table can pair them.
: >"$RESULTS"
nnc_model() {  # model B T
  "$WORK/$1/bench_$1" -d B="$2" -d T="$3" --threads "$THREADS" --runs "$RUNS" \
    --warmup 3 --json >"$WORK/last_$1.json"
  "$PY" - "$1" "$2" "$3" "$WORK/last_$1.json" >>"$RESULTS" <<'EOF'
import json, sys
what, B, T, path = sys.argv[1:]
d = json.load(open(path))
print(json.dumps({"what": what, "shape": f"B={B} T={T}", "impl": "nnc",
                  "median_ms": d["median_ms"], "p90_ms": d["p90_ms"]}))
EOF
}
nnc_gemm() {
  "$WORK/bench_gemm" -t "$THREADS" -r 50 | tee "$WORK/last_gemm.txt" | awk '
    /^peak/ { peak = $(NF-1) }
    /^gemm/ { for (i = 1; i <= NF; i++) { if ($i == "ms") ms = $(i-1); if ($i == "GFLOP/s") gf = $(i-1) } }
    END { printf "{\"what\": \"gemm\", \"shape\": \"512x768x3072\", \"impl\": \"nnc\", \"median_ms\": %s, \"gflops\": %s, \"peak_gflops\": %s}\n", ms, gf, peak }' \
    >>"$RESULTS"
}
peers() {
  OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS \
    "$PY" "$ROOT/bench/cpu_peers.py" "$@" --threads "$THREADS" --runs "$RUNS" >>"$RESULTS"
}

for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS" >&2
  nnc_gemm;          peers gemm
  nnc_model gpt2 1 128; peers gpt2 --B 1 --T 128
  nnc_model bert 8 128; peers bert --B 8 --T 128
done
if [ "$COMPILE" = 1 ]; then
  peers gpt2 --B 1 --T 128 --compile
  peers bert --B 8 --T 128 --compile
fi

# --- table -----------------------------------------------------------------
"$PY" - "$RESULTS" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def rows(what, impl):
    return [r for r in recs if r["what"] == what and r["impl"] == impl and "median_ms" in r]
def fig(rs, key="median_ms"):
    v = [r[key] for r in rs]
    return statistics.median(v), min(v), max(v)
peaks = [r["peak_gflops"] for r in rows("gemm", "nnc")]
peak = statistics.median(peaks) if peaks else float("nan")
print(f"\nGEMM 512x768x3072 f32 (measured FMA peak {peak:.1f} GFLOP/s, median of rounds)")
for impl in ("nnc", "numpy"):
    rs = rows("gemm", impl)
    if rs:
        g, lo, hi = fig(rs, "gflops")
        print(f"  {impl:6s} {g:7.1f} GFLOP/s ({lo:.1f}..{hi:.1f})  {100 * g / peak:5.1f}% of peak")
print(f"\n{'model':6s} {'shape':12s} {'nnc ms':>20s} {'PyTorch eager ms':>20s} {'ratio':>6s} {'torch.compile ms':>18s}")
for what in ("gpt2", "bert"):
    n, t = rows(what, "nnc"), rows(what, "torch-eager")
    if not n or not t:
        continue
    nm, nlo, nhi = fig(n)
    tm, tlo, thi = fig(t)
    c = [r for r in recs if r["what"] == what and r["impl"] == "torch-compile"]
    cs = "-"
    if c:
        cs = f"{c[-1]['median_ms']:.1f}" if "median_ms" in c[-1] else "failed"
    print(f"{what:6s} {n[0]['shape']:12s} {nm:7.1f} ({nlo:.0f}..{nhi:.0f})    {tm:7.1f} ({tlo:.0f}..{thi:.0f})"
          f"  {tm / nm:6.2f} {cs:>18s}")
print("\nratio = PyTorch eager / nnc (above 1: nnc is faster); (a..b) = spread of round medians")
for r in recs:
    if "error" in r:
        print(f"torch.compile {r['what']}: {r['error']}")
EOF
