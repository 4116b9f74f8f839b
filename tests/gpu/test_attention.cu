/* tests/gpu/test_attention.cu — nnc_cuda_attention (templates/cuda/attention.cuh)
 * against a float64 CPU reference, for f32, tf32, bf16 and f16, on fresh random
 * inputs: odd sizes, causal and not (T != S too), padding masks with fully
 * masked rows, broadcast batch strides, a fused [B,T,3,H,D] qkv layout and
 * padded strides; both the tensor-core and the SIMT path (f32 takes the
 * tensor cores too: three tf32 products a product for D 32 and 64, one with
 * tf32 set). Outputs are
 * poisoned with NaN first; each case runs twice and must give the same bits
 * (a race shows up as a difference). Error per (b,h): max |out - ref| over
 * max |ref| (absolute where ref is all zero); f32 1e-5, tf32/bf16/f16 1e-2.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_attention.cu -o test_attention
 *   ./test_attention [--small | --case NAME]   (--small: the cases compute-sanitizer runs)
 * Built with -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A, the
 * bf16/f16 D = 64 cases take the wgmma path (attention_wgmma.cuh): tiles of
 * 128 keys on small grids, of 64 on the grid528 cases.
 * Exits 1 on any failure. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "attention.cuh"
#include "gpu_test.cuh"

/* GQA3: k and v with a head for every 3 query heads (kv_group = 3); MQA:
 * one head of k and v for all of them */
enum layout { CONTIG, FUSED_QKV, BCAST, PAD8, PAD_ODD, GQA3, MQA };
enum masking { NO_MASK, MASK, MASK_BCAST };

struct tcase {
  const char *name;
  int B, H, T, S, D, Dv, causal;
  masking mask;
  layout lay;
  bool small;
  bool want_mma; /* bf16/f16 on sm_80+ must take the tensor-core path */
};

static const tcase CASES[] = {
    {"simt_odd", 3, 5, 17, 17, 5, 7, 0, NO_MASK, CONTIG, true, false},
    {"simt_odd_causal_mask", 3, 5, 17, 17, 5, 7, 1, MASK, CONTIG, true, false},
    {"simt_T_gt_S_causal", 2, 3, 23, 9, 5, 7, 1, NO_MASK, CONTIG, false, false},
    {"simt_S0", 2, 3, 5, 0, 5, 7, 0, NO_MASK, CONTIG, false, false},
    {"simt_d96_pad", 3, 5, 40, 70, 96, 96, 1, MASK, PAD8, false, false},
    {"simt_d64_oddstride", 3, 5, 33, 45, 64, 64, 0, MASK, PAD_ODD, false, false},
    {"simt_big_dv", 1, 2, 9, 77, 300, 200, 0, NO_MASK, CONTIG, false, false},
    {"d64_T1_S200_causal", 3, 5, 1, 200, 64, 64, 1, NO_MASK, CONTIG, false, true},
    {"d64_T129_S200_causal_mask", 3, 5, 129, 200, 64, 64, 1, MASK, CONTIG, true, true},
    {"d64_T129_S200", 3, 5, 129, 200, 64, 64, 0, NO_MASK, CONTIG, false, true},
    {"d128_T200_S129_causal", 3, 5, 200, 129, 128, 128, 1, NO_MASK, CONTIG, false, true},
    {"d128_T129_S129_mask", 3, 5, 129, 129, 128, 128, 0, MASK, CONTIG, false, true},
    {"d128_T77_S333_causal_pad", 3, 5, 77, 333, 128, 128, 1, MASK, PAD8, false, true},
    {"d64_fused_qkv_causal", 3, 5, 77, 77, 64, 64, 1, NO_MASK, FUSED_QKV, false, true},
    /* GPT-2's own layout and size under --check (B=3, T=17, 12 heads): small, so the sanitizers see it */
    {"d64_gpt2_fused_T17_causal", 3, 12, 17, 17, 64, 64, 1, NO_MASK, FUSED_QKV, true, true},
    {"d64_bcast_kv_mask", 3, 5, 33, 45, 64, 64, 0, MASK_BCAST, BCAST, false, true},
    {"d32_bert_mask", 3, 5, 128, 128, 32, 32, 0, MASK, CONTIG, false, true},
    {"d32_T65_S1_causal", 3, 5, 65, 1, 32, 32, 1, NO_MASK, CONTIG, false, true},
    {"d64_S0", 2, 3, 5, 0, 64, 64, 0, NO_MASK, CONTIG, false, true},
    {"d64_T517_causal", 2, 3, 517, 517, 64, 64, 1, NO_MASK, CONTIG, false, true},
    {"d64_T300_S257_pad8_mask", 2, 3, 300, 257, 64, 64, 0, MASK, PAD8, false, true},
    /* grids of 528 blocks of 64 queries or more: one wave at four an SM of
     * the H100's 132 (the sm_90a dispatch takes BK = 64 from there on, 128
     * below) */
    {"d64_grid528_fused_qkv_causal", 4, 12, 704, 704, 64, 64, 1, NO_MASK, FUSED_QKV, false, true},
    {"d64_grid528_T704_S300_mask", 6, 8, 704, 300, 64, 64, 0, MASK, PAD8, false, true},
    /* a decode step (attention_decode.cuh): 1 to 4 query rows over a cache */
    {"decode_T1_S544_mask", 3, 12, 1, 544, 64, 64, 1, MASK, CONTIG, true, true},
    {"decode_T3_S300_causal_pad8", 2, 5, 3, 300, 64, 64, 1, MASK, PAD8, false, true},
    {"decode_T4_S4_causal", 2, 3, 4, 4, 64, 64, 1, NO_MASK, CONTIG, false, true},
    {"decode_T1_S1", 2, 3, 1, 1, 64, 64, 0, NO_MASK, CONTIG, false, true},
    {"decode_T2_S0", 2, 3, 2, 0, 64, 64, 0, NO_MASK, CONTIG, false, true},
    {"decode_bcast_kv_T1_S77", 3, 5, 1, 77, 64, 64, 0, MASK_BCAST, BCAST, false, true},
    {"decode_fused_qkv_T1_S1", 3, 12, 1, 1, 64, 64, 1, NO_MASK, FUSED_QKV, false, true},
    /* grouped-query attention (LLaMA's kv heads), with the padding mask: decode, mma and wgmma, SIMT */
    {"gqa_decode_T1_S300_mask", 3, 12, 1, 300, 64, 64, 1, MASK, GQA3, true, true},
    {"gqa_T77_S77_causal_mask", 3, 6, 77, 77, 64, 64, 1, MASK, GQA3, true, true},
    {"gqa_d128_T65_S129_mask", 2, 6, 65, 129, 128, 128, 0, MASK, GQA3, false, true},
    {"mqa_T33_S45_causal", 2, 6, 33, 45, 64, 64, 1, NO_MASK, MQA, false, true},
    {"mqa_simt_odd_mask", 3, 6, 17, 19, 5, 7, 0, MASK, MQA, false, false},
};

struct view {
  long long off, sb, sh, st; /* element offset of (0,0,0,0) in its buffer, strides */
  long long at(int b, int h, int i, int d) const { return off + b * sb + h * sh + i * st + d; }
};

static std::mt19937 rng(12345);
static int failures = 0;

/* Buffer size covering every element of a view. */
static size_t extent(const view &v, int B, int H, int R, int C) {
  if (B == 0 || H == 0 || R == 0 || C == 0) return 1;
  return (size_t)(v.at(B - 1, H - 1, R - 1, C - 1) + 1);
}

template <typename T> static void fill(std::vector<T> &h, float amp) {
  std::uniform_real_distribution<float> u(-amp, amp);
  for (auto &x : h) x = h_from<T>(u(rng));
}

template <typename T> static T *upload(const std::vector<T> &h) {
  T *d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

/* tf32: f32 data with the products on tf32 tensor cores (a.tf32 = 1). */
template <typename T> static void run_case(const tcase &c, int cc, const char *tname, double tol, bool tf32 = false) {
  const int B = c.B, H = c.H, Tq = c.T, S = c.S, D = c.D, Dv = c.Dv;
  const int G = c.lay == GQA3 ? 3 : c.lay == MQA ? H : 1, KH = H / G; /* query heads a k/v head serves */
  view q{}, k{}, v{}, o{};
  std::vector<T> hq, hk, hv; /* with FUSED_QKV all three live in hq */
  if (c.lay == FUSED_QKV) {
    const long long st = 3LL * H * D;
    q = {0, Tq * st, D, st};
    k = {(long long)H * D, Tq * st, D, st};
    v = {2LL * H * D, Tq * st, D, st};
  } else {
    const int pq = c.lay == PAD8 ? 8 : c.lay == PAD_ODD ? 3 : 0;
    const int pk = c.lay == PAD8 ? 16 : c.lay == PAD_ODD ? 5 : 0;
    const long long qst = D + pq, kst = D + pk, vst = Dv + pq;
    q = {0, (long long)H * Tq * qst, (long long)Tq * qst, qst};
    const bool bc = c.lay == BCAST;
    k = {0, bc ? 0 : (long long)KH * S * kst, (long long)S * kst, kst};
    v = {0, bc ? 0 : (long long)KH * S * vst, (long long)S * vst, vst};
  }
  const long long ost = Dv + (c.lay == PAD8 ? 8 : c.lay == PAD_ODD ? 1 : 0);
  o = {0, (long long)H * Tq * ost, (long long)Tq * ost, ost};

  if (c.lay == FUSED_QKV) {
    hq.resize(extent(v, B, H, Tq, D));
    fill(hq, 2.0f);
  } else {
    hq.resize(extent(q, B, H, Tq, D));
    hk.resize(std::max(extent(k, B, KH, S, D), (size_t)1));
    hv.resize(std::max(extent(v, B, KH, S, Dv), (size_t)1));
    fill(hq, 2.0f);
    fill(hk, 2.0f);
    fill(hv, 1.0f);
  }
  const std::vector<T> &kk = c.lay == FUSED_QKV ? hq : hk;
  const std::vector<T> &vv = c.lay == FUSED_QKV ? hq : hv;

  std::vector<T> hm;
  long long msb = 0;
  if (c.mask != NO_MASK) {
    const int rows = c.mask == MASK_BCAST ? 1 : B;
    msb = c.mask == MASK_BCAST ? 0 : S + 3;
    hm.resize((size_t)std::max(1, rows * (S + 3)));
    std::uniform_real_distribution<float> u(0, 1);
    for (int b = 0; b < rows; ++b)
      for (int j = 0; j < S + 3; ++j)
        hm[(size_t)b * (S + 3) + j] = h_from<T>((c.mask == MASK && b == 1) ? 0.0f : u(rng) < 0.3f ? 0.0f : 1.0f);
  }

  const size_t on = extent(o, B, H, Tq, Dv);
  T *dq = upload(hq), *dk = c.lay == FUSED_QKV ? dq : upload(hk), *dv = c.lay == FUSED_QKV ? dq : upload(hv);
  T *dm = hm.empty() ? nullptr : upload(hm);
  T *dout = nullptr;
  CK(cudaMalloc(&dout, on * sizeof(T)));

  nnc_cuda_attn_args<T> a{};
  a.batch = B, a.heads = H, a.T = Tq, a.S = S, a.D = D, a.Dv = Dv;
  a.q = dq + q.off, a.q_sb = q.sb, a.q_sh = q.sh, a.q_st = q.st;
  a.k = dk + k.off, a.k_sb = k.sb, a.k_sh = k.sh, a.k_st = k.st;
  a.v = dv + v.off, a.v_sb = v.sb, a.v_sh = v.sh, a.v_st = v.st;
  a.out = dout, a.o_sb = o.sb, a.o_sh = o.sh, a.o_st = o.st;
  a.scale = 1.0f / std::sqrt((float)std::max(D, 1));
  a.causal = c.causal;
  a.mask = dm, a.mask_sb = msb;
  a.kv_group = G;
  a.tf32 = tf32;

  const bool mma = nnc_cuda_attention_uses_mma(a, cc);
  std::vector<T> out1(on), out2(on);
  for (int rep = 0; rep < 2; ++rep) {
    CK(cudaMemset(dout, 0xff, on * sizeof(T))); /* NaN in every type */
    nnc_cuda_error err{};
    nnc_cuda_status st = nnc_cuda_attention(a, (cudaStream_t)0, &err);
    if (st != NNC_CUDA_OK) {
      std::printf("FAIL %s %s: status %d: %s\n", tname, c.name, (int)st, err.msg);
      ++failures;
      return;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(rep ? out2.data() : out1.data(), dout, on * sizeof(T), cudaMemcpyDeviceToHost));
  }

  /* float64 reference */
  double worst = 0;
  bool nan = false;
  std::vector<double> sc(S > 0 ? S : 1), ref(Dv);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      double maxref = 0, maxerr = 0;
      for (int i = 0; i < Tq; ++i) {
        double mx = -INFINITY;
        for (int j = 0; j < S; ++j) {
          bool gone = c.causal && j > i + (S - Tq);
          if (!hm.empty() && h_to(hm[(size_t)b * msb + j]) == 0) gone = true;
          if (gone) {
            sc[j] = -INFINITY;
            continue;
          }
          double x = 0;
          for (int d = 0; d < D; ++d) x += h_to(hq[q.at(b, h, i, d)]) * h_to(kk[k.at(b, h / G, j, d)]);
          sc[j] = x * (double)a.scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int d = 0; d < Dv; ++d) ref[d] = 0;
        if (mx > -INFINITY)
          for (int j = 0; j < S; ++j) {
            if (sc[j] == -INFINITY) continue;
            const double w = std::exp(sc[j] - mx);
            sum += w;
            for (int d = 0; d < Dv; ++d) ref[d] += w * h_to(vv[v.at(b, h / G, j, d)]);
          }
        for (int d = 0; d < Dv; ++d) {
          const double r = sum > 0 ? ref[d] / sum : 0.0;
          const double g = h_to(out1[o.at(b, h, i, d)]);
          if (std::isnan(g)) nan = true;
          maxref = std::max(maxref, std::fabs(r));
          maxerr = std::max(maxerr, std::fabs(g - r));
        }
      }
      worst = std::max(worst, maxerr / (maxref > 0 ? maxref : 1.0));
    }
  const bool same = std::memcmp(out1.data(), out2.data(), on * sizeof(T)) == 0;
  const bool pathok = !c.want_mma || (std::is_same<T, float>::value && !tf32) || cc < 8 || mma;
  const bool ok = !nan && worst <= tol && same && pathok;
  std::printf("%s %-4s %-28s %-4s B=%d H=%d T=%d S=%d D=%d Dv=%d causal=%d mask=%d  max rel err %.3e%s%s%s\n",
              ok ? "PASS" : "FAIL", tname, c.name, mma ? "mma" : "simt", B, H, Tq, S, D, Dv, c.causal,
              (int)c.mask, worst, nan ? " (NaN written or left)" : "", same ? "" : " (runs differ)",
              pathok ? "" : " (expected the mma path)");
  if (!ok) ++failures;
  CK(cudaFree(dq));
  if (c.lay != FUSED_QKV) {
    CK(cudaFree(dk));
    CK(cudaFree(dv));
  }
  if (dm) CK(cudaFree(dm));
  CK(cudaFree(dout));
}

/* Bad arguments come back as E_ARG with a message; empty work is OK. */
static void arg_checks() {
  nnc_cuda_attn_args<float> a{};
  a.batch = 1, a.heads = 1, a.T = 4, a.S = 4, a.D = 4, a.Dv = 4;
  nnc_cuda_error err{};
  const bool null_q = nnc_cuda_attention(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG &&
                      std::strstr(err.msg, "q") != nullptr;
  a.T = -1;
  const bool neg = nnc_cuda_attention(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG;
  a.T = 0;
  const bool empty = nnc_cuda_attention(a, (cudaStream_t)0, &err) == NNC_CUDA_OK;
  const bool ok = null_q && neg && empty;
  std::printf("%s args: NULL q -> E_ARG %d, T<0 -> E_ARG %d, T=0 -> OK %d\n", ok ? "PASS" : "FAIL", null_q, neg,
              empty);
  if (!ok) ++failures;
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  const char *only = argc > 2 && std::strcmp(argv[1], "--case") == 0 ? argv[2] : nullptr;
  int dev = 0, cc = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
  arg_checks();
  int n = 0;
  for (const tcase &c : CASES) {
    if ((small && !c.small) || (only && std::strcmp(only, c.name) != 0)) continue;
    run_case<float>(c, cc, "f32", 1e-5);
    run_case<float>(c, cc, "tf32", 1e-2, true);
    run_case<__nv_bfloat16>(c, cc, "bf16", 1e-2);
    run_case<__half>(c, cc, "f16", 1e-2);
    n += 4;
  }
  if (only && n == 0) {
    std::printf("FAIL: no case named %s\n", only);
    return 1;
  }
  std::printf("%s: %d cases, %d failed\n", failures ? "FAILED" : "ALL PASSED", n, failures);
  return failures ? 1 : 0;
}
