/* compiler/tune/tune_cuda.c — tile rules of the CUDA targets (f32 SIMT
 * templates; the tensor-core shapes of the description are for the
 * mixed-precision templates).
 *
 * GEMM: the largest block tile that still gives every SM a block (one full
 * wave), each thread holding up to 8x8 accumulators; a K step of 32 floats
 * (128-byte rows of A and B in shared memory); with cp.async, as many
 * stages as the opt-in shared memory holds, up to 4 (CUTLASS's Ampere
 * default); without it, two (registers stage the next tile).
 * Attention: FlashAttention-2's split, 16 query rows a warp, the Q tile and
 * double-buffered K and V tiles in shared memory.
 * Rows: a warp a row up to 1024 columns, a block a row beyond. */
#include <stdio.h>
#include <string.h>

#include "tune_rules.h"

#define CLAMP nnc_tune_clamp
#define CEIL_DIV nnc_tune_ceil_div
#define ROUND_UP nnc_tune_round_up

static void tune_gemm(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  static const int tiles[][2] = {{128, 128}, {128, 64}, {64, 64}, {32, 32}};
  const int ntiles = (int)(sizeof tiles / sizeof tiles[0]);
  nnc_gemm_size z = nnc_tune_gemm_size(s, k);
  int64_t batch = z.batch > 0 ? z.batch : 1;
  int pick = ntiles - 1;
  for (int i = 0; i < ntiles; i++)
    if (batch * CEIL_DIV(z.m, tiles[i][0]) * CEIL_DIV(z.n, tiles[i][1]) >= t->cores) {
      pick = i;
      break;
    }
  int bm = tiles[pick][0], bn = tiles[pick][1], bk = 32;
  int64_t stage = (int64_t)(bm + bn) * bk * 4;
  int stages = 2;
  if (t->cuda.cp_async) stages = (int)CLAMP(t->cuda.smem_per_block_optin / stage, 2, 4);
  int threads = (int)CLAMP(bm * bn / 64, 64, 256);
  o->block_m = bm;
  o->block_n = bn;
  o->block_k = bk;
  o->stages = stages;
  o->group = threads;
  o->warps = threads / 32;
  int64_t blocks = batch * CEIL_DIV(z.m, bm) * CEIL_DIV(z.n, bn);
  char note[32];
  snprintf(o->reason, sizeof o->reason,
           "gemm M=%lld N=%lld K=%lld%s: block %dx%d (%lld blocks for %d SMs%s); %d warps, %d accumulators "
           "a thread; bk=%d; %d stages x %lld KiB of shared memory (%lld KiB a block%s)",
           (long long)z.m, (long long)z.n, (long long)z.k, nnc_tune_batch_note(batch, note, sizeof note),
           bm, bn, (long long)blocks, t->cores,
           blocks >= t->cores ? "" : ", the smallest tile", o->warps, bm * bn / threads, bk, stages,
           (long long)(stage >> 10), (long long)(t->cuda.smem_per_block_optin >> 10),
           t->cuda.cp_async ? ", cp.async" : ", no cp.async: registers stage the next tile");
}

static void tune_attention(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  nnc_attn_size z = nnc_tune_attn_size(s, k);
  int bq = z.d <= 64 ? 128 : 64, bk = z.d <= 128 ? 64 : 32;
  /* fewer queries a block while the blocks do not cover the SMs */
  while (bq > 16 && z.heads * CEIL_DIV(z.t, bq) < t->cores) bq /= 2;
  int64_t smem = (int64_t)4 * (bq * z.d + 2 * bk * (z.d + z.dv));
  while (smem > t->cuda.smem_per_block_optin && (bk > 16 || bq > 16)) {
    if (bk > 16) bk /= 2;
    else bq /= 2;
    smem = (int64_t)4 * (bq * z.d + 2 * bk * (z.d + z.dv));
  }
  o->attn_bq = bq;
  o->attn_bk = bk;
  o->warps = bq / 16;
  o->group = o->warps * 32;
  snprintf(o->reason, sizeof o->reason,
           "attention T=%lld S=%lld D=%lld x %lld heads: bq=%d queries a block (%d warps, 16 rows each; %lld blocks "
           "for %d SMs); bk=%d keys a step; Q tile + 2 K,V tiles %lld KiB of %lld KiB a block",
           (long long)z.t, (long long)z.s, (long long)z.d, (long long)z.heads, bq, o->warps,
           (long long)(z.heads * CEIL_DIV(z.t, bq)), t->cores, bk, (long long)(smem >> 10),
           (long long)(t->cuda.smem_per_block_optin >> 10));
}

static void tune_rows(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  nnc_rows_size z = nnc_tune_rows_size(s, k);
  if (z.cols <= 1024) {
    o->row_block = 4;
    o->group = 128;
    o->warps = 4;
    snprintf(o->reason, sizeof o->reason,
             "%s %lld rows x %lld: a warp a row (%lld floats a lane), 4 rows a block of 128 threads",
             nnc_kernel_kind_name(k->kind), (long long)z.rows, (long long)z.cols, (long long)CEIL_DIV(z.cols, 32));
    return;
  }
  o->row_block = 1;
  o->group = (int)CLAMP(ROUND_UP(CEIL_DIV(z.cols, 8), 32), 128, t->cuda.max_threads_per_block);
  o->warps = o->group / 32;
  snprintf(o->reason, sizeof o->reason,
           "%s %lld rows x %lld: a block of %d threads a row, at least 8 floats a thread",
           nnc_kernel_kind_name(k->kind), (long long)z.rows, (long long)z.cols, o->group);
}

nnc_status nnc_tune_cuda(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_tile *out, nnc_error *err) {
  memset(out, 0, sizeof *out);
  const nnc_kernel *kn = &s->k[k];
  switch (kn->kind) {
  case NNC_KERNEL_GEMM:
    tune_gemm(t, s, kn, out);
    return NNC_OK;
  case NNC_KERNEL_ATTENTION:
    tune_attention(t, s, kn, out);
    return NNC_OK;
  case NNC_KERNEL_VIEW:
    snprintf(out->reason, sizeof out->reason, "view: no work, aliases its input");
    return NNC_OK;
  case NNC_KERNEL_ELEMENTWISE:
  case NNC_KERNEL_MOVE: {
    nnc_rows_size z = nnc_tune_rows_size(s, kn);
    out->group = 256;
    out->warps = 8;
    out->ew_chunk = 1024;
    snprintf(out->reason, sizeof out->reason,
             "%s %lld elements: blocks of 256 threads x one float4 (%lld blocks)", nnc_kernel_kind_name(kn->kind),
             (long long)(z.rows * z.cols), (long long)CEIL_DIV(z.rows * z.cols, 1024));
    return NNC_OK;
  }
  default:
    tune_rows(t, s, kn, out);
    return NNC_OK;
  }
}

void nnc_explain_cuda(FILE *f, const nnc_target_desc *t) {
  fprintf(f, "target %s: %s, %d SMs (%s), shared memory %lld KiB an SM, %lld KiB a block opted in, %d warps an "
             "SM, L2 %lld MiB%s%s%s%s\n",
          t->name, t->isa, t->cores, t->cuda.chip, (long long)(t->cuda.smem_per_sm >> 10),
          (long long)(t->cuda.smem_per_block_optin >> 10), t->cuda.max_warps_per_sm, (long long)(t->l2 >> 20),
          t->cuda.ldmatrix ? ", ldmatrix" : "", t->cuda.cp_async ? ", cp.async" : "", t->cuda.tma ? ", TMA" : "",
          t->cuda.wgmma_ok ? ", wgmma" : "");
}
