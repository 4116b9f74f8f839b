/* compiler/ref/ref_row.c — softmax, the norms and the reductions: ops that
 * read a whole row (one axis) to write each element. */
#include <math.h>

#include "ref_internal.h"

/* Splits shape s at axis into outer x len x inner. */
static void split_axis(const nnc_ref_shape *s, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= s->d[i];
  for (int i = axis + 1; i < s->rank; i++) *inner *= s->d[i];
  *len = s->d[axis];
}

static nnc_status want_axis(const nnc_ref *r, const nnc_node *n, const nnc_ref_shape *s, nnc_error *err) {
  char d[NNC_REF_DESC];
  if (n->attrs.axis < 0 || n->attrs.axis >= s->rank)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected an axis of 1 to %d for %s, found %d", s->rank,
                             nnc_ref_desc(r, n->in[0], d), n->attrs.axis + 1);
  return NNC_OK;
}

static nnc_status want_same_shape(const nnc_ref *r, const nnc_node *n, nnc_error *err) {
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  if (!nnc_ref_shape_eq(&sx, &sy))
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected the output shape of %s, found %s",
                             nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->out[0], d2));
  return NNC_OK;
}

nnc_status nnc_ref_op_softmax(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]);
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st) st = want_axis(r, n, &sx, err);
  if (!st) st = want_same_shape(r, n, err);
  if (!st) st = nnc_ref_out(r, n, 0, &y, err);
  if (st) return st;
  int64_t outer, len, inner;
  split_axis(&sx, n->attrs.axis, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const double *xr = x + o * len * inner + i;
      double *yr = y + o * len * inner + i;
      double max = -INFINITY, sum = 0;
      for (int64_t l = 0; l < len; l++)
        if (xr[l * inner] > max) max = xr[l * inner];
      if (max == -INFINITY) {   /* every key masked: the row is zeros */
        for (int64_t l = 0; l < len; l++) yr[l * inner] = 0;
        continue;
      }
      for (int64_t l = 0; l < len; l++) sum += exp(xr[l * inner] - max);
      for (int64_t l = 0; l < len; l++) yr[l * inner] = exp(xr[l * inner] - max) / sum;
    }
  return NNC_OK;
}

nnc_status nnc_ref_op_norm(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x, *gamma, *beta = NULL;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  bool layer = n->op == NNC_OP_LAYERNORM;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &gamma, err);
  if (!st && layer) st = nnc_ref_need(r, n, n->in[2], &beta, err);
  if (!st) st = want_same_shape(r, n, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]);
  if (sx.rank < 1)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected x of rank >= 1, found %s",
                             nnc_ref_desc(r, n->in[0], d1));
  int64_t C = sx.d[sx.rank - 1];
  for (int p = 1; p < n->nin; p++)
    if (nnc_ref_elems(r, n->in[p]) != C)
      return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %s with %lld values for %s, found %s",
                               p == 1 ? "gamma" : "beta", (long long)C, nnc_ref_desc(r, n->in[0], d1),
                               nnc_ref_desc(r, n->in[p], d2));
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  int64_t rows = C ? nnc_ref_shape_elems(&sx) / C : 0;
  for (int64_t row = 0; row < rows; row++) {
    const double *xr = x + row * C;
    double *yr = y + row * C;
    double mean = 0, var = 0;
    if (layer) {
      for (int64_t c = 0; c < C; c++) mean += xr[c];
      mean /= (double)C;
    }
    for (int64_t c = 0; c < C; c++) var += (xr[c] - mean) * (xr[c] - mean);
    var /= (double)C;
    double inv = 1.0 / sqrt(var + n->attrs.eps);
    for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] - mean) * inv * gamma[c] + (layer ? beta[c] : 0.0);
  }
  return NNC_OK;
}

/* layernorm_grad / rmsnorm_grad: per row, xhat and rstd from x, then
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma
 * (rms: no mean(g)), plus dres when given; dgamma and dbeta sum dy * xhat
 * and dy over the rows. */
nnc_status nnc_ref_op_norm_grad(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x, *gamma, *dy, *dres = NULL;
  double *dx, *dgamma, *dbeta = NULL;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  bool layer = n->op == NNC_OP_LAYERNORM_GRAD;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &gamma, err);
  if (!st) st = nnc_ref_need(r, n, n->in[2], &dy, err);
  if (!st && n->nin == 4) st = nnc_ref_need(r, n, n->in[3], &dres, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sd = nnc_ref_shape_of(r, n->in[2]);
  if (dres) {
    nnc_ref_shape sr = nnc_ref_shape_of(r, n->in[3]);
    if (!nnc_ref_shape_eq(&sx, &sr))
      return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected the residual's gradient like x, found %s",
                               nnc_ref_desc(r, n->in[3], d1));
  }
  int64_t C = sx.rank ? sx.d[sx.rank - 1] : 0;
  if (sx.rank < 1 || !nnc_ref_shape_eq(&sx, &sd) || nnc_ref_elems(r, n->in[1]) != C)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected x [...,C], gamma [C] and dy like x, found %s, %s",
                             nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->in[2], d2));
  if ((st = nnc_ref_out(r, n, 0, &dx, err)) || (st = nnc_ref_out(r, n, 1, &dgamma, err))) return st;
  if (layer && (st = nnc_ref_out(r, n, 2, &dbeta, err))) return st;
  int64_t rows = C ? nnc_ref_shape_elems(&sx) / C : 0;
  for (int64_t row = 0; row < rows; row++) {
    const double *xr = x + row * C, *dyr = dy + row * C;
    double mean = 0, var = 0, mg = 0, mgx = 0;
    if (layer) {
      for (int64_t c = 0; c < C; c++) mean += xr[c];
      mean /= (double)C;
    }
    for (int64_t c = 0; c < C; c++) var += (xr[c] - mean) * (xr[c] - mean);
    double rstd = 1.0 / sqrt(var / (double)C + n->attrs.eps);
    for (int64_t c = 0; c < C; c++) {
      double g = dyr[c] * gamma[c], xhat = (xr[c] - mean) * rstd;
      mg += g;
      mgx += g * xhat;
      dgamma[c] += dyr[c] * xhat;
      if (dbeta) dbeta[c] += dyr[c];
    }
    mg = layer ? mg / (double)C : 0.0;
    mgx /= (double)C;
    for (int64_t c = 0; c < C; c++)
      dx[row * C + c] = rstd * (dyr[c] * gamma[c] - mg - (xr[c] - mean) * rstd * mgx) + (dres ? dres[row * C + c] : 0.0);
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_reduce(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st) st = want_axis(r, n, &sx, err);
  if (st) return st;
  int axis = n->attrs.axis;
  nnc_ref_shape want = {.rank = 0};
  for (int i = 0; i < sx.rank; i++)
    if (i != axis) want.d[want.rank++] = sx.d[i];
    else if (n->attrs.keepdim) want.d[want.rank++] = 1;
  if (!nnc_ref_shape_eq(&want, &sy))
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %s to be %s reduced over axis %d%s",
                             nnc_ref_desc(r, n->out[0], d2), nnc_ref_desc(r, n->in[0], d1), axis + 1,
                             n->attrs.keepdim ? " (kept)" : "");
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  int64_t outer, len, inner;
  split_axis(&sx, axis, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const double *xr = x + o * len * inner + i;
      double acc = n->op == NNC_OP_MAX ? -INFINITY : 0.0;
      for (int64_t l = 0; l < len; l++) {
        double v = xr[l * inner];
        if (n->op == NNC_OP_MAX) acc = v > acc || isnan(v) ? v : acc;
        else acc += v;
      }
      y[o * inner + i] = n->op == NNC_OP_MEAN ? acc / (double)len : acc;
    }
  return NNC_OK;
}
