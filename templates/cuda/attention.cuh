/* templates/cuda/attention.cuh — scaled dot-product attention (flash
 * attention: one pass over the keys with an online softmax, the T x S score
 * matrix never reaches memory).
 *
 * For each batch b and head h:
 *   out = softmax(scale * q . k^T + masks) . v,
 *   q [T,D], k [S,D], v [S,Dv], out [T,Dv]; element (b,h,i,d) of q is at
 *   q + b*q_sb + h*q_sh + i*q_st + d (likewise k, v, out; last dim contiguous,
 *   strides in elements; batch strides may be 0 to broadcast).
 *   causal: key j is masked for query i when j > i + (S - T).
 *   mask (may be NULL): [batch, S] of T with row stride mask_sb; key j of
 *   batch b is masked when mask[b*mask_sb + j] == 0.
 *   A query whose keys are all masked gets zeros (not NaN).
 *   kv_group (grouped-query attention): query head h reads the k and v of
 *   head h / kv_group (k_sh, v_sh step between those heads); 0 or 1: a k/v
 *   head for each query head.
 *   lse (may be NULL): lse[(b*heads + h)*T + i] = log sum_j exp(scale*s_ij)
 *   over the unmasked keys (computed as M + log sum exp(scale*s_ij - M)),
 *   +inf for a row with none; what the backward (attention_bwd.cuh) needs
 *   to rebuild the weights. Setting it leaves out bit for bit the same.
 *   k_new, v_new (may be NULL): a kv-cache append folded in
 *   (attention_append.cuh): k and v are caches of S rows whose last T,
 *   S - T .. S - 1, this call writes from k_new and v_new ([batch, k/v
 *   heads, T, D] with strides kn_sb, kn_sh, kn_st; likewise v) before or
 *   while attending to them; the cache's other rows are left as they are.
 *   rope_q, rope_k (0: none): q and k_new hold rows before a rotary
 *   embedding the attention applies itself (attention_rope.cuh; rope_pos,
 *   rope_pos_sb, rope_base, rope_dims); the caches get the rotated rows.
 * The same function as compiler/ref/ref_attention.c and the C SIMD template
 * (nnc_simd_attention); all arithmetic in f32.
 *
 *   nnc_cuda_status nnc_cuda_attention<T>(const nnc_cuda_attn_args<T> &a,
 *                                         cudaStream_t stream, nnc_cuda_error *err);
 * T: float, __nv_bfloat16, __half. Returns NNC_CUDA_E_ARG (nothing launched)
 * for a negative size, a NULL or misaligned pointer, or batch / heads over
 * 65535; NNC_CUDA_E_LAUNCH when the runtime refuses. batch, heads, T or Dv of
 * 0 launch nothing; S == 0 writes zeros. Never synchronizes.
 *
 * Dispatch (with k_new or v_new set, or rope_q, every path but the decode
 * kernels after one launch of nnc_attn_append_kernel, which also rotates
 * q's rows in place; the decode kernels write the rows and rotate
 * themselves):
 * - at most 4 query rows (a decode step) with D == Dv == 64, 16-byte rows
 *   and no lse: attention_decode.cuh, a block a query row with its keys
 *   dealt out to the block's threads;
 * - built for cuda-sm90a (NNC_CUDA_SM90A: every device pass sm_90a) on a
 *   compute capability 9.0 GPU, bf16/f16 with D == Dv == 64 or 128 and
 *   the mma conditions below, with q, k, v the copy engine can walk
 *   (tma_fits: no broadcast stride, S > 0): wgmma fed by TMA
 *   (attention_wgmma.cuh). D = 64: one warpgroup of 64 queries a block,
 *   BK = 64 keys a tile and three blocks an SM, or BK = 128 and two when
 *   the grid has fewer blocks than a wave of four an SM (B=8 H=12 causal
 *   T=1024: 43.8-44.5 us against 58.7 on mma.sync and SDPA's 47.1; B=1:
 *   13.6-13.8 against SDPA's 15.0; session 7, H100). D = 128: two
 *   warpgroups of 64 queries a block, BK = 128, one block an SM (registers
 *   and shared memory), the warpgroups sharing the buffers without a block
 *   barrier (SCHED 1) (B=4 H=16 causal T=2048: 162.7-167.8 us against
 *   266.6 on mma.sync and SDPA's 143.8-145.1: 0.86-0.89x; H200, helper
 *   h-attn128, 2026-11-29);
 * - tensor cores (attention_mma.cuh) when T is bf16 or f16, or T is float
 *   (a.tf32 set: products on tf32; not set: each product as three tf32
 *   products, f32 accuracy, D 32 or 64 only; softmax in f32 always),
 *   scale > 0 (its softmax folds the scale into the exponent), D == Dv is
 *   32, 64 or 128,
 *   q, k, v, out are 16-byte aligned, every q/k/v/out stride is a multiple
 *   of 16 bytes, and the GPU is sm_80 or newer;
 * - otherwise the SIMT path (attention_simt.cuh), any D and Dv as long as a
 *   tile of 32 keys fits in shared memory (D + Dv up to about 1500 on sm_90).
 *
 * Tiles (template parameters, defaults chosen in nnc_cuda_attention from
 * runs on an H100 of bench/gpu_attention.cu, which times the variants; bf16,
 * figures from the run after the fragment addresses became per-thread
 * constants, 2026-11-23 session 4):
 * - mma, D = 32: BQ = 64 queries, 4 warps (one m16 tile each), BK = 64 keys;
 *   20.5 KB of shared memory. B=32 H=12 T=128: 10.70 us (BQ = 128: 12.35).
 *   16-bit operands on Hopper, grids over a wave of three blocks an SM (130
 *   registers): at least six an SM (80), one wave for BERT's 768 blocks
 *   (bench/gpu_attn_bert.cu, H200, session 28: 14.93 -> 13.46 us with
 *   q|k|v in place and the padding mask; four an SM 14.93, eight 14.43
 *   with spills). On smaller grids six an SM only cost (BERT B=8 +2.5%).
 * - mma, D = 64: BQ = 64, 4 warps, BK = 64; 40.5 KB. B=8 causal T=1024:
 *   70.2 us (BK = 128: 77.6; BQ = 128 with 2 tiles a warp: 74.5; forcing 4
 *   blocks an SM: 72.5); B=1: 22.0 us (BK = 128: 21.3). With the grid's
 *   heaviest tiles first (tile_of_block, session 7): 58.7 and 17.2 us.
 * - mma, D = 128: BQ = 128, 8 warps (one m16 tile each: two would need
 *   more than 255 registers), BK = 128; 161 KB, one block an SM. B=4 H=16
 *   causal T=2048: 294 us (BK = 64: 307-310; 337 against 372 the session
 *   before).
 * - wgmma (sm_90a), D = 128: BQ = 128 in two warpgroups, BK = 128, rings
 *   of 2 K and 3 V tiles: 193 KB, one block an SM, 187 registers. B=4 H=16
 *   causal T=2048 (H200, 2026-11-29): 162.7-167.8 us (ping-pong turns,
 *   SCHED 2: 168-181; a block barrier a tile, SCHED 0: 192-202; BK = 64:
 *   200-217; one warpgroup a block at BK = 64 and two blocks an SM:
 *   192-203; three warpgroups at BK = 64: 226-234; the grid in groups of
 *   heads whose K and V fit in L2: 171-179, though its DRAM reads fell
 *   from about 320 to 140 MB).
 * - float (f32 rows padded to D + 4): BQ = 64, 4 warps, BK = 64 for D = 32
 *   and 64 (46 and 87 KB), BK = 32 for D = 128 (101 KB, tf32 only).
 * - SIMT: 4 warps of 4 rows (BQ = 16), BK = 64 keys (32 when 64 does not
 *   fit in shared memory).
 */
#ifndef NNC_CUDA_ATTENTION_CUH
#define NNC_CUDA_ATTENTION_CUH

#include <type_traits>

#include "nnc_cuda.cuh"

/* The element type is named E, not T: T is the member holding the query count. */
template <typename E> struct nnc_cuda_attn_args {
  int batch, heads, T, S, D, Dv;
  const E *q;
  long long q_sb, q_sh, q_st;
  const E *k;
  long long k_sb, k_sh, k_st;
  const E *v;
  long long v_sb, v_sh, v_st;
  E *out;
  long long o_sb, o_sh, o_st;
  float scale;
  int causal;
  const E *mask; /* may be NULL */
  long long mask_sb;
  int kv_group; /* query heads a k/v head serves; 0 means 1 */
  int tf32; /* E = float: the products may run on tf32 tensor cores (--precision=tf32) */
  float *lse; /* may be NULL; else [batch, heads, T] contiguous: each row's log-sum-exp (for the backward) */
  /* The kv-cache append folded into the attention (attention_append.cuh; may be NULL): this call's T new
   * rows of k (v), element (b, g, t, d) at k_new + b*kn_sb + g*kn_sh + t*kn_st + d for k/v head g, that
   * become rows S - T .. S - 1 of the cache k (v) points to: the attention writes them there and attends
   * to them, so that no copy kernel runs before it. */
  const E *k_new;
  long long kn_sb, kn_sh, kn_st;
  const E *v_new;
  long long vn_sb, vn_sh, vn_st;
  /* Rope folded into the attention (attention_rope.cuh; rope_q and rope_k 0: none): q (rope_q) and k_new
   * (rope_k) hold rows not yet rotated, which the attention turns as a rope kernel would have: the leading
   * rope_dims entries of each row (pairs i, i + rope_dims/2) by pos * rope_base^(-2i/rope_dims), pos =
   * rope_pos[b * rope_pos_sb + t] for time row t of batch b (rope_pos NULL: t). */
  const int *rope_pos;
  long long rope_pos_sb;
  double rope_base;
  int rope_dims;
  int rope_q, rope_k;
};

namespace nnc_attn {
/* The k/v head that query head h reads (grouped-query attention). */
template <typename E> __host__ __device__ __forceinline__ int kv_head(const nnc_cuda_attn_args<E> &a, int h) {
  return a.kv_group > 1 ? h / a.kv_group : h;
}
/* How many k/v heads there are. */
template <typename E> __host__ __device__ __forceinline__ int kv_heads(const nnc_cuda_attn_args<E> &a) {
  return a.kv_group > 1 ? a.heads / a.kv_group : a.heads;
}
}  // namespace nnc_attn

#include "attention_mma.cuh"
#include "attention_simt.cuh"
#include "attention_wgmma.cuh"

namespace nnc_attn {

constexpr const char *KERNEL = "nnc_cuda_attention";

inline nnc_cuda_status runtime_fail(nnc_cuda_error *err, cudaError_t e, const char *what) {
  return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "%s failed: %s (%s)", what, cudaGetErrorString(e),
                       cudaGetErrorName(e));
}

/* Makes sure a kernel may take smem bytes of dynamic shared memory. */
template <typename K>
nnc_cuda_status allow_smem(K kernel, size_t smem, nnc_smem_raised &raised, nnc_cuda_error *err) {
  cudaError_t e = nnc_raise_smem(kernel, smem, raised);
  return e == cudaSuccess ? NNC_CUDA_OK : runtime_fail(err, e, "cudaFuncSetAttribute");
}

/* The same for a launcher that several kernels of one type share (no record
 * of its own a kernel): the driver on every call. */
template <typename K> nnc_cuda_status allow_smem(K kernel, size_t smem, nnc_cuda_error *err) {
  if (smem <= 48 * 1024) return NNC_CUDA_OK;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  return e == cudaSuccess ? NNC_CUDA_OK : runtime_fail(err, e, "cudaFuncSetAttribute");
}

inline bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/* Whether every q/k/v/out stride keeps rows 16-byte aligned. */
template <typename T> bool strides16(const nnc_cuda_attn_args<T> &a) {
  const long long s[12] = {a.q_sb, a.q_sh, a.q_st, a.k_sb, a.k_sh, a.k_st,
                           a.v_sb, a.v_sh, a.v_st, a.o_sb, a.o_sh, a.o_st};
  for (long long x : s)
    if (x * (long long)sizeof(T) % 16 != 0) return false;
  return true;
}

}  // namespace nnc_attn

#include "attention_rope.cuh"
#include "attention_append.cuh"
#include "attention_decode.cuh"

/* Launches the tensor-core kernel with the tiles given (the arguments must
 * already satisfy the mma conditions above and D == this D). */
template <typename T, int D, int BQ, int BK, int WARPS, int MINB = 1, typename Ops = nnc_attn::tc_ops<T, D>>
nnc_cuda_status nnc_cuda_attention_mma(const nnc_cuda_attn_args<T> &a, cudaStream_t stream,
                                       nnc_cuda_error *err) {
  auto kernel = nnc_attn_mma_kernel<T, D, BQ, BK, WARPS, MINB, Ops>;
  const size_t smem = nnc_attn_mma_smem<T, D, BQ, BK, Ops>();
  static nnc_smem_raised raised; /* this kernel's */
  nnc_cuda_status st = nnc_attn::allow_smem(kernel, smem, raised, err);
  if (st != NNC_CUDA_OK) return st;
  const dim3 grid = nnc_attn::grid_of(a.T, BQ, a.heads, a.batch);
  nnc_pdl::launch(kernel, grid, WARPS * 32, smem, stream, a); /* it waits for the kernel before (pdl.cuh) */
  return nnc_cuda_check_launch(err, nnc_attn::KERNEL);
}

/* Launches the wgmma kernel (sm_90a) with the tiles given (the arguments
 * must satisfy the mma conditions above and nnc_attn::tma_fits, D == 64 or
 * 128, T bf16 or f16); SCHED is how its warpgroups share the buffers
 * (attention_wgmma.cuh: a block barrier for one warpgroup, each on its own
 * for more by default). The tensor maps of q, k and v are made here, on
 * the host (each once: nnc_tma::encode_4d keeps them). */
template <typename T, int D, int BK, int NWG, int STAGES, int MINB, int SCHED = (NWG == 1 ? 0 : 1)>
nnc_cuda_status nnc_cuda_attention_wgmma(const nnc_cuda_attn_args<T> &a, cudaStream_t stream,
                                         nnc_cuda_error *err) {
  constexpr int BQ = 64 * NWG;
  nnc_attn_wgmma_params<T> p;
  p.a = a;
  const int kvh = a.kv_group > 1 ? a.heads / a.kv_group : a.heads;
  if (!nnc_attn::tma_map(&p.q, a.q, a.T, a.heads, a, a.q_st, a.q_sh, a.q_sb, BQ) ||
      !nnc_attn::tma_map(&p.k, a.k, a.S, kvh, a, a.k_st, a.k_sh, a.k_sb, BK) ||
      !nnc_attn::tma_map(&p.v, a.v, a.S, kvh, a, a.v_st, a.v_sh, a.v_sb, BK))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, nnc_attn::KERNEL,
                         "expected q, k, v the driver can describe as tensor maps (cuTensorMapEncodeTiled), found "
                         "it refused strides %lld/%lld/%lld (q), %lld/%lld/%lld (k), %lld/%lld/%lld (v) elements",
                         a.q_st, a.q_sh, a.q_sb, a.k_st, a.k_sh, a.k_sb, a.v_st, a.v_sh, a.v_sb);
  auto kernel = nnc_attn_wgmma_kernel<T, D, BK, NWG, STAGES, MINB, SCHED>;
  const size_t smem = nnc_attn_wgmma_smem<T, D, BK, NWG, STAGES, STAGES + 1>();
  static nnc_smem_raised raised; /* this kernel's */
  nnc_cuda_status st = nnc_attn::allow_smem(kernel, smem, raised, err);
  if (st != NNC_CUDA_OK) return st;
  const dim3 grid = nnc_attn::grid_of(a.T, BQ, a.heads, a.batch);
  nnc_pdl::launch(kernel, grid, NWG * 128, smem, stream, p); /* it waits for the kernel before (pdl.cuh) */
  return nnc_cuda_check_launch(err, nnc_attn::KERNEL);
}

/* Launches the SIMT kernel with the tiles given; E_ARG when its shared
 * memory exceeds max_smem bytes. */
template <typename T, int BK, int WARPS, int RPW>
nnc_cuda_status nnc_cuda_attention_simt(const nnc_cuda_attn_args<T> &a, size_t max_smem,
                                        cudaStream_t stream, nnc_cuda_error *err) {
  auto kernel = nnc_attn_simt_kernel<T, BK, WARPS, RPW>;
  const size_t smem = nnc_attn_simt_smem<BK, WARPS, RPW>(a.D, a.Dv);
  if (smem > max_smem)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, nnc_attn::KERNEL,
                         "expected D + Dv small enough for a tile of %d keys in %zu bytes of shared "
                         "memory, found D = %d, Dv = %d (%zu bytes)",
                         BK, max_smem, a.D, a.Dv, smem);
  static nnc_smem_raised raised; /* this kernel's */
  nnc_cuda_status st = nnc_attn::allow_smem(kernel, smem, raised, err);
  if (st != NNC_CUDA_OK) return st;
  constexpr int BQ = WARPS * RPW;
  const dim3 grid = nnc_attn::grid_of(a.T, BQ, a.heads, a.batch);
  kernel<<<grid, WARPS * 32, smem, stream>>>(a);
  return nnc_cuda_check_launch(err, nnc_attn::KERNEL);
}

/* Whether nnc_cuda_attention takes the tensor-core path for these arguments
 * on a GPU of compute capability major cc_major. */
template <typename T> bool nnc_cuda_attention_uses_mma(const nnc_cuda_attn_args<T> &a, int cc_major) {
  /* f32 products (three tf32 products each) hold too many registers for D = 128 */
  if (std::is_same<T, float>::value && !a.tf32 && a.D == 128) return false;
  return cc_major >= 8 && a.scale > 0.0f && a.D == a.Dv && (a.D == 32 || a.D == 64 || a.D == 128) &&
         nnc_attn::aligned16(a.q) && nnc_attn::aligned16(a.k) && nnc_attn::aligned16(a.v) &&
         nnc_attn::aligned16(a.out) && nnc_attn::strides16(a);
}

template <typename T>
nnc_cuda_status nnc_cuda_attention(const nnc_cuda_attn_args<T> &a, cudaStream_t stream,
                                   nnc_cuda_error *err) {
  using nnc_attn::KERNEL;
  if (a.batch < 0 || a.heads < 0 || a.T < 0 || a.S < 0 || a.D < 0 || a.Dv < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected sizes >= 0, found batch %d, heads %d, T %d, S %d, D %d, Dv %d", a.batch,
                         a.heads, a.T, a.S, a.D, a.Dv);
  if (a.batch > 65535 || a.heads > 65535)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected batch and heads <= 65535, found %d and %d",
                         a.batch, a.heads);
  /* the grid (nnc_attn::grid_of): heads x batch blocks in x, query tiles of 16 rows or more in y */
  if ((long long)a.batch * a.heads > 0x7fffffffLL || a.T > 65535 * 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected batch * heads < 2^31 and T <= %d, found batch %d, heads %d, T %d", 65535 * 16,
                         a.batch, a.heads, a.T);
  /* with new rows to append, Dv == 0 still has k's rows to write */
  const bool appends = a.k_new || a.v_new;
  if (a.batch == 0 || a.heads == 0 || a.T == 0 || (a.Dv == 0 && !appends)) return NNC_CUDA_OK;
  const struct {
    const void *p;
    const char *name;
  } ptrs[4] = {{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.out, "out"}};
  for (const auto &x : ptrs) {
    if (!x.p) return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a device pointer for %s, found NULL", x.name);
    if (reinterpret_cast<uintptr_t>(x.p) % sizeof(T) != 0)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected %s aligned to %zu bytes, found %p", x.name,
                           sizeof(T), x.p);
  }
  if (a.mask && reinterpret_cast<uintptr_t>(a.mask) % sizeof(T) != 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected mask aligned to %zu bytes, found %p",
                         sizeof(T), (const void *)a.mask);
  if (a.kv_group < 0 || (a.kv_group > 1 && a.heads % a.kv_group != 0))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected kv_group >= 0 dividing heads %d, found %d",
                         a.heads, a.kv_group);

  nnc_cuda_status ast = nnc_attn::check_append(a, KERNEL, err);
  if (ast == NNC_CUDA_OK) ast = nnc_attn::check_rope(a, KERNEL, err);
  if (ast != NNC_CUDA_OK) return ast;
  if (a.Dv == 0) return nnc_attn::append_rows(a, stream, err, KERNEL);
  /* a decode step needs none of the device's attributes: no host queries on
   * its path; it writes the new rows (k_new, v_new) itself, and rotates
   * (rope_q, rope_k) as it reads */
  if (nnc_cuda_attention_uses_decode(a)) return nnc_cuda_attention_decode(a, stream, err);
  /* the other kernels read the caches whole: the new rows go in first, and
   * the query rows are rotated where they are (attention_rope.cuh) */
  ast = nnc_attn::append_rows(a, stream, err, KERNEL);
  if (ast != NNC_CUDA_OK) return ast;
  int dev = 0, cc = 0, optin = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return nnc_attn::runtime_fail(err, e, "querying the device");

#ifdef NNC_CUDA_SM90A
  if constexpr (!std::is_same<T, float>::value)
    if (cc == 9 && (a.D == 64 || a.D == 128) && nnc_cuda_attention_uses_mma(a, cc) && nnc_attn::tma_fits(a)) {
      /* 128 queries a block in two warpgroups, each on its own (SCHED 1),
       * one block an SM: registers (O alone is 64 a thread) and shared
       * memory allow no more */
      if (a.D == 128) return nnc_cuda_attention_wgmma<T, 128, 128, 2, 2, 1>(a, stream, err);
      /* fewer blocks of 64 queries than one wave at four an SM (GPT-2 at
       * B=1): the SMs are not full, each block's chain of tiles is the
       * time, and tiles of 128 keys halve it */
      if ((long long)a.heads * a.batch * ((a.T + 63) / 64) < 4LL * sms)
        return nnc_cuda_attention_wgmma<T, 64, 128, 1, 2, 2>(a, stream, err);
      return nnc_cuda_attention_wgmma<T, 64, 64, 1, 2, 3>(a, stream, err);
    }
#endif
  if (nnc_cuda_attention_uses_mma(a, cc)) {
    if constexpr (std::is_same<T, float>::value) {
      using nnc_attn::tf32_ops;
      if (!a.tf32 && a.D == 32) return nnc_cuda_attention_mma<T, 32, 64, 64, 4, 1, tf32_ops<32, true>>(a, stream, err);
      if (!a.tf32) return nnc_cuda_attention_mma<T, 64, 64, 64, 4, 1, tf32_ops<64, true>>(a, stream, err);
      if (a.D == 32) return nnc_cuda_attention_mma<T, 32, 64, 64, 4>(a, stream, err);
      if (a.D == 64) return nnc_cuda_attention_mma<T, 64, 64, 64, 4>(a, stream, err);
      return nnc_cuda_attention_mma<T, 128, 64, 32, 4>(a, stream, err);
    } else {
      /* Hopper, more blocks than a wave at the three an SM that 130
       * registers allow: six an SM (80 registers) hold up to twice as many
       * in a wave (measured at 768 blocks on 132 SMs only; sm_8x's shared
       * memory holds five of these blocks, and was not measured) */
      if (cc == 9 && a.D == 32 && (long long)a.heads * a.batch * ((a.T + 63) / 64) > 3LL * sms)
        return nnc_cuda_attention_mma<T, 32, 64, 64, 4, 6>(a, stream, err);
      if (a.D == 32) return nnc_cuda_attention_mma<T, 32, 64, 64, 4>(a, stream, err);
      if (a.D == 64) return nnc_cuda_attention_mma<T, 64, 64, 64, 4>(a, stream, err);
      return nnc_cuda_attention_mma<T, 128, 128, 128, 8>(a, stream, err);
    }
  }
  if (nnc_attn_simt_smem<64, 4, 4>(a.D, a.Dv) <= (size_t)optin)
    return nnc_cuda_attention_simt<T, 64, 4, 4>(a, (size_t)optin, stream, err);
  return nnc_cuda_attention_simt<T, 32, 4, 4>(a, (size_t)optin, stream, err);
}

#endif
