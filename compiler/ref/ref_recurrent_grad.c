/* compiler/ref/ref_recurrent_grad.c — lstm_scan_grad and gru_scan_grad in
 * float64: backpropagation through time, each step's derivatives written out
 * from the forward equations of ref_recurrent.c (ir.h gives the operands).
 * The gates are recomputed from the h each step read (y of the step before,
 * or h0), so the reference needs nothing the forward did not output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_internal.h"

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

nnc_status nnc_ref_op_recurrent_grad(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN_GRAD;
  int G = lstm ? 4 : 3, S = lstm ? 5 : 4, ns = lstm ? 2 : 1;
  const double *in[9] = {0};
  if (n->nin != (lstm ? 9 : 7) || n->nout != 5)
    return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err, "expected %d inputs and 5 outputs", lstm ? 9 : 7);
  for (int i = 0; i < n->nin; i++) {
    nnc_status st = nnc_ref_need(r, n, n->in[i], &in[i], err);
    if (st) return st;
  }
  const double *xw = in[0], *w = in[1], *bias = in[2], *h0 = in[3], *c0 = lstm ? in[4] : NULL;
  const double *y = in[3 + ns], *dy = in[4 + ns], *dhn = in[5 + ns], *dcn = lstm ? in[8] : NULL;
  double *out[5] = {0};
  for (int i = 0; i < 5; i++) {
    nnc_status st = nnc_ref_out(r, n, i, &out[i], err);
    if (st) return st;
  }
  double *dxw = out[0], *da = lstm ? out[0] : out[1], *dh0 = out[lstm ? 1 : 2], *dc0 = lstm ? out[2] : NULL;
  double *hprev = out[3], *saved = out[4];
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sw = nnc_ref_shape_of(r, n->in[1]);
  if (sx.rank != 3 || sw.rank != 2 || sw.d[0] != G * sw.d[1] || sx.d[2] != sw.d[0])
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected xw [B, T, %d*H] and w_hh [%d*H, H]", G, G);
  int64_t B = sx.d[0], T = sx.d[1], H = sw.d[1];
  double *a = malloc((size_t)(G * H) * sizeof *a), *dh = malloc((size_t)H * sizeof *dh),
         *dc = malloc((size_t)H * sizeof *dc), *dd = malloc((size_t)H * sizeof *dd);
  if (!a || !dh || !dc || !dd) {
    free(a);
    free(dh);
    free(dc);
    free(dd);
    return nnc_ref_node_fail(r, n, NNC_E_NOMEM, err, "out of memory for one row's state");
  }
  for (int64_t b = 0; b < B; b++) {
    /* the forward again, keeping every step's gates */
    for (int64_t s = 0; s < T; s++) {
      int64_t t = n->attrs.reverse ? T - 1 - s : s, prev = s == 0 ? -1 : n->attrs.reverse ? t + 1 : t - 1;
      double *hp = hprev + (b * T + t) * H, *sv = saved + (b * T + t) * S * H;
      const double *xt = xw + (b * T + t) * G * H;
      memcpy(hp, prev < 0 ? h0 + b * H : y + (b * T + prev) * H, (size_t)H * sizeof *hp);
      for (int64_t k = 0; k < G * H; k++) {
        a[k] = bias[k];
        for (int64_t j = 0; j < H; j++) a[k] += w[k * H + j] * hp[j];
      }
      for (int64_t j = 0; j < H; j++) {
        if (lstm) {
          double cp = prev < 0 ? c0[b * H + j] : saved[(b * T + prev) * S * H + 4 * H + j];
          sv[j] = sigmoid(xt[j] + a[j]);
          sv[H + j] = sigmoid(xt[H + j] + a[H + j]);
          sv[2 * H + j] = tanh(xt[2 * H + j] + a[2 * H + j]);
          sv[3 * H + j] = sigmoid(xt[3 * H + j] + a[3 * H + j]);
          sv[4 * H + j] = sv[H + j] * cp + sv[j] * sv[2 * H + j];
        } else {
          sv[j] = sigmoid(xt[j] + a[j]);
          sv[H + j] = sigmoid(xt[H + j] + a[H + j]);
          sv[3 * H + j] = a[2 * H + j];
          sv[2 * H + j] = tanh(xt[2 * H + j] + sv[j] * a[2 * H + j]);
        }
      }
    }
    /* back through the steps; dh, dc: the loss's gradient at the state a step left */
    memcpy(dh, dhn + b * H, (size_t)H * sizeof *dh);
    if (lstm) memcpy(dc, dcn + b * H, (size_t)H * sizeof *dc);
    for (int64_t s = T - 1; s >= 0; s--) {
      int64_t t = n->attrs.reverse ? T - 1 - s : s, prev = s == 0 ? -1 : n->attrs.reverse ? t + 1 : t - 1;
      const double *sv = saved + (b * T + t) * S * H, *hp = hprev + (b * T + t) * H;
      double *gx = dxw + (b * T + t) * G * H, *ga = da + (b * T + t) * G * H;
      for (int64_t j = 0; j < H; j++) {
        double dht = dh[j] + dy[(b * T + t) * H + j];
        if (lstm) {
          double i = sv[j], f = sv[H + j], g = sv[2 * H + j], o = sv[3 * H + j], c = sv[4 * H + j];
          double cp = prev < 0 ? c0[b * H + j] : saved[(b * T + prev) * S * H + 4 * H + j];
          double tc = tanh(c), dct = dc[j] + dht * o * (1 - tc * tc);
          gx[j] = dct * g * i * (1 - i);
          gx[H + j] = dct * cp * f * (1 - f);
          gx[2 * H + j] = dct * i * (1 - g * g);
          gx[3 * H + j] = dht * tc * o * (1 - o);
          dc[j] = dct * f;
          dd[j] = 0;
        } else {
          double rg = sv[j], z = sv[H + j], nn = sv[2 * H + j], an = sv[3 * H + j];
          double dnp = dht * (1 - z) * (1 - nn * nn);
          gx[j] = ga[j] = dnp * an * rg * (1 - rg);
          gx[H + j] = ga[H + j] = dht * (hp[j] - nn) * z * (1 - z);
          gx[2 * H + j] = dnp;
          ga[2 * H + j] = dnp * rg;
          dd[j] = dht * z;
        }
      }
      for (int64_t k = 0; k < H; k++) {
        double acc = dd[k];
        for (int64_t q = 0; q < G * H; q++) acc += w[q * H + k] * ga[q];
        dh[k] = acc;
      }
    }
    memcpy(dh0 + b * H, dh, (size_t)H * sizeof *dh);
    if (lstm) memcpy(dc0 + b * H, dc, (size_t)H * sizeof *dc);
  }
  free(a);
  free(dh);
  free(dc);
  free(dd);
  return NNC_OK;
}
