/* compiler/tune/tune_opencl.c — tile rules of the OpenCL targets.
 *
 * GEMM: a 16x16 work-group (8x8 where the device allows fewer than 256
 * work-items), each item computing 4x4 of C, or 2x2 while the groups do not
 * cover the compute units; a K step whose A and B tiles take at most half
 * of local memory (two groups a compute unit), 8 to 64 floats.
 * Attention: 32 queries a group, the largest key block (16 to 64) whose K
 * and V tiles, Q tile and scores fit half of local memory.
 * Rows: one group a row on a GPU; on a CPU, rows a group as the C SIMD rule
 * (32 KiB a group, four groups a compute unit). */
#include <stdio.h>
#include <string.h>

#include "tune_rules.h"

#define CLAMP nnc_tune_clamp
#define CEIL_DIV nnc_tune_ceil_div
#define ROUND_UP nnc_tune_round_up
#define ROUND_DOWN nnc_tune_round_down

static void tune_gemm(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  const nnc_opencl_desc *d = &t->opencl;
  nnc_gemm_size z = nnc_tune_gemm_size(s, k);
  int64_t batch = z.batch > 0 ? z.batch : 1;
  int side = d->max_work_group >= 256 ? 16 : 8;
  int per = 4;
  if (batch * CEIL_DIV(z.m, side * per) * CEIL_DIV(z.n, side * per) < d->compute_units) per = 2;
  int bm = side * per, bn = side * per;
  int64_t bk = ROUND_DOWN(d->local_mem / 2 / ((int64_t)(bm + bn) * 4), 8);
  bk = CLAMP(bk, 8, 64);
  bk = CLAMP(bk, 8, ROUND_UP(z.k > 0 ? z.k : 1, 8));
  o->block_m = bm;
  o->block_n = bn;
  o->block_k = (int)bk;
  o->group = side * side;
  char note[32];
  snprintf(o->reason, sizeof o->reason,
           "gemm M=%lld N=%lld K=%lld%s: work-group %dx%d items x %dx%d each = %dx%d of C (%lld groups for "
           "%d compute units); bk=%d: A and B tiles %lld KiB of local memory %lld KiB",
           (long long)z.m, (long long)z.n, (long long)z.k, nnc_tune_batch_note(batch, note, sizeof note),
           side, side, per, per, bm, bn,
           (long long)(batch * CEIL_DIV(z.m, bm) * CEIL_DIV(z.n, bn)), d->compute_units, o->block_k,
           (long long)((int64_t)(bm + bn) * bk * 4 >> 10), (long long)(d->local_mem >> 10));
}

static void tune_attention(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  const nnc_opencl_desc *d = &t->opencl;
  nnc_attn_size z = nnc_tune_attn_size(s, k);
  int bq = 32, bk = 64;
  int64_t bytes = 4 * (bq * z.d + (int64_t)bk * (z.d + z.dv) + (int64_t)bq * bk);
  while (bk > 16 && bytes > d->local_mem / 2) {
    bk /= 2;
    bytes = 4 * (bq * z.d + (int64_t)bk * (z.d + z.dv) + (int64_t)bq * bk);
  }
  o->attn_bq = bq;
  o->attn_bk = bk;
  o->group = (int)CLAMP(bq * 4, 1, d->max_work_group);
  snprintf(o->reason, sizeof o->reason,
           "attention T=%lld S=%lld D=%lld x %lld heads: bq=%d queries a work-group of %d; bk=%d keys a step: Q, K, V "
           "tiles and scores %lld KiB of local memory %lld KiB",
           (long long)z.t, (long long)z.s, (long long)z.d, (long long)z.heads, bq, o->group, bk,
           (long long)(bytes >> 10), (long long)(d->local_mem >> 10));
}

static void tune_rows(const nnc_target_desc *t, const nnc_schedule *s, const nnc_kernel *k, nnc_tile *o) {
  const nnc_opencl_desc *d = &t->opencl;
  nnc_rows_size z = nnc_tune_rows_size(s, k);
  int64_t cols = z.cols > 0 ? z.cols : 1, rows = z.rows > 0 ? z.rows : 1;
  int simd = d->simd_width > 0 ? d->simd_width : 1;
  o->group = (int)CLAMP(ROUND_UP(CEIL_DIV(cols, 4), simd), simd, d->max_work_group < 256 ? d->max_work_group : 256);
  if (d->device == NNC_DEVICE_CPU) {
    int64_t by_size = CEIL_DIV(8192, cols), by_units = CEIL_DIV(rows, 4 * (int64_t)d->compute_units);
    o->row_block = (int)CLAMP(by_size > by_units ? by_size : by_units, 1, rows);
  } else {
    o->row_block = 1;
  }
  snprintf(o->reason, sizeof o->reason, "%s %lld rows x %lld: %d rows a work-group of %d items (%s)",
           nnc_kernel_kind_name(k->kind), (long long)z.rows, (long long)z.cols, o->row_block, o->group,
           d->device == NNC_DEVICE_CPU ? "CPU: at least 32 KiB a group, up to 4 groups a compute unit"
                                       : "GPU: a group a row, 4 floats an item");
}

nnc_status nnc_tune_opencl(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_tile *out,
                           nnc_error *err) {
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
    int vec = t->opencl.preferred_vector_width > 0 ? t->opencl.preferred_vector_width : 1;
    out->group = t->opencl.max_work_group < 256 ? t->opencl.max_work_group : 256;
    out->ew_chunk = (int64_t)out->group * 4 * vec;
    snprintf(out->reason, sizeof out->reason,
             "%s %lld elements: work-groups of %d items x 4 vectors of %d floats", nnc_kernel_kind_name(kn->kind),
             (long long)(z.rows * z.cols), out->group, vec);
    return NNC_OK;
  }
  default:
    tune_rows(t, s, kn, out);
    return NNC_OK;
  }
}

void nnc_explain_opencl(FILE *f, const nnc_target_desc *t) {
  fprintf(f, "target %s: %s device (class defaults), %d compute units, local memory %lld KiB, work-groups up to %d, "
             "float vectors of %d\n",
          t->name, t->isa, t->opencl.compute_units, (long long)(t->opencl.local_mem >> 10),
          t->opencl.max_work_group, t->opencl.preferred_vector_width);
}
