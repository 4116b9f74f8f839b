/* templates/cuda/gemm_skinny.cuh — C = act(alpha * A W^T + bias) (+ residual)
 * for a few rows of A (M <= 64): a decode step's vocabulary projection, one
 * token a sequence, whose wide weight it streams once. cuBLASLt's kernels
 * take 105-156 us for GPT-2's at 64 rows on an H200 (bench/NOTES.md).
 *
 *   nnc_cuda_status nnc_cuda_gemm_skinny<T, TO>(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s,
 *                                             nnc_cuda_error *err);
 * T: __nv_bfloat16 or __half; TO: T or float. A is [M][lda], W [N][ldw]
 * (nn.Linear's weight, a tied embedding), C and the residual [M][ldc]; K,
 * lda, ldw multiples of 8 and A, W 16-byte aligned. Returns NNC_CUDA_E_ARG (nothing launched)
 * for bad arguments or M > 64; never synchronizes.
 *
 * A block of 8 warps owns BN columns of C (8, 16 or 32: the widest that
 * still makes a block for every SM) and every row. Each warp takes every
 * 8th piece of 32 along k: a thread loads 16 bytes of each of its rows of
 * A and of W straight into registers (no shared memory, many loads in
 * flight) and feeds mma.sync.m16n8k16 twice. The 16 k of an mma come in
 * the fragments' order, not memory's: thread t of a quad holds k 8t..8t+7
 * of the piece where the fragment wants k 2t, 2t+1, 2t+8, 2t+9 of each
 * half; A and W are permuted alike, so each product sums the same 32 k.
 * A warp's next piece is loading while it multiplies one. The
 * warps' partial tiles meet in shared memory, and each output sums them
 * in the epilogue. */
#ifndef NNC_CUDA_GEMM_SKINNY_CUH
#define NNC_CUDA_GEMM_SKINNY_CUH

#include "gemm_kernel.cuh"

template <typename T, typename TO> struct nnc_cuda_skinny_args {
  int M, N, K;
  const T *a; /* [M][lda] */
  long long lda;
  const T *w; /* [N][ldw] */
  long long ldw;
  const T *bias;     /* [N] or NULL */
  const TO *residual; /* [M][ldc] or NULL */
  TO *c;             /* [M][ldc] */
  long long ldc;
  float alpha;
  nnc_cuda_act act;
  bool act_last; /* the activation after the residual */
};

namespace nnc_sk {

constexpr int WARPS = 8, KP = 32; /* k a piece */
constexpr const char *KERNEL = "nnc_cuda_gemm_skinny";

__device__ __forceinline__ uint32_t word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float act(nnc_cuda_act a, float v) {
  switch (a) {
  case NNC_CUDA_ACT_RELU: return nnc_gemm_act<NNC_CUDA_ACT_RELU>(v);
  case NNC_CUDA_ACT_GELU_ERF: return nnc_gemm_act<NNC_CUDA_ACT_GELU_ERF>(v);
  case NNC_CUDA_ACT_GELU_TANH: return nnc_gemm_act<NNC_CUDA_ACT_GELU_TANH>(v);
  case NNC_CUDA_ACT_SILU: return nnc_gemm_act<NNC_CUDA_ACT_SILU>(v);
  default: return v;
  }
}

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(float *p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half *p, float v) { *p = __float2half_rn(v); }

}  // namespace nnc_sk

/* One piece of 32 k for this thread: A's rows and W's columns, 16 bytes
 * (8 k) each. */
template <int MT, int NT> struct piece {
  uint4 a[MT][2];
  uint4 b[NT];
};

/* MT tiles of 16 rows (M <= 16 MT), BN columns. Dynamic shared memory:
 * WARPS * MT * 16 * BN floats. */
template <typename T, typename TO, int MT, int BN>
__global__ void __launch_bounds__(nnc_sk::WARPS * 32) nnc_gemm_skinny_kernel(const nnc_cuda_skinny_args<T, TO> g) {
  using namespace nnc_sk;
  using mma = nnc_mma<T>;
  constexpr int NT = BN / 8, ROWS = MT * 16;
  extern __shared__ float nnc_sk_part[]; /* [WARPS][ROWS][BN]: each warp's partial tile */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int n0 = blockIdx.x * BN;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

  auto fetch = [&](int k0, piece<MT, NT> &p) {
    const int k = k0 + tq * 8;
    const bool kin = k < g.K; /* K is a multiple of 8: a thread's 8 k are all in or all out */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = mt * 16 + gq + 8 * h;
        p.a[mt][h] = kin && row < g.M ? __ldg(reinterpret_cast<const uint4 *>(g.a + row * g.lda + k)) : zero;
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = n0 + nt * 8 + gq;
      p.b[nt] = kin && n < g.N ? __ldg(reinterpret_cast<const uint4 *>(g.w + (long long)n * g.ldw + k)) : zero;
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

  /* every WARPS-th piece, the next one's loads in flight while this one multiplies */
  piece<MT, NT> cur, nxt;
  int k0 = warp * KP;
  if (k0 < g.K) fetch(k0, cur);
  for (; k0 < g.K; k0 += WARPS * KP) {
    if (k0 + WARPS * KP < g.K) fetch(k0 + WARPS * KP, nxt);
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t af[4] = {word(cur.a[mt][0], 2 * s), word(cur.a[mt][1], 2 * s), word(cur.a[mt][0], 2 * s + 1),
                                word(cur.a[mt][1], 2 * s + 1)};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma::run(acc[mt][nt], af, word(cur.b[nt], 2 * s), word(cur.b[nt], 2 * s + 1));
      }
    cur = nxt;
  }

  /* the warps' partial tiles meet in shared memory, then each output sums them */
  float *mine = nnc_sk_part + warp * ROWS * BN;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) mine[(mt * 16 + gq + 8 * (e / 2)) * BN + nt * 8 + 2 * tq + e % 2] = acc[mt][nt][e];
  __syncthreads();
  for (int i = threadIdx.x; i < g.M * BN; i += blockDim.x) {
    const int row = i / BN, col = i % BN, n = n0 + col;
    if (n >= g.N) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) sum += nnc_sk_part[w * ROWS * BN + i];
    float v = fmaf(g.alpha, sum, g.bias ? load(g.bias[n]) : 0.0f);
    if (!g.act_last) v = act(g.act, v);
    if (g.residual) v += load(g.residual[row * g.ldc + n]);
    if (g.act_last) v = act(g.act, v);
    store(g.c + row * g.ldc + n, v);
  }
}

template <typename T, typename TO, int MT>
nnc_cuda_status nnc_gemm_skinny_launch(const nnc_cuda_skinny_args<T, TO> &g, int bn, cudaStream_t s,
                                       nnc_cuda_error *err) {
  using namespace nnc_sk;
  const unsigned blocks = (unsigned)((g.N + bn - 1) / bn);
  auto kernel = bn == 32 ? nnc_gemm_skinny_kernel<T, TO, MT, 32>
                : bn == 16 ? nnc_gemm_skinny_kernel<T, TO, MT, 16> : nnc_gemm_skinny_kernel<T, TO, MT, 8>;
  const int smem = WARPS * MT * 16 * bn * (int)sizeof(float);
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cudaFuncSetAttribute failed: %s", cudaGetErrorString(e));
  kernel<<<blocks, WARPS * 32, smem, s>>>(g);
  return nnc_cuda_check_launch(err, KERNEL);
}


template <typename T, typename TO>
nnc_cuda_status nnc_cuda_gemm_skinny(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s, nnc_cuda_error *err) {
  using namespace nnc_sk;
  if (g.M < 0 || g.N < 0 || g.K < 0 || g.M > 64)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected 0 <= M <= 64 and N, K >= 0, found M %d, N %d, K %d",
                         g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return NNC_CUDA_OK;
  if (g.K % 8 || g.lda % 8 || g.ldw % 8 || g.lda < g.K || g.ldw < g.K || g.ldc < g.N || !g.a || !g.w || !g.c ||
      (reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.w)) % 16 ||
      (unsigned)g.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected K, lda, ldw multiples of 8 (lda, ldw >= K, ldc >= N), a and w 16-byte aligned and "
                         "a known activation, found K %d, lda %lld, ldw %lld, ldc %lld, a %p, w %p, act %d",
                         g.K, g.lda, g.ldw, g.ldc, (const void *)g.a, (const void *)g.w, (int)g.act);
  /* the widest columns a block that still give every SM a block */
  int sms = 132, dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    (void)cudaGetLastError();
  const int bn = g.N >= 32 * sms ? 32 : g.N >= 16 * sms ? 16 : 8;
  /* one tile of 16 rows for a batch of one to sixteen sequences, four for up to 64 (padding rows cost no
   * more than their share of the same loads) */
  return g.M <= 16 ? nnc_gemm_skinny_launch<T, TO, 1>(g, bn, s, err) : nnc_gemm_skinny_launch<T, TO, 4>(g, bn, s, err);
}

#endif
