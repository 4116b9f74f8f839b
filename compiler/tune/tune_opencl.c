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
 * Attention: queries a work-group and keys a step (attention_candidates).
 * Rows (softmax, norms, a GEMM prologue's statistics): a group a row, its
 * size by the row's length and the device class, then smaller powers of two.
 * Loop kernels: 256 items a group on a GPU, 64 on a CPU, then smaller. */
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

static nnc_ocl_choice *add(nnc_ocl_list *l) {
  nnc_ocl_choice *c = &l->c[l->n++];
  memset(c, 0, sizeof *c);
  return c;
}

static void gemm_gpu(const nnc_gemm_size *z, nnc_ocl_list *l) {
  static const int sides[] = {16, 8, 4}, pers[] = {4, 2}, steps[] = {64, 32, 16, 8};
  int64_t batch = z->batch > 0 ? z->batch : 1, kmax = ROUND_UP(z->k > 0 ? z->k : 1, 8);
  for (int si = 0; si < 3; si++)
    for (int pi = 0; pi < 2; pi++) {
      int side = sides[si], per = pers[pi], tile = side * per;
      int64_t groups = batch * CEIL_DIV(z->m, tile) * CEIL_DIV(z->n, tile);
      for (int ki = 0; ki < 4; ki++) {
        if (steps[ki] > kmax && steps[ki] > 8) continue;
        nnc_ocl_choice *c = add(l);
        c->v[NNC_OCL_VW] = 1;
        c->v[NNC_OCL_WM] = c->v[NNC_OCL_WN] = per;
        c->v[NNC_OCL_LM] = c->v[NNC_OCL_LN] = side;
        c->v[NNC_OCL_KC] = steps[ki];
        c->need.local = 2 * (int64_t)(2 * tile) * steps[ki] * 4;
        c->need.group = side * side;
        c->need.max_units = per == 4 ? (int)CLAMP(groups, 1, 1 << 30) : 0;
      }
    }
}

static void gemm_cpu(const nnc_gemm_size *z, nnc_ocl_list *l) {
  static const int widths[] = {16, 8, 4};
  static const int shapes[][2] = {{8, 8}, {4, 8}, {4, 4}, {2, 4}, {2, 2}, {1, 1}};
  int64_t batch = z->batch > 0 ? z->batch : 1;
  for (int wi = 0; wi < 3; wi++) {
    int vw = widths[wi], mr = 6, nr = 2 * vw;
    int kc = (int)CLAMP(ROUND_UP(z->k > 0 ? z->k : 1, vw), vw, 256);
    /* no more items along an axis than the problem has blocks */
    int64_t lm_max = pow2_at_least(CEIL_DIV(z->m > 0 ? z->m : 1, mr));
    int64_t ln_max = pow2_at_least(CEIL_DIV(z->n > 0 ? z->n : 1, nr));
    int first = l->n;
    for (int si = 0; si < 6; si++) {
      int lm = (int)CLAMP(shapes[si][0], 1, lm_max), ln = (int)CLAMP(shapes[si][1], 1, ln_max);
      if (l->n > first && l->c[l->n - 1].v[NNC_OCL_LM] == lm && l->c[l->n - 1].v[NNC_OCL_LN] == ln) continue;
      nnc_ocl_choice *c = add(l);
      c->v[NNC_OCL_VW] = vw;
      c->v[NNC_OCL_WM] = mr;
      c->v[NNC_OCL_WN] = nr;
      c->v[NNC_OCL_LM] = lm;
      c->v[NNC_OCL_LN] = ln;
      c->v[NNC_OCL_KC] = kc;
      c->need.local = 2 * (int64_t)kc * (lm * mr + ln * nr) * 4;
      c->need.group = lm * ln;
      c->need.vector = vw == 4 ? 0 : vw;
      int64_t groups = batch * CEIL_DIV(z->m, (int64_t)lm * mr) * CEIL_DIV(z->n, (int64_t)ln * nr);
      c->need.max_units = lm * ln == 1 ? 0 : (int)CLAMP(groups / 2, 1, 1 << 30);
    }
  }
}

/* A work-group of wg items a row, then every smaller power of two down to
 * one item: the reductions go through wg floats of local memory. */
static void rows_list(int wg, nnc_ocl_list *l) {
  l->family = NNC_OCL_ROWS;
  for (int w = wg; w >= 1; w /= 2) {
    nnc_ocl_choice *c = add(l);
    c->v[NNC_OCL_WG] = w;
    c->need.local = 4 * (int64_t)w;
    c->need.group = w;
  }
}

/* Rows of cols: on a GPU a group spreads the row over items of about 8
 * floats each (32 to 256 items: a warp at least); on a CPU the group's items
 * run one after the other, so 64 at most (a row of 768 is 12 floats an
 * item, what the CPU figures of bench/NOTES.md were measured with). */
static void rows_candidates(const nnc_target_desc *t, int64_t cols, nnc_ocl_list *l) {
  cols = cols > 0 ? cols : 1;
  int wg = t->opencl.device == NNC_DEVICE_CPU ? (int)CLAMP(pow2_at_least(cols), 1, 64)
                                              : (int)CLAMP(pow2_at_least(CEIL_DIV(cols, 8)), 32, 256);
  rows_list(wg, l);
}

/* Loop kernels stride over their elements; the group only sets how the
 * driver schedules them: 256 items on a GPU, 64 on a CPU. */
static void loop_candidates(const nnc_target_desc *t, nnc_ocl_list *l) {
  rows_list(t->opencl.device == NNC_DEVICE_CPU ? 64 : 256, l);
  l->family = NNC_OCL_LOOP;
  for (int i = 0; i < l->n; i++) l->c[i].need.local = 0;
}

void nnc_opencl_attn_dmax(const nnc_schedule *s, int k, int64_t *dmax, int64_t *dvmax) {
  const nnc_graph *g = s->g;
  const nnc_attention_desc *a = &s->k[k].d.attn;
  const nnc_tensor *q = &g->tensors[a->q], *v = &g->tensors[a->v];
  nnc_dim dq = q->shape[q->rank - 1], dv = v->shape[v->rank - 1];
  *dmax = dq.nsym == 0 && dq.k >= 1 ? dq.k : 128;
  *dvmax = dv.nsym == 0 && dv.k >= 1 ? dv.k : 128;
}

/* Queries a group (one a work-item) times keys staged a step, best first.
 * GPU: 64 queries (two warps), then fewer; 32 keys, then 16 and 8. CPU: 16
 * queries and 64 keys a step (fewer barriers, which split a PoCL group's
 * loop), then fewer keys, then fewer queries. Never more queries or keys
 * than the problem has (a power of two above). Local memory: twice the K and
 * V tiles and the keep flags (two groups a compute unit). */
static void attention_candidates(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_ocl_list *l) {
  static const int gpu_q[] = {64, 32, 16, 8, 4, 2, 1}, gpu_k[] = {32, 16, 8};
  static const int cpu_q[] = {16, 8, 4, 2, 1}, cpu_k[] = {64, 32, 16, 8};
  bool cpu = t->opencl.device == NNC_DEVICE_CPU;
  const int *qs = cpu ? cpu_q : gpu_q, *ks = cpu ? cpu_k : gpu_k;
  int nq = cpu ? 5 : 7, nk = cpu ? 4 : 3;
  nnc_attn_size z = nnc_tune_attn_size(s, &s->k[k]);
  int64_t dmax, dvmax;
  nnc_opencl_attn_dmax(s, k, &dmax, &dvmax);
  int64_t qmax = pow2_at_least(z.t > 0 ? z.t : 1), kmax = pow2_at_least(z.s > 0 ? z.s : 1);
  l->family = NNC_OCL_ATTENTION;
  for (int qi = 0; qi < nq; qi++) {
    if (qs[qi] > qmax && qs[qi] > 1) continue;
    for (int ki = 0; ki < nk; ki++) {
      if (ks[ki] > kmax && ks[ki] > 8) continue;
      nnc_ocl_choice *c = add(l);
      c->v[NNC_OCL_BQ] = qs[qi];
      c->v[NNC_OCL_BK] = ks[ki];
      c->need.local = 2 * 4 * (int64_t)ks[ki] * (dmax + dvmax + 1);
      c->need.group = qs[qi];
    }
  }
}

const char *nnc_opencl_family_name(nnc_ocl_family f) {
  switch (f) {
  case NNC_OCL_GEMM: return "gemm";
  case NNC_OCL_ROWS: return "rows";
  case NNC_OCL_ATTENTION: return "attention";
  case NNC_OCL_LOOP: return "loop";
  default: return "none";
  }
}

int nnc_opencl_params(nnc_ocl_family f, const char *const **names) {
  static const char *const gemm[] = {"VW", "WM", "WN", "LM", "LN", "KC"}, *const wg[] = {"WG"},
                           *const att[] = {"BQ", "BK"};
  switch (f) {
  case NNC_OCL_GEMM: *names = gemm; return 6;
  case NNC_OCL_ROWS:
  case NNC_OCL_LOOP: *names = wg; return 1;
  case NNC_OCL_ATTENTION: *names = att; return 2;
  default: *names = NULL; return 0;
  }
}

void nnc_opencl_candidates(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_ocl_list *out) {
  memset(out, 0, sizeof *out);
  const nnc_kernel *kn = &s->k[k];
  switch (kn->kind) {
  case NNC_KERNEL_VIEW: return;
  case NNC_KERNEL_GEMM: {
    nnc_gemm_size z = nnc_tune_gemm_size(s, kn);
    if (z.m < 1) z.m = 1;
    if (z.n < 1) z.n = 1;
    out->family = NNC_OCL_GEMM;
    out->cpu = t->opencl.device == NNC_DEVICE_CPU;
    if (out->cpu) gemm_cpu(&z, out);
    else gemm_gpu(&z, out);
    return;
  }
  case NNC_KERNEL_ATTENTION: attention_candidates(t, s, k, out); return;
  case NNC_KERNEL_ROW: {
    const nnc_node *n = &s->g->nodes[kn->nodes[0]];
    const nnc_tensor *in = &s->g->tensors[n->in[0]];
    if (n->op != NNC_OP_SOFTMAX || n->attrs.axis == in->rank - 1) {
      rows_candidates(t, nnc_tune_rows_size(s, kn).cols, out);
      return;
    }
    loop_candidates(t, out);
    return;
  }
  default: loop_candidates(t, out); return;
  }
}

void nnc_opencl_stats_candidates(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_ocl_list *out) {
  memset(out, 0, sizeof *out);
  const nnc_kernel *kn = &s->k[k];
  if (kn->kind != NNC_KERNEL_GEMM || kn->d.gemm.prologue == NNC_NORM_NONE) return;
  rows_candidates(t, nnc_tune_gemm_size(s, kn).k, out);
}

bool nnc_opencl_fits(const nnc_ocl_need *c, const nnc_opencl_desc *d) {
  return c->local <= d->local_mem && c->group <= d->max_work_group && c->vector <= d->preferred_vector_width &&
         (c->max_units == 0 || d->compute_units <= c->max_units);
}

int nnc_opencl_pick(const nnc_ocl_list *l, const nnc_opencl_desc *d) {
  for (int i = 0; i < l->n; i++)
    if (nnc_opencl_fits(&l->c[i].need, d)) return i;
  return l->n > 0 ? l->n - 1 : 0;
}

static void tune_gemm(const nnc_target_desc *t, const nnc_schedule *s, int ki, nnc_tile *o) {
  const nnc_opencl_desc *d = &t->opencl;
  nnc_gemm_size z = nnc_tune_gemm_size(s, &s->k[ki]);
  int64_t batch = z.batch > 0 ? z.batch : 1;
  nnc_ocl_list l;
  nnc_opencl_candidates(t, s, ki, &l);
  int i = nnc_opencl_pick(&l, d);
  const int *v = l.c[i].v;
  o->mr = v[NNC_OCL_WM];
  o->nr = v[NNC_OCL_WN];
  o->kc = v[NNC_OCL_KC];
  o->block_m = v[NNC_OCL_LM] * v[NNC_OCL_WM];
  o->block_n = v[NNC_OCL_LN] * v[NNC_OCL_WN];
  o->block_k = v[NNC_OCL_KC];
  o->group = v[NNC_OCL_LM] * v[NNC_OCL_LN];
  char note[32];
  int64_t groups = batch * CEIL_DIV(z.m, o->block_m) * CEIL_DIV(z.n, o->block_n);
  if (l.cpu)
    snprintf(o->reason, sizeof o->reason,
             "gemm M=%lld N=%lld K=%lld%s: packed vectors of %d floats, %dx%d of C an item, %dx%d items = %dx%d of C "
             "a group (%lld groups for %d compute units); K steps of %d: packed A and B %lld KiB of local memory "
             "%lld KiB; candidate %d of %d, create picks again from the device's values",
             (long long)z.m, (long long)z.n, (long long)z.k, nnc_tune_batch_note(batch, note, sizeof note),
             v[NNC_OCL_VW], o->mr, o->nr, v[NNC_OCL_LM], v[NNC_OCL_LN], o->block_m, o->block_n, (long long)groups,
             d->compute_units, o->kc, (long long)(l.c[i].need.local / 2 >> 10), (long long)(d->local_mem >> 10),
             i + 1, l.n);
  else
    snprintf(o->reason, sizeof o->reason,
             "gemm M=%lld N=%lld K=%lld%s: work-group %dx%d items x %dx%d each = %dx%d of C (%lld groups for "
             "%d compute units); bk=%d: A and B tiles %lld KiB of local memory %lld KiB; candidate %d of %d, "
             "create picks again from the device's values",
             (long long)z.m, (long long)z.n, (long long)z.k, nnc_tune_batch_note(batch, note, sizeof note),
             v[NNC_OCL_LN], v[NNC_OCL_LM], o->mr, o->nr, o->block_m, o->block_n, (long long)groups,
             d->compute_units, o->kc, (long long)(l.c[i].need.local / 2 >> 10), (long long)(d->local_mem >> 10),
             i + 1, l.n);
}

static void tune_attention(const nnc_target_desc *t, const nnc_schedule *s, int ki, nnc_tile *o) {
  const nnc_opencl_desc *d = &t->opencl;
  nnc_attn_size z = nnc_tune_attn_size(s, &s->k[ki]);
  nnc_ocl_list l;
  nnc_opencl_candidates(t, s, ki, &l);
  int i = nnc_opencl_pick(&l, d);
  o->attn_bq = l.c[i].v[NNC_OCL_BQ];
  o->attn_bk = l.c[i].v[NNC_OCL_BK];
  o->group = o->attn_bq;
  snprintf(o->reason, sizeof o->reason,
           "attention T=%lld S=%lld D=%lld x %lld heads: bq=%d queries a work-group of %d items; bk=%d keys a "
           "step: K and V tiles %lld KiB of local memory %lld KiB; candidate %d of %d, create picks again from "
           "the device's values",
           (long long)z.t, (long long)z.s, (long long)z.d, (long long)z.heads, o->attn_bq, o->group, o->attn_bk,
           (long long)(l.c[i].need.local / 2 >> 10), (long long)(d->local_mem >> 10), i + 1, l.n);
}

/* Row kernels (a group a row) and loop kernels (a group of items striding
 * over the elements). */
static void tune_group(const nnc_target_desc *t, const nnc_schedule *s, int ki, nnc_tile *o) {
  const nnc_kernel *k = &s->k[ki];
  nnc_rows_size z = nnc_tune_rows_size(s, k);
  nnc_ocl_list l;
  nnc_opencl_candidates(t, s, ki, &l);
  int i = nnc_opencl_pick(&l, &t->opencl);
  o->group = l.c[i].v[NNC_OCL_WG];
  if (l.family == NNC_OCL_ROWS) {
    o->row_block = 1;
    snprintf(o->reason, sizeof o->reason,
             "%s %lld rows x %lld: a work-group of %d items a row (%s); candidate %d of %d, create picks again "
             "from the device's values",
             nnc_kernel_kind_name(k->kind), (long long)z.rows, (long long)z.cols, o->group,
             t->opencl.device == NNC_DEVICE_CPU ? "CPU: at most 64, the items run in turn"
                                                : "GPU: about 8 floats an item, a warp at least",
             i + 1, l.n);
    return;
  }
  snprintf(o->reason, sizeof o->reason,
           "%s %lld elements: work-groups of %d items striding over them; candidate %d of %d, create picks again "
           "from the device's values",
           nnc_kernel_kind_name(k->kind), (long long)(z.rows * z.cols), o->group, i + 1, l.n);
}

nnc_status nnc_tune_opencl(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_tile *out,
                           nnc_error *err) {
  memset(out, 0, sizeof *out);
  switch (s->k[k].kind) {
  case NNC_KERNEL_GEMM:
    tune_gemm(t, s, k, out);
    return NNC_OK;
  case NNC_KERNEL_ATTENTION:
    tune_attention(t, s, k, out);
    return NNC_OK;
  case NNC_KERNEL_VIEW:
    snprintf(out->reason, sizeof out->reason, "view: no work, aliases its input");
    return NNC_OK;
  default:
    tune_group(t, s, k, out);
    return NNC_OK;
  }
}

void nnc_explain_opencl(FILE *f, const nnc_target_desc *t) {
  fprintf(f, "target %s: %s device (class defaults; the model's create picks every kernel's tiles and work-group "
             "sizes again from the device it opens), %d compute units, local memory %lld KiB, work-groups up to %d, float vectors of %d\n",
          t->name, t->isa, t->opencl.compute_units, (long long)(t->opencl.local_mem >> 10),
          t->opencl.max_work_group, t->opencl.preferred_vector_width);
}
