/* tests/gpu/test_norm_bwd.cu — nnc_cuda_norm_bwd (templates/cuda/norm_bwd.cuh),
 * the backward of layernorm and rmsnorm, against a float64 CPU reference
 * computed from the same (rounded) inputs, for f32, bf16 and f16: no rows,
 * odd widths (the generic path), GPT-2's 768 (the register path), wide rows
 * (groups of several warps, and 50257 through the generic path), padded
 * rows, dx written over dy; both norms, gamma or not, dbeta or not. Outputs
 * are poisoned with NaN first; dgamma and dbeta are passed even where they
 * must not be written (no gamma, rmsnorm) and must stay NaN. Each case runs
 * twice and must give the same bits. Error per output: max |x - ref| over
 * max |ref| (absolute where ref is all zero); f32 1e-5, bf16/f16 2e-2.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_norm_bwd.cu -o test_norm_bwd
 *   ./test_norm_bwd [--small | --time]
 * --small: the cases compute-sanitizer runs; --time: the median of 20 runs,
 * bf16 layernorm, rows 16384, cols 768 (GPT-2 124M's training step).
 * Exits 1 on any failure. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "norm_bwd.cuh"
#include "gpu_test.cuh"

struct tcase {
  int rows, cols, pad; /* pad: added to every ld (rows off the 16-byte grid) */
  bool inplace;        /* dx over dy */
  bool small;
  bool res;            /* a residual gradient dres added to dx */
};

static const tcase CASES[] = {
    {0, 13, 0, false, true, false},     {1, 13, 0, false, true, false},      {37, 13, 0, false, true, false},
    {300, 768, 0, false, true, false},  {5, 3000, 0, false, true, false},    {130, 64, 0, false, false, false},
    {65, 2048, 0, false, false, false}, {40, 768, 3, false, true, false},    {69, 768, 0, true, true, false},
    {3, 50257, 0, false, false, false},
    /* with dres: the rows path, the generic one (padded rows), in place */
    {300, 768, 0, false, true, true},   {40, 768, 3, false, true, true},     {69, 768, 0, true, true, true},
};

static std::mt19937 rng(2024);
static int failures = 0;

template <typename T> static std::vector<T> random(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<T> h(n);
  for (auto &x : h) x = h_from<T>(u(rng));
  return h;
}

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

/* max |x - ref| over max |ref|; NaN anywhere fails. */
struct errs {
  double maxref = 0, maxerr = 0;
  bool nan = false;
  void add(double x, double r) {
    if (std::isnan(x)) nan = true;
    maxref = std::max(maxref, std::fabs(r));
    maxerr = std::max(maxerr, std::fabs(x - r));
  }
  double rel() const { return nan ? INFINITY : maxerr / (maxref > 0 ? maxref : 1.0); }
};

template <typename T>
static void run_case(const tcase &c, int rms, bool affine, bool with_db, const char *tname, double tol) {
  const int R = c.rows, C = c.cols;
  const long long ldx = C + c.pad, lddy = C + 2 * c.pad, lddx = c.inplace ? lddy : C + c.pad + 1;
  const size_t nx = (size_t)R * ldx, ndy = (size_t)R * lddy, ndx = (size_t)R * lddx;
  std::vector<T> hx = random<T>(nx, -1.5f, 2.5f); /* a mean away from 0 */
  std::vector<T> hdy = random<T>(ndy, -1.0f, 1.0f);
  std::vector<T> hg = random<T>((size_t)C, 0.5f, 1.5f);
  const long long lddres = C + c.pad;
  std::vector<T> hres = random<T>(c.res ? (size_t)R * lddres : 0, -1.0f, 1.0f);
  T *x = upload(hx), *dy = upload(hdy), *g = upload(hg), *res = c.res ? upload(hres) : nullptr;
  T *dx = c.inplace ? dy : nullptr, *dg = nullptr, *db = nullptr;
  if (!c.inplace) CK(cudaMalloc(&dx, std::max<size_t>(ndx, 1) * sizeof(T)));
  CK(cudaMalloc(&dg, (size_t)C * sizeof(T)));
  CK(cudaMalloc(&db, (size_t)C * sizeof(T)));
  float *work = nullptr;
  CK(cudaMalloc(&work, std::max<size_t>(nnc_cuda_norm_bwd_workspace_bytes(R, C), 16)));

  nnc_cuda_norm_bwd_args<T> a{};
  a.rows = R, a.cols = C, a.rms = rms, a.eps = 1e-5f;
  a.x = x, a.ldx = ldx, a.dy = dy, a.lddy = lddy, a.gamma = affine ? g : nullptr;
  a.dx = dx, a.lddx = lddx, a.dgamma = dg, a.dbeta = with_db ? db : nullptr, a.work = work;
  a.dres = res, a.lddres = lddres;
  std::vector<T> out[2][3];
  for (int rep = 0; rep < 2; ++rep) {
    if (c.inplace) CK(cudaMemcpy(dy, hdy.data(), ndy * sizeof(T), cudaMemcpyHostToDevice));
    else CK(cudaMemset(dx, 0xff, std::max<size_t>(ndx, 1) * sizeof(T))); /* NaN in every type */
    CK(cudaMemset(dg, 0xff, (size_t)C * sizeof(T)));
    CK(cudaMemset(db, 0xff, (size_t)C * sizeof(T)));
    nnc_cuda_error err{};
    if (nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
      std::printf("FAIL %s: %s\n", tname, err.msg);
      ++failures;
      return;
    }
    CK(cudaDeviceSynchronize());
    out[rep][0] = download(dx, ndx);
    out[rep][1] = download(dg, (size_t)C);
    out[rep][2] = download(db, (size_t)C);
  }
  bool same = true;
  for (int k = 0; k < 3; ++k)
    same = same && std::memcmp(out[0][k].data(), out[1][k].data(), out[0][k].size() * sizeof(T)) == 0;

  /* float64 reference */
  errs edx, edg, edb;
  std::vector<double> rdg((size_t)C, 0.0), rdb((size_t)C, 0.0), xh((size_t)C);
  for (int r = 0; r < R; ++r) {
    const T *xr = hx.data() + r * ldx, *dr = hdy.data() + r * lddy;
    double mean = 0, var = 0, mg = 0, mgx = 0;
    if (!rms) {
      for (int j = 0; j < C; ++j) mean += h_to(xr[j]);
      mean /= C;
    }
    for (int j = 0; j < C; ++j) var += (h_to(xr[j]) - mean) * (h_to(xr[j]) - mean);
    const double rstd = 1 / std::sqrt(var / C + 1e-5);
    for (int j = 0; j < C; ++j) {
      const double gj = h_to(dr[j]) * (affine ? h_to(hg[j]) : 1.0);
      xh[j] = (h_to(xr[j]) - mean) * rstd;
      mg += gj / C;
      mgx += gj * xh[j] / C;
    }
    for (int j = 0; j < C; ++j) {
      const double gj = h_to(dr[j]) * (affine ? h_to(hg[j]) : 1.0);
      edx.add(h_to(out[0][0][r * lddx + j]),
              rstd * (gj - (rms ? 0.0 : mg) - xh[j] * mgx) + (c.res ? h_to(hres[r * lddres + j]) : 0.0));
      rdg[j] += h_to(dr[j]) * xh[j];
      rdb[j] += h_to(dr[j]);
    }
  }
  /* written where asked, NaN where not; dx's padding untouched */
  bool untouched = true;
  for (int j = 0; j < C; ++j) {
    if (affine) edg.add(h_to(out[0][1][j]), rdg[j]);
    else untouched = untouched && std::isnan(h_to(out[0][1][j]));
    if (with_db && !rms) edb.add(h_to(out[0][2][j]), rdb[j]);
    else untouched = untouched && std::isnan(h_to(out[0][2][j]));
  }
  for (int r = 0; r + 1 < R && !c.inplace; ++r)
    for (long long j = C; j < lddx; ++j) untouched = untouched && std::isnan(h_to(out[0][0][r * lddx + j]));
  const double worst = std::max({edx.rel(), edg.rel(), edb.rel()});
  const bool ok = worst <= tol && same && untouched;
  std::printf("%s %-4s rows=%-5d cols=%-5d pad=%d inplace=%d dres=%d %-9s gamma=%d dbeta=%d  rel err dx %.1e dgamma %.1e "
              "dbeta %.1e%s%s\n",
              ok ? "PASS" : "FAIL", tname, R, C, c.pad, (int)c.inplace, (int)c.res, rms ? "rmsnorm" : "layernorm", (int)affine,
              (int)with_db, edx.rel(), edg.rel(), edb.rel(), same ? "" : " (runs differ)",
              untouched ? "" : " (wrote where it should not)");
  if (!ok) ++failures;
  for (T *p : {x, g, dg, db}) CK(cudaFree(p));
  CK(cudaFree(dy));
  if (res) CK(cudaFree(res));
  if (!c.inplace) CK(cudaFree(dx));
  CK(cudaFree(work));
}

/* Bad arguments come back as E_ARG with a message; no rows is OK. */
static void arg_checks() {
  float *p = nullptr;
  CK(cudaMalloc(&p, 4096));
  nnc_cuda_norm_bwd_args<float> a{};
  a.rows = 4, a.cols = 8, a.eps = 1e-5f, a.ldx = a.lddy = a.lddx = 8;
  a.dy = a.dx = a.work = p;
  nnc_cuda_error err{};
  const bool null_x = nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG &&
                      std::strstr(err.msg, "nnc_cuda_norm_bwd") && std::strstr(err.msg, "for x");
  a.x = p;
  a.work = p + 1;
  const bool work_align = nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG && std::strstr(err.msg, "work");
  a.work = p;
  a.ldx = 7;
  const bool ld = nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG && std::strstr(err.msg, "ldx");
  a.ldx = 8, a.rows = -1;
  const bool neg = nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG;
  a.rows = 4, a.eps = -1.0f;
  const bool eps = nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG;
  a.eps = 1e-5f, a.rows = 0, a.x = a.dy = a.dx = a.work = nullptr;
  const bool empty = nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_OK;
  CK(cudaDeviceSynchronize());
  CK(cudaFree(p));
  const bool ok = null_x && work_align && ld && neg && eps && empty;
  std::printf("%s args: NULL x %d, misaligned work %d, ldx < cols %d, rows < 0 %d, eps < 0 %d, rows = 0 OK %d\n",
              ok ? "PASS" : "FAIL", null_x, work_align, ld, neg, eps, empty);
  if (!ok) ++failures;
}

/* Median of 20 timed runs after 5 warm-up runs: bf16 layernorm with gamma,
 * dgamma and dbeta; the floor is reading x and dy and writing dx. */
static void time_case(int R, int C) {
  using bf16 = __nv_bfloat16;
  const size_t n = (size_t)R * C;
  bf16 *x = upload(random<bf16>(n, -1, 1)), *dy = upload(random<bf16>(n, -1, 1));
  bf16 *g = upload(random<bf16>((size_t)C, 0.5f, 1.5f)), *dx = nullptr, *dg = nullptr, *db = nullptr;
  CK(cudaMalloc(&dx, n * sizeof(bf16)));
  CK(cudaMalloc(&dg, (size_t)C * sizeof(bf16)));
  CK(cudaMalloc(&db, (size_t)C * sizeof(bf16)));
  float *work = nullptr;
  CK(cudaMalloc(&work, nnc_cuda_norm_bwd_workspace_bytes(R, C)));
  nnc_cuda_norm_bwd_args<bf16> a{};
  a.rows = R, a.cols = C, a.eps = 1e-5f, a.x = x, a.ldx = C, a.dy = dy, a.lddy = C, a.gamma = g;
  a.dx = dx, a.lddx = C, a.dgamma = dg, a.dbeta = db, a.work = work;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> us;
  for (int r = 0; r < 25; ++r) {
    nnc_cuda_error err{};
    CK(cudaEventRecord(e0));
    const nnc_cuda_status s = nnc_cuda_norm_bwd(a, (cudaStream_t)0, &err);
    CK(cudaEventRecord(e1));
    if (s != NNC_CUDA_OK) {
      std::printf("FAIL time: %s\n", err.msg);
      ++failures;
      return;
    }
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 5) us.push_back(ms * 1000.0f);
  }
  std::sort(us.begin(), us.end());
  const double med = 0.5 * (us[us.size() / 2 - 1] + us[us.size() / 2]);
  std::printf("TIME bf16 layernorm backward rows=%d cols=%d: %.1f us (%.2f TB/s of x, dy read and dx written)\n", R,
              C, med, 3.0 * n * sizeof(bf16) / med * 1e-6);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  for (bf16 *p : {x, dy, g, dx, dg, db}) CK(cudaFree(p));
  CK(cudaFree(work));
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--time") == 0) {
    time_case(16384, 768);
    return failures ? 1 : 0;
  }
  arg_checks();
  int n = 0;
  for (const tcase &c : CASES) {
    if (small && !c.small) continue;
    for (int rms = 0; rms < 2; ++rms)
      for (int affine = 0; affine < 2; ++affine)
        for (int with_db = 0; with_db < 2; ++with_db) {
          run_case<float>(c, rms, affine, with_db, "f32", 1e-5);
          run_case<__nv_bfloat16>(c, rms, affine, with_db, "bf16", 2e-2);
          run_case<__half>(c, rms, affine, with_db, "f16", 2e-2);
          n += 3;
        }
  }
  std::printf("%s: %d cases, %d failed\n", failures ? "FAILED" : "ALL PASSED", n, failures);
  return failures ? 1 : 0;
}
