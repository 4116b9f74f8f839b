/* tests/gpu/test_transpose.cu — nnc_cuda_transpose_last2
 * (templates/cuda/transpose.cuh), y[b, c, r] = x[b, r, c], against the CPU
 * for f32, bf16 and f16 (a copy: exact) at odd and even sizes, sizes below
 * and across a tile, several batches, empty matrices, and a y offset by one
 * element (2-byte types: rows even but y not 4-byte aligned, the path of
 * single stores). Outputs are poisoned first, and the element after y's end
 * must stay poisoned.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_transpose.cu -o test_transpose
 *   ./test_transpose [--small | --time]
 * --small: the cases compute-sanitizer runs; --time: the median of 20 runs
 * of GPT-2 124M's LM-head gradient, bf16 [16384, 50257]. Exits 1 on any
 * failure. */
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "transpose.cuh"
#include "gpu_test.cuh"

struct tcase {
  long long batch;
  int rows, cols;
  bool small;
};

static const tcase CASES[] = {
    {1, 1, 1, true},      {1, 17, 13, true},   {3, 64, 64, true},    {2, 65, 33, true},   {1, 130, 97, true},
    {4, 31, 1, true},     {1, 1, 200, true},   {2, 0, 7, true},      {1, 9, 0, true},     {1, 1000, 777, false},
    {1, 2048, 50257 / 16, false},
};

static std::mt19937 rng(5);
static int failures = 0;

template <typename T> static void run_case(const tcase &c, int shift, const char *tname) {
  const size_t n = (size_t)c.batch * c.rows * c.cols;
  std::vector<T> hx(n);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (auto &v : hx) v = h_from<T>(u(rng));
  T *x = nullptr, *ybuf = nullptr;
  CK(cudaMalloc(&x, std::max<size_t>(n, 1) * sizeof(T)));
  CK(cudaMalloc(&ybuf, (n + 2) * sizeof(T)));
  if (n) CK(cudaMemcpy(x, hx.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemset(ybuf, 0xff, (n + 2) * sizeof(T)));
  T *y = ybuf + shift;
  nnc_cuda_error err{};
  if (nnc_cuda_transpose_last2(c.batch, c.rows, c.cols, x, y, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
    std::printf("FAIL %s %lldx%dx%d: %s\n", tname, c.batch, c.rows, c.cols, err.msg);
    ++failures;
    return;
  }
  CK(cudaDeviceSynchronize());
  std::vector<T> hy(n + 2);
  CK(cudaMemcpy(hy.data(), ybuf, (n + 2) * sizeof(T), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (long long b = 0; b < c.batch; b++)
    for (int r = 0; r < c.rows; r++)
      for (int col = 0; col < c.cols; col++) {
        const size_t xi = ((size_t)b * c.rows + r) * c.cols + col, yi = ((size_t)b * c.cols + col) * c.rows + r;
        bad += std::memcmp(&hx[xi], &hy[shift + yi], sizeof(T)) != 0;
      }
  unsigned char last[sizeof(T)];   /* the element after y: still poisoned */
  std::memcpy(last, &hy[shift + n], sizeof(T));
  bool tail = true;
  for (size_t i = 0; i < sizeof(T); i++) tail &= last[i] == 0xff;
  if (bad || !tail) {
    std::printf("FAIL %s %lldx%dx%d y+%d: %zu elements wrong%s\n", tname, c.batch, c.rows, c.cols, shift, bad,
                tail ? "" : ", wrote past the end");
    ++failures;
  }
  CK(cudaFree(x));
  CK(cudaFree(ybuf));
}

template <typename T> static void time_lm_head(const char *tname) {
  const int rows = 16384, cols = 50257;
  const size_t n = (size_t)rows * cols;
  T *x = nullptr, *y = nullptr;
  CK(cudaMalloc(&x, n * sizeof(T)));
  CK(cudaMalloc(&y, n * sizeof(T)));
  CK(cudaMemset(x, 0, n * sizeof(T)));
  nnc_cuda_error err{};
  const double med = median_ms([&] {
    return nnc_cuda_transpose_last2(1, rows, cols, x, y, (cudaStream_t)0, &err) == NNC_CUDA_OK;
  });
  if (med < 0) {
    std::printf("FAIL time: %s\n", err.msg);
    ++failures;
    return;
  }
  std::printf("time %s transpose %d x %d: %.3f ms (%.0f GB/s read + written)\n", tname, rows, cols, med,
              2.0 * n * sizeof(T) / (med * 1e-3) / 1e9);
  CK(cudaFree(x));
  CK(cudaFree(y));
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  const bool time = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  int count = 0, devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP no GPU\n");
    return 77;
  }
  if (time) {
    time_lm_head<__nv_bfloat16>("bf16");
    time_lm_head<float>("f32");
    return failures ? 1 : 0;
  }
  for (const tcase &c : CASES) {
    if (small && !c.small) continue;
    for (int shift = 0; shift < 2; shift++) {
      run_case<float>(c, shift, "f32");
      run_case<__nv_bfloat16>(c, shift, "bf16");
      run_case<__half>(c, shift, "f16");
      count += 3;
    }
  }
  std::printf("%s: %d cases, %d failure(s)\n", failures ? "FAIL" : "PASS", count, failures);
  return failures ? 1 : 0;
}
