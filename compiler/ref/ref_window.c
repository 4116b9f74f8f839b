/* compiler/ref/ref_window.c — im2col in float64, one output value at a time,
 * straight from its definition (ir.h), so that the targets' loops are
 * checked against something written independently of them. */
#include "ref_internal.h"

nnc_status nnc_ref_op_im2col(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  const nnc_window *w = &n->attrs.win;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  int64_t N = sx.d[0], C = w->nhwc ? sx.d[3] : sx.d[1], H = w->nhwc ? sx.d[1] : sx.d[2], W = w->nhwc ? sx.d[2] : sx.d[3];
  int64_t OH = sy.d[1], OW = sy.d[2];
  const int64_t KK = (int64_t)w->kh * w->kw;
  for (int64_t b = 0; b < N; b++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++)
        for (int64_t c = 0; c < C; c++)
          for (int i = 0; i < w->kh; i++)
            for (int j = 0; j < w->kw; j++) {
              int64_t ih = oh * w->sh - w->ph + (int64_t)i * w->dh, iw = ow * w->sw - w->pw + (int64_t)j * w->dw;
              bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
              int64_t at = w->nhwc ? ((b * H + ih) * W + iw) * C + c : ((b * C + c) * H + ih) * W + iw;
              int64_t row = (b * OH + oh) * OW + ow, tap = (int64_t)i * w->kw + j;
              y[w->tap_major ? (row * KK + tap) * C + c : (row * C + c) * KK + tap] = in ? x[at] : n->attrs.scalar;
            }
  return NNC_OK;
}

/* col2im: each window entry added back to the pixel im2col read it from
 * (entries of the padding dropped). */
nnc_status nnc_ref_op_col2im(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;   /* zeroed */
  const nnc_window *w = &n->attrs.win;
  nnc_ref_shape sx = nnc_ref_shape_of(r, n->in[0]), sy = nnc_ref_shape_of(r, n->out[0]);
  int64_t N = sy.d[0], C = w->nhwc ? sy.d[3] : sy.d[1], H = w->nhwc ? sy.d[1] : sy.d[2], W = w->nhwc ? sy.d[2] : sy.d[3];
  int64_t OH = sx.d[1], OW = sx.d[2];
  const int64_t KK = (int64_t)w->kh * w->kw;
  for (int64_t b = 0; b < N; b++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++)
        for (int64_t c = 0; c < C; c++)
          for (int i = 0; i < w->kh; i++)
            for (int j = 0; j < w->kw; j++) {
              int64_t ih = oh * w->sh - w->ph + (int64_t)i * w->dh, iw = ow * w->sw - w->pw + (int64_t)j * w->dw;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              int64_t row = (b * OH + oh) * OW + ow, tap = (int64_t)i * w->kw + j;
              y[w->nhwc ? ((b * H + ih) * W + iw) * C + c : ((b * C + c) * H + ih) * W + iw] +=
                  x[w->tap_major ? (row * KK + tap) * C + c : (row * C + c) * KK + tap];
            }
  return NNC_OK;
}
