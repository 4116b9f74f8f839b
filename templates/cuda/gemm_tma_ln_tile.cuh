/* templates/cuda/gemm_tma_ln_tile.cuh — gemm_tma_ln.cuh's coalesced row
 * traffic (the VEC instances: rows of C, of the residual and of pre start
 * 16-byte aligned and N is a multiple of 8, as BERT's are). The fragment
 * layout (gemm_tma_ln_rows.cuh) reads and writes 16 bytes of each of 8
 * rows a warp instruction; here a warpgroup's 64 x NH tile moves as 16-byte
 * vectors of whole rows (a warp covers 512 contiguous bytes of a row
 * pair), through a buffer of its own in shared memory: the residual is
 * loaded before the k loop into registers, staged after it and read back
 * in the fragment layout; the normalized rows are staged in the fragment
 * layout and stored as vectors.
 *
 * The buffer holds 64 rows of NH + 8 elements: rows (NH + 8) * 2 bytes
 * apart, 4 banks on from each other, so a fragment access (8 rows x 4
 * neighbouring words) and a quarter warp's vectors (128 contiguous bytes)
 * each touch 32 distinct banks. */
#ifndef NNC_CUDA_GEMM_TMA_LN_TILE_CUH
#define NNC_CUDA_GEMM_TMA_LN_TILE_CUH

#include "gemm_mma.cuh"
#include "gemm_tma_ln_rows.cuh"
#include "nnc_cuda.cuh"

namespace nnc_gtl {

template <int NH> struct tile16 {
  static constexpr int LD = NH + 8;            /* the buffer's row, in elements */
  static constexpr int VPR = NH / 8;           /* 16-byte vectors a row */
  static constexpr int NV = 64 * VPR / 128;    /* vectors a thread */
  static constexpr int ELEMS = 64 * LD;        /* the buffer */
};

/* Named barrier 2 + wgl over consumer warpgroup wgl's 128 threads (1 is consumers_sync's). */
__device__ __forceinline__ void wg_sync(int wgl) {
  if (wgl == 0)
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  else
    asm volatile("bar.sync 3, 128;\n" ::: "memory");
}

/* Thread t's vectors of the tile at p (its first row and column; rows of
 * ld elements): vector t + 128 i is row (t + 128 i) / VPR, columns 8 x its
 * remainder; rows at or past rows and columns at or past cols (a multiple
 * of 8) read as zeros, as does everything when p is NULL. */
template <typename T, int NH>
__device__ __forceinline__ void load_tile(uint4 (&v)[tile16<NH>::NV], const T *p, long long ld, int rows, int cols,
                                          int t) {
  using S = tile16<NH>;
#pragma unroll
  for (int i = 0; i < S::NV; ++i) {
    const int x = t + 128 * i, r = x / S::VPR, c = x % S::VPR * 8;
    v[i] = p && r < rows && c < cols ? *reinterpret_cast<const uint4 *>(p + (long long)r * ld + c)
                                     : make_uint4(0u, 0u, 0u, 0u);
  }
}

template <typename T, int NH>
__device__ __forceinline__ void stage_tile(T *buf, const uint4 (&v)[tile16<NH>::NV], int t) {
  using S = tile16<NH>;
#pragma unroll
  for (int i = 0; i < S::NV; ++i) {
    const int x = t + 128 * i;
    *reinterpret_cast<uint4 *>(buf + x / S::VPR * S::LD + x % S::VPR * 8) = v[i];
  }
}

/* The residual pairs of the thread's fragment (rows rl, rl + 8; columns cq + 8 nt) from the buffer. */
template <typename T, int NH>
__device__ __forceinline__ void fragment_of(uint32_t (&res)[NH / 4], const T *buf, int rl, int cq) {
#pragma unroll
  for (int nt = 0; nt < NH / 8; ++nt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
      res[2 * nt + hr] = *reinterpret_cast<const uint32_t *>(buf + (rl + 8 * hr) * tile16<NH>::LD + 8 * nt + cq);
}

/* y = (x - mean) rstd gamma + beta of the thread's fragment into the buffer. */
template <typename T, int NH>
__device__ __forceinline__ void stage_norm(T *buf, const float (&acc)[NH / 2], const float2 (&st)[2],
                                           const float *sgam, const float *sbeta, int rl, int cq) {
#pragma unroll
  for (int nt = 0; nt < NH / 8; ++nt) {
    const float2 g = *reinterpret_cast<const float2 *>(sgam + 8 * nt + cq);
    const float2 b = *reinterpret_cast<const float2 *>(sbeta + 8 * nt + cq);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float y0 = fmaf((acc[4 * nt + 2 * hr] - st[hr].x) * st[hr].y, g.x, b.x);
      const float y1 = fmaf((acc[4 * nt + 2 * hr + 1] - st[hr].x) * st[hr].y, g.y, b.y);
      *reinterpret_cast<uint32_t *>(buf + (rl + 8 * hr) * tile16<NH>::LD + 8 * nt + cq) = nnc_mma<T>::pack2(y0, y1);
    }
  }
}

/* The buffer's rows [0, rows) and columns [0, cols) to p, 16 bytes at a time. */
template <typename T, int NH>
__device__ __forceinline__ void store_tile(T *p, long long ld, const T *buf, int rows, int cols, int t) {
  using S = tile16<NH>;
#pragma unroll
  for (int i = 0; i < S::NV; ++i) {
    const int x = t + 128 * i, r = x / S::VPR, c = x % S::VPR * 8;
    if (r < rows && c < cols) {
      const uint4 u = *reinterpret_cast<const uint4 *>(buf + r * S::LD + c);
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p + (long long)r * ld + c), "r"(u.x), "r"(u.y),
                   "r"(u.z), "r"(u.w)
                   : "memory");
    }
  }
}

}  // namespace nnc_gtl

#endif
