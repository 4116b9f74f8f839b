/* tests/gpu/test_reduce.cu — nnc_cuda_reduce (templates/cuda/reduce.cuh),
 * a sum, mean or max over the middle axis of [outer, len, inner], against a
 * float64 CPU reference computed from the same (rounded) inputs, for f32,
 * bf16 and f16: row reductions (inner 1), column reductions with few rows
 * (one block per 32 columns) and with many (the split over the workspace:
 * GPT-2's bias gradients and other 16-byte rows read a vector at a time,
 * odd column counts a column at a time, several outer indices), no
 * rows, a NaN that a max must return. Outputs are poisoned with NaN first
 * and each case runs twice: the bits must agree (the second time x is
 * written late by the kernel before it, gpu_test.cuh's late_copy: the early
 * launch's wait, pdl.cuh, tested). Error: max |y - ref| over
 * max |ref|; f32 1e-6, bf16 8e-3, f16 1e-3 (one rounding of the result).
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_reduce.cu -o test_reduce
 *   ./test_reduce [--small | --time]
 * --small: the cases compute-sanitizer runs; --time: the median of 20 runs of
 * the bf16 column sums of GPT-2 124M's training step (16384 rows of 768 and
 * 3072). Exits 1 on any failure. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "reduce.cuh"
#include "gpu_test.cuh"

struct rcase {
  int outer, len, inner;
  bool nan;     /* one NaN in the input (a max must return it, a sum too) */
  bool small;
};

static const rcase CASES[] = {
    {3, 17, 1, false, true},      {2, 600, 1, false, true},     {1, 16384, 768, false, false},
    {3, 1000, 77, false, true},   {2, 513, 65, false, true},    {1, 511, 64, false, true},
    {5, 9, 33, false, true},      {1, 0, 5, false, true},       {2, 700, 130, true, true},
    {1, 4096, 3072, false, false},  {2, 520, 24, false, true},
    /* short rows, a thread each: max pooling's windows (len 9, a NaN among them), the 16 at the limit */
    {100003, 9, 1, false, true},  {4099, 9, 1, true, true},     {517, 16, 1, false, true},  {3, 1, 1, false, true},
    /* short columns, a thread each: NHWC pooling's taps (len 9 over 64 channels), a NaN, 16 at the limit */
    {10007, 9, 64, false, true},  {517, 9, 3, true, true},      {7, 16, 33, false, true},
};

static std::mt19937 rng(7);
static int failures = 0;

template <typename T> static T *upload(const std::vector<T> &h) {
  T *d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)));
  if (!h.empty()) CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

static const char *op_name(nnc_reduce_op op) {
  return op == NNC_REDUCE_SUM ? "sum" : op == NNC_REDUCE_MEAN ? "mean" : "max";
}

template <typename T> static void run_case(const rcase &c, nnc_reduce_op op, const char *tname, double tol) {
  const size_t nx = (size_t)c.outer * c.len * c.inner, ny = (size_t)c.outer * c.inner;
  std::uniform_real_distribution<float> u(-1.0f, 2.0f);   /* a mean away from 0 */
  std::vector<T> hx(nx);
  for (auto &v : hx) v = h_from<T>(u(rng));
  if (c.nan && nx) hx[nx / 2] = h_from<T>(NAN);
  T *x = upload(hx), *y = nullptr;
  CK(cudaMalloc(&y, std::max<size_t>(ny, 1) * sizeof(T)));
  const size_t wsb = nnc_cuda_reduce_workspace_bytes(c.outer, c.len, c.inner);
  void *ws = nullptr;
  if (wsb) CK(cudaMalloc(&ws, wsb));
  std::vector<T> out[2];
  T *xs = nx ? upload(hx) : nullptr;   /* the late writes' source */
  for (int rep = 0; rep < 2; ++rep) {
    fill_now(y, 0xff, std::max<size_t>(ny, 1) * sizeof(T));   /* NaN in every type */
    cudaStream_t s = (cudaStream_t)0;
    if (rep == 1 && xs) {
      s = test_stream();
      CK(cudaDeviceSynchronize());
      late_copy({{x, xs, nx * sizeof(T)}}, s);
    }
    nnc_cuda_error err{};
    if (nnc_cuda_reduce(op, c.outer, c.len, c.inner, x, y, ws, wsb, s, &err) != NNC_CUDA_OK) {
      std::printf("FAIL %s %s: %s\n", tname, op_name(op), err.msg);
      ++failures;
      return;
    }
    CK(cudaDeviceSynchronize());
    out[rep].resize(ny);
    if (ny) CK(cudaMemcpy(out[rep].data(), y, ny * sizeof(T), cudaMemcpyDeviceToHost));
  }
  const bool same = std::memcmp(out[0].data(), out[1].data(), ny * sizeof(T)) == 0;
  double maxref = 0, maxerr = 0;
  bool nan_ok = true;
  for (int o = 0; o < c.outer; ++o)
    for (int i = 0; i < c.inner; ++i) {
      double r = op == NNC_REDUCE_MAX ? -INFINITY : 0.0;
      bool has_nan = false;
      for (int l = 0; l < c.len; ++l) {
        const double v = h_to(hx[((size_t)o * c.len + l) * c.inner + i]);
        has_nan = has_nan || std::isnan(v);
        r = op == NNC_REDUCE_MAX ? std::max(r, v) : r + v;
      }
      if (op == NNC_REDUCE_MEAN) r /= c.len;
      const double g = h_to(out[0][(size_t)o * c.inner + i]);
      if (has_nan) {
        nan_ok = nan_ok && std::isnan(g);
        continue;
      }
      if (std::isinf(r) || std::isnan(r)) {   /* the max or mean of no rows */
        nan_ok = nan_ok && (std::isnan(r) ? std::isnan(g) : g == r);
        continue;
      }
      maxref = std::max(maxref, std::fabs(r));
      maxerr = std::isnan(g) ? INFINITY : std::max(maxerr, std::fabs(g - r));
    }
  const double rel = maxerr / (maxref > 0 ? maxref : 1.0);
  const bool ok = rel <= tol && same && nan_ok;
  std::printf("%s %-4s %-4s outer=%-2d len=%-5d inner=%-4d%s%s  rel err %.1e%s%s\n", ok ? "PASS" : "FAIL", tname,
              op_name(op), c.outer, c.len, c.inner, wsb ? " split" : "", c.nan ? " nan" : "", rel,
              same ? "" : " (runs differ)", nan_ok ? "" : " (NaN or empty result wrong)");
  if (!ok) ++failures;
  CK(cudaFree(x));
  if (xs) CK(cudaFree(xs));
  CK(cudaFree(y));
  if (ws) CK(cudaFree(ws));
}

/* Bad arguments come back as E_ARG with a message. */
static void arg_checks() {
  float *p = nullptr;
  CK(cudaMalloc(&p, 1 << 20));
  nnc_cuda_error err{};
  const size_t need = nnc_cuda_reduce_workspace_bytes(1, 1024, 16);
  const bool small_ws = nnc_cuda_reduce(NNC_REDUCE_SUM, 1, 1024, 16, p, p, (void *)p, need - 8, (cudaStream_t)0,
                                        &err) == NNC_CUDA_E_ARG &&
                        std::strstr(err.msg, "workspace");
  const bool no_ws = nnc_cuda_reduce(NNC_REDUCE_SUM, 1, 1024, 16, p, p, nullptr, 0, (cudaStream_t)0, &err) ==
                     NNC_CUDA_E_ARG;
  const bool neg = nnc_cuda_reduce(NNC_REDUCE_SUM, -1, 4, 4, p, p, nullptr, 0, (cudaStream_t)0, &err) ==
                   NNC_CUDA_E_ARG && std::strstr(err.msg, "nnc_cuda_reduce");
  const bool zero_ws = nnc_cuda_reduce_workspace_bytes(1, 100, 768) == 0 &&
                       nnc_cuda_reduce_workspace_bytes(1, 100000, 1) == 0;
  const bool ok = small_ws && no_ws && neg && zero_ws;
  std::printf("%s argument checks (workspace too small %d, none %d, negative size %d, no workspace unsplit %d)\n",
              ok ? "PASS" : "FAIL", small_ws, no_ws, neg, zero_ws);
  if (!ok) ++failures;
  CK(cudaFree(p));
}

static void time_case(int len, int inner) {
  const size_t nx = (size_t)len * inner;
  std::vector<__nv_bfloat16> hx(nx, h_from<__nv_bfloat16>(0.5f));
  __nv_bfloat16 *x = upload(hx), *y = nullptr;
  CK(cudaMalloc(&y, (size_t)inner * sizeof *y));
  const size_t wsb = nnc_cuda_reduce_workspace_bytes(1, len, inner);
  void *ws = nullptr;
  if (wsb) CK(cudaMalloc(&ws, wsb));
  nnc_cuda_error err{};
  const double med = median_ms([&] {
    return nnc_cuda_reduce(NNC_REDUCE_SUM, 1, len, inner, x, y, ws, wsb, (cudaStream_t)0, &err) == NNC_CUDA_OK;
  });
  if (med < 0) {
    std::printf("FAIL time: %s\n", err.msg);
    ++failures;
    return;
  }
  std::printf("time bf16 column sum %d x %d: %.1f us (%.0f GB/s)\n", len, inner, med * 1e3,
              (double)nx * sizeof(__nv_bfloat16) / (med * 1e-3) * 1e-9);
  CK(cudaFree(x));
  CK(cudaFree(y));
  if (ws) CK(cudaFree(ws));
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
    time_case(16384, 768);
    time_case(16384, 3072);
    return failures ? 1 : 0;
  }
  const nnc_reduce_op ops[] = {NNC_REDUCE_SUM, NNC_REDUCE_MEAN, NNC_REDUCE_MAX};
  for (const rcase &c : CASES) {
    if (small && !c.small) continue;
    for (nnc_reduce_op op : ops) {
      run_case<float>(c, op, "f32", 1e-6);
      run_case<__nv_bfloat16>(c, op, "bf16", 8e-3);
      run_case<__half>(c, op, "f16", 1e-3);
    }
  }
  arg_checks();
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
