/* templates/c_simd/gemm_windows.c — A as the windows of an NHWC image
 * (nnc_simd_gemm_args.win): a convolution as a GEMM without the im2col
 * matrix, which is KH*KW times the image (conv2 of the MNIST CNN: a 42 MB
 * matrix from a 5 MB image, written once and read back by the packing).
 *
 * The columns of a window are its taps, each C contiguous channels of the
 * image, and a row of taps (dilation 1) is KW*C contiguous values, so a KC
 * pass is a few runs of contiguous columns (the runs). The
 * MR windows at neighbouring positions of one output row start SW*C apart:
 * where they lie inside the image the micro-kernel reads them in place,
 * run by run. Windows that cross an output row or the image's border
 * (padding) are gathered into a packed panel, zeros for the padding. */
#include "gemm_internal.h"

nnc_simd_status nnc_simd_check_windows(const nnc_simd_windows *w, const char *kernel, nnc_simd_error *err) {
  if (w->KH < 1 || w->KW < 1 || w->SH < 1 || w->SW < 1 || w->DH < 1 || w->DW < 1 || w->PH < 0 || w->PW < 0 ||
      w->H < 1 || w->W < 1 || w->C < 1 || w->OH < 1 || w->OW < 1)
    return nnc_simd_fail(err, kernel, "expected windows of positive sizes, strides and dilations and padding >= 0, "
                         "found image %dx%dx%d, positions %dx%d, kernel %dx%d, stride %dx%d, padding %dx%d, "
                         "dilation %dx%d", w->H, w->W, w->C, w->OH, w->OW, w->KH, w->KW, w->SH, w->SW, w->PH,
                         w->PW, w->DH, w->DW);
  if ((w->OH - 1) * w->SH + (w->KH - 1) * w->DH >= w->H + 2 * w->PH ||
      (w->OW - 1) * w->SW + (w->KW - 1) * w->DW >= w->W + 2 * w->PW)
    return nnc_simd_fail(err, kernel, "expected %dx%d window positions to fit an image of %dx%d padded by %dx%d, "
                         "found the last window past it", w->OH, w->OW, w->H, w->W, w->PH, w->PW);
  return NNC_SIMD_OK;
}

void nnc_gemm_win_runs(const nnc_simd_windows *w, int pc, int kc, nnc_gemm_runs *r) {
  r->n = 0;
  for (int k = pc; k < pc + kc;) {
    int t = k / w->C, ch = k % w->C, i = t / w->KW, j = t % w->KW;
    int len = w->C - ch < pc + kc - k ? w->C - ch : pc + kc - k;
    ptrdiff_t off = ((ptrdiff_t)i * w->DH * w->W + (ptrdiff_t)j * w->DW) * w->C + ch;
    if (r->n > 0 && r->off[r->n - 1] + r->len[r->n - 1] == off) {
      r->len[r->n - 1] += len;   /* the next tap of a row, the next pixel (dilation 1): one run */
    } else {
      r->off[r->n] = off;
      r->len[r->n++] = len;
    }
    k += len;
  }
}

const float *nnc_gemm_win_direct(const nnc_simd_gemm_args *g, const float *x, int row) {
  const nnc_simd_windows *w = &g->win;
  if (row + NNC_GEMM_MR > g->M) return NULL;
  int plane = w->OH * w->OW, img = row / plane, oh = row % plane / w->OW, ow = row % w->OW;
  if (ow + NNC_GEMM_MR > w->OW) return NULL;
  int ih = oh * w->SH - w->PH, iw = ow * w->SW - w->PW;
  if (ih < 0 || ih + (w->KH - 1) * w->DH >= w->H || iw < 0 ||
      iw + (NNC_GEMM_MR - 1) * w->SW + (w->KW - 1) * w->DW >= w->W)
    return NULL;
  return x + (((ptrdiff_t)img * w->H + ih) * w->W + iw) * w->C;
}

void nnc_gemm_win_pack(const nnc_simd_gemm_args *g, const float *x, int row, int mr, int pc, int kc, float *dst) {
  const nnc_simd_windows *w = &g->win;
  const int plane = w->OH * w->OW, t0 = pc / w->C, ch0 = pc % w->C;
  for (int i = 0; i < NNC_GEMM_MR; ++i) {
    float *d = dst + i;
    if (i >= mr) {
      for (int k = 0; k < kc; ++k) d[(ptrdiff_t)k * NNC_GEMM_MR] = 0.0f;
      continue;
    }
    const int m = row + i, img = m / plane, oh = m % plane / w->OW, ow = m % w->OW;
    const int ih0 = oh * w->SH - w->PH, iw0 = ow * w->SW - w->PW;
    const float *xi = x + (ptrdiff_t)img * w->H * w->W * w->C;
    /* tap (ti, tj) and channel ch of column k, stepped along without a division per run */
    int ti = t0 / w->KW, tj = t0 % w->KW, ch = ch0;
    for (int k = 0; k < kc;) {
      const int ih = ih0 + ti * w->DH, iw = iw0 + tj * w->DW;
      const int len = w->C - ch < kc - k ? w->C - ch : kc - k;
      float *dk = d + (ptrdiff_t)k * NNC_GEMM_MR;
      if (ih < 0 || ih >= w->H || iw < 0 || iw >= w->W) {
        for (int c = 0; c < len; ++c) dk[(ptrdiff_t)c * NNC_GEMM_MR] = 0.0f;
      } else {
        const float *s = xi + ((ptrdiff_t)ih * w->W + iw) * w->C + ch;
        for (int c = 0; c < len; ++c) dk[(ptrdiff_t)c * NNC_GEMM_MR] = s[c];
      }
      k += len;
      ch = 0;
      if (++tj == w->KW) {
        tj = 0;
        ++ti;
      }
    }
  }
}
