/* compiler/ref/ref_window.c — im2col and its gradient col2im in float64,
 * one window entry at a time, straight from the definition (ir.h), so that
 * the targets' loops are checked against something written independently
 * of them. */
#include "ref_internal.h"

/* Visits every window entry of image img [N, C, H, W] (or NHWC) and windows
 * cols (ir.h's layouts, tap-major or not): im2col copies each pixel into its
 * entry (pad outside the image); col2im (to_image) adds each entry back to
 * its pixel, the padding's dropped. */
static void walk(const nnc_window *w, nnc_ref_shape si, nnc_ref_shape sc, double *img, double *cols, double pad,
                 bool to_image) {
  int64_t N = si.d[0], C = w->nhwc ? si.d[3] : si.d[1], H = w->nhwc ? si.d[1] : si.d[2], W = w->nhwc ? si.d[2] : si.d[3];
  int64_t OH = sc.d[1], OW = sc.d[2], KK = (int64_t)w->kh * w->kw;
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
              double *e = &cols[w->tap_major ? (row * KK + tap) * C + c : (row * C + c) * KK + tap];
              if (!to_image) *e = in ? img[at] : pad;
              else if (in) img[at] += *e;
            }
}

nnc_status nnc_ref_op_im2col(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;
  walk(&n->attrs.win, nnc_ref_shape_of(r, n->in[0]), nnc_ref_shape_of(r, n->out[0]), (double *)x, y, n->attrs.scalar,
       false);
  return NNC_OK;
}

nnc_status nnc_ref_op_col2im(nnc_ref *r, const nnc_node *n, nnc_error *err) {
  const double *x;
  double *y;
  nnc_status st = nnc_ref_need(r, n, n->in[0], &x, err);
  if (st) return st;
  if ((st = nnc_ref_out(r, n, 0, &y, err))) return st;   /* zeroed */
  walk(&n->attrs.win, nnc_ref_shape_of(r, n->out[0]), nnc_ref_shape_of(r, n->in[0]), y, (double *)x, 0.0, true);
  return NNC_OK;
}
