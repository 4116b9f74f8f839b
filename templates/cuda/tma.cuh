/* templates/cuda/tma.cuh — Hopper's bulk tensor copy (TMA) and the shared-
 * memory barriers (mbarrier) it completes on; sm_90 and newer.
 *
 * One thread issues a copy of a whole tile (a box of a tensor of up to five
 * dimensions, described by a CUtensorMap made on the host) from global to
 * shared memory; the copy engine computes every address, zero-fills what
 * lies past the tensor's edges and writes the tile in the 128-byte swizzle
 * that wgmma's descriptors read (wgmma.cuh). The copy counts its bytes off a
 * barrier in shared memory; threads wait on the barrier's phase. This takes
 * the per-thread address arithmetic and predicates of cp.async copies off the
 * warps that do the math.
 *
 * Host side: nnc_tma::encode_4d fills a tensor map through the driver's
 * cuTensorMapEncodeTiled, found at run time through the CUDA runtime, so a
 * program needs no -lcuda; a map asked for again comes from a cache. */
#ifndef NNC_CUDA_TMA_CUH
#define NNC_CUDA_TMA_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "gemm_mma.cuh"

namespace nnc_tma {

/* ---------------------------------------------------------- device side */

/* A barrier that completes a phase after count arrivals and the bytes
 * announced by expect_tx have landed. One thread initialises; the block
 * synchronises before anyone else uses it. */
__device__ __forceinline__ void init(uint64_t *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(nnc_smem_u32(bar)), "r"(count) : "memory");
}
/* Makes the initialised barriers visible to the copy engine. */
__device__ __forceinline__ void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/* Arrives on bar and announces bytes that copies will still deliver. */
__device__ __forceinline__ void arrive_expect(uint64_t *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(nnc_smem_u32(bar)), "r"(bytes)
               : "memory");
}

/* Waits until the phase of the given parity (0 for the first, then 1, 0...)
 * has completed. */
__device__ __forceinline__ void wait(uint64_t *bar, unsigned parity) {
  const uint32_t addr = nnc_smem_u32(bar);
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(addr), "r"(parity)
                 : "memory");
  } while (!done);
}

/* Copies the box at coordinates (c0, c1, c2, c3) of map to dst (aligned as
 * the map's swizzle needs: 1024 bytes for 128-byte swizzle), counting its
 * bytes off bar. */
__device__ __forceinline__ void load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2,
                                        int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(nnc_smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(nnc_smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/* Arrives on bar (one of its count arrivals), announcing no bytes. */
__device__ __forceinline__ void arrive(uint64_t *bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(nnc_smem_u32(bar)) : "memory");
}

/* The 2-D form of load_4d: the box at (c0, c1) of a rank-2 map. */
__device__ __forceinline__ void load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          nnc_smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(nnc_smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}

/* Fetches a map (a kernel parameter) into the copy engine's cache before
 * its first copy needs it. */
__device__ __forceinline__ void prefetch_map(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/* ------------------------------------------------------------ host side */

/* The driver's cuTensorMapEncodeTiled (CUDA 12.0's signature), or NULL when
 * the driver has none. Looked up once. */
inline PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    return e == cudaSuccess && q == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p)
                                                                 : nullptr;
  }();
  return fn;
}

/* A 4-D tensor of 16-bit elements at base: dims[0] contiguous, strides (in
 * elements) of dims 1 to 3; boxes of box[0..3] elements land in shared
 * memory in the 128-byte swizzle (box[0] * 2 must be 128 bytes or less).
 * Elements past the edges read as zeros. Returns false when the driver
 * refuses (a stride that is not a multiple of 16 bytes or over 2^40, a
 * misaligned base) or has no encoder. */
/* What a map is made from: two requests with the same key get the same map. */
struct map_key {
  const void *base;
  long long type, dims[4], strides[3], box[4];
};

/* The maps this thread made last, by key: a model describes the same
 * tensors on every run, and the driver takes microseconds a map, so the
 * launch path asks it once (a fixed ring, the oldest replaced). */
struct map_cache {
  static constexpr int N = 32;
  map_key key[N];
  CUtensorMap map[N];
  int used = 0, next = 0;
};

inline bool encode_4d(CUtensorMap *map, const void *base, CUtensorMapDataType type, const uint64_t (&dims)[4],
                      const long long (&strides)[3], const uint32_t (&box)[4]) {
  thread_local map_cache cache;
  map_key k;
  memset(&k, 0, sizeof k); /* no padding bytes left unset: keys compare with memcmp */
  k.base = base;
  k.type = (long long)type;
  for (int i = 0; i < 4; ++i) k.dims[i] = (long long)dims[i], k.box[i] = box[i];
  for (int i = 0; i < 3; ++i) k.strides[i] = strides[i];
  for (int i = 0; i < cache.used; ++i)
    if (memcmp(&cache.key[i], &k, sizeof k) == 0) {
      *map = cache.map[i];
      return true;
    }
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encoder();
  if (!fn) return false;
  cuuint64_t gdim[4], gstride[3];
  cuuint32_t bdim[4], estride[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; ++i) gdim[i] = dims[i], bdim[i] = box[i];
  for (int i = 0; i < 3; ++i) {
    if (strides[i] <= 0) return false;
    gstride[i] = (cuuint64_t)strides[i] * 2;
  }
  if (fn(map, type, 4, const_cast<void *>(base), gdim, gstride, bdim, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  cache.key[cache.next] = k;
  cache.map[cache.next] = *map;
  cache.next = (cache.next + 1) % map_cache::N;
  if (cache.used < map_cache::N) ++cache.used;
  return true;
}

}  // namespace nnc_tma

#endif
