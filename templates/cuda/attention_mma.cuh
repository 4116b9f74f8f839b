/* templates/cuda/attention_mma.cuh — the tensor-core path of attention
 * (flash attention 2 on mma.sync) for D == Dv in {32, 64, 128}: bf16 and f16
 * (operands in attention_ops16.cuh) and f32 under --precision=tf32
 * (attention_tf32.cuh). Included by attention.cuh, which holds the
 * interface and the dispatch.
 *
 * A block of WARPS warps owns BQ consecutive queries of one (batch, head);
 * warp w owns rows [w * 16 * MT, (w + 1) * 16 * MT) of them (MT m16 tiles).
 * The Q tile is loaded once into registers; K and V walk in tiles of BK
 * keys, double-buffered in shared memory by cp.async, so the next tile's
 * copy overlaps this tile's arithmetic. Per tile: S = Q K^T on the tensor
 * cores (f32 accumulation), mask, online softmax in f32 registers
 * (attention_tile.cuh), then P, rounded to the operand type in registers,
 * is the A operand of O += P V. Rows are reduced once at the end.
 *
 * Keys past S and keys the padding mask removes get a cap of -inf (+inf
 * for the others), kept per tile in shared memory, and a score becomes
 * min(score, cap): -inf even where a masked key's product is not finite
 * (padding rows may hold anything), with no per-element loads and tests
 * of the mask (BERT's D = 32 attention, B=32 H=12 T=128 on an H200: 11.0 us
 * against 13.5 with them). Causal: key tiles wholly
 * above the diagonal of the block's last query are never loaded; tiles that
 * cut it are masked per element. A row with no unmasked key keeps l = 0 and
 * is written as zeros. Heavy (late) query blocks of a causal launch are
 * scheduled first. */
#ifndef NNC_CUDA_ATTENTION_MMA_CUH
#define NNC_CUDA_ATTENTION_MMA_CUH

#include "attention_ops16.cuh"
#include "attention_tf32.cuh"
#include "attention_tile.cuh"
#include "pdl.cuh"

extern __shared__ __align__(16) unsigned char nnc_attn_smem[];

template <typename T> struct nnc_cuda_attn_args;

/* Shared memory of one block: Q tile plus two K and two V tiles, and the
 * two tiles' key caps (+inf or -inf, floats). */
template <typename T, int D, int BQ, int BK, typename Ops = nnc_attn::tc_ops<T, D>>
constexpr size_t nnc_attn_mma_smem() {
  return (size_t)(BQ * Ops::LD + 4 * BK * Ops::LD) * sizeof(T) + 2 * BK * sizeof(float);
}

/* MINB: blocks an SM should hold at once (caps the registers a thread gets);
 * Ops: the operands (tc_ops<T, D>, or tf32_ops<D, true> for f32 products). */
template <typename T, int D, int BQ, int BK, int WARPS, int MINB, typename Ops>
__global__ void __launch_bounds__(WARPS * 32, MINB) nnc_attn_mma_kernel(const nnc_cuda_attn_args<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nnc_attn;
  nnc_pdl::wait();           /* launched early (pdl.cuh): the kernel before it may still run */
  nnc_pdl::let_next_start(); /* a GEMM after it may start its own setup (pdl.cuh) */
  constexpr int NTHREADS = WARPS * 32;
  constexpr int MT = BQ / (16 * WARPS); /* m16 tiles per warp */
  constexpr int NT = BK / 8;            /* n8 tiles of S */
  constexpr int ND = D / 8;             /* n8 tiles of O */
  constexpr int TK = BK * Ops::LD;
  static_assert(MT >= 1 && BQ == MT * 16 * WARPS, "BQ must be a multiple of 16 * WARPS");
  static_assert(BK % 16 == 0 && D % 16 == 0, "BK and D must be multiples of 16");

  T *sq = reinterpret_cast<T *>(nnc_attn_smem);
  T *sk = sq + BQ * Ops::LD; /* two K tiles */
  T *sv = sk + 2 * TK;                         /* two V tiles */
  float *scap = reinterpret_cast<float *>(sv + 2 * TK); /* two tiles' key caps */

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const nnc_attn::block_tile bt = nnc_attn::tile_of_block(a.heads, a.causal);
  const int qt = bt.qt, h = bt.h, b = bt.b;
  const int q0 = qt * BQ;
  const int off = a.S - a.T; /* causal: query i sees keys j <= i + off */
  const T *qg = a.q + b * a.q_sb + h * a.q_sh;
  const T *kg = a.k + b * a.k_sb + nnc_attn::kv_head(a, h) * a.k_sh;
  const T *vg = a.v + b * a.v_sb + nnc_attn::kv_head(a, h) * a.v_sh;
  T *og = a.out + b * a.o_sb + h * a.o_sh;
  const T *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;

  int kend = a.S;
  if (a.causal) kend = min(kend, q0 + BQ + off);
  const int ntiles = kend > 0 ? (kend + BK - 1) / BK : 0;

  Ops::template load_tile<BQ, NTHREADS>(sq, qg, qg + (long long)q0 * a.q_st, a.q_st, a.T - q0);
  if (ntiles > 0) {
    Ops::template load_tile<BK, NTHREADS>(sk, kg, kg, a.k_st, a.S);
    Ops::template load_tile<BK, NTHREADS>(sv, vg, vg, a.v_st, a.S);
  }
  nnc_cp_async_commit();
  /* Each key's cap, -inf (past S, or masked by padding) or +inf, bounds its
   * scores (fminf: also a NaN or inf product of a masked key's row).
   * Thread t reads the mask values of keys t, t + NTHREADS, ... of a tile
   * as the tile's copy starts and writes their caps after the tile before
   * (the loads long done by then). */
  constexpr int KPT = (BK + NTHREADS - 1) / NTHREADS; /* keys a thread */
  float mval[KPT];
#pragma unroll
  for (int i = 0; i < KPT; ++i) {
    const int key = (int)threadIdx.x + i * NTHREADS;
    mval[i] = mrow && key < BK && key < a.S ? nnc_dtype<T>::load(mrow[key]) : 1.0f;
    if (key < BK) scap[key] = key < a.S && mval[i] != 0.0f ? INFINITY : -INFINITY;
  }

  float o[MT][ND][4];
  float m[MT][2], l[MT][2];
  uint32_t qf[MT][Ops::QREGS][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nd][e] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  const float sl2 = a.scale * 1.4426950408889634f; /* exp(x) = exp2(x * log2 e) */
  const int wrow = warp * 16 * MT;                   /* the warp's first row in the tile */

  for (int j = 0; j < ntiles; ++j) {
    const int buf = j & 1;
    const int k1 = (j + 1) * BK;
    if (j + 1 < ntiles) {
      Ops::template load_tile<BK, NTHREADS>(sk + (buf ^ 1) * TK, kg, kg + (long long)k1 * a.k_st, a.k_st, a.S - k1);
      Ops::template load_tile<BK, NTHREADS>(sv + (buf ^ 1) * TK, vg, vg + (long long)k1 * a.v_st, a.v_st, a.S - k1);
#pragma unroll
      for (int i = 0; i < KPT; ++i) {
        const int key = (int)threadIdx.x + i * NTHREADS;
        if (mrow && key < BK && k1 + key < a.S) mval[i] = nnc_dtype<T>::load(mrow[k1 + key]);
      }
    }
    nnc_cp_async_commit();
    nnc_cp_async_wait<1>(); /* all but the copy just started: tile j (and Q) */
    __syncthreads();

    if (j == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) Ops::load_q(qf[mt], sq, wrow + mt * 16, lane);
    }

    const T *kt = sk + buf * TK;
    const T *vt = sv + buf * TK;

    /* S = Q K^T */
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
    Ops::template qk<MT, NT>(s, qf, kt, lane);

    /* the keys' caps: under a padding mask, and on the tail tile past S */
    const int k0 = j * BK;
    if (mrow || k0 + BK > a.S) {
      const float *kcap = scap + buf * BK + (lane % 4) * 2;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float2 kc = *reinterpret_cast<const float2 *>(kcap + nt * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          s[mt][nt][0] = fminf(s[mt][nt][0], kc.x);
          s[mt][nt][1] = fminf(s[mt][nt][1], kc.y);
          s[mt][nt][2] = fminf(s[mt][nt][2], kc.x);
          s[mt][nt][3] = fminf(s[mt][nt][3], kc.y);
        }
      }
    }

    /* the causal limit on tiles that cut the diagonal, then the online softmax */
    if (a.causal && k0 + BK - 1 > q0 + off) mask_scores<T, MT, NT>(s, a, nullptr, k0, q0 + wrow, lane);
    online_softmax<MT, NT, ND>(s, m, l, o, sl2);

    /* O += P V */
    Ops::template pv<MT, NT, ND>(o, s, vt, lane);
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
      const int key = (int)threadIdx.x + i * NTHREADS;
      if (key < BK) scap[(buf ^ 1) * BK + key] = k1 + key < a.S && mval[i] != 0.0f ? INFINITY : -INFINITY;
    }
    __syncthreads(); /* the next iteration's copy overwrites this buffer */
  }
  nnc_cp_async_wait<0>();

  store_rows<T, MT, ND>(o, m, l, og, a.o_st, q0 + wrow, a.T, lane, a.scale, lse_row(a, b, h));
#endif
}

#endif
