/* templates/cuda/gemm_skinny.cuh — C = act(alpha * A W + bias) (+ residual)
 * for a few rows of A (M <= 64): a decode step's GEMMs, one token a
 * sequence, which must stream their weight once and are otherwise all
 * latency. cuBLASLt takes 8-11 us for each of GPT-2's layer GEMMs at 64
 * rows whatever their size (bench/NOTES.md, "Decode GEMMs at M = 64").
 *
 *   nnc_cuda_status nnc_cuda_gemm_skinny<T, TO>(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s,
 *                                             nnc_cuda_error *err);
 * T: __nv_bfloat16 or __half; TO: T or float. A is [M][lda]; W is [N][ldw]
 * when w_nk (nn.Linear's weight, a tied embedding), else [K][ldw] (GPT-2's
 * Conv1D, "in_out"); C and the residual [M][ldc]. K, lda, ldw multiples of
 * 8, N too when W is [K][N]; A, W 16-byte aligned. Returns NNC_CUDA_E_ARG
 * (nothing launched) for bad arguments or M > 64; never synchronizes; one
 * launch, so a CUDA graph captures it. Needs sm_90 (thread block clusters).
 *
 * The grid is (N / 32 column tiles) x KS slices of k, KS (1..8) the most
 * that keep the grid in one wave of resident blocks: a layer's N of 768
 * gives 24 tiles, 8 slices. A block of 4 warps owns 32 columns and one slice; each warp
 * takes every 4th piece of 32 k of the slice, two pieces' 16-byte loads
 * (A from L2, W from memory: 2 x (2 MT + 4) vectors a thread) in flight
 * before the first product, straight into registers, and feeds
 * mma.sync.m16n8k16. The warps' partial tiles are summed in shared memory;
 * the KS blocks of a column tile form a cluster, and each of them sums a
 * share of the outputs over the cluster's shared memories (in rank order:
 * the same bits every run), applies the epilogue and stores it. No
 * workspace, no atomics.
 *
 * Fragment order: the 16 k of an mma come in the fragments' order, not
 * memory's. Thread t of a quad loads k 8t..8t+7 of A's piece and uses them
 * as the fragment's k 2t, 2t+1, 2t+8, 2t+9 (first mma) and the same of the
 * second; W's k are taken in the same order, so each product sums the same
 * 32 k. W as [N][K]: a thread loads 8 k of one column, exactly A's order.
 * W as [K][N]: a thread loads 8 columns of one k row, four 8x8 matrices a
 * warp, which movmatrix transposes into B fragments; the rows a thread loads
 * are the k the fragment wants, and the columns land permuted (column pair
 * j of an 8-column group becomes fragment tile j), undone at the store. */
#ifndef NNC_CUDA_GEMM_SKINNY_CUH
#define NNC_CUDA_GEMM_SKINNY_CUH

#include <cooperative_groups.h>

#include "gemm_kernel.cuh"

template <typename T, typename TO> struct nnc_cuda_skinny_args {
  int M, N, K;
  const T *a; /* [M][lda] */
  long long lda;
  const T *w; /* [N][ldw] when w_nk, else [K][ldw] */
  long long ldw;
  bool w_nk;
  const T *bias;      /* [N] or NULL */
  const TO *residual; /* [M][ldc] or NULL; may be c itself */
  TO *c;              /* [M][ldc] */
  long long ldc;
  float alpha;
  nnc_cuda_act act;
  bool act_last; /* the activation after the residual */
};

/* Blocks an SM the kernel's registers must allow (__launch_bounds__). */
#ifndef NNC_SKINNY_MIN_BLOCKS
#define NNC_SKINNY_MIN_BLOCKS 1
#endif

namespace nnc_sk {

constexpr int WARPS = 4, KP = 32, BN = 32, NT = BN / 8, MAX_SLICES = 8;
constexpr const char *KERNEL = "nnc_cuda_gemm_skinny";

__device__ __forceinline__ uint32_t word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* The transpose of the 8x8 b16 matrix whose row lane/4 holds this lane's pair at column 2 (lane % 4). */
__device__ __forceinline__ uint32_t trans(uint32_t v) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(v));
  return r;
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

/* One piece of 32 k for this thread: 8 k of each of its A rows; of W either
 * 8 k of each of NT columns (W [N][K]) or 8 columns of each of 4 k rows. */
template <int MT> struct piece {
  uint4 a[MT][2];
  uint4 w[4];
};

}  // namespace nnc_sk

/* MT tiles of 16 rows (M <= 16 MT); W_NK: W is [N][K]. */
template <typename T, typename TO, int MT, bool W_NK>
__global__ void __launch_bounds__(nnc_sk::WARPS * 32, NNC_SKINNY_MIN_BLOCKS) nnc_gemm_skinny_kernel(const nnc_cuda_skinny_args<T, TO> g, int slices) {
  using namespace nnc_sk;
  using mma = nnc_mma<T>;
  constexpr int ROWS = MT * 16;
  __shared__ alignas(16) float part[WARPS][ROWS * BN]; /* each warp's partial tile; part[0] ends as the block's */
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int n0 = blockIdx.x * BN, slice = blockIdx.y;
  const int pieces = (g.K + KP - 1) / KP, p0 = slice * pieces / slices, p1 = (slice + 1) * pieces / slices;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

  auto fetch = [&](int p, piece<MT> &q) {
    const int k0 = p * KP, k = k0 + tq * 8;
    const bool kin = k < g.K; /* K is a multiple of 8: a thread's 8 k are all in or all out */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = mt * 16 + gq + 8 * h;
        q.a[mt][h] = kin && row < g.M ? __ldg(reinterpret_cast<const uint4 *>(g.a + row * g.lda + k)) : zero;
      }
    if (W_NK) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int n = n0 + nt * 8 + gq;
        q.w[nt] = kin && n < g.N ? __ldg(reinterpret_cast<const uint4 *>(g.w + (long long)n * g.ldw + k)) : zero;
      }
    } else {
      /* matrix r = 2 s + h holds, in its row gq, the k that lane gq*4 + t of the fragment pairs with:
       * row 2u + v is k 8u + 4s + 2h + v (v = gq % 2), as A's thread u holds them */
      const int n = n0 + tq * 8;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int kr = k0 + 8 * (gq / 2) + 4 * (r / 2) + 2 * (r % 2) + gq % 2;
        q.w[r] = kr < g.K && n < g.N ? __ldg(reinterpret_cast<const uint4 *>(g.w + (long long)kr * g.ldw + n)) : zero;
      }
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

  auto multiply = [&](const piece<MT> &q) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      uint32_t b0[NT], b1[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (W_NK) {
          b0[nt] = word(q.w[nt], 2 * s);
          b1[nt] = word(q.w[nt], 2 * s + 1);
        } else {
          b0[nt] = trans(word(q.w[2 * s], nt));
          b1[nt] = trans(word(q.w[2 * s + 1], nt));
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t af[4] = {word(q.a[mt][0], 2 * s), word(q.a[mt][1], 2 * s), word(q.a[mt][0], 2 * s + 1),
                                word(q.a[mt][1], 2 * s + 1)};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma::run(acc[mt][nt], af, b0[nt], b1[nt]);
      }
    }
  };

  /* two pieces' loads in flight before either is multiplied */
  for (int p = p0 + warp; p < p1; p += 2 * WARPS) {
    piece<MT> x, y;
    const bool two = p + WARPS < p1;
    fetch(p, x);
    if (two) fetch(p + WARPS, y);
    multiply(x);
    if (two) multiply(y);
  }

  /* the warp's partial tile into shared memory at its columns' places */
  float *mine = part[warp];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = mt * 16 + gq + 8 * (e / 2);
        const int col = W_NK ? nt * 8 + 2 * tq + e % 2 : tq * 8 + 2 * nt + e % 2;
        mine[row * BN + col] = acc[mt][nt][e];
      }
  __syncthreads();
  /* the block's sum in part[0], 4 columns a thread: each element read and written by one thread */
  const int quads = g.M * BN / 4;
  for (int i = threadIdx.x; i < quads; i += blockDim.x) {
    float4 sum = reinterpret_cast<const float4 *>(part[0])[i];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) {
      const float4 x = reinterpret_cast<const float4 *>(part[w])[i];
      sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
    }
    reinterpret_cast<float4 *>(part[0])[i] = sum;
  }
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  /* this block's share of the outputs, 4 columns a thread, summed over the cluster's slices in rank
   * order; every slice's load is issued before the first add (one trip to the other SMs, not one a slice) */
  for (int i = slice * blockDim.x + threadIdx.x; i < quads; i += slices * blockDim.x) {
    float4 x[MAX_SLICES];
#pragma unroll
    for (int r = 0; r < MAX_SLICES; ++r)
      if (r < slices) x[r] = reinterpret_cast<const float4 *>(cluster.map_shared_rank(part[0], r))[i];
    float v[4] = {x[0].x, x[0].y, x[0].z, x[0].w};
#pragma unroll
    for (int r = 1; r < MAX_SLICES; ++r)
      if (r < slices) v[0] += x[r].x, v[1] += x[r].y, v[2] += x[r].z, v[3] += x[r].w;
    const int row = i * 4 / BN, n1 = n0 + i * 4 % BN;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = n1 + e;
      if (n >= g.N) break;
      float o = fmaf(g.alpha, v[e], g.bias ? load(g.bias[n]) : 0.0f);
      if (!g.act_last) o = act(g.act, o);
      if (g.residual) o += load(g.residual[row * g.ldc + n]);
      if (g.act_last) o = act(g.act, o);
      store(g.c + row * g.ldc + n, o);
    }
  }
  cluster.sync(); /* the other blocks read this one's shared memory until here */
}

/* The slices of k a column tile is split into: the most that still fit
 * every block in one wave (resident blocks an SM x SMs: a second wave
 * doubles the time of these short kernels), at most 8 (a portable cluster)
 * and at least a piece of 32 k each. */
inline int nnc_gemm_skinny_slices(int N, int K, int resident) {
  const int tiles = (N + nnc_sk::BN - 1) / nnc_sk::BN, pieces = (K + nnc_sk::KP - 1) / nnc_sk::KP;
  int slices = resident / tiles;
  if (slices > nnc_sk::MAX_SLICES) slices = nnc_sk::MAX_SLICES;
  if (slices > pieces) slices = pieces;
  return slices < 1 ? 1 : slices;
}

template <typename T, typename TO, int MT, bool W_NK>
nnc_cuda_status nnc_gemm_skinny_launch(const nnc_cuda_skinny_args<T, TO> &g, int sms, cudaStream_t s,
                                       nnc_cuda_error *err) {
  using namespace nnc_sk;
  const auto kernel = nnc_gemm_skinny_kernel<T, TO, MT, W_NK>;
  /* blocks an SM of this instance (its registers decide), asked once */
  static const int per_sm = [kernel] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, WARPS * 32, 0) != cudaSuccess || n < 1) {
      (void)cudaGetLastError();
      n = 1;
    }
    return n;
  }();
  const int slices = nnc_gemm_skinny_slices(g.N, g.K, per_sm * sms);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)((g.N + BN - 1) / BN), (unsigned)slices, 1);
  cfg.blockDim = dim3(WARPS * 32, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = 1;
  at[0].val.clusterDim.y = (unsigned)slices;
  at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, g, slices);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "launch failed: %s (%s)", cudaGetErrorString(e),
                         cudaGetErrorName(e));
  return nnc_cuda_check_launch(err, KERNEL);
}

template <typename T, typename TO, bool W_NK>
nnc_cuda_status nnc_gemm_skinny_rows(const nnc_cuda_skinny_args<T, TO> &g, int sms, cudaStream_t s,
                                     nnc_cuda_error *err) {
  /* one tile of 16 rows for up to sixteen sequences, two or four for up to 32 or 64 */
  return g.M <= 16   ? nnc_gemm_skinny_launch<T, TO, 1, W_NK>(g, sms, s, err)
         : g.M <= 32 ? nnc_gemm_skinny_launch<T, TO, 2, W_NK>(g, sms, s, err)
                     : nnc_gemm_skinny_launch<T, TO, 4, W_NK>(g, sms, s, err);
}

template <typename T, typename TO>
nnc_cuda_status nnc_cuda_gemm_skinny(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s, nnc_cuda_error *err) {
  using namespace nnc_sk;
  if (g.M < 0 || g.N < 0 || g.K < 0 || g.M > 64)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected 0 <= M <= 64 and N, K >= 0, found M %d, N %d, K %d",
                         g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return NNC_CUDA_OK;
  if (g.K == 0 || g.K % 8 || g.lda % 8 || g.ldw % 8 || g.lda < g.K || g.ldw < (g.w_nk ? g.K : g.N) ||
      (!g.w_nk && g.N % 8) || g.ldc < g.N || !g.a || !g.w || !g.c ||
      (reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.w)) % 16 ||
      (unsigned)g.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected K > 0, K, lda, ldw multiples of 8 (N too when W is [K][N]; lda >= K, ldw >= "
                         "W's row, ldc >= N), a and w 16-byte aligned and a known activation, found N %d, K %d, "
                         "lda %lld, ldw %lld, ldc %lld, w_nk %d, a %p, w %p, act %d",
                         g.N, g.K, g.lda, g.ldw, g.ldc, (int)g.w_nk, (const void *)g.a, (const void *)g.w, (int)g.act);
  int sms = 132, dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    (void)cudaGetLastError();
  return g.w_nk ? nnc_gemm_skinny_rows<T, TO, true>(g, sms, s, err)
                : nnc_gemm_skinny_rows<T, TO, false>(g, sms, s, err);
}

#endif
