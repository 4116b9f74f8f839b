/* templates/cuda/conv_wgmma.cuh — a convolution over an NHWC image as an
 * implicit GEMM on Hopper's wgmma (sm_90a only):
 *
 *   out[m, n] = act(alpha * sum_k A[m, k] w[n, k] + bias[n]) + residual[m, n]
 *               (or act(... + residual[m, n]) when act_last)
 *
 * where A is the im2col of the image that the convolution would otherwise
 * write first: row m = (b, oh, ow) of the output, column k = (tap, c) with
 * tap = i * KW + j, the element x[b, oh*SH - PH + i*DH, ow*SW - PW + j*DW, c]
 * (zero outside the image). A 3x3 convolution's windows are 9 times its
 * image: gathering them straight from the image in the GEMM's loads, never
 * storing them, takes their write and read off the memory bus.
 *
 *   nnc_cuda_status nnc_cuda_conv_wgmma<T>(const nnc_cuda_conv_args<T> &g, cudaStream_t stream,
 *                                          nnc_cuda_error *err);
 * T: __nv_bfloat16 or __half. C and N multiples of 8 (a 16-byte chunk of
 * A's row is then 8 consecutive channels of one pixel);
 * x, w, out and residual 16-byte aligned. Returns NNC_CUDA_E_ARG (nothing
 * launched) for bad arguments; never synchronizes.
 *
 * The loop is gemm_wgmma.cuh's: two warpgroups, 128 x BN tiles (BN 64, 128
 * or 256, the widest that still gives every SM two blocks), k steps of 64
 * through four cp.async stages in the 128-byte swizzle. Only A's loads
 * differ: each thread keeps, for its four rows, a pointer to the window's
 * top-left pixel, and for its column k the tap and channel, advanced by
 * additions a step (no division by run-time sizes in the loop: 7-10%
 * faster on ResNet's 64-128 channel layers) so that a step's chunk is
 * each row's pointer plus one offset (one tap a step when C is a multiple
 * of 64; eight, mostly adjacent pixels, for 8 channels); a chunk outside
 * the image or past K is zero-filled. The
 * epilogue stages the tile in shared memory and writes rows of 16-byte
 * chunks, bias, residual and activation applied on the way. */
#ifndef NNC_CUDA_CONV_WGMMA_CUH
#define NNC_CUDA_CONV_WGMMA_CUH

#include "gemm_kernel.cuh"
#include "gemm_wgmma.cuh"

template <typename T> struct nnc_cuda_conv_args {
  const T *x; /* the image [B][H][W][C] */
  int B, H, W, C;
  int OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
  const T *w; /* [N][KH * KW * C]: PyTorch's [N][C][KH][KW] weight transposed to taps outer */
  int N;
  const T *bias;     /* [N] or NULL */
  const T *residual; /* [B * OH * OW][N] or NULL */
  T *out;            /* [B * OH * OW][N] */
  float alpha;
  nnc_cuda_act act;
  bool act_last; /* the activation after the residual (ResNet's relu(conv + shortcut)) */
};

namespace nnc_cv {

/* gemm_wgmma.cuh's tile height, k step, stages and threads: its k loop runs here */
using nnc_gw::BK;
using nnc_gw::BM;
using nnc_gw::NTHREADS;
using nnc_gw::STAGES;
constexpr int ROWS = BM / 32; /* rows of A a thread copies */
constexpr const char *KERNEL = "nnc_cuda_conv_wgmma";

template <typename T, int BN> constexpr size_t smem_bytes() {
  return (size_t)STAGES * (BM + BN) * BK * sizeof(T) + 1024;
}

}  // namespace nnc_cv

template <typename T, int BN>
__global__ void __launch_bounds__(nnc_cv::NTHREADS, 1) nnc_conv_wgmma_kernel(const nnc_cuda_conv_args<T> g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_cv;
  using mma = nnc_mma<T>;
  constexpr int CST = BN + 8; /* the epilogue's row stride in floats (see gemm_wgmma.cuh's) */
  static_assert(2 * 64 * CST * sizeof(float) <= (size_t)STAGES * (BM + BN) * BK * sizeof(T),
                "the epilogue's tile fits in the stages");
  extern __shared__ __align__(16) unsigned char nnc_cv_smem[];
  const uint32_t raw = nnc_smem_u32(nnc_cv_smem);
  T *base = reinterpret_cast<T *>(nnc_cv_smem + (((raw + 1023) & ~1023u) - raw));
  auto sa = [&](int t) { return base + (t % STAGES) * (BM + BN) * BK; };
  auto sb = [&](int t) { return sa(t) + BM * BK; };
  const int M = g.B * g.OH * g.OW, K = g.KH * g.KW * g.C;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const int ch = threadIdx.x % 8, r0 = threadIdx.x / 8;

  /* This thread's rows r0 + 32 i: a pointer to their window's top-left
   * pixel (never read itself when outside the image) and its coordinates;
   * a row past M gets a pixel no tap reaches. */
  const T *px[ROWS];
  int ih0[ROWS], iw0[ROWS];
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    const int m = m0 + r0 + 32 * i;
    const int ow = m % g.OW, oh = m / g.OW % g.OH, b = m / (g.OW * g.OH);
    ih0[i] = m < M ? oh * g.SH - g.PH : -(1 << 30);
    iw0[i] = ow * g.SW - g.PW;
    px[i] = g.x + (long long)b * g.H * g.W * g.C + ((long long)(m < M ? ih0[i] : 0) * g.W + iw0[i]) * g.C;
  }
  const uint32_t a_dst = nnc_smem_u32(base + r0 * BK + ((ch ^ (r0 % 8)) * 8));
  const int kt_end = (K + BK - 1) / BK;
  /* this thread's column k of the step being loaded as a tap (ti, tj) and a
   * channel c, advanced a step at a time: no division in the loop */
  int kc = ch * 8, tap0 = kc / g.C, cc = kc - tap0 * g.C, ti = tap0 / g.KW, tj = tap0 % g.KW;
  const long long rowstep = (long long)g.W * g.C;
  auto load = [&](int t) {
    if (t < kt_end) {
      const int k0 = t * BK;
      const int di = ti * g.DH, dj = tj * g.DW;
      const bool kin = kc < K;
      const long long off = di * rowstep + (long long)dj * g.C + cc;
      const uint32_t d = a_dst + (uint32_t)((t % STAGES) * (BM + BN) * BK * sizeof(T));
#pragma unroll
      for (int i = 0; i < ROWS; ++i) {
        const int ih = ih0[i] + di, iw = iw0[i] + dj;
        const bool ok = kin && (unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W;
        nnc_cp_async16(d + (uint32_t)(32 * i * BK * sizeof(T)), ok ? px[i] + off : g.x, ok);
      }
      nnc_gw::load_rows<T, BN>(sb(t), g.w, K, n0, g.N, k0, K);
      kc += BK;
      for (cc += BK; cc >= g.C; cc -= g.C)
        if (++tj == g.KW) tj = 0, ++ti;
    }
    nnc_cp_async_commit(); /* empty past the end: one group a step */
  };

  float acc[BN / 2];
  nnc_gw::mainloop<T, BN>(acc, kt_end, wg, load, sa, sb);

  /* alpha * the product into the warpgroup's 64 x BN tile of floats ... */
  float *cs = reinterpret_cast<float *>(base) + wg * 64 * CST;
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt) {
    const int col = nt * 8 + 2 * (lane % 4);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = warp * 16 + lane / 4 + 8 * hr;
      *reinterpret_cast<float2 *>(cs + row * CST + col) =
          make_float2(acc[nt * 4 + 2 * hr] * g.alpha, acc[nt * 4 + 2 * hr + 1] * g.alpha);
    }
  }
  __syncthreads();
  /* ... then written as rows of 16-byte chunks, 8 outputs a thread */
  const int t = threadIdx.x % 128;
  constexpr int CPR = BN / 8;
  for (int idx = t; idx < 64 * CPR; idx += 128) {
    const int r = idx / CPR, c8 = idx % CPR * 8, row = m0 + wg * 64 + r, col = n0 + c8;
    if (row >= M || col >= g.N) continue;
    float v[8], bias[8], res[8];
    const float4 lo = *reinterpret_cast<const float4 *>(cs + r * CST + c8);
    const float4 hi = *reinterpret_cast<const float4 *>(cs + r * CST + c8 + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    if (g.bias) {
      nnc_load_vec_any(g.bias + col, bias);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] += bias[e];
    }
    const long long at = (long long)row * g.N + col;
    if (g.residual) nnc_load_vec_any(g.residual + at, res);
    uint32_t packed[4];
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      float a = v[e], b = v[e + 1];
      if (!g.act_last) a = nnc_gemm_act_rt(g.act, a), b = nnc_gemm_act_rt(g.act, b);
      if (g.residual) a += res[e], b += res[e + 1];
      if (g.act_last) a = nnc_gemm_act_rt(g.act, a), b = nnc_gemm_act_rt(g.act, b);
      packed[e / 2] = mma::pack2(a, b);
    }
    *reinterpret_cast<uint4 *>(g.out + at) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture: never dispatched to (see
   * gemm_wgmma.cuh); a build that mixes that up fails loudly */
  __trap();
#endif
}

template <typename T, int BN>
nnc_cuda_status nnc_conv_wgmma_launch(const nnc_cuda_conv_args<T> &g, int M, cudaStream_t stream,
                                      nnc_cuda_error *err) {
  using namespace nnc_cv;
  auto kernel = nnc_conv_wgmma_kernel<T, BN>;
  const size_t smem = smem_bytes<T, BN>();
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, smem, raised);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cudaFuncSetAttribute failed: %s", cudaGetErrorString(e));
  const dim3 grid((unsigned)((M + BM - 1) / BM), (unsigned)((g.N + BN - 1) / BN));
  kernel<<<grid, NTHREADS, smem, stream>>>(g);
  return nnc_cuda_check_launch(err, KERNEL);
}

template <typename T>
nnc_cuda_status nnc_cuda_conv_wgmma(const nnc_cuda_conv_args<T> &g, cudaStream_t stream, nnc_cuda_error *err) {
  using namespace nnc_cv;
  if (g.B < 0 || g.H <= 0 || g.W <= 0 || g.C <= 0 || g.OH < 0 || g.OW < 0 || g.N <= 0 || g.KH <= 0 ||
      g.KW <= 0 || g.SH <= 0 || g.SW <= 0 || g.PH < 0 || g.PW < 0 || g.DH <= 0 || g.DW <= 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected positive sizes, strides and dilations and padding >= 0, found B %d, image %dx%dx%d, "
                         "out %dx%d, N %d, kernel %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d",
                         g.B, g.H, g.W, g.C, g.OH, g.OW, g.N, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW, g.DH, g.DW);
  const long long M = (long long)g.B * g.OH * g.OW;
  if (M == 0) return NNC_CUDA_OK;
  if (g.C % 8 || g.N % 8 || M > (1LL << 31) - BM || (long long)g.KH * g.KW * g.C > (1LL << 30))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected C and N multiples of 8 and B*OH*OW, KH*KW*C in int range, found C %d, "
                         "N %d, B*OH*OW %lld",
                         g.C, g.N, M);
  const uintptr_t al = reinterpret_cast<uintptr_t>(g.x) | reinterpret_cast<uintptr_t>(g.w) |
                       reinterpret_cast<uintptr_t>(g.out) | reinterpret_cast<uintptr_t>(g.residual);
  if (!g.x || !g.w || !g.out || al % 16 || reinterpret_cast<uintptr_t>(g.bias) % sizeof(T))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected x, w, out (and residual) 16-byte aligned device pointers, found %p, %p, %p, %p",
                         (const void *)g.x, (const void *)g.w, (void *)g.out, (const void *)g.residual);
  if ((unsigned)g.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "unknown activation %d", (int)g.act);
  /* The widest tile that still gives every SM two blocks; below that the
   * narrowest, which makes the most blocks. */
  int sms = 132, dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    (void)cudaGetLastError();
  const long long rows = (M + BM - 1) / BM;
  const int M32 = (int)M;
  if (g.N % 256 == 0 && rows * (g.N / 256) >= 2LL * sms) return nnc_conv_wgmma_launch<T, 256>(g, M32, stream, err);
  if (g.N % 128 == 0 && rows * (g.N / 128) >= 2LL * sms) return nnc_conv_wgmma_launch<T, 128>(g, M32, stream, err);
  return nnc_conv_wgmma_launch<T, 64>(g, M32, stream, err);
}

#endif
