/* templates/cuda/gemm_wgmma_fp8.cuh — nnc's own FP8 GEMM on Hopper's wgmma
 * (sm_90a only): C = epilogue(alpha * a_scale[m] * b_scale[n] * (A B^T)),
 * A [M][lda] and B [N][ldb] e4m3 (B: the weight as [out][in], both
 * K-major, the only layout FP8 wgmma reads), f32 accumulation.
 *
 * Why our own and not only cuBLASLt (NOTES, "FP8 round 2"): cuBLASLt has no
 * FP8 algorithm writing rows that are not 16-byte aligned (GPT-2's tied LM
 * head, N = 50257), refuses e4m3 output together with its per-row /
 * per-channel scale vectors and GELU, and its scale vectors cost ~17%.
 * Here the scales, bias, activation and residual are applied to the
 * accumulators in registers and shared memory, and C is written a row at a
 * time, coalesced, whatever N and ldc.
 *
 *   nnc_cuda_status nnc_cuda_gemm_wgmma_fp8<TO, TI>(const nnc_cuda_gemm_wgmma_fp8_args<TO, TI> &g,
 *                                                  cudaStream_t stream, nnc_cuda_error *err);
 * TO: float, __nv_bfloat16 or __nv_fp8_e4m3 (then c = e4m3(v / *out_scale),
 * saturated to +-448: the reader's fixed A scale from nnc calibrate, so the
 * reader takes C as its quantized A); TI: the bias and residual's type
 * (float or __nv_bfloat16). a_scale_step 1: a scale per row of A; 0: one
 * scale for every row (a fixed, calibrated one). The epilogue, in f32:
 *   v = alpha * acc * a_scale * b_scale[n] + bias[n]
 *   v = act(v + residual)   (act_after_residual), else act(v) + residual
 * act: NNC_GWF_NONE, NNC_GWF_RELU or NNC_GWF_GELU_TANH (the tanh form, as
 * every other GELU of nnc's GPT-2). K, lda, ldb multiples of 16, A and B
 * 16-byte aligned (rows of 16-byte chunks); ldc >= N, ldr >= N anything.
 * K == 0 gives bias (or 0) through the epilogue. Returns NNC_CUDA_E_ARG
 * (nothing launched) for bad arguments, NNC_CUDA_E_LAUNCH when the runtime
 * refuses; never synchronizes.
 *
 * The structure is gemm_wgmma.cuh's (its load_rows and mainloop): a block
 * of two warpgroups computes a 128 x 256 tile, K walks in 128-byte row
 * pieces (128 e4m3) through cp.async into the 128-byte swizzle, four
 * stages, three in flight while one computes (a first H200 run with two
 * took as long a step as the bf16 kernel: its copies' latency, not the
 * tensor cores, set the pace); a piece is four m64n256k32 wgmma a
 * warpgroup. The tile's row
 * scales, column scales and bias are read into shared memory before the
 * k loop (their latency hidden behind it): read from global memory in the
 * epilogue, one after another between its shared-memory stores, they cost
 * a first H200 run 6-12 us a tile. The residual is read 16 rows ahead of
 * the stores for the same reason (it may be C itself, so the compiler
 * cannot move the loads past earlier stores; a row at a time took ~50 us
 * a tile). */
#ifndef NNC_CUDA_GEMM_WGMMA_FP8_CUH
#define NNC_CUDA_GEMM_WGMMA_FP8_CUH

#include <cuda_fp8.h>

#include "gemm_wgmma.cuh"

enum nnc_gwf_act { NNC_GWF_NONE = 0, NNC_GWF_RELU = 1, NNC_GWF_GELU_TANH = 2 };

template <typename TO, typename TI> struct nnc_cuda_gemm_wgmma_fp8_args {
  int M, N, K;
  const __nv_fp8_e4m3 *a; /* [M][lda] */
  long long lda;
  const float *a_scale; /* [M] (a_scale_step 1) or one float (0) */
  int a_scale_step;
  const __nv_fp8_e4m3 *b; /* [N][ldb]: C = A B^T */
  long long ldb;
  const float *b_scale; /* [N] */
  const TI *bias;       /* [N], or NULL */
  const TI *residual;   /* [M][ldr], or NULL */
  long long ldr;
  int act; /* nnc_gwf_act */
  bool act_after_residual;
  float alpha;
  const float *out_scale; /* TO e4m3: one device float, the scale C's values are divided by */
  TO *c;                  /* [M][ldc] */
  long long ldc;
};

namespace nnc_gwf {

constexpr const char *KERNEL = "nnc_cuda_gemm_wgmma_fp8";
using E4M3 = __nv_fp8_e4m3;

__device__ __forceinline__ void store(float *p, float v, float) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, float v, float) { *p = __float2bfloat16_rn(v); }
/* inv: 1 / the output's scale, computed as fp8.cuh's row pass does for a
 * fixed scale (448 / (scale * 448)), so both give the same bytes */
__device__ __forceinline__ void store(E4M3 *p, float v, float inv) {
  p->__x = __nv_cvt_float_to_fp8(v * inv, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float act(int kind, float v) {
  if (kind == NNC_GWF_RELU) return fmaxf(v, 0.0f);
  if (kind == NNC_GWF_GELU_TANH) return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  return v;
}

}  // namespace nnc_gwf

template <typename TO, typename TI>
__global__ void __launch_bounds__(nnc_gw::NTHREADS, 1)
    nnc_gemm_wgmma_fp8_kernel(const nnc_cuda_gemm_wgmma_fp8_args<TO, TI> g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_gw;
  using T = nnc_gwf::E4M3;
  constexpr int P = piece<T>();
  extern __shared__ __align__(16) unsigned char nnc_gwf_smem[];
  __shared__ float s_wscale[BN], s_bias[BN], s_ascale[BM]; /* the tile's scales (a's times alpha) and bias */
  const uint32_t raw = nnc_smem_u32(nnc_gwf_smem);
  T *base = reinterpret_cast<T *>(nnc_gwf_smem + (((raw + 1023) & ~1023u) - raw));
  auto sa = [&](int t) { return base + (t % STAGES) * (BM + BN) * P; };
  auto sb = [&](int t) { return sa(t) + BM * P; };
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const int kt_end = (g.K + P - 1) / P;
  auto load = [&](int t) {
    if (t < kt_end) {
      load_rows<T, BM>(sa(t), g.a, g.lda, m0, g.M, t * P, g.K);
      load_rows<T, BN>(sb(t), g.b, g.ldb, n0, g.N, t * P, g.K);
    }
    nnc_cp_async_commit(); /* empty past the end: one group a step */
  };

  {   /* visible to every thread after the k loop's barriers */
    const int n = n0 + threadIdx.x, m = m0 + threadIdx.x;
    s_wscale[threadIdx.x] = n < g.N ? g.b_scale[n] : 0.0f;
    s_bias[threadIdx.x] = n < g.N && g.bias ? nnc_gwf::load(g.bias[n]) : 0.0f;
    if (threadIdx.x < BM) s_ascale[threadIdx.x] = m < g.M ? g.alpha * g.a_scale[(long long)m * g.a_scale_step] : 0.0f;
  }

  float acc[BN / 2];
  mainloop<T, BN, STAGES - 1>(acc, kt_end, wg, load, sa, sb);

  /* the scales and the bias on the accumulators, into the warpgroup's
   * 64 x 256 tile of f32 in shared memory (the stages are free now) */
  float *cs = reinterpret_cast<float *>(base) + wg * 64 * CST;
  float rs[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) rs[hr] = s_ascale[wg * 64 + warp * 16 + lane / 4 + 8 * hr];
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt) {
    const int col = nt * 8 + 2 * (lane % 4);
    const float w0 = s_wscale[col], w1 = s_wscale[col + 1], b0 = s_bias[col], b1 = s_bias[col + 1];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = warp * 16 + lane / 4 + 8 * hr;
      *reinterpret_cast<float2 *>(cs + row * CST + col) = make_float2(fmaf(acc[nt * 4 + 2 * hr] * rs[hr], w0, b0),
                                                                      fmaf(acc[nt * 4 + 2 * hr + 1] * rs[hr], w1, b1));
    }
  }
  __syncthreads();
  /* residual, activation and the store, row by row (coalesced), 16 rows of residual read first */
  float inv = 1.0f;
  if constexpr (sizeof(TO) == 1) {
    const float amax = *g.out_scale * 448.0f;
    inv = amax > 0.0f ? 448.0f / amax : 0.0f;
  }
  constexpr int RB = 16; /* rows whose residual is read before their stores */
  const int t = threadIdx.x % 128;
  const bool in0 = n0 + t < g.N, in1 = n0 + t + 128 < g.N;
  for (int r0 = 0; r0 < 64 && m0 + wg * 64 + r0 < g.M; r0 += RB) {
    float res[RB][2] = {};
    if (g.residual) {
#pragma unroll
      for (int i = 0; i < RB; ++i) {
        const int row = m0 + wg * 64 + r0 + i;
        const TI *rrow = g.residual + (long long)row * g.ldr + n0 + t;
        if (row < g.M && in0) res[i][0] = nnc_gwf::load(rrow[0]);
        if (row < g.M && in1) res[i][1] = nnc_gwf::load(rrow[128]);
      }
    }
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      const int row = m0 + wg * 64 + r0 + i;
      if (row >= g.M) break;
      TO *crow = g.c + (long long)row * g.ldc + n0 + t;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (!(j ? in1 : in0)) continue;
        float v = cs[(r0 + i) * CST + t + 128 * j];
        if (g.act_after_residual) v += res[i][j];
        v = nnc_gwf::act(g.act, v);
        if (!g.act_after_residual) v += res[i][j];
        nnc_gwf::store(crow + 128 * j, v, inv);
      }
    }
  }
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture: never dispatched to (fp8.cuh
   * calls this only under NNC_CUDA_SM90A); a build that mixes that up
   * fails loudly */
  __trap();
#endif
}

template <typename TO, typename TI>
nnc_cuda_status nnc_cuda_gemm_wgmma_fp8(const nnc_cuda_gemm_wgmma_fp8_args<TO, TI> &g, cudaStream_t stream,
                                        nnc_cuda_error *err) {
  using namespace nnc_gw;
  using nnc_gwf::KERNEL;
  if (g.M < 0 || g.N < 0 || g.K < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected sizes >= 0, found M %d, N %d, K %d", g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return NNC_CUDA_OK;
  if (g.K % 16 || g.lda % 16 || g.ldb % 16 || g.lda < g.K || g.ldb < g.K || g.ldc < g.N ||
      (g.residual && g.ldr < g.N))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected K, lda and ldb multiples of 16, lda and ldb >= K, ldc (and ldr) >= N; found K %d, "
                         "lda %lld, ldb %lld, ldc %lld, ldr %lld, N %d",
                         g.K, g.lda, g.ldb, g.ldc, g.ldr, g.N);
  if (!g.a || !g.b || !g.c || !g.a_scale || !g.b_scale || (sizeof(TO) == 1 && !g.out_scale))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected device pointers for a, b, c, a_scale, b_scale (and out_scale for e4m3 C), "
                         "found %p, %p, %p, %p, %p, %p",
                         (const void *)g.a, (const void *)g.b, (const void *)g.c, (const void *)g.a_scale,
                         (const void *)g.b_scale, (const void *)g.out_scale);
  if (g.a_scale_step != 0 && g.a_scale_step != 1)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a_scale_step 0 or 1, found %d", g.a_scale_step);
  if (g.act != NNC_GWF_NONE && g.act != NNC_GWF_RELU && g.act != NNC_GWF_GELU_TANH)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected act none, relu or gelu_tanh (0-2), found %d", g.act);
  if ((reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.b)) % 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a and b 16-byte aligned, found %p and %p",
                         (const void *)g.a, (const void *)g.b);
  if ((g.N + BN - 1) / BN > 65535)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected N <= %d, found %d", 65535 * BN, g.N);
  auto kernel = nnc_gemm_wgmma_fp8_kernel<TO, TI>;
  /* 128-byte pieces of 128 + 256 rows, four stages (the bf16 kernel's bytes), 1024 to align them */
  const size_t smem = (size_t)STAGES * (BM + BN) * 128 + 1024;
  static_assert(2 * 64 * CST * sizeof(float) <= (size_t)STAGES * (BM + BN) * 128, "the epilogue's tile fits the stages");
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, smem, raised);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cudaFuncSetAttribute failed: %s", cudaGetErrorString(e));
  const dim3 grid((unsigned)((g.M + BM - 1) / BM), (unsigned)((g.N + BN - 1) / BN));
  kernel<<<grid, NTHREADS, smem, stream>>>(g);
  return nnc_cuda_check_launch(err, KERNEL);
}

#endif
