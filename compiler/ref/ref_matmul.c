/* compiler/ref/ref_matmul.c — linear and batched matmul as plain dot products. */
#include "ref_internal.h"

nnc_status nnc_ref_op_linear(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x, *w, *bias = NULL;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &w, err);
  if (!st && n->nin > 2) st = nnc_ref_need(r, n, n->in[2], &bias, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sw = nnc_ref_shape_of(r, n->in[1]);
  nnc_ref_shape sy = nnc_ref_shape_of(r, n->out[0]);
  bool in_out = n->attrs.weight_in_out;
  if (sx.rank < 1 || sw.rank != 2)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected x [...,K] and a 2-d weight, found %s and %s",
                             nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->in[1], d2));
  int64_t K = sx.d[sx.rank - 1], N = in_out ? sw.d[1] : sw.d[0];
  if ((in_out ? sw.d[0] : sw.d[1]) != K)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "input %s has %lld features, weight %s expects %lld",
                             nnc_ref_desc(r, n->in[0], d1), (long long)K, nnc_ref_desc(r, n->in[1], d2),
                             (long long)(in_out ? sw.d[0] : sw.d[1]));
  nnc_ref_shape want = sx;
  want.d[want.rank - 1] = N;
  if (!nnc_ref_shape_eq(&want, &sy))
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected an output [...,%lld] for %s, found %s",
                             (long long)N, nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->out[0], d3));
  if (bias) {
    nnc_ref_shape sb = nnc_ref_shape_of(r, n->in[2]);
    if (nnc_ref_shape_elems(&sb) != N)
      return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected a bias of %lld values, found %s",
                               (long long)N, nnc_ref_desc(r, n->in[2], d1));
  }
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  int64_t M = K ? nnc_ref_shape_elems(&sx) / K : nnc_ref_shape_elems(&sy) / (N ? N : 1);
  /* y starts zeroed; both layouts sum over k in increasing order, each walking
   * its weight's rows contiguously */
  for (int64_t m = 0; m < M; m++) {
    double *ym = y + m * N;
    if (in_out) {
      for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) ym[j] += x[m * K + k] * w[k * N + j];
    } else {
      for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) ym[j] += x[m * K + k] * w[j * K + k];
    }
    for (int64_t j = 0; j < N; j++) ym[j] += bias ? bias[j] : 0.0;
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_matmul(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *a, *b;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &a, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &b, err);
  if (st) return st;
  nnc_ref_shape sa = nnc_ref_shape_of(r, n->in[0]), sb = nnc_ref_shape_of(r, n->in[1]);
  nnc_ref_shape sy = nnc_ref_shape_of(r, n->out[0]);
  if (sa.rank < 2 || sb.rank < 2 || sa.d[sa.rank - 1] != sb.d[sb.rank - 2])
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected a [...,M,K] . b [...,K,N], found %s and %s",
                             nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->in[1], d2));
  int64_t M = sa.d[sa.rank - 2], K = sa.d[sa.rank - 1], N = sb.d[sb.rank - 1];
  nnc_ref_shape ba = {.rank = sa.rank - 2}, bb = {.rank = sb.rank - 2}, by;
  for (int i = 0; i < ba.rank; i++) ba.d[i] = sa.d[i];
  for (int i = 0; i < bb.rank; i++) bb.d[i] = sb.d[i];
  bool ok = nnc_ref_broadcast(&ba, &bb, &by) && sy.rank == by.rank + 2 && sy.d[sy.rank - 2] == M &&
            sy.d[sy.rank - 1] == N;
  for (int i = 0; ok && i < by.rank; i++) ok = sy.d[i] == by.d[i];
  if (!ok)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %s to be the batched product of %s and %s",
                             nnc_ref_desc(r, n->out[0], d3), nnc_ref_desc(r, n->in[0], d1),
                             nnc_ref_desc(r, n->in[1], d2));
  int64_t sta[NNC_MAX_RANK], stb[NNC_MAX_RANK], idx[NNC_MAX_RANK];
  nnc_ref_bcast_strides(&ba, &by, sta);
  nnc_ref_bcast_strides(&bb, &by, stb);
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  int64_t batches = nnc_ref_shape_elems(&by);
  for (int64_t p = 0; p < batches; p++) {
    nnc_ref_unravel(&by, p, idx);
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < by.rank; d++) {
      oa += idx[d] * sta[d];
      ob += idx[d] * stb[d];
    }
    const double *am = a + oa * M * K, *bm = b + ob * K * N;
    double *ym = y + p * M * N;
    for (int64_t i = 0; i < M; i++)   /* ym starts zeroed; k in increasing order */
      for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) ym[i * N + j] += am[i * K + k] * bm[k * N + j];
  }
  return NNC_OK;
}
