/* bench/gpu_rows.cu — tests and times the CUDA row kernels of
 * templates/cuda (softmax, layernorm, rmsnorm, elementwise; the
 * cross-entropy and its gradient are tested, not timed).
 *
 *   gpu_rows --test          every kernel, dtype and layout against a float64
 *                            CPU reference (rows 3, 17, 1000; odd row lengths)
 *   gpu_rows --test --small  the same on small sizes (for compute-sanitizer)
 *   gpu_rows --bench FILE    the measured copy bandwidth, then each kernel
 *                            timed with CUDA events; FILE gets one CSV line
 *                            per kernel (bench/gpu_rows.py reads it)
 *
 * Build: nvcc -O3 -arch=sm_90 -o gpu_rows bench/gpu_rows.cu
 * Exit status 0 only when every check passed and every CUDA call succeeded. */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../templates/cuda/elementwise.cuh"
#include "../templates/cuda/layernorm.cuh"
#include "../templates/cuda/softmax.cuh"

/* A failed CUDA call ends this test program: nothing after it can be trusted. */
#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(e_));                                                   \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

static std::mt19937_64 g_rng(20261123);
static int g_failures = 0, g_checks = 0;

static float uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((g_rng() >> 11) * (1.0 / 9007199254740992.0));
}

template <typename T> static float host_round(float v) {
  if constexpr (std::is_same<T, float>::value) return v;
  else if constexpr (std::is_same<T, __half>::value) return __half2float(__float2half_rn(v));
  else return __bfloat162float(__float2bfloat16_rn(v));
}
template <typename T> static T host_to(float v) {
  if constexpr (std::is_same<T, float>::value) return v;
  else if constexpr (std::is_same<T, __half>::value) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}
template <typename T> static float host_from(T v) {
  if constexpr (std::is_same<T, float>::value) return v;
  else if constexpr (std::is_same<T, __half>::value) return __half2float(v);
  else return __bfloat162float(v);
}
template <typename T> static double tolerance() { return std::is_same<T, float>::value ? 1e-5 : 1e-2; }

/* Device buffer of T with a leading offset (elements), poisoned with 0xff
 * bytes: NaN in f32, f16 and bf16 alike. */
template <typename T> struct dbuf {
  T *base = nullptr;
  size_t n = 0;
  explicit dbuf(size_t count) : n(count) {
    CK(cudaMalloc(&base, std::max<size_t>(n, 1) * sizeof(T)));
    CK(cudaMemset(base, 0xff, std::max<size_t>(n, 1) * sizeof(T)));
  }
  ~dbuf() { cudaFree(base); }
  dbuf(const dbuf &) = delete;
  dbuf &operator=(const dbuf &) = delete;
};

static bool is_poison_bits(const void *p, size_t size) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < size; ++i)
    if (b[i] != 0xff) return false;
  return true;
}

/* ----------------------------------------------------------- row kernels */

enum row_op { OP_SOFTMAX, OP_LAYERNORM, OP_RMSNORM };
static const char *op_name(row_op op) {
  return op == OP_SOFTMAX ? "softmax" : op == OP_LAYERNORM ? "layernorm" : "rmsnorm";
}

/* One layout: leading dims, element offsets of x and y from a 256-byte
 * aligned allocation (they move the 16-byte alignment), gamma's offset
 * (-1: no gamma), beta present. */
struct row_layout {
  const char *name;
  int ld_pad_x, ld_pad_y; /* ld = cols + pad */
  int xoff, yoff, goff;
  bool beta;
};

static const row_layout LAYOUTS[] = {
    {"dense", 0, 0, 0, 0, 0, true},
    {"padded+offset", 11, 11, 3, 3, 1, false}, /* same alignment: vectors with head/tail */
    {"mixed-align", 1, 2, 0, 1, -1, true},     /* different alignment: streaming kernel */
};

static void ref_row(row_op op, const float *x, int n, const float *g, const float *b, double eps,
                    double *y) {
  if (op == OP_SOFTMAX) {
    double m = -INFINITY;
    for (int j = 0; j < n; ++j) m = std::max(m, (double)x[j]);
    if (m == -INFINITY) {
      for (int j = 0; j < n; ++j) y[j] = 0.0;
      return;
    }
    double s = 0.0;
    for (int j = 0; j < n; ++j) s += y[j] = std::exp((double)x[j] - m);
    for (int j = 0; j < n; ++j) y[j] /= s;
  } else if (op == OP_LAYERNORM) {
    double mean = 0.0, var = 0.0;
    for (int j = 0; j < n; ++j) mean += x[j];
    mean /= n;
    for (int j = 0; j < n; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= n;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int j = 0; j < n; ++j) y[j] = (x[j] - mean) * rstd * (g ? g[j] : 1.0) + (b ? b[j] : 0.0);
  } else {
    double ms = 0.0;
    for (int j = 0; j < n; ++j) ms += (double)x[j] * x[j];
    const double inv = 1.0 / std::sqrt(ms / n + eps);
    for (int j = 0; j < n; ++j) y[j] = x[j] * inv * (g ? g[j] : 1.0);
  }
}

template <typename T>
static nnc_cuda_status launch_row(row_op op, int rows, int cols, const T *x, ptrdiff_t ldx,
                                  const T *g, const T *b, float eps, T *y, ptrdiff_t ldy,
                                  cudaStream_t s, nnc_cuda_error *err) {
  if (op == OP_SOFTMAX) return nnc_cuda_softmax<T>(rows, cols, x, ldx, y, ldy, s, err);
  if (op == OP_LAYERNORM) return nnc_cuda_layernorm<T>(rows, cols, x, ldx, g, b, eps, y, ldy, s, err);
  return nnc_cuda_rmsnorm<T>(rows, cols, x, ldx, g, eps, y, ldy, s, err);
}

static void report(bool ok, const std::string &what, double rel, const char *extra) {
  ++g_checks;
  if (!ok) ++g_failures;
  std::printf("%s %-58s rel %.3e %s\n", ok ? "PASS" : "FAIL", what.c_str(), rel, extra);
}

template <typename T> static void test_row_case(row_op op, int rows, int cols, const row_layout &L) {
  const ptrdiff_t ldx = cols + L.ld_pad_x, ldy = cols + L.ld_pad_y;
  const float eps = 1e-5f;
  std::vector<float> x((size_t)rows * ldx), g(cols), b(cols);
  for (size_t i = 0; i < x.size(); ++i) {
    float v = op == OP_SOFTMAX ? uniform(-6.f, 6.f) : op == OP_LAYERNORM ? 3.f + uniform(-2.f, 2.f)
                                                                         : uniform(-2.f, 2.f);
    x[i] = host_round<T>(v);
  }
  if (op == OP_SOFTMAX) {
    /* Masked entries, and row 1 masked entirely: it must give zeros. */
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j)
        if (r == 1 || uniform(0.f, 1.f) < 0.1f) x[(size_t)r * ldx + j] = -INFINITY;
  }
  for (int j = 0; j < cols; ++j) {
    g[j] = host_round<T>(uniform(0.5f, 1.5f));
    b[j] = host_round<T>(uniform(-0.5f, 0.5f));
  }
  const bool use_g = L.goff >= 0, use_b = L.beta && op == OP_LAYERNORM;
  const int goff = use_g ? L.goff : 0;

  dbuf<T> dx(L.xoff + (size_t)rows * ldx), dy(L.yoff + (size_t)rows * ldy), dg(goff + (size_t)cols),
      db((size_t)cols);
  std::vector<T> hx(x.size()), hg(cols), hb(cols);
  for (size_t i = 0; i < x.size(); ++i) hx[i] = host_to<T>(x[i]);
  for (int j = 0; j < cols; ++j) {
    hg[j] = host_to<T>(g[j]);
    hb[j] = host_to<T>(b[j]);
  }
  CK(cudaMemcpy(dx.base + L.xoff, hx.data(), hx.size() * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dg.base + goff, hg.data(), cols * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db.base, hb.data(), cols * sizeof(T), cudaMemcpyHostToDevice));

  nnc_cuda_error err{};
  const nnc_cuda_status st =
      launch_row<T>(op, rows, cols, dx.base + L.xoff, ldx, use_g ? dg.base + goff : nullptr,
                    use_b ? db.base : nullptr, eps, dy.base + L.yoff, ldy, 0, &err);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  char what[160];
  std::snprintf(what, sizeof what, "%s %s rows=%d cols=%d %s", op_name(op), nnc_dtype<T>::name, rows,
                cols, L.name);
  if (st != NNC_CUDA_OK) {
    report(false, what, NAN, err.msg);
    return;
  }
  std::vector<T> hy(dy.n);
  CK(cudaMemcpy(hy.data(), dy.base, dy.n * sizeof(T), cudaMemcpyDeviceToHost));

  std::vector<double> ref(cols);
  double e2 = 0.0, r2 = 0.0;
  bool finite = true, untouched = true;
  for (int r = 0; r < rows; ++r) {
    ref_row(op, &x[(size_t)r * ldx], cols, use_g ? g.data() : nullptr, use_b ? b.data() : nullptr,
            eps, ref.data());
    const T *yr = hy.data() + L.yoff + (size_t)r * ldy;
    for (int j = 0; j < cols; ++j) {
      const double o = host_from<T>(yr[j]);
      if (!std::isfinite(o)) finite = false;
      e2 += (o - ref[j]) * (o - ref[j]);
      r2 += ref[j] * ref[j];
    }
    /* Padding between rows must keep its poison. */
    if (!is_poison_bits(yr + cols, (size_t)(ldy - cols) * sizeof(T))) untouched = false;
  }
  if (!is_poison_bits(hy.data(), (size_t)L.yoff * sizeof(T))) untouched = false;
  const double rel = r2 > 0.0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
  const bool ok = finite && untouched && rel <= tolerance<T>();
  report(ok, what, rel, !finite ? "(non-finite output)" : !untouched ? "(wrote outside the rows)" : "");
}

/* -------------------------------------------------------- cross-entropy */

/* The mean over the rows of max + log(sum of e^(x - max)) - x[t] and its
 * gradient (softmax(x) - onehot(t)) * dloss / rows, in float64; NaN for a
 * target outside the row (the loss, and that row of the gradient). */
static double ref_ce(const std::vector<float> &x, ptrdiff_t ldx, const std::vector<int32_t> &t, int rows, int cols,
                     double dloss, std::vector<double> &g) {
  double total = 0.0;
  g.assign((size_t)rows * cols, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float *xr = &x[(size_t)r * ldx];
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < cols; ++j) m = std::max(m, (double)xr[j]);
    for (int j = 0; j < cols; ++j) s += std::exp((double)xr[j] - m);
    const bool bad = t[r] < 0 || t[r] >= cols;
    total += bad ? NAN : m + std::log(s) - xr[t[r]];
    for (int j = 0; j < cols; ++j)
      g[(size_t)r * cols + j] = bad ? NAN : (std::exp((double)xr[j] - m) / s - (j == t[r])) * dloss / rows;
  }
  return total / rows;
}

/* nnc_cuda_cross_entropy and nnc_cuda_cross_entropy_grad on one layout
 * (gamma and beta unused); bad: row rows / 2 has a target outside it. */
template <typename T> static void test_ce_case(int rows, int cols, const row_layout &L, bool bad) {
  const ptrdiff_t ldx = cols + L.ld_pad_x, ldy = cols + L.ld_pad_y;
  const float dloss = 0.75f;
  std::vector<float> x((size_t)rows * ldx);
  std::vector<int32_t> t(rows);
  for (float &v : x) v = host_round<T>(uniform(-6.f, 6.f));
  for (int r = 0; r < rows; ++r) t[r] = (int32_t)(g_rng() % (uint64_t)cols);
  if (bad) t[rows / 2] = cols;
  std::vector<T> hx(x.size());
  for (size_t i = 0; i < x.size(); ++i) hx[i] = host_to<T>(x[i]);
  dbuf<T> dx(L.xoff + x.size()), dy(L.yoff + (size_t)rows * ldy);
  dbuf<int32_t> dt(rows);
  dbuf<float> dpart(rows), dl(2);   /* dl: the loss, then d loss */
  CK(cudaMemcpy(dx.base + L.xoff, hx.data(), hx.size() * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dt.base, t.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dl.base + 1, &dloss, sizeof dloss, cudaMemcpyHostToDevice));
  nnc_cuda_error err{};
  nnc_cuda_status st = nnc_cuda_cross_entropy<T>(rows, cols, dx.base + L.xoff, ldx, dt.base, dpart.base, dl.base, 0, &err);
  if (!st)
    st = nnc_cuda_cross_entropy_grad<T>(rows, cols, dx.base + L.xoff, ldx, dt.base, dl.base + 1, dy.base + L.yoff, ldy,
                                        0, &err);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  char what[160];
  std::snprintf(what, sizeof what, "cross_entropy %s rows=%d cols=%d %s%s", nnc_dtype<T>::name, rows, cols, L.name,
                bad ? " bad target" : "");
  if (st != NNC_CUDA_OK) {
    report(false, what, NAN, err.msg);
    return;
  }
  float loss;
  std::vector<T> hy(dy.n);
  CK(cudaMemcpy(&loss, dl.base, sizeof loss, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hy.data(), dy.base, dy.n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<double> g;
  const double want = ref_ce(x, ldx, t, rows, cols, dloss, g);
  double e2 = 0.0, r2 = 0.0;
  bool nan_ok = !bad || std::isnan(loss), untouched = is_poison_bits(hy.data(), (size_t)L.yoff * sizeof(T));
  for (int r = 0; r < rows; ++r) {
    const T *yr = hy.data() + L.yoff + (size_t)r * ldy;
    for (int j = 0; j < cols; ++j) {
      const double o = host_from<T>(yr[j]), w = g[(size_t)r * cols + j];
      if (std::isnan(w)) nan_ok = nan_ok && std::isnan(o);
      else {
        e2 += std::isfinite(o) ? (o - w) * (o - w) : INFINITY;
        r2 += w * w;
      }
    }
    if (!is_poison_bits(yr + cols, (size_t)(ldy - cols) * sizeof(T))) untouched = false;
  }
  const double rel_g = r2 > 0.0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
  const double rel_l = bad ? 0.0 : std::fabs(loss - want) / std::fabs(want);
  const double rel = std::max(rel_g, rel_l);
  report(nan_ok && untouched && rel <= tolerance<T>(), what, rel,
         !nan_ok ? "(a bad target's NaN missing)" : !untouched ? "(wrote outside the rows)" : "");
}

/* ---------------------------------------------------------- elementwise */

template <typename T> static void test_ew_case(long n, int off_a, int off_b, int off_y, bool inplace) {
  std::vector<float> a(n), b(n);
  for (long i = 0; i < n; ++i) {
    a[i] = host_round<T>(uniform(-4.f, 4.f));
    b[i] = host_round<T>(uniform(-1.f, 1.f));
  }
  dbuf<T> da(off_a + (size_t)n), db(off_b + (size_t)n), dy(off_y + (size_t)n);
  std::vector<T> ha(n), hb(n);
  for (long i = 0; i < n; ++i) {
    ha[i] = host_to<T>(a[i]);
    hb[i] = host_to<T>(b[i]);
  }
  CK(cudaMemcpy(da.base + off_a, ha.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db.base + off_b, hb.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  T *out = inplace ? da.base + off_a : dy.base + off_y;
  const T *in[2] = {da.base + off_a, db.base + off_b};
  nnc_cuda_error err{};
  const nnc_cuda_status st = nnc_cuda_elementwise<T, 2>(
      n, in, out, nnc_ew_chain<nnc_ew_add, nnc_ew_gelu_tanh>{}, 0, &err);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  char what[160];
  std::snprintf(what, sizeof what, "add+gelu %s n=%ld offsets=%d,%d,%d%s", nnc_dtype<T>::name, n,
                off_a, off_b, off_y, inplace ? " in-place" : "");
  if (st != NNC_CUDA_OK) {
    report(false, what, NAN, err.msg);
    return;
  }
  std::vector<T> hy(n);
  CK(cudaMemcpy(hy.data(), out, n * sizeof(T), cudaMemcpyDeviceToHost));
  double e2 = 0.0, r2 = 0.0;
  bool finite = true;
  for (long i = 0; i < n; ++i) {
    const double s = (double)a[i] + b[i];
    const double ref = 0.5 * s * (1.0 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
    const double o = host_from<T>(hy[i]);
    if (!std::isfinite(o)) finite = false;
    e2 += (o - ref) * (o - ref);
    r2 += ref * ref;
  }
  bool untouched = true;
  if (!inplace) {
    std::vector<T> head(off_y);
    if (off_y) CK(cudaMemcpy(head.data(), dy.base, off_y * sizeof(T), cudaMemcpyDeviceToHost));
    untouched = is_poison_bits(head.data(), off_y * sizeof(T));
  }
  const double rel = r2 > 0.0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
  report(finite && untouched && rel <= tolerance<T>(), what, rel,
         !finite ? "(non-finite output)" : !untouched ? "(wrote outside)" : "");
}

/* ------------------------------------------------------ argument errors */

static void expect_status(const char *what, nnc_cuda_status got, nnc_cuda_status want,
                          const nnc_cuda_error &err) {
  const bool ok = got == want && (want == NNC_CUDA_OK || err.msg[0] != '\0');
  ++g_checks;
  if (!ok) ++g_failures;
  std::printf("%s %-58s status %d (want %d) %s\n", ok ? "PASS" : "FAIL", what, (int)got, (int)want,
              err.msg);
}

static void test_arguments() {
  dbuf<float> x(64), y(64);
  nnc_cuda_error e{};
  expect_status("negative rows", nnc_cuda_softmax<float>(-1, 4, x.base, 4, y.base, 4, 0, &e),
                NNC_CUDA_E_ARG, e);
  e = {};
  expect_status("ldx < cols", nnc_cuda_layernorm<float>(2, 8, x.base, 7, nullptr, nullptr, 1e-5f,
                                                        y.base, 8, 0, &e),
                NNC_CUDA_E_ARG, e);
  e = {};
  expect_status("NULL input", nnc_cuda_rmsnorm<float>(2, 8, nullptr, 8, nullptr, 1e-5f, y.base, 8, 0, &e),
                NNC_CUDA_E_ARG, e);
  e = {};
  expect_status("negative eps", nnc_cuda_rmsnorm<float>(2, 8, x.base, 8, nullptr, -1.f, y.base, 8, 0, &e),
                NNC_CUDA_E_ARG, e);
  e = {};
  const float *odd = reinterpret_cast<const float *>(reinterpret_cast<const char *>(x.base) + 2);
  expect_status("misaligned x", nnc_cuda_softmax<float>(2, 8, odd, 8, y.base, 8, 0, &e), NNC_CUDA_E_ARG, e);
  e = {};
  expect_status("zero rows launches nothing",
                nnc_cuda_softmax<float>(0, 8, nullptr, 8, nullptr, 8, 0, &e), NNC_CUDA_OK, e);
  e = {};
  const float *in1[1] = {nullptr};
  expect_status("elementwise NULL input",
                nnc_cuda_elementwise<float, 1>(5, in1, y.base, nnc_ew_relu{}, 0, &e), NNC_CUDA_E_ARG, e);
  CK(cudaGetLastError());
}

template <typename T> static void test_dtype(bool small) {
  const int rows_big[] = {3, 17, 1000}, rows_small[] = {3, 17};
  const int cols_all[] = {1, 17, 129, 300, 768, 1023, 2000, 4096, 8192, 20000};
  const row_op ops[] = {OP_SOFTMAX, OP_LAYERNORM, OP_RMSNORM};
  for (row_op op : ops) {
    for (int rows : small ? std::vector<int>(rows_small, rows_small + 2) : std::vector<int>(rows_big, rows_big + 3))
      for (int cols : cols_all)
        for (const row_layout &L : LAYOUTS)
          if (&L == &LAYOUTS[0] || rows <= 17) test_row_case<T>(op, rows, cols, L);
  }
  /* the cross-entropy: GPT-2's 50257 classes take the streaming kernel */
  const int ce_cols[] = {1, 10, 37, 129, 2001, 8192, 50257};
  for (int rows : small ? std::vector<int>(rows_small, rows_small + 2) : std::vector<int>(rows_big, rows_big + 3))
    for (int cols : ce_cols)
      for (const row_layout &L : LAYOUTS)
        if ((&L == &LAYOUTS[0] || rows <= 17) && (rows <= 17 || cols <= 8192)) test_ce_case<T>(rows, cols, L, false);
  test_ce_case<T>(3, 37, LAYOUTS[0], true);
  test_ce_case<T>(3, 50257, LAYOUTS[0], true);
  const long ns[] = {1, 17, 129, 1023, 100003};
  for (long n : ns) {
    test_ew_case<T>(n, 0, 0, 0, false);
    test_ew_case<T>(n, 3, 3, 3, false);
    test_ew_case<T>(n, 0, 1, 0, false);
    test_ew_case<T>(n, 1, 1, 0, true);
  }
}

/* --------------------------------------------------------------- timing */

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

/* Median of samples of ITERS back-to-back launches (fn(i) uses buffer set
 * i % sets), each sample queued behind a spin kernel so that launch cost on
 * the host stays out of the device time. */
template <class Fn> static double time_us(Fn fn, int sets) {
  const int WARM = 10, SAMPLES = 31, ITERS = 20;
  for (int i = 0; i < WARM; ++i) fn(i % sets);
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  int k = 0;
  for (int s = 0; s < SAMPLES; ++s) {
    spin_kernel<<<1, 1>>>(4000000);
    CK(cudaGetLastError());
    CK(cudaEventRecord(a));
    for (int i = 0; i < ITERS; ++i) fn(k++ % sets);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / ITERS);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  std::fprintf(stderr, "    samples us: min %.2f median %.2f max %.2f\n", t.front(), t[t.size() / 2],
               t.back());
  return t[t.size() / 2];
}

static double copy_bandwidth() {
  const size_t bytes = (size_t)1 << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int i = 0; i < 23; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) t.push_back(ms * 1e-3);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * bytes / t[t.size() / 2] / 1e12; /* TB/s, read + write */
}

template <typename T> static void fill_random(T *d, size_t n, float lo, float hi) {
  std::vector<T> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = host_to<T>(uniform(lo, hi));
  CK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
}

static const int SETS = 4; /* input/output sets rotated: 4 x 50 MB > the 50 MB L2 */

template <typename T>
static void bench_row(FILE *csv, row_op op, int rows, int cols, double copy_tbs) {
  const size_t n = (size_t)rows * cols;
  std::vector<T *> x(SETS), y(SETS);
  T *g, *b;
  for (int s = 0; s < SETS; ++s) {
    CK(cudaMalloc(&x[s], n * sizeof(T)));
    CK(cudaMalloc(&y[s], n * sizeof(T)));
    fill_random(x[s], n, -3.f, 3.f);
  }
  CK(cudaMalloc(&g, cols * sizeof(T)));
  CK(cudaMalloc(&b, cols * sizeof(T)));
  fill_random(g, cols, 0.5f, 1.5f);
  fill_random(b, cols, -0.5f, 0.5f);
  bool failed = false;
  std::fprintf(stderr, "  %s %s %dx%d\n", op_name(op), nnc_dtype<T>::name, rows, cols);
  const double us = time_us(
      [&](int s) {
        nnc_cuda_error err{};
        if (launch_row<T>(op, rows, cols, x[s], cols, g, op == OP_LAYERNORM ? b : nullptr, 1e-5f, y[s],
                          cols, 0, &err) != NNC_CUDA_OK && !failed) {
          std::fprintf(stderr, "launch failed: %s\n", err.msg);
          failed = true;
        }
      },
      SETS);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (failed) ++g_failures;
  const double bytes = 2.0 * n * sizeof(T); /* gamma/beta come from cache */
  const double floor_us = bytes / (copy_tbs * 1e12) * 1e6;
  std::fprintf(csv, "%s,%s,%d,%d,%.0f,%.3f,%.4f,%.3f\n", op_name(op), nnc_dtype<T>::name, rows, cols,
               bytes, us, bytes / (us * 1e-6) / 1e12, floor_us);
  for (int s = 0; s < SETS; ++s) {
    CK(cudaFree(x[s]));
    CK(cudaFree(y[s]));
  }
  CK(cudaFree(g));
  CK(cudaFree(b));
}

template <typename T> static void bench_ew(FILE *csv, int rows, int cols, double copy_tbs) {
  const size_t n = (size_t)rows * cols;
  std::vector<T *> a(SETS), b(SETS), y(SETS);
  for (int s = 0; s < SETS; ++s) {
    CK(cudaMalloc(&a[s], n * sizeof(T)));
    CK(cudaMalloc(&b[s], n * sizeof(T)));
    CK(cudaMalloc(&y[s], n * sizeof(T)));
    fill_random(a[s], n, -3.f, 3.f);
    fill_random(b[s], n, -1.f, 1.f);
  }
  bool failed = false;
  std::fprintf(stderr, "  add_gelu %s %dx%d\n", nnc_dtype<T>::name, rows, cols);
  const double us = time_us(
      [&](int s) {
        nnc_cuda_error err{};
        const T *in[2] = {a[s], b[s]};
        if (nnc_cuda_elementwise<T, 2>((long)n, in, y[s], nnc_ew_chain<nnc_ew_add, nnc_ew_gelu_tanh>{}, 0,
                                       &err) != NNC_CUDA_OK && !failed) {
          std::fprintf(stderr, "launch failed: %s\n", err.msg);
          failed = true;
        }
      },
      SETS);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (failed) ++g_failures;
  const double bytes = 3.0 * n * sizeof(T);
  const double floor_us = bytes / (copy_tbs * 1e12) * 1e6;
  std::fprintf(csv, "add_gelu,%s,%d,%d,%.0f,%.3f,%.4f,%.3f\n", nnc_dtype<T>::name, rows, cols, bytes, us,
               bytes / (us * 1e-6) / 1e12, floor_us);
  for (int s = 0; s < SETS; ++s) {
    CK(cudaFree(a[s]));
    CK(cudaFree(b[s]));
    CK(cudaFree(y[s]));
  }
}

static int bench(const char *path) {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  std::fprintf(stderr, "device: %s, %d SMs, L2 %d MB\n", p.name, p.multiProcessorCount,
               p.l2CacheSize >> 20);
  FILE *csv = std::fopen(path, "w");
  if (!csv) {
    std::fprintf(stderr, "cannot write %s\n", path);
    return 2;
  }
  const double copy = copy_bandwidth();
  std::fprintf(stderr, "device-to-device copy: %.3f TB/s (read + write)\n", copy);
  std::fprintf(csv, "copy,-,0,0,0,0,%.4f,0\n", copy);
  const row_op ops[] = {OP_LAYERNORM, OP_SOFTMAX, OP_RMSNORM};
  for (row_op op : ops) {
    bench_row<__nv_bfloat16>(csv, op, 32768, 768, copy);
    bench_row<__half>(csv, op, 32768, 768, copy);
    bench_row<float>(csv, op, 32768, 768, copy);
    bench_row<__nv_bfloat16>(csv, op, 4096, 8192, copy);
    bench_row<__nv_bfloat16>(csv, op, 4096, 384, copy); /* BERT MiniLM's post-norms at B=32, T=128 */
  }
  bench_ew<__nv_bfloat16>(csv, 32768, 768, copy);
  std::fclose(csv);
  return g_failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--bench") == 0) return bench(argv[2]);
  if (argc >= 2 && std::strcmp(argv[1], "--test") == 0) {
    const bool small = argc >= 3 && std::strcmp(argv[2], "--small") == 0;
    test_arguments();
    test_dtype<float>(small);
    test_dtype<__half>(small);
    test_dtype<__nv_bfloat16>(small);
    std::printf("%d of %d checks failed\n", g_failures, g_checks);
    return g_failures ? 1 : 0;
  }
  std::fprintf(stderr, "usage: %s --test [--small] | --bench FILE.csv\n", argv[0]);
  return 2;
}
