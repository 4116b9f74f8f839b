/* compiler/passes/infer_window.c — im2col: the windows that convolution and
 * pooling read. The image's height and width must be constants (the output
 * size is a floor division, which a symbolic dim cannot express); the batch
 * may be symbolic. */
#include <stdio.h>

#include "infer_util.h"

/* The output length of one image axis, or < 1 when the window does not fit. */
static int64_t out_len(int64_t in, int k, int s, int p, int d) { return (in + 2 * p - (int64_t)d * (k - 1) - 1) / s + 1; }

nnc_status nnc_infer_im2col(const nnc_infer_ctx *c) {
  const nnc_tensor *x = nnc_in(c, 0);
  const nnc_window *w = &c->n->attrs.win;
  char d[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "image");
  if (st) return st;
  if (x->rank != 4)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected an image of rank 4 (%s), found %s",
                          w->nhwc ? "[N, H, W, C]" : "[N, C, H, W]", nnc_infer_desc(c, x, d));
  if (w->kh < 1 || w->kw < 1 || w->sh < 1 || w->sw < 1 || w->dh < 1 || w->dw < 1 || w->ph < 0 || w->pw < 0)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected a kernel, stride and dilation >= 1 and padding >= 0, found "
                          "kernel %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d", w->kh, w->kw, w->sh, w->sw,
                          w->ph, w->pw, w->dh, w->dw);
  /* padding as wide as the dilated kernel would only add windows of padding */
  if (w->ph > (w->kh - 1) * w->dh || w->pw > (w->kw - 1) * w->dw)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected padding smaller than the kernel, found padding %dx%d for a "
                          "kernel %dx%d (dilation %dx%d)", w->ph, w->pw, w->kh, w->kw, w->dh, w->dw);
  if (w->tap_major && !w->nhwc)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected an NHWC image for tap-major windows, found %s",
                          nnc_infer_desc(c, x, d));
  int ha = w->nhwc ? 1 : 2, wa = w->nhwc ? 2 : 3, ca = w->nhwc ? 3 : 1;
  if (!nnc_dim_is_const(x->shape[ha]) || !nnc_dim_is_const(x->shape[wa]) || !nnc_dim_is_const(x->shape[ca]))
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected constant channels, height and width, found %s",
                          nnc_infer_desc(c, x, d));
  int64_t oh = out_len(x->shape[ha].k, w->kh, w->sh, w->ph, w->dh);
  int64_t ow = out_len(x->shape[wa].k, w->kw, w->sw, w->pw, w->dw);
  if (oh < 1 || ow < 1)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected an image at least as large as the kernel %dx%d (dilation "
                          "%dx%d, padding %dx%d), found %s", w->kh, w->kw, w->dh, w->dw, w->ph, w->pw,
                          nnc_infer_desc(c, x, d));
  nnc_dim taps = nnc_dim_const((int64_t)w->kh * w->kw);
  nnc_dim out[5] = {x->shape[0], nnc_dim_const(oh), nnc_dim_const(ow), w->tap_major ? taps : x->shape[ca],
                    w->tap_major ? x->shape[ca] : taps};
  nnc_infer_set(c, 0, x->dtype, 5, out);
  return NNC_OK;
}

/* The image shape is the caller's (set on the output before inference):
 * im2col of it must give the windows' shape. */
nnc_status nnc_infer_col2im(const nnc_infer_ctx *c) {
  const nnc_tensor *cols = nnc_in(c, 0), *img = &c->g->tensors[c->n->out[0]];
  const nnc_window *w = &c->n->attrs.win;
  char d1[NNC_DESC_LEN], d2[NNC_DESC_LEN];
  nnc_status st = nnc_infer_want_float(c, 0, "windows");
  if (st) return st;
  int ha = w->nhwc ? 1 : 2, wa = w->nhwc ? 2 : 3, ca = w->nhwc ? 3 : 1;
  bool ok = cols->rank == 5 && img->rank == 4 && w->sh >= 1 && w->sw >= 1;
  for (int i = 1; ok && i < 4; i++) ok = nnc_dim_is_const(img->shape[i]);
  int chan = w->tap_major ? 4 : 3;   /* the windows' channel axis; the taps are the other */
  ok = ok && nnc_dim_eq(cols->shape[0], img->shape[0]) && nnc_dim_eq(cols->shape[chan], img->shape[ca]) &&
       nnc_dim_eq_const(cols->shape[7 - chan], (int64_t)w->kh * w->kw) &&
       nnc_dim_eq_const(cols->shape[1], out_len(img->shape[ha].k, w->kh, w->sh, w->ph, w->dh)) &&
       nnc_dim_eq_const(cols->shape[2], out_len(img->shape[wa].k, w->kw, w->sw, w->pw, w->dw));
  if (!ok)
    return nnc_infer_fail(c, NNC_E_SHAPE, "expected windows %s to be im2col's of an image %s", nnc_infer_desc(c, cols, d1),
                          nnc_infer_desc(c, img, d2));
  nnc_infer_set(c, 0, cols->dtype, 4, img->shape);
  return NNC_OK;
}
