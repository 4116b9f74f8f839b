/* bench/gpu_attn_bert.cu — BERT MiniLM's attention as the model runs it
 * (B=32, 12 heads of 32, T=128, bf16): q, k and v read in place from the
 * q|k|v GEMM's [B, T, 1152] output, the output written into [B, T, 384],
 * and the padding mask [B, T] (bf16, the last keys of every third sequence
 * masked), so every tile takes the per-element mask. Times the mma.sync
 * kernel's tile shapes and occupancy bounds against the default dispatch.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A \
 *        -Itemplates/cuda bench/gpu_attn_bert.cu -o gpu_attn_bert && ./gpu_attn_bert
 *
 * Timing: bench/gpu_timing.cuh's median_us, cold (input sets rotated
 * through more than 128 MB so that L2 holds none between its uses) and
 * warm (one set: in the model q|k|v comes from L2, just written). Each
 * variant's output is compared with the default's (max |difference|);
 * tests/gpu/test_attention.cu is the correctness test. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "attention.cuh"
#include "gpu_timing.cuh"


using bf16 = __nv_bfloat16;
using launcher = std::function<nnc_cuda_status(const nnc_cuda_attn_args<bf16> &, cudaStream_t, nnc_cuda_error *)>;

constexpr int B = 32, H = 12, T = 128, D = 32, C = H * D;

struct set {
  bf16 *qkv, *out, *mask;
};

static nnc_cuda_attn_args<bf16> args_for(const set &s) {
  nnc_cuda_attn_args<bf16> a{};
  a.batch = B, a.heads = H, a.T = T, a.S = T, a.D = D, a.Dv = D;
  a.q = s.qkv, a.q_sb = 3LL * C * T, a.q_sh = D, a.q_st = 3 * C;
  a.k = s.qkv + C, a.k_sb = 3LL * C * T, a.k_sh = D, a.k_st = 3 * C;
  a.v = s.qkv + 2 * C, a.v_sb = 3LL * C * T, a.v_sh = D, a.v_st = 3 * C;
  a.out = s.out, a.o_sb = (long long)C * T, a.o_sh = D, a.o_st = C;
  a.scale = 1.0f / std::sqrt((float)D);
  a.mask = s.mask, a.mask_sb = T;
  return a;
}

static void call(const launcher &f, const nnc_cuda_attn_args<bf16> &a) {
  nnc_cuda_error err{};
  if (f(a, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
    std::printf("launch failed: %s\n", err.msg);
    std::exit(1);
  }
}

static double time_us(const std::vector<set> &sets, const launcher &f) {
  return median_us([&](int k) { call(f, args_for(sets[k % sets.size()])); });
}

static double compare(const set &s, const launcher &f, const launcher &g) {
  const size_t n = (size_t)B * T * C;
  std::vector<bf16> x(n), y(n);
  call(f, args_for(s));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(x.data(), s.out, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  CK(cudaMemset(s.out, 0xff, n * sizeof(bf16)));
  call(g, args_for(s));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(y.data(), s.out, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs((double)__bfloat162float(x[i]) - (double)__bfloat162float(y[i]));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

template <int BQ, int BK, int W, int MINB> static launcher mma() {
  return [](const nnc_cuda_attn_args<bf16> &a, cudaStream_t s, nnc_cuda_error *e) {
    return nnc_cuda_attention_mma<bf16, D, BQ, BK, W, MINB>(a, s, e);
  };
}

int main() {
  const size_t qkv = (size_t)B * T * 3 * C, out = (size_t)B * T * C;
  const size_t set_bytes = (qkv + out + (size_t)B * T) * sizeof(bf16);
  const int nsets = (int)std::max<size_t>(2, (128u << 20) / set_bytes + 1);
  std::mt19937 r(7);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  std::vector<bf16> hq(qkv), hm((size_t)B * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) hm[(size_t)b * T + t] = (bf16)(b % 3 == 0 && t >= T - 37 ? 0.0f : 1.0f);
  std::vector<set> sets(nsets);
  for (auto &s : sets) {
    for (auto &x : hq) x = (bf16)u(r);
    CK(cudaMalloc(&s.qkv, qkv * sizeof(bf16)));
    CK(cudaMalloc(&s.out, out * sizeof(bf16)));
    CK(cudaMalloc(&s.mask, (size_t)B * T * sizeof(bf16)));
    CK(cudaMemcpy(s.qkv, hq.data(), qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s.mask, hm.data(), hm.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  }
  const launcher dflt = [](const nnc_cuda_attn_args<bf16> &a, cudaStream_t s, nnc_cuda_error *e) {
    return nnc_cuda_attention(a, s, e);
  };
  const std::vector<std::pair<const char *, launcher>> vs = {
      {"default", dflt},
      {"bq64_bk64_w4_m4", mma<64, 64, 4, 4>()},
      {"bq64_bk64_w4_m6", mma<64, 64, 4, 6>()},
      {"bq64_bk64_w4_m8", mma<64, 64, 4, 8>()},
      {"bq64_bk128_w4_m4", mma<64, 128, 4, 4>()},
      {"bq64_bk128_w4_m6", mma<64, 128, 4, 6>()},
      {"bq32_bk64_w2_m8", mma<32, 64, 2, 8>()},
      {"bq32_bk128_w2_m8", mma<32, 128, 2, 8>()},
      {"bq32_bk128_w2_m12", mma<32, 128, 2, 12>()},
      {"bq128_bk128_w8_m2", mma<128, 128, 8, 2>()},
      {"bq128_bk128_w8_m3", mma<128, 128, 8, 3>()},
      {"default_again", dflt},
  };
  const double bytes = (double)(qkv + out) * sizeof(bf16);
  std::printf("BERT attention B=%d H=%d T=%d D=%d, q|k|v in place, padding mask; %d sets\n", B, H, T, D, nsets);
  /* warm: one input set, as in the model, where q|k|v was just written by its GEMM and sits in L2 */
  const std::vector<set> warm(sets.begin(), sets.begin() + 1);
  std::printf("%-22s %9s %9s %9s %10s\n", "variant", "cold us", "GB/s", "warm us", "maxdiff");
  for (const auto &v : vs) {
    const double us = time_us(sets, v.second), wus = time_us(warm, v.second);
    std::printf("%-22s %9.2f %9.0f %9.2f %10.3g\n", v.first, us, bytes / us * 1e-3, wus,
                compare(sets[0], dflt, v.second));
  }
  for (auto &s : sets) {
    CK(cudaFree(s.qkv));
    CK(cudaFree(s.out));
    CK(cudaFree(s.mask));
  }
  return 0;
}
