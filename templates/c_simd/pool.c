/* templates/c_simd/pool.c — max and mean pooling and depthwise
 * convolution, read straight from the NHWC image (nnc_simd_pool): each
 * task writes whole output pixels, the C channels of a tap a run of
 * vectors. Taps in the padding are skipped: they add -inf to a max and
 * zeros to a sum. */
#include "internal.h"

static const char *const KERNEL = "nnc_simd_pool";

/* The output pixels [r0, r1). */
static void pool_rows(void *ctx, int r0, int r1) {
  const nnc_simd_pool_args *a = ctx;
  const nnc_simd_windows *w = &a->win;
  const int C = w->C, plane = w->OH * w->OW;
  const nnc_vf inv = nnc_vset1(1.0f / (float)(w->KH * w->KW));
  /* the position of pixel r0, then stepped along without a division a pixel */
  int img = r0 / plane, oh = r0 % plane / w->OW, ow = r0 % w->OW;
  for (int r = r0; r < r1; ++r, ++ow) {
    if (ow == w->OW) {
      ow = 0;
      if (++oh == w->OH) {
        oh = 0;
        ++img;
      }
    }
    float *y = a->y + (ptrdiff_t)r * C;
    const float init = a->op == NNC_SIMD_POOL_MAX ? -INFINITY : 0.0f;
    for (int c = 0; c < C; ++c) y[c] = init;
    for (int i = 0; i < w->KH; ++i) {
      const int ih = oh * w->SH - w->PH + i * w->DH;
      if (ih < 0 || ih >= w->H) continue;
      for (int j = 0; j < w->KW; ++j) {
        const int iw = ow * w->SW - w->PW + j * w->DW;
        if (iw < 0 || iw >= w->W) continue;
        const float *x = a->x + (((ptrdiff_t)img * w->H + ih) * w->W + iw) * C;
        const float *wt = a->w ? a->w + (ptrdiff_t)(i * w->KW + j) * C : NULL;
        int c = 0;
        if (a->op == NNC_SIMD_POOL_MAX) {
          for (; c + NNC_VW <= C; c += NNC_VW) nnc_vstore(y + c, nnc_vmax_nan(nnc_vload(y + c), nnc_vload(x + c)));
          for (; c < C; ++c) y[c] = x[c] > y[c] || x[c] != x[c] ? x[c] : y[c];
        } else if (a->op == NNC_SIMD_POOL_MEAN) {
          for (; c + NNC_VW <= C; c += NNC_VW) nnc_vstore(y + c, nnc_vadd(nnc_vload(y + c), nnc_vload(x + c)));
          for (; c < C; ++c) y[c] += x[c];
        } else {
          for (; c + NNC_VW <= C; c += NNC_VW)
            nnc_vstore(y + c, nnc_vfma(nnc_vload(x + c), nnc_vload(wt + c), nnc_vload(y + c)));
          for (; c < C; ++c) y[c] = fmaf(x[c], wt[c], y[c]);
        }
      }
    }
    if (a->op == NNC_SIMD_POOL_MEAN) {
      int c = 0;
      for (; c + NNC_VW <= C; c += NNC_VW) nnc_vstore(y + c, nnc_vmul(nnc_vload(y + c), inv));
      for (; c < C; ++c) y[c] *= 1.0f / (float)(w->KH * w->KW);
    }
  }
}

nnc_simd_status nnc_simd_pool(const nnc_simd_pool_args *a, const nnc_simd_par *par, nnc_simd_error *err) {
  if (!a) return nnc_simd_fail(err, KERNEL, "expected arguments, found NULL");
  const nnc_simd_windows *w = &a->win;
  if ((unsigned)a->op > NNC_SIMD_POOL_DEPTHWISE) return nnc_simd_fail(err, KERNEL, "unknown op %d", (int)a->op);
  if (a->images < 0) return nnc_simd_fail(err, KERNEL, "expected images >= 0, found %d", a->images);
  if (nnc_simd_check_windows(w, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (a->images == 0) return NNC_SIMD_OK;
  if (!a->x || !a->y || (a->op == NNC_SIMD_POOL_DEPTHWISE && !a->w))
    return nnc_simd_fail(err, KERNEL, "expected an image, an output%s, found x=%p y=%p w=%p",
                         a->op == NNC_SIMD_POOL_DEPTHWISE ? " and a weight" : "", (const void *)a->x, (void *)a->y,
                         (const void *)a->w);
  nnc_simd_run_rows(par, a->images * w->OH * w->OW, w->C * w->KH * w->KW, pool_rows, (void *)a);
  return NNC_SIMD_OK;
}
