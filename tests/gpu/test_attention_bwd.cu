/* tests/gpu/test_attention_bwd.cu — nnc_cuda_attention_bwd (templates/cuda/attention_bwd.cuh)
 * and the forward's row log-sum-exp (nnc_cuda_attn_args::lse) against a
 * float64 CPU reference, for f32, tf32, bf16 and f16, on fresh random inputs:
 * odd sizes, causal and not (T != S too), a padding mask with fully masked
 * rows, S == 0, T == 0, broadcast k/v batch strides, the fused [B,T,3,H,D]
 * qkv layout (gradients into a fused buffer too), padded strides; the
 * tensor-core path for bf16/f16 with D = Dv in {32, 64, 128}, the SIMT path
 * for the rest. The forward (with lse set) produces out and lse on the
 * device; the reference computes the exact out, lse and gradients from the
 * same (rounded) inputs. Outputs are poisoned with NaN first; each backward
 * runs twice and must give the same bits (determinism, races), and the
 * forward without lse must write the same out as with it. Error per
 * (b,h): max |x - ref| over max |ref| (absolute where ref is all zero);
 * f32 1e-5, tf32/bf16/f16 2e-2; lse must be +inf exactly where the
 * reference's is.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_attention_bwd.cu -o test_attention_bwd
 *   ./test_attention_bwd [--small | --case NAME | --time]
 * --small: the cases compute-sanitizer runs; --time: median of 20 runs of
 * the forward and the backward, bf16, at two GPT sizes.
 * Built with -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A, the
 * forward of the bf16/f16 D = 64 cases takes the wgmma path.
 * Exits 1 on any failure. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "attention_bwd.cuh"
#include "gpu_test.cuh"

enum layout { CONTIG, FUSED_QKV, BCAST, PAD8 };
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
    {"simt_odd_causal", 3, 5, 17, 17, 5, 7, 1, NO_MASK, CONTIG, true, false},
    {"simt_T23_S9_causal", 2, 3, 23, 9, 5, 7, 1, NO_MASK, CONTIG, false, false},
    {"simt_T9_S23_causal", 2, 3, 9, 23, 5, 7, 1, NO_MASK, CONTIG, false, false},
    /* batch 1's mask is all zeros: every row of it fully masked */
    {"simt_mask_full_rows", 3, 5, 17, 20, 5, 7, 0, MASK, CONTIG, true, false},
    {"simt_causal_mask_pad", 2, 3, 40, 70, 96, 80, 1, MASK, PAD8, false, false},
    {"simt_S0", 2, 3, 5, 0, 5, 7, 0, NO_MASK, CONTIG, false, false},
    {"simt_T0", 2, 3, 0, 5, 5, 7, 0, NO_MASK, CONTIG, false, false},
    {"simt_d256", 1, 2, 20, 70, 256, 256, 1, NO_MASK, CONTIG, false, false},
    {"d64_bcast_kv_mask", 3, 5, 33, 45, 64, 64, 0, MASK_BCAST, BCAST, false, true},
    {"d64_fused_qkv_causal", 3, 5, 77, 77, 64, 64, 1, NO_MASK, FUSED_QKV, false, true},
    {"d64_T129_S200_causal_mask", 3, 5, 129, 200, 64, 64, 1, MASK, CONTIG, true, true},
    {"d64_T200_S77_causal_pad", 2, 3, 200, 77, 64, 64, 1, NO_MASK, PAD8, false, true},
    {"d64_T200_causal", 2, 3, 200, 200, 64, 64, 1, NO_MASK, CONTIG, false, true},
    {"d64_T256", 2, 3, 256, 256, 64, 64, 0, NO_MASK, CONTIG, false, true},
    {"d64_S0", 2, 3, 5, 0, 64, 64, 0, NO_MASK, CONTIG, false, true},
    {"d64_T0", 2, 3, 0, 5, 64, 64, 0, NO_MASK, CONTIG, false, true},
    {"d128_T40_causal_mask", 2, 3, 40, 40, 128, 128, 1, MASK, CONTIG, true, true},
    {"d128_T200_causal", 2, 3, 200, 200, 128, 128, 1, NO_MASK, CONTIG, false, true},
    {"d128_T256", 2, 3, 256, 256, 128, 128, 0, NO_MASK, CONTIG, false, true},
    {"d128_T77_S150_causal_pad", 2, 3, 77, 150, 128, 128, 1, MASK, PAD8, false, true},
    {"d32_T65_S33_causal", 2, 3, 65, 33, 32, 32, 1, NO_MASK, CONTIG, false, true},
};

struct view {
  long long off, sb, sh, st; /* element offset of (0,0,0,0) in its buffer, strides */
  long long at(int b, int h, int i, int d) const { return off + b * sb + h * sh + i * st + d; }
};

static std::mt19937 rng(12345);
static int failures = 0;

/* Buffer size covering every element of a view (at least 1). */
static size_t extent(const view &v, int B, int H, int R, int C) {
  if (B == 0 || H == 0 || R == 0 || C == 0) return 1;
  return (size_t)(v.at(B - 1, H - 1, R - 1, C - 1) + 1);
}

/* A contiguous [B,H,R,C] view whose rows are padded by pad elements. */
static view contig(int H, int R, int C, int pad) {
  const long long st = C + pad;
  return {0, (long long)H * R * st, (long long)R * st, st};
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

template <typename T> static std::vector<T> download(const T *d, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

/* Per (b,h) relative error accumulator: max |x - ref| over max |ref|. */
struct errs {
  double maxref = 0, maxerr = 0, worst = 0;
  bool nan = false;
  void add(double x, double r) {
    if (std::isnan(x)) nan = true;
    maxref = std::max(maxref, std::fabs(r));
    maxerr = std::max(maxerr, std::fabs(x - r));
  }
  void close() {
    worst = std::max(worst, maxerr / (maxref > 0 ? maxref : 1.0));
    maxref = maxerr = 0;
  }
};

/* tf32: f32 data with tf32 products allowed (a.tf32 = 1). */
template <typename T> static void run_case(const tcase &c, int cc, const char *tname, double tol, bool tf32 = false) {
  const int B = c.B, H = c.H, Tq = c.T, S = c.S, D = c.D, Dv = c.Dv;
  const bool fused = c.lay == FUSED_QKV;
  const int pad = c.lay == PAD8 ? 8 : 0;
  view q{}, k{}, v{}, o{}, go{}, gq{}, gk{}, gv{};
  if (fused) { /* [B,T,3,H,D]: q, k, v and their gradients interleaved; out, dout [B,T,H,Dv] */
    const long long st = 3LL * H * D;
    q = gq = {0, Tq * st, D, st};
    k = gk = {(long long)H * D, Tq * st, D, st};
    v = gv = {2LL * H * D, Tq * st, D, st};
    o = go = {0, (long long)Tq * H * Dv, Dv, (long long)H * Dv};
  } else {
    q = contig(H, Tq, D, pad);
    k = contig(H, S, D, 2 * pad);
    v = contig(H, S, Dv, pad);
    if (c.lay == BCAST) k.sb = v.sb = 0;
    o = contig(H, Tq, Dv, pad);
    go = contig(H, Tq, Dv, 2 * pad);
    gq = contig(H, Tq, D, pad);
    gk = contig(H, S, D, pad);
    gv = contig(H, S, Dv, 2 * pad);
  }
  std::vector<T> hq, hk, hv; /* fused: all three in hq */
  if (fused) {
    hq.resize(extent(v, B, H, Tq, D));
    fill(hq, 2.0f);
  } else {
    hq.resize(extent(q, B, H, Tq, D));
    hk.resize(extent(k, B, H, S, D));
    hv.resize(extent(v, B, H, S, Dv));
    fill(hq, 2.0f);
    fill(hk, 2.0f);
    fill(hv, 1.0f);
  }
  const std::vector<T> &kk = fused ? hq : hk;
  const std::vector<T> &vv = fused ? hq : hv;
  std::vector<T> hdo(extent(go, B, H, Tq, Dv));
  fill(hdo, 1.0f);

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
  const size_t gqn = fused ? hq.size() : extent(gq, B, H, Tq, D);
  const size_t gkn = extent(gk, B, H, S, D), gvn = extent(gv, B, H, S, Dv);
  const size_t ln = std::max((size_t)1, (size_t)B * H * Tq);
  T *dq = upload(hq), *dk = fused ? dq : upload(hk), *dv = fused ? dq : upload(hv);
  T *ddo = upload(hdo);
  T *dm = hm.empty() ? nullptr : upload(hm);
  T *dout = nullptr, *dgq = nullptr, *dgk = nullptr, *dgv = nullptr;
  float *dlse = nullptr, *ddelta = nullptr;
  CK(cudaMalloc(&dout, on * sizeof(T)));
  CK(cudaMalloc(&dgq, gqn * sizeof(T)));
  if (!fused) {
    CK(cudaMalloc(&dgk, gkn * sizeof(T)));
    CK(cudaMalloc(&dgv, gvn * sizeof(T)));
  }
  CK(cudaMalloc(&dlse, ln * sizeof(float)));
  CK(cudaMalloc(&ddelta, std::max((size_t)4, nnc_cuda_attention_bwd_workspace_bytes(B, H, Tq))));
  if (fused) dgk = dgv = dgq;
  const float scale = 1.0f / std::sqrt((float)std::max(D, 1));

  /* the forward, with lse */
  nnc_cuda_attn_args<T> f{};
  f.batch = B, f.heads = H, f.T = Tq, f.S = S, f.D = D, f.Dv = Dv;
  f.q = dq + q.off, f.q_sb = q.sb, f.q_sh = q.sh, f.q_st = q.st;
  f.k = dk + k.off, f.k_sb = k.sb, f.k_sh = k.sh, f.k_st = k.st;
  f.v = dv + v.off, f.v_sb = v.sb, f.v_sh = v.sh, f.v_st = v.st;
  f.out = dout, f.o_sb = o.sb, f.o_sh = o.sh, f.o_st = o.st;
  f.scale = scale, f.causal = c.causal, f.mask = dm, f.mask_sb = msb, f.tf32 = tf32;
  f.lse = dlse;
  CK(cudaMemset(dout, 0xff, on * sizeof(T))); /* NaN in every type */
  CK(cudaMemset(dlse, 0xff, ln * sizeof(float)));
  nnc_cuda_error err{};
  if (nnc_cuda_attention(f, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
    std::printf("FAIL %s %s: forward: %s\n", tname, c.name, err.msg);
    ++failures;
    return;
  }

  /* lse changes nothing else: the forward without it writes the same bits */
  const std::vector<T> out_lse = download(dout, on);
  CK(cudaMemset(dout, 0xff, on * sizeof(T)));
  f.lse = nullptr;
  if (nnc_cuda_attention(f, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
    std::printf("FAIL %s %s: forward without lse: %s\n", tname, c.name, err.msg);
    ++failures;
    return;
  }
  const bool out_same = std::memcmp(out_lse.data(), download(dout, on).data(), on * sizeof(T)) == 0;

  nnc_cuda_attn_bwd_args<T> a{};
  a.batch = B, a.heads = H, a.T = Tq, a.S = S, a.D = D, a.Dv = Dv;
  a.q = f.q, a.q_sb = q.sb, a.q_sh = q.sh, a.q_st = q.st;
  a.k = f.k, a.k_sb = k.sb, a.k_sh = k.sh, a.k_st = k.st;
  a.v = f.v, a.v_sb = v.sb, a.v_sh = v.sh, a.v_st = v.st;
  a.out = dout, a.o_sb = o.sb, a.o_sh = o.sh, a.o_st = o.st;
  a.dout = ddo, a.do_sb = go.sb, a.do_sh = go.sh, a.do_st = go.st;
  a.lse = dlse;
  a.dq = dgq + gq.off, a.dq_sb = gq.sb, a.dq_sh = gq.sh, a.dq_st = gq.st;
  a.dk = dgk + gk.off, a.dk_sb = gk.sb, a.dk_sh = gk.sh, a.dk_st = gk.st;
  a.dv = dgv + gv.off, a.dv_sb = gv.sb, a.dv_sh = gv.sh, a.dv_st = gv.st;
  a.scale = scale, a.causal = c.causal, a.mask = dm, a.mask_sb = msb;
  a.delta = ddelta, a.tf32 = tf32;
  const bool mma = nnc_cuda_attention_bwd_uses_mma(a, cc);

  std::vector<T> g1[3], g2[3];
  const size_t gn[3] = {gqn, fused ? 0 : gkn, fused ? 0 : gvn};
  T *const gd[3] = {dgq, dgk, dgv};
  for (int rep = 0; rep < 2; ++rep) {
    for (int t = 0; t < 3; ++t)
      if (gn[t]) CK(cudaMemset(gd[t], 0xff, gn[t] * sizeof(T)));
    if (nnc_cuda_attention_bwd(a, (cudaStream_t)0, &err) != NNC_CUDA_OK) {
      std::printf("FAIL %s %s: backward: %s\n", tname, c.name, err.msg);
      ++failures;
      return;
    }
    CK(cudaDeviceSynchronize());
    for (int t = 0; t < 3; ++t) (rep ? g2 : g1)[t] = download(gd[t], gn[t]);
  }
  const std::vector<T> hout = download(dout, on);
  const std::vector<float> hlse = download(dlse, ln);
  bool same = true;
  for (int t = 0; t < 3; ++t) same = same && std::memcmp(g1[t].data(), g2[t].data(), gn[t] * sizeof(T)) == 0;
  const std::vector<T> &rq = g1[0], &rk = fused ? g1[0] : g1[1], &rv = fused ? g1[0] : g1[2];

  /* float64 reference: per (b,h), P, out, lse, then the gradients */
  errs eo, el, eq, ek, ev;
  bool infok = true;
  std::vector<double> P((size_t)std::max(1, Tq * S)), dS((size_t)std::max(1, Tq * S));
  std::vector<double> ro(Dv > 0 ? Dv : 1);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < Tq; ++i) {
        double mx = -INFINITY;
        for (int j = 0; j < S; ++j) {
          const bool gone = (c.causal && j > i + (S - Tq)) || (!hm.empty() && h_to(hm[(size_t)b * msb + j]) == 0);
          double x = -INFINITY;
          if (!gone) {
            x = 0;
            for (int d = 0; d < D; ++d) x += h_to(hq[q.at(b, h, i, d)]) * h_to(kk[k.at(b, h, j, d)]);
            x *= (double)scale;
          }
          P[(size_t)i * S + j] = x;
          mx = std::max(mx, x);
        }
        double sum = 0;
        for (int j = 0; j < S; ++j) {
          double &p = P[(size_t)i * S + j];
          p = p == -INFINITY ? 0.0 : std::exp(p - mx);
          sum += p;
        }
        for (int j = 0; j < S; ++j) P[(size_t)i * S + j] = sum > 0 ? P[(size_t)i * S + j] / sum : 0.0;
        const double lse = sum > 0 ? mx + std::log(sum) : INFINITY;
        const double gl = hlse[((size_t)b * H + h) * Tq + i];
        if (std::isinf(lse) || std::isinf(gl)) infok = infok && gl == lse;
        else el.add(gl, lse);
        /* out, delta, dP, dS */
        double delta = 0;
        for (int d = 0; d < Dv; ++d) {
          double r = 0;
          for (int j = 0; j < S; ++j) r += P[(size_t)i * S + j] * h_to(vv[v.at(b, h, j, d)]);
          ro[d] = r;
          eo.add(h_to(hout[o.at(b, h, i, d)]), r);
          delta += r * h_to(hdo[go.at(b, h, i, d)]);
        }
        for (int j = 0; j < S; ++j) {
          double dp = 0;
          for (int d = 0; d < Dv; ++d) dp += h_to(hdo[go.at(b, h, i, d)]) * h_to(vv[v.at(b, h, j, d)]);
          dS[(size_t)i * S + j] = P[(size_t)i * S + j] * (dp - delta);
        }
      }
      for (int i = 0; i < Tq; ++i)
        for (int d = 0; d < D; ++d) {
          double r = 0;
          for (int j = 0; j < S; ++j) r += dS[(size_t)i * S + j] * h_to(kk[k.at(b, h, j, d)]);
          eq.add(h_to(rq[gq.at(b, h, i, d)]), r * scale);
        }
      for (int j = 0; j < S; ++j) {
        for (int d = 0; d < D; ++d) {
          double r = 0;
          for (int i = 0; i < Tq; ++i) r += dS[(size_t)i * S + j] * h_to(hq[q.at(b, h, i, d)]);
          ek.add(h_to(rk[gk.at(b, h, j, d)]), r * scale);
        }
        for (int d = 0; d < Dv; ++d) {
          double r = 0;
          for (int i = 0; i < Tq; ++i) r += P[(size_t)i * S + j] * h_to(hdo[go.at(b, h, i, d)]);
          ev.add(h_to(rv[gv.at(b, h, j, d)]), r);
        }
      }
      for (errs *e : {&eo, &el, &eq, &ek, &ev}) e->close();
    }
  const bool nan = eo.nan || el.nan || eq.nan || ek.nan || ev.nan;
  const double worst = std::max({eo.worst, el.worst, eq.worst, ek.worst, ev.worst});
  const bool pathok = !c.want_mma || std::is_same<T, float>::value || cc < 8 || mma;
  const bool ok = !nan && infok && worst <= tol && same && out_same && pathok;
  std::printf("%s %-4s %-26s %-4s B=%d H=%d T=%d S=%d D=%d Dv=%d causal=%d mask=%d  rel err out %.1e lse %.1e "
              "dq %.1e dk %.1e dv %.1e%s%s%s%s%s\n",
              ok ? "PASS" : "FAIL", tname, c.name, mma ? "mma" : "simt", B, H, Tq, S, D, Dv, c.causal, (int)c.mask,
              eo.worst, el.worst, eq.worst, ek.worst, ev.worst, nan ? " (NaN written or left)" : "",
              infok ? "" : " (lse not +inf exactly where it should be)", same ? "" : " (runs differ)",
              out_same ? "" : " (out differs without lse)",
              pathok ? "" : " (expected the mma path)");
  if (!ok) ++failures;
  if (fused) dgk = dgv = nullptr, dk = dv = nullptr;
  for (T *p : {dq, dk, dv, ddo, dm, dout, dgq, dgk, dgv})
    if (p) CK(cudaFree(p));
  CK(cudaFree(dlse));
  CK(cudaFree(ddelta));
}

/* Bad arguments come back as E_ARG with a message; empty work is OK. */
static void arg_checks() {
  nnc_cuda_attn_bwd_args<float> a{};
  a.batch = 2, a.heads = 1, a.T = 4, a.S = 4, a.D = 4, a.Dv = 4;
  nnc_cuda_error err{};
  const bool null_q = nnc_cuda_attention_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG &&
                      std::strstr(err.msg, "q") != nullptr;
  float *p = nullptr;
  CK(cudaMalloc(&p, 256));
  a.q = a.k = a.v = a.out = a.dout = a.lse = p;
  a.dq = a.dk = a.dv = a.delta = p;
  a.dq_sb = 16, a.dk_sb = 0, a.dv_sb = 16; /* dk broadcast over the batch */
  const bool bcast = nnc_cuda_attention_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG &&
                     std::strstr(err.msg, "dk") != nullptr;
  a.T = -1;
  const bool neg = nnc_cuda_attention_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG;
  a.T = 0, a.S = 0;
  const bool empty = nnc_cuda_attention_bwd(a, (cudaStream_t)0, &err) == NNC_CUDA_OK;
  CK(cudaFree(p));
  const bool ok = null_q && bcast && neg && empty;
  std::printf("%s args: NULL q -> E_ARG %d, dk batch stride 0 -> E_ARG %d, T<0 -> E_ARG %d, T=S=0 -> OK %d\n",
              ok ? "PASS" : "FAIL", null_q, bcast, neg, empty);
  if (!ok) ++failures;
}

/* Median over 20 timed runs (after warm-up) of the bf16 forward and
 * backward, contiguous [B,H,T,D], causal, T = S. */
static void time_case(int B, int H, int T, int D) {
  using bf16 = __nv_bfloat16;
  const size_t n = (size_t)B * H * T * D;
  std::vector<bf16> h(n);
  bf16 *buf[8];
  for (bf16 *&p : buf) {
    fill(h, 1.0f);
    p = upload(h);
  }
  float *lse = nullptr, *delta = nullptr;
  CK(cudaMalloc(&lse, (size_t)B * H * T * sizeof(float)));
  CK(cudaMalloc(&delta, nnc_cuda_attention_bwd_workspace_bytes(B, H, T)));
  const long long st = D, sh = (long long)T * D, sb = (long long)H * sh;
  nnc_cuda_attn_args<bf16> f{};
  f.batch = B, f.heads = H, f.T = T, f.S = T, f.D = D, f.Dv = D;
  f.q = buf[0], f.k = buf[1], f.v = buf[2], f.out = buf[3];
  f.q_sb = f.k_sb = f.v_sb = f.o_sb = sb;
  f.q_sh = f.k_sh = f.v_sh = f.o_sh = sh;
  f.q_st = f.k_st = f.v_st = f.o_st = st;
  f.scale = 1.0f / std::sqrt((float)D), f.causal = 1, f.lse = lse;
  nnc_cuda_attn_bwd_args<bf16> a{};
  a.batch = B, a.heads = H, a.T = T, a.S = T, a.D = D, a.Dv = D;
  a.q = buf[0], a.k = buf[1], a.v = buf[2], a.out = buf[3], a.dout = buf[4];
  a.dq = buf[5], a.dk = buf[6], a.dv = buf[7];
  a.q_sb = a.k_sb = a.v_sb = a.o_sb = a.do_sb = a.dq_sb = a.dk_sb = a.dv_sb = sb;
  a.q_sh = a.k_sh = a.v_sh = a.o_sh = a.do_sh = a.dq_sh = a.dk_sh = a.dv_sh = sh;
  a.q_st = a.k_st = a.v_st = a.o_st = a.do_st = a.dq_st = a.dk_st = a.dv_st = st;
  a.lse = lse, a.scale = f.scale, a.causal = 1, a.delta = delta;

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double med[2];
  for (int which = 0; which < 2; ++which) {
    std::vector<float> us;
    for (int r = 0; r < 25; ++r) {
      nnc_cuda_error err{};
      CK(cudaEventRecord(e0));
      const nnc_cuda_status s = which == 0 ? nnc_cuda_attention(f, (cudaStream_t)0, &err)
                                           : nnc_cuda_attention_bwd(a, (cudaStream_t)0, &err);
      CK(cudaEventRecord(e1));
      if (s != NNC_CUDA_OK) {
        std::printf("FAIL time: %s\n", err.msg);
        ++failures;
        return;
      }
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 5) us.push_back(ms * 1000.0f); /* 5 warm-up runs */
    }
    std::sort(us.begin(), us.end());
    med[which] = 0.5 * (us[us.size() / 2 - 1] + us[us.size() / 2]);
  }
  const double fwd_flops = 4.0 * B * H * (double)T * T * D / 2; /* causal: half */
  std::printf("TIME bf16 B=%d H=%d T=S=%d D=%d causal: forward %.1f us (%.1f TFLOP/s), backward %.1f us (%.1f TFLOP/s, "
              "%.2fx the forward's time)\n",
              B, H, T, D, med[0], fwd_flops / med[0] * 1e-6, med[1], 2.5 * fwd_flops / med[1] * 1e-6,
              med[1] / med[0]);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  for (bf16 *p : buf) CK(cudaFree(p));
  CK(cudaFree(lse));
  CK(cudaFree(delta));
}

int main(int argc, char **argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  const bool timing = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  const char *only = argc > 2 && std::strcmp(argv[1], "--case") == 0 ? argv[2] : nullptr;
  int dev = 0, cc = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
  if (timing) {
    time_case(16, 12, 1024, 64);
    time_case(4, 16, 2048, 128);
    return failures ? 1 : 0;
  }
  arg_checks();
  int n = 0;
  for (const tcase &c : CASES) {
    if ((small && !c.small) || (only && std::strcmp(only, c.name) != 0)) continue;
    run_case<float>(c, cc, "f32", 1e-5);
    run_case<float>(c, cc, "tf32", 2e-2, true);
    run_case<__nv_bfloat16>(c, cc, "bf16", 2e-2);
    run_case<__half>(c, cc, "f16", 2e-2);
    n += 4;
  }
  if (only && n == 0) {
    std::printf("FAIL: no case named %s\n", only);
    return 1;
  }
  std::printf("%s: %d cases, %d failed\n", failures ? "FAILED" : "ALL PASSED", n, failures);
  return failures ? 1 : 0;
}
