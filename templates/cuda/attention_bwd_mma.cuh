/* templates/cuda/attention_bwd_mma.cuh — the tensor-core path of the
 * attention backward (flash attention 2's backward on mma.sync) for bf16 and
 * f16 with D == Dv in {32, 64, 128}. Included by attention_bwd.cuh, which
 * holds the interface, the dispatch and the delta kernel.
 *
 * Both kernels have the forward's shape: a product A B^T into m16n8
 * accumulators, elementwise work in f32 registers, then C += X B2 with X,
 * rounded to the operand type, as the A operand straight from the
 * accumulators; so attention_ops16.cuh's tiles and fragment code serve them
 * (load_tile, pv, and qk's addressing in abt), with other tiles in the
 * places of Q, K, V.
 * The weights are rebuilt from the forward's log-sum-exp, P = exp(scale s -
 * lse), so no softmax statistics are carried.
 *
 * - dQ kernel: a block of WARPS warps owns BQ = 16 WARPS queries (Q and dO
 *   tiles in shared memory) and walks the key tiles of BK keys (K and V,
 *   double-buffered by cp.async): S = Q K^T, dP = dO V^T, dS = P (dP -
 *   delta), dQ += dS K. Causal: tiles past the block's last query's limit
 *   are never loaded, late (heavy) query blocks start first.
 * - dK/dV kernel: a block owns BKV = 16 WARPS keys (K and V tiles) and
 *   walks the query tiles of BQ queries that can see them (Q, dO, lse and
 *   delta, double-buffered): S^T = K Q^T, P^T, dV += P^T dO, dP^T = V dO^T,
 *   dS^T, dK += dS^T Q. Causal: query tiles before the first query that
 *   sees the block's first key are skipped; early (heavy) key blocks start
 *   first.
 * Each warp keeps its 16 rows' accumulators in registers for the whole walk
 * and reads the A fragments of its rows from shared memory a k16 step at a
 * time (abt), which keeps the D = 128 kernels within 255 registers. Every
 * output element has one writer and one summation order: the results are
 * the same bits from run to run. */
#ifndef NNC_CUDA_ATTENTION_BWD_MMA_CUH
#define NNC_CUDA_ATTENTION_BWD_MMA_CUH

#include "attention_ops16.cuh"
#include "attention_tile.cuh"

extern __shared__ __align__(16) unsigned char nnc_attn_smem[];

template <typename E> struct nnc_cuda_attn_bwd_args;

/* Shared memory of the dQ kernel: the Q and dO tiles, two K and two V tiles. */
template <typename T, int D, int BQ, int BK> constexpr size_t nnc_attn_bwd_dq_smem() {
  return (size_t)(2 * BQ * D + 4 * BK * D) * sizeof(T);
}

/* Shared memory of the dK/dV kernel: the K and V tiles, two Q and two dO
 * tiles, two rows each of lse * log2 e and delta. */
template <typename T, int D, int BKV, int BQ> constexpr size_t nnc_attn_bwd_dkv_smem() {
  return (size_t)(2 * BKV * D + 4 * BQ * D) * sizeof(T) + 4 * BQ * sizeof(float);
}

namespace nnc_attn_bwd {

constexpr float LOG2E = 1.4426950408889634f;

/* s = A B^T for the warp's 16 rows of tile sa from row r0 against the NT
 * n8 tiles of rows of tile sb (both swizzled tiles of D-element rows). Ops::qk
 * with A's fragments loaded a k16 step at a time: held for all of D at once
 * they take D / 4 registers, which the dK/dV kernel at D = 128 cannot spare. */
template <typename T, int D, int NT>
__device__ __forceinline__ void abt(float (&s)[1][NT][4], const T *sa, int r0, const T *sb, int lane) {
  using nnc_attn::swz;
  using nnc_attn::swz_key;
  const int mi = lane / 8;
  const uint32_t brow = nnc_smem_u32(sb) + (uint32_t)((lane % 8 + (mi / 2) * 8) * D * sizeof(T));
  const int key = swz_key<D>(lane % 8);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.0f;
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) {
    uint32_t af[4];
    nnc_ldmatrix_x4(af, nnc_smem_u32(sa + swz<D>(r0 + lane % 16, kd * 2 + lane / 16)));
    const uint32_t at = brow + (uint32_t)((((kd * 2 + mi % 2) ^ key) * 8) * sizeof(T));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bk[4];
      nnc_ldmatrix_x4(bk, at + (uint32_t)(np * 16 * D * sizeof(T)));
      nnc_mma<T>::run(s[0][2 * np], af, bk[0], bk[1]);
      nnc_mma<T>::run(s[0][2 * np + 1], af, bk[2], bk[3]);
    }
  }
}

/* The warp's 16 rows of acc * mul (rows from row0, those below nrows) to
 * rows of g at stride st. */
template <typename T, int ND>
__device__ __forceinline__ void store_acc(const float (&acc)[1][ND][4], float mul, T *g, long long st, int row0,
                                          int nrows, int lane) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + lane / 4 + hr * 8;
    if (row >= nrows) continue;
    T *p = g + (long long)row * st + (lane % 4) * 2;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
      nnc_attn::store2(p + nd * 8, acc[0][nd][2 * hr] * mul, acc[0][nd][2 * hr + 1] * mul);
  }
}

}  // namespace nnc_attn_bwd

template <typename T, int D, int BK, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) nnc_attn_bwd_dq_kernel(const nnc_cuda_attn_bwd_args<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nnc_attn;
  using namespace nnc_attn_bwd;
  using Ops = tc_ops<T, D>;
  constexpr int NTHREADS = WARPS * 32, BQ = 16 * WARPS, NT = BK / 8, ND = D / 8, TK = BK * D;
  static_assert(BK % 16 == 0 && D % 16 == 0, "BK and D must be multiples of 16");

  T *sq = reinterpret_cast<T *>(nnc_attn_smem);
  T *sdo = sq + BQ * D;
  T *sk = sdo + BQ * D; /* two K tiles */
  T *sv = sk + 2 * TK;  /* two V tiles */

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const block_tile bt = tile_of_block(a.heads, a.causal);
  const int h = bt.h, b = bt.b, q0 = bt.qt * BQ;
  const int off = a.S - a.T; /* causal: query i sees keys j <= i + off */
  const T *qg = a.q + b * a.q_sb + h * a.q_sh;
  const T *kg = a.k + b * a.k_sb + h * a.k_sh;
  const T *vg = a.v + b * a.v_sb + h * a.v_sh;
  const T *dog = a.dout + b * a.do_sb + h * a.do_sh;
  const T *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  const long long lrow = ((long long)b * a.heads + h) * a.T; /* of lse and delta */

  int kend = a.S;
  if (a.causal) kend = min(kend, q0 + BQ + off);
  const int ntiles = kend > 0 ? (kend + BK - 1) / BK : 0;

  Ops::template load_tile<BQ, NTHREADS>(sq, qg, qg + (long long)q0 * a.q_st, a.q_st, a.T - q0);
  Ops::template load_tile<BQ, NTHREADS>(sdo, dog, dog + (long long)q0 * a.do_st, a.do_st, a.T - q0);
  if (ntiles > 0) {
    Ops::template load_tile<BK, NTHREADS>(sk, kg, kg, a.k_st, a.S);
    Ops::template load_tile<BK, NTHREADS>(sv, vg, vg, a.v_st, a.S);
  }
  nnc_cp_async_commit();

  /* this thread's two rows: lse in units of log2 (+inf past T: P = 0) and delta */
  const int wrow = q0 + warp * 16;
  float lse2[2], dl[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int i = wrow + lane / 4 + hr * 8;
    lse2[hr] = i < a.T ? a.lse[lrow + i] * LOG2E : INFINITY;
    dl[hr] = i < a.T ? a.delta[lrow + i] : 0.0f;
  }
  float dq[1][ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[0][nd][e] = 0.0f;
  const float sl2 = a.scale * LOG2E;

  for (int j = 0; j < ntiles; ++j) {
    const int buf = j & 1;
    if (j + 1 < ntiles) {
      const int k1 = (j + 1) * BK;
      Ops::template load_tile<BK, NTHREADS>(sk + (buf ^ 1) * TK, kg, kg + (long long)k1 * a.k_st, a.k_st, a.S - k1);
      Ops::template load_tile<BK, NTHREADS>(sv + (buf ^ 1) * TK, vg, vg + (long long)k1 * a.v_st, a.v_st, a.S - k1);
    }
    nnc_cp_async_commit();
    nnc_cp_async_wait<1>(); /* all but the copy just started: tile j (and Q, dO) */
    __syncthreads();
    const T *kt = sk + buf * TK, *vt = sv + buf * TK;

    float s[1][NT][4], dp[1][NT][4];
    abt<T, D, NT>(s, sq, warp * 16, kt, lane);
    abt<T, D, NT>(dp, sdo, warp * 16, vt, lane);

    /* dS = P (dP - delta) into s; masked pairs (the tail past S, the causal
     * limit, the padding mask) get 0 */
    const int k0 = j * BK;
    const bool edge = k0 + BK > a.S || (a.causal && k0 + BK - 1 > wrow + off) || mrow != nullptr;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e / 2, i = wrow + lane / 4 + hr * 8, col = k0 + nt * 8 + (lane % 4) * 2 + e % 2;
        float p = ex2(fmaf(s[0][nt][e], sl2, -lse2[hr]));
        if (edge && (col >= a.S || (a.causal && col > i + off) || (mrow && nnc_dtype<T>::load(mrow[col]) == 0.0f)))
          p = 0.0f;
        s[0][nt][e] = p * (dp[0][nt][e] - dl[hr]);
      }

    Ops::template pv<1, NT, ND>(dq, s, kt, lane); /* dQ += dS K */
    __syncthreads(); /* the next iteration's copy overwrites this buffer */
  }
  nnc_cp_async_wait<0>();

  store_acc<T, ND>(dq, a.scale, a.dq + b * a.dq_sb + h * a.dq_sh, a.dq_st, wrow, a.T, lane);
#endif
}

template <typename T, int D, int BQ, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) nnc_attn_bwd_dkv_kernel(const nnc_cuda_attn_bwd_args<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nnc_attn;
  using namespace nnc_attn_bwd;
  using Ops = tc_ops<T, D>;
  constexpr int NTHREADS = WARPS * 32, BKV = 16 * WARPS, NT = BQ / 8, ND = D / 8, TQ = BQ * D;
  static_assert(BQ % 16 == 0 && D % 16 == 0, "BQ and D must be multiples of 16");

  T *sk = reinterpret_cast<T *>(nnc_attn_smem);
  T *sv = sk + BKV * D;
  T *sq = sv + BKV * D;  /* two Q tiles */
  T *sdo = sq + 2 * TQ;  /* two dO tiles */
  float *slse = reinterpret_cast<float *>(sdo + 2 * TQ); /* two rows of lse * log2 e */
  float *sdel = slse + 2 * BQ;                           /* two rows of delta */

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = (int)blockIdx.x % a.heads, b = (int)blockIdx.x / a.heads;
  const int k0 = (int)blockIdx.y * BKV; /* early keys, seen by the most queries, start first */
  const int off = a.S - a.T;
  const T *qg = a.q + b * a.q_sb + h * a.q_sh;
  const T *kg = a.k + b * a.k_sb + h * a.k_sh;
  const T *vg = a.v + b * a.v_sb + h * a.v_sh;
  const T *dog = a.dout + b * a.do_sb + h * a.do_sh;
  const T *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  const long long lrow = ((long long)b * a.heads + h) * a.T;

  /* query tiles from the one holding the first query that sees key k0 */
  const int qfirst = a.causal ? max(0, k0 - off) / BQ : 0;
  const int ntiles = a.T > qfirst * BQ ? (a.T + BQ - 1) / BQ - qfirst : 0;

  /* tile t's lse and delta, by plain stores: their buffer was last read
   * before the closing barrier of iteration t - 2 */
  auto load_rows = [&](int t) {
    const int i = (qfirst + t) * BQ + (int)threadIdx.x;
    if (threadIdx.x < BQ) {
      slse[(t & 1) * BQ + threadIdx.x] = i < a.T ? a.lse[lrow + i] * LOG2E : INFINITY;
      sdel[(t & 1) * BQ + threadIdx.x] = i < a.T ? a.delta[lrow + i] : 0.0f;
    }
  };
  auto load_tiles = [&](int t) {
    const int q1 = (qfirst + t) * BQ;
    const int b1 = (t & 1) * TQ;
    Ops::template load_tile<BQ, NTHREADS>(sq + b1, qg, qg + (long long)q1 * a.q_st, a.q_st, a.T - q1);
    Ops::template load_tile<BQ, NTHREADS>(sdo + b1, dog, dog + (long long)q1 * a.do_st, a.do_st, a.T - q1);
    load_rows(t);
  };

  Ops::template load_tile<BKV, NTHREADS>(sk, kg, kg + (long long)k0 * a.k_st, a.k_st, a.S - k0);
  Ops::template load_tile<BKV, NTHREADS>(sv, vg, vg + (long long)k0 * a.v_st, a.v_st, a.S - k0);
  if (ntiles > 0) load_tiles(0);
  nnc_cp_async_commit();

  /* this thread's two keys: a key past S or removed by the padding mask
   * gets P = 0 from every query */
  const int wkey = k0 + warp * 16;
  bool dead[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int j = wkey + lane / 4 + hr * 8;
    dead[hr] = j >= a.S || (mrow && nnc_dtype<T>::load(mrow[j]) == 0.0f);
  }
  float dk[1][ND][4], dv[1][ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[0][nd][e] = dv[0][nd][e] = 0.0f;
  const float sl2 = a.scale * LOG2E;

  for (int t = 0; t < ntiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < ntiles) load_tiles(t + 1);
    nnc_cp_async_commit();
    nnc_cp_async_wait<1>();
    __syncthreads();
    const T *qtile = sq + buf * TQ, *dotile = sdo + buf * TQ;
    const float *lse2 = slse + buf * BQ, *del = sdel + buf * BQ;
    const int q0 = (qfirst + t) * BQ;
    /* only tiles that cut the causal diagonal need the per-element limit */
    const bool edge = a.causal && wkey + 15 > q0 + off;

    /* P^T: S^T = K Q^T, P = exp(scale s - lse) per query column */
    float s[1][NT][4];
    abt<T, D, NT>(s, sk, warp * 16, qtile, lane);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e / 2, c = nt * 8 + (lane % 4) * 2 + e % 2;
        float p = ex2(fmaf(s[0][nt][e], sl2, -lse2[c]));
        if (dead[hr] || (edge && wkey + lane / 4 + hr * 8 > q0 + c + off)) p = 0.0f;
        s[0][nt][e] = p;
      }
    Ops::template pv<1, NT, ND>(dv, s, dotile, lane); /* dV += P^T dO */

    /* dS^T = P^T (dP^T - delta), dP^T = V dO^T */
    float dp[1][NT][4];
    abt<T, D, NT>(dp, sv, warp * 16, dotile, lane);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] *= dp[0][nt][e] - del[nt * 8 + (lane % 4) * 2 + e % 2];
    Ops::template pv<1, NT, ND>(dk, s, qtile, lane); /* dK += dS^T Q */
    __syncthreads(); /* the next iteration's copy overwrites this buffer */
  }
  nnc_cp_async_wait<0>();

  store_acc<T, ND>(dk, a.scale, a.dk + b * a.dk_sb + h * a.dk_sh, a.dk_st, wkey, a.S, lane);
  store_acc<T, ND>(dv, 1.0f, a.dv + b * a.dv_sb + h * a.dv_sh, a.dv_st, wkey, a.S, lane);
#endif
}

#endif
