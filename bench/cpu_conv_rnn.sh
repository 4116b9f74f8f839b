#!/usr/bin/env bash
# The C SIMD target's MNIST CNN and LSTM forecaster beside PyTorch on the
# CPU (issue 16's goal: >= 1.0x PyTorch CPU in the same run). Builds both
# models at their default sizes (B=64; the forecaster T=48, hidden 64, 2
# layers), checks them against the float64 reference, then alternates ROUNDS
# rounds of nnc's harness and bench/cpu_conv_rnn.py (PyTorch eager), the same
# THREADS on both sides, and prints the median of the round medians.
#
#   bash bench/cpu_conv_rnn.sh
# Environment: NNC (build/release/compiler/nnc), WORK (/tmp/nnc-conv-rnn), THREADS (2), ROUNDS (3), RUNS (30)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NNC=${NNC:-$ROOT/build/release/compiler/nnc}
WORK=${WORK:-/tmp/nnc-conv-rnn}
THREADS=${THREADS:-2} ROUNDS=${ROUNDS:-3} RUNS=${RUNS:-30}
mkdir -p "$WORK"
for m in mnist_cnn lstm_forecast; do
  rm -rf "${WORK:?}/$m"
  "$NNC" "$ROOT/models/$m.lua" -o "$WORK/$m" > /dev/null
  make -s -C "$WORK/$m" -j"$THREADS" > "$WORK/make_$m.log" 2>&1
  (cd "$WORK/$m" && "./bench_$m" --check -d B=3 --threads "$THREADS" | grep -q 'relative error.* ok') ||
    { echo "$m: --check failed" >&2; exit 1; }
done
: > "$WORK/nnc.txt"
: > "$WORK/torch.txt"
for r in $(seq "$ROUNDS"); do
  for m in mnist_cnn lstm_forecast; do
    (cd "$WORK/$m" && "./bench_$m" --threads "$THREADS" --runs "$RUNS" --warmup 5 --json) |
      python3 -c 'import json,sys; d=json.loads([l for l in sys.stdin if l.startswith("{")][-1]); print(sys.argv[1], d["median_ms"])' "$m" >> "$WORK/nnc.txt"
  done
  python3 "$ROOT/bench/cpu_conv_rnn.py" --threads "$THREADS" --runs "$RUNS" |
    python3 -c 'import json,sys; [print(d["model"], d["median_ms"], d["mode"]) for d in map(json.loads, sys.stdin)]' >> "$WORK/torch.txt"
done
python3 - "$WORK/nnc.txt" "$WORK/torch.txt" "$THREADS" <<'PY'
import statistics, sys
nnc, torch = {}, {}
for line in open(sys.argv[1]):
    m, v = line.split()
    nnc.setdefault(m, []).append(float(v))
for line in open(sys.argv[2]):
    m, v, mode = line.split()
    torch.setdefault(m, {}).setdefault(mode, []).append(float(v))
print(f"model           nnc c-simd ms   torch ms: eager / default / reduce-overhead / max-autotune   "
      f"peer (fastest)    ratio (peer / nnc)   threads {sys.argv[3]}")
for m in nnc:
    a = statistics.median(nnc[m])
    modes = {k: statistics.median(v) for k, v in torch[m].items()}
    best = min(modes, key=modes.get)
    row = " / ".join(f"{modes[k]:.3f}" if k in modes else "-" for k in ("eager", "default", "reduce-overhead", "max-autotune"))
    print(f"{m:15s} {a:13.3f}   {row:58s}   {best:16s}  {modes[best] / a:6.2f}x")
PY
