/* compiler/ref/ref_elementwise.c — unary, scalar, binary and mask ops: the
 * arithmetic of one element and the graph ops that apply it to a tensor. */
#include <math.h>

#include "ref_internal.h"

/* Rounds x to nearest-even in a binary format with `mant` fraction bits and
 * normal exponents emin..emax (subnormals below, overflow to infinity). */
static double round_format(double x, int mant, int emin, int emax) {
  if (x == 0 || !isfinite(x)) return x;
  int e = ilogb(x);
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - mant);
  double v = nearbyint(x / q) * q;
  double max = ldexp(2.0 - ldexp(1.0, -mant), emax);
  return fabs(v) > max ? copysign(INFINITY, x) : v;
}

double nnc_ref_round_to(nnc_dtype t, double x) {
  switch (t) {
  case NNC_F32: return round_format(x, 23, -126, 127);
  case NNC_F16: return round_format(x, 10, -14, 15);
  case NNC_BF16: return round_format(x, 7, -126, 127);
  case NNC_I32: return trunc(x);
  case NNC_DTYPE_COUNT: break;
  }
  return x;
}

double nnc_ref_store(nnc_dtype t, double x) { return t == NNC_I32 ? trunc(x) : x; }

double nnc_ref_gelu(double x, bool tanh_form) {
  if (tanh_form) {
    const double c = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
  }
  return 0.5 * x * (1.0 + erf(x / M_SQRT2));
}

double nnc_ref_activation(nnc_op act, bool gelu_tanh, double x) {
  switch (act) {
  case NNC_OP_RELU: return x < 0 ? 0.0 : x;
  case NNC_OP_GELU: return nnc_ref_gelu(x, gelu_tanh);
  case NNC_OP_SILU: return x / (1.0 + exp(-x));
  case NNC_OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case NNC_OP_TANH: return tanh(x);
  default: return x;
  }
}

double nnc_ref_unary(const nnc_node *n, double x) {
  double s = n->attrs.scalar;
  switch (n->op) {
  case NNC_OP_EXP: return exp(x);
  case NNC_OP_LOG: return log(x);
  case NNC_OP_SQRT: return sqrt(x);
  case NNC_OP_NEG: return -x;
  case NNC_OP_CAST: return nnc_ref_round_to(n->attrs.to, x);
  case NNC_OP_ADD_S: return x + s;
  case NNC_OP_SUB_S: return x - s;
  case NNC_OP_RSUB_S: return s - x;
  case NNC_OP_MUL_S: return x * s;
  case NNC_OP_DIV_S: return x / s;
  case NNC_OP_RDIV_S: return s / x;
  case NNC_OP_POW_S: return pow(x, s);
  default: return nnc_ref_activation(n->op, n->attrs.gelu_tanh, x);
  }
}

double nnc_ref_activation_grad(nnc_op act, bool gelu_tanh, double x) {
  switch (act) {
  case NNC_OP_RELU: return x > 0 ? 1.0 : 0.0;   /* 0 at 0, as PyTorch */
  case NNC_OP_GELU:
    if (gelu_tanh) {
      const double c = sqrt(2.0 / M_PI);
      double t = tanh(c * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
    }
    return 0.5 * (1.0 + erf(x / M_SQRT2)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
  case NNC_OP_SILU: {
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
  }
  case NNC_OP_SIGMOID: {
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 - s);
  }
  case NNC_OP_TANH: {
    double t = tanh(x);
    return 1.0 - t * t;
  }
  default: return NAN;
  }
}

double nnc_ref_binary(const nnc_node *n, double a, double b) {
  switch (n->op) {
  case NNC_OP_ADD: return a + b;
  case NNC_OP_SUB: return a - b;
  case NNC_OP_MUL: return a * b;
  case NNC_OP_DIV: return a / b;
  case NNC_OP_EQUAL: return a == b ? 1.0 : 0.0;
  case NNC_OP_ACT_GRAD: return b * nnc_ref_activation_grad(n->attrs.act, n->attrs.gelu_tanh, a);
  default: return NAN;
  }
}

nnc_status nnc_ref_op_unary(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]), want;
  /* expand broadcasts; every other unary op keeps the shape */
  bool ok = n->op == NNC_OP_EXPAND ? nnc_ref_broadcast(&sx, &sy, &want) && nnc_ref_shape_eq(&want, &sy)
                                   : nnc_ref_shape_eq(&sx, &sy);
  if (!ok)
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected the output shape %sof %s, found %s",
                             n->op == NNC_OP_EXPAND ? "broadcast from that " : "", nnc_ref_desc(r, n->in[0], d1),
                             nnc_ref_desc(r, n->out[0], d2));
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  nnc_dtype t = r->g->tensors[n->out[0]].dtype;
  int64_t count = nnc_ref_shape_elems(&sy), strides[NNC_MAX_RANK], idx[NNC_MAX_RANK];
  nnc_ref_bcast_strides(&sx, &sy, strides);
  for (int64_t i = 0; i < count; i++) {
    int64_t at = i;
    if (n->op == NNC_OP_EXPAND) {
      nnc_ref_unravel(&sy, i, idx);
      at = 0;
      for (int d = 0; d < sy.rank; d++) at += idx[d] * strides[d];
    }
    y[i] = nnc_ref_store(t, nnc_ref_unary(n, x[at]));
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_binary(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *a, *b;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC], d3[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &a, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &b, err);
  if (st) return st;
  nnc_ref_shape sa = nnc_ref_shape_of(r, n->in[0]), sb = nnc_ref_shape_of(r, n->in[1]);
  nnc_ref_shape sy = nnc_ref_shape_of(r, n->out[0]), want;
  if (!nnc_ref_broadcast(&sa, &sb, &want) || !nnc_ref_shape_eq(&want, &sy))
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected %s to be the broadcast of %s and %s",
                             nnc_ref_desc(r, n->out[0], d3), nnc_ref_desc(r, n->in[0], d1),
                             nnc_ref_desc(r, n->in[1], d2));
  int64_t st_a[NNC_MAX_RANK], st_b[NNC_MAX_RANK], idx[NNC_MAX_RANK];
  nnc_ref_bcast_strides(&sa, &sy, st_a);
  nnc_ref_bcast_strides(&sb, &sy, st_b);
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  nnc_dtype t = r->g->tensors[n->out[0]].dtype;
  int64_t count = nnc_ref_shape_elems(&sy);
  for (int64_t e = 0; e < count; e++) {
    nnc_ref_unravel(&sy, e, idx);
    int64_t ia = 0, ib = 0;
    for (int d = 0; d < sy.rank; d++) {
      ia += idx[d] * st_a[d];
      ib += idx[d] * st_b[d];
    }
    y[e] = nnc_ref_store(t, nnc_ref_binary(n, a[ia], b[ib]));
  }
  return NNC_OK;
}

nnc_status nnc_ref_op_mask(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x, *m = NULL;
  double *y;
  char d1[NNC_REF_DESC], d2[NNC_REF_DESC];
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (!st && n->op == NNC_OP_PADDING_MASK) st = nnc_ref_need(r, n, n->in[1], &m, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  if (sx.rank < 2 || !nnc_ref_shape_eq(&sx, &sy))
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err,
                             "expected scores of rank >= 2 and an output of their shape, found %s and %s",
                             nnc_ref_desc(r, n->in[0], d1), nnc_ref_desc(r, n->out[0], d2));
  int64_t T = sx.d[sx.rank - 2], S = sx.d[sx.rank - 1], count = nnc_ref_shape_elems(&sx);
  int64_t per_batch = sx.d[0] ? count / sx.d[0] : 0;
  if (m) {
    nnc_ref_shape sm = nnc_ref_shape_of(r, n->in[1]);
    if (sm.rank != 2 || sm.d[0] != sx.d[0] || sm.d[1] != S)
      return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected a mask [%lld,%lld] for scores %s, found %s",
                               (long long)sx.d[0], (long long)S, nnc_ref_desc(r, n->in[0], d1),
                               nnc_ref_desc(r, n->in[1], d2));
  }
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  for (int64_t e = 0; e < count; e++) {
    int64_t j = e % S;
    bool masked;
    if (m) masked = m[(e / per_batch) * S + j] == 0;
    else masked = j > (e / S) % T + (S - T);
    y[e] = masked ? (n->attrs.mask_zero ? 0.0 : -INFINITY) : x[e];
  }
  return NNC_OK;
}
