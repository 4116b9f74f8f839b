/* templates/cuda/gemm_tma_pp.cuh — gemm_tma.cuh's GEMM (same arguments,
 * same contract: C = act(alpha * A B^T + bias) + residual, rows of C of any
 * length and alignment, f32 or T out, sm_90a only) on a ping-pong schedule
 * (CUTLASS's "warp-specialized ping-pong"): the two consumer warpgroups
 * take the block's tiles in turn, each a whole tile, so one runs its
 * epilogue while the other runs its k loop on the tensor cores.
 *
 *   nnc_cuda_status nnc_cuda_gemm_tma_pp<T, TO[, EPI]>(const nnc_cuda_gemm_tma_args<T, TO> &g,
 *                                                     cudaStream_t stream, nnc_cuda_error *err);
 * Arguments, checks (nnc_gt::check_args), errors, PDL and b_fixed as
 * nnc_cuda_gemm_tma, except tile_n: 0 or 128 (the one tile; 256 is refused).
 *
 * Why: with K = 384 (BERT) a tile is 6 k steps, and gemm_tma.cuh's
 * epilogue (both warpgroups at once, 64 rows each) takes as long as its k
 * loop with the tensor cores idle; the producer runs ahead but no product
 * overlaps an epilogue.
 *
 * Schedule (block b walks tiles b, b + grid, ... in M-fastest order, as
 * gemm_tma.cuh; its j-th tile is warpgroup j % 2's):
 * - The producer is gemm_tma.cuh's (nnc_gt::produce on 128-wide tiles): it
 *   fills the ring in the walk's order, tile j's k steps then tile j + 1's,
 *   so each stage is read by one warpgroup, whose 4 warps release it
 *   (empty barriers count 4 arrivals, not 8).
 * - Each warpgroup finds its tiles' place in the ring by skipping the
 *   other's kt steps (ring positions as stage and parity).
 * - order[w] (4 arrivals: a warp's lane 0) is warpgroup w's turn at the
 *   tensor cores: it waits on it before its tile's first k step and, once
 *   its last step's products are issued, arrives on the other's. Its
 *   first wait is on parity 1 for warpgroup 0 (a fresh barrier's phase
 *   before the first counts as complete: it goes first) and 0 for
 *   warpgroup 1, flipping each tile. A warpgroup is never more than one
 *   phase ahead on the other's barrier (its next arrival needs the other's
 *   turn back), so parity waits cannot miss a phase.
 * - Epilogues are not ordered: each warpgroup has its own staging buffer
 *   and bias row, and they need no turn.
 * Tile: 128 x 128 a warpgroup, as two m64n128k16 products a k16 step (rows
 * 0-63 into acc[0], 64-127 into acc[1]: 128 f32 a thread, as gemm_tma.cuh's
 * 128 x 256 tile, within setmaxnreg's 232). Chosen over 64 x 256 because
 * it is gemm_tma.cuh's 128 x 128 stage (A and B boxes of 128 rows, 32 KB,
 * six stages: its maps, tile<128> and producer serve unchanged), reads 256
 * rows into shared memory a k step for 128 x 128 outputs where 64 x 256
 * reads 320, and wastes less of BERT's N (384 and 1152 are 3 and 9 tiles
 * of 128, 1.5 and 4.5 of 256).
 * Shared memory: 1024 of slack for the stages' alignment, six stages of 32
 * KB, two epilogue buffers of 16 KB (a warpgroup's 64 rows x 64 columns,
 * gemm_tma_epilogue.cuh), two bias rows (128 T), full[6], empty[6],
 * order[2]: 231024 bytes of the 232448 a block may have. */
#ifndef NNC_CUDA_GEMM_TMA_PP_CUH
#define NNC_CUDA_GEMM_TMA_PP_CUH

#include "gemm_tma.cuh"

namespace nnc_gtp {

constexpr int BN = 128;                    /* a warpgroup's tile: 128 x BN */
constexpr unsigned STAGE_READERS = 4;      /* the warps of the one warpgroup that reads a stage */
constexpr unsigned TURN_ARRIVALS = 4;      /* the warps of the warpgroup handing over the tensor cores */
constexpr const char *KERNEL = "nnc_cuda_gemm_tma_pp";

template <typename T> using tile = nnc_gt::tile<BN, T>;

template <typename T> constexpr size_t smem() { return tile<T>::smem() + 2 * sizeof(uint64_t); }

/* A warpgroup's k loop over its tile: acc (zero) += A B^T, acc[h] rows 64h
 * to 64h + 63. s, ph: the tile's first stage and its full barrier's
 * parity. As gemm_tma.cuh's mainloop: one product group in flight while
 * the next is issued, a stage released once the group that read it is
 * done. Once the last group is issued the tensor cores are the other
 * warpgroup's (next_turn); then the products land in acc and the last
 * stage is released. */
template <typename T>
__device__ __forceinline__ void mainloop(float (&acc)[2][BN / 2], int kt, int lane, int s, unsigned ph,
                                         const T *stages, uint64_t *full, uint64_t *empty, uint64_t *next_turn) {
  using L = tile<T>;
  int prev = 0;
  for (int k = 0; k < kt; ++k) {
    nnc_gt::wait_bar(&full[s], ph, "full", s);
    const T *sa = stages + s * L::STAGE_ELEMS;
    const uint64_t da0 = nnc_wg::desc_sw128(nnc_smem_u32(sa));
    const uint64_t da1 = nnc_wg::desc_sw128(nnc_smem_u32(sa + 64 * L::BK));
    const uint64_t db = nnc_wg::desc_sw128(nnc_smem_u32(sa + L::A_ELEMS));
    nnc_wg::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      nnc_wg::mma<T>::template ss<BN>(acc[0], da0 + 2 * kk, db + 2 * kk, 1);
      nnc_wg::mma<T>::template ss<BN>(acc[1], da1 + 2 * kk, db + 2 * kk, 1);
    }
    nnc_wg::commit();
    nnc_wg::wait<1>();
    if (k > 0 && lane == 0) nnc_tma::arrive(&empty[prev]);
    prev = s;
    if (++s == L::STAGES) s = 0, ph ^= 1u;
  }
  if (lane == 0) nnc_tma::arrive(next_turn);
  nnc_wg::wait<0>();
  nnc_wg::fence_regs(acc[0]);
  nnc_wg::fence_regs(acc[1]);
  if (kt > 0 && lane == 0) nnc_tma::arrive(&empty[prev]);
}

/* The warpgroup's tile (rows from m0 < M, columns from n0) chunk by chunk,
 * a chunk being 64 rows (acc[q / 2]) by 64 columns: gemm_tma.cuh's
 * epilogue over 128 rows, with one chunk loop so the store loops are
 * compiled once. The barrier before staging waits for every thread's
 * reads of the previous chunk (or tile), the one after for every write. */
template <typename T, typename TO, bool EPI>
__device__ __forceinline__ void epilogue(const nnc_cuda_gemm_tma_args<T, TO> &g, bool vec,
                                         const float (&acc)[2][BN / 2], float *cs, const T *sbias, int wg, int m0,
                                         int n0, int t) {
  constexpr int CHS = BN / nnc_gt::CHUNK; /* column chunks a row half */
#pragma unroll 1
  for (int q = 0; q < 2 * CHS; ++q) {
    const int row0 = m0 + q / CHS * 64, nc = n0 + q % CHS * nnc_gt::CHUNK;
    if (row0 >= g.M) break;
    if (nc >= g.N) continue;
    nnc_gt::wg_sync(wg);
    nnc_gt::with_chunk<2 * CHS>(q, [&](auto c) {
      constexpr int Q = decltype(c)::value;
      nnc_gt::stage_chunk<T, BN, Q % CHS>(cs, acc[Q / CHS], sbias, g.alpha, t / 32, t % 32);
    });
    nnc_gt::wg_sync(wg);
    TO *c = g.c + (long long)row0 * g.ldc + nc;
    const TO *res = EPI && g.residual ? g.residual + (long long)row0 * g.ldr + nc : nullptr;
    nnc_gt::store_chunk<EPI>(cs, c, g.ldc, res, g.ldr, g.act, g.act_last, g.stream_c, vec, min(64, g.M - row0),
                             min(nnc_gt::CHUNK, g.N - nc), t);
  }
}

/* Consumer warpgroup wg (0 or 1): the block's tiles wg, wg + 2, ... of its
 * walk. The tile's bias is read into registers before the turn wait (the
 * load lands under the other's k loop) and goes to the warpgroup's row
 * after its own k loop: the previous tile's reads of that row came before
 * its epilogue's last barrier. */
template <typename T, typename TO, bool EPI>
__device__ __forceinline__ void consume(const nnc_gemm_tma_params<T, TO> &p, const T *stages, float *buffers,
                                        T *biases, uint64_t *full, uint64_t *empty, uint64_t *order) {
  using L = tile<T>;
  const nnc_cuda_gemm_tma_args<T, TO> &g = p.g;
  const int wg = threadIdx.x / 128 - 1, t = threadIdx.x % 128;
  float *cs = buffers + wg * nnc_gt::CHUNK_FLOATS;
  T *sbias = biases + wg * BN;
  const T zero = nnc_dtype<T>::store(0.0f);
  /* a tile moves the ring on by kt steps: step_s stages and step_ph parity flips, plus one on wrapping */
  const int step_s = p.kt % L::STAGES;
  const unsigned step_ph = (unsigned)(p.kt / L::STAGES) & 1u;
  int s = 0;
  unsigned ph = 0;
  auto pass_tile = [&] {
    s += step_s, ph ^= step_ph;
    if (s >= L::STAGES) s -= L::STAGES, ph ^= 1u;
  };
  if (wg == 1) pass_tile();
  unsigned turn = wg == 0 ? 1u : 0u;
  for (int tl = blockIdx.x + wg * gridDim.x; tl < p.tiles; tl += 2 * gridDim.x) {
    const int m0 = tl % p.tiles_m * nnc_gt::BM, n0 = tl / p.tiles_m * BN;
    float acc[2][BN / 2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0.0f;
    const int n = n0 + t;
    const T bias = g.bias && n < g.N ? g.bias[n] : zero;
    nnc_gt::wait_bar(&order[wg], turn, "order", wg);
    turn ^= 1u;
    mainloop<T>(acc, p.kt, t % 32, s, ph, stages, full, empty, &order[wg ^ 1]);
    pass_tile(); /* this tile */
    pass_tile(); /* the other warpgroup's next */
    sbias[t] = bias;
    epilogue<T, TO, EPI>(g, p.vec, acc, cs, sbias, wg, m0, n0, t);
  }
}

}  // namespace nnc_gtp

template <typename T, typename TO, bool EPI>
__global__ void __launch_bounds__(nnc_gt::NTHREADS, 1)
    nnc_gemm_tma_pp_kernel(const __grid_constant__ nnc_gemm_tma_params<T, TO> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace nnc_gtp;
  using L = tile<T>;
  extern __shared__ __align__(16) unsigned char nnc_gtp_smem[];
  const uint32_t raw = nnc_smem_u32(nnc_gtp_smem);
  T *stages = reinterpret_cast<T *>(nnc_gtp_smem + (((raw + 1023) & ~1023u) - raw));
  float *buffers = reinterpret_cast<float *>(stages + L::STAGES * L::STAGE_ELEMS);
  T *biases = reinterpret_cast<T *>(buffers + 2 * nnc_gt::CHUNK_FLOATS);
  uint64_t *full = reinterpret_cast<uint64_t *>(biases + 2 * BN);
  uint64_t *empty = full + L::STAGES;
  uint64_t *order = empty + L::STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < L::STAGES; ++s) nnc_tma::init(&full[s], 1), nnc_tma::init(&empty[s], STAGE_READERS);
    nnc_tma::init(&order[0], TURN_ARRIVALS), nnc_tma::init(&order[1], TURN_ARRIVALS);
    nnc_tma::fence_init();
  }
  __syncthreads();
  nnc_pdl::let_next_start(); /* as gemm_tma.cuh's kernel */
  if (threadIdx.x < 128) {
    nnc_gt::regs_dec<nnc_gt::PRODUCER_REGS>();
    if (threadIdx.x == 0) nnc_gt::produce<T, BN>(p, p.g.b_fixed, stages, full, empty);
  } else {
    nnc_gt::regs_inc<nnc_gt::CONSUMER_REGS>();
    nnc_pdl::wait(); /* the bias, the residual and C: after the kernel before */
    consume<T, TO, EPI>(p, stages, buffers, biases, full, empty, order);
  }
#elif defined(__CUDA_ARCH__)
  /* device code for another architecture: the launcher refuses devices
   * other than 9.0, so this is never reached */
  __trap();
#endif
}

template <typename T, typename TO, bool EPI = false>
nnc_cuda_status nnc_cuda_gemm_tma_pp(const nnc_cuda_gemm_tma_args<T, TO> &g, cudaStream_t stream,
                                     nnc_cuda_error *err) {
  using namespace nnc_gtp;
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value, "bf16 or f16 operands");
  static_assert(std::is_same<TO, float>::value || std::is_same<TO, T>::value, "f32 or T out");
  static_assert(smem<T>() <= 227 * 1024, "a block's shared memory on sm_90");
  int sms = 0;
  bool none = false;
  nnc_cuda_status st = nnc_gt::check_args<EPI>(g, KERNEL, [] { return NNC_CUDA_OK; }, &none, &sms, err);
  if (st != NNC_CUDA_OK || none) return st;
  if (g.tile_n == 256)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected tile_n 0 or 128 (its one tile), found %d", g.tile_n);
  nnc_gemm_tma_params<T, TO> p;
  memset(&p, 0, sizeof p); /* K == 0 leaves the maps unused */
  p.g = g;
  p.vec = nnc_gt::rows_aligned(g);
  st = nnc_gt::plan<BN>(p, g.M, g.N, g.K, g.a, g.lda, g.b, g.ldb, KERNEL, err);
  if (st != NNC_CUDA_OK) return st;
  auto kernel = nnc_gemm_tma_pp_kernel<T, TO, EPI>;
  constexpr size_t bytes = smem<T>();
  static nnc_smem_raised raised;
  const cudaError_t e = nnc_raise_smem(kernel, bytes, raised);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "cudaFuncSetAttribute(%zu bytes) failed: %s", bytes,
                         cudaGetErrorString(e));
  return nnc_gt::launch_early(kernel, p, nnc_gt::grid_of(p.tiles, g.max_blocks, sms), bytes, stream, KERNEL, err);
}

#endif
