/* templates/cuda/gemm_wgmma.cuh — C = act(alpha * A B^T + bias) + residual
 * (or act(... + residual) when act_last) on Hopper's wgmma (sm_90a only),
 * for the GEMMs cuBLASLt cannot write well: output rows of any length and
 * alignment (GPT-2's LM head, N = 50257), in f32 or the operands' type,
 * written straight into place, and activations its epilogues lack (erf-GELU,
 * SiLU), which otherwise cost a pass over C after it. cuBLASLt's kernels
 * store through TMA, which needs 16-byte aligned rows; nnc's other way was
 * padded rows in a workspace and a copy (1.65 GB of f32 logits read and
 * written again at B=8 T=1024).
 *
 *   nnc_cuda_status nnc_cuda_gemm_wgmma<T, TO[, EPI]>(const nnc_cuda_gemm_wgmma_args<T, TO> &g,
 *                                                    cudaStream_t stream, nnc_cuda_error *err);
 * EPI true: the instance that applies act and residual; the default
 * (false) refuses them and writes C as the plain product plus bias: the
 * general epilogue in the same loop made GPT-2's LM head 1.45 -> 2.3 ms.
 * T: __nv_bfloat16 or __half; TO: float or T. A is [M][lda], B is [N][ldb]
 * (so C = A B^T: B holds the weight as [out features][in features]), C is
 * [M][ldc]; K, lda and ldb multiples of 8 and A, B 16-byte aligned (rows
 * of 16-byte chunks); ldc >= N anything. K == 0 gives bias (or 0). Returns
 * NNC_CUDA_E_ARG (nothing launched) for bad arguments, NNC_CUDA_E_LAUNCH
 * when the runtime refuses; never synchronizes.
 *
 * A block of two warpgroups computes a 128 x 256 tile of C, each
 * warpgroup 64 x 256 (128 f32 accumulators a thread, one m64n256k16 wgmma
 * a k16 step). K walks in steps of 64: A's and B's 64-element (128-byte)
 * row pieces land by cp.async in the 128-byte swizzle of wgmma.cuh, four
 * stages deep (192 KB), two steps loading while one computes. The
 * epilogue stages each warpgroup's tile in shared memory so that C is
 * written a row at a time, coalesced, whatever its alignment. Blocks walk
 * M first, so the blocks resident together share B's columns (in L2).
 *
 * Up to 64 rows (a decode step's LM head) the block's tile is 64 x 128
 * instead, a warpgroup 64 x 64 of it, three stages deep (72 KB), two of
 * them loading while the products of one run: half of the 128-row tile was
 * rows past M, and the 197 blocks of GPT-2's head (N = 50257) took two
 * waves of 132 SMs at one block an SM; the 393 blocks of 128 columns take
 * one wave at three blocks an SM. H200, GPT-2's head at 64 rows
 * (bench/gpu_lm_head.cu): 37.1 -> 28.3 us; at 1 row 28.5 -> 22.1 us. */
#ifndef NNC_CUDA_GEMM_WGMMA_CUH
#define NNC_CUDA_GEMM_WGMMA_CUH

#include "gemm_kernel.cuh"
#include "gemm_mma.cuh"
#include "nnc_cuda.cuh"
#include "wgmma.cuh"

template <typename T, typename TO> struct nnc_cuda_gemm_wgmma_args {
  int M, N, K;
  const T *a;
  long long lda;
  const T *b; /* [N][ldb]: C = A B^T */
  long long ldb;
  const T *bias;     /* [N], or NULL */
  const TO *residual; /* [M][ldr], or NULL: added after act (before it when act_last) */
  long long ldr;
  nnc_cuda_act act; /* NNC_CUDA_ACT_NONE (0) unless set */
  bool act_last;
  float alpha;
  TO *c;
  long long ldc;
};

namespace nnc_gw {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, NTHREADS = 256;
constexpr int CST = BN + 8; /* the epilogue's row stride in floats: quads of rows hit distinct banks */
constexpr const char *KERNEL = "nnc_cuda_gemm_wgmma";

/* A block's tile: BM_ x BN_ of C, S_ stages, AHEAD_ of them loading while
 * one computes (mainloop); the two warpgroups split it along M (64 rows
 * each) when BM_ is 128, along N (BN_ / 2 columns each) when it is 64.
 * MINB: the blocks an SM holds (launch bounds). */
template <int BM_, int BN_, int S_, int MINB_, int AHEAD_ = S_ - 2> struct shape {
  static constexpr int M = BM_, N = BN_, S = S_, MINB = MINB_, AHEAD = AHEAD_;
  static constexpr int WGN = BM_ == 64 ? 2 : 1;     /* warpgroups along N */
  static constexpr int WN = BN_ / WGN;             /* a warpgroup's columns */
  static constexpr int CST = BN_ + 8;              /* as CST for the tile's width */
  static_assert(BM_ == 64 * (2 / WGN), "two warpgroups of 64 rows, or one row of two");
};
using big = shape<BM, BN, STAGES, 1>;
using small = shape<64, 128, 3, 3, 2>;

template <typename T, class SH> constexpr size_t smem_bytes() {
  return (size_t)SH::S * (SH::M + SH::N) * BK * sizeof(T) + 1024;
}

/* Elements of T in a 128-byte row piece (a k step): BK for bf16/f16, 128
 * for e4m3 (gemm_wgmma_fp8.cuh); and in a 16-byte chunk. */
template <typename T> __host__ __device__ constexpr int piece() { return 128 / (int)sizeof(T); }
template <typename T> __host__ __device__ constexpr int chunk() { return 16 / (int)sizeof(T); }

/* Starts the copy of rows [0, R) of a 128-byte-wide piece (columns k0..)
 * of a row-major matrix into a swizzled tile; rows past nrows and chunks
 * past K are zero-filled. Each thread copies one chunk column of rows 32
 * apart (one swizzle key). */
template <typename T, int R>
__device__ __forceinline__ void load_rows(T *dst, const T *src, long long ld, int row0, int nrows, int k0, int K) {
  constexpr int P = piece<T>(), E = chunk<T>();
  const int ch = threadIdx.x % 8, r0 = threadIdx.x / 8;
  const bool kin = k0 + ch * E < K;
  const uint32_t d = nnc_smem_u32(dst + r0 * P + ((ch ^ (r0 % 8)) * E));
#pragma unroll
  for (int i = 0; i < R / 32; ++i) {
    const int r = r0 + 32 * i;
    const bool ok = kin && row0 + r < nrows;
    nnc_cp_async16(d + (uint32_t)(32 * i * 128), ok ? src + (long long)(row0 + r) * ld + k0 + ch * E : src, ok);
  }
}

/* The k loop (conv_wgmma.cuh's and gemm_wgmma_fp8.cuh's too): acc (a
 * warpgroup's 64 x N_ of f32) gets the products of kt_end steps of one
 * 128-byte row piece (64 bf16, 128 e4m3). load(t) starts step t's copies
 * into stage t % S (S stages) and commits one cp.async group (an empty one
 * past the end); sa(t) and sb(t) are the step's A and B tiles as the
 * warpgroup reads them (A's rows of warpgroup wg 64 rows down; sb may
 * already point at the warpgroup's columns). Ends with every copy landed,
 * every product done and the stages free for the epilogue.
 * AHEAD: the steps whose copies are in flight while one computes. S - 2
 * lets step kt - 1's products run on while step kt's start; S - 1 waits for
 * each step's products before the next step's copies overwrite its stage,
 * for more bytes on their way: e4m3 (half the work a step for the same
 * bytes) and the 64 x 128 tile, which is all weight streaming (its three
 * stages one ahead: 29.2 us for GPT-2's head at 64 rows, two ahead 28.3). */
template <typename T, int N_, int AHEAD = STAGES - 2, int S = STAGES, class Load, class SA, class SB>
__device__ __forceinline__ void mainloop(float (&acc)[N_ / 2], int kt_end, int wg, const Load &load, const SA &sa,
                                         const SB &sb) {
  static_assert(AHEAD == S - 2 || AHEAD == S - 1, "a stage for each step in flight and the one computing");
#pragma unroll
  for (int i = 0; i < N_ / 2; ++i) acc[i] = 0.0f;
  for (int t = 0; t < AHEAD; ++t) load(t);
  for (int kt = 0; kt < kt_end; ++kt) {
    nnc_cp_async_wait<AHEAD - 1>(); /* step kt has landed */
    nnc_wg::fence_proxy_async();
    __syncthreads(); /* ... for every thread, and the products of the step whose stage load() refills are done */
    load(kt + AHEAD);
    const uint64_t da = nnc_wg::desc_sw128(nnc_smem_u32(sa(kt) + wg * 64 * piece<T>()));
    const uint64_t db = nnc_wg::desc_sw128(nnc_smem_u32(sb(kt)));
    nnc_wg::fence();
    /* four products a piece, each 32 bytes of the rows (k16 of bf16, k32 of e4m3) */
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) nnc_wg::mma<T>::template ss<N_>(acc, da + 2 * kk, db + 2 * kk, 1);
    nnc_wg::commit();
    nnc_wg::wait<S - 1 - AHEAD>(); /* step kt - 1's products (AHEAD = S - 2), or step kt's */
  }
  nnc_wg::wait<0>();
  nnc_wg::fence_regs(acc);
  nnc_cp_async_wait<0>();
  __syncthreads(); /* every stage is free */
}

__device__ __forceinline__ void store(float *p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half *p, float v) { *p = __float2half_rn(v); }

}  // namespace nnc_gw

template <typename T, typename TO, bool EPI, class SH>
__global__ void __launch_bounds__(nnc_gw::NTHREADS, SH::MINB) nnc_gemm_wgmma_kernel(const nnc_cuda_gemm_wgmma_args<T, TO> g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_gw;
  constexpr int TM = SH::M, TN = SH::N, CST = SH::CST;
  extern __shared__ __align__(16) unsigned char nnc_gw_smem[];
  const uint32_t raw = nnc_smem_u32(nnc_gw_smem);
  T *base = reinterpret_cast<T *>(nnc_gw_smem + (((raw + 1023) & ~1023u) - raw));
  auto sa = [&](int t) { return base + (t % SH::S) * (TM + TN) * BK; };
  auto sb = [&](int t) { return sa(t) + TM * BK; };
  const int m0 = blockIdx.x * TM, n0 = blockIdx.y * TN;
  const int wg = nnc_wg::warpgroup(), warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  /* the warpgroup's 64 rows and WN columns of the tile */
  const int wm = SH::WGN == 1 ? wg : 0, wn = SH::WGN == 1 ? 0 : wg;
  auto sb_w = [&](int t) { return sb(t) + wn * SH::WN * piece<T>(); };
  const int kt_end = (g.K + BK - 1) / BK;
  auto load = [&](int t) {
    if (t < kt_end) {
      load_rows<T, TM>(sa(t), g.a, g.lda, m0, g.M, t * BK, g.K);
      load_rows<T, TN>(sb(t), g.b, g.ldb, n0, g.N, t * BK, g.K);
    }
    nnc_cp_async_commit(); /* empty past the end: one group a step */
  };

  float acc[SH::WN / 2];
  mainloop<T, SH::WN, SH::AHEAD, SH::S>(acc, kt_end, wm, load, sa, sb_w);

  /* alpha, bias, then the warpgroup's 64 x WN part of the tile through shared memory */
  float *cs = reinterpret_cast<float *>(base) + wm * 64 * CST + wn * SH::WN;
#pragma unroll
  for (int nt = 0; nt < SH::WN / 8; ++nt) {
    const int col = nt * 8 + 2 * (lane % 4);
    const int gc = n0 + wn * SH::WN + col; /* C's column */
    float b0 = 0.0f, b1 = 0.0f;
    if (g.bias) {
      if (gc < g.N) b0 = nnc_dtype<T>::load(g.bias[gc]);
      if (gc + 1 < g.N) b1 = nnc_dtype<T>::load(g.bias[gc + 1]);
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = warp * 16 + lane / 4 + 8 * hr;
      *reinterpret_cast<float2 *>(cs + row * CST + col) =
          make_float2(fmaf(acc[nt * 4 + 2 * hr], g.alpha, b0), fmaf(acc[nt * 4 + 2 * hr + 1], g.alpha, b1));
    }
  }
  __syncthreads();
  /* each warpgroup writes half the tile's rows, whole */
  const float *ct = reinterpret_cast<const float *>(base);
  const int t = threadIdx.x % 128;
  for (int r = wg * (TM / 2); r < (wg + 1) * (TM / 2); ++r) {
    const int row = m0 + r;
    if (row >= g.M) break;
    TO *crow = g.c + (long long)row * g.ldc + n0;
    if constexpr (!EPI) {
#pragma unroll
      for (int c = t; c < TN; c += 128)
        if (n0 + c < g.N) store(crow + c, ct[r * CST + c]);
    } else {
      const TO *rrow = g.residual ? g.residual + (long long)row * g.ldr + n0 : nullptr;
#pragma unroll
      for (int c = t; c < TN; c += 128) {
        if (n0 + c >= g.N) continue;
        float v = ct[r * CST + c];
        if (!g.act_last) v = nnc_gemm_act_rt(g.act, v);
        if (rrow) v += nnc_dtype<TO>::load(rrow[c]);
        if (g.act_last) v = nnc_gemm_act_rt(g.act, v);
        store(crow + c, v);
      }
    }
  }
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture: never dispatched to (see
   * attention_wgmma.cuh); a build that mixes that up fails loudly */
  __trap();
#endif
}

namespace nnc_gw {

template <typename T, typename TO, bool EPI, class SH>
nnc_cuda_status launch(const nnc_cuda_gemm_wgmma_args<T, TO> &g, cudaStream_t stream, nnc_cuda_error *err) {
  static_assert(SH::M * SH::CST * sizeof(float) <= smem_bytes<T, SH>() - 1024, "the epilogue's tile fits in the stages");
  if ((g.N + SH::N - 1) / SH::N > 65535)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected N <= %d, found %d", 65535 * SH::N, g.N);
  auto kernel = nnc_gemm_wgmma_kernel<T, TO, EPI, SH>;
  const size_t smem = smem_bytes<T, SH>();
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, smem, raised);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cudaFuncSetAttribute failed: %s", cudaGetErrorString(e));
  const dim3 grid((unsigned)((g.M + SH::M - 1) / SH::M), (unsigned)((g.N + SH::N - 1) / SH::N));
  kernel<<<grid, NTHREADS, smem, stream>>>(g);
  return nnc_cuda_check_launch(err, KERNEL);
}

}  // namespace nnc_gw

template <typename T, typename TO, bool EPI = false>
nnc_cuda_status nnc_cuda_gemm_wgmma(const nnc_cuda_gemm_wgmma_args<T, TO> &g, cudaStream_t stream,
                                    nnc_cuda_error *err) {
  using namespace nnc_gw;
  if (g.M < 0 || g.N < 0 || g.K < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected sizes >= 0, found M %d, N %d, K %d", g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return NNC_CUDA_OK;
  if (g.K % 8 || g.lda % 8 || g.ldb % 8 || g.lda < g.K || g.ldb < g.K || g.ldc < g.N)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected K, lda and ldb multiples of 8, lda and ldb >= K, ldc >= N; found K %d, lda %lld, "
                         "ldb %lld, ldc %lld, N %d",
                         g.K, g.lda, g.ldb, g.ldc, g.N);
  if (!EPI && (g.act != NNC_CUDA_ACT_NONE || g.residual))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected no activation or residual without the epilogue instance (EPI), found act %d, "
                         "residual %p", (int)g.act, (const void *)g.residual);
  if ((unsigned)g.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected an nnc_cuda_act, found %d", (int)g.act);
  if (g.residual && g.ldr < g.N)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected ldr >= N, found ldr %lld, N %d", g.ldr, g.N);
  if (!g.a || !g.b || !g.c)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected device pointers for a, b and c, found %p, %p, %p",
                         (const void *)g.a, (const void *)g.b, (const void *)g.c);
  if ((reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.b)) % 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a and b 16-byte aligned, found %p and %p",
                         (const void *)g.a, (const void *)g.b);
  return g.M <= small::M ? launch<T, TO, EPI, small>(g, stream, err) : launch<T, TO, EPI, big>(g, stream, err);
}

#endif
