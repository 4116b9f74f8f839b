/* templates/cuda/gemm_tma8.cuh — gemm_tma.cuh's pipeline on 8-bit operands
 * (sm_90a only): e4m3 x e4m3 -> f32 (--precision=fp8) or s8 x s8 -> s32
 * (--quantize=w8a8) on wgmma m64nBNk32, twice the bf16 rate, with the
 * dequantization in the epilogue:
 *   v = acc[m][n] * (alpha * a_scale[m]) * b_scale[n] + bias[n]
 *   c = act(v) + residual   (act(v + residual) when act_last)
 *
 *   nnc_cuda_status nnc_cuda_gemm_tma8<T8, TO[, EPI]>(const nnc_cuda_gemm_tma8_args<T8, TO> &g,
 *                                                    cudaStream_t stream, nnc_cuda_error *err);
 * T8: __nv_fp8_e4m3 or signed char; TO (C, bias and residual): float,
 * __nv_bfloat16 or __half. A is [M][lda], B is [N][ldb] (the weight as
 * [out][in]; both K-major, the only layout 8-bit wgmma reads), C is
 * [M][ldc] with ldc >= N anything (rows of any length and alignment, as
 * GPT-2's 50257-wide head). K, lda, ldb multiples of 16 (the copy engine's
 * 16-byte strides; gemm_wgmma_fp8.cuh's and gemm_w8a8.cuh's contract), A
 * and B 16-byte aligned. a_scale_step 1: a scale per row of A (quantized
 * rows); 0: one for all rows (a per-tensor scale). b_scale: a scale per
 * output channel. K == 0 gives bias (or 0). EPI true: the instance that
 * applies act and residual; the default refuses them. Returns
 * NNC_CUDA_E_ARG for bad arguments, NNC_CUDA_E_LAUNCH when the device is
 * not sm_90 or the runtime or driver refuses, launching nothing; never
 * synchronizes.
 *
 * What is gemm_tma.cuh's: the producer, the stage ring and the k loop
 * (produce, mainloop: a stage is 128 bytes of k either way, so 128 k of
 * 8-bit, four k32 products a stage), the persistent tile walk, the tile
 * width choice, the tensor maps, the argument checks (nnc_gt::check_args)
 * and the row stores (gemm_tma_rows.cuh).
 * What is this file's: the scales. A thread's two accumulator rows take
 * their row scale (times alpha) in registers; each warpgroup keeps the
 * tile's column scales and bias as f32 rows in shared memory (loaded
 * into registers before the k loop, stored after, as gemm_tma.cuh does
 * its bias). Those 2 KB a warpgroup do not fit beside gemm_tma.cuh's 64-row
 * epilogue buffers, so a warpgroup stages 32 rows at a time (its warps 0-1,
 * then 2-3: each warp owns 16 accumulator rows) in 8 KB: the same stages
 * as the bf16 kernel's, 4 of 48 KB or 6 of 32 KB, rather than fewer (with
 * 64-row buffers: 3 or 5).
 * Not done: e4m3 output (gemm_wgmma_fp8.cuh's, which no folder calls). */
#ifndef NNC_CUDA_GEMM_TMA8_CUH
#define NNC_CUDA_GEMM_TMA8_CUH

#include <cuda_fp8.h>

#include "gemm_tma.cuh"

template <typename T8, typename TO> struct nnc_cuda_gemm_tma8_args {
  int M, N, K;
  const T8 *a; /* [M][lda] */
  long long lda;
  const float *a_scale; /* [M] (a_scale_step 1) or one float (0) */
  int a_scale_step;
  const T8 *b; /* [N][ldb]: C = A B^T */
  long long ldb;
  const float *b_scale; /* [N] */
  const TO *bias;       /* [N], or NULL */
  const TO *residual;   /* [M][ldr], or NULL: added after act (before it when act_last); may be c */
  long long ldr;
  nnc_cuda_act act; /* NNC_CUDA_ACT_NONE (0) unless set */
  bool act_last;
  bool stream_c; /* store C evict-first (the logits) */
  float alpha;
  TO *c;
  long long ldc;
  int tile_n;     /* 0: the launcher picks; 128 or 256 forces the tile's width (tests, timing) */
  int max_blocks; /* 0: one block an SM; else this many blocks (tests of the tile loop) */
  bool b_fixed;   /* B is a weight no kernel wrote since the last launch without PDL: gemm_tma.cuh's */
};

template <typename T8, typename TO> struct nnc_gemm_tma8_params {
  nnc_cuda_gemm_tma8_args<T8, TO> g;
  CUtensorMap ma, mb;
  int tiles_m, tiles, kt;
  bool vec; /* every row of C (and of the residual) starts 16-byte aligned */
};

namespace nnc_gt8 {

using namespace nnc_gt;

constexpr const char *NAME = "nnc_cuda_gemm_tma8"; /* in messages */
constexpr int HALF_ROWS = 32, HALF_FLOATS = HALF_ROWS * CHUNK; /* a warpgroup's buffer: 32 rows of a chunk */

template <typename T8> using acc_t = typename std::conditional<std::is_same<T8, signed char>::value, int, float>::type;

/* 1024 of slack to align the stages, the stages, two buffers, each
 * warpgroup's column scales and bias (f32), the barriers. */
template <int BN> constexpr size_t smem() {
  using L = tile<BN, unsigned char>;
  return 1024 + (size_t)L::STAGES * L::STAGE_ELEMS + 2 * HALF_FLOATS * sizeof(float) + 2 * 2 * BN * sizeof(float) +
         2 * L::STAGES * sizeof(uint64_t);
}

/* Columns [64 CH, 64 CH + 64) of the accumulator rows of warps 2h, 2h + 1
 * (wrow: the warp's place in the pair) into the half buffer cs: acc * rs
 * (the row's scale) * sws[col] + sbias[col]. */
template <int BN, int CH, typename Acc>
__device__ __forceinline__ void stage_half(float *cs, const Acc (&acc)[BN / 2], const float (&rs)[2], const float *sws,
                                           const float *sbias, int wrow, int lane) {
#pragma unroll
  for (int j = 0; j < CHUNK / 8; ++j) {
    const int col = j * 8 + 2 * (lane % 4);
    const float2 w = *reinterpret_cast<const float2 *>(sws + CH * CHUNK + col);
    const float2 b = *reinterpret_cast<const float2 *>(sbias + CH * CHUNK + col);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = wrow * 16 + lane / 4 + 8 * hr;
      const int e = (CH * CHUNK / 8 + j) * 4 + 2 * hr;
      *reinterpret_cast<float2 *>(cs + swz(row, col)) =
          make_float2(fmaf((float)acc[e] * rs[hr], w.x, b.x), fmaf((float)acc[e + 1] * rs[hr], w.y, b.y));
    }
  }
}

/* The warpgroup's 64 rows from row0 (< M) of the tile at column n0: per
 * chunk, each half of 32 rows staged by its two warps and stored by all
 * four; the barrier before staging waits for every read of the buffer
 * (and, on a new tile, of the scale rows), the one after for the writes.
 * The price of halves: while half 0 is stored, the chunk's accumulators
 * are still live for half 1 (the code is the same for all four warps),
 * so the 128 x 256 instances with the act/residual loops spill 40-48
 * bytes (ptxas -v); the half loop unrolled spills the least. */
template <typename T8, typename TO, int BN, bool EPI>
__device__ __forceinline__ void epilogue(const nnc_cuda_gemm_tma8_args<T8, TO> &g, bool vec,
                                         const acc_t<T8> (&acc)[BN / 2], const float (&rs)[2], float *cs,
                                         const float *sws, const float *sbias, int wg, int row0, int n0, int t) {
  const int warp = t / 32, lane = t % 32;
#pragma unroll 1
  for (int ch = 0; ch < BN / CHUNK; ++ch) {
    const int nc = n0 + ch * CHUNK;
    if (nc >= g.N) break;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r0 = row0 + h * HALF_ROWS;
      if (r0 >= g.M) break;
      wg_sync(wg);
      if (warp / 2 == h)
        with_chunk<BN / CHUNK>(
            ch, [&](auto c) { stage_half<BN, decltype(c)::value>(cs, acc, rs, sws, sbias, warp % 2, lane); });
      wg_sync(wg);
      TO *c = g.c + (long long)r0 * g.ldc + nc;
      const TO *res = EPI && g.residual ? g.residual + (long long)r0 * g.ldr + nc : nullptr;
      store_chunk<EPI, HALF_ROWS>(cs, c, g.ldc, res, g.ldr, g.act, g.act_last, g.stream_c, vec,
                                  min(HALF_ROWS, g.M - r0), min(CHUNK, g.N - nc), t);
    }
  }
}

/* A consumer warpgroup (wg 0 or 1) over the block's tiles. The tile's row
 * scales (two a thread), column scales and bias are read before its k
 * loop, so the loads land under it; the column values go to the
 * warpgroup's rows of shared memory after it. */
template <typename T8, typename TO, int BN, bool EPI>
__device__ __forceinline__ void consume(const nnc_gemm_tma8_params<T8, TO> &p, const T8 *stages, float *buffers,
                                        float *cols, uint64_t *full, uint64_t *empty) {
  const nnc_cuda_gemm_tma8_args<T8, TO> &g = p.g;
  const int wg = nnc_wg::warpgroup() - 1, t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  float *cs = buffers + wg * HALF_FLOATS;
  float *sws = cols + wg * 2 * BN, *sbias = sws + BN;
  int s = 0;
  unsigned ph = 0;
  for (int tl = blockIdx.x; tl < p.tiles; tl += gridDim.x) {
    const int m0 = tl % p.tiles_m * BM, n0 = tl / p.tiles_m * BN;
    acc_t<T8> acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0;
    float ws[BN / 128], bias[BN / 128], rs[2];
#pragma unroll
    for (int i = 0; i < BN / 128; ++i) {
      const int n = n0 + t + 128 * i;
      ws[i] = n < g.N ? g.b_scale[n] : 0.0f;
      bias[i] = g.bias && n < g.N ? nnc_dtype<TO>::load(g.bias[n]) : 0.0f;
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int m = m0 + wg * 64 + warp * 16 + lane / 4 + 8 * hr;
      rs[hr] = m < g.M ? g.alpha * g.a_scale[(long long)m * g.a_scale_step] : 0.0f;
    }
    mainloop<T8, BN>(acc, p.kt, wg, lane, s, ph, stages, full, empty);
#pragma unroll
    for (int i = 0; i < BN / 128; ++i) sws[t + 128 * i] = ws[i], sbias[t + 128 * i] = bias[i];
    const int row0 = m0 + wg * 64;
    if (row0 < g.M) epilogue<T8, TO, BN, EPI>(g, p.vec, acc, rs, cs, sws, sbias, wg, row0, n0, t);
  }
}

}  // namespace nnc_gt8

template <typename T8, typename TO, int BN, bool EPI>
__global__ void __launch_bounds__(nnc_gt::NTHREADS, 1)
    nnc_gemm_tma8_kernel(const __grid_constant__ nnc_gemm_tma8_params<T8, TO> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_gt8;
  using L = tile<BN, T8>;
  extern __shared__ __align__(16) unsigned char nnc_gt8_smem[];
  const uint32_t raw = nnc_smem_u32(nnc_gt8_smem);
  T8 *stages = reinterpret_cast<T8 *>(nnc_gt8_smem + (((raw + 1023) & ~1023u) - raw));
  float *buffers = reinterpret_cast<float *>(stages + L::STAGES * L::STAGE_ELEMS);
  float *cols = buffers + 2 * HALF_FLOATS;
  uint64_t *full = reinterpret_cast<uint64_t *>(cols + 2 * 2 * BN);
  uint64_t *empty = full + L::STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < L::STAGES; ++s) nnc_tma::init(&full[s], 1), nnc_tma::init(&empty[s], EMPTY_ARRIVALS);
    nnc_tma::fence_init();
  }
  __syncthreads();
  nnc_pdl::let_next_start(); /* as gemm_tma.cuh's kernel */
  if (threadIdx.x < 128) {
    regs_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) produce<T8, BN>(p, p.g.b_fixed, stages, full, empty);
  } else {
    regs_inc<CONSUMER_REGS>();
    nnc_pdl::wait(); /* the scales, bias, residual and C: after the kernel before */
    consume<T8, TO, BN, EPI>(p, stages, buffers, cols, full, empty);
  }
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture: the launcher refuses devices
   * other than 9.0, so this is never reached */
  __trap();
#endif
}

namespace nnc_gt8 {

template <typename T8, typename TO, int BN, bool EPI>
nnc_cuda_status launch(nnc_gemm_tma8_params<T8, TO> &p, int sms, cudaStream_t stream, nnc_cuda_error *err) {
  const nnc_cuda_gemm_tma8_args<T8, TO> &g = p.g;
  const nnc_cuda_status st = plan<BN>(p, g.M, g.N, g.K, g.a, g.lda, g.b, g.ldb, NAME, err);
  if (st != NNC_CUDA_OK) return st;
  auto kernel = nnc_gemm_tma8_kernel<T8, TO, BN, EPI>;
  constexpr size_t bytes = smem<BN>();
  static_assert(bytes <= 227 * 1024, "a block's shared memory on sm_90");
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, bytes, raised);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, NAME, "cudaFuncSetAttribute(%zu bytes) failed: %s", bytes,
                         cudaGetErrorString(e));
  return launch_early(kernel, p, grid_of(p.tiles, g.max_blocks, sms), bytes, stream, NAME, err);
}

}  // namespace nnc_gt8

template <typename T8, typename TO, bool EPI = false>
nnc_cuda_status nnc_cuda_gemm_tma8(const nnc_cuda_gemm_tma8_args<T8, TO> &g, cudaStream_t stream,
                                   nnc_cuda_error *err) {
  using namespace nnc_gt8;
  static_assert(std::is_same<T8, __nv_fp8_e4m3>::value || std::is_same<T8, signed char>::value,
                "e4m3 or s8 operands");
  static_assert(std::is_same<TO, float>::value || std::is_same<TO, __nv_bfloat16>::value ||
                    std::is_same<TO, __half>::value,
                "f32, bf16 or f16 out");
  /* this kernel's own checks, after the pointers of a, b and c */
  auto scales = [&] {
    if (!g.a_scale || !g.b_scale)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, NAME, "expected device pointers for a_scale and b_scale, found %p, %p",
                           (const void *)g.a_scale, (const void *)g.b_scale);
    if (g.a_scale_step != 0 && g.a_scale_step != 1)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, NAME, "expected a_scale_step 0 or 1, found %d", g.a_scale_step);
    return NNC_CUDA_OK;
  };
  int sms = 0;
  bool none = false;
  const nnc_cuda_status st = nnc_gt::check_args<EPI>(g, NAME, scales, &none, &sms, err);
  if (st != NNC_CUDA_OK || none) return st;
  nnc_gemm_tma8_params<T8, TO> p;
  memset(&p, 0, sizeof p); /* K == 0 leaves the maps unused */
  p.g = g;
  p.vec = nnc_gt::rows_aligned(g);
  const int bn = g.tile_n ? g.tile_n : pick_bn(g.M, g.N, sms);
  return bn == 128 ? launch<T8, TO, 128, EPI>(p, sms, stream, err) : launch<T8, TO, 256, EPI>(p, sms, stream, err);
}

#endif
