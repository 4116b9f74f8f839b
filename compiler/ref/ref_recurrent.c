/* compiler/ref/ref_recurrent.c — lstm_scan and gru_scan in float64, one step
 * at a time from PyTorch's equations (torch.nn.LSTM, torch.nn.GRU), so that
 * the targets' fused step loops are checked against something written
 * independently of them:
 *   LSTM: i, f, g, o = sigma, sigma, tanh, sigma of (xw + W_hh h + b_hh),
 *         c' = f c + i g, h' = o tanh(c')
 *   GRU:  r, z = sigma(xw_r + W_hr h + b_hr), sigma(xw_z + W_hz h + b_hz),
 *         n = tanh(xw_n + r (W_hn h + b_hn)), h' = (1 - z) n + z h */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_internal.h"

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

nnc_status nnc_ref_op_recurrent(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  bool lstm = n->op == NNC_OP_LSTM_SCAN;
  int G = lstm ? 4 : 3;
  const double *xw, *w, *bias, *h0 = NULL, *c0 = NULL;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &xw, err);
  if (!st) st = nnc_ref_need(r, n, n->in[1], &w, err);
  if (!st) st = nnc_ref_need(r, n, n->in[2], &bias, err);
  if (!st && n->nin > 3) st = nnc_ref_need(r, n, n->in[3], &h0, err);
  if (!st && n->nin > 4) st = nnc_ref_need(r, n, n->in[4], &c0, err);
  if (st) return st;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sw = nnc_ref_shape_of(r, n->in[1]);
  if (sx.rank != 3 || sw.rank != 2 || sw.d[0] != G * sw.d[1] || sx.d[2] != sw.d[0]) {
    char a[NNC_REF_DESC], b[NNC_REF_DESC];
    return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected xw [B, T, %d*H] and w_hh [%d*H, H], found %s and %s",
                             G, G, nnc_ref_desc(r, n->in[0], a), nnc_ref_desc(r, n->in[1], b));
  }
  int64_t B = sx.d[0], T = sx.d[1], H = sw.d[1];
  double *y, *hn, *cn = NULL;
  if ((st = nnc_ref_out(r, n, 0, &y, err)) || (st = nnc_ref_out(r, n, 1, &hn, err))) return st;
  if (lstm && (st = nnc_ref_out(r, n, 2, &cn, err))) return st;
  /* the state of every batch row, and the recurrent products of one step */
  double *h = calloc((size_t)(B * H), sizeof *h), *c = calloc((size_t)(B * H), sizeof *c);
  double *a = malloc((size_t)(G * H) * sizeof *a);
  if (!h || !c || !a) {
    free(h);
    free(c);
    free(a);
    return nnc_ref_node_fail(r, n, NNC_E_NOMEM, err, "out of memory for the states of %lld rows", (long long)B);
  }
  if (h0) memcpy(h, h0, (size_t)(B * H) * sizeof *h);
  if (c0) memcpy(c, c0, (size_t)(B * H) * sizeof *c);
  for (int64_t b = 0; b < B; b++) {
    double *hb = h + b * H, *cb = c + b * H;
    for (int64_t s = 0; s < T; s++) {
      int64_t t = n->attrs.reverse ? T - 1 - s : s;
      const double *xt = xw + (b * T + t) * G * H;
      for (int64_t k = 0; k < G * H; k++) {
        double acc = bias[k];
        for (int64_t j = 0; j < H; j++) acc += w[k * H + j] * hb[j];
        a[k] = acc;
      }
      for (int64_t j = 0; j < H; j++) {
        if (lstm) {
          double ig = sigmoid(xt[j] + a[j]), fg = sigmoid(xt[H + j] + a[H + j]);
          double gg = tanh(xt[2 * H + j] + a[2 * H + j]), og = sigmoid(xt[3 * H + j] + a[3 * H + j]);
          cb[j] = fg * cb[j] + ig * gg;
          hb[j] = og * tanh(cb[j]);
        } else {
          double rg = sigmoid(xt[j] + a[j]), zg = sigmoid(xt[H + j] + a[H + j]);
          double ng = tanh(xt[2 * H + j] + rg * a[2 * H + j]);
          hb[j] = (1 - zg) * ng + zg * hb[j];
        }
      }
      memcpy(y + (b * T + t) * H, hb, (size_t)H * sizeof *y);
    }
  }
  memcpy(hn, h, (size_t)(B * H) * sizeof *hn);
  if (cn) memcpy(cn, c, (size_t)(B * H) * sizeof *cn);
  free(h);
  free(c);
  free(a);
  return NNC_OK;
}
