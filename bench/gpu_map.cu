/* bench/gpu_map.cu — the erf-GELU pass over BERT MiniLM's intermediate
 * activations (B=32 T=128: 4096 x 1536 bf16, in place) with loops.cuh's
 * nnc_map against other loop shapes, to learn why nnc_map runs it at 14.7
 * us (ncu, base clocks: bench/NOTES.md, session 28) where its bytes take
 * ~6 us: its one wave of threads loads, then computes (~35 instructions an
 * element for erff and the conversions), then stores, so the memory and the
 * arithmetic may not overlap.
 *
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Itemplates/cuda \
 *        bench/gpu_map.cu -o gpu_map && ./gpu_map
 *
 * Shapes: nnc_map as the folders launch it; one vector a thread (a grid of
 * nv threads, no loop); grid-stride loops over a grid of SMs x k blocks,
 * one vector at a time with the next vector's load issued before this one's
 * arithmetic (a software pipeline), for k = 2, 4, 8; and a plain copy (the
 * same bytes, no arithmetic: the floor on this GPU). Each is checked
 * against the element-at-a-time GELU on the host's copy of the input.
 * Timing: bench/gpu_timing.cuh's median_us over input sets rotated through
 * more than 128 MB. */
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu_timing.cuh"
#include "loops.cuh"

using bf16 = __nv_bfloat16;
constexpr long long ROWS = 4096, COLS = 1536, N = ROWS * COLS;
constexpr int V = nnc_vec<bf16>::V;

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.707106781f)); }

/* The same function with erf from a rational approximation (Abramowitz and
 * Stegun 7.1.26: |error of erf| <= 1.5e-7): one reciprocal, five FMAs and
 * one exp2, against erff's longer polynomial. */
__device__ __forceinline__ float gelu_fast(float v) {
  const float u = fabsf(v) * 0.707106781f;
  float t;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(0.3275911f, u, 1.0f)));
  const float p = t * fmaf(t, fmaf(t, fmaf(t, fmaf(t, 0.530702715f, -0.726576014f), 0.710706871f), -0.142248368f), 0.127414796f);
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(u * u * -1.442695041f));
  const float q = p * e; /* (1 - erf(|v| / sqrt 2)) / 2 */
  return v >= 0.0f ? fmaf(-v, q, v) : v * q;
}

template <bool FAST> __device__ __forceinline__ float gelu_of(float v) { return FAST ? gelu_fast(v) : gelu(v); }

template <bool FAST = false> __global__ void map_nnc(bf16 *y, long long n) {
  nnc_map(y, (const bf16 *)nullptr, n, [](float v, float) { return gelu_of<FAST>(v); });
}

template <bool FAST = false> __global__ void map_one(bf16 *y, long long nv) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= nv) return;
  float a[V];
  nnc_vec<bf16>::load(y + i * V, a);
#pragma unroll
  for (int l = 0; l < V; ++l) a[l] = gelu_of<FAST>(a[l]);
  nnc_vec<bf16>::store(y + i * V, a);
}

__global__ void map_pipelined(bf16 *y, long long nv) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= nv) return;
  float cur[V], next[V];
  nnc_vec<bf16>::load(y + i * V, cur);
  for (; i < nv; i += stride) {
    const bool more = i + stride < nv;
    if (more) nnc_vec<bf16>::load(y + (i + stride) * V, next);
#pragma unroll
    for (int l = 0; l < V; ++l) cur[l] = gelu(cur[l]);
    nnc_vec<bf16>::store(y + i * V, cur);
#pragma unroll
    for (int l = 0; l < V; ++l) cur[l] = next[l];
  }
}

__global__ void copy(bf16 *y, const bf16 *x, long long nv) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nv; i += stride)
    reinterpret_cast<uint4 *>(y)[i] = reinterpret_cast<const uint4 *>(x)[i];
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int nsets = (int)((128LL << 20) / (N * 2) + 2);
  std::vector<bf16 *> sets(nsets);
  std::vector<bf16> h(N);
  std::mt19937 r(3);
  std::normal_distribution<float> u(0.0f, 1.5f);
  for (auto &x : h) x = (bf16)u(r);
  for (auto &p : sets) {
    CK(cudaMalloc(&p, N * sizeof(bf16)));
    CK(cudaMemcpy(p, h.data(), N * sizeof(bf16), cudaMemcpyHostToDevice));
  }
  bf16 *scratch;
  CK(cudaMalloc(&scratch, N * sizeof(bf16)));
  const long long nv = N / V;
  struct shape {
    std::string name;
    std::function<void(bf16 *)> run;
  };
  std::vector<shape> shapes = {
      {"nnc_map", [&](bf16 *y) { map_nnc<<<nnc_map_blocks<bf16>(N), NNC_LOOP_THREADS>>>(y, N); }},
      {"one vector a thread", [&](bf16 *y) { map_one<<<(unsigned)((nv + 255) / 256), 256>>>(y, nv); }},
      {"nnc_map, fast erf", [&](bf16 *y) { map_nnc<true><<<nnc_map_blocks<bf16>(N), NNC_LOOP_THREADS>>>(y, N); }},
      {"one vector a thread, fast erf", [&](bf16 *y) { map_one<true><<<(unsigned)((nv + 255) / 256), 256>>>(y, nv); }},
  };
  for (int k : {2, 4, 8}) {
    shapes.push_back({"pipelined, " + std::to_string(k) + " blocks an SM", [&, k](bf16 *y) { map_pipelined<<<(unsigned)(sms * k), 256>>>(y, nv); }});
  }
  std::printf("erf-GELU over %lld x %lld bf16 in place, %d SMs, %d sets\n", ROWS, COLS, sms, nsets);
  for (const auto &s : shapes) {
    /* correctness: set 0 from the host's values, against the host's GELU of them */
    CK(cudaMemcpy(sets[0], h.data(), N * sizeof(bf16), cudaMemcpyHostToDevice));
    s.run(sets[0]);
    CK(cudaDeviceSynchronize());
    std::vector<bf16> got(N);
    CK(cudaMemcpy(got.data(), sets[0], N * sizeof(bf16), cudaMemcpyDeviceToHost));
    double worst = 0;
    for (long long i = 0; i < N; ++i) {
      const double x = (double)(float)h[i], want = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
      worst = std::max(worst, std::fabs((double)(float)got[i] - want) / std::max(1.0, std::fabs(want)));
    }
    const double us = median_us([&](int i) { s.run(sets[i % nsets]); });
    /* warm: one set again and again, as in a model right after the GEMM that wrote it (12.6 MB fit in L2) */
    const double warm = median_us([&](int) { s.run(sets[1]); });
    std::printf("%-30s %8.2f us %8.0f GB/s  warm %6.2f us  max error %.3g%s\n", s.name.c_str(), us, 2.0 * N * 2 / us * 1e-3,
                warm, worst, worst > 8e-3 ? "  WRONG" : "");
  }
  const double cus = median_us([&](int i) { copy<<<(unsigned)(sms * 8), 256>>>(scratch, sets[i % nsets], nv); });
  std::printf("%-30s %8.2f us %8.0f GB/s\n", "copy (the same bytes)", cus, 2.0 * N * 2 / cus * 1e-3);
  for (auto p : sets) CK(cudaFree(p));
  CK(cudaFree(scratch));
  return 0;
}
