#!/usr/bin/env bash
# Issue 16's B=64 decode: the step as lanes of the batch whose kernels
# overlap (bench/gpu_decode_lanes.c says what each arrangement is).
#
#   NNC=build/lead/compiler/nnc bash bench/gpu_decode_lanes.sh generate   # here
#   bash bench/gpu_decode_lanes.sh run                                     # on the GPU machine
#
# generate writes build/gpu_lanes/g (GPT-2 124M, --generate, B=64, ctx 640,
# cuda-sm90a bf16) and patches its gpt2.cu for the experiment only: a hook
# around every kernel of forward, and helpers that share one model's
# weights with another and zero a model's arena.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/build/gpu_lanes/g

generate() {
  local nnc=${NNC:-$ROOT/build/release/compiler/nnc}
  rm -rf "$G" && mkdir -p "$(dirname "$G")"
  "$nnc" "$ROOT/models/gpt2.lua" --generate -D batch=64 -D ctx=640 --target=cuda-sm90a --precision=bf16 -o "$G"
  python3 - "$G/gpt2.cu" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
hook = ("extern \"C\" int (*gpt2_lane_hook)(gpt2_model *m, cudaStream_t s, int k, int after);\n"
        "int (*gpt2_lane_hook)(gpt2_model *m, cudaStream_t s, int k, int after) = NULL;\n\n")
old_run = "    int rc_ = (call); \\\n    if (rc_) return rc_; \\\n"
new_run = ("    int rc_ = gpt2_lane_hook && gpt2_lane_hook(m, s, i, 0) ? 0 : (call); \\\n"
           "    if (rc_) return rc_; \\\n    if (gpt2_lane_hook) gpt2_lane_hook(m, s, i, 1); \\\n")
assert s.count("#define RUN(i, call)") == 1 and s.count(old_run) == 1
s = s.replace("#define RUN(i, call)", hook + "#define RUN(i, call)").replace(old_run, new_run)
s += """
extern "C" void gpt2_share_weights(gpt2_model *dst, const gpt2_model *src) { dst->weights = src->weights; }
extern "C" void gpt2_zero_arena(gpt2_model *m) {
  cudaMemset(m->arena, 0, gpt2_arena_bytes(m));
  cudaDeviceSynchronize();
}
"""
open(p, "w").write(s)

# the decode attention as $LANES_ATTN says, "NW:BLOCKS" (read at each launch, so at each capture):
# blocks of NW warps (16, 8 or 4); BLOCKS of them looping over the rows (persistent), leaving the SMs
# they do not take to the other lanes' kernels, or a block a row when BLOCKS is 0
p = p.replace("gpt2.cu", "kernels/attention_decode.cuh")
s = open(p).read()
old_row = "  const int row = blockIdx.x / P; /* (b * heads + h) * T + i */\n"
old_end = ("    nnc_attn::copy_new_rows<false>(a, b, g, true, threadIdx.x, NW * 32, ROPE && a.rope_k ? rk : nullptr);\n}\n")
old_launch = "  /* rope folded in: the variant that rotates as it reads"
assert s.count(old_row) == 1 and s.count(old_end) == 1 and s.count(old_launch) == 1
s = s.replace(old_row, "  for (int row_ = blockIdx.x; row_ < a.batch * a.heads * a.T * P; row_ += gridDim.x) {\n"
                       "  const int row = row_ / P;\n")
s = s.replace(old_end, old_end[:-2] + "  __syncthreads();   /* part[] is the next row's */\n  }\n}\n")
s = s.replace(old_launch, """  if (const char *la = getenv("LANES_ATTN"); la && *la && !(a.rope_q || a.rope_k)) {
    int nw = 16, nb = 132;
    sscanf(la, "%d:%d", &nw, &nb);
    const unsigned grid = (unsigned)(nb <= 0 || rows < nb ? rows : nb);
    if (nw == 4) nnc_attn_decode_groups_kernel<T, 64, 4, 4><<<grid, 4 * 32, 0, stream>>>(a);
    else if (nw == 8) nnc_attn_decode_groups_kernel<T, 64, 8, 4><<<grid, 8 * 32, 0, stream>>>(a);
    else nnc_attn_decode_groups_kernel<T, 64, 16, 2><<<grid, 16 * 32, 0, stream>>>(a);
    return nnc_cuda_check_launch(err, nnc_attn::KERNEL);
  }
""" + old_launch)
open(p, "w").write(s)
PY
  echo "generated and patched: $G"
}

# SKINNY=1: the folder built with -DNNC_SKINNY_ROWS=64, every layer GEMM of up to 64 rows on the skinny
# GEMM (4 warps a block, room beside the attention's blocks on an SM) instead of cuBLASLt (a whole SM's
# registers a block)
run() {
  local flags=-O3
  [ "${SKINNY:-0}" = 1 ] && flags="-O3 -DNNC_SKINNY_ROWS=64"
  make -C "$G" -j16 NVCCFLAGS="$flags" > "$G/make.log" 2>&1 || { tail -30 "$G/make.log"; exit 1; }
  make -C "$G" -f Makefile -f "$ROOT/bench/gpu_decode_lanes.mk" LANES_SRC="$ROOT/bench/gpu_decode_lanes.c" decode_lanes \
    >> "$G/make.log" 2>&1 || { tail -30 "$G/make.log"; exit 1; }
  nvidia-smi --query-gpu=name --format=csv,noheader
  echo "NVCCFLAGS=$flags"
  "$G/decode_lanes"
}

"$@"
