/* bench/gpu_attention.cu — times nnc_cuda_attention (templates/cuda/attention.cuh)
 * in bf16 on the shapes of bench/gpu_attention.py, and the tensor-core kernel
 * with other tile shapes (variants) on the main shapes; then f32 data on the
 * SIMT path, on the tensor cores with three tf32 products a product (f32
 * accuracy) and with one (a.tf32) for the D = 32 and 64 shapes.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda bench/gpu_attention.cu -o gpu_attention
 *   ./gpu_attention OURS.csv
 *
 * Timing: CUDA events around 20 back-to-back calls, after 10 warm-up calls,
 * median of 31 samples, rotating input sets (q, k, v, out) whose total is
 * over 128 MB so that L2 (50 MB) holds no set between its uses. Flops:
 * 4 * B * H * T * S * D, halved when causal (T == S). Each variant's output
 * is compared with the default's (max |difference|, printed) as a sanity
 * check; tests/gpu/test_attention.cu is the correctness test.
 * CSV: kind (case|variant), name, B, H, T, S, D, causal, us, TFLOP/s, maxdiff. */
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
template <typename E>
using launcher_of = std::function<nnc_cuda_status(const nnc_cuda_attn_args<E> &, cudaStream_t, nnc_cuda_error *)>;
using launcher = launcher_of<bf16>;

struct shape {
  const char *name;
  int B, H, T, D, causal;
};

static const shape SHAPES[] = {
    {"causal_b8_h12_t1024_d64", 8, 12, 1024, 64, 1},
    {"bert_minilm_b32_h12_t128_d32", 32, 12, 128, 32, 0},
    {"gpt2_b1_h12_t1024_d64_causal", 1, 12, 1024, 64, 1},
    {"causal_b4_h16_t2048_d128", 4, 16, 2048, 128, 1},
};

template <typename E> struct sets_of {
  int n;
  std::vector<E *> q, k, v, o;
  size_t elems;
};

template <typename E> static void random_fill(E *d, size_t n, unsigned seed) {
  std::vector<E> h(n);
  std::mt19937 r(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (auto &x : h) x = (E)u(r);
  CK(cudaMemcpy(d, h.data(), n * sizeof(E), cudaMemcpyHostToDevice));
}

template <typename E> static sets_of<E> make_sets(const shape &s) {
  sets_of<E> st{};
  st.elems = (size_t)s.B * s.H * s.T * s.D;
  const size_t set_bytes = 4 * st.elems * sizeof(E);
  st.n = (int)std::min<size_t>(16, std::max<size_t>(2, (128u << 20) / set_bytes + 1));
  for (int i = 0; i < st.n; ++i) {
    E *p[4];
    for (int t = 0; t < 4; ++t) {
      CK(cudaMalloc(&p[t], st.elems * sizeof(E)));
      if (t < 3) random_fill(p[t], st.elems, 1000u * i + t);
    }
    st.q.push_back(p[0]), st.k.push_back(p[1]), st.v.push_back(p[2]), st.o.push_back(p[3]);
  }
  return st;
}

template <typename E> static void free_sets(sets_of<E> &st) {
  for (int i = 0; i < st.n; ++i) {
    CK(cudaFree(st.q[i]));
    CK(cudaFree(st.k[i]));
    CK(cudaFree(st.v[i]));
    CK(cudaFree(st.o[i]));
  }
}

template <typename E> static nnc_cuda_attn_args<E> args_for(const shape &s, const sets_of<E> &st, int i, int tf32 = 0) {
  nnc_cuda_attn_args<E> a{};
  a.batch = s.B, a.heads = s.H, a.T = s.T, a.S = s.T, a.D = s.D, a.Dv = s.D;
  const long long st_ = s.D, sh = (long long)s.T * s.D, sb = (long long)s.H * sh;
  a.q = st.q[i], a.q_sb = sb, a.q_sh = sh, a.q_st = st_;
  a.k = st.k[i], a.k_sb = sb, a.k_sh = sh, a.k_st = st_;
  a.v = st.v[i], a.v_sb = sb, a.v_sh = sh, a.v_st = st_;
  a.out = st.o[i], a.o_sb = sb, a.o_sh = sh, a.o_st = st_;
  a.scale = 1.0f / std::sqrt((float)s.D);
  a.causal = s.causal;
  a.mask = nullptr;
  a.tf32 = tf32;
  return a;
}

template <typename E> static void call(const launcher_of<E> &f, const nnc_cuda_attn_args<E> &a) {
  nnc_cuda_error err{};
  if (f(a, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
    std::printf("launch failed: %s\n", err.msg);
    std::exit(1);
  }
}

template <typename E>
static double time_us(const shape &s, const sets_of<E> &st, const launcher_of<E> &f, int tf32 = 0) {
  return median_us([&](int k) { call(f, args_for(s, st, k % st.n, tf32)); });
}

static double flops(const shape &s) {
  const double f = 4.0 * s.B * s.H * (double)s.T * s.T * s.D;
  return s.causal ? f / 2 : f;
}

/* max |a - b| over the outputs of set 0 after running f and then g. */
static double compare(const shape &s, const sets_of<bf16> &st, const launcher &f, const launcher &g) {
  std::vector<bf16> x(st.elems), y(st.elems);
  call(f, args_for(s, st, 0));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(x.data(), st.o[0], st.elems * sizeof(bf16), cudaMemcpyDeviceToHost));
  CK(cudaMemset(st.o[0], 0xff, st.elems * sizeof(bf16)));
  call(g, args_for(s, st, 0));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(y.data(), st.o[0], st.elems * sizeof(bf16), cudaMemcpyDeviceToHost));
  double m = 0;
  for (size_t i = 0; i < st.elems; ++i) {
    const double d = std::fabs((double)__bfloat162float(x[i]) - (double)__bfloat162float(y[i]));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

template <int D, int BQ, int BK, int W, int MINB = 1> static launcher mma() {
  return [](const nnc_cuda_attn_args<bf16> &a, cudaStream_t s, nnc_cuda_error *e) {
    return nnc_cuda_attention_mma<bf16, D, BQ, BK, W, MINB>(a, s, e);
  };
}

#ifdef NNC_CUDA_SM90A
template <int D, int BK, int NWG, int STAGES, int MINB, int SCHED = (NWG == 1 ? 0 : 1)> static launcher wgmma() {
  return [](const nnc_cuda_attn_args<bf16> &a, cudaStream_t s, nnc_cuda_error *e) {
    return nnc_cuda_attention_wgmma<bf16, D, BK, NWG, STAGES, MINB, SCHED>(a, s, e);
  };
}
#endif

/* mma.sync: tiles BQ x BK, W warps, at least MINB blocks an SM ("_m<MINB>");
 * wgmma (sm_90a builds, whose default at D = 64 is BK = 64, one warpgroup,
 * two stages, three blocks an SM; BK = 128 and two blocks an SM on grids
 * under one wave of four; at D = 128 BK = 128, two warpgroups each on its
 * own (SCHED 1), one block an SM): BK keys a tile, NWG warpgroups of 64
 * queries, STAGES buffers of K tiles ("_s<STAGES>"), SCHED the sharing of
 * the buffers ("_x<SCHED>" where not the launcher's default, which is 0
 * for one warpgroup and 1 for more: 0 a block barrier a tile, 1 the
 * warpgroups apart, 2 apart and taking turns); "_again": the default
 * timed a second time (the spread within a run). */
static std::vector<std::pair<const char *, launcher>> variants(int D) {
  if (D == 32)
    return {{"mma_bq128_bk64_w4", mma<32, 128, 64, 4>()},
            {"mma_bq128_bk128_w8", mma<32, 128, 128, 8>()}};
  if (D == 64)
    return {{"mma_bq64_bk64_w4", mma<64, 64, 64, 4>()},
            {"mma_bq64_bk128_w4", mma<64, 64, 128, 4>()},
            {"mma_bq128_bk128_w8", mma<64, 128, 128, 8>()},
#ifdef NNC_CUDA_SM90A
            {"wgmma_bk64_wg1_s2_m4", wgmma<64, 64, 1, 2, 4>()},
            {"wgmma_bk64_wg1_s3_m3", wgmma<64, 64, 1, 3, 3>()},
            {"wgmma_bk128_wg1_s2_m2", wgmma<64, 128, 1, 2, 2>()},
            {"wgmma_bk64_wg2_s2_m2_x2", wgmma<64, 64, 2, 2, 2, 2>()},
#endif
    };
  return {{"mma_bq128_bk128_w8", mma<128, 128, 128, 8>()},
#ifdef NNC_CUDA_SM90A
          {"wgmma_bk128_wg2_s2_m1_x2", wgmma<128, 128, 2, 2, 1, 2>()},
          {"wgmma_bk128_wg2_s2_m1_x0", wgmma<128, 128, 2, 2, 1, 0>()},
          {"wgmma_bk64_wg2_s2_m1", wgmma<128, 64, 2, 2, 1>()},
          {"wgmma_bk64_wg2_s4_m1", wgmma<128, 64, 2, 4, 1>()},
          {"wgmma_bk64_wg1_s2_m2", wgmma<128, 64, 1, 2, 2>()},
          {"wgmma_bk64_wg3_s3_m1", wgmma<128, 64, 3, 3, 1>()},
          {"wgmma_bk128_wg2_s2_m1_again", wgmma<128, 128, 2, 2, 1>()},
#endif
  };
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::printf("usage: %s OURS.csv\n", argv[0]);
    return 2;
  }
  FILE *csv = std::fopen(argv[1], "w");
  if (!csv) {
    std::printf("cannot write %s\n", argv[1]);
    return 1;
  }
  const launcher dflt = [](const nnc_cuda_attn_args<bf16> &a, cudaStream_t s, nnc_cuda_error *e) {
    return nnc_cuda_attention(a, s, e);
  };
  for (const shape &s : SHAPES) {
    sets_of<bf16> st = make_sets<bf16>(s);
    const double us = time_us(s, st, dflt);
    std::printf("case    %-30s %-20s %9.2f us %7.1f TFLOP/s (%d input sets)\n", s.name, "default", us,
                flops(s) / us * 1e-6, st.n);
    std::fprintf(csv, "case,%s,%d,%d,%d,%d,%d,%d,%.3f,%.2f,0\n", s.name, s.B, s.H, s.T, s.T, s.D, s.causal, us,
                 flops(s) / us * 1e-6);
    for (auto &v : variants(s.D)) {
      const double diff = compare(s, st, dflt, v.second);
      const double vus = time_us(s, st, v.second);
      std::printf("variant %-30s %-20s %9.2f us %7.1f TFLOP/s  max|diff vs default| %.3g\n", s.name, v.first, vus,
                  flops(s) / vus * 1e-6, diff);
      std::fprintf(csv, "variant,%s/%s,%d,%d,%d,%d,%d,%d,%.3f,%.2f,%.3g\n", s.name, v.first, s.B, s.H, s.T, s.T,
                   s.D, s.causal, vus, flops(s) / vus * 1e-6, diff);
    }
    free_sets(st);
  }
  /* f32 data: the SIMT path, the f32 tensor-core path (three tf32 products
   * each) and the tf32 one (--precision=tf32) */
  const launcher_of<float> dispatch = [](const nnc_cuda_attn_args<float> &a, cudaStream_t s, nnc_cuda_error *e) {
    return nnc_cuda_attention(a, s, e);
  };
  const launcher_of<float> simt = [](const nnc_cuda_attn_args<float> &a, cudaStream_t s, nnc_cuda_error *e) {
    return nnc_cuda_attention_simt<float, 64, 4, 4>(a, 227u << 10, s, e);
  };
  const struct {
    const char *name;
    const launcher_of<float> *f;
    int tf32;
  } paths[] = {{"f32_simt", &simt, 0}, {"f32_3xtf32_mma", &dispatch, 0}, {"f32_tf32_mma", &dispatch, 1}};
  for (const shape &s : SHAPES) {
    if (s.D == 128) continue;
    sets_of<float> st = make_sets<float>(s);
    for (const auto &p : paths) {
      const double us = time_us(s, st, *p.f, p.tf32);
      std::printf("f32     %-30s %-20s %9.2f us %7.1f TFLOP/s\n", s.name, p.name, us, flops(s) / us * 1e-6);
      std::fprintf(csv, "variant,%s/%s,%d,%d,%d,%d,%d,%d,%.3f,%.2f,0\n", s.name, p.name, s.B, s.H, s.T, s.T, s.D,
                   s.causal, us, flops(s) / us * 1e-6);
    }
    free_sets(st);
  }
  std::fclose(csv);
  return 0;
}
