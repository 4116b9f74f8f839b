/* templates/cuda/gemm_mma.cuh — the warp-level instructions the GEMM is built
 * from (sm_80 and later, so plain sm_90 too): cp.async (16 bytes, global to
 * shared, zero-filled when the source is out of range), ldmatrix (four 8x8
 * b16 matrices from shared memory, optionally transposed) and
 * mma.sync.m16n8k16 (bf16 or f16 operands, f32 accumulators), plus packing
 * two floats into one 32-bit pair of T. */
#ifndef NNC_CUDA_GEMM_MMA_CUH
#define NNC_CUDA_GEMM_MMA_CUH

#include "nnc_cuda.cuh"

__device__ __forceinline__ uint32_t nnc_smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Copies 16 bytes from src to shared dst; when !full nothing is read and dst
 * gets zeros (src must still be a valid address: callers pass a base). */
__device__ __forceinline__ void nnc_cp_async16(uint32_t dst, const void *src, bool full) {
  const int n = full ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void nnc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* Waits until at most N committed groups of this thread are still in flight. */
template <int N> __device__ __forceinline__ void nnc_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void nnc_ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void nnc_ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* d += a . b for one 16x8x16 tile (a row-major, b column-major). */
template <typename T> struct nnc_mma;

template <> struct nnc_mma<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
  __device__ __forceinline__ static float2 unpack2(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v));
  }
};

template <> struct nnc_mma<__half> {
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack2(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
  __device__ __forceinline__ static float2 unpack2(uint32_t v) {
    return __half22float2(*reinterpret_cast<const __half2 *>(&v));
  }
};

#endif
