/* templates/cuda/gemm_skinny.cuh — C = act(alpha * A W + bias) (+ residual)
 * for a few rows of A (M <= 64): a decode step's GEMMs, one token a
 * sequence, which must stream their weight once and are otherwise all
 * latency. cuBLASLt takes 8-12 us for each of GPT-2's layer GEMMs at 64
 * rows whatever their size (bench/NOTES.md, "Decode GEMMs at M = 64"),
 * where the weight alone would take 0.3-1.1 us at the copy rate.
 *
 *   nnc_cuda_status nnc_cuda_gemm_skinny<T, TO>(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s,
 *                                             nnc_cuda_error *err);
 * T: __nv_bfloat16 or __half; TO: T or float. A is [M][lda]; W is [N][ldw]
 * when w_nk (nn.Linear's weight, a tied embedding), else [K][ldw] (GPT-2's
 * Conv1D, "in_out"); C and the residual [M][ldc]. K, lda, ldw multiples of
 * 8, N too when W is [K][N]; A, W 16-byte aligned. Returns NNC_CUDA_E_ARG
 * (nothing launched) for bad arguments or M > 64; never synchronizes; one
 * launch, so a CUDA graph captures it. Needs sm_90 (thread block clusters).
 *
 * What makes such a GEMM fast is bytes in flight: a weight of a few MB
 * takes about one memory latency to arrive only if nearly all of it is
 * requested at once. So the grid is (N / 64 column tiles) x KS slices of k,
 * KS (1..8) the most whose clusters all fit in one wave, and each block
 * copies its slice in chunks of 64 k through a ring of up to STAGES shared
 * memory stages (cp.async, 16 bytes a copy): a layer's slice is one to six
 * chunks, all in flight from the start; the head's 768 k stream through
 * the ring. A weight's copies (w_fixed) are issued before the
 * kernel waits for the one before it (programmatic dependent launch: the
 * launch lets it start early, griddepcontrol.wait holds back the reads of
 * A and the residual and every write), so they overlap that kernel's tail
 * and the launch gap.
 *
 * Four warps each own 16 of the 64 columns for every row tile, and feed
 * mma.sync.m16n8k16 from ldmatrix (transposed for W as [K][N]), as
 * gemm_kernel.cuh does; rows are padded by 16 bytes so ldmatrix meets no
 * bank conflict. The KS blocks of a column tile form a cluster: each writes
 * its partial tile to its shared memory, then sums a share of the outputs
 * over the cluster's shared memories in rank order (the same bits every
 * run), applies the epilogue and stores it. No workspace, no atomics. */
#ifndef NNC_CUDA_GEMM_SKINNY_CUH
#define NNC_CUDA_GEMM_SKINNY_CUH

#include <cooperative_groups.h>

#include <atomic>

#include "gemm_kernel.cuh"
#include "pdl.cuh"

template <typename T, typename TO> struct nnc_cuda_skinny_args {
  int M, N, K;
  const T *a; /* [M][lda] */
  long long lda;
  const T *w; /* [N][ldw] when w_nk, else [K][ldw] */
  long long ldw;
  bool w_nk;
  const T *bias;      /* [N] or NULL */
  const TO *residual; /* [M][ldc] or NULL; may be c itself */
  TO *c;              /* [M][ldc] */
  long long ldc;
  float alpha;
  nnc_cuda_act act;
  bool act_last; /* the activation after the residual */
  bool w_fixed;  /* W is a weight (the same every run, written before it): its copies may start before the
                    kernel before this one has finished */
};

/* The most rows for which the generated GEMMs take this kernel instead of
 * their usual path (cuBLASLt, nnc's wgmma GEMM): GPT-2 124M's decode step
 * under CUDA graphs on an H200 (session 36) is 6% faster with it at B=1,
 * 3% at B=16, the same at B=8, 1-3% slower at B=32 and 12% slower at B=64.
 * -DNNC_SKINNY_ROWS=0 in NVCCFLAGS turns it off, 64 (the most) takes it
 * for every decode batch. */
#ifndef NNC_SKINNY_ROWS
#define NNC_SKINNY_ROWS 16
#endif
static_assert(NNC_SKINNY_ROWS <= 64, "the skinny GEMM takes at most 64 rows (NNC_SKINNY_ROWS)");

/* The most blocks a cluster splits k over (2 to 8; 1: no split, no cluster) */
#ifndef NNC_SKINNY_MAX_SLICES
#define NNC_SKINNY_MAX_SLICES 8
#endif

namespace nnc_sk {

constexpr int WARPS = 4, THREADS = WARPS * 32, BN = 64, BK = 64, STAGES = 6, MAX_SLICES = NNC_SKINNY_MAX_SLICES;
constexpr int LDK = BK + 8;                 /* rows of 64 k (A, W as [N][K]) padded by 16 bytes */
constexpr int LDN = BN + 8;                 /* rows of 64 columns (W as [K][N]) */
constexpr int W_STAGE = BN * LDK;           /* = BK * LDN */
constexpr int LDP = BN + 4;                 /* the partial tile's f32 rows */
constexpr const char *KERNEL = "nnc_cuda_gemm_skinny";
static_assert(BN * LDK == BK * LDN, "one W stage size for both layouts");

template <int MT> struct rows {
  static constexpr int A_STAGE = MT * 16 * LDK;
  static constexpr size_t STAGE_BYTES = (size_t)(W_STAGE + A_STAGE) * 2;
};

/* cp.async.wait_group takes an immediate: n (0 .. STAGES - 2) at run time */
__device__ __forceinline__ void wait_copies(int n) {
  switch (n) {
  case 0: nnc_cp_async_wait<0>(); break;
  case 1: nnc_cp_async_wait<1>(); break;
  case 2: nnc_cp_async_wait<2>(); break;
  case 3: nnc_cp_async_wait<3>(); break;
  default: nnc_cp_async_wait<4>(); break;
  }
}
static_assert(STAGES - 2 <= 4, "wait_copies covers every count the ring waits for");

}  // namespace nnc_sk

/* MT tiles of 16 rows (M <= 16 MT); W_NK: W is [N][K]. */
/* stages: the ring's length (2 .. STAGES), one more than the most chunks a
 * slice has when they all fit, so that all of them are copied at once. */
template <typename T, typename TO, int MT, bool W_NK>
__global__ void __launch_bounds__(nnc_sk::THREADS) nnc_gemm_skinny_kernel(const nnc_cuda_skinny_args<T, TO> g, int slices,
                                                                        int stages) {
  using namespace nnc_sk;
  using mma = nnc_mma<T>;
  constexpr int A_STAGE = rows<MT>::A_STAGE;
  extern __shared__ uint4 nnc_skinny_smem[];
  T *const ws = reinterpret_cast<T *>(nnc_skinny_smem);
  T *const as = ws + stages * W_STAGE;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n0 = blockIdx.x * BN, slice = blockIdx.y;
  const int chunks = (g.K + BK - 1) / BK, c0 = slice * chunks / slices, nc = (slice + 1) * chunks / slices - c0;

  /* 16-byte copies: a thread takes column chunk tid % 8 of rows tid / 8 + 16 i */
  const int cr = tid / 8, cc = (tid % 8) * 8;
  auto load_w = [&](int stage, int chunk) {
    const int k0 = chunk * BK;
    T *dst = ws + stage * W_STAGE;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = cr + 16 * i;
      if (W_NK) { /* row r: column n0 + r, k0 .. k0 + 63 */
        const bool ok = n0 + r < g.N && k0 + cc < g.K;
        nnc_cp_async16(nnc_smem_u32(dst + r * LDK + cc), ok ? g.w + (long long)(n0 + r) * g.ldw + k0 + cc : g.w, ok);
      } else {    /* row r: k0 + r, columns n0 .. n0 + 63 */
        const bool ok = k0 + r < g.K && n0 + cc < g.N;
        nnc_cp_async16(nnc_smem_u32(dst + r * LDN + cc), ok ? g.w + (long long)(k0 + r) * g.ldw + n0 + cc : g.w, ok);
      }
    }
  };
  auto load_a = [&](int stage, int chunk) {
    const int k0 = chunk * BK;
    T *dst = as + stage * A_STAGE;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int r = cr + 16 * i;
      const bool ok = r < g.M && k0 + cc < g.K;
      nnc_cp_async16(nnc_smem_u32(dst + r * LDK + cc), ok ? g.a + (long long)r * g.lda + k0 + cc : g.a, ok);
    }
  };

  /* A fixed weight's first stages before the wait for the previous kernel,
   * then A's; stage s's copies are commit group s (the first group also
   * holds the weight's other prologue stages). */
  if (!g.w_fixed) nnc_pdl::wait();
  for (int s = 0; s < stages - 1; ++s)
    if (s < nc) load_w(s, c0 + s);
  if (g.w_fixed) nnc_pdl::wait();
  for (int s = 0; s < stages - 1; ++s) {
    if (s < nc) load_a(s, c0 + s);
    nnc_cp_async_commit();
  }

  float acc[MT][2][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

  /* where this lane's ldmatrix rows start: A's row tile, the warp's 16 columns of W */
  const int a_row = lane % 16, a_col = (lane / 16) * 8;
  const int bnk_row = warp * 16 + (lane % 8) + (lane / 16) * 8, bnk_col = ((lane / 8) % 2) * 8;
  const int bkn_row = (lane % 8) + ((lane / 8) % 2) * 8, bkn_col = warp * 16 + (lane / 16) * 8;

  for (int c = 0; c < nc; ++c) {
    nnc_sk::wait_copies(stages - 2);
    __syncthreads(); /* chunk c has landed for every thread; nobody reads chunk c - 1's stage any more */
    const int next = c + stages - 1;
    if (next < nc) {
      load_w(next % stages, c0 + next);
      load_a(next % stages, c0 + next);
    }
    nnc_cp_async_commit();
    const uint32_t a_base = nnc_smem_u32(as + (c % stages) * A_STAGE);
    const uint32_t w_base = nnc_smem_u32(ws + (c % stages) * W_STAGE);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t b[4];
      if (W_NK) nnc_ldmatrix_x4(b, w_base + 2u * (uint32_t)(bnk_row * LDK + kk * 16 + bnk_col));
      else nnc_ldmatrix_x4_trans(b, w_base + 2u * (uint32_t)((kk * 16 + bkn_row) * LDN + bkn_col));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        nnc_ldmatrix_x4(af, a_base + 2u * (uint32_t)((mt * 16 + a_row) * LDK + kk * 16 + a_col));
        mma::run(acc[mt][0], af, b[0], b[1]);
        mma::run(acc[mt][1], af, b[2], b[3]);
      }
    }
  }
  nnc_pdl::let_next_start(); /* its blocks may take SMs now; its reads still wait for all of this grid */

  /* the block's partial tile into shared memory (the stages are free once every copy has landed) */
  nnc_cp_async_wait<0>();
  __syncthreads();
  float *const part = reinterpret_cast<float *>(nnc_skinny_smem);
  const int gq = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2 *>(part + (mt * 16 + gq + 8 * h) * LDP + warp * 16 + nt * 8 + 2 * tq) =
            make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  /* this block's share of the outputs, 4 columns a thread, summed over the cluster's slices in rank
   * order; every slice's load is issued before the first add (one trip to the other SMs, not one a slice) */
  const int quads = g.M * (BN / 4);
  for (int i = slice * THREADS + tid; i < quads; i += slices * THREADS) {
    const int row = i / (BN / 4), col = (i % (BN / 4)) * 4;
    float4 x[MAX_SLICES];
#pragma unroll
    for (int r = 0; r < MAX_SLICES; ++r)
      if (r < slices) x[r] = *reinterpret_cast<const float4 *>(cluster.map_shared_rank(part, r) + row * LDP + col);
    float v[4] = {x[0].x, x[0].y, x[0].z, x[0].w};
#pragma unroll
    for (int r = 1; r < MAX_SLICES; ++r)
      if (r < slices) v[0] += x[r].x, v[1] += x[r].y, v[2] += x[r].z, v[3] += x[r].w;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = n0 + col + e;
      if (n >= g.N) break;
      float o = fmaf(g.alpha, v[e], g.bias ? nnc_dtype<T>::load(g.bias[n]) : 0.0f);
      if (!g.act_last) o = nnc_gemm_act_rt(g.act, o);
      if (g.residual) o += nnc_dtype<TO>::load(g.residual[row * g.ldc + n]);
      if (g.act_last) o = nnc_gemm_act_rt(g.act, o);
      g.c[row * g.ldc + n] = nnc_dtype<TO>::store(o);
    }
  }
  cluster.sync(); /* the other blocks read this one's shared memory until here */
}

/* The launch of one instance: the slices of k a column tile is split into
 * are the most (at most 8, a portable cluster; at least a chunk of 64 k
 * each) whose clusters all fit on the GPU at once, as
 * cudaOccupancyMaxActiveClusters counts them: a cluster's blocks must share
 * one GPC, so blocks an SM x SMs overstates it, and a second wave doubles
 * the time of these short kernels. The ring holds every chunk of a slice
 * when it can (stages = chunks + 1), else STAGES. */
template <typename T, typename TO, int MT, bool W_NK>
nnc_cuda_status nnc_gemm_skinny_launch(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s, nnc_cuda_error *err) {
  using namespace nnc_sk;
  const auto kernel = nnc_gemm_skinny_kernel<T, TO, MT, W_NK>;
  const int tiles = (g.N + BN - 1) / BN, chunks = (g.K + BK - 1) / BK;
  static const bool ready = [kernel] {
    const bool ok = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)(STAGES * rows<MT>::STAGE_BYTES)) == cudaSuccess;
    (void)cudaGetLastError();
    return ok;
  }();
  if (!ready)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "expected %zu bytes of shared memory a block, found them refused",
                         STAGES * rows<MT>::STAGE_BYTES);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = 1;
  at[0].val.clusterDim.z = 1;
  at[1] = nnc_pdl::programmatic_attr();
  cfg.blockDim = dim3(THREADS, 1, 1);
  cfg.stream = s;
  cfg.attrs = at;
  cfg.numAttrs = 2; /* the early start: pdl.cuh's NNC_PDL turns it off */
  /* the choice, kept per (tiles, chunks) so that a run asks the occupancy calculator once a shape */
  static std::atomic<unsigned long long> known[32];
  const unsigned long long key = ((unsigned long long)tiles << 20 | (unsigned)chunks) << 8;
  std::atomic<unsigned long long> &slot = known[(unsigned)(tiles * 31 + chunks) % 32];
  const unsigned long long seen = slot.load(std::memory_order_relaxed);
  const bool cached = (seen & ~0xffULL) == key;
  int slices = cached ? (int)(seen & 0xff) : (MAX_SLICES < chunks ? MAX_SLICES : chunks), stages = STAGES;
  bool asked = true; /* every answer came (not, say, refused inside a stream capture): worth keeping */
  for (;; --slices) {
    const int most = (chunks + slices - 1) / slices;
    stages = most + 1 < STAGES ? (most + 1 < 2 ? 2 : most + 1) : STAGES;
    cfg.gridDim = dim3((unsigned)tiles, (unsigned)slices, 1);
    cfg.dynamicSmemBytes = stages * rows<MT>::STAGE_BYTES;
    at[0].val.clusterDim.y = (unsigned)slices;
    if (cached || slices == 1) break;
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg) != cudaSuccess) fit = 0, asked = false;
    (void)cudaGetLastError();
    if (fit >= tiles) break;
  }
  if (!cached && asked) slot.store(key | (unsigned long long)slices, std::memory_order_relaxed);
  if (slices == 1) { /* no split: a plain launch, not a cluster of one */
    cfg.attrs = at + 1;
    cfg.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, g, slices, stages);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "launch failed: %s (%s)", cudaGetErrorString(e),
                         cudaGetErrorName(e));
  return nnc_cuda_check_launch(err, KERNEL);
}

template <typename T, typename TO, bool W_NK>
nnc_cuda_status nnc_gemm_skinny_rows(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s, nnc_cuda_error *err) {
  /* one tile of 16 rows for up to sixteen sequences, two or four for up to 32 or 64 */
  return g.M <= 16   ? nnc_gemm_skinny_launch<T, TO, 1, W_NK>(g, s, err)
         : g.M <= 32 ? nnc_gemm_skinny_launch<T, TO, 2, W_NK>(g, s, err)
                     : nnc_gemm_skinny_launch<T, TO, 4, W_NK>(g, s, err);
}

template <typename T, typename TO>
nnc_cuda_status nnc_cuda_gemm_skinny(const nnc_cuda_skinny_args<T, TO> &g, cudaStream_t s, nnc_cuda_error *err) {
  using namespace nnc_sk;
  if (g.M < 0 || g.N < 0 || g.K < 0 || g.M > 64)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected 0 <= M <= 64 and N, K >= 0, found M %d, N %d, K %d",
                         g.M, g.N, g.K);
  if (g.M == 0 || g.N == 0) return NNC_CUDA_OK;
  if (g.K == 0 || g.K % 8 || g.lda % 8 || g.ldw % 8 || g.lda < g.K || g.ldw < (g.w_nk ? g.K : g.N) ||
      (!g.w_nk && g.N % 8) || g.ldc < g.N || !g.a || !g.w || !g.c ||
      (reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.w)) % 16 ||
      (unsigned)g.act > (unsigned)NNC_CUDA_ACT_SILU)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected K > 0, K, lda, ldw multiples of 8 (N too when W is [K][N]; lda >= K, ldw >= "
                         "W's row, ldc >= N), a and w 16-byte aligned and a known activation, found N %d, K %d, "
                         "lda %lld, ldw %lld, ldc %lld, w_nk %d, a %p, w %p, act %d",
                         g.N, g.K, g.lda, g.ldw, g.ldc, (int)g.w_nk, (const void *)g.a, (const void *)g.w, (int)g.act);
  return g.w_nk ? nnc_gemm_skinny_rows<T, TO, true>(g, s, err) : nnc_gemm_skinny_rows<T, TO, false>(g, s, err);
}

#endif
