/* templates/cuda/attention_bwd_simt.cuh — the general path of the attention
 * backward: any D, Dv, any element type, f32 arithmetic on CUDA cores.
 * Included by attention_bwd.cuh, which holds the interface, the dispatch and
 * the delta kernel.
 *
 * Two kernels, each the only writer of what it computes, so the sums keep
 * one order and the results their bits from run to run:
 * - dQ: a block of WARPS warps owns BQ = WARPS * RPW queries (rows, dO rows
 *   and f32 dQ accumulators in shared memory) and walks the keys in tiles of
 *   32. Per tile and row, lane l takes key l: s = q.k, dP = dO.v, P =
 *   exp(scale * s - lse), dS = P (dP - delta) into a per-warp buffer; then
 *   lane l accumulates columns l, l + 32, ... of dQ += dS K.
 * - dK/dV: a block owns BKV = WARPS * RPW keys (K, V rows and the dK, dV
 *   accumulators in shared memory) and walks the queries that can see them
 *   in tiles of 32 (Q, dO rows, lse, delta); per key row, lane l takes query
 *   l for P and dS, then the lanes accumulate dV += P^T dO and
 *   dK += dS^T Q by columns.
 * Tiles keep f32 rows at an odd stride where the 32 lanes read one column of
 * 32 rows (distinct banks). */
#ifndef NNC_CUDA_ATTENTION_BWD_SIMT_CUH
#define NNC_CUDA_ATTENTION_BWD_SIMT_CUH

#include "attention_tile.cuh"
#include "nnc_cuda.cuh"

extern __shared__ __align__(16) unsigned char nnc_attn_smem[];

template <typename E> struct nnc_cuda_attn_bwd_args;

namespace nnc_attn_bwd {

/* Keys (dQ kernel) or queries (dK/dV kernel) of a tile: one a lane. */
constexpr int SIMT_TILE = 32;

/* Odd row stride: lanes reading one column of consecutive rows hit distinct banks. */
__host__ __device__ inline int odd(int n) { return n | 1; }

/* Whether key j is masked for query i (causal limit or padding mask). */
template <typename E>
__device__ __forceinline__ bool masked(const nnc_cuda_attn_bwd_args<E> &a, const E *mrow, int i, int j) {
  return (a.causal && j > i + (a.S - a.T)) || (mrow && nnc_dtype<E>::load(mrow[j]) == 0.0f);
}

/* Loads rows [r0, r0 + R) of a (b, h) slice as f32 at row stride ld; rows
 * from nvalid on get zeros. */
template <typename E>
__device__ __forceinline__ void load_rows_f32(float *dst, int ld, const E *src, long long st, int r0, int R,
                                              int nvalid, int C) {
  for (int e = threadIdx.x; e < R * C; e += blockDim.x) {
    const int r = e / C, c = e % C;
    dst[r * ld + c] = r0 + r < nvalid ? nnc_dtype<E>::load(src[(long long)(r0 + r) * st + c]) : 0.0f;
  }
}

__device__ __forceinline__ float dot(const float *x, const float *y, int n) {
  float t = 0.0f;
  for (int d = 0; d < n; ++d) t = fmaf(x[d], y[d], t);
  return t;
}

}  // namespace nnc_attn_bwd

/* Shared memory of the dQ kernel, bytes. */
template <int WARPS, int RPW> size_t nnc_attn_bwd_simt_dq_smem(int D, int Dv) {
  using nnc_attn_bwd::odd;
  constexpr int TK = nnc_attn_bwd::SIMT_TILE, BQ = WARPS * RPW;
  const size_t floats = (size_t)TK * (odd(D) + odd(Dv)) + (size_t)BQ * (2 * (size_t)D + Dv) + (size_t)WARPS * TK;
  return floats * sizeof(float);
}

/* Shared memory of the dK/dV kernel, bytes. */
template <int WARPS, int RPW> size_t nnc_attn_bwd_simt_dkv_smem(int D, int Dv) {
  using nnc_attn_bwd::odd;
  constexpr int TQ = nnc_attn_bwd::SIMT_TILE, BKV = WARPS * RPW;
  const size_t floats = (size_t)BKV * 2 * ((size_t)D + Dv) + (size_t)TQ * (odd(D) + odd(Dv) + 2) +
                        (size_t)WARPS * 2 * TQ;
  return floats * sizeof(float);
}

template <typename E, int WARPS, int RPW>
__global__ void __launch_bounds__(WARPS * 32) nnc_attn_bwd_simt_dq_kernel(const nnc_cuda_attn_bwd_args<E> a) {
  using namespace nnc_attn_bwd;
  constexpr int TK = SIMT_TILE, BQ = WARPS * RPW;
  const int D = a.D, Dv = a.Dv, ks = odd(D), vs = odd(Dv);
  float *sk = reinterpret_cast<float *>(nnc_attn_smem); /* [TK][ks] */
  float *sv = sk + TK * ks;                             /* [TK][vs] */
  float *sq = sv + TK * vs;                             /* [BQ][D] */
  float *sdo = sq + BQ * D;                             /* [BQ][Dv] */
  float *sacc = sdo + BQ * Dv;                          /* [BQ][D] */
  float *sds = sacc + BQ * D;                           /* [WARPS][TK] */

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const nnc_attn::block_tile bt = nnc_attn::tile_of_block(a.heads, a.causal);
  const int h = bt.h, b = bt.b, q0 = bt.qt * BQ;
  const E *qg = a.q + b * a.q_sb + h * a.q_sh;
  const E *kg = a.k + b * a.k_sb + h * a.k_sh;
  const E *vg = a.v + b * a.v_sb + h * a.v_sh;
  const E *dog = a.dout + b * a.do_sb + h * a.do_sh;
  E *dqg = a.dq + b * a.dq_sb + h * a.dq_sh;
  const E *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  const long long row0 = ((long long)b * a.heads + h) * a.T; /* of lse and delta */

  load_rows_f32(sq, D, qg, a.q_st, q0, BQ, a.T, D);
  load_rows_f32(sdo, Dv, dog, a.do_st, q0, BQ, a.T, Dv);
  for (int e = threadIdx.x; e < BQ * D; e += blockDim.x) sacc[e] = 0.0f;

  const int qlast = min(a.T, q0 + BQ) - 1;
  const int kend = a.causal ? min(a.S, qlast + a.S - a.T + 1) : a.S;
  for (int k0 = 0; k0 < kend; k0 += TK) {
    __syncthreads(); /* the previous tile is no longer read (and sq, sdo, sacc are written) */
    load_rows_f32(sk, ks, kg, a.k_st, k0, TK, a.S, D);
    load_rows_f32(sv, vs, vg, a.v_st, k0, TK, a.S, Dv);
    __syncthreads();
    const int nk = min(TK, kend - k0);
    for (int r = 0; r < RPW; ++r) {
      const int rl = warp * RPW + r, i = q0 + rl;
      if (i >= a.T) continue; /* warp-uniform */
      float ds = 0.0f;
      if (lane < nk && !masked(a, mrow, i, k0 + lane)) {
        const float p = expf(a.scale * dot(sq + rl * D, sk + lane * ks, D) - a.lse[row0 + i]);
        ds = p * (dot(sdo + rl * Dv, sv + lane * vs, Dv) - a.delta[row0 + i]);
      }
      float *dsw = sds + warp * TK;
      dsw[lane] = ds;
      __syncwarp();
      float *acc = sacc + rl * D;
      for (int c = lane; c < D; c += 32) {
        float t = acc[c];
        for (int jj = 0; jj < nk; ++jj) t = fmaf(dsw[jj], sk[jj * ks + c], t);
        acc[c] = t;
      }
      __syncwarp(); /* dsw is rewritten by the next row */
    }
  }
  __syncthreads(); /* with no tile at all, sacc was zeroed by other warps */

#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int rl = warp * RPW + r, i = q0 + rl;
    if (i >= a.T) continue;
    E *row = dqg + (long long)i * a.dq_st;
    for (int c = lane; c < D; c += 32) row[c] = nnc_dtype<E>::store(a.scale * sacc[rl * D + c]);
  }
}

template <typename E, int WARPS, int RPW>
__global__ void __launch_bounds__(WARPS * 32) nnc_attn_bwd_simt_dkv_kernel(const nnc_cuda_attn_bwd_args<E> a) {
  using namespace nnc_attn_bwd;
  constexpr int TQ = SIMT_TILE, BKV = WARPS * RPW;
  const int D = a.D, Dv = a.Dv, qs = odd(D), dos = odd(Dv);
  float *sk = reinterpret_cast<float *>(nnc_attn_smem); /* [BKV][D] */
  float *sv = sk + BKV * D;                             /* [BKV][Dv] */
  float *sdk = sv + BKV * Dv;                           /* [BKV][D] */
  float *sdv = sdk + BKV * D;                           /* [BKV][Dv] */
  float *sq = sdv + BKV * Dv;                           /* [TQ][qs] */
  float *sdo = sq + TQ * qs;                            /* [TQ][dos] */
  float *slse = sdo + TQ * dos;                         /* [TQ] */
  float *sdel = slse + TQ;                              /* [TQ] */
  float *sp = sdel + TQ;                                /* [WARPS][TQ] */
  float *sds = sp + WARPS * TQ;                         /* [WARPS][TQ] */

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = (int)blockIdx.x % a.heads, b = (int)blockIdx.x / a.heads;
  const int k0 = (int)blockIdx.y * BKV; /* early keys, seen by the most queries, start first */
  const E *qg = a.q + b * a.q_sb + h * a.q_sh;
  const E *kg = a.k + b * a.k_sb + h * a.k_sh;
  const E *vg = a.v + b * a.v_sb + h * a.v_sh;
  const E *dog = a.dout + b * a.do_sb + h * a.do_sh;
  E *dkg = a.dk + b * a.dk_sb + h * a.dk_sh;
  E *dvg = a.dv + b * a.dv_sb + h * a.dv_sh;
  const E *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;
  const long long row0 = ((long long)b * a.heads + h) * a.T;

  load_rows_f32(sk, D, kg, a.k_st, k0, BKV, a.S, D);
  load_rows_f32(sv, Dv, vg, a.v_st, k0, BKV, a.S, Dv);
  for (int e = threadIdx.x; e < BKV * (D + Dv); e += blockDim.x) sdk[e] = 0.0f; /* sdk and sdv */

  /* the first query that sees key k0 under the causal limit j <= i + S - T */
  const int qstart = a.causal ? max(0, k0 - (a.S - a.T)) : 0;
  for (int q0 = qstart; q0 < a.T; q0 += TQ) {
    __syncthreads();
    load_rows_f32(sq, qs, qg, a.q_st, q0, TQ, a.T, D);
    load_rows_f32(sdo, dos, dog, a.do_st, q0, TQ, a.T, Dv);
    if (threadIdx.x < TQ) {
      const int i = q0 + threadIdx.x;
      slse[threadIdx.x] = i < a.T ? a.lse[row0 + i] : INFINITY;
      sdel[threadIdx.x] = i < a.T ? a.delta[row0 + i] : 0.0f;
    }
    __syncthreads();
    const int nq = min(TQ, a.T - q0);
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const int rl = warp * RPW + r, j = k0 + rl;
      if (j >= a.S || (mrow && nnc_dtype<E>::load(mrow[j]) == 0.0f)) continue; /* warp-uniform */
      float p = 0.0f, ds = 0.0f;
      if (lane < nq && !masked<E>(a, nullptr, q0 + lane, j)) {
        p = expf(a.scale * dot(sq + lane * qs, sk + rl * D, D) - slse[lane]);
        ds = p * (dot(sdo + lane * dos, sv + rl * Dv, Dv) - sdel[lane]);
      }
      float *pw = sp + warp * TQ, *dsw = sds + warp * TQ;
      pw[lane] = p;
      dsw[lane] = ds;
      __syncwarp();
      for (int c = lane; c < Dv; c += 32) {
        float t = sdv[rl * Dv + c];
        for (int ii = 0; ii < nq; ++ii) t = fmaf(pw[ii], sdo[ii * dos + c], t);
        sdv[rl * Dv + c] = t;
      }
      for (int c = lane; c < D; c += 32) {
        float t = sdk[rl * D + c];
        for (int ii = 0; ii < nq; ++ii) t = fmaf(dsw[ii], sq[ii * qs + c], t);
        sdk[rl * D + c] = t;
      }
      __syncwarp(); /* pw and dsw are rewritten by the next row */
    }
  }
  __syncthreads(); /* sdk and sdv were zeroed by all threads */

#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int rl = warp * RPW + r, j = k0 + rl;
    if (j >= a.S) continue;
    E *dkr = dkg + (long long)j * a.dk_st;
    E *dvr = dvg + (long long)j * a.dv_st;
    for (int c = lane; c < D; c += 32) dkr[c] = nnc_dtype<E>::store(a.scale * sdk[rl * D + c]);
    for (int c = lane; c < Dv; c += 32) dvr[c] = nnc_dtype<E>::store(sdv[rl * Dv + c]);
  }
}

#endif
