/* templates/cuda/gemm_kernel.cuh — the tensor-core GEMM tile kernel with the
 * row-norm prologue and the register epilogue.
 *
 * A block computes a BM x BN tile of out; WARPS_M x WARPS_N warps each own a
 * (BM / WARPS_M) x (BN / WARPS_N) piece of it as f32 accumulators of
 * mma.sync.m16n8k16. K is walked BK at a time through a ring of STAGES
 * shared-memory stages: while the warps multiply stage kt, the copies of
 * stage kt + STAGES - 1 are in flight.
 *
 * B always arrives by cp.async (16 bytes, zero-filled past N or K). A does
 * too without a norm. With a norm, A cannot be copied raw: each element must
 * become (a - mean) * rstd * gamma[k] + beta[k], rounded to T, before
 * ldmatrix hands it to the tensor cores. We load A's 16-byte chunks into
 * registers at the top of iteration kt (for tile kt + STAGES - 1), multiply
 * stage kt meanwhile, then normalize and st.shared them into their stage.
 * That normalizes each element once per block (not once per warp that reads
 * it, as normalizing ldmatrix fragments would: WARPS_N times over), costs no
 * extra shared-memory pass and no extra barrier (normalizing in shared memory
 * after a raw cp.async would need both), and the stage it writes was freed by
 * the barrier at the top of the iteration. The price: those loads have one
 * iteration of multiply to hide behind instead of STAGES - 1; A is re-read by
 * every column block, so it mostly comes from L2.
 *
 * Shared-memory rows are padded by 16 bytes, so the 8 rows an ldmatrix
 * reads (and the rows of a [K, N] tile read transposed) fall in distinct
 * bank groups. The epilogue works on the accumulators in registers: alpha,
 * bias, activation, residual, and a 4-byte store of two adjacent columns. */
#ifndef NNC_CUDA_GEMM_KERNEL_CUH
#define NNC_CUDA_GEMM_KERNEL_CUH

#include <math.h>

#include "gemm_args.cuh"
#include "gemm_mma.cuh"

template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_> struct nnc_gemm_tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; /* one warp's piece */
  static constexpr int MI = WM / 16, NI = WN / 8;            /* its mma tiles */
  static constexpr int PAD = 8;                              /* elements: 16 bytes */
  static constexpr int LDA = BK + PAD;                       /* A stage: [BM][LDA] */
  static constexpr int LDB_NK = BK + PAD;                    /* b_trans: [BN][LDB_NK] */
  static constexpr int LDB_KN = BN + PAD;                    /* else: [BK][LDB_KN] */
  static constexpr int A_STAGE = BM * LDA;
  static constexpr int B_STAGE = BN * LDB_NK > BK * LDB_KN ? BN * LDB_NK : BK * LDB_KN;
  static constexpr size_t SMEM_BYTES = (size_t)STAGES * (A_STAGE + B_STAGE) * 2;
  static_assert(BM % (WARPS_M * 16) == 0 && BN % (WARPS_N * 16) == 0, "warp pieces of 16 x 16");
  static_assert(BK % 32 == 0 && STAGES >= 3,
                "BK a multiple of 32 (an even number of k16 steps), three stages or more");
  static_assert(THREADS % (BK / 8) == 0 && BM % (THREADS / (BK / 8)) == 0 &&
                    BN % (THREADS / (BK / 8)) == 0,
                "A and [N, K] B tiles split evenly into 16-byte chunks over the threads");
  static_assert(THREADS % (BN / 8) == 0 && BK % (THREADS / (BN / 8)) == 0,
                "[K, N] B tiles split evenly into 16-byte chunks over the threads");
};

__device__ __forceinline__ float nnc_tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int ACT> __device__ __forceinline__ float nnc_gemm_act(float x) {
  if constexpr (ACT == NNC_CUDA_ACT_RELU) {
    return fmaxf(x, 0.0f);
  } else if constexpr (ACT == NNC_CUDA_ACT_GELU_ERF) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
  } else if constexpr (ACT == NNC_CUDA_ACT_GELU_TANH) {
    /* tanh.approx (relative error about 2^-11) is below bf16/f16 rounding and
     * is one instruction instead of tanhf's dozen. */
    return 0.5f * x * (1.0f + nnc_tanh_approx(0.7978845608028654f * fmaf(0.044715f * x, x * x, x)));
  } else if constexpr (ACT == NNC_CUDA_ACT_SILU) {
    return x / (1.0f + __expf(-x));
  } else {
    return x;
  }
}

/* The activation chosen at run time (kernels that take it as an argument
 * rather than a template parameter: one instance for every epilogue). */
__device__ __forceinline__ float nnc_gemm_act_rt(nnc_cuda_act a, float x) {
  switch (a) {
  case NNC_CUDA_ACT_RELU: return nnc_gemm_act<NNC_CUDA_ACT_RELU>(x);
  case NNC_CUDA_ACT_GELU_ERF: return nnc_gemm_act<NNC_CUDA_ACT_GELU_ERF>(x);
  case NNC_CUDA_ACT_GELU_TANH: return nnc_gemm_act<NNC_CUDA_ACT_GELU_TANH>(x);
  case NNC_CUDA_ACT_SILU: return nnc_gemm_act<NNC_CUDA_ACT_SILU>(x);
  default: return x;
  }
}

/* Writes one warp's piece: (m0w, n0w) is its top-left corner in out. */
template <typename T, class C, int ACT>
__device__ __forceinline__ void nnc_gemm_epilogue(const nnc_cuda_gemm_args<T> &p, long long z,
                                                  int m0w, int n0w, int lane,
                                                  const float (&acc)[C::MI][C::NI][4]) {
  using mma = nnc_mma<T>;
  const int g = lane / 4, t = lane % 4;
  T *out = p.out + z * p.stride_c;
  const T *res = p.residual ? p.residual + z * p.stride_r : nullptr;
#pragma unroll
  for (int ni = 0; ni < C::NI; ++ni) {
    const int col = n0w + ni * 8 + 2 * t;
    if (col >= p.N) continue; /* N is even: col < N means col + 1 < N */
    float2 bias = make_float2(0.0f, 0.0f);
    if (p.bias) bias = mma::unpack2(*reinterpret_cast<const uint32_t *>(p.bias + col));
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0w + mi * 16 + g + 8 * h;
        if (row >= p.M) continue;
        float v0 = nnc_gemm_act<ACT>(fmaf(p.alpha, acc[mi][ni][2 * h], bias.x));
        float v1 = nnc_gemm_act<ACT>(fmaf(p.alpha, acc[mi][ni][2 * h + 1], bias.y));
        if (res) {
          const float2 r = mma::unpack2(*reinterpret_cast<const uint32_t *>(res + row * p.ldr + col));
          v0 += r.x;
          v1 += r.y;
        }
        *reinterpret_cast<uint32_t *>(out + row * p.ldc + col) = mma::pack2(v0, v1);
      }
    }
  }
}

/* Grid: (ceil(N / BN), ceil(M / BM), batch); C::THREADS threads;
 * C::SMEM_BYTES of dynamic shared memory. stats: (mean, rstd) per row of
 * every batch item, read only when NORM. */
template <typename T, class C, bool B_TRANS, bool NORM>
__global__ void __launch_bounds__(C::THREADS)
    nnc_gemm_kernel(const nnc_cuda_gemm_args<T> p, const float2 *__restrict__ stats) {
  using mma = nnc_mma<T>;
  extern __shared__ uint4 nnc_gemm_smem[];
  T *const as = reinterpret_cast<T *>(nnc_gemm_smem);
  T *const bs = as + C::STAGES * C::A_STAGE;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const int m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;
  const long long z = blockIdx.z;
  const int M = p.M, N = p.N, K = p.K;
  const T *const A = p.a + z * p.stride_a;
  const T *const B = p.b + z * p.stride_b;
  const int KT = (K + C::BK - 1) / C::BK;

  /* A and [N, K] B tiles: rows of BK elements, CPR 16-byte chunks a row; a
   * thread copies one chunk column of every RPP-th row. */
  constexpr int CPR = C::BK / 8, RPP = C::THREADS / CPR;
  constexpr int A_IT = C::BM / RPP, BNK_IT = C::BN / RPP;
  const int ld_row = tid / CPR, ld_col = (tid % CPR) * 8;
  /* [K, N] B tiles: rows of BN elements. */
  constexpr int CPRN = C::BN / 8, RPPN = C::THREADS / CPRN, BKN_IT = C::BK / RPPN;
  const int kn_row = tid / CPRN, kn_col = (tid % CPRN) * 8;

  const T *const a_src = A + (long long)(m0 + ld_row) * p.lda + ld_col;
  const T *const b_src = B_TRANS ? B + (long long)(n0 + ld_row) * p.ldb + ld_col
                                 : B + (long long)kn_row * p.ldb + n0 + kn_col;

  auto load_b = [&](int stage, int kt) {
    T *dst = bs + stage * C::B_STAGE;
    if constexpr (B_TRANS) {
      const bool kin = kt * C::BK + ld_col < K;
      dst += ld_row * C::LDB_NK + ld_col;
#pragma unroll
      for (int i = 0; i < BNK_IT; ++i) {
        const bool ok = kin && n0 + ld_row + i * RPP < N;
        const T *src = ok ? b_src + (long long)i * RPP * p.ldb + kt * C::BK : B;
        nnc_cp_async16(nnc_smem_u32(dst + i * RPP * C::LDB_NK), src, ok);
      }
    } else {
      const bool nin = n0 + kn_col < N;
      dst += kn_row * C::LDB_KN + kn_col;
#pragma unroll
      for (int i = 0; i < BKN_IT; ++i) {
        const int k = kt * C::BK + kn_row + i * RPPN;
        const bool ok = nin && k < K;
        const T *src = ok ? b_src + (long long)(kt * C::BK + i * RPPN) * p.ldb : B;
        nnc_cp_async16(nnc_smem_u32(dst + i * RPPN * C::LDB_KN), src, ok);
      }
    }
  };

  auto load_a_async = [&](int stage, int kt) {
    T *dst = as + stage * C::A_STAGE + ld_row * C::LDA + ld_col;
    const bool kin = kt * C::BK + ld_col < K;
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      const bool ok = kin && m0 + ld_row + i * RPP < M;
      const T *src = ok ? a_src + (long long)i * RPP * p.lda + kt * C::BK : A;
      nnc_cp_async16(nnc_smem_u32(dst + i * RPP * C::LDA), src, ok);
    }
  };

  /* The norm prologue's state: raw chunks in flight, and each of this
   * thread's rows as x * rstd + nmr (nmr = -mean * rstd). */
  uint4 araw[NORM ? A_IT : 1];
  float rstd[NORM ? A_IT : 1], nmr[NORM ? A_IT : 1];
  if constexpr (NORM) {
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      const int row = m0 + ld_row + i * RPP;
      const float2 s = row < M ? stats[z * M + row] : make_float2(0.0f, 0.0f);
      rstd[i] = s.y;
      nmr[i] = -s.x * s.y;
    }
  }

  auto load_a_regs = [&](int kt) {
    const bool kin = kt * C::BK + ld_col < K;
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      const bool ok = kin && m0 + ld_row + i * RPP < M;
      araw[i] = ok ? __ldg(reinterpret_cast<const uint4 *>(a_src + (long long)i * RPP * p.lda +
                                                           kt * C::BK))
                   : make_uint4(0u, 0u, 0u, 0u);
    }
  };

  auto store_a_norm = [&](int stage, int kt) {
    T *dst = as + stage * C::A_STAGE + ld_row * C::LDA + ld_col;
    const int k = kt * C::BK + ld_col;
    if (k >= K) { /* past K the product must see zeros, not beta */
#pragma unroll
      for (int i = 0; i < A_IT; ++i)
        *reinterpret_cast<uint4 *>(dst + i * RPP * C::LDA) = make_uint4(0u, 0u, 0u, 0u);
      return;
    }
    float gm[8], bt[8];
    if (p.gamma) {
      nnc_load_vec_any(p.gamma + k, gm);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) gm[j] = 1.0f;
    }
    if (p.beta) {
      nnc_load_vec_any(p.beta + k, bt);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) bt[j] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      uint32_t w[4] = {araw[i].x, araw[i].y, araw[i].z, araw[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 x = mma::unpack2(w[j]);
        w[j] = mma::pack2(fmaf(fmaf(x.x, rstd[i], nmr[i]), gm[2 * j], bt[2 * j]),
                          fmaf(fmaf(x.y, rstd[i], nmr[i]), gm[2 * j + 1], bt[2 * j + 1]));
      }
      *reinterpret_cast<uint4 *>(dst + i * RPP * C::LDA) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  };

  float acc[C::MI][C::NI][4];
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::NI; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.0f;

  /* Fill the first STAGES - 1 stages; one commit group per stage, empty
   * ones too, so that wait_group counts stay aligned with stages. */
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < KT) {
      load_b(s, s);
      if constexpr (NORM) {
        load_a_regs(s);
        store_a_norm(s, s);
      } else {
        load_a_async(s, s);
      }
    }
    nnc_cp_async_commit();
  }

  /* Where this lane's ldmatrix rows start inside a stage. */
  const int a_frag_row = wm * C::WM + (lane % 16), a_frag_col = (lane / 16) * 8;
  const int bnk_row = wn * C::WN + (lane % 8) + (lane / 16) * 8, bnk_col = ((lane / 8) % 2) * 8;
  const int bkn_row = (lane % 8) + ((lane / 8) % 2) * 8, bkn_col = wn * C::WN + (lane / 16) * 8;

  /* Fragments are double-buffered: those of step kk + 1 load while the
   * tensor cores work on step kk, across stage boundaries too. */
  constexpr int KK = C::BK / 16;
  uint32_t af[2][C::MI][4], bf[2][C::NI][2];
  auto load_frags = [&](int buf, int stage, int kk) {
    const uint32_t a_base = nnc_smem_u32(as + stage * C::A_STAGE);
    const uint32_t b_base = nnc_smem_u32(bs + stage * C::B_STAGE);
#pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
      nnc_ldmatrix_x4(af[buf][mi],
                      a_base + 2u * (uint32_t)((a_frag_row + mi * 16) * C::LDA + kk * 16 + a_frag_col));
#pragma unroll
    for (int nj = 0; nj < C::NI / 2; ++nj) {
      uint32_t r[4];
      if constexpr (B_TRANS)
        nnc_ldmatrix_x4(r, b_base + 2u * (uint32_t)((bnk_row + nj * 16) * C::LDB_NK + kk * 16 + bnk_col));
      else
        nnc_ldmatrix_x4_trans(r, b_base + 2u * (uint32_t)((kk * 16 + bkn_row) * C::LDB_KN + bkn_col +
                                                          nj * 16));
      bf[buf][2 * nj][0] = r[0];
      bf[buf][2 * nj][1] = r[1];
      bf[buf][2 * nj + 1][0] = r[2];
      bf[buf][2 * nj + 1][1] = r[3];
    }
  };

  /* The ring: tile kt sits in stage kt % STAGES. The wait and barrier for
   * tile kt + 1 come before the last step of tile kt, whose fragments are
   * already in registers, so the first fragments of tile kt + 1 load under
   * that step's mma. After that barrier no thread reads stage (kt - 1) %
   * STAGES any more, so tile kt + STAGES - 1 may overwrite it, by cp.async
   * at step 0 of tile kt or, for a normalized A, by st.shared at the end of
   * tile kt (seen by the barrier of tile kt + STAGES - 2 >= kt + 1, before
   * its first ldmatrix). */
  nnc_cp_async_wait<C::STAGES - 2>();
  __syncthreads();
  if (KT > 0) load_frags(0, 0, 0);
  for (int kt = 0; kt < KT; ++kt) {
    const int stage = kt % C::STAGES;
    const int next = kt + C::STAGES - 1;
    const int next_stage = next % C::STAGES;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
      if (kk == KK - 1) {
        nnc_cp_async_wait<C::STAGES - 2>();
        __syncthreads();
      }
      if (kk < KK - 1) load_frags((kk + 1) % 2, stage, kk + 1);
      else if (kt + 1 < KT) load_frags((kk + 1) % 2, (kt + 1) % C::STAGES, 0);
      if (kk == 0) {
        if (next < KT) {
          load_b(next_stage, next);
          if constexpr (NORM) load_a_regs(next);
          else load_a_async(next_stage, next);
        }
        nnc_cp_async_commit();
      }
#pragma unroll
      for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < C::NI; ++ni)
          mma::run(acc[mi][ni], af[kk % 2][mi], bf[kk % 2][ni][0], bf[kk % 2][ni][1]);
    }
    if constexpr (NORM)
      if (next < KT) store_a_norm(next_stage, next);
  }
  nnc_cp_async_wait<0>(); /* no copy may land after the block exits */

  const int m0w = m0 + wm * C::WM, n0w = n0 + wn * C::WN;
  switch (p.act) {
  case NNC_CUDA_ACT_RELU: nnc_gemm_epilogue<T, C, NNC_CUDA_ACT_RELU>(p, z, m0w, n0w, lane, acc); break;
  case NNC_CUDA_ACT_GELU_ERF:
    nnc_gemm_epilogue<T, C, NNC_CUDA_ACT_GELU_ERF>(p, z, m0w, n0w, lane, acc);
    break;
  case NNC_CUDA_ACT_GELU_TANH:
    nnc_gemm_epilogue<T, C, NNC_CUDA_ACT_GELU_TANH>(p, z, m0w, n0w, lane, acc);
    break;
  case NNC_CUDA_ACT_SILU: nnc_gemm_epilogue<T, C, NNC_CUDA_ACT_SILU>(p, z, m0w, n0w, lane, acc); break;
  default: nnc_gemm_epilogue<T, C, NNC_CUDA_ACT_NONE>(p, z, m0w, n0w, lane, acc); break;
  }
}

#endif
