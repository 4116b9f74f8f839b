/* compiler/ref/ref_attention_op.c — the attention op (--train) and its
 * gradient, in float64 and written the plain way: each row's scores, their
 * max and sum, the probabilities P in full; then the backward from P as the
 * textbook writes it. The fused kernels stream over key tiles and recompute
 * P from the saved log-sum-exp, so the two are independent computations. */
#include <math.h>
#include <stdlib.h>

#include "ref_internal.h"

typedef struct attn_op {
  int64_t batch, T, S, D, Dv;     /* batch: every leading dim together */
  int64_t mask_rows;              /* the mask's rows: the leading dim's length */
} attn_op;

static nnc_status dims_of(const nnc_ref *r, const nnc_node *n, attn_op *a, nnc_error *err) {
  nnc_ref_shape q = nnc_ref_shape_of(r, n->in[0]), k = nnc_ref_shape_of(r, n->in[1]);
  nnc_ref_shape v = nnc_ref_shape_of(r, n->in[2]);
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  if (q.rank < 2 || k.rank != q.rank || v.rank != q.rank)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected q, k and v of one rank >= 2, found %s, %s and %s",
                             nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->in[1], d2),
                             nnc_ref_desc(r, n->in[2], d3));
  int rk = q.rank;
  a->T = q.d[rk - 2];
  a->D = q.d[rk - 1];
  a->S = k.d[rk - 2];
  a->Dv = v.d[rk - 1];
  a->batch = 1;
  for (int i = 0; i < rk - 2; i++) a->batch *= q.d[i];
  a->mask_rows = rk > 2 ? q.d[0] : 1;
  return NNC_OK;
}

/* Row t of one (batch, head) whose mask row is b: the scaled, masked scores
 * s[0..S) (-inf where masked); returns their log-sum-exp (+inf when every
 * key is masked). */
static double row_scores(const nnc_node *n, const attn_op *a, const double *qm, const double *km,
                         const double *mask, int64_t b, int64_t t, double *s) {
  double scale = n->attrs.scalar, mx = -INFINITY;
  for (int64_t j = 0; j < a->S; j++) {
    bool gone = (n->attrs.causal && j > t + (a->S - a->T)) || (mask && mask[b * a->S + j] == 0);
    double x = 0;
    for (int64_t c = 0; c < a->D; c++) x += qm[t * a->D + c] * km[j * a->D + c];
    s[j] = gone ? -INFINITY : x * scale;
    if (s[j] > mx) mx = s[j];
  }
  if (mx == -INFINITY) return INFINITY;
  double sum = 0;
  for (int64_t j = 0; j < a->S; j++) sum += exp(s[j] - mx);
  return mx + log(sum);
}

/* in: q, k, v, [mask]; out: o, lse */
nnc_status nnc_ref_op_attention(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  attn_op a;
  const double *q, *k, *v, *mask = NULL;
  double *o, *lse;
  nnc_status st = dims_of(r, n, &a, err);
  if (!st) st = nnc_ref_need(r, n, n->in[0], &q, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &k, err);
  if (!st) st = nnc_ref_need(r, n, n->in[2], &v, err);
  if (!st && n->nin == 4) st = nnc_ref_need(r, n, n->in[3], &mask, err);
  if (!st) st = nnc_ref_out(r, n, 0, &o, err);
  if (!st) st = nnc_ref_out(r, n, 1, &lse, err);
  if (st) return st;
  double *s = malloc((size_t)(a.S > 0 ? a.S : 1) * sizeof *s);
  if (!s) return nnc_ref_node_fail(r, n, NNC_E_NOMEM, err, "out of memory");
  for (int64_t p = 0; p < a.batch; p++) {
    int64_t b = p / (a.batch / a.mask_rows);
    const double *qm = q + p * a.T * a.D, *km = k + p * a.S * a.D, *vm = v + p * a.S * a.Dv;
    for (int64_t t = 0; t < a.T; t++) {
      double l = row_scores(n, &a, qm, km, mask, b, t, s);
      lse[p * a.T + t] = l;
      double *orow = o + (p * a.T + t) * a.Dv;
      for (int64_t c = 0; c < a.Dv; c++) orow[c] = 0;
      if (l == INFINITY) continue;   /* every key masked: zeros */
      for (int64_t j = 0; j < a.S; j++) {
        double w = exp(s[j] - l);
        for (int64_t c = 0; c < a.Dv; c++) orow[c] += w * vm[j * a.Dv + c];
      }
    }
  }
  free(s);
  return NNC_OK;
}

/* in: q, k, v, o, lse, do, [mask]; out: dq, dk, dv. P is recomputed with
 * the reference's own log-sum-exp (the saved one is the forward kernel's
 * business); dS = P * (dP - rowsum(P * dP)), the softmax's VJP, whose row
 * sum equals rowsum(do * o). */
nnc_status nnc_ref_op_attention_grad(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  attn_op a;
  const double *q, *k, *v, *dout, *mask = NULL;
  double *dq, *dk, *dv;
  nnc_status st = dims_of(r, n, &a, err);
  if (!st) st = nnc_ref_need(r, n, n->in[0], &q, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &k, err);
  if (!st) st = nnc_ref_need(r, n, n->in[2], &v, err);
  if (!st) st = nnc_ref_need(r, n, n->in[5], &dout, err);
  if (!st && n->nin == 7) st = nnc_ref_need(r, n, n->in[6], &mask, err);
  if (!st) st = nnc_ref_out(r, n, 0, &dq, err);
  if (!st) st = nnc_ref_out(r, n, 1, &dk, err);
  if (!st) st = nnc_ref_out(r, n, 2, &dv, err);
  if (st) return st;
  size_t S1 = (size_t)(a.S > 0 ? a.S : 1);
  double *s = malloc(S1 * sizeof *s), *dp = malloc(S1 * sizeof *dp);
  if (!s || !dp) {
    free(s);
    free(dp);
    return nnc_ref_node_fail(r, n, NNC_E_NOMEM, err, "out of memory");
  }
  double scale = n->attrs.scalar;
  for (int64_t p = 0; p < a.batch; p++) {
    int64_t b = p / (a.batch / a.mask_rows);
    const double *qm = q + p * a.T * a.D, *km = k + p * a.S * a.D, *vm = v + p * a.S * a.Dv;
    const double *dom = dout + p * a.T * a.Dv;
    double *dqm = dq + p * a.T * a.D, *dkm = dk + p * a.S * a.D, *dvm = dv + p * a.S * a.Dv;
    for (int64_t t = 0; t < a.T; t++) {
      double l = row_scores(n, &a, qm, km, mask, b, t, s);
      if (l == INFINITY) continue;
      double rowsum = 0;
      for (int64_t j = 0; j < a.S; j++) {
        s[j] = exp(s[j] - l);   /* now P */
        double x = 0;
        for (int64_t c = 0; c < a.Dv; c++) x += dom[t * a.Dv + c] * vm[j * a.Dv + c];
        dp[j] = x;
        rowsum += s[j] * x;
      }
      for (int64_t j = 0; j < a.S; j++) {
        if (s[j] == 0) continue;
        double ds = s[j] * (dp[j] - rowsum) * scale;
        for (int64_t c = 0; c < a.Dv; c++) dvm[j * a.Dv + c] += s[j] * dom[t * a.Dv + c];
        for (int64_t c = 0; c < a.D; c++) {
          dqm[t * a.D + c] += ds * km[j * a.D + c];
          dkm[j * a.D + c] += ds * qm[t * a.D + c];
        }
      }
    }
  }
  free(s);
  free(dp);
  return NNC_OK;
}
