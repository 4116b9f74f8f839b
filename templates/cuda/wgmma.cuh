/* templates/cuda/wgmma.cuh — Hopper's warpgroup MMA (wgmma.mma_async), which
 * exists only in the arch-specific sm_90a: the 128 threads of a warpgroup
 * issue one 64 x N x 16 product together, reading B (and A, or A from
 * registers) straight from shared memory through a 64-bit descriptor, and
 * the product runs asynchronously until wait() — twice the rate of mma.sync
 * on an H100.
 *
 * Operand tiles here are rows of 128 bytes (64 bf16/f16, 128 e4m3) in the 128-byte
 * swizzle: the 16-byte chunk c of row r sits at chunk c ^ (r % 8), groups of
 * 8 rows 1024 bytes apart, the tile 1024-byte aligned (the hardware applies
 * the XOR to address bits 4-6 from bits 7-9). That one layout serves:
 * - a K-major operand (Q for S = Q K^T, K as B): a row is one row of the
 *   matrix, its 64 elements the k dimension; the k16 step kk starts 32 * kk
 *   bytes into the rows;
 * - an MN-major B (V for O = P V): a row is one k (key), its 64 elements the
 *   n dimension (trans-b = 1); the k16 step kk starts 16 rows down.
 * Both strides of the descriptor are the 1024 bytes between 8-row groups:
 * with 64-element rows no other stride is used.
 *
 * The accumulator of a 64 x N product: warp w of the warpgroup holds rows
 * 16w..16w+15 in the m16n8 layout of mma.sync, d[4 * nt + e] being row
 * lane/4 + 8 * (e / 2), column 8 * nt + 2 * (lane % 4) + e % 2 (f32, or
 * int32 for s8 operands); the A
 * fragment from registers is mma.sync's m16k16 A fragment. */
#ifndef NNC_CUDA_WGMMA_CUH
#define NNC_CUDA_WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace nnc_wg {

/* This thread's warpgroup (threads 128 g to 128 g + 127), as a value the
 * compiler knows to be the same across the warp (a shuffle from lane 0):
 * shared-memory descriptors made from it then stay in uniform registers,
 * where wgmma takes them, instead of being moved there before each product. */
__device__ __forceinline__ int warpgroup() { return __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0); }

/* Descriptor of a 128-byte-swizzled tile starting at shared address addr
 * (both strides 1024 bytes, swizzle mode 1 = 128 bytes). Adding n to it
 * moves the start by 16 * n bytes. */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  constexpr uint64_t group = 1024 >> 4;
  return (uint64_t)((addr & 0x3FFFF) >> 4) | (group << 16) | (group << 32) | (1ull << 62);
}

/* The same for an MN-major B wider than one row of 128 bytes, held as
 * panels of 64 columns (each a tile as above): panel p + 1 starts lbo
 * bytes after panel p (the leading-dimension byte offset, which a single
 * panel never uses). */
__device__ __forceinline__ uint64_t desc_sw128_panels(uint32_t addr, uint32_t lbo) {
  constexpr uint64_t group = 1024 >> 4;
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) | (group << 32) | (1ull << 62);
}

/* Orders this thread's register writes before the next wgmma reads them. */
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/* Waits until at most N committed groups are still running. */
template <int N> __device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared memory written through the generic proxy (st.shared, cp.async)
 * becomes visible to wgmma's async proxy. */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Keeps the compiler from reading accumulators before wait(): each register
 * is redefined here, after the wait in program order. */
template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* The same for the int32 accumulators of the s8 products. */
template <int N> __device__ __forceinline__ void fence_regs(int (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

#define NNC_WG_ACC8(d, i)                                                                              \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define NNC_WG_ACC32(d, i) NNC_WG_ACC8(d, i), NNC_WG_ACC8(d, i + 8), NNC_WG_ACC8(d, i + 16), NNC_WG_ACC8(d, i + 24)
#define NNC_WG_R32                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define NNC_WG_R128                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
  "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, " \
  "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, " \
  "%89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, "  \
  "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "   \
  "%127}"
#define NNC_WG_R64                                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
  "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define NNC_WG_R96 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, " \
  "%65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, " \
  "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"

/* mma<T>: d (+)= A B for T = bf16 or f16 with f32 accumulators.
 * ss<N>: A (64 x 16, K-major) and B (16 x N, K-major, N 64, 128, 192 or 256)
 *   from descriptors;
 *   acc = 0 overwrites d (the first k step).
 * rs_n64_tb: A (64 x 16) from registers, B (16 x 64, MN-major) from a
 *   descriptor, accumulating;
 * rs_n128_tb: the same with B 16 x 128 (two panels: desc_sw128_panels). */
template <typename T> struct mma;

#define NNC_WG_MMA(T, TY)                                                                                        \
  template <> struct mma<T> {                                                                                    \
    template <int N> __device__ __forceinline__ static void ss(float (&d)[N / 2], uint64_t a, uint64_t b, int acc) { \
      static_assert(N == 64 || N == 128 || N == 192 || N == 256, "n64, n128, n192 or n256");                 \
      if constexpr (N == 64)                                                                                     \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                              \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32" TY TY " " NNC_WG_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n" \
                     : NNC_WG_ACC32(d, 0)                                                                        \
                     : "l"(a), "l"(b), "r"(acc));                                                                \
      else if constexpr (N == 192)                                                                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                              \
                     "wgmma.mma_async.sync.aligned.m64n192k16.f32" TY TY " " NNC_WG_R96 ", %96, %97, p, 1, 1, 0, 0;\n}\n" \
                     : NNC_WG_ACC32(d, 0), NNC_WG_ACC32(d, 32), NNC_WG_ACC32(d, 64)                              \
                     : "l"(a), "l"(b), "r"(acc));                                                                \
      else if constexpr (N == 128)                                                                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                              \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32" TY TY " " NNC_WG_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n" \
                     : NNC_WG_ACC32(d, 0), NNC_WG_ACC32(d, 32)                                                   \
                     : "l"(a), "l"(b), "r"(acc));                                                                \
      else                                                                                                       \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                             \
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32" TY TY " " NNC_WG_R128 ", %128, %129, p, 1, 1, 0, 0;\n}\n" \
                     : NNC_WG_ACC32(d, 0), NNC_WG_ACC32(d, 32), NNC_WG_ACC32(d, 64), NNC_WG_ACC32(d, 96)         \
                     : "l"(a), "l"(b), "r"(acc));                                                                \
    }                                                                                                            \
    __device__ __forceinline__ static void rs_n64_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {       \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                \
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32" TY TY " " NNC_WG_R32                             \
                   ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                               \
                   : NNC_WG_ACC32(d, 0)                                                                          \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                                \
    }                                                                                                            \
    __device__ __forceinline__ static void rs_n128_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {      \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                \
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32" TY TY " " NNC_WG_R64                            \
                   ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                               \
                   : NNC_WG_ACC32(d, 0), NNC_WG_ACC32(d, 32)                                                     \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                                \
    }                                                                                                            \
  };

NNC_WG_MMA(__nv_bfloat16, ".bf16")
NNC_WG_MMA(__half, ".f16")

#undef NNC_WG_MMA

/* e4m3 x e4m3 (f32 accumulators): one m64nNk32 step reads 32 bytes of each
 * row, as a k16 step of bf16 does, so the same descriptors and the same
 * "+ 2 a step" walk serve. FP8 wgmma takes K-major operands only (no
 * transpose immediates), and only the ss form is built. */
template <> struct mma<__nv_fp8_e4m3> {
  template <int N> __device__ __forceinline__ static void ss(float (&d)[N / 2], uint64_t a, uint64_t b, int acc) {
    static_assert(N == 64 || N == 128 || N == 256, "n64, n128 or n256");
    if constexpr (N == 64)
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " NNC_WG_R32 ", %32, %33, p, 1, 1;\n}\n"
                   : NNC_WG_ACC32(d, 0)
                   : "l"(a), "l"(b), "r"(acc));
    else if constexpr (N == 128)
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " NNC_WG_R64 ", %64, %65, p, 1, 1;\n}\n"
                   : NNC_WG_ACC32(d, 0), NNC_WG_ACC32(d, 32)
                   : "l"(a), "l"(b), "r"(acc));
    else
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " NNC_WG_R128 ", %128, %129, p, 1, 1;\n}\n"
                   : NNC_WG_ACC32(d, 0), NNC_WG_ACC32(d, 32), NNC_WG_ACC32(d, 64), NNC_WG_ACC32(d, 96)
                   : "l"(a), "l"(b), "r"(acc));
  }
};

/* s8 x s8 (int32 accumulators, exact): the same k32 steps and descriptors
 * as e4m3; integer wgmma takes no scale immediates, only scale-d. */
#define NNC_WG_IACC8(d, i)                                                                             \
  "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]), "+r"(d[i + 6]), \
      "+r"(d[i + 7])
#define NNC_WG_IACC32(d, i) NNC_WG_IACC8(d, i), NNC_WG_IACC8(d, i + 8), NNC_WG_IACC8(d, i + 16), NNC_WG_IACC8(d, i + 24)
template <> struct mma<signed char> {
  template <int N> __device__ __forceinline__ static void ss(int (&d)[N / 2], uint64_t a, uint64_t b, int acc) {
    static_assert(N == 64 || N == 128 || N == 256, "n64, n128 or n256");
    if constexpr (N == 64)
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 " NNC_WG_R32 ", %32, %33, p;\n}\n"
                   : NNC_WG_IACC32(d, 0)
                   : "l"(a), "l"(b), "r"(acc));
    else if constexpr (N == 128)
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " NNC_WG_R64 ", %64, %65, p;\n}\n"
                   : NNC_WG_IACC32(d, 0), NNC_WG_IACC32(d, 32)
                   : "l"(a), "l"(b), "r"(acc));
    else
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 " NNC_WG_R128 ", %128, %129, p;\n}\n"
                   : NNC_WG_IACC32(d, 0), NNC_WG_IACC32(d, 32), NNC_WG_IACC32(d, 64), NNC_WG_IACC32(d, 96)
                   : "l"(a), "l"(b), "r"(acc));
  }
};

#undef NNC_WG_IACC8
#undef NNC_WG_IACC32
#undef NNC_WG_ACC8
#undef NNC_WG_ACC32
#undef NNC_WG_R32
#undef NNC_WG_R64
#undef NNC_WG_R96
#undef NNC_WG_R128

}  // namespace nnc_wg

#endif
