/* tests/gpu/test_recurrent.cu — nnc_cuda_rnn_scan (templates/cuda/recurrent.cuh),
 * the forward LSTM and GRU scans, against a float64 CPU reference computed
 * from the same (rounded) inputs: odd sizes (B=3 T=7 H=13 and others that
 * are no multiple of a tile), several batch slices and unit groups, H up to
 * 1024, one step, no steps, forwards and backwards in time, with and
 * without h0 / c0, h_n written over h0, in f32, bf16 and f16. The reference
 * rounds h to the storage type after each step, as the kernel stores it in
 * y and reads it back, and keeps c in double. Outputs are poisoned with NaN
 * first and each case runs twice: the bits must agree. Error: max |out -
 * ref| over max(1, max |ref|) for y, h_n and c_n; f32 1e-5, bf16 1e-2, f16
 * 5e-3 (a rounding of h that falls the other way than the reference's is an
 * ulp, and the ulp of f16 at 1 is 1e-3).
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_recurrent.cu -o test_recurrent
 *   ./test_recurrent [--small | --time]
 * --small: the cases compute-sanitizer runs (no H=512 or H=1024); --time:
 * the median of 20 bf16 LSTM scans at B=64 T=256 H=512 (one layer of the
 * issue's model) and of the GRU's. Exits 1 on any failure. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "recurrent.cuh"
#include "gpu_test.cuh"

struct scase {
  int B, T, H;
  bool small;   /* run under --small too */
};

static const scase CASES[] = {
    {3, 7, 13, true},    {5, 4, 64, true},     {64, 33, 512, false}, {1, 1, 8, true},   {2, 0, 5, true},
    {40, 5, 24, true},   {33, 6, 100, true},   {8, 3, 1024, false},  {70, 9, 31, true}, {17, 12, 130, true},
};

static std::mt19937 rng(11);
static int failures = 0;

template <typename T> static T *upload(const std::vector<T> &h) {
  T *d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)));
  if (!h.empty()) CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T> static std::vector<T> download(const T *d, size_t n) {
  std::vector<T> h(n);
  if (n) CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

template <typename T> static std::vector<T> random_vec(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<T> v(n);
  for (auto &x : v) x = h_from<T>(u(rng));
  return v;
}

template <typename T> static double round_to(double v) { return h_to(h_from<T>((float)v)); }

static double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/* The scan in double: y [B, T, H], hn, cn [B, H]; h rounded to T after each step. */
template <typename T>
static void reference(const scase &c, bool gru, bool rev, const std::vector<T> &xw, const std::vector<T> &w,
                      const std::vector<T> &bias, const std::vector<T> *h0, const std::vector<T> *c0,
                      std::vector<double> &y, std::vector<double> &hn, std::vector<double> &cn) {
  const int B = c.B, TT = c.T, H = c.H, G = gru ? 3 : 4;
  y.assign((size_t)B * TT * H, 0.0);
  hn.assign((size_t)B * H, 0.0);
  cn.assign((size_t)B * H, 0.0);
  std::vector<double> h(H), cs(H), hnew(H), pre(G * H);
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < H; ++j) {
      h[j] = h0 ? h_to((*h0)[(size_t)b * H + j]) : 0.0;
      cs[j] = c0 ? h_to((*c0)[(size_t)b * H + j]) : 0.0;
    }
    for (int s = 0; s < TT; ++s) {
      const int t = rev ? TT - 1 - s : s;
      for (int r = 0; r < G * H; ++r) {
        double a = h_to(bias[r]);
        for (int k = 0; k < H; ++k) a += h_to(w[(size_t)r * H + k]) * h[k];
        pre[r] = a;
      }
      const T *x = &xw[((size_t)b * TT + t) * G * H];
      for (int j = 0; j < H; ++j) {
        double hv;
        if (!gru) {
          const double ig = sigmoid(h_to(x[j]) + pre[j]), fg = sigmoid(h_to(x[H + j]) + pre[H + j]);
          const double gg = std::tanh(h_to(x[2 * H + j]) + pre[2 * H + j]);
          const double og = sigmoid(h_to(x[3 * H + j]) + pre[3 * H + j]);
          cs[j] = fg * cs[j] + ig * gg;
          hv = og * std::tanh(cs[j]);
        } else {
          const double rg = sigmoid(h_to(x[j]) + pre[j]), zg = sigmoid(h_to(x[H + j]) + pre[H + j]);
          const double ng = std::tanh(h_to(x[2 * H + j]) + rg * pre[2 * H + j]);
          hv = (1.0 - zg) * ng + zg * h[j];
        }
        hnew[j] = round_to<T>(hv);
      }
      for (int j = 0; j < H; ++j) {
        h[j] = hnew[j];
        y[((size_t)b * TT + t) * H + j] = h[j];
      }
    }
    for (int j = 0; j < H; ++j) {
      hn[(size_t)b * H + j] = h[j];
      cn[(size_t)b * H + j] = cs[j];
    }
  }
}

/* max |got - ref| over max(1, max |ref|); a NaN (an element never written) is infinite. */
template <typename T> static double rel_err(const std::vector<T> &got, const std::vector<double> &ref) {
  double err = 0, mx = 1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = h_to(got[i]);
    mx = std::max(mx, std::fabs(ref[i]));
    err = std::isnan(g) ? INFINITY : std::max(err, std::fabs(g - ref[i]));
  }
  return err / mx;
}

/* alias: h_n is h0's buffer (written over after every block has read it); smem_limit, no_mma: the
 * fallbacks (weights that do not fit are read from global memory each step; float FMAs for bf16/f16). */
template <typename T>
static void run_case(const scase &c, bool gru, bool rev, bool init, bool alias, const char *tname, double tol,
                     int smem_limit = 0, bool no_mma = false) {
  const int B = c.B, TT = c.T, H = c.H, G = gru ? 3 : 4;
  const float ws = 1.0f / std::sqrt((float)H);
  std::vector<T> hxw = random_vec<T>((size_t)B * TT * G * H, -1.0f, 1.0f);
  std::vector<T> hw = random_vec<T>((size_t)G * H * H, -ws, ws), hb = random_vec<T>((size_t)G * H, -0.5f, 0.5f);
  std::vector<T> hh0 = random_vec<T>((size_t)B * H, -1.0f, 1.0f), hc0 = random_vec<T>((size_t)B * H, -2.0f, 2.0f);
  std::vector<double> ry, rhn, rcn;
  reference<T>(c, gru, rev, hxw, hw, hb, init ? &hh0 : nullptr, init && !gru ? &hc0 : nullptr, ry, rhn, rcn);
  T *xw = upload(hxw), *w = upload(hw), *bias = upload(hb), *h0 = upload(hh0), *c0 = upload(hc0), *y = nullptr,
    *hn = nullptr, *cn = nullptr;
  const size_t ny = std::max<size_t>((size_t)B * TT * H, 1), ns = (size_t)B * H;
  CK(cudaMalloc(&y, ny * sizeof(T)));
  CK(cudaMalloc(&hn, ns * sizeof(T)));
  CK(cudaMalloc(&cn, ns * sizeof(T)));
  nnc_cuda_rnn_args<T> a = {};
  a.B = B;
  a.T = TT;
  a.H = H;
  a.gru = gru;
  a.reverse = rev;
  a.xw = xw;
  a.w = w;
  a.bias = bias;
  a.h0 = init ? h0 : nullptr;
  a.c0 = init && !gru ? c0 : nullptr;
  a.y = y;
  a.hn = alias ? h0 : hn;
  a.cn = gru ? nullptr : cn;
  a.smem_limit = smem_limit;
  a.no_mma = no_mma;
  std::vector<T> out[2][3];
  bool launched = true;
  for (int rep = 0; rep < 2 && launched; ++rep) {
    if (alias) CK(cudaMemcpy(h0, hh0.data(), ns * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemset(y, 0xff, ny * sizeof(T)));   /* NaN in every type */
    if (!alias) CK(cudaMemset(hn, 0xff, ns * sizeof(T)));
    CK(cudaMemset(cn, 0xff, ns * sizeof(T)));
    nnc_cuda_error err{};
    if (nnc_cuda_rnn_scan(a, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
      std::printf("FAIL %s %s B=%d T=%d H=%d: %s\n", tname, gru ? "gru" : "lstm", B, TT, H, err.msg);
      launched = false;
      break;
    }
    CK(cudaDeviceSynchronize());
    out[rep][0] = download(y, (size_t)B * TT * H);
    out[rep][1] = download(a.hn, ns);
    out[rep][2] = download(cn, ns);
  }
  if (launched) {
    bool same = true;
    for (int i = 0; i < 3; ++i)
      same = same && std::memcmp(out[0][i].data(), out[1][i].data(), out[0][i].size() * sizeof(T)) == 0;
    const double ey = rel_err(out[0][0], ry), eh = rel_err(out[0][1], rhn), ec = gru ? 0.0 : rel_err(out[0][2], rcn);
    const bool ok = ey <= tol && eh <= tol && ec <= tol && same;
    char how[64] = "";
    if (smem_limit) std::snprintf(how, sizeof how, " (shared memory <= %d)", smem_limit);
    std::printf("%s %-4s %-4s B=%-2d T=%-2d H=%-4d %-8s%s%s%s%s  rel err y %.1e h_n %.1e c_n %.1e%s\n",
                ok ? "PASS" : "FAIL", tname, gru ? "gru" : "lstm", B, TT, H, rev ? "backward" : "forward",
                init ? " h0" : "", alias ? " (h_n over h0)" : "", how, no_mma ? " (float path)" : "", ey, eh, ec,
                same ? "" : " (runs differ)");
    if (!ok) ++failures;
  } else {
    ++failures;
  }
  for (T *p : {xw, w, bias, h0, c0, y, hn, cn}) CK(cudaFree(p));
}

template <typename T> static void run_all(const char *tname, double tol, bool small) {
  for (const scase &c : CASES) {
    if (small && !c.small) continue;
    for (int gru = 0; gru < 2; ++gru)
      for (int rev = 0; rev < 2; ++rev)
        for (int init = 0; init < 2; ++init) run_case<T>(c, gru, rev, init, false, tname, tol);
  }
  run_case<T>({4, 1, 40, true}, false, false, true, true, tname, tol);
  run_case<T>({4, 3, 40, true}, true, true, true, true, tname, tol);
  for (int gru = 0; gru < 2; ++gru) {
    run_case<T>({33, 6, 100, true}, gru, gru, true, false, tname, tol, 16384, false);
    if (sizeof(T) == 2) {
      run_case<T>({33, 6, 100, true}, gru, !gru, true, false, tname, tol, 0, true);
      run_case<T>({3, 7, 13, true}, gru, gru, false, false, tname, tol, 16384, true);
    }
  }
}

/* Bad arguments come back as E_ARG with a message; no rows launch nothing. */
static void arg_checks() {
  nnc_cuda_error err{};
  nnc_cuda_rnn_args<float> a = {};
  a.B = -1;
  a.T = 3;
  a.H = 4;
  const bool neg = nnc_cuda_rnn_scan(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG && std::strstr(err.msg, "B=-1");
  a.B = 2;
  const bool null = nnc_cuda_rnn_scan(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG && std::strstr(err.msg, "NULL");
  a.B = 0;
  const bool empty = nnc_cuda_rnn_scan(a, (cudaStream_t)0, &err) == NNC_CUDA_OK;
  const bool ok = neg && null && empty;
  std::printf("%s argument checks (negative size %d, NULL pointers %d, no rows %d)\n", ok ? "PASS" : "FAIL", neg, null,
              empty);
  if (!ok) ++failures;
}

/* One layer of the issue's model: bf16, B=64 T=256 H=512. */
static void time_case(bool gru) {
  const int B = 64, TT = 256, H = 512, G = gru ? 3 : 4;
  typedef __nv_bfloat16 T;
  T *xw = upload(random_vec<T>((size_t)B * TT * G * H, -1.0f, 1.0f));
  T *w = upload(random_vec<T>((size_t)G * H * H, -0.04f, 0.04f));
  T *bias = upload(random_vec<T>((size_t)G * H, -0.5f, 0.5f));
  T *y = nullptr, *hn = nullptr, *cn = nullptr;
  CK(cudaMalloc(&y, (size_t)B * TT * H * sizeof(T)));
  CK(cudaMalloc(&hn, (size_t)B * H * sizeof(T)));
  CK(cudaMalloc(&cn, (size_t)B * H * sizeof(T)));
  nnc_cuda_rnn_args<T> a = {};
  a.B = B;
  a.T = TT;
  a.H = H;
  a.gru = gru;
  a.xw = xw;
  a.w = w;
  a.bias = bias;
  a.y = y;
  a.hn = hn;
  a.cn = gru ? nullptr : cn;
  nnc_cuda_error err{};
  const double med = median_ms([&] { return nnc_cuda_rnn_scan(a, (cudaStream_t)0, &err) == NNC_CUDA_OK; });
  if (med < 0) {
    std::printf("FAIL time: %s\n", err.msg);
    ++failures;
  } else {
    const double flop = 2.0 * B * TT * G * H * (double)H;
    std::printf("time bf16 %s scan B=%d T=%d H=%d: %.3f ms (%.2f us a step, %.1f TFLOP/s)\n", gru ? "GRU" : "LSTM",
                B, TT, H, med, med * 1e3 / TT, flop / (med * 1e-3) * 1e-12);
  }
  for (T *p : {xw, w, bias, y, hn, cn}) CK(cudaFree(p));
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  const bool timing = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP no GPU\n");
    return 77;
  }
  if (timing) {
    time_case(false);
    time_case(true);
    return failures ? 1 : 0;
  }
  run_all<float>("f32", 1e-5, small);
  run_all<__nv_bfloat16>("bf16", 1e-2, small);
  run_all<__half>("f16", 5e-3, small);
  arg_checks();
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
