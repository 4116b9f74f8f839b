/* templates/cuda/pool.cuh — max or average pooling and depthwise
 * convolution straight from an NHWC image:
 *
 *   out[b, oh, ow, c] = max (or mean, or sum of w[i*KW + j, c] times) over
 *                       the taps (i, j) < (KH, KW) of
 *                       x[b, oh*SH - PH + i*DH, ow*SW - PW + j*DW, c]
 *
 * a tap outside the image being -inf for max and 0 otherwise; the mean
 * divides by KH * KW (PyTorch's count_include_pad). It takes the place of
 * an im2col (KH * KW times the output, written and read again) and a
 * reduce over its taps (after the product by the weight, for a depthwise
 * convolution). A NaN wins the max, as in the reference.
 *
 *   nnc_cuda_status nnc_cuda_pool<T>(const nnc_cuda_pool_args<T> &g, cudaStream_t s, nnc_cuda_error *err);
 * T: float, __half or __nv_bfloat16; C a multiple of 8 and x, w, out
 * 16-byte aligned (a thread takes one 16-byte vector of channels of one output
 * pixel). Never synchronizes. */
#ifndef NNC_CUDA_POOL_CUH
#define NNC_CUDA_POOL_CUH

#include "loops.cuh"
#include "nnc_cuda.cuh"

enum nnc_cuda_pool_op { NNC_POOL_MAX, NNC_POOL_MEAN, NNC_POOL_DEPTHWISE };

template <typename T> struct nnc_cuda_pool_args {
  const T *x; /* [B][H][W][C] */
  int B, H, W, C, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
  nnc_cuda_pool_op op;
  const T *w; /* [KH * KW][C]: NNC_POOL_DEPTHWISE's weight */
  T *out;     /* [B][OH][OW][C] */
};

template <typename T> __global__ void nnc_pool_kernel(const nnc_cuda_pool_args<T> g) {
  constexpr int V = nnc_dtype<T>::VEC;
  const int CV = g.C / V;
  NNC_LOOP(e, g.B * g.OH * g.OW * CV) {
    const int cv = e % CV, r = e / CV, ow = r % g.OW, oh = r / g.OW % g.OH, b = r / (g.OW * g.OH);
    const bool max = g.op == NNC_POOL_MAX, dw = g.op == NNC_POOL_DEPTHWISE;
    float acc[V], v[V], wv[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = max ? -INFINITY : 0.0f;
    for (int i = 0; i < g.KH; ++i) {
      const int ih = oh * g.SH - g.PH + i * g.DH;
      if ((unsigned)ih >= (unsigned)g.H) continue; /* padding: changes neither a max nor a sum */
      for (int j = 0; j < g.KW; ++j) {
        const int iw = ow * g.SW - g.PW + j * g.DW;
        if ((unsigned)iw >= (unsigned)g.W) continue;
        nnc_load_vec(g.x + ((long long)(b * g.H + ih) * g.W + iw) * g.C + cv * V, v);
        if (dw) {
          nnc_load_vec(g.w + (i * g.KW + j) * g.C + cv * V, wv);
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] = fmaf(v[k], wv[k], acc[k]);
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] = max ? (v[k] > acc[k] || v[k] != v[k] ? v[k] : acc[k]) : acc[k] + v[k];
        }
      }
    }
    if (g.op == NNC_POOL_MEAN) {
      const float inv = 1.0f / (float)(g.KH * g.KW);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] *= inv;
    }
    nnc_store_vec(g.out + (long long)r * g.C + cv * V, acc);
  }
}

template <typename T>
nnc_cuda_status nnc_cuda_pool(const nnc_cuda_pool_args<T> &g, cudaStream_t s, nnc_cuda_error *err) {
  const char *kn = "nnc_cuda_pool";
  if (g.B < 0 || g.H <= 0 || g.W <= 0 || g.C <= 0 || g.OH < 0 || g.OW < 0 || g.KH <= 0 || g.KW <= 0 || g.SH <= 0 ||
      g.SW <= 0 || g.DH <= 0 || g.DW <= 0 || g.C % 8 || (unsigned)g.op > (unsigned)NNC_POOL_DEPTHWISE ||
      (g.op == NNC_POOL_DEPTHWISE && (!g.w || reinterpret_cast<uintptr_t>(g.w) % 16)))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected positive sizes, strides and dilations, C a multiple of 8, a known op and a "
                         "16-byte aligned weight for a depthwise one, found B %d, image %dx%dx%d, out %dx%d, kernel "
                         "%dx%d, stride %dx%d, dilation %dx%d, op %d, w %p",
                         g.B, g.H, g.W, g.C, g.OH, g.OW, g.KH, g.KW, g.SH, g.SW, g.DH, g.DW, (int)g.op,
                         (const void *)g.w);
  const long long n = (long long)g.B * g.OH * g.OW * (g.C / nnc_dtype<T>::VEC);
  if (n == 0) return NNC_CUDA_OK;
  if (n > 2147483647LL || (reinterpret_cast<uintptr_t>(g.x) | reinterpret_cast<uintptr_t>(g.out)) % 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "expected fewer than 2^31 vectors and 16-byte aligned x and out, "
                         "found %lld, %p, %p", n, (const void *)g.x, (void *)g.out);
  nnc_pool_kernel<T><<<nnc_loop_blocks(n), NNC_LOOP_THREADS, 0, s>>>(g);
  return nnc_cuda_check_launch(err, kn);
}

#endif
