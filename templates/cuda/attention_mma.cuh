/* templates/cuda/attention_mma.cuh — the tensor-core path of attention
 * (flash attention 2 on mma.sync), for bf16/f16 with D == Dv in {32, 64, 128}.
 * Included by attention.cuh, which holds the interface and the dispatch.
 *
 * A block of WARPS warps owns BQ consecutive queries of one (batch, head);
 * warp w owns rows [w * 16 * MT, (w + 1) * 16 * MT) of them (MT m16 tiles).
 * The Q tile is loaded once into registers (ldmatrix); K and V walk in tiles
 * of BK keys, double-buffered in shared memory by cp.async, so the next
 * tile's copy overlaps this tile's arithmetic. Per tile: S = Q K^T by
 * m16n8k16 (f32 accumulation), mask, online softmax in f32 registers
 * (each row lives in the 4 threads of a quad: max and sum by 2 shuffles),
 * P converted to T in registers and reused as the A operand of O += P V
 * (ldmatrix.trans gives V's B fragments). Rows are reduced once at the end.
 *
 * Shared memory rows are D * 2 bytes; the 16-byte chunk index is XORed with
 * the row so that the 8 rows one ldmatrix phase reads hit 8 distinct bank
 * groups (no conflicts for D = 32, 64, 128).
 *
 * Causal: key tiles wholly above the diagonal of the block's last query are
 * never loaded; tiles that cut the diagonal, the tail tile past S, and every
 * tile when a padding mask is given are masked per element. A row with no
 * unmasked key keeps l = 0 and is written as zeros. Heavy (late) query
 * blocks of a causal launch are scheduled first. */
#ifndef NNC_CUDA_ATTENTION_MMA_CUH
#define NNC_CUDA_ATTENTION_MMA_CUH

#include "nnc_cuda.cuh"

namespace nnc_attn {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* 16 bytes global -> shared, bypassing L1; n == 0 writes 16 zero bytes. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> __device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* 2^x on the special-function unit (rel. error about 2^-22, ample for
 * bf16/f16 outputs); exp2f adds denormal handling around the same MUFU. */
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* d += a * b on one m16n8k16 tile, f32 accumulators. */
template <typename T> struct mma_op;

template <> struct mma_op<__nv_bfloat16> {
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
  __device__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
};

template <> struct mma_op<__half> {
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
  __device__ static uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
};

/* Element offset of 16-byte chunk ch of row r in a tile of D-element rows. */
template <int D> __device__ __forceinline__ int swz(int r, int ch) {
  constexpr int CPR = D / 8;
  constexpr int SW = CPR >= 8 ? 8 : CPR;
  constexpr int RDIV = 8 / SW;
  return r * D + ((ch ^ ((r / RDIV) % SW)) * 8);
}

/* Starts the copy of rows [0, R) of a tile (row r at src + r * st; rows >=
 * nvalid are zero-filled, so P * V never meets garbage) into dst. */
template <typename T, int D, int R, int NTHREADS>
__device__ __forceinline__ void load_tile(T *dst, const T *base, const T *src, long long st,
                                          int nvalid) {
  constexpr int CPR = D / 8;
#pragma unroll
  for (int c = threadIdx.x; c < R * CPR; c += NTHREADS) {
    const int r = c / CPR, ch = c % CPR;
    const bool ok = r < nvalid;
    cp_async16(smem_addr(dst + swz<D>(r, ch)), ok ? src + r * st + ch * 8 : base, ok ? 16 : 0);
  }
}

}  // namespace nnc_attn

extern __shared__ __align__(16) unsigned char nnc_attn_smem[];

template <typename T> struct nnc_cuda_attn_args;

/* Shared memory of one block: Q tile plus two K and two V tiles. */
template <typename T, int D, int BQ, int BK> constexpr size_t nnc_attn_mma_smem() {
  return (size_t)(BQ + 4 * BK) * D * sizeof(T);
}

template <typename T, int D, int BQ, int BK, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) nnc_attn_mma_kernel(const nnc_cuda_attn_args<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nnc_attn;
  constexpr int NTHREADS = WARPS * 32;
  constexpr int MT = BQ / (16 * WARPS); /* m16 tiles per warp */
  constexpr int NT = BK / 8;            /* n8 tiles of S */
  constexpr int KD = D / 16;            /* k16 steps over D */
  constexpr int ND = D / 8;             /* n8 tiles of O */
  constexpr int KK = BK / 16;           /* k16 steps over the keys */
  static_assert(MT >= 1 && BQ == MT * 16 * WARPS, "BQ must be a multiple of 16 * WARPS");
  static_assert(BK % 16 == 0 && D % 16 == 0, "BK and D must be multiples of 16");

  T *sq = reinterpret_cast<T *>(nnc_attn_smem);
  T *sk = sq + BQ * D; /* two buffers of BK x D */
  T *sv = sk + 2 * BK * D;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qt = a.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int q0 = qt * BQ;
  const int off = a.S - a.T; /* causal: query i sees keys j <= i + off */
  const T *qg = a.q + b * a.q_sb + h * a.q_sh;
  const T *kg = a.k + b * a.k_sb + h * a.k_sh;
  const T *vg = a.v + b * a.v_sb + h * a.v_sh;
  T *og = a.out + b * a.o_sb + h * a.o_sh;
  const T *mrow = a.mask ? a.mask + b * a.mask_sb : nullptr;

  int kend = a.S;
  if (a.causal) kend = min(kend, q0 + BQ + off);
  const int ntiles = kend > 0 ? (kend + BK - 1) / BK : 0;

  load_tile<T, D, BQ, NTHREADS>(sq, qg, qg + (long long)q0 * a.q_st, a.q_st, a.T - q0);
  if (ntiles > 0) {
    load_tile<T, D, BK, NTHREADS>(sk, kg, kg, a.k_st, a.S);
    load_tile<T, D, BK, NTHREADS>(sv, vg, vg, a.v_st, a.S);
  }
  cp_async_commit();

  float o[MT][ND][4];
  float m[MT][2], l[MT][2];
  uint32_t qf[MT][KD][4];
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
    if (j + 1 < ntiles) {
      const int k1 = (j + 1) * BK;
      load_tile<T, D, BK, NTHREADS>(sk + (buf ^ 1) * BK * D, kg, kg + (long long)k1 * a.k_st, a.k_st,
                                    a.S - k1);
      load_tile<T, D, BK, NTHREADS>(sv + (buf ^ 1) * BK * D, vg, vg + (long long)k1 * a.v_st, a.v_st,
                                    a.S - k1);
    }
    cp_async_commit();
    cp_async_wait<1>(); /* all but the copy just started: tile j (and Q) */
    __syncthreads();

    if (j == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kd = 0; kd < KD; ++kd)
          ldmatrix_x4(qf[mt][kd], smem_addr(sq + swz<D>(wrow + mt * 16 + lane % 16, kd * 2 + lane / 16)));
    }

    const T *kt = sk + buf * BK * D;
    const T *vt = sv + buf * BK * D;

    /* S = Q K^T */
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4];
        const int mi = lane / 8;
        ldmatrix_x4(bk, smem_addr(kt + swz<D>(np * 16 + lane % 8 + (mi / 2) * 8, kd * 2 + mi % 2)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_op<T>::run(s[mt][2 * np], qf[mt][kd], bk[0], bk[1]);
          mma_op<T>::run(s[mt][2 * np + 1], qf[mt][kd], bk[2], bk[3]);
        }
      }
    }

    /* mask the raw scores; scale > 0 (the dispatch sees to it), so the max of
     * the raw scores is the max of the scaled ones and scaling folds into the
     * exponent's FMA */
    const int k0 = j * BK;
    const bool edge = k0 + BK > a.S || (a.causal && k0 + BK - 1 > q0 + off) || mrow != nullptr;
    if (edge) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int col = k0 + nt * 8 + (lane % 4) * 2 + e2;
          const bool gone = col >= a.S || (mrow && nnc_dtype<T>::load(mrow[col]) == 0.0f);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const int row = q0 + wrow + mt * 16 + lane / 4 + hr * 8;
              if (gone || (a.causal && col > row + off)) s[mt][nt][hr * 2 + e2] = -INFINITY;
            }
        }
      }
    }

    /* online softmax: rows lane/4 and lane/4 + 8 of each m tile */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = m[mt][hr];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* nothing unmasked yet: subtract 0, so that exp2(-inf - m) is 0, not NaN */
        const float mus = (mx == -INFINITY ? 0.0f : mx) * sl2;
        const float alpha = ex2(m[mt][hr] * sl2 - mus);
        m[mt][hr] = mx;
        float rs = 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float p0 = ex2(fmaf(s[mt][nt][2 * hr], sl2, -mus));
          const float p1 = ex2(fmaf(s[mt][nt][2 * hr + 1], sl2, -mus));
          s[mt][nt][2 * hr] = p0;
          s[mt][nt][2 * hr + 1] = p1;
          rs += p0 + p1;
        }
        l[mt][hr] = l[mt][hr] * alpha + rs; /* this thread's part; the quad is summed at the end */
#pragma unroll
        for (int nd = 0; nd < ND; ++nd) {
          o[mt][nd][2 * hr] *= alpha;
          o[mt][nd][2 * hr + 1] *= alpha;
        }
      }
    }

    /* O += P V: S's accumulator layout is the A fragment layout of P */
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = mma_op<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = mma_op<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = mma_op<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = mma_op<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < ND / 2; ++dp) {
        uint32_t bv[4];
        const int mi = lane / 8;
        ldmatrix_x4_trans(bv, smem_addr(vt + swz<D>(kk * 16 + lane % 8 + (mi % 2) * 8, dp * 2 + mi / 2)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_op<T>::run(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
          mma_op<T>::run(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
        }
      }
    }
    __syncthreads(); /* the next iteration's copy overwrites this buffer */
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = l[mt][hr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* all keys masked: zeros */
      const int row = q0 + wrow + mt * 16 + lane / 4 + hr * 8;
      if (row < a.T) {
        T *orow = og + (long long)row * a.o_st + (lane % 4) * 2;
#pragma unroll
        for (int nd = 0; nd < ND; ++nd)
          *reinterpret_cast<uint32_t *>(orow + nd * 8) =
              mma_op<T>::pack(o[mt][nd][2 * hr] * inv, o[mt][nd][2 * hr + 1] * inv);
      }
    }
  }
#endif
}

#endif
