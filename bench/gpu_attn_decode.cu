/* bench/gpu_attn_decode.cu — the decode attention (templates/cuda/
 * attention_decode.cuh) at GPT-2's decode shape: B rows of one query each,
 * 12 heads of 64, S cached keys in a cache of ctx rows [B, 12, ctx, 64]
 * bf16, a padding mask [B, S] of ones, causal. Times, in one process:
 * - the kernel of a thread a key (nnc_attn_decode_kernel, the baseline);
 * - what nnc_cuda_attention launches for the three calls a model makes:
 *   plain (the cache holds every key), append (k_new / v_new: the new row
 *   from the projection, written into the cache by the kernel, GPT-2's
 *   decode step) and rope (rope_q / rope_k on top: LLaMA's);
 * - unless built with -DGAD_LAUNCHER_ONLY (a build against older
 *   templates), the groups kernel's variants: warps a block (NW), keys in
 *   flight a group (U), L2 prefetch distance in trips (PF), and each row
 *   split over a cluster of P blocks; and the reads alone, without the
 *   math (gad_read_kernel): the cache as the kernel reads it, and the same
 *   bytes as one range a block (session 37: 27.9 and 26.3 us at B=64
 *   S=544, against 30.3 for the plain call), and the reads from 16 to 132
 *   SMs (gad_read_sms_kernel: 81% of the copy rate from 64, 88% from 132);
 * checks that they agree, and prints the cache bytes read a call over the
 * time (GB/s) and as a % of the device-to-device copy rate (read + write)
 * measured here. Median of SAMPLES of ITERS back-to-back launches / ITERS;
 * the caches rotate over enough copies (> 400 MB) that they come from
 * memory. Correctness against float64: tests/gpu/test_attention.cu.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda -o gpu_attn_decode bench/gpu_attn_decode.cu
 *   ./gpu_attn_decode [B] [S]      (64 544) */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "attention.cuh"
#include "gpu_timing.cuh"


typedef __nv_bfloat16 bf16;

#ifndef GAD_LAUNCHER_ONLY
/* Reads without the math: what the attention's reads cost alone, as an xor of the words (kept from dead
 * code elimination by a store that never happens). */

/* K and V of row (b, h) as the groups kernel reads them (two streams of S rows), by NT threads, U 16-byte
 * pieces of each a trip. */
template <int NT, int U>
__device__ __forceinline__ unsigned read_row(const nnc_cuda_attn_args<bf16> &a, int row, unsigned long long pol) {
  const int h = row % a.heads, b = row / a.heads, n = a.S * 8; /* 16-byte pieces of S rows */
  const uint4 *kc = reinterpret_cast<const uint4 *>(a.k + b * a.k_sb + h * a.k_sh);
  const uint4 *vc = reinterpret_cast<const uint4 *>(a.v + b * a.v_sb + h * a.v_sh);
  unsigned x = 0;
  for (int i = threadIdx.x; i < n; i += NT * U) {
    uint4 r[2 * U];
#pragma unroll
    for (int u = 0; u < U; u++)
      if (i + u * NT < n) r[2 * u] = nnc_attn::load_stream(kc + i + u * NT, pol), r[2 * u + 1] = nnc_attn::load_stream(vc + i + u * NT, pol);
      else r[2 * u] = r[2 * u + 1] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 2 * U; u++) x ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  return x;
}

/* Block r reads row r (ROWS), or the same bytes as one contiguous range a block of a linear buffer. */
template <bool ROWS, int U>
__global__ void __launch_bounds__(128) gad_read_kernel(const nnc_cuda_attn_args<bf16> a, const uint4 *lin, float *sink) {
  const int row = blockIdx.x;
  const unsigned long long pol = nnc_attn::evict_first_policy();
  unsigned x = 0;
  if (ROWS) {
    x = read_row<128, U>(a, row, pol);
  } else {
    const long long n = 2LL * a.S * 8, lo = (long long)row * n;
    for (long long i = threadIdx.x; i < n; i += 128 * 2 * U) {
      uint4 r[2 * U];
#pragma unroll
      for (int u = 0; u < 2 * U; u++)
        r[u] = i + u * 128 < n ? nnc_attn::load_stream(lin + lo + i + u * 128, pol) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < 2 * U; u++) x ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
    }
  }
  if (x == 0x12345678u) sink[row] = 1.0f;
}

/* The rows' reads from a grid of one block an SM (the launch's dynamic shared memory, never used, keeps a
 * second block out) that walks the rows: how many SMs the cache's stream needs (a whole-step kernel would
 * give the rest to GEMMs). */
template <int U>
__global__ void __launch_bounds__(1024) gad_read_sms_kernel(const nnc_cuda_attn_args<bf16> a, float *sink) {
  const unsigned long long pol = nnc_attn::evict_first_policy();
  unsigned x = 0;
  for (int row = blockIdx.x; row < a.batch * a.heads; row += gridDim.x) x ^= read_row<1024, U>(a, row, pol);
  if (x == 0x12345678u) sink[blockIdx.x] = 1.0f;
}

#endif
static const int SAMPLES = 15, ITERS = 20, H = 12, D = 64;

/* median_us (gpu_timing.cuh) with this bench's 5 warm-up calls and SAMPLES of ITERS */
template <class F> static double time_us(F f) { return median_us<5, SAMPLES, ITERS>(f); }


static std::vector<float> fetch(const bf16 *d, size_t n) {
  std::vector<bf16> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

/* max |x - y| / max |x| (NaN in y: infinite). */
static double rel_diff(const std::vector<float> &x, const std::vector<float> &y) {
  double d = 0, r = 0;
  for (size_t i = 0; i < x.size(); ++i)
    d = std::max(d, std::isnan(y[i]) ? INFINITY : std::fabs((double)x[i] - y[i])), r = std::max(r, std::fabs((double)x[i]));
  return d / r;
}

struct bench {
  double bytes = 0, bw = 0;
  int failed = 0;
  void row(const char *name, double us) const {
    std::printf("| %s | %.1f us | %.0f GB/s | %.0f%% of copy |\n", name, us, bytes / us / 1e3, 100 * bytes / us / 1e3 / (bw / 1e9));
  }
  void agree(const char *what, double r) {
    const bool ok = r < 1e-2;
    failed += !ok;
    std::printf("%s %s: max |diff| / max |out| %.3g\n", ok ? "PASS" : "FAIL", what, r);
  }
};

int main(int argc, char **argv) {
  const int B = argc > 1 ? std::atoi(argv[1]) : 64, S = argc > 2 ? std::atoi(argv[2]) : 544, ctx = S + 96;
  const size_t cache = (size_t)B * H * ctx * D, rowsz = (size_t)B * H * D;
  const int copies = std::max(2, (int)(400e6 / (2.0 * cache * 2)) + 1);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16> h(cache);
  for (auto &x : h) x = __float2bfloat16_rn(u(rng));
  std::vector<bf16 *> ks(copies), vs(copies);
  for (int c = 0; c < copies; ++c) {
    CK(cudaMalloc(&ks[c], cache * 2));
    CK(cudaMalloc(&vs[c], cache * 2));
    CK(cudaMemcpy(ks[c], h.data(), cache * 2, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < cache; ++i) h[i] = __float2bfloat16_rn(u(rng));
    CK(cudaMemcpy(vs[c], h.data(), cache * 2, cudaMemcpyHostToDevice));
  }
  /* q and the new k and v rows: [B, 12, 1, 64] each, as a projection's outputs are in GPT-2 (apart) */
  std::vector<bf16> hq(3 * rowsz), hm((size_t)B * S, __float2bfloat16_rn(1.0f));
  for (auto &x : hq) x = __float2bfloat16_rn(u(rng));
  std::vector<int> hpos(B, S - 1);
  bf16 *q, *mask, *o1, *o2, *o3;
  int *pos;
  CK(cudaMalloc(&q, hq.size() * 2));
  CK(cudaMalloc(&mask, hm.size() * 2));
  CK(cudaMalloc(&pos, B * sizeof(int)));
  for (bf16 **o : {&o1, &o2, &o3}) CK(cudaMalloc(o, rowsz * 2));
  CK(cudaMemcpy(q, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(mask, hm.data(), hm.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pos, hpos.data(), B * sizeof(int), cudaMemcpyHostToDevice));
  nnc_cuda_attn_args<bf16> a = {};
  a.batch = B, a.heads = H, a.T = 1, a.S = S, a.D = D, a.Dv = D;
  a.q = q, a.q_sb = H * D, a.q_sh = D, a.q_st = D;
  a.k_sb = a.v_sb = (long long)H * ctx * D, a.k_sh = a.v_sh = (long long)ctx * D, a.k_st = a.v_st = D;
  a.o_sb = H * D, a.o_sh = D, a.o_st = D;
  a.scale = 0.125f, a.causal = 1, a.mask = mask, a.mask_sb = S;
  nnc_cuda_attn_args<bf16> ap = a, ar = a; /* append; append and rope */
  ap.k_new = ar.k_new = q + rowsz, ap.v_new = ar.v_new = q + 2 * rowsz;
  ap.kn_sb = ap.vn_sb = ar.kn_sb = ar.vn_sb = H * D, ap.kn_sh = ap.vn_sh = ar.kn_sh = ar.vn_sh = D;
  ap.kn_st = ap.vn_st = ar.kn_st = ar.vn_st = D;
  ar.rope_pos = pos, ar.rope_pos_sb = 1, ar.rope_base = 10000.0, ar.rope_dims = D, ar.rope_q = ar.rope_k = 1;
  const unsigned rows = (unsigned)(B * H);
  bench bn;
  /* the launcher's call: 0 plain, 1 append, 2 append + rope; on cache copy i */
  auto launch = [&](int which, int i, bf16 *o) {
    nnc_cuda_attn_args<bf16> x = which == 0 ? a : which == 1 ? ap : ar;
    x.k = ks[i % copies], x.v = vs[i % copies], x.out = o;
    nnc_cuda_error err;
    if (nnc_cuda_attention(x, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
      std::fprintf(stderr, "nnc_cuda_attention: %s\n", err.msg);
      std::exit(2);
    }
  };
  auto thread_a_key = [&](int i, bf16 *o) {
    nnc_cuda_attn_args<bf16> x = a;
    x.k = ks[i % copies], x.v = vs[i % copies], x.out = o;
    nnc_attn_decode_kernel<bf16, 64, 4><<<rows, 128>>>(x);
  };
  /* plain on copy 0 and the thread-a-key kernel agree; the append writes copy 1's row S - 1, after which
   * the plain call over copy 1 sees the same keys */
  thread_a_key(0, o1), launch(0, 0, o2);
  CK(cudaDeviceSynchronize());
  const std::vector<float> plain0 = fetch(o2, rowsz);
  bn.agree("launcher (plain) vs thread-a-key kernel", rel_diff(fetch(o1, rowsz), plain0));
  launch(1, 1, o1), launch(0, 1, o2);
  CK(cudaDeviceSynchronize());
  bn.agree("launcher append vs plain over the appended cache", rel_diff(fetch(o2, rowsz), fetch(o1, rowsz)));
  launch(2, 1, o3);
  CK(cudaDeviceSynchronize());
  const std::vector<float> r3 = fetch(o3, rowsz);
  bool finite = true;
  for (float x : r3) finite = finite && std::isfinite(x);
  bn.failed += !finite;
  std::printf("%s launcher rope: every output finite\n", finite ? "PASS" : "FAIL");

  void *x, *y;
  const size_t cb = 256u << 20;
  CK(cudaMalloc(&x, cb));
  CK(cudaMalloc(&y, cb));
  const double copy_us = time_us([&](int) { CK(cudaMemcpyAsync(y, x, cb, cudaMemcpyDeviceToDevice)); });
  bn.bw = 2.0 * cb / (copy_us * 1e-6);
  bn.bytes = 2.0 * B * H * S * D * 2; /* k and v rows read */
  std::printf("B=%d S=%d: cache bytes read %.1f MB, copy %.0f GB/s, floor %.2f us\n", B, S, bn.bytes / 1e6, bn.bw / 1e9,
              bn.bytes / bn.bw * 1e6);
  std::printf("| kernel | time | cache GB/s | %% of copy |\n|---|---|---|---|\n");
  bn.row("thread a key (nnc_attn_decode_kernel)", time_us([&](int i) { thread_a_key(i, o1); }));
  const char *calls[3] = {"nnc_cuda_attention, plain", "nnc_cuda_attention, append (GPT-2's step)",
                          "nnc_cuda_attention, append + rope (LLaMA's)"};
  for (int which = 0; which < 3; ++which) bn.row(calls[which], time_us([&](int i) { launch(which, i, o1); }));
#ifndef GAD_LAUNCHER_ONLY
  /* the groups kernel's variants over the plain call: each checked against the launcher's output over
   * copy 0 now (the timed appends above wrote row S - 1 of every copy) */
  launch(0, 0, o2);
  CK(cudaDeviceSynchronize());
  const std::vector<float> ref0 = fetch(o2, rowsz);
  auto variant = [&](const char *name, auto go) {
    go(0, o3);
    CK(cudaDeviceSynchronize());
    const double r = rel_diff(ref0, fetch(o3, rowsz));
    char what[160];
    std::snprintf(what, sizeof what, "%s vs launcher", name);
    if (r >= 1e-2) bn.agree(what, r);
    bn.row(name, time_us([&](int i) { go(i, o3); }));
  };
  auto on_copy = [&](int i, bf16 *o) {
    nnc_cuda_attn_args<bf16> x = a;
    x.k = ks[i % copies], x.v = vs[i % copies], x.out = o;
    return x;
  };
#define GAD_V(NW, U, PF)                                                                        \
  variant("groups NW=" #NW " U=" #U " PF=" #PF, [&](int i, bf16 *o) {                             \
    nnc_attn_decode_groups_kernel<bf16, 64, NW, U, false, PF><<<rows, NW * 32>>>(on_copy(i, o)); \
  })
  GAD_V(4, 4, 0);
  GAD_V(4, 4, 1);
  GAD_V(4, 4, 2);
  GAD_V(4, 2, 0);
  GAD_V(8, 4, 0);
  GAD_V(8, 4, 1);
  GAD_V(16, 2, 0);
  GAD_V(16, 2, 1);
  GAD_V(16, 2, 2);
#undef GAD_V
  /* each row's keys over a cluster of P blocks (what the launcher takes for few rows on sm_90a) */
#define GAD_SPLIT(NW, U, P)                                                                           \
  variant("split NW=" #NW " U=" #U " P=" #P, [&](int i, bf16 *o) {                                  \
    nnc_cuda_error err;                                                                               \
    if (nnc_attn::decode_split<bf16, NW, U, false>(on_copy(i, o), rows, P, (cudaStream_t)0, &err))   \
      std::fprintf(stderr, "split: %s\n", err.msg), std::exit(2);                                     \
  })
  GAD_SPLIT(4, 4, 2);
  GAD_SPLIT(4, 4, 4);
  GAD_SPLIT(4, 4, 8);
  GAD_SPLIT(8, 4, 2);
  GAD_SPLIT(8, 4, 4);
#undef GAD_SPLIT
  {
    uint4 *lin;
    float *sink;
    const size_t lb = (size_t)rows * 2 * S * 128;
    CK(cudaMalloc(&lin, lb * copies));
    CK(cudaMemset(lin, 0, lb * copies));
    CK(cudaMalloc(&sink, rows * sizeof(float)));
    const int hold = 160 << 10;
    CK(cudaFuncSetAttribute(gad_read_sms_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, hold));
    CK(cudaFuncSetAttribute(gad_read_sms_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, hold));
    for (int sms : {16, 32, 48, 64, 80, 96, 112, 132})
      for (int u : {2, 4}) {
        char n[80];
        std::snprintf(n, sizeof n, "reads only, %d SMs of 32 warps, U=%d", sms, u);
        bn.row(n, time_us([&](int i) {
          if (u == 2) gad_read_sms_kernel<2><<<sms, 1024, hold>>>(on_copy(i, o3), sink);
          else gad_read_sms_kernel<4><<<sms, 1024, hold>>>(on_copy(i, o3), sink);
        }));
      }
    for (int u : {2, 4}) {
      char n1[80], n2[80];
      std::snprintf(n1, sizeof n1, "reads only, %u streams (K and V apart), U=%d", 2 * rows, u);
      std::snprintf(n2, sizeof n2, "reads only, %u ranges (one a block), U=%d", rows, u);
      bn.row(n1, time_us([&](int i) {
        if (u == 2) gad_read_kernel<true, 2><<<rows, 128>>>(on_copy(i, o3), nullptr, sink);
        else gad_read_kernel<true, 4><<<rows, 128>>>(on_copy(i, o3), nullptr, sink);
      }));
      bn.row(n2, time_us([&](int i) {
        const uint4 *l = lin + (size_t)(i % copies) * (lb / 16);
        if (u == 2) gad_read_kernel<false, 2><<<rows, 128>>>(a, l, sink);
        else gad_read_kernel<false, 4><<<rows, 128>>>(a, l, sink);
      }));
    }
  }
#endif
  return bn.failed ? 1 : 0;
}
