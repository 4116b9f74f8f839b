/* templates/cuda/gemm_w8a8.cuh — the int8 tensor-core GEMM of
 * --quantize=w8a8: A [M, K] and W [N, K] int8 (both K-major), int32
 * accumulators of mma.sync.m16n8k32.s8.s8.s32, and the dequantization in
 * the epilogue, in registers:
 *   out[m][n] = act(alpha * acc[m][n] * a_scale[m] * w_scale[n] + bias[n])
 *               + residual[m][n]     (or act(... + residual) when act_last)
 * written as TO (bf16, f16 or f32).
 *
 * The structure is gemm_kernel.cuh's (its B_TRANS path, without the norm
 * prologue: the row quantization kernel already applied the norm): a block
 * computes a BM x BN tile, WARPS_M x WARPS_N warps each own a piece of it,
 * K is walked BK at a time through a ring of STAGES shared-memory stages
 * filled by cp.async (16 bytes, zero-filled past M, N or K), fragments
 * come by ldmatrix, double-buffered across k steps.
 *
 * Why ldmatrix works unchanged on int8: m16n8k32's s8 fragments are, byte
 * for byte, m16n8k16's b16 ones (thread (g, t) of a warp holds row g, bytes
 * 4t..4t+3 of each 16-byte column block, rows g + 8 in the next register),
 * so a 16 x 32-byte piece of A is one ldmatrix.x4 of four 8 x 8 b16
 * matrices, as a 16 x 16 bf16 piece is; k steps are 32 bytes instead of 16
 * elements. Shared-memory rows are BK + 16 bytes (80 for BK = 64): the 8
 * rows an ldmatrix reads start 20 words apart, in distinct bank groups.
 *
 * K must be a multiple of 16 (whole 16-byte chunks, rows 16-byte aligned);
 * M and N any. Odd N is written one element at a time. */
#ifndef NNC_CUDA_GEMM_W8A8_CUH
#define NNC_CUDA_GEMM_W8A8_CUH

#include <math.h>

#include "gemm_kernel.cuh"

template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_> struct nnc_w8a8_tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;   /* BK in k = bytes */
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; /* one warp's piece */
  static constexpr int MI = WM / 16, NI = WN / 8;            /* its mma tiles */
  static constexpr int LD = BK + 16;                         /* a stage's row, bytes */
  static constexpr int A_STAGE = BM * LD, B_STAGE = BN * LD;
  static constexpr size_t SMEM_BYTES = (size_t)STAGES * (A_STAGE + B_STAGE);
  static_assert(BM % (WARPS_M * 16) == 0 && BN % (WARPS_N * 16) == 0, "warp pieces of 16 x 16");
  static_assert(BK % 64 == 0 && STAGES >= 3, "BK a multiple of 64 (an even number of k32 steps), three stages or more");
  static_assert(THREADS % (BK / 16) == 0 && BM % (THREADS / (BK / 16)) == 0 && BN % (THREADS / (BK / 16)) == 0,
                "A and W tiles split evenly into 16-byte chunks over the threads");
};

/* 128 x 128 tiles where there are enough of them to fill the GPU, else
 * 64 x 64 (BERT MiniLM's 384-wide outputs at 4096 rows: 96 big tiles for
 * 132 SMs, 384 small ones). */
using nnc_w8a8_tile_big = nnc_w8a8_tile<128, 128, 64, 2, 4, 4>;
using nnc_w8a8_tile_small = nnc_w8a8_tile<64, 64, 64, 2, 2, 4>;

template <typename TO> struct nnc_cuda_w8a8_gemm_args {
  int M, N, K;
  const signed char *a;   /* [M, K], 16-byte aligned */
  const float *a_scale;   /* [M] */
  const signed char *w;   /* [N, K], 16-byte aligned */
  const float *w_scale;   /* [N] */
  const TO *bias;         /* [N] or NULL */
  const TO *residual;     /* [M, N] or NULL; may be d itself */
  bool act_last;          /* act(... + residual) instead of act(...) + residual */
  TO *d;                  /* [M, N] */
  float alpha;
  nnc_cuda_act act;
};

__device__ __forceinline__ void nnc_mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two adjacent elements of a row as floats, and back (p 2-element aligned). */
template <typename TO> __device__ __forceinline__ float2 nnc_w8a8_load2(const TO *p) {
  if constexpr (sizeof(TO) == 4) return *reinterpret_cast<const float2 *>(p);
  else return nnc_mma<TO>::unpack2(*reinterpret_cast<const uint32_t *>(p));
}
template <typename TO> __device__ __forceinline__ void nnc_w8a8_store2(TO *p, float a, float b) {
  if constexpr (sizeof(TO) == 4) *reinterpret_cast<float2 *>(p) = make_float2(a, b);
  else *reinterpret_cast<uint32_t *>(p) = nnc_mma<TO>::pack2(a, b);
}

/* One value of the epilogue: acc x its scale (alpha * a_scale * w_scale),
 * the bias, the activation and the residual in the order act_last says. */
template <int ACT>
__device__ __forceinline__ float nnc_w8a8_value(int acc, float scale, float bias, float res, bool act_last) {
  const float v = fmaf((float)acc, scale, bias);
  return act_last ? nnc_gemm_act<ACT>(v + res) : nnc_gemm_act<ACT>(v) + res;
}

/* Writes one warp's piece: (m0w, n0w) is its top-left corner in d. */
template <typename TO, class C, int ACT>
__device__ __forceinline__ void nnc_w8a8_epilogue(const nnc_cuda_w8a8_gemm_args<TO> &p, int m0w, int n0w, int lane,
                                                  const int (&acc)[C::MI][C::NI][4]) {
  const int g = lane / 4, t = lane % 4;
  const bool pairs = p.N % 2 == 0;   /* rows of 2-element-aligned pairs */
#pragma unroll
  for (int ni = 0; ni < C::NI; ++ni) {
    const int col = n0w + ni * 8 + 2 * t;
    if (col >= p.N) continue;
    const bool two = col + 1 < p.N;
    const float ws0 = p.w_scale[col] * p.alpha, ws1 = two ? p.w_scale[col + 1] * p.alpha : 0.0f;
    const float b0 = p.bias ? nnc_dtype<TO>::load(p.bias[col]) : 0.0f;
    const float b1 = p.bias && two ? nnc_dtype<TO>::load(p.bias[col + 1]) : 0.0f;
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0w + mi * 16 + g + 8 * h;
        if (row >= p.M) continue;
        const float as = p.a_scale[row];
        const long long at = (long long)row * p.N + col;
        float2 r = make_float2(0.0f, 0.0f);
        if (p.residual && pairs) r = nnc_w8a8_load2(p.residual + at);
        else if (p.residual) r = make_float2(nnc_dtype<TO>::load(p.residual[at]), two ? nnc_dtype<TO>::load(p.residual[at + 1]) : 0.0f);
        const float v0 = nnc_w8a8_value<ACT>(acc[mi][ni][2 * h], as * ws0, b0, r.x, p.act_last);
        const float v1 = nnc_w8a8_value<ACT>(acc[mi][ni][2 * h + 1], as * ws1, b1, r.y, p.act_last);
        if (pairs) {
          nnc_w8a8_store2(p.d + at, v0, v1);
        } else {
          p.d[at] = nnc_dtype<TO>::store(v0);
          if (two) p.d[at + 1] = nnc_dtype<TO>::store(v1);
        }
      }
    }
  }
}

/* Grid: (ceil(N / BN), ceil(M / BM)); C::THREADS threads; C::SMEM_BYTES of
 * dynamic shared memory. */
template <typename TO, class C>
__global__ void __launch_bounds__(C::THREADS) nnc_w8a8_gemm_kernel(const nnc_cuda_w8a8_gemm_args<TO> p) {
  extern __shared__ uint4 nnc_w8a8_smem[];
  signed char *const as = reinterpret_cast<signed char *>(nnc_w8a8_smem);
  signed char *const bs = as + C::STAGES * C::A_STAGE;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const int m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;
  const int M = p.M, N = p.N, K = p.K;
  const int KT = (K + C::BK - 1) / C::BK;

  /* Tiles: rows of BK bytes, CPR 16-byte chunks a row; a thread copies one
   * chunk column of every RPP-th row. */
  constexpr int CPR = C::BK / 16, RPP = C::THREADS / CPR;
  constexpr int A_IT = C::BM / RPP, B_IT = C::BN / RPP;
  const int ld_row = tid / CPR, ld_col = (tid % CPR) * 16;
  const signed char *const a_src = p.a + (long long)(m0 + ld_row) * K + ld_col;
  const signed char *const b_src = p.w + (long long)(n0 + ld_row) * K + ld_col;

  auto load = [&](int stage, int kt) {
    const bool kin = kt * C::BK + ld_col < K;
    signed char *da = as + stage * C::A_STAGE + ld_row * C::LD + ld_col;
    signed char *db = bs + stage * C::B_STAGE + ld_row * C::LD + ld_col;
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      const bool ok = kin && m0 + ld_row + i * RPP < M;
      nnc_cp_async16(nnc_smem_u32(da + i * RPP * C::LD), ok ? a_src + (long long)i * RPP * K + kt * C::BK : p.a, ok);
    }
#pragma unroll
    for (int i = 0; i < B_IT; ++i) {
      const bool ok = kin && n0 + ld_row + i * RPP < N;
      nnc_cp_async16(nnc_smem_u32(db + i * RPP * C::LD), ok ? b_src + (long long)i * RPP * K + kt * C::BK : p.w, ok);
    }
  };

  int acc[C::MI][C::NI][4];
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::NI; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0;

  /* The first STAGES - 1 stages; one commit group per stage, empty ones
   * too, so that wait_group counts stay aligned with stages. */
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < KT) load(s, s);
    nnc_cp_async_commit();
  }

  /* Where this lane's ldmatrix rows start inside a stage (bytes). */
  const int a_row = wm * C::WM + (lane % 16), a_col = (lane / 16) * 16;
  const int b_row = wn * C::WN + (lane % 8) + (lane / 16) * 8, b_col = ((lane / 8) % 2) * 16;

  constexpr int KK = C::BK / 32;
  uint32_t af[2][C::MI][4], bf[2][C::NI][2];
  auto load_frags = [&](int buf, int stage, int kk) {
    const uint32_t a_base = nnc_smem_u32(as + stage * C::A_STAGE);
    const uint32_t b_base = nnc_smem_u32(bs + stage * C::B_STAGE);
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
      nnc_ldmatrix_x4(af[buf][mi], a_base + (uint32_t)((a_row + mi * 16) * C::LD + kk * 32 + a_col));
#pragma unroll
    for (int nj = 0; nj < C::NI / 2; ++nj) {
      uint32_t r[4];
      nnc_ldmatrix_x4(r, b_base + (uint32_t)((b_row + nj * 16) * C::LD + kk * 32 + b_col));
      bf[buf][2 * nj][0] = r[0];
      bf[buf][2 * nj][1] = r[1];
      bf[buf][2 * nj + 1][0] = r[2];
      bf[buf][2 * nj + 1][1] = r[3];
    }
  };

  /* The ring, as gemm_kernel.cuh's: tile kt sits in stage kt % STAGES; the
   * wait and barrier for tile kt + 1 come before the last step of tile kt,
   * whose fragments are already in registers; after that barrier no thread
   * reads stage (kt - 1) % STAGES, which tile kt + STAGES - 1 then fills. */
  nnc_cp_async_wait<C::STAGES - 2>();
  __syncthreads();
  if (KT > 0) load_frags(0, 0, 0);
  for (int kt = 0; kt < KT; ++kt) {
    const int stage = kt % C::STAGES;
    const int next = kt + C::STAGES - 1;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
      if (kk == KK - 1) {
        nnc_cp_async_wait<C::STAGES - 2>();
        __syncthreads();
      }
      if (kk < KK - 1) load_frags((kk + 1) % 2, stage, kk + 1);
      else if (kt + 1 < KT) load_frags((kk + 1) % 2, (kt + 1) % C::STAGES, 0);
      if (kk == 0) {
        if (next < KT) load(next % C::STAGES, next);
        nnc_cp_async_commit();
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < C::NI; ++ni) nnc_mma_s8(acc[mi][ni], af[kk % 2][mi], bf[kk % 2][ni][0], bf[kk % 2][ni][1]);
    }
  }
  nnc_cp_async_wait<0>(); /* no copy may land after the block exits */

  const int m0w = m0 + wm * C::WM, n0w = n0 + wn * C::WN;
  switch (p.act) {
  case NNC_CUDA_ACT_RELU: nnc_w8a8_epilogue<TO, C, NNC_CUDA_ACT_RELU>(p, m0w, n0w, lane, acc); break;
  case NNC_CUDA_ACT_GELU_ERF: nnc_w8a8_epilogue<TO, C, NNC_CUDA_ACT_GELU_ERF>(p, m0w, n0w, lane, acc); break;
  case NNC_CUDA_ACT_GELU_TANH: nnc_w8a8_epilogue<TO, C, NNC_CUDA_ACT_GELU_TANH>(p, m0w, n0w, lane, acc); break;
  case NNC_CUDA_ACT_SILU: nnc_w8a8_epilogue<TO, C, NNC_CUDA_ACT_SILU>(p, m0w, n0w, lane, acc); break;
  default: nnc_w8a8_epilogue<TO, C, NNC_CUDA_ACT_NONE>(p, m0w, n0w, lane, acc); break;
  }
}

template <typename TO, class C>
cudaError_t nnc_w8a8_launch(const nnc_cuda_w8a8_gemm_args<TO> &p, cudaStream_t s) {
  auto kernel = nnc_w8a8_gemm_kernel<TO, C>;
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, C::SMEM_BYTES, raised);
  if (e != cudaSuccess) return e;
  const dim3 grid((unsigned)((p.N + C::BN - 1) / C::BN), (unsigned)((p.M + C::BM - 1) / C::BM));
  kernel<<<grid, C::THREADS, C::SMEM_BYTES, s>>>(p);
  return cudaSuccess;
}

/* Big tiles when there are at least as many of them as SMs (and the device
 * gives a block their shared memory), else small ones. */
inline bool nnc_w8a8_big_tiles(int M, int N) {
  int dev = 0, sms = 132, smem_optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError(); /* the launch reports any real trouble */
    return false;
  }
  const long long tiles = (long long)((M + 127) / 128) * ((N + 127) / 128);
  return tiles >= sms && nnc_w8a8_tile_big::SMEM_BYTES <= (size_t)smem_optin;
}

/* Which tiles: by nnc_w8a8_big_tiles, or one size (tests run both). */
enum nnc_w8a8_tiles { NNC_W8A8_TILES_AUTO, NNC_W8A8_TILES_128, NNC_W8A8_TILES_64 };

/* The GEMM p describes, on the stream s, with the tiles asked for. */
template <typename TO>
nnc_cuda_status nnc_cuda_gemm_w8a8_ex(const nnc_cuda_w8a8_gemm_args<TO> &p, nnc_w8a8_tiles tiles, cudaStream_t s,
                                      nnc_cuda_error *err) {
  const char *kn = "nnc_cuda_gemm_w8a8";
  if (p.M < 0 || p.N < 0 || p.K < 0 || p.K % 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "expected M, N >= 0 and K a multiple of 16, found M=%d N=%d K=%d", p.M,
                         p.N, p.K);
  if ((unsigned)p.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "expected an nnc_cuda_act (%d to %d), found act %d", (int)NNC_CUDA_ACT_NONE,
                         (int)NNC_CUDA_ACT_SILU, (int)p.act);
  if (p.M == 0 || p.N == 0) return NNC_CUDA_OK;
  if (!p.a || !p.a_scale || !p.w || !p.w_scale || !p.d)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "expected a, a_scale, w, w_scale and d, found a NULL one");
  const uintptr_t pa = reinterpret_cast<uintptr_t>(p.a), pw = reinterpret_cast<uintptr_t>(p.w);
  const uintptr_t pd = reinterpret_cast<uintptr_t>(p.d), pr = reinterpret_cast<uintptr_t>(p.residual);
  if (pa % 16 || pw % 16 || pd % (2 * sizeof(TO)) || pr % (2 * sizeof(TO)))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn,
                         "expected a, w 16-byte aligned and d, residual %zu-byte aligned, found a=%p w=%p d=%p "
                         "residual=%p", 2 * sizeof(TO), (const void *)p.a, (const void *)p.w, (void *)p.d,
                         (const void *)p.residual);
  const bool big = tiles == NNC_W8A8_TILES_AUTO ? nnc_w8a8_big_tiles(p.M, p.N) : tiles == NNC_W8A8_TILES_128;
  if ((p.M + (big ? 127 : 63)) / (big ? 128 : 64) > 65535)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kn, "expected ceil(M / %d) <= 65535 (grid), found M=%d", big ? 128 : 64, p.M);
  const cudaError_t e = big ? nnc_w8a8_launch<TO, nnc_w8a8_tile_big>(p, s) : nnc_w8a8_launch<TO, nnc_w8a8_tile_small>(p, s);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, kn, "tile %s: %s", big ? "128x128x64" : "64x64x64", cudaGetErrorString(e));
  }
  return nnc_cuda_check_launch(err, kn);
}

/* The GEMM p describes, on the stream s: what a folder calls. */
template <typename TO>
nnc_cuda_status nnc_cuda_gemm_w8a8(const nnc_cuda_w8a8_gemm_args<TO> &p, cudaStream_t s, nnc_cuda_error *err) {
  return nnc_cuda_gemm_w8a8_ex(p, NNC_W8A8_TILES_AUTO, s, err);
}

#endif
