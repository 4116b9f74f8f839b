/* tests/gpu/test_map.cu — the epilogue loop nnc_map (templates/cuda/loops.cuh)
 * on the grid nnc_map_blocks gives (a thread a 16-byte vector), and the
 * erf-form GELU of 16-bit models, nnc_gelu_erf16 (nnc_cuda.cuh):
 *
 * - nnc_gelu_erf16 at every bf16 value and at 2^20 random floats in
 *   [-12, 12], against 0.5 x (1 + erf(x / sqrt 2)) in float64: |error| <=
 *   3e-7 max(1, |x|) (its approximation's bound is 2.1e-7 in GELU); inf ->
 *   inf, -inf and NaN -> NaN as the float64 formula gives.
 * - nnc_map with y = f(y, x) over bf16 and f32 at sizes 0, 1, 7, 8, 9, 4097
 *   and 1000003 (a tail past the last vector), with y and x 16-byte aligned
 *   and with x one element off (the element-at-a-time path), with y alone,
 *   with y not read (aligned and not), and on a grid of 3 blocks (a thread
 *   takes NNC_UNROLL vectors a step, as past nnc_map_blocks's cap); outputs
 *   compared bit for bit with the host's f(y, x) in float rounded once to
 *   the type (the map computes in f32, so they must agree). y and x are
 *   written late by the kernel before the map, which is launched early as
 *   the models launch it (pdl.cuh): its wait is tested.
 * - nnc_gelu_erf16 for x in [-5, 0) also relative to GELU: 2e-3 (bf16's
 *   half ulp; 1.6e-3 at -5), so small negative results are not merely near 0.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_map.cu -o test_map && ./test_map
 * Exits 1 on any failure. */
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test.cuh"
#include "loops.cuh"

static int failures = 0;

__global__ void gelu_kernel(float *y, const float *x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = nnc_gelu_erf16(x[i]);
}

static double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

static void check_gelu() {
  std::vector<float> x;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t bits = b << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-12.0f, 12.0f);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(u(rng));
  const int n = (int)x.size();
  float *dx, *dy;
  CK(cudaMalloc(&dx, n * sizeof(float)));
  CK(cudaMalloc(&dy, n * sizeof(float)));
  CK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemset(dy, 0xff, n * sizeof(float))); /* NaN */
  gelu_kernel<<<(n + 255) / 256, 256>>>(dy, dx, n);
  CK(cudaGetLastError());
  std::vector<float> y(n);
  CK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0;
  float worst_x = 0;
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const double want = gelu_ref(x[i]);
    bool ok;
    if (std::isnan(want)) ok = std::isnan(y[i]);
    else if (std::isinf(want)) ok = y[i] == want;
    else {
      /* flush-to-zero: a subnormal x may give 0 */
      const double err = std::fabs((double)y[i] - want) / std::max(1.0, std::fabs((double)x[i]));
      ok = err <= 3e-7 || (std::fabs(x[i]) < 1.2e-38f && y[i] == 0.0f);
      if (ok && x[i] >= -5.0f && x[i] < -1e-30f) ok = std::fabs((double)y[i] - want) <= 2e-3 * std::fabs(want);
      if (ok && err > worst) worst = err, worst_x = x[i];
    }
    if (!ok && bad++ < 5) std::printf("  gelu(%.9g): got %.9g, want %.9g\n", x[i], y[i], want);
  }
  std::printf("%-44s %s (max error %.3g at %.6g, %d values)\n", "nnc_gelu_erf16", bad ? "FAIL" : "ok", worst, worst_x, n);
  failures += bad != 0;
  CK(cudaFree(dx));
  CK(cudaFree(dy));
}

struct fma_fn {
  __host__ __device__ float operator()(float v, float w) const { return v * 0.5f + w; } /* exact products: FMA or not alike */
};

template <typename T, bool READ_Y> __global__ void map_kernel(T *y, const T *x, long long n) {
  nnc_map<READ_Y>(y, x, n, fma_fn());
}

/* blocks: the grid (0: nnc_map_blocks's) */
template <typename T>
static void check_map(const char *tname, long long n, bool x_off, bool with_x, bool read_y, unsigned blocks = 0) {
  std::mt19937 rng((unsigned)n + 5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<T> hy(n + 1), hx(n + 2);
  for (auto &v : hy) v = h_from<T>(u(rng));
  for (auto &v : hx) v = h_from<T>(u(rng));
  T *dy, *dx;
  CK(cudaMalloc(&dy, (n + 1) * sizeof(T)));
  CK(cudaMalloc(&dx, (n + 2) * sizeof(T)));
  CK(cudaMemcpy(dy, hy.data(), (n + 1) * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, hx.data(), (n + 2) * sizeof(T), cudaMemcpyHostToDevice));
  const T *xs = with_x ? dx + (x_off ? 1 : 0) : nullptr;
  const unsigned grid = blocks ? blocks : nnc_map_blocks<T>(n);
  /* y and x written late by the kernel before (gpu_test.cuh's late_copy),
   * the map launched early after it as the models launch it: its wait
   * (pdl.cuh) is what keeps it from reading the zeros there first */
  T *sy, *sx;
  CK(cudaMalloc(&sy, (n + 1) * sizeof(T)));
  CK(cudaMalloc(&sx, (n + 2) * sizeof(T)));
  CK(cudaMemcpy(sy, dy, (n + 1) * sizeof(T), cudaMemcpyDeviceToDevice));
  CK(cudaMemcpy(sx, dx, (n + 2) * sizeof(T), cudaMemcpyDeviceToDevice));
  CK(cudaDeviceSynchronize()); /* the copies above do not wait for the host; late_copy's zeros must come after */
  late_copy({{dy, sy, (n + 1) * sizeof(T)}, {dx, sx, (n + 2) * sizeof(T)}});
  if (read_y) nnc_pdl::launch(map_kernel<T, true>, grid, NNC_LOOP_THREADS, 0, test_stream(), dy, xs, n);
  else nnc_pdl::launch(map_kernel<T, false>, grid, NNC_LOOP_THREADS, 0, test_stream(), dy, xs, n);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(test_stream()));
  CK(cudaFree(sy));
  CK(cudaFree(sx));
  std::vector<T> got(n + 1);
  CK(cudaMemcpy(got.data(), dy, (n + 1) * sizeof(T), cudaMemcpyDeviceToHost));
  long long bad = 0;
  for (long long e = 0; e <= n; ++e) {
    /* element n lies past the map: untouched */
    T want = hy[e];
    if (e < n) {
      const float v = read_y ? (float)h_to(hy[e]) : 0.0f, w = with_x ? (float)h_to(hx[e + (x_off ? 1 : 0)]) : 0.0f;
      want = h_from<T>(fma_fn()(v, w));
    }
    if (std::memcmp(&got[e], &want, sizeof(T)) != 0 && bad++ < 3)
      std::printf("  element %lld: got %g, want %g\n", e, h_to(got[e]), h_to(want));
  }
  char name[96];
  std::snprintf(name, sizeof name, "nnc_map %s n=%lld%s%s%s", tname, n, with_x ? (x_off ? " x+1" : " x") : "",
                read_y ? "" : " (y not read)", blocks ? " (3 blocks)" : "");
  std::printf("%-44s %s\n", name, bad ? "FAIL" : "ok");
  failures += bad != 0;
  CK(cudaFree(dy));
  CK(cudaFree(dx));
}

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  check_gelu();
  for (long long n : {0LL, 1LL, 7LL, 8LL, 9LL, 4097LL, 1000003LL}) {
    check_map<__nv_bfloat16>("bf16", n, false, true, true);
    check_map<__nv_bfloat16>("bf16", n, true, true, true);
    check_map<__nv_bfloat16>("bf16", n, false, false, true);
    check_map<float>("f32", n, false, true, true);
    check_map<float>("f32", n, true, true, false);
    check_map<__nv_bfloat16>("bf16", n, false, true, false);
    check_map<__nv_bfloat16>("bf16", n, false, true, true, 3);
  }
  std::printf(failures ? "FAILED: %d\n" : "ALL PASSED\n", failures);
  return failures ? 1 : 0;
}
