/* templates/cuda/attention_ops16.cuh — the operands of the tensor-core
 * attention kernel (attention_mma.cuh) for bf16 and f16: m16n8k16 mma.sync
 * with f32 accumulators, fragments read by ldmatrix from swizzled tiles.
 *
 * Shared memory rows are D * 2 bytes; the 16-byte chunk index is XORed with
 * the row so that the 8 rows one ldmatrix phase reads hit 8 distinct bank
 * groups (no conflicts for D = 32, 64, 128). S's accumulator layout is the
 * A fragment layout of P (two n8 tiles of S = one k16 step of P V), and
 * ldmatrix.trans gives V's B fragments. */
#ifndef NNC_CUDA_ATTENTION_OPS16_CUH
#define NNC_CUDA_ATTENTION_OPS16_CUH

#include "attention_tile.cuh"

namespace nnc_attn {

/* The swizzle: 16-byte chunk ch of row r of a tile of D-element rows sits
 * at chunk ch ^ swz_key(r). The key depends on r % 8 alone, so rows 8 apart
 * share it and the addresses of a thread's fragments differ by constants. */
template <int D> __device__ __forceinline__ int swz_key(int r) {
  constexpr int CPR = D / 8;
  constexpr int SW = CPR >= 8 ? 8 : CPR;
  constexpr int RDIV = 8 / SW;
  return (r / RDIV) % SW;
}

/* Element offset of chunk ch of row r. */
template <int D> __device__ __forceinline__ int swz(int r, int ch) { return r * D + ((ch ^ swz_key<D>(r)) * 8); }

/* Starts the copy of rows [0, R) of a tile (row r at src + r * st; rows >=
 * nvalid are zero-filled, so P * V never meets garbage) into dst. Each
 * thread copies one chunk column of rows RSTEP apart (RSTEP a multiple of 8:
 * one swizzle key), so its addresses advance by constants. */
template <typename T, int D, int R, int NTHREADS>
__device__ __forceinline__ void load_tile_swz(T *dst, const T *base, const T *src, long long st, int nvalid) {
  constexpr int CPR = D / 8;
  constexpr int RSTEP = NTHREADS / CPR;
  static_assert(NTHREADS % CPR == 0 && RSTEP % 8 == 0 && R % RSTEP == 0, "tile rows must split evenly");
  const int r0 = threadIdx.x / CPR, ch = threadIdx.x % CPR;
  const uint32_t d = nnc_smem_u32(dst + swz<D>(r0, ch));
  const T *g = src + r0 * st + ch * 8;
  const long long step = RSTEP * st;
#pragma unroll
  for (int i = 0; i < R / RSTEP; ++i) {
    const bool ok = r0 + i * RSTEP < nvalid;
    nnc_cp_async16(d + (uint32_t)(i * RSTEP * D * sizeof(T)), ok ? g + i * step : base, ok);
  }
}

/* The kernel's operand interface, tc_ops (the tf32 one in attention_tf32.cuh
 * has the same members): the k step of one mma, the row stride of its tiles, the
 * tile copy, Q's A fragments, S = Q K^T and O += P V for a warp's rows. */
template <typename T, int D> struct tc_ops16 {
  static constexpr int KSTEP = 16;
  static constexpr int KD = D / KSTEP;
  static constexpr int QREGS = KD; /* Q's A fragments a thread holds */
  static constexpr int LD = D;     /* row stride in shared memory, elements */

  template <int R, int NTHREADS>
  __device__ static void load_tile(T *dst, const T *base, const T *src, long long st, int nvalid) {
    load_tile_swz<T, D, R, NTHREADS>(dst, base, src, st, nvalid);
  }

  /* the A fragments of the 16 rows of sq from row r0 */
  __device__ static void load_q(uint32_t (&qf)[KD][4], const T *sq, int r0, int lane) {
#pragma unroll
    for (int kd = 0; kd < KD; ++kd)
      nnc_ldmatrix_x4(qf[kd], nnc_smem_u32(sq + swz<D>(r0 + lane % 16, kd * 2 + lane / 16)));
  }

  /* S = Q K^T: ldmatrix x4 gives the B fragments of two n8 tiles of keys */
  template <int MT, int NT>
  __device__ static void qk(float (&s)[MT][NT][4], const uint32_t (&qf)[MT][KD][4], const T *kt, int lane) {
    const int mi = lane / 8;
    const uint32_t row = nnc_smem_u32(kt) + (uint32_t)((lane % 8 + (mi / 2) * 8) * D * sizeof(T));
    const int key = swz_key<D>(lane % 8);
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      const uint32_t at = row + (uint32_t)((((kd * 2 + mi % 2) ^ key) * 8) * sizeof(T));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4];
        nnc_ldmatrix_x4(bk, at + (uint32_t)(np * 16 * D * sizeof(T)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          nnc_mma<T>::run(s[mt][2 * np], qf[mt][kd], bk[0], bk[1]);
          nnc_mma<T>::run(s[mt][2 * np + 1], qf[mt][kd], bk[2], bk[3]);
        }
      }
    }
  }

  template <int MT, int NT, int ND>
  __device__ static void pv(float (&o)[MT][ND][4], const float (&s)[MT][NT][4], const T *vt, int lane) {
    const int mi = lane / 8;
    const uint32_t row = nnc_smem_u32(vt) + (uint32_t)((lane % 8 + (mi % 2) * 8) * D * sizeof(T));
    const int key = swz_key<D>(lane % 8);
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = nnc_mma<T>::pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = nnc_mma<T>::pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = nnc_mma<T>::pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = nnc_mma<T>::pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bv[4];
        nnc_ldmatrix_x4_trans(bv, row + (uint32_t)((kk * 16 * D + ((dp * 2 + mi / 2) ^ key) * 8) * sizeof(T)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          nnc_mma<T>::run(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
          nnc_mma<T>::run(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
        }
      }
    }
  }
};

template <int D> struct tc_ops<__nv_bfloat16, D> : tc_ops16<__nv_bfloat16, D> {};
template <int D> struct tc_ops<__half, D> : tc_ops16<__half, D> {};

}  // namespace nnc_attn

#endif
