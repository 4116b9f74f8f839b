/* compiler/ref/ref_attention.c — an attention kernel from its descriptor
 * alone, with the streaming softmax of flash attention: one pass over the keys
 * keeping a running max, a running sum and an accumulator rescaled whenever
 * the max grows. The graph computes the two-pass softmax, so comparing the
 * two checks the fusion with an independent computation. */
#include <math.h>
#include <stdlib.h>

#include "ref_internal.h"

typedef struct attn_dims {
  nnc_ref_shape batch;            /* out's batch dims */
  int64_t T, S, D, Dv;
  int64_t sq[NNC_MAX_RANK], sk[NNC_MAX_RANK], sv[NNC_MAX_RANK];   /* batch strides, in matrices */
} attn_dims;

static nnc_ref_shape batch_of(const nnc_ref_shape *s) {
  nnc_ref_shape b = {.rank = s->rank - 2};
  for (int i = 0; i < b.rank; i++) b.d[i] = s->d[i];
  return b;
}

static bool shapes(const nnc_ref *r, const nnc_attention_desc *d, attn_dims *a) {
  nnc_ref_shape q = nnc_ref_shape_of(r, d->q), k = nnc_ref_shape_of(r, d->k);
  nnc_ref_shape v = nnc_ref_shape_of(r, d->v), o = nnc_ref_shape_of(r, d->out);
  if (q.rank < 2 || k.rank < 2 || v.rank < 2 || o.rank < 2) return false;
  a->T = q.d[q.rank - 2];
  a->D = q.d[q.rank - 1];
  a->S = k.d[k.rank - 2];
  a->Dv = v.d[v.rank - 1];
  if (k.d[k.rank - 1] != a->D || v.d[v.rank - 2] != a->S || o.d[o.rank - 2] != a->T || o.d[o.rank - 1] != a->Dv)
    return false;
  nnc_ref_shape bq = batch_of(&q), bk = batch_of(&k), bv = batch_of(&v), qk, all;
  a->batch = batch_of(&o);
  return nnc_ref_broadcast(&bq, &bk, &qk) && nnc_ref_broadcast(&qk, &bv, &all) &&
         nnc_ref_shape_eq(&all, &a->batch) && nnc_ref_bcast_strides(&bq, &a->batch, a->sq) &&
         nnc_ref_bcast_strides(&bk, &a->batch, a->sk) && nnc_ref_bcast_strides(&bv, &a->batch, a->sv);
}

/* The row's log-sum-exp from the running max and sum: +inf for a row whose
 * keys are all masked, so that exp(s - lse) is 0 there. */
static double row_lse(double run_max, double run_sum) { return run_sum != 0 ? run_max + log(run_sum) : INFINITY; }

/* An operand read or written through its view: element (b, h, i, c) at
 * offset + b*sb + h*sh + i*si + c of the view's base. */
typedef struct view_at {
  int64_t off, sb, sh, si;
} view_at;

static view_at eval_view(const nnc_ref *r, const nnc_attn_view *v) {
  return (view_at){nnc_dim_eval(v->offset, r->sym), nnc_dim_eval(v->sb, r->sym), nnc_dim_eval(v->sh, r->sym),
                   nnc_dim_eval(v->si, r->sym)};
}

static bool has_views(const nnc_attention_desc *d) {
  for (int i = 0; i < 4; i++)
    if (d->view[i].on) return true;
  return false;
}

/* A rope folded into the kernel (passes/fold_rope.c) as the graph runs it:
 * its x [B, H, T, D] gathered through the rope's view, then the rope node
 * itself (nnc_ref_op_rope); its output's value is the kernel's until the
 * kernel ends. */
static nnc_status run_rope(nnc_ref *r, const nnc_kernel *k, int ki, const nnc_attn_rope *ro, nnc_error *err) {
  const nnc_node *n = &r->g->nodes[ro->node];
  const double *src;
  nnc_status st = nnc_ref_kernel_operand(r, k, ki, ro->src.base, "a rope's rows", &src, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]);
  if (sx.rank != 4)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected a folded rope's x [B,H,T,D], found rank %d", sx.rank);
  double *x = nnc_ref_alloc(r, n->in[0]);
  if (!x) return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
  view_at at = eval_view(r, &ro->src);
  for (int64_t b = 0; b < sx.d[0]; b++)
    for (int64_t h = 0; h < sx.d[1]; h++)
      for (int64_t t = 0; t < sx.d[2]; t++)
        for (int64_t c = 0; c < sx.d[3]; c++)
          x[((b * sx.d[1] + h) * sx.d[2] + t) * sx.d[3] + c] = src[at.off + b * at.sb + h * at.sh + t * at.si + c];
  return nnc_ref_eval_node(r, ro->node, err);
}

/* q's folded rope, then the reshapes from its output to q (fold_rope.c
 * folds the view kernels between them), as the graph runs them. */
static nnc_status run_q_rope(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  const nnc_attention_desc *d = &k->d.attn;
  if (!d->rope[0].on) return NNC_OK;
  nnc_status st = run_rope(r, k, ki, &d->rope[0], err);
  int chain[8], n = 0, y = r->g->nodes[d->rope[0].node].out[0];
  for (int t = d->q; !st && t != y; t = r->g->nodes[chain[n - 1]].in[0]) {
    int p = r->g->tensors[t].producer;
    if (p < 0 || n == 8 || r->g->nodes[p].op != NNC_OP_RESHAPE)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected q to be its rope's output through "
                                 "reshapes, found tensor %d", t);
    chain[n++] = p;
  }
  while (!st && n > 0) st = nnc_ref_eval_node(r, chain[--n], err);
  return st;
}

/* An operand the kernel reads: q made inside it by its folded rope, or one
 * of its inputs. */
static nnc_status operand(const nnc_ref *r, const nnc_kernel *k, int ki, int t, const char *role, const double **out,
                          nnc_error *err) {
  if (k->d.attn.rope[0].on && t == k->d.attn.q && r->val[t]) {
    *out = r->val[t];
    return NNC_OK;
  }
  return nnc_ref_kernel_operand(r, k, ki, t, role, out, err);
}

/* The kv appends folded into the kernel (passes/fold_append.c), before it
 * attends: each kv_append's T rows, read through the append's view, into
 * rows S - T .. S - 1 of its cache, as nnc_ref_op_kv_append writes them;
 * with k's rope folded too (fold_rope.c), k's rows are that rope's output. */
static nnc_status run_appends(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  for (int i = 0; i < 2; i++) {
    const nnc_attn_append *a = &k->d.attn.append[i];
    if (!a->on) continue;
    const nnc_node *n = &r->g->nodes[a->node];
    const double *x;
    nnc_attn_view src = a->src;
    nnc_status st;
    if (i == 0 && k->d.attn.rope[1].on) {
      /* the rope's output, contiguous */
      st = run_rope(r, k, ki, &k->d.attn.rope[1], err);
      x = r->val[n->in[1]];
      if (!st && !x) st = nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected k's folded rope to feed its append");
      const nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[1]);
      src = (nnc_attn_view){.on = true, .offset = nnc_dim_const(0), .sb = nnc_dim_const(sx.d[1] * sx.d[2] * sx.d[3]),
                            .sh = nnc_dim_const(sx.d[2] * sx.d[3]), .si = nnc_dim_const(sx.d[3])};
    } else {
      st = nnc_ref_kernel_operand(r, k, ki, a->src.base, "a kv_append's rows", &x, err);
    }
    if (st) return st;
    double *cache = nnc_ref_alloc(r, n->in[0]);
    if (!cache) return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
    nnc_ref_shape sc = nnc_ref_shape_of(r, n->in[0]), sx = nnc_ref_shape_of(r, n->in[1]), sy = nnc_ref_shape_of(r, n->out[0]);
    int64_t B = sx.d[0], H = sx.d[1], T = sx.d[2], D = sx.d[3], C = sc.d[2], S = sy.d[2];
    if (sx.rank != 4 || S < T || S > C)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected x [B,H,T,D] with T <= S <= the cache's %lld rows, "
                                 "found rank %d, T = %lld, S = %lld", (long long)C, sx.rank, (long long)T, (long long)S);
    view_at at = eval_view(r, &src);
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++)
          for (int64_t c = 0; c < D; c++)
            cache[((b * H + h) * C + S - T + t) * D + c] = x[at.off + b * at.sb + h * at.sh + t * at.si + c];
  }
  return NNC_OK;
}

/* The heads of an operand [B, heads..., R, C]: its dims between the first
 * and the last two. */
static int64_t heads_of(const nnc_ref_shape *s) {
  int64_t h = 1;
  for (int i = 1; i < s->rank - 2; i++) h *= s->d[i];
  return h;
}

/* Attention on operands whose head split and merge were folded in
 * (passes/fold_heads.c): the same streaming softmax as below, each operand
 * read, and the output written, through its view (an operand without one:
 * its own tensor, contiguous); [B, heads..., R, C] with every dim between
 * the first and the last two a head, k and v heads each serving H / Hk
 * query heads (grouped-query attention). */
static nnc_status attention_views(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  const nnc_attention_desc *d = &k->d.attn;
  const int ops[4] = {d->q, d->k, d->v, d->out};
  const char *roles[3] = {"q", "k", "v"};
  const double *src[3], *mask = NULL;
  view_at at[4];
  nnc_status ast = run_appends(r, k, ki, err);
  if (!ast) ast = run_q_rope(r, k, ki, err);
  if (ast) return ast;
  for (int i = 0; i < 4; i++) {
    nnc_ref_shape sh = nnc_ref_shape_of(r, ops[i]);
    if (sh.rank < 4)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected every operand of a folded attention to "
                                 "have rank 4 or more, found operand %d of rank %d", i, sh.rank);
    int64_t R = sh.d[sh.rank - 2], C = sh.d[sh.rank - 1];
    at[i] = d->view[i].on ? eval_view(r, &d->view[i]) : (view_at){0, heads_of(&sh) * R * C, R * C, C};
  }
  for (int i = 0; i < 3; i++) {
    nnc_status st = operand(r, k, ki, d->view[i].on ? d->view[i].base : ops[i], roles[i], &src[i], err);
    if (st) return st;
  }
  if (d->mask >= 0) {
    nnc_status st = nnc_ref_kernel_operand(r, k, ki, d->mask, "padding mask", &mask, err);
    if (st) return st;
  }
  const int yt = d->view[3].on ? d->view[3].base : d->out;
  if (!nnc_ref_kernel_lists(k->out, k->nout, yt))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected the output view's base among the outputs");
  nnc_ref_shape q = nnc_ref_shape_of(r, d->q), kk = nnc_ref_shape_of(r, d->k), v = nnc_ref_shape_of(r, d->v);
  int64_t B = q.d[0], H = heads_of(&q), T = q.d[q.rank - 2], D = q.d[q.rank - 1], S = kk.d[kk.rank - 2];
  int64_t Dv = v.d[v.rank - 1], Hk = heads_of(&kk), G = Hk > 0 && H % Hk == 0 ? H / Hk : 0;
  if (G == 0 || heads_of(&v) != Hk)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected k and v heads dividing q's %lld, found %lld and %lld",
                               (long long)H, (long long)Hk, (long long)heads_of(&v));
  double *y = nnc_ref_alloc(r, yt), *lse = d->lse >= 0 ? nnc_ref_alloc(r, d->lse) : NULL;
  double *acc = malloc((size_t)(Dv > 0 ? Dv : 1) * sizeof *acc);
  if (!y || !acc || (d->lse >= 0 && !lse)) {
    free(acc);
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++) {
        const double *qr = src[0] + at[0].off + b * at[0].sb + h * at[0].sh + t * at[0].si;
        double run_max = -INFINITY, run_sum = 0;
        for (int64_t c = 0; c < Dv; c++) acc[c] = 0;
        for (int64_t s = 0; s < S; s++) {
          if (d->causal && s > t + (S - T)) continue;
          if (mask && mask[b * S + s] == 0) continue;
          const double *kr = src[1] + at[1].off + b * at[1].sb + h / G * at[1].sh + s * at[1].si;
          const double *vr = src[2] + at[2].off + b * at[2].sb + h / G * at[2].sh + s * at[2].si;
          double x = 0;
          for (int64_t c = 0; c < D; c++) x += qr[c] * kr[c];
          x *= d->scale;
          if (x == -INFINITY) continue;
          if (x > run_max) {
            double f = exp(run_max - x);
            run_sum *= f;
            for (int64_t c = 0; c < Dv; c++) acc[c] *= f;
            run_max = x;
          }
          double w = exp(x - run_max);
          run_sum += w;
          for (int64_t c = 0; c < Dv; c++) acc[c] += w * vr[c];
        }
        double *yr = y + at[3].off + b * at[3].sb + h * at[3].sh + t * at[3].si;
        for (int64_t c = 0; c < Dv; c++) yr[c] = run_sum != 0 ? acc[c] / run_sum : 0.0;
        if (lse) lse[(b * H + h) * T + t] = row_lse(run_max, run_sum);
      }
  free(acc);
  return NNC_OK;
}

nnc_status nnc_ref_kernel_attention(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  const nnc_attention_desc *d = &k->d.attn;
  /* folded appends and ropes come with the caches' views */
  if (has_views(d)) return attention_views(r, k, ki, err);
  const double *q, *kk, *v, *mask = NULL;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC], d4[NNC_REF_DESC];
  nnc_status st = nnc_ref_kernel_operand(r, k, ki, d->q, "q", &q, err);
  if (!st) st = nnc_ref_kernel_operand(r, k, ki, d->k, "k", &kk, err);
  if (!st) st = nnc_ref_kernel_operand(r, k, ki, d->v, "v", &v, err);
  if (!st && d->mask >= 0) st = nnc_ref_kernel_operand(r, k, ki, d->mask, "padding mask", &mask, err);
  if (st) return st;
  if (d->out < 0 || d->out >= r->g->ntensors || !nnc_ref_kernel_lists(k->out, k->nout, d->out))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected its out (tensor %d) among the kernel's "
                               "outputs", d->out);
  attn_dims a;
  if (!shapes(r, d, &a))
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected q [...,T,D], k [...,S,D], v [...,S,Dv] and "
                               "out [...,T,Dv] with broadcast batch dims, found %s, %s, %s and %s",
                               nnc_ref_desc(r, d->q, d1), nnc_ref_desc(r, d->k, d2), nnc_ref_desc(r, d->v, d3),
                               nnc_ref_desc(r, d->out, d4));
  nnc_ref_shape so = nnc_ref_shape_of(r, d->out);
  if (mask) {
    nnc_ref_shape sm = nnc_ref_shape_of(r, d->mask);
    if (sm.rank != 2 || sm.d[0] != so.d[0] || sm.d[1] != a.S)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected a padding mask [%lld,%lld], found %s",
                                 (long long)so.d[0], (long long)a.S, nnc_ref_desc(r, d->mask, d1));
  }
  double *y = nnc_ref_alloc(r, d->out), *lse = d->lse >= 0 ? nnc_ref_alloc(r, d->lse) : NULL;
  double *acc = malloc((size_t)(a.Dv > 0 ? a.Dv : 1) * sizeof *acc);
  if (!y || !acc || (d->lse >= 0 && !lse)) {
    free(acc);
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
  }
  int64_t idx[NNC_MAX_RANK], batches = nnc_ref_shape_elems(&a.batch);
  for (int64_t p = 0; p < batches; p++) {
    nnc_ref_unravel(&a.batch, p, idx);
    int64_t oq = 0, ok = 0, ov = 0;
    for (int i = 0; i < a.batch.rank; i++) {
      oq += idx[i] * a.sq[i];
      ok += idx[i] * a.sk[i];
      ov += idx[i] * a.sv[i];
    }
    const double *qm = q + oq * a.T * a.D, *km = kk + ok * a.S * a.D, *vm = v + ov * a.S * a.Dv;
    for (int64_t t = 0; t < a.T; t++) {
      /* the mask's row is the index along out's dim 0: the batch, or t without batch dims */
      int64_t b = a.batch.rank ? idx[0] : t;
      double run_max = -INFINITY, run_sum = 0;
      for (int64_t c = 0; c < a.Dv; c++) acc[c] = 0;
      for (int64_t s = 0; s < a.S; s++) {
        if (d->causal && s > t + (a.S - a.T)) continue;
        if (mask && mask[b * a.S + s] == 0) continue;
        double x = 0;
        for (int64_t c = 0; c < a.D; c++) x += qm[t * a.D + c] * km[s * a.D + c];
        x *= d->scale;
        if (x == -INFINITY) continue;   /* weighs exp(-inf) = 0 */
        if (x > run_max) {
          double f = exp(run_max - x);  /* 0 for the first key */
          run_sum *= f;
          for (int64_t c = 0; c < a.Dv; c++) acc[c] *= f;
          run_max = x;
        }
        double w = exp(x - run_max);
        run_sum += w;
        for (int64_t c = 0; c < a.Dv; c++) acc[c] += w * vm[s * a.Dv + c];
      }
      double *yr = y + (p * a.T + t) * a.Dv;
      for (int64_t c = 0; c < a.Dv; c++) yr[c] = run_sum != 0 ? acc[c] / run_sum : 0.0;  /* NaN propagates */
      if (lse) lse[p * a.T + t] = row_lse(run_max, run_sum);
    }
  }
  free(acc);
  return NNC_OK;
}
