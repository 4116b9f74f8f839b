/* templates/cuda/attention_bwd.cuh — the backward of scaled dot-product
 * attention (attention.cuh) for training: flash attention 2's backward, the
 * T x S matrices never reach memory.
 *
 * For each batch b and head h, with the forward's out and its row
 * log-sum-exp lse (nnc_cuda_attn_args::lse) and dout the loss's gradient
 * w.r.t. out (f32 accumulation throughout):
 *   P_ij = exp(scale * q_i.k_j - lse_i), 0 where key j is masked for query i
 *   (causal: j > i + (S - T); padding: mask[b*mask_sb + j] == 0);
 *   delta_i = dout_i.out_i;  dS_ij = P_ij (dout_i.v_j - delta_i);
 *   dv_j = sum_i P_ij dout_i;  dk_j = scale sum_i dS_ij q_i;
 *   dq_i = scale sum_j dS_ij k_j.
 * Element (b,h,i,c) of each tensor is at ptr + b*X_sb + h*X_sh + i*X_st + c
 * (last dim contiguous, strides in elements); q, k, v may broadcast (stride
 * 0), dq, dk, dv may not. dq, dk, dv are overwritten; keys no query sees
 * get dk = dv = 0, queries with every key masked dq = 0. delta is a
 * workspace of nnc_cuda_attention_bwd_workspace_bytes(batch, heads, T).
 *
 *   nnc_cuda_status nnc_cuda_attention_bwd<E>(const nnc_cuda_attn_bwd_args<E> &a,
 *                                             cudaStream_t stream, nnc_cuda_error *err);
 * E: float, __nv_bfloat16, __half. Returns NNC_CUDA_E_ARG (nothing
 * launched) for a negative size, a NULL or misaligned pointer, a zero batch
 * or head stride of a nonempty dq, dk or dv over more than one batch or
 * head, or batch
 * / heads over 65535; NNC_CUDA_E_LAUNCH when the runtime refuses. Nothing
 * to do (batch or heads 0, T and S 0) launches nothing; T == 0 or S == 0
 * writes zeros to dk, dv or dq. Never synchronizes.
 *
 * Deterministic: three kernels in stream order, every output element summed
 * by one thread in one order (no atomics): delta (a warp a row), then
 * dK/dV (a block per key tile walking the query tiles) and dQ (a block per
 * query tile walking the key tiles), which both read delta and lse.
 *
 * Dispatch:
 * - tensor cores (attention_bwd_mma.cuh) when E is bf16 or f16, scale > 0,
 *   D == Dv is 32, 64 or 128, q, k, v, dout, dq, dk, dv and their strides
 *   are 16-byte aligned, and the GPU is sm_80 or newer. Tiles: 4 warps a
 *   block, each 16 rows (dQ: BQ = 64 queries, dK/dV: 64 keys); dQ walks
 *   tiles of BK keys, dK/dV tiles of BQ queries: BK = 64, BQ = 32 for
 *   D = 64 (168 and 167 registers), BK = BQ = 32 for D = 128 (168 and 255
 *   registers with 8 bytes spilled: dK and dV alone hold 128), BK = BQ = 64
 *   for D = 32. bf16 causal on an H100 (session 8, bench of the variants):
 *   B=16 H=12 T=1024 D=64 470 us (137 TFLOP/s; BQ = 64: 480, BK = 128:
 *   533, 8 warps: 626), B=4 H=16 T=2048 D=128 1029 us (167 TFLOP/s; BQ = 16,
 *   no spill: 1199; 8 warps: 1197);
 * - otherwise the SIMT path (attention_bwd_simt.cuh; f32 data, tf32 unused),
 *   any D and Dv whose tiles fit in shared memory (D + Dv up to about 1300
 *   on sm_90): 4 warps of 4 rows, tiles of 32. */
#ifndef NNC_CUDA_ATTENTION_BWD_CUH
#define NNC_CUDA_ATTENTION_BWD_CUH

#include <algorithm>
#include <type_traits>

#include "attention.cuh"

template <typename E> struct nnc_cuda_attn_bwd_args {
  int batch, heads, T, S, D, Dv;
  const E *q;    long long q_sb, q_sh, q_st;
  const E *k;    long long k_sb, k_sh, k_st;
  const E *v;    long long v_sb, v_sh, v_st;
  const E *out;  long long o_sb, o_sh, o_st;     /* the forward's output */
  const E *dout; long long do_sb, do_sh, do_st;  /* gradient of the loss w.r.t. out */
  const float *lse;                               /* [batch, heads, T] from the forward, contiguous */
  E *dq;         long long dq_sb, dq_sh, dq_st;
  E *dk;         long long dk_sb, dk_sh, dk_st;
  E *dv;         long long dv_sb, dv_sh, dv_st;
  float scale;
  int causal;
  const E *mask; long long mask_sb;               /* may be NULL; same meaning as the forward */
  float *delta;                                   /* workspace: batch*heads*T floats */
  int tf32;                                       /* E = float: products may use tf32 */
};

#include "attention_bwd_mma.cuh"
#include "attention_bwd_simt.cuh"

/* Bytes the caller gives in delta. */
inline size_t nnc_cuda_attention_bwd_workspace_bytes(int batch, int heads, int T) {
  if (batch <= 0 || heads <= 0 || T <= 0) return 0;
  return (size_t)batch * (size_t)heads * (size_t)T * sizeof(float);
}

/* delta_i = dout_i . out_i, a warp a row (lanes over the columns, then a
 * shuffle tree: one order); 8 warps a block, the grid strides over rows. */
template <typename E> __global__ void __launch_bounds__(256) nnc_attn_bwd_delta_kernel(const nnc_cuda_attn_bwd_args<E> a) {
  const long long rows = (long long)a.batch * a.heads * a.T;
  const int lane = threadIdx.x % 32;
  for (long long r = (long long)blockIdx.x * 8 + threadIdx.x / 32; r < rows; r += (long long)gridDim.x * 8) {
    const int i = (int)(r % a.T);
    const long long bh = r / a.T;
    const int h = (int)(bh % a.heads), b = (int)(bh / a.heads);
    const E *o = a.out + b * a.o_sb + h * a.o_sh + i * a.o_st;
    const E *d = a.dout + b * a.do_sb + h * a.do_sh + i * a.do_st;
    float t = 0.0f;
    for (int c = lane; c < a.Dv; c += 32) t = fmaf(nnc_dtype<E>::load(d[c]), nnc_dtype<E>::load(o[c]), t);
    t = nnc_warp_reduce<nnc_sum_op, 32>(t);
    if (lane == 0) a.delta[r] = t;
  }
}

namespace nnc_attn_bwd {

constexpr const char *KERNEL = "nnc_cuda_attention_bwd";

/* Whether every q/k/v/dout/dq/dk/dv stride keeps rows 16-byte aligned. */
template <typename E> bool strides16(const nnc_cuda_attn_bwd_args<E> &a) {
  const long long s[21] = {a.q_sb,  a.q_sh,  a.q_st,  a.k_sb,  a.k_sh,  a.k_st,  a.v_sb,
                           a.v_sh,  a.v_st,  a.do_sb, a.do_sh, a.do_st, a.dq_sb, a.dq_sh,
                           a.dq_st, a.dk_sb, a.dk_sh, a.dk_st, a.dv_sb, a.dv_sh, a.dv_st};
  for (long long x : s)
    if (x * (long long)sizeof(E) % 16 != 0) return false;
  return true;
}

/* The three launches for a given pair of dK/dV and dQ kernels (grids of
 * bkv keys and bq queries a block); the dK/dV kernel runs alone when T is
 * 0 (zeros), the dQ kernel alone when S is 0. */
template <typename E, typename KV, typename Q>
nnc_cuda_status launch(const nnc_cuda_attn_bwd_args<E> &a, KV dkv, size_t dkv_smem, int bkv, int kv_threads, Q dq,
                       size_t dq_smem, int bq, int q_threads, cudaStream_t stream, nnc_cuda_error *err) {
  nnc_cuda_status st = nnc_attn::allow_smem(dkv, dkv_smem, err);
  if (st == NNC_CUDA_OK) st = nnc_attn::allow_smem(dq, dq_smem, err);
  if (st != NNC_CUDA_OK) return st;
  if (a.T > 0 && a.S > 0) {
    const long long rows = (long long)a.batch * a.heads * a.T;
    const unsigned blocks = (unsigned)std::min<long long>((rows + 7) / 8, 1LL << 20);
    nnc_attn_bwd_delta_kernel<E><<<blocks, 256, 0, stream>>>(a);
    if ((st = nnc_cuda_check_launch(err, KERNEL)) != NNC_CUDA_OK) return st;
  }
  if (a.S > 0) {
    const dim3 grid((unsigned)(a.heads * a.batch), (unsigned)((a.S + bkv - 1) / bkv));
    dkv<<<grid, kv_threads, dkv_smem, stream>>>(a);
    if ((st = nnc_cuda_check_launch(err, KERNEL)) != NNC_CUDA_OK) return st;
  }
  if (a.T > 0) {
    dq<<<nnc_attn::grid_of(a.T, bq, a.heads, a.batch), q_threads, dq_smem, stream>>>(a);
    if ((st = nnc_cuda_check_launch(err, KERNEL)) != NNC_CUDA_OK) return st;
  }
  return NNC_CUDA_OK;
}

}  // namespace nnc_attn_bwd

/* The tensor-core kernels with the tiles given (the arguments must satisfy
 * the mma conditions above and D == this D): dQ with BK keys a tile, dK/dV
 * with BQ queries a tile, WARPS warps each. */
template <typename E, int D, int BK, int BQ, int WARPS>
nnc_cuda_status nnc_cuda_attention_bwd_mma(const nnc_cuda_attn_bwd_args<E> &a, cudaStream_t stream,
                                           nnc_cuda_error *err) {
  return nnc_attn_bwd::launch(a, nnc_attn_bwd_dkv_kernel<E, D, BQ, WARPS>,
                              nnc_attn_bwd_dkv_smem<E, D, 16 * WARPS, BQ>(), 16 * WARPS, WARPS * 32,
                              nnc_attn_bwd_dq_kernel<E, D, BK, WARPS>, nnc_attn_bwd_dq_smem<E, D, 16 * WARPS, BK>(),
                              16 * WARPS, WARPS * 32, stream, err);
}

/* The SIMT kernels; E_ARG when their shared memory exceeds max_smem bytes. */
template <typename E, int WARPS, int RPW>
nnc_cuda_status nnc_cuda_attention_bwd_simt(const nnc_cuda_attn_bwd_args<E> &a, size_t max_smem,
                                            cudaStream_t stream, nnc_cuda_error *err) {
  const size_t dq_smem = nnc_attn_bwd_simt_dq_smem<WARPS, RPW>(a.D, a.Dv);
  const size_t dkv_smem = nnc_attn_bwd_simt_dkv_smem<WARPS, RPW>(a.D, a.Dv);
  if (std::max(dq_smem, dkv_smem) > max_smem)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, nnc_attn_bwd::KERNEL,
                         "expected D + Dv small enough for the tiles in %zu bytes of shared memory, found "
                         "D = %d, Dv = %d (%zu bytes)",
                         max_smem, a.D, a.Dv, std::max(dq_smem, dkv_smem));
  return nnc_attn_bwd::launch(a, nnc_attn_bwd_simt_dkv_kernel<E, WARPS, RPW>, dkv_smem, WARPS * RPW, WARPS * 32,
                              nnc_attn_bwd_simt_dq_kernel<E, WARPS, RPW>, dq_smem, WARPS * RPW, WARPS * 32, stream,
                              err);
}

/* Whether nnc_cuda_attention_bwd takes the tensor-core path for these
 * arguments on a GPU of compute capability major cc_major. */
template <typename E> bool nnc_cuda_attention_bwd_uses_mma(const nnc_cuda_attn_bwd_args<E> &a, int cc_major) {
  using nnc_attn::aligned16;
  return !std::is_same<E, float>::value && cc_major >= 8 && a.scale > 0.0f && a.D == a.Dv &&
         (a.D == 32 || a.D == 64 || a.D == 128) && aligned16(a.q) && aligned16(a.k) && aligned16(a.v) &&
         aligned16(a.dout) && aligned16(a.dq) && aligned16(a.dk) && aligned16(a.dv) && nnc_attn_bwd::strides16(a);
}

template <typename E>
nnc_cuda_status nnc_cuda_attention_bwd(const nnc_cuda_attn_bwd_args<E> &a, cudaStream_t stream,
                                       nnc_cuda_error *err) {
  using nnc_attn_bwd::KERNEL;
  if (a.batch < 0 || a.heads < 0 || a.T < 0 || a.S < 0 || a.D < 0 || a.Dv < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected sizes >= 0, found batch %d, heads %d, T %d, S %d, D %d, Dv %d", a.batch,
                         a.heads, a.T, a.S, a.D, a.Dv);
  if (a.batch > 65535 || a.heads > 65535)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected batch and heads <= 65535, found %d and %d",
                         a.batch, a.heads);
  /* the grids: heads x batch blocks in x, tiles of 16 queries or keys or more in y */
  if ((long long)a.batch * a.heads > 0x7fffffffLL || a.T > 65535 * 16 || a.S > 65535 * 16)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected batch * heads < 2^31 and T, S <= %d, found batch %d, heads %d, T %d, S %d",
                         65535 * 16, a.batch, a.heads, a.T, a.S);
  if (a.batch == 0 || a.heads == 0 || (a.T == 0 && a.S == 0)) return NNC_CUDA_OK;
  const struct {
    const void *p;
    const char *name;
    size_t align;
  } ptrs[10] = {{a.q, "q", sizeof(E)},      {a.k, "k", sizeof(E)},       {a.v, "v", sizeof(E)},
                {a.out, "out", sizeof(E)},  {a.dout, "dout", sizeof(E)}, {a.lse, "lse", sizeof(float)},
                {a.dq, "dq", sizeof(E)},    {a.dk, "dk", sizeof(E)},     {a.dv, "dv", sizeof(E)},
                {a.delta, "delta", sizeof(float)}};
  for (const auto &x : ptrs) {
    if (!x.p) return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected a device pointer for %s, found NULL", x.name);
    if (reinterpret_cast<uintptr_t>(x.p) % x.align != 0)
      return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected %s aligned to %zu bytes, found %p", x.name,
                           x.align, x.p);
  }
  if (a.mask && reinterpret_cast<uintptr_t>(a.mask) % sizeof(E) != 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL, "expected mask aligned to %zu bytes, found %p", sizeof(E),
                         (const void *)a.mask);
  /* a broadcast gradient would have several blocks write one row (an empty
   * one, dq when T is 0, dk and dv when S is 0, may have any strides) */
  const auto shared = [&](long long sb, long long sh, int rows) {
    return rows > 0 && ((a.batch > 1 && sb == 0) || (a.heads > 1 && sh == 0));
  };
  const bool bcast = shared(a.dq_sb, a.dq_sh, a.T) || shared(a.dk_sb, a.dk_sh, a.S) || shared(a.dv_sb, a.dv_sh, a.S);
  if (bcast)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, KERNEL,
                         "expected dq, dk, dv with nonzero batch and head strides (they are written), found "
                         "%lld/%lld (dq), %lld/%lld (dk), %lld/%lld (dv) for batch %d, heads %d",
                         a.dq_sb, a.dq_sh, a.dk_sb, a.dk_sh, a.dv_sb, a.dv_sh, a.batch, a.heads);

  int dev = 0, cc = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, KERNEL, "querying the device failed: %s (%s)", cudaGetErrorString(e),
                         cudaGetErrorName(e));

  if constexpr (!std::is_same<E, float>::value)
    if (nnc_cuda_attention_bwd_uses_mma(a, cc)) {
      if (a.D == 32) return nnc_cuda_attention_bwd_mma<E, 32, 64, 64, 4>(a, stream, err);
      if (a.D == 64) return nnc_cuda_attention_bwd_mma<E, 64, 64, 32, 4>(a, stream, err);
      return nnc_cuda_attention_bwd_mma<E, 128, 32, 32, 4>(a, stream, err);
    }
  return nnc_cuda_attention_bwd_simt<E, 4, 4>(a, (size_t)optin, stream, err);
}

#endif
