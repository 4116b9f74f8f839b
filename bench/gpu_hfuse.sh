#!/usr/bin/env bash
# bench/gpu_hfuse.sh: q, k and v as one GEMM (--hfuse, compiler/passes/hfuse.c)
# on a GPU, against the same model compiled with --hfuse=off, in one call.
#
# Here (with Lua and nnc):   NNC=build/lead/compiler/nnc bash bench/gpu_hfuse.sh generate
#   BERT MiniLM bf16 (CUDA graphs on, the default) and the default LLaMA's
#   --generate folder bf16 (graphs on), each with the pass on and off, for
#   cuda-sm90a, into build/gpu_hfuse/.
# On the GPU machine:        bash bench/gpu_hfuse.sh run
#   builds the folders, checks each (bench --check at odd sizes;
#   generate_llama --check: every decode step against a full forward), times
#   BERT at B=1 T=16 and T=128 and LLaMA's decode step (B=1, 512 cached
#   tokens) on and off in alternating rounds (median of the rounds' medians),
#   and BERT B=1 T=16 in torch.compile's default and reduce-overhead modes
#   (bench/gpu_peers.py; max-autotune left out: the device time is short).
#   Prints a table last; logs in $OUT (or build/gpu_hfuse/out).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_hfuse
ROUNDS=${ROUNDS:-5}

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$G"
  for h in on off; do
    "$nnc" "$ROOT/models/bert.lua" --target=cuda-sm90a --precision=bf16 --hfuse=$h -o "$G/bert_$h" || exit 1
    "$nnc" "$ROOT/models/llama.lua" --target=cuda-sm90a --precision=bf16 --generate --cuda-graphs=on \
      --hfuse=$h -o "$G/llama_$h" || exit 1
  done
  echo "generated: $(ls "$G" | tr '\n' ' ')"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { "$@" --json --no-peaks 2>/dev/null | grep -o '"median_ms": [0-9.e+-]*' | head -1 | awk '{ print $2 }'; }

run() {
  local out=${OUT:-$G/out}
  mkdir -p "$out"
  for d in bert_on bert_off; do (make -s -C "$G/$d" -j8 bench_bert > "$out/make_$d.log" 2>&1 || echo "build $d failed") & done
  for d in llama_on llama_off; do (make -s -C "$G/$d" -j8 bench_llama generate_llama > "$out/make_$d.log" 2>&1 || echo "build $d failed") & done
  wait
  local checks=""
  for h in on off; do
    if "$G/bert_$h/bench_bert" --check -d B=3 -d T=17 --runs 3 --no-peaks > "$out/check_bert_$h.log" 2>&1; then
      checks+="bert_$h ok; "; else checks+="bert_$h FAILED; "; fi
    if (cd "$G/llama_$h" && ./generate_llama --check --prompt '3,1,4,1,5;9,2' --steps 7 > "$out/check_llama_$h.log" 2>&1); then
      checks+="llama_$h ok; "; else checks+="llama_$h FAILED; "; fi
  done
  local cases=("bert B=1 T=16" "bert B=1 T=128" "llama B=1 T=1 S=513")
  for c in "${cases[@]}"; do
    read -r m dims <<< "$c"
    local flags
    flags=$(tr ' ' '\n' <<< "$dims" | sed 's/^/-d /' | tr '\n' ' ')
    for h in on off; do : > "$out/t_${m}_${dims// /_}_$h.txt"; done
    for _ in $(seq "$ROUNDS"); do
      for h in on off; do
        # shellcheck disable=SC2086
        ms "$G/${m}_$h/bench_$m" $flags --runs 200 --warmup 20 >> "$out/t_${m}_${dims// /_}_$h.txt"
      done
    done
  done
  # the peer's random weights, from the folder's manifest (scaled like an init)
  python3 - "$G/bert_on/weights_manifest.json" "$out/w_bert.safetensors" <<'EOF'
import json, sys, torch
from safetensors.torch import save_file
man = json.load(open(sys.argv[1]))
g = torch.Generator().manual_seed(0)
save_file({t["name"]: (torch.randn(t["shape"], generator=g) * 0.02).float() for t in man["tensors"]}, sys.argv[2])
EOF
  timeout -k 10 240 python3 "$ROOT/bench/gpu_peers.py" model --model bert --weights "$out/w_bert.safetensors" \
    --precision bf16 --dims B=1,T=16 --heads 12 --modes default,reduce-overhead --runs 200 > "$out/peer_bert.json" 2> "$out/peer_bert.err"
  rm -f "$out/w_bert.safetensors"
  echo
  echo "checks: $checks"
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  printf "%-22s %12s %12s %8s\n" case "hfuse on ms" "hfuse off ms" "off/on"
  for c in "${cases[@]}"; do
    read -r m dims <<< "$c"
    local on off
    on=$(median < "$out/t_${m}_${dims// /_}_on.txt")
    off=$(median < "$out/t_${m}_${dims// /_}_off.txt")
    printf "%-22s %12.4f %12.4f %8.3f\n" "$m ${dims}" "$on" "$off" "$(awk -v a="$on" -v b="$off" 'BEGIN { print (a > 0) ? b / a : 0 }')"
  done
  echo "peer (torch.compile, BERT bf16 B=1 T=16):"
  cat "$out/peer_bert.json"
  tail -3 "$out/peer_bert.err"
}

case "${1:-}" in
  generate) generate ;;
  run) run ;;
  *) echo "usage: bash bench/gpu_hfuse.sh generate|run"; exit 2 ;;
esac
