/* templates/cuda/gemm_tma_ln.cuh — C = LayerNorm(A B^T + bias + residual)
 * * gamma + beta over rows of N <= 512 on Hopper (sm_90a only): the GEMM
 * of gemm_tma.cuh (TMA loads on full/empty barriers, a producer warp,
 * consumer warpgroups on wgmma, persistent blocks) with an epilogue that
 * finishes whole rows, for the post-norm blocks of BERT (attention.output
 * and output: N = 384 after K = 384 and 1536), where the row kernel would
 * read the [M, N] sum back and launch once more.
 *
 *   nnc_cuda_status nnc_cuda_gemm_tma_ln<T>(const nnc_cuda_gemm_tma_ln_args<T> &g,
 *                                          cudaStream_t stream, nnc_cuda_error *err);
 * T: __nv_bfloat16 or __half, out in T. A is [M][lda], B is [N][ldb]
 * (nn.Linear's [out][in]); K, lda, ldb multiples of 8, A and B 16-byte
 * aligned; ldc >= N anything. bias, gamma, beta: [N] or NULL (0, 1, 0).
 * residual: [M][ldr] or NULL, may be c itself (nnc updates the hidden state
 * in place). pre: NULL, or where the sum before the norm goes. Statistics
 * in f32: the mean, then the centered sum of squares, as layernorm.cuh's
 * row kernel, so no E[x^2] - mean^2 cancellation. Returns NNC_CUDA_E_ARG
 * for bad arguments and NNC_CUDA_E_LAUNCH when the device is not sm_90 or
 * the runtime or driver refuses, launching nothing; never synchronizes.
 *
 * A block owns 64 rows (one wgmma M) and, with its peer, all of their
 * columns; the row's sums meet in shared memory. Columns split in two
 * halves of NH (64, 128, 192 or 256, the smallest >= N / 2), each one
 * warpgroup's m64nNHk16, in one of two forms:
 * - two consumer warpgroups in a block (384 threads), the halves' sums
 *   swapped through the block's shared memory and a named barrier: the
 *   block reads A's 64 rows and all of B a k step. M = 4096 gives 64 tiles,
 *   so half of an H200's 132 SMs work, each on twice the products and
 *   loads of a 128 x 128 tile of gemm_tma.
 * - a cluster of two blocks of one consumer warpgroup each (256 threads),
 *   a half each, the sums swapped through distributed shared memory (a
 *   store into the peer's buffer and an arrive on its barrier): 128 SMs
 *   for M = 4096, each reading A's rows and half of B, so half the
 *   products and 57% of the bytes (N = 384) a block. A is read twice
 *   from L2 (no multicast).
 * BM = 32 would halve the tiles' work again but wastes half of each wgmma
 * (its M is 64); splitting K needs a reduction through memory. Rows of N
 * <= 64 take one warpgroup and no exchange. The launcher picks the form
 * by waves of tiles (pick_split; split forces either).
 * Halves of 256 (N > 384) take the cluster form only (registers).
 * The epilogue: the residual is loaded before the k loop (it lands under
 * it); bias, gamma and beta are loaded under the first k loop and sit in
 * shared memory as f32 for the rest of the kernel (the block's columns
 * never change); each row's sums take two quad shuffles and one exchange
 * (the halves' sums and centered sums of squares, merged as Chan et al.).
 * Rows of whole 16-byte vectors (VEC instances: BERT's) move through a
 * buffer a warpgroup as coalesced vectors (gemm_tma_ln_tile.cuh); others in
 * pairs of columns straight from the accumulators (gemm_tma_ln_rows.cuh).
 * The producer issues its first copies before anything else.
 * Measured (H200, cold L2, GPU time; test_gemm_tma_ln --time), before the
 * VEC instances and the early copies (commit f56930d): BERT's M = 4096,
 * N = 384 in 15.3 us after K = 384 and 19.5 us after K = 1536 (cluster
 * form; the block form 15.3 and 26.3), against 15.5 and 19.6 for cuBLASLt +
 * layernorm.cuh and 19.9 and 25.0 for gemm_tma + layernorm.cuh. Per k step
 * this cost what cuBLASLt does; the gap was a fixed ~4 us that gemm_tma
 * shows too. This version (H200, session 26): 12.96 and 17.09 us against
 * 14.94 and 19.14 for cuBLASLt + layernorm.cuh; 56 float64 runs pass,
 * memcheck clean (its racecheck run did not finish in the script's time). */
#ifndef NNC_CUDA_GEMM_TMA_LN_CUH
#define NNC_CUDA_GEMM_TMA_LN_CUH

#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cluster.cuh"
#include "gemm_tma.cuh"
#include "gemm_tma_ln_rows.cuh"
#include "gemm_tma_ln_tile.cuh"
#include "gemm_tma_maps.cuh"
#include "nnc_cuda.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

template <typename T> struct nnc_cuda_gemm_tma_ln_args {
  int M, N, K;
  const T *a;
  long long lda;
  const T *b; /* [N][ldb]: C = A B^T */
  long long ldb;
  const T *bias;     /* [N], or NULL */
  const T *residual; /* [M][ldr], or NULL; may be c */
  long long ldr;
  const T *gamma, *beta; /* [N], or NULL (1, 0) */
  float eps;
  T *c;
  long long ldc;
  T *pre; /* [M][ldp], or NULL: A B^T + bias + residual, before the norm */
  long long ldp;
  int split; /* 0: the launcher picks; 1: two warpgroups a block; 2: a cluster of two blocks (tests, timing;
                N > 384 takes the cluster, N <= 64 one warpgroup) */
  int max_blocks; /* 0: as many as fit; else at most this many (even with split 2; tests of the tile loop) */
  bool b_fixed;   /* B is a weight no kernel wrote since the last launch without PDL (pdl.cuh): its first
                     stages are copied before the wait for the kernel before */
};

template <typename T> struct nnc_gemm_tma_ln_params {
  nnc_cuda_gemm_tma_ln_args<T> g;
  CUtensorMap ma, mb; /* A: boxes 64 x 64; B: boxes 64 x NH */
  int tiles, kt;      /* row tiles of 64, k steps of 64 */
  bool pair;          /* c, residual and pre take two columns at a time */
};

namespace nnc_gtl {

constexpr int BM = 64, BK = 64;
constexpr size_t SMEM_LIMIT = 232448; /* 227 KB, a block's most on sm_90 */
constexpr const char *KERNEL = "nnc_cuda_gemm_tma_ln";

/* WGS consumer warpgroups a block, CL blocks a cluster (WGS * CL halves of
 * NH columns); VEC: rows move as 16-byte vectors through a buffer a
 * warpgroup (gemm_tma_ln_tile.cuh). Shared memory: the 1024-byte slack that
 * aligns the stages, STAGES x (A's 64 x 64, B's WGS NH x 64), bias, gamma
 * and beta of the block's columns (f32), the exchange buffer [2 tiles][2
 * halves][64 rows] of (s, q), the VEC buffers, the full and empty barriers
 * and the exchange's two. */
template <int NH, int WGS, int CL, bool VEC> struct layout {
  static_assert(NH == 64 || NH == 128 || NH == 192 || NH == 256, "halves of 64, 128, 192 or 256 columns");
  static_assert(WGS * CL <= 2 && WGS >= 1 && CL >= 1, "one or two halves");
  static constexpr int NTHREADS = 128 * (1 + WGS), COLS = WGS * NH;
  static constexpr int A_ELEMS = BM * BK, STAGE_ELEMS = (BM + COLS) * BK;
  static constexpr int BUF_ELEMS = VEC ? tile16<NH>::ELEMS : 0; /* a warpgroup's, 2-byte elements */
  static constexpr unsigned TX = (unsigned)STAGE_ELEMS * 2;
  static constexpr size_t FIXED = 1024 + 3 * COLS * sizeof(float) + 2 * 2 * 64 * sizeof(float2) +
                                  (size_t)WGS * BUF_ELEMS * 2 + 2 * sizeof(uint64_t);
  static constexpr int FIT = (int)((SMEM_LIMIT - FIXED) / (STAGE_ELEMS * 2 + 2 * sizeof(uint64_t)));
  static constexpr int STAGES = FIT < 8 ? FIT : 8;
  static_assert(STAGES >= 2, "two stages at least");
  static constexpr size_t SMEM = FIXED + (size_t)STAGES * (STAGE_ELEMS * 2 + 2 * sizeof(uint64_t));
  static constexpr unsigned EMPTY_ARRIVALS = 4 * WGS; /* the consumers' warps */
};

/* NNC_GEMM_TMA_LN_TRACE (a test build: test_gemm_tma_ln --trace): one
 * thread of each role stamps %globaltimer at the phases of its block into
 * nnc_gtl_trace[block] (a phase of every tile overwrites the last tile's),
 * so that a run shows where its time goes without a profiler. */
enum { TR_START, TR_ISSUED, TR_LANDED, TR_PRODUCTS, TR_STATS, TR_STORED, TR_EXIT, TR_N };
#ifdef NNC_GEMM_TMA_LN_TRACE
constexpr int TRACE_BLOCKS = 1024;
__device__ unsigned long long nnc_gtl_trace[TRACE_BLOCKS][TR_N];
__device__ __forceinline__ void mark(bool cond, int phase) {
  if (!cond || blockIdx.x >= TRACE_BLOCKS) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  nnc_gtl_trace[blockIdx.x][phase] = t;
}
#else
__device__ __forceinline__ void mark(bool, int) {}
#endif

/* The exchange's wait: this block's barrier for the peer's sums, acquired
 * at cluster scope; with NNC_GEMM_TMA_WATCHDOG it gives up after 20 s as
 * nnc_gt::wait_bar does. */
__device__ __forceinline__ void wait_peer(uint64_t *bar, unsigned parity) {
#ifdef NNC_GEMM_TMA_WATCHDOG
  uint64_t t0, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (!nnc_cl::test_acquire(bar, parity)) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - t0 > 20000000000ull) {
      printf("nnc_gemm_tma_ln watchdog: block %d thread %d waited 20 s on the exchange barrier, parity %u\n",
             (int)blockIdx.x, (int)threadIdx.x, parity);
      __trap();
    }
  }
#else
  while (!nnc_cl::test_acquire(bar, parity)) {
  }
#endif
}

/* The producer's thread: every k step of every tile of this block, A's 64
 * rows and B's rows [col0, col0 + WGS NH) (one box a warpgroup's half);
 * parities as in nnc_gt::produce, and as there B's copies of the first
 * tile's first stages before the wait for the kernel before when b_fixed. */
template <typename T, int NH, int WGS, int CL, bool VEC>
__device__ __forceinline__ void produce(const nnc_gemm_tma_ln_params<T> &p, T *stages, uint64_t *full,
                                        uint64_t *empty, int first, int step, int col0) {
  using L = layout<NH, WGS, CL, VEC>;
  if (p.kt == 0) return;
  nnc_tma::prefetch_map(&p.ma);
  nnc_tma::prefetch_map(&p.mb);
  auto load_b = [&](T *sa, int k, uint64_t *bar) {
#pragma unroll
    for (int w = 0; w < WGS; ++w) nnc_tma::load_2d(sa + L::A_ELEMS + w * NH * BK, &p.mb, bar, k * BK, col0 + w * NH);
  };
  const int early = p.g.b_fixed && first < p.tiles ? min(p.kt, L::STAGES) : 0;
  for (int k = 0; k < early; ++k) {
    nnc_tma::arrive_expect(&full[k], L::TX);
    load_b(stages + k * L::STAGE_ELEMS, k, &full[k]);
  }
  nnc_pdl::wait();
  int s = 0;
  unsigned ph = 0;
  for (int tl = first; tl < p.tiles; tl += step) {
    for (int k = 0; k < p.kt; ++k) {
      T *sa = stages + s * L::STAGE_ELEMS;
      const bool armed = tl == first && k < early; /* its barrier armed and B on its way */
      if (!armed) {
        nnc_gt::wait_bar(&empty[s], ph ^ 1u, "empty", s);
        nnc_tma::arrive_expect(&full[s], L::TX);
      }
      nnc_tma::load_2d(sa, &p.ma, &full[s], k * BK, tl * BM);
      if (!armed) load_b(sa, k, &full[s]);
      mark(k == 0, TR_ISSUED);
      if (++s == L::STAGES) s = 0, ph ^= 1u;
    }
  }
}

/* A consumer warpgroup's k loop over one tile (nnc_gt::mainloop's protocol
 * on this layout): acc (zero) += A's 64 rows times the warpgroup's NH rows
 * of B (wgl: its index in the block). */
template <typename T, int NH, int WGS, int CL, bool VEC>
__device__ __forceinline__ void mainloop(float (&acc)[NH / 2], int kt, int wgl, int lane, int &s, unsigned &ph,
                                         const T *stages, uint64_t *full, uint64_t *empty) {
  using L = layout<NH, WGS, CL, VEC>;
  if (kt == 0) return;
  int prev = 0;
  for (int k = 0; k < kt; ++k) {
    nnc_gt::wait_bar(&full[s], ph, "full", s);
    mark(k == 0 && threadIdx.x == 128, TR_LANDED);
    const T *sa = stages + s * L::STAGE_ELEMS;
    const uint64_t da = nnc_wg::desc_sw128(nnc_smem_u32(sa));
    const uint64_t db = nnc_wg::desc_sw128(nnc_smem_u32(sa + L::A_ELEMS + wgl * NH * BK));
    nnc_wg::fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) nnc_wg::mma<T>::template ss<NH>(acc, da + 2 * kk, db + 2 * kk, 1);
    nnc_wg::commit();
    nnc_wg::wait<1>();
    if (k > 0 && lane == 0) nnc_tma::arrive(&empty[prev]);
    prev = s;
    if (++s == L::STAGES) s = 0, ph ^= 1u;
  }
  nnc_wg::wait<0>();
  nnc_wg::fence_regs(acc);
  if (lane == 0) nnc_tma::arrive(&empty[prev]);
}

/* Named barrier 1 over the block's WGS consumer warpgroups (bar 0 is __syncthreads'). */
template <int WGS> __device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * WGS) : "memory");
}

/* The halves' row sums swapped: this half's (sh, qh) of rows rl and rl + 8
 * into slot h of buffer j % 2 (this block's, or the peer's with CL 2), the
 * other half's back from slot 1 - h. A half writes tile j + 2's sums only
 * after the other's tile j + 1 sums reached it, sent after reading tile j's. */
template <int WGS, int CL>
__device__ __forceinline__ void swap_stats(const float (&sh)[2], const float (&qh)[2], float (&so)[2], float (&qo)[2],
                                           const float2 *xch, uint32_t out_xch, uint64_t *xbar, uint32_t out_bar,
                                           int h, int j, int rl, int lane) {
  const int par = j & 1;
  if (lane % 4 == 0)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const uint32_t at = out_xch + (uint32_t)(((par * 2 + h) * 64 + rl + 8 * hr) * sizeof(float2));
      if constexpr (CL == 2)
        nnc_cl::store2(at, sh[hr], qh[hr]);
      else
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(sh[hr]), "f"(qh[hr]) : "memory");
    }
  if constexpr (CL == 2) {
    nnc_cl::arrive_remote(out_bar + (uint32_t)(par * sizeof(uint64_t)));
    wait_peer(xbar + par, (unsigned)(j >> 1) & 1u);
  } else {
    consumers_sync<WGS>();
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float2 v = xch[(par * 2 + (1 - h)) * 64 + rl + 8 * hr];
    so[hr] = v.x, qo[hr] = v.y;
  }
}

/* A consumer warpgroup over the block's tiles: half h of the columns
 * (wgl: its index in the block; prm: the block's bias, gamma, beta rows;
 * xch, xbar: the exchange's buffer and barriers; buf: its VEC buffer). */
template <typename T, int NH, int WGS, int CL, bool VEC>
__device__ __forceinline__ void consume(const nnc_gemm_tma_ln_params<T> &p, const T *stages, float *prm,
                                        float2 *xch, T *buf, uint64_t *full, uint64_t *empty, uint64_t *xbar,
                                        int first, int step, int h, int wgl) {
  using L = layout<NH, WGS, CL, VEC>;
  constexpr bool SWAP = WGS * CL == 2;
  static_assert(NH < 256 || WGS == 1, "halves of 256 columns in the cluster form only");
  const nnc_cuda_gemm_tma_ln_args<T> &g = p.g;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32, cq = 2 * (lane % 4);
  const int n_h = min(NH, g.N - h * NH), n_o = SWAP ? g.N - n_h : 0; /* this half's columns, the other's */
  const int c0 = h * NH + cq, rl = warp * 16 + lane / 4;             /* the thread's first column and row */
  const float *sbias = prm + wgl * NH, *sgam = prm + L::COLS + wgl * NH, *sbeta = prm + 2 * L::COLS + wgl * NH;
  /* where this half's sums go: this block's buffer, or the peer's */
  const uint32_t out_xch = CL == 2 ? nnc_cl::peer(xch, (unsigned)(1 - h)) : nnc_smem_u32(xch);
  const uint32_t out_bar = CL == 2 ? nnc_cl::peer(xbar, (unsigned)(1 - h)) : 0u;
  /* the block's bias, gamma and beta (prm's three rows), a few a consumer
   * thread: loaded before the first k loop, into prm after it */
  constexpr int PV = (L::COLS + 128 * WGS - 1) / (128 * WGS);
  const int ct = (int)threadIdx.x - 128, col0 = (h - wgl) * NH;
  float pv[3][PV];
  int s = 0, j = 0;
  unsigned ph = 0;
  for (int tl = first; tl < p.tiles; tl += step, ++j) {
    const int m0 = tl * BM, row0 = m0 + rl, rows = min(BM, g.M - m0);
    float acc[NH / 2];
#pragma unroll
    for (int i = 0; i < NH / 2; ++i) acc[i] = 0.0f;
    uint32_t res[NH / 4];
    uint4 rv[VEC ? tile16<NH>::NV : 1]; /* VEC: the residual's rows, as loaded */
    if constexpr (VEC)
      load_tile<T, NH>(rv, g.residual ? g.residual + (long long)m0 * g.ldr + h * NH : nullptr, g.ldr, rows, n_h, t);
    else
      load_residual<T, NH>(res, g.residual, g.ldr, g.M, g.N, p.pair, row0, c0);
    if (j == 0) load_params<T, PV>(pv, g.bias, g.gamma, g.beta, g.N, col0, ct, 128 * WGS);
    mainloop<T, NH, WGS, CL, VEC>(acc, p.kt, wgl, lane, s, ph, stages, full, empty);
    mark(t == 0 && wgl == 0, TR_PRODUCTS);
    if (j == 0) {
      store_params<PV>(pv, prm, L::COLS, ct, 128 * WGS);
      consumers_sync<WGS>();
      if constexpr (CL == 2) nnc_cl::wait();
    }
    if constexpr (VEC) {
      wg_sync(wgl); /* the last tile's rows have left the buffer */
      stage_tile<T, NH>(buf, rv, t);
      wg_sync(wgl);
      fragment_of<T, NH>(res, buf, rl, cq);
    }
    add_bias_residual<T, NH>(acc, res, sbias, cq);
    float sh[2], qh[2], so[2] = {0.0f, 0.0f}, qo[2] = {0.0f, 0.0f};
    half_stats<NH>(acc, n_h, n_h - cq, sh, qh);
    if constexpr (SWAP) swap_stats<WGS, CL>(sh, qh, so, qo, xch, out_xch, xbar, out_bar, h, j, rl, lane);
    float2 st[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) st[hr] = merge_stats(sh[hr], qh[hr], n_h, so[hr], qo[hr], n_o, g.eps);
    mark(t == 0 && wgl == 0, TR_STATS);
    if (g.pre) store_sum<T, NH>(acc, g.pre, g.ldp, g.M, g.N, p.pair, row0, c0);
    if constexpr (VEC) {
      wg_sync(wgl); /* every thread's residual is out of the buffer */
      stage_norm<T, NH>(buf, acc, st, sgam, sbeta, rl, cq);
      wg_sync(wgl);
      store_tile<T, NH>(g.c + (long long)m0 * g.ldc + h * NH, g.ldc, buf, rows, n_h, t);
    } else {
      store_norm<T, NH>(acc, st, sgam, sbeta, g.c, g.ldc, g.M, g.N, p.pair, row0, c0, cq);
    }
    mark(t == 0 && wgl == 0, TR_STORED);
  }
  if constexpr (CL == 2)
    if (j == 0) nnc_cl::wait(); /* no tile (the launcher gives every cluster one): the arrive still needs it */
}

}  // namespace nnc_gtl

template <typename T, int NH, int WGS, int CL, bool VEC>
__global__ void __launch_bounds__(nnc_gtl::layout<NH, WGS, CL, VEC>::NTHREADS, 1)
    nnc_gemm_tma_ln_kernel(const __grid_constant__ nnc_gemm_tma_ln_params<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_gtl;
  using L = nnc_gtl::layout<NH, WGS, CL, VEC>; /* qualified: a generated model has a global `layout` */
  extern __shared__ __align__(16) unsigned char nnc_gtl_smem[];
  const uint32_t raw = nnc_smem_u32(nnc_gtl_smem);
  T *stages = reinterpret_cast<T *>(nnc_gtl_smem + (((raw + 1023) & ~1023u) - raw));
  float *prm = reinterpret_cast<float *>(stages + L::STAGES * L::STAGE_ELEMS);
  float2 *xch = reinterpret_cast<float2 *>(prm + 3 * L::COLS);
  T *bufs = reinterpret_cast<T *>(xch + 2 * 2 * 64);
  uint64_t *full = reinterpret_cast<uint64_t *>(bufs + WGS * L::BUF_ELEMS);
  uint64_t *empty = full + L::STAGES, *xbar = empty + L::STAGES;
  mark(threadIdx.x == 0, TR_START);
  /* the cluster's blocks (or this block) take row tiles first, first + step, ... */
  const int rank = CL == 2 ? (int)nnc_cl::rank() : 0;
  const int first = CL == 2 ? (int)nnc_cl::id() : (int)blockIdx.x;
  const int step = CL == 2 ? (int)nnc_cl::count() : (int)gridDim.x;
  const int col0 = rank * NH; /* the block's first column */
  if (threadIdx.x == 0) {
    for (int s = 0; s < L::STAGES; ++s) nnc_tma::init(&full[s], 1), nnc_tma::init(&empty[s], L::EMPTY_ARRIVALS);
    for (int b = 0; b < 2; ++b) nnc_tma::init(&xbar[b], 128); /* the peer's consumer threads */
    nnc_tma::fence_init();
  }
  __syncthreads();
  /* The producer's first copies leave now; what the epilogue alone needs
   * (bias, gamma and beta; the peer's barriers) is settled under the first
   * k loop (consume). The cluster's arrive says this block's barriers
   * exist; its wait comes before a block's first remote arrive. */
  if constexpr (CL == 2) nnc_cl::arrive();
  nnc_pdl::let_next_start(); /* the next kernel's blocks may take SMs this grid leaves */
  /* with one consumer warpgroup (256 threads) every thread may have 255
   * registers from the launch on: nothing to move */
  if (threadIdx.x < 128) {
    if constexpr (WGS == 2) nnc_gt::regs_dec<nnc_gt::PRODUCER_REGS>();
    if (threadIdx.x == 0) produce<T, NH, WGS, CL, VEC>(p, stages, full, empty, first, step, col0);
    if constexpr (CL == 2) nnc_cl::wait();
  } else {
    if constexpr (WGS == 2) nnc_gt::regs_inc<nnc_gt::CONSUMER_REGS>();
    nnc_pdl::wait(); /* the residual, the parameters and C: after the kernel before */
    const int wgl = nnc_wg::warpgroup() - 1;
    consume<T, NH, WGS, CL, VEC>(p, stages, prm, xch, bufs + wgl * L::BUF_ELEMS, full, empty, xbar, first, step,
                                 rank + wgl, wgl);
  }
  if constexpr (CL == 2) nnc_cl::sync(); /* no block leaves while its peer may still write to it */
  mark(threadIdx.x == 128, TR_EXIT);
#elif defined(__CUDA_ARCH__)
  /* the launcher refuses devices other than 9.0 */
  __trap();
#endif
}

namespace nnc_gtl {

/* How many clusters of the instance can run at once on the current device
 * (asked once a device, the first 16), 0 when the runtime cannot say. The
 * cluster instances of one T share a kernel type, so they share the
 * count: each takes one block an SM, and the count is then the GPCs'. */
template <typename K> int max_clusters(K kernel, size_t smem, int threads) {
  static std::atomic<int> known[16];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (dev >= 0 && dev < 16) {
    const int n = known[dev].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(2), cfg.blockDim = dim3((unsigned)threads), cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr, cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: clear it for the caller's launch check */
    return 0;
  }
  if (dev >= 0 && dev < 16 && n > 0) known[dev].store(n, std::memory_order_relaxed);
  return n;
}

template <typename T, int NH, int WGS, int CL, bool VEC>
nnc_cuda_status launch(nnc_gemm_tma_ln_params<T> &p, int sms, cudaStream_t stream, nnc_cuda_error *err) {
  using L = layout<NH, WGS, CL, VEC>;
  const nnc_cuda_gemm_tma_ln_args<T> &g = p.g;
  if (g.K > 0) {
    const CUtensorMapDataType type =
        std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    CUresult r = nnc_gtm::kmajor(&p.ma, g.a, type, (unsigned long long)g.M, (unsigned long long)g.K,
                                 (unsigned long long)g.lda, BM);
    if (r == CUDA_SUCCESS)
      r = nnc_gtm::kmajor(&p.mb, g.b, type, (unsigned long long)g.N, (unsigned long long)g.K,
                          (unsigned long long)g.ldb, NH);
    if (r != CUDA_SUCCESS)
      return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL,
                           "cuTensorMapEncodeTiled refused the operands (CUresult %d; %s): a %p lda %lld, b %p ldb "
                           "%lld, K %d",
                           (int)r, r == CUDA_ERROR_NOT_SUPPORTED ? "no encoder in this driver" : "driver",
                           (const void *)g.a, g.lda, (const void *)g.b, g.ldb, g.K);
  }
  auto kernel = nnc_gemm_tma_ln_kernel<T, NH, WGS, CL, VEC>;
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, L::SMEM, raised);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cudaFuncSetAttribute(%zu bytes) failed: %s", L::SMEM,
                         cudaGetErrorString(e));
  int units = CL == 2 ? max_clusters(kernel, L::SMEM, L::NTHREADS) : sms; /* blocks or clusters at once */
  if (units <= 0) units = sms / CL;
  if (g.max_blocks > 0 && g.max_blocks / CL < units) units = g.max_blocks / CL;
  if (p.tiles < units) units = p.tiles;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CL, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3((unsigned)(units * CL)), cfg.blockDim = dim3((unsigned)L::NTHREADS);
  cfg.dynamicSmemBytes = L::SMEM, cfg.stream = stream;
  attr[1] = nnc_pdl::programmatic_attr(); /* the kernel waits for the one before itself */
  cfg.attrs = CL == 2 ? attr : attr + 1, cfg.numAttrs = CL == 2 ? 2 : 1;
  const cudaError_t le = cudaLaunchKernelEx(&cfg, kernel, p);
  if (le != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "launch failed: %s (%s)", cudaGetErrorName(le),
                         cudaGetErrorString(le));
  return nnc_cuda_check_launch(err, KERNEL);
}

/* The form for rows of N (> 64): the cluster when its tiles take fewer
 * waves (clusters: how many run at once) counted as 0.6 of the block
 * form's (half the products, 57% of the loads a block at N = 384; a guess
 * that the timing mode measures). */
inline int pick_split(int tiles, int sms, int clusters) {
  if (clusters <= 0) clusters = sms / 2;
  const long long waves1 = (tiles + sms - 1) / sms, waves2 = (tiles + clusters - 1) / clusters;
  return waves2 * 0.6 < (double)waves1 ? 2 : 1;
}

/* How many clusters of the cluster form for halves of NH run at once (0: unknown). */
template <typename T, int NH> int clusters_of() {
  using L = layout<NH, 1, 2, true>;
  auto kernel = nnc_gemm_tma_ln_kernel<T, NH, 1, 2, true>;
  static nnc_smem_raised raised;
  if (nnc_raise_smem(kernel, L::SMEM, raised) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return max_clusters(kernel, L::SMEM, L::NTHREADS);
}

/* Halves of 256 (N > 384) take the cluster form alone: a consumer of the
 * block form has 232 registers, which 128 accumulators, the residual's 64
 * and the epilogue's addresses overflow. */
template <typename T, int NH>
nnc_cuda_status launch_split(nnc_gemm_tma_ln_params<T> &p, int split, bool vec, int sms, cudaStream_t stream,
                             nnc_cuda_error *err) {
  if constexpr (NH == 256) {
    return vec ? launch<T, NH, 1, 2, true>(p, sms, stream, err) : launch<T, NH, 1, 2, false>(p, sms, stream, err);
  } else {
    if (split == 0) split = pick_split(p.tiles, sms, clusters_of<T, NH>());
    if (split == 2)
      return vec ? launch<T, NH, 1, 2, true>(p, sms, stream, err) : launch<T, NH, 1, 2, false>(p, sms, stream, err);
    return vec ? launch<T, NH, 2, 1, true>(p, sms, stream, err) : launch<T, NH, 2, 1, false>(p, sms, stream, err);
  }
}

}  // namespace nnc_gtl

template <typename T>
nnc_cuda_status nnc_cuda_gemm_tma_ln(const nnc_cuda_gemm_tma_ln_args<T> &g, cudaStream_t stream, nnc_cuda_error *err) {
  using namespace nnc_gtl;
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value, "bf16 or f16 operands");
  if (g.M < 0 || g.N < 0 || g.K < 0 || g.N > 512)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected M, K >= 0 and 0 <= N <= 512, found M %d, N %d, K %d",
                         g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return NNC_CUDA_OK;
  if (g.M > INT_MAX - BM)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected M under 2^31 - 64, found %d", g.M);
  if (g.K % 8 || g.lda % 8 || g.ldb % 8 || g.lda < g.K || g.ldb < g.K || g.ldc < g.N)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected K, lda and ldb multiples of 8, lda and ldb >= K, ldc >= N; found K %d, lda %lld, "
                         "ldb %lld, ldc %lld, N %d",
                         g.K, g.lda, g.ldb, g.ldc, g.N);
  if (g.lda >= (1ll << 39) || g.ldb >= (1ll << 39))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected row strides under 2^40 bytes, found lda %lld, ldb %lld",
                         g.lda, g.ldb);
  if ((g.residual && g.ldr < g.N) || (g.pre && g.ldp < g.N))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected ldr and ldp >= N, found ldr %lld, ldp %lld, N %d",
                         g.residual ? g.ldr : (long long)g.N, g.pre ? g.ldp : (long long)g.N, g.N);
  if (!g.a || !g.b || !g.c)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected device pointers for a, b and c, found %p, %p, %p",
                         (const void *)g.a, (const void *)g.b, (const void *)g.c);
  if ((reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.b)) % 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a and b 16-byte aligned, found %p and %p",
                         (const void *)g.a, (const void *)g.b);
  if ((reinterpret_cast<uintptr_t>(g.c) | reinterpret_cast<uintptr_t>(g.residual) |
       reinterpret_cast<uintptr_t>(g.pre) | reinterpret_cast<uintptr_t>(g.bias) |
       reinterpret_cast<uintptr_t>(g.gamma) | reinterpret_cast<uintptr_t>(g.beta)) %
      sizeof(T))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected c, residual, pre, bias, gamma and beta aligned to %zu bytes, found %p, %p, %p, %p, "
                         "%p, %p",
                         sizeof(T), (void *)g.c, (const void *)g.residual, (void *)g.pre, (const void *)g.bias,
                         (const void *)g.gamma, (const void *)g.beta);
  if (!(g.eps >= 0.0f) || std::isinf(g.eps))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a finite eps >= 0, found %g", (double)g.eps);
  if (g.split < 0 || g.split > 2)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected split 0, 1 or 2, found %d", g.split);
  if (g.max_blocks < 0 || (g.split == 2 && g.max_blocks == 1))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected max_blocks >= 0 (not 1 with split 2), found %d",
                         g.max_blocks);
  int dev = 0, sms = 0, cc = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || !nnc_gtm::device_info(dev, &sms, &cc))
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cannot query the current device");
  if (cc != 90)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL,
                         "expected a device of compute capability 9.0 (sm_90a), found %d.%d", cc / 10, cc % 10);
  nnc_gemm_tma_ln_params<T> p;
  memset(&p, 0, sizeof p); /* K == 0 leaves the maps unused */
  p.g = g;
  p.tiles = (g.M + BM - 1) / BM;
  p.kt = (g.K + BK - 1) / BK;
  auto even = [](const void *q, long long ld) { return reinterpret_cast<uintptr_t>(q) % 4 == 0 && ld % 2 == 0; };
  p.pair = even(g.c, g.ldc) && (!g.residual || even(g.residual, g.ldr)) && (!g.pre || even(g.pre, g.ldp));
  /* rows of whole 16-byte vectors: the coalesced instances (pre keeps the pair stores) */
  auto vec16 = [](const void *q, long long ld) { return reinterpret_cast<uintptr_t>(q) % 16 == 0 && ld % 8 == 0; };
  const bool vec = g.N % 8 == 0 && vec16(g.c, g.ldc) && (!g.residual || vec16(g.residual, g.ldr));
  if (g.N <= 64)
    return vec ? launch<T, 64, 1, 1, true>(p, sms, stream, err) : launch<T, 64, 1, 1, false>(p, sms, stream, err);
  const int half = (g.N + 1) / 2;
  if (half <= 64) return launch_split<T, 64>(p, g.split, vec, sms, stream, err);
  if (half <= 128) return launch_split<T, 128>(p, g.split, vec, sms, stream, err);
  if (half <= 192) return launch_split<T, 192>(p, g.split, vec, sms, stream, err);
  return launch_split<T, 256>(p, g.split, vec, sms, stream, err);
}

#endif
