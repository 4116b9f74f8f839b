/* compiler/tune/tune_opencl.c — tile rules of the OpenCL targets.
 *
 * GEMM (a list of candidates, tune_opencl.h; the first the device meets):
 *   GPU way: 16x16 work-items, else 8x8, else 4x4 (the work-group limit);
 *   each item 4x4 of C, or 2x2 while the groups at 4x4 do not cover the
 *   compute units; a K step of 64, 32, 16 or 8 whose A and B tiles take at
 *   most half of local memory (two groups a compute unit).
 *   CPU way: vectors of 16, 8 or 4 floats (the largest the device prefers);
 *   each item 6 rows x 2 vectors of C (12 accumulators, as the C SIMD
 *   micro-kernel); 8x8 items a group, else 4x8, 4x4, 2x4, 2x2, 1x1, the
 *   first whose packed A and B (256 K steps) take at most half of local
 *   memory (the L2 a PoCL group's loop runs in) and that leaves at least
 *   two groups a compute unit.
 * Attention: 32 queries a group, the largest key block (16 to 64) whose K
 * and V tiles, Q tile and scores fit half of local memory.
 * Rows: one group a row on a GPU; on a CPU, rows a group as the C SIMD rule
 * (32 KiB a group, four groups a compute unit). */
#include <stdio.h>
#include <string.h>

#include "tune_opencl.h"
#include "tune_rules.h"

#define CLAMP nnc_tune_clamp
#define CEIL_DIV nnc_tune_ceil_div
#define ROUND_UP nnc_tune_round_up
#define ROUND_DOWN nnc_tune_round_down

static int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

static int gpu_candidates(const nnc_gemm_size *z, nnc_ocl_gemm_tile *out) {
  static const int sides[] = {16, 8, 4}, pers[] = {4, 2}, steps[] = {64, 32, 16, 8};
  int64_t batch = z->batch > 0 ? z->batch : 1, kmax = ROUND_UP(z->k > 0 ? z->k : 1, 8);
  int n = 0;
  for (int si = 0; si < 3; si++)
    for (int pi = 0; pi < 2; pi++) {
      int side = sides[si], per = pers[pi], tile = side * per;
      int64_t groups = batch * CEIL_DIV(z->m, tile) * CEIL_DIV(z->n, tile);
      for (int ki = 0; ki < 4; ki++) {
        if (steps[ki] > kmax && steps[ki] > 8) continue;
        nnc_ocl_gemm_tile *c = &out[n++];
        memset(c, 0, sizeof *c);
        c->vw = 1;
        c->wm = c->wn = per;
        c->lm = c->ln = side;
        c->kc = steps[ki];
        c->need_local = 2 * (int64_t)(2 * tile) * c->kc * 4;
        c->need_group = side * side;
        c->max_units = per == 4 ? (int)CLAMP(groups, 1, 1 << 30) : 0;
      }
    }
  return n;
}

static int cpu_candidates(const nnc_gemm_size *z, nnc_ocl_gemm_tile *out) {
  static const int widths[] = {16, 8, 4};
  static const int shapes[][2] = {{8, 8}, {4, 8}, {4, 4}, {2, 4}, {2, 2}, {1, 1}};
  int64_t batch = z->batch > 0 ? z->batch : 1;
  int n = 0;
  for (int wi = 0; wi < 3; wi++) {
    int vw = widths[wi], mr = 6, nr = 2 * vw;
    int kc = (int)CLAMP(ROUND_UP(z->k > 0 ? z->k : 1, vw), vw, 256);
    /* no more items along an axis than the problem has blocks */
    int64_t lm_max = pow2_at_least(CEIL_DIV(z->m > 0 ? z->m : 1, mr));
    int64_t ln_max = pow2_at_least(CEIL_DIV(z->n > 0 ? z->n : 1, nr));
    int first = n;
    for (int si = 0; si < 6; si++) {
      int lm = (int)CLAMP(shapes[si][0], 1, lm_max), ln = (int)CLAMP(shapes[si][1], 1, ln_max);
      if (n > first && out[n - 1].lm == lm && out[n - 1].ln == ln) continue;
      nnc_ocl_gemm_tile *c = &out[n++];
      memset(c, 0, sizeof *c);
      c->cpu = 1;
      c->vw = vw;
      c->wm = mr;
      c->wn = nr;
      c->lm = lm;
      c->ln = ln;
      c->kc = kc;
      c->need_local = 2 * (int64_t)kc * (lm * mr + ln * nr) * 4;
      c->need_group = lm * ln;
      c->need_vector = vw == 4 ? 0 : vw;
      int64_t groups = batch * CEIL_DIV(z->m, (int64_t)lm * mr) * CEIL_DIV(z->n, (int64_t)ln * nr);
      c->max_units = lm * ln == 1 ? 0 : (int)CLAMP(groups / 2, 1, 1 << 30);
    }
  }
  return n;
}

int nnc_opencl_gemm_candidates(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_ocl_gemm_tile *out) {
  nnc_gemm_size z = nnc_tune_gemm_size(s, &s->k[k]);
  if (z.m < 1) z.m = 1;
  if (z.n < 1) z.n = 1;
  return t->opencl.device == NNC_DEVICE_CPU ? cpu_candidates(&z, out) : gpu_candidates(&z, out);
}

bool nnc_opencl_gemm_fits(const nnc_ocl_gemm_tile *c, const nnc_opencl_desc *d) {
  return c->need_local <= d->local_mem && c->need_group <= d->max_work_group &&
         c->need_vector <= d->preferred_vector_width && (c->max_units == 0 || d->compute_units <= c->max_units);
}

int nnc_opencl_gemm_pick(const nnc_ocl_gemm_tile *c, int n, const nnc_opencl_desc *d) {
  for (int i = 0; i < n; i++)
    if (nnc_opencl_gemm_fits(&c[i], d)) return i;
  return n - 1;
}

static void tune_gemm(const nnc_target_desc *t, const nnc_schedule *s, int ki, nnc_tile *o) {
  const nnc_opencl_desc *d = &t->opencl;
  nnc_gemm_size z = nnc_tune_gemm_size(s, &s->k[ki]);
  int64_t batch = z.batch > 0 ? z.batch : 1;
  nnc_ocl_gemm_tile c[NNC_OCL_MAX_CANDIDATES];
  int n = nnc_opencl_gemm_candidates(t, s, ki, c);
  int i = nnc_opencl_gemm_pick(c, n, d);
  const nnc_ocl_gemm_tile *p = &c[i];
  o->mr = p->wm;
  o->nr = p->wn;
  o->kc = p->kc;
  o->block_m = p->lm * p->wm;
  o->block_n = p->ln * p->wn;
  o->block_k = p->kc;
  o->group = p->lm * p->ln;
  char note[32];
  int64_t groups = batch * CEIL_DIV(z.m, o->block_m) * CEIL_DIV(z.n, o->block_n);
  if (p->cpu)
    snprintf(o->reason, sizeof o->reason,
             "gemm M=%lld N=%lld K=%lld%s: packed vectors of %d floats, %dx%d of C an item, %dx%d items = %dx%d of C "
             "a group (%lld groups for %d compute units); K steps of %d: packed A and B %lld KiB of local memory "
             "%lld KiB; candidate %d of %d, create picks again from the device's values",
             (long long)z.m, (long long)z.n, (long long)z.k, nnc_tune_batch_note(batch, note, sizeof note), p->vw,
             p->wm, p->wn, p->lm, p->ln, o->block_m, o->block_n, (long long)groups, d->compute_units, p->kc,
             (long long)(p->need_local / 2 >> 10), (long long)(d->local_mem >> 10), i + 1, n);
  else
    snprintf(o->reason, sizeof o->reason,
             "gemm M=%lld N=%lld K=%lld%s: work-group %dx%d items x %dx%d each = %dx%d of C (%lld groups for "
             "%d compute units); bk=%d: A and B tiles %lld KiB of local memory %lld KiB; candidate %d of %d, "
             "create picks again from the device's values",
             (long long)z.m, (long long)z.n, (long long)z.k, nnc_tune_batch_note(batch, note, sizeof note), p->ln,
             p->lm, p->wm, p->wn, o->block_m, o->block_n, (long long)groups, d->compute_units, p->kc,
             (long long)(p->need_local / 2 >> 10), (long long)(d->local_mem >> 10), i + 1, n);
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
    tune_gemm(t, s, k, out);
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
  fprintf(f, "target %s: %s device (class defaults; the model's create picks the GEMM tiles again from the device "
             "it opens), %d compute units, local memory %lld KiB, work-groups up to %d, float vectors of %d\n",
          t->name, t->isa, t->opencl.compute_units, (long long)(t->opencl.local_mem >> 10),
          t->opencl.max_work_group, t->opencl.preferred_vector_width);
}
