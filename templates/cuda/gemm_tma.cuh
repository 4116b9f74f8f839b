/* templates/cuda/gemm_tma.cuh — C = act(alpha * A B^T + bias) + residual
 * (or act(... + residual) when act_last) on Hopper (sm_90a only), built the
 * way cuBLASLt's fast Hopper kernels are: TMA loads into a ring of stages on
 * full/empty barriers, a producer warp, two consumer warpgroups on wgmma,
 * persistent blocks. Same contract as gemm_wgmma.cuh (rows of C of any
 * length and alignment, f32 or T out, written in place).
 *
 *   nnc_cuda_status nnc_cuda_gemm_tma<T, TO[, EPI]>(const nnc_cuda_gemm_tma_args<T, TO> &g,
 *                                                  cudaStream_t stream, nnc_cuda_error *err);
 * T: __nv_bfloat16 or __half; TO: float or T. A is [M][lda], B is [N][ldb]
 * (C = A B^T: B is nn.Linear's [out][in]), C is [M][ldc]; K, lda, ldb
 * multiples of 8, A and B 16-byte aligned; ldc >= N anything. K == 0 gives
 * bias (or 0). EPI true: the instance that applies act and residual; the
 * default refuses them (its store loop stays lean). Returns NNC_CUDA_E_ARG
 * for bad arguments and NNC_CUDA_E_LAUNCH when the device is not sm_90 or
 * the runtime or driver refuses, launching nothing; never synchronizes.
 *
 * Why this shape (gemm_wgmma.cuh is latency-bound: one tile a block, its
 * epilogue with no loads under it, the k loop waiting on cp.async):
 * - Warpgroup 0 is the producer: it gives its registers back (setmaxnreg
 *   40) and one of its threads issues two TMA copies a stage (A's 128 rows
 *   and B's BN rows of 64 k, 128-byte swizzled, edges zero-filled by the
 *   copy engine) once the stage's empty barrier says both consumers are
 *   done with it. No address arithmetic or predicates on the math warps.
 * - Warpgroups 1 and 2 (setmaxnreg 232) each own 64 rows of the 128 x BN
 *   tile: one m64nBNk16 wgmma a k16 step, BN / 2 f32 accumulators a thread;
 *   a warp arrives on a stage's empty barrier once its products reading
 *   the stage are done (wait_group 1: the step before's).
 * - Persistent: grid = SMs, block b takes tiles b, b + grid, ... in M-fastest
 *   order (the blocks running together share a column band: B's rows stay
 *   in L2 and A, re-read once a band, mostly does too). The producer runs
 *   ahead into the next tile while the consumers run the epilogue, so the
 *   next tile's k loop starts on landed stages.
 * - The epilogue (gemm_tma_epilogue.cuh, gemm_tma_rows.cuh) stages 64
 *   columns at a time in a buffer of each warpgroup's own and writes rows
 *   coalesced, 16 bytes a thread where every row starts 16-byte aligned;
 *   no TMA store, which needs that of every row (GPT-2's head, N = 50257,
 *   has none).
 * Tiles: 128 x 256 (four stages of 48 KB) or 128 x 128 (six of 32 KB),
 *   chosen by the launcher (tile_n 0) from the wave count: 128 x 256 reads a
 *   quarter fewer bytes a flop into shared memory and issues half the
 *   wgmmas; 128 x 128 wastes less of N = 384 or 1152 and quantizes less when
 *   there are few tiles a SM. 256 x 128 would need four consumer
 *   warpgroups for the same accumulators a thread.
 * Not done: clusters with TMA multicast (halves L2 -> SM traffic of one
 * operand), overlapping the epilogue with the next tile's products (each
 * warpgroup a tile of its own, taking turns: CUTLASS's ping-pong), split-K
 * or stream-K for few tiles. */
#ifndef NNC_CUDA_GEMM_TMA_CUH
#define NNC_CUDA_GEMM_TMA_CUH

#include <climits>
#include <cstring>
#include <type_traits>

#include "gemm_tma_epilogue.cuh"
#include "gemm_tma_maps.cuh"
#include "nnc_cuda.cuh"
#include "pdl.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

template <typename T, typename TO> struct nnc_cuda_gemm_tma_args {
  int M, N, K;
  const T *a;
  long long lda;
  const T *b; /* [N][ldb]: C = A B^T */
  long long ldb;
  const T *bias;      /* [N], or NULL */
  const TO *residual; /* [M][ldr], or NULL: added after act (before it when act_last); may be c */
  long long ldr;
  nnc_cuda_act act; /* NNC_CUDA_ACT_NONE (0) unless set */
  bool act_last;
  bool stream_c; /* store C evict-first: C is written once and read later (the logits), A and B keep L2 */
  float alpha;
  TO *c;
  long long ldc;
  int tile_n;     /* 0: the launcher picks; 128 or 256 forces the tile's width (tests, timing) */
  int max_blocks; /* 0: one block an SM; else this many blocks (tests of the tile loop) */
  bool b_fixed;   /* B is a weight no kernel wrote since the last launch without PDL (pdl.cuh): the first
                     tile's copies of it start before the wait for the kernel before */
};

/* The kernel's parameter: the arguments, the tensor maps (A: rows M, boxes
 * 64 x 128; B: rows N, boxes 64 x BN) the copy engine reads from parameter
 * space, and the tiling. */
template <typename T, typename TO> struct nnc_gemm_tma_params {
  nnc_cuda_gemm_tma_args<T, TO> g;
  CUtensorMap ma, mb;
  int tiles_m, tiles, kt; /* row tiles, tiles, k steps of BK */
  bool vec;               /* every row of C (and of the residual) starts 16-byte aligned */
};

namespace nnc_gt {

constexpr int BM = 128, NTHREADS = 384;
constexpr int STAGE_BYTES = 192 * 1024;                /* all stages, either tile */
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232; /* 128 x 40 + 256 x 232 <= 64 K registers */
constexpr unsigned EMPTY_ARRIVALS = 8;                 /* the consumers' warps */
constexpr const char *KERNEL = "nnc_cuda_gemm_tma";

/* Shared memory: the 1024-byte slack that aligns the stages (the swizzle's
 * period), STAGES x (A tile, B tile), the two epilogue buffers, the two
 * warpgroups' bias rows (as T: as f32 the block would need 64 bytes more
 * than the 227 KB it may have), the full and empty barriers. */
template <int BN, typename T> struct tile {
  static_assert(BN == 128 || BN == 256, "tiles of 128 x 128 or 128 x 256");
  /* k a stage: one 128-byte swizzle row (64 bf16/f16, or 128 e4m3/s8 for
   * gemm_tma8.cuh, whose stages are the same bytes) */
  static constexpr int BK = 128 / (int)sizeof(T);
  static constexpr int STAGES = STAGE_BYTES / ((BM + BN) * 128); /* 4 or 6 */
  static constexpr int A_ELEMS = BM * BK, STAGE_ELEMS = (BM + BN) * BK;
  static constexpr unsigned TX = (unsigned)STAGE_ELEMS * sizeof(T); /* the bytes a stage's copies deliver (zero fill counts) */
  static constexpr size_t smem() {
    return 1024 + (size_t)STAGES * STAGE_ELEMS * sizeof(T) + 2 * CHUNK_FLOATS * sizeof(float) + 2 * BN * sizeof(T) +
           2 * STAGES * sizeof(uint64_t);
  }
};

template <int R> __device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

/* nnc_tma::wait, or with NNC_GEMM_TMA_WATCHDOG (a test build) a wait that
 * gives up after 20 s, printing which barrier it was on, and traps: a
 * pipeline that deadlocks then fails with a message instead of hanging.
 * Its printf call makes ptxas serialize the wgmmas (C7510): a build to find
 * a hang in, not one to time or to look for races in. */
__device__ __forceinline__ void wait_bar(uint64_t *bar, unsigned parity, const char *what, int stage) {
#ifdef NNC_GEMM_TMA_WATCHDOG
  uint64_t t0, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    uint32_t done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(nnc_smem_u32(bar)), "r"(parity)
                 : "memory");
    if (done) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - t0 > 20000000000ull) {
      printf("nnc_gemm_tma watchdog: block %d thread %d waited 20 s on the %s barrier of stage %d, parity %u\n",
             (int)blockIdx.x, (int)threadIdx.x, what, stage, parity);
      __trap();
    }
  }
#else
  (void)what, (void)stage;
  nnc_tma::wait(bar, parity);
#endif
}

/* One thread of the producer: every k step of every tile of this block, in
 * the consumers' order. The wait on an empty barrier for parity ph ^ 1
 * passes at once in the first round (a fresh barrier counts the phase
 * before its first as complete), then waits for the consumers' release.
 * With b_fixed the first tile's first stages get B's copies before the
 * wait for the kernel before (pdl.cuh) and A's after it: a stage's full
 * barrier completes once both have landed, in either order.
 * P: this kernel's or gemm_tma8.cuh's parameters (maps ma, mb; tiles_m,
 * tiles, kt). */
template <typename T, int BN, typename P>
__device__ __forceinline__ void produce(const P &p, bool b_fixed, T *stages, uint64_t *full, uint64_t *empty) {
  using L = tile<BN, T>;
  if (p.kt == 0) return;
  nnc_tma::prefetch_map(&p.ma);
  nnc_tma::prefetch_map(&p.mb);
  const int early = b_fixed && (int)blockIdx.x < p.tiles ? min(p.kt, L::STAGES) : 0;
  for (int k = 0; k < early; ++k) {
    nnc_tma::arrive_expect(&full[k], L::TX);
    nnc_tma::load_2d(stages + k * L::STAGE_ELEMS + L::A_ELEMS, &p.mb, &full[k], k * L::BK,
                     (int)blockIdx.x / p.tiles_m * BN);
  }
  nnc_pdl::wait();
  int s = 0;
  unsigned ph = 0;
  for (int tl = blockIdx.x; tl < p.tiles; tl += gridDim.x) {
    const int m0 = tl % p.tiles_m * BM, n0 = tl / p.tiles_m * BN;
    for (int k = 0; k < p.kt; ++k) {
      T *sa = stages + s * L::STAGE_ELEMS;
      if (tl == (int)blockIdx.x && k < early) { /* stage k: its barrier armed and B on its way */
        nnc_tma::load_2d(sa, &p.ma, &full[s], k * L::BK, m0);
      } else {
        wait_bar(&empty[s], ph ^ 1u, "empty", s);
        nnc_tma::arrive_expect(&full[s], L::TX);
        nnc_tma::load_2d(sa, &p.ma, &full[s], k * L::BK, m0);
        nnc_tma::load_2d(sa + L::A_ELEMS, &p.mb, &full[s], k * L::BK, n0);
      }
      if (++s == L::STAGES) s = 0, ph ^= 1u;
    }
  }
}

/* A consumer warpgroup's k loop over one tile: acc (zero) += A B^T of its
 * 64 rows (wg) by BN. s and ph (the stage and its full barrier's parity)
 * run on across tiles, as the producer's do. One product group stays in
 * flight while the next step's is issued; a stage is released once the
 * group that read it is done. Ends with every product landed in acc.
 * Acc: float, or int for s8 operands (gemm_tma8.cuh). */
template <typename T, int BN, typename Acc>
__device__ __forceinline__ void mainloop(Acc (&acc)[BN / 2], int kt, int wg, int lane, int &s, unsigned &ph,
                                         const T *stages, uint64_t *full, uint64_t *empty) {
  using L = tile<BN, T>;
  if (kt == 0) return;
  int prev = 0;
  for (int k = 0; k < kt; ++k) {
    wait_bar(&full[s], ph, "full", s);
    const T *sa = stages + s * L::STAGE_ELEMS;
    const uint64_t da = nnc_wg::desc_sw128(nnc_smem_u32(sa + wg * 64 * L::BK));
    const uint64_t db = nnc_wg::desc_sw128(nnc_smem_u32(sa + L::A_ELEMS));
    nnc_wg::fence();
    /* four products a stage (k16 of bf16/f16, k32 of 8-bit), 32 bytes further into the rows each */
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) nnc_wg::mma<T>::template ss<BN>(acc, da + 2 * kk, db + 2 * kk, 1);
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

/* The warpgroup's 64 rows from row0 (< M) of the tile at column n0, chunk
 * by chunk: the barrier before staging waits for every thread's reads of
 * the previous chunk (or tile), the one after for every write. */
template <typename T, typename TO, int BN, bool EPI>
__device__ __forceinline__ void epilogue(const nnc_cuda_gemm_tma_args<T, TO> &g, bool vec, const float (&acc)[BN / 2],
                                         float *cs, const T *sbias, int wg, int row0, int n0, int t) {
  const int rows = min(64, g.M - row0);
#pragma unroll 1
  for (int ch = 0; ch < BN / CHUNK; ++ch) {
    const int nc = n0 + ch * CHUNK;
    if (nc >= g.N) break;
    wg_sync(wg);
    with_chunk<BN / CHUNK>(
        ch, [&](auto c) { stage_chunk<T, BN, decltype(c)::value>(cs, acc, sbias, g.alpha, t / 32, t % 32); });
    wg_sync(wg);
    TO *c = g.c + (long long)row0 * g.ldc + nc;
    const TO *res = EPI && g.residual ? g.residual + (long long)row0 * g.ldr + nc : nullptr;
    store_chunk<EPI>(cs, c, g.ldc, res, g.ldr, g.act, g.act_last, g.stream_c, vec, rows, min(CHUNK, g.N - nc), t);
  }
}

/* A consumer warpgroup (wg 0 or 1) over the block's tiles. The tile's bias
 * is read into registers before its k loop (the loads land under it) and
 * goes to the warpgroup's row of shared memory after: every read of the
 * previous tile's row came before the last barrier of its epilogue. */
template <typename T, typename TO, int BN, bool EPI>
__device__ __forceinline__ void consume(const nnc_gemm_tma_params<T, TO> &p, const T *stages, float *buffers,
                                        T *biases, uint64_t *full, uint64_t *empty) {
  const nnc_cuda_gemm_tma_args<T, TO> &g = p.g;
  const int wg = nnc_wg::warpgroup() - 1, t = threadIdx.x % 128;
  float *cs = buffers + wg * CHUNK_FLOATS;
  T *sbias = biases + wg * BN;
  const T zero = nnc_dtype<T>::store(0.0f);
  int s = 0;
  unsigned ph = 0;
  for (int tl = blockIdx.x; tl < p.tiles; tl += gridDim.x) {
    const int m0 = tl % p.tiles_m * BM, n0 = tl / p.tiles_m * BN;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    T bias[BN / 128];
#pragma unroll
    for (int i = 0; i < BN / 128; ++i) {
      const int n = n0 + t + 128 * i;
      bias[i] = g.bias && n < g.N ? g.bias[n] : zero;
    }
    mainloop<T, BN>(acc, p.kt, wg, t % 32, s, ph, stages, full, empty);
#pragma unroll
    for (int i = 0; i < BN / 128; ++i) sbias[t + 128 * i] = bias[i];
    const int row0 = m0 + wg * 64;
    if (row0 < g.M) epilogue<T, TO, BN, EPI>(g, p.vec, acc, cs, sbias, wg, row0, n0, t);
  }
}

}  // namespace nnc_gt

template <typename T, typename TO, int BN, bool EPI>
__global__ void __launch_bounds__(nnc_gt::NTHREADS, 1)
    nnc_gemm_tma_kernel(const __grid_constant__ nnc_gemm_tma_params<T, TO> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_gt;
  using L = tile<BN, T>;
  extern __shared__ __align__(16) unsigned char nnc_gt_smem[];
  const uint32_t raw = nnc_smem_u32(nnc_gt_smem);
  T *stages = reinterpret_cast<T *>(nnc_gt_smem + (((raw + 1023) & ~1023u) - raw));
  float *buffers = reinterpret_cast<float *>(stages + L::STAGES * L::STAGE_ELEMS);
  T *biases = reinterpret_cast<T *>(buffers + 2 * CHUNK_FLOATS);
  uint64_t *full = reinterpret_cast<uint64_t *>(biases + 2 * BN);
  uint64_t *empty = full + L::STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < L::STAGES; ++s) nnc_tma::init(&full[s], 1), nnc_tma::init(&empty[s], EMPTY_ARRIVALS);
    nnc_tma::fence_init();
  }
  __syncthreads();
  nnc_pdl::let_next_start(); /* the next kernel's blocks may take SMs this grid leaves */
  if (threadIdx.x < 128) {
    regs_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) produce<T, BN>(p, p.g.b_fixed, stages, full, empty);
  } else {
    regs_inc<CONSUMER_REGS>();
    nnc_pdl::wait(); /* the bias, the residual and C: after the kernel before */
    consume<T, TO, BN, EPI>(p, stages, buffers, biases, full, empty);
  }
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture: the launcher refuses devices
   * other than 9.0, so this is never reached; a build that mixes that up
   * fails loudly */
  __trap();
#endif
}

namespace nnc_gt {

/* The tile width: the one with the least work counted in whole waves of
 * tiles (a wave: one tile on every SM), 128-wide tiles taken as 10% slower
 * a column (a guess to be measured: gemm_tma's timing mode runs both). */
inline int pick_bn(int M, int N, int sms) {
  auto cost = [&](int bn) {
    const long long tiles = (long long)((M + BM - 1) / BM) * ((N + bn - 1) / bn);
    return (double)((tiles + sms - 1) / sms) * bn;
  };
  return cost(128) * 1.1 < cost(256) ? 128 : 256;
}

/* p's tiling and the tensor maps of A and B (T: 2-byte or 1-byte
 * elements) for BN-wide tiles; P: this kernel's parameters or
 * gemm_tma8.cuh's. K == 0 leaves the maps unset (no loads). E_ARG for more
 * than INT_MAX tiles, E_LAUNCH when the driver refuses a map. */
template <int BN, typename T, typename P>
nnc_cuda_status plan(P &p, int M, int N, int K, const T *a, long long lda, const T *b, long long ldb,
                     const char *kernel, nnc_cuda_error *err) {
  using L = tile<BN, T>;
  const long long tiles = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  if (tiles > INT_MAX)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected at most %d tiles, found M %d, N %d (%lld)", INT_MAX, M,
                         N, tiles);
  p.tiles_m = (M + BM - 1) / BM;
  p.tiles = (int)tiles;
  p.kt = (K + L::BK - 1) / L::BK;
  if (K > 0) {
    const CUtensorMapDataType type = sizeof(T) == 1                     ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                     : std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                      : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    CUresult r = nnc_gtm::kmajor(&p.ma, a, type, (unsigned long long)M, (unsigned long long)K, (unsigned long long)lda,
                                 BM);
    if (r == CUDA_SUCCESS)
      r = nnc_gtm::kmajor(&p.mb, b, type, (unsigned long long)N, (unsigned long long)K, (unsigned long long)ldb, BN);
    if (r != CUDA_SUCCESS)
      return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, kernel,
                           "cuTensorMapEncodeTiled refused the operands (CUresult %d; %s): a %p lda %lld, b %p ldb "
                           "%lld, K %d",
                           (int)r, r == CUDA_ERROR_NOT_SUPPORTED ? "no encoder in this driver" : "driver",
                           (const void *)a, lda, (const void *)b, ldb, K);
  }
  return NNC_CUDA_OK;
}

/* The persistent grid: a block an SM, or max_blocks when set; never more than the tiles. */
inline int grid_of(int tiles, int max_blocks, int sms) {
  const int want = max_blocks > 0 ? max_blocks : sms;
  return tiles < want ? tiles : want;
}

/* kernel(p) on blocks of NTHREADS, launched to start early (pdl.cuh):
 * this pipeline's kernels wait for the kernel before them themselves.
 * Returns the launch's status (name: the kernel, in messages). */
template <typename K, typename P>
nnc_cuda_status launch_early(K kernel, const P &p, int blocks, size_t smem, cudaStream_t stream, const char *name,
                             nnc_cuda_error *err) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at = nnc_pdl::programmatic_attr();
  cfg.gridDim = dim3((unsigned)blocks), cfg.blockDim = dim3(NTHREADS), cfg.dynamicSmemBytes = smem;
  cfg.stream = stream, cfg.attrs = &at, cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, name, "launch failed: %s (%s)", cudaGetErrorName(e),
                         cudaGetErrorString(e));
  return nnc_cuda_check_launch(err, name);
}

/* The arguments' checks of this pipeline's launchers (gemm_tma8.cuh's
 * too), in one order so both refuse alike; each message names the kernel.
 * G: either launcher's arguments. The operands' element size sets the
 * rest: K, lda and ldb multiples of 16 bytes (the copy engine's strides),
 * row strides under 2^40 bytes (the tensor map's limit). extra(): the
 * launcher's own checks (gemm_tma8's scales), run after the pointers of a,
 * b and c. NNC_CUDA_OK with *none true: M or N is 0, nothing to launch;
 * else *sms is the current device's SM count. */
template <bool EPI, typename G, typename Extra>
nnc_cuda_status check_args(const G &g, const char *kernel, Extra extra, bool *none, int *sms, nnc_cuda_error *err) {
  constexpr long long elem = sizeof(*g.a), k_multiple = 16 / elem, max_ld = (1ll << 40) / elem;
  *none = false;
  if (g.M < 0 || g.N < 0 || g.K < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected sizes >= 0, found M %d, N %d, K %d", g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return *none = true, NNC_CUDA_OK;
  if (g.M > INT_MAX - 256 || g.N > INT_MAX - 256) /* tile corners in int */
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected M and N under 2^31 - 256, found M %d, N %d", g.M, g.N);
  if (g.K % k_multiple || g.lda % k_multiple || g.ldb % k_multiple || g.lda < g.K || g.ldb < g.K || g.ldc < g.N)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel,
                         "expected K, lda and ldb multiples of %lld, lda and ldb >= K, ldc >= N; found K %d, lda %lld, "
                         "ldb %lld, ldc %lld, N %d",
                         k_multiple, g.K, g.lda, g.ldb, g.ldc, g.N);
  if (g.lda >= max_ld || g.ldb >= max_ld)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected row strides under 2^40 bytes, found lda %lld, ldb %lld",
                         g.lda, g.ldb);
  if (!EPI && (g.act != NNC_CUDA_ACT_NONE || g.residual))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel,
                         "expected no activation or residual without the epilogue instance (EPI), found act %d, "
                         "residual %p",
                         (int)g.act, (const void *)g.residual);
  if ((unsigned)g.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected an nnc_cuda_act, found %d", (int)g.act);
  if (g.residual && g.ldr < g.N)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected ldr >= N, found ldr %lld, N %d", g.ldr, g.N);
  if (!g.a || !g.b || !g.c)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected device pointers for a, b and c, found %p, %p, %p",
                         (const void *)g.a, (const void *)g.b, (const void *)g.c);
  const nnc_cuda_status st = extra();
  if (st != NNC_CUDA_OK) return st;
  if ((reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.b)) % 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected a and b 16-byte aligned, found %p and %p",
                         (const void *)g.a, (const void *)g.b);
  if (g.tile_n != 0 && g.tile_n != 128 && g.tile_n != 256)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected tile_n 0, 128 or 256, found %d", g.tile_n);
  if (g.max_blocks < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, kernel, "expected max_blocks >= 0, found %d", g.max_blocks);
  int dev = 0, cc = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || !nnc_gtm::device_info(dev, sms, &cc))
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, kernel, "cannot query the current device");
  if (cc != 90)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, kernel,
                         "expected a device of compute capability 9.0 (sm_90a), found %d.%d", cc / 10, cc % 10);
  return NNC_CUDA_OK;
}

/* Every row of C (and of the residual) starts 16-byte aligned: the
 * epilogue's 16-byte stores (params' vec). */
template <typename G> bool rows_aligned(const G &g) {
  constexpr long long out = sizeof(*g.c);
  return reinterpret_cast<uintptr_t>(g.c) % 16 == 0 && g.ldc * out % 16 == 0 &&
         (!g.residual || (reinterpret_cast<uintptr_t>(g.residual) % 16 == 0 && g.ldr * out % 16 == 0));
}

template <typename T, typename TO, int BN, bool EPI>
nnc_cuda_status launch(nnc_gemm_tma_params<T, TO> &p, int sms, cudaStream_t stream, nnc_cuda_error *err) {
  using L = tile<BN, T>;
  const nnc_cuda_gemm_tma_args<T, TO> &g = p.g;
  const nnc_cuda_status st = plan<BN>(p, g.M, g.N, g.K, g.a, g.lda, g.b, g.ldb, KERNEL, err);
  if (st != NNC_CUDA_OK) return st;
  auto kernel = nnc_gemm_tma_kernel<T, TO, BN, EPI>;
  const size_t smem = L::smem();
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, smem, raised);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cudaFuncSetAttribute(%zu bytes) failed: %s", smem,
                         cudaGetErrorString(e));
  return launch_early(kernel, p, grid_of(p.tiles, g.max_blocks, sms), smem, stream, KERNEL, err);
}

}  // namespace nnc_gt

template <typename T, typename TO, bool EPI = false>
nnc_cuda_status nnc_cuda_gemm_tma(const nnc_cuda_gemm_tma_args<T, TO> &g, cudaStream_t stream, nnc_cuda_error *err) {
  using namespace nnc_gt;
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value, "bf16 or f16 operands");
  static_assert(std::is_same<TO, float>::value || std::is_same<TO, T>::value, "f32 or T out");
  int sms = 0;
  bool none = false;
  const nnc_cuda_status st = nnc_gt::check_args<EPI>(g, KERNEL, [] { return NNC_CUDA_OK; }, &none, &sms, err);
  if (st != NNC_CUDA_OK || none) return st;
  nnc_gemm_tma_params<T, TO> p;
  memset(&p, 0, sizeof p); /* K == 0 leaves the maps unused */
  p.g = g;
  p.vec = nnc_gt::rows_aligned(g);
  const int bn = g.tile_n ? g.tile_n : pick_bn(g.M, g.N, sms);
  return bn == 128 ? launch<T, TO, 128, EPI>(p, sms, stream, err) : launch<T, TO, 256, EPI>(p, sms, stream, err);
}

#endif
