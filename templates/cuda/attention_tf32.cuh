/* templates/cuda/attention_tf32.cuh — the operands of the tensor-core
 * attention kernel (attention_mma.cuh) for f32 data; with --precision=tf32:
 * m16n8k8 mma.sync on tf32 (inputs rounded to nearest tf32 as they enter a
 * fragment, f32 accumulators, softmax in f32), as cuBLAS does for the tf32
 * GEMMs around it.
 *
 * ldmatrix moves 16-bit elements only, so fragments are read from shared
 * memory one float at a time. Rows are padded to D + 4 floats (still a
 * multiple of 16 bytes for cp.async): the 32 lanes of a fragment read then
 * touch 32 distinct banks, for the K rows (lane reads row lane/4, column
 * lane%4) and for the V rows (row 2*(lane%4), column lane/4).
 *
 * The m16n8k8 C layout gives a thread columns 2t and 2t+1 of an n8 tile of S
 * (t = lane%4), while its A layout for P V wants columns t and t+4. Since
 * P V sums over the keys, the keys of each step are renumbered instead of
 * moved between threads: A column t is key 2t, column t+4 is key 2t+1, and
 * V's B fragment reads rows 2t and 2t+1 to match.
 *
 * The same operands, each split in two tf32 parts, give f32 products
 * (tf32_ops<D, true>: the kernel for --precision=f32). */
#ifndef NNC_CUDA_ATTENTION_TF32_CUH
#define NNC_CUDA_ATTENTION_TF32_CUH

#include "attention_tile.cuh"

namespace nnc_attn {

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

/* d += a * b on one m16n8k8 tile of tf32, f32 accumulators. */
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* SPLIT false: one tf32 product per pair (--precision=tf32). SPLIT true:
 * each operand is split into its tf32 rounding and the tf32 rounding of the
 * rest, x = hi + lo, and a.b = hi.hi + hi.lo + lo.hi (lo.lo, below 2^-22 of
 * the product, is dropped): three products give f32 accuracy (--precision=f32)
 * at a third of the tf32 rate. Q's fragments then hold hi at [kd] and lo at
 * [KD + kd]. */
template <int D, bool SPLIT> struct tf32_ops {
  static constexpr int KSTEP = 8;
  static constexpr int KD = D / KSTEP;
  static constexpr int QREGS = SPLIT ? 2 * KD : KD;
  static constexpr int LD = D + 4; /* row stride in shared memory: padded */

  /* rows [0, R) of a tile (row r at src + r * st; rows >= nvalid zero-filled) */
  template <int R, int NTHREADS>
  __device__ static void load_tile(float *dst, const float *base, const float *src, long long st, int nvalid) {
    constexpr int CPR = D / 4;
#pragma unroll
    for (int c = threadIdx.x; c < R * CPR; c += NTHREADS) {
      const int r = c / CPR, ch = c % CPR;
      const bool ok = r < nvalid;
      nnc_cp_async16(nnc_smem_u32(dst + r * LD + ch * 4), ok ? src + r * st + ch * 4 : base, ok);
    }
  }

  /* x as hi (and lo when split) */
  __device__ static void split(float x, uint32_t &hi, uint32_t &lo) {
    hi = to_tf32(x);
    if (SPLIT) lo = to_tf32(x - __uint_as_float(hi));
  }

  /* d += a . b, a and b each given as hi (and lo) */
  __device__ static void mma(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0,
                             uint32_t bh1, uint32_t bl0, uint32_t bl1) {
    if (SPLIT) {
      mma_tf32(d, al, bh0, bh1);
      mma_tf32(d, ah, bl0, bl1);
    }
    mma_tf32(d, ah, bh0, bh1);
  }

  /* A fragments of the 16 rows of sq from row r0: (g, t), (g+8, t), (g, t+4), (g+8, t+4) */
  __device__ static void load_q(uint32_t (&qf)[QREGS][4], const float *sq, int r0, int lane) {
    const float *p = sq + (r0 + lane / 4) * LD + lane % 4;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      const float x[4] = {p[kd * 8], p[8 * LD + kd * 8], p[kd * 8 + 4], p[8 * LD + kd * 8 + 4]};
#pragma unroll
      for (int e = 0; e < 4; ++e) split(x[e], qf[kd][e], qf[SPLIT ? KD + kd : kd][e]);
    }
  }

  /* S = Q K^T: B fragment of keys [8 nt, 8 nt + 8) is K[key g][dims t, t+4] */
  template <int MT, int NT>
  __device__ static void qk(float (&s)[MT][NT][4], const uint32_t (&qf)[MT][QREGS][4], const float *kt, int lane) {
    const float *p = kt + (lane / 4) * LD + lane % 4;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        uint32_t h0, h1, l0 = 0, l1 = 0;
        split(p[nt * 8 * LD + kd * 8], h0, l0);
        split(p[nt * 8 * LD + kd * 8 + 4], h1, l1);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma(s[mt][nt], qf[mt][kd], qf[mt][SPLIT ? KD + kd : kd], h0, h1, l0, l1);
      }
    }
  }

  /* O += P V, 8 keys a step, keys renumbered as the header says */
  template <int MT, int NT, int ND>
  __device__ static void pv(float (&o)[MT][ND][4], const float (&s)[MT][NT][4], const float *vt, int lane) {
    const float *p = vt + 2 * (lane % 4) * LD + lane / 4;
#pragma unroll
    for (int kk = 0; kk < NT; ++kk) {
      uint32_t ph[MT][4], pl[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int from[4] = {0, 2, 1, 3};
#pragma unroll
        for (int e = 0; e < 4; ++e) split(s[mt][kk][from[e]], ph[mt][e], pl[mt][e]);
      }
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        uint32_t h0, h1, l0 = 0, l1 = 0;
        split(p[kk * 8 * LD + nd * 8], h0, l0);
        split(p[(kk * 8 + 1) * LD + nd * 8], h1, l1);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma(o[mt][nd], ph[mt], pl[mt], h0, h1, l0, l1);
      }
    }
  }
};

template <int D> struct tc_ops<float, D> : tf32_ops<D, false> {};

}  // namespace nnc_attn

#endif
