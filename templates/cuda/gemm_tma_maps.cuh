/* templates/cuda/gemm_tma_maps.cuh — host side of gemm_tma.cuh: the tensor
 * maps of its K-major operands, kept in a cache, and what it needs to know
 * of the device (SM count, compute capability), asked once.
 *
 * A map describes rows x cols elements of 2 bytes (bf16, f16) or 1 byte
 * (UINT8: e4m3 or s8 for gemm_tma8.cuh) (cols = K, the contiguous
 * dimension; rows of ld elements) to the copy engine, read in boxes of 128
 * bytes of columns (64 or 128, the 128-byte swizzle's row) by box_rows rows; what
 * lies past rows or cols reads as zeros. The driver takes microseconds a
 * map and a model asks for the same few hundred maps (weights by pointer,
 * activations in their arena) on every run, so maps are kept by (base,
 * shape, box): a set-associative table of 256, each thread its own (no
 * lock on the launch path). A map is a pure function of its key, so an
 * address freed and reused for a tensor of the same shape finds a valid map. */
#ifndef NNC_CUDA_GEMM_TMA_MAPS_CUH
#define NNC_CUDA_GEMM_TMA_MAPS_CUH

#include <atomic>
#include <cstdint>

#include "tma.cuh"

namespace nnc_gtm {

struct key {
  const void *base;
  unsigned long long rows, cols, ld;
  unsigned box_rows, type;
};

inline bool same(const key &a, const key &b) {
  return a.base == b.base && a.rows == b.rows && a.cols == b.cols && a.ld == b.ld && a.box_rows == b.box_rows &&
         a.type == b.type;
}

/* Zero-initialised as a thread_local (no constructor): used[][] all false. */
struct cache {
  static constexpr int SETS = 64, WAYS = 4;
  CUtensorMap map[SETS][WAYS];
  key k[SETS][WAYS];
  bool used[SETS][WAYS];
  unsigned char next[SETS]; /* the way a miss replaces: round robin */
};

inline unsigned set_of(const key &k) {
  uint64_t h = (uint64_t)(uintptr_t)k.base >> 4;
  h ^= (k.rows + 31 * k.cols) * 0x9E3779B97F4A7C15ull;
  h ^= (k.ld + k.box_rows) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  return (unsigned)(h % cache::SETS);
}

/* Fills *out with the map of the operand at base; returns the driver's
 * result (CUDA_ERROR_NOT_SUPPORTED when it has no encoder). */
inline CUresult kmajor(CUtensorMap *out, const void *base, CUtensorMapDataType type, unsigned long long rows,
                       unsigned long long cols, unsigned long long ld, unsigned box_rows) {
  thread_local cache c;
  const key k = {base, rows, cols, ld, box_rows, (unsigned)type};
  const unsigned s = set_of(k);
  for (int w = 0; w < cache::WAYS; ++w)
    if (c.used[s][w] && same(c.k[s][w], k)) {
      *out = c.map[s][w];
      return CUDA_SUCCESS;
    }
  const PFN_cuTensorMapEncodeTiled_v12000 enc = nnc_tma::encoder();
  if (!enc) return CUDA_ERROR_NOT_SUPPORTED;
  const unsigned es = type == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2; /* bytes an element */
  const cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld * es};
  const cuuint32_t box[2] = {128 / es, box_rows}, estrides[2] = {1, 1};
  const CUresult r = enc(out, type, 2, const_cast<void *>(base), dims, strides, box, estrides,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return r;
  const int w = c.next[s] % cache::WAYS;
  c.next[s] = (unsigned char)(w + 1);
  c.k[s][w] = k;
  c.map[s][w] = *out;
  c.used[s][w] = true;
  return CUDA_SUCCESS;
}

/* Device dev's SM count (the persistent grid's size) and compute
 * capability (10 major + minor), asked once a device (the first 16);
 * false when the runtime refuses. */
inline bool device_info(int dev, int *sms, int *cc) {
  static std::atomic<int> known[16][2];
  if (dev >= 0 && dev < 16) {
    *sms = known[dev][0].load(std::memory_order_acquire);
    *cc = known[dev][1].load(std::memory_order_relaxed);
    if (*sms > 0) return true;
  }
  int n = 0, major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  *sms = n, *cc = 10 * major + minor;
  if (dev >= 0 && dev < 16) {
    known[dev][1].store(*cc, std::memory_order_relaxed);
    known[dev][0].store(n, std::memory_order_release); /* last: a reader that sees sms sees cc */
  }
  return true;
}

}  // namespace nnc_gtm

#endif
