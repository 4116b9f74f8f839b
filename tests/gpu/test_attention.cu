/* tests/gpu/test_attention.cu — nnc_cuda_attention (templates/cuda/attention.cuh)
 * against a float64 CPU reference, for f32, tf32, bf16 and f16, on fresh random
 * inputs: odd sizes, causal and not (T != S too), padding masks with fully
 * masked rows (and with +inf in the masked keys' rows of k, which must not
 * reach the output), broadcast batch strides, a fused [B,T,3,H,D] qkv layout and
 * padded strides; the kv append folded in (k_new, v_new: the caches' new
 * rows checked bit for bit, the rest unchanged, and read from k_new, not
 * from the cache, which holds NaN there); rope folded in (rope_q, rope_k:
 * q and the new key rows given before rotation, the reference rotating them
 * on the host in the same f32 steps with one rounding (the angles' cos and
 * sin from the device's libm, as a rope kernel has them), the cache's new rows
 * checked bit for bit against that, q left as it was by the decode kernels
 * and rotated in place, bit for bit, by the other paths); both the tensor-core and the SIMT path (f32 takes the
 * tensor cores too: three tf32 products a product for D 32 and 64, one with
 * tf32 set). Outputs are
 * poisoned with NaN first; each case runs twice and must give the same bits
 * (a race shows up as a difference), the second time with q, k, v and the
 * mask written late by the kernel before it (gpu_test.cuh's late_copy: the
 * early launch's wait, pdl.cuh, tested). Error per (b,h): max |out - ref| over
 * max |ref| (absolute where ref is all zero); f32 1e-5, tf32/bf16/f16 1e-2.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Itemplates/cuda tests/gpu/test_attention.cu -o test_attention
 *   ./test_attention [--small | --case NAME]   (--small: the cases compute-sanitizer runs)
 * Built with -gencode arch=compute_90a,code=sm_90a -DNNC_CUDA_SM90A, the
 * bf16/f16 D = 64 cases take the wgmma path (attention_wgmma.cuh): tiles of
 * 128 keys on small grids, of 64 on the grid528 cases; so do the D = 128
 * ones (two warpgroups of 64 queries a block, tiles of 128 keys).
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
/* MASK_INF_K: MASK, and the masked keys' rows of k all +inf (q k is then inf or NaN there): a masked key
 * must stay out whatever its row holds */
enum masking { NO_MASK, MASK, MASK_BCAST, MASK_INF_K };
enum appending { NO_APPEND, FUSED_NEW, CONTIG_NEW };
static const int CAP_EXTRA = 3;

struct tcase {
  const char *name;
  int B, H, T, S, D, Dv, causal;
  masking mask;
  layout lay;
  bool small;
  bool want_mma; /* bf16/f16 on sm_80+ must take the tensor-core path */
  /* a kv append folded in (k_new, v_new): the new rows FUSED_NEW as in GPT-2's c_attn output [B, T, 2, KH, D],
   * or CONTIG_NEW [B, KH, T, D] each (LLaMA's rope output); the caches hold CAP_EXTRA rows past S */
  int append = NO_APPEND;
  /* rope folded in (attention_rope.cuh): the leading rope_dims entries of q's and the new key rows turned
   * at positions of each (batch, row) of their own; 0: none */
  int rope_dims = 0;
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
    /* BERT MiniLM's attention at B=32 T=128 (Hopper's six-blocks-an-SM instance) */
    {"d32_bert_B32_mask", 32, 12, 128, 128, 32, 32, 0, MASK, CONTIG, false, true},
    {"d32_masked_keys_inf", 3, 5, 70, 70, 32, 32, 0, MASK_INF_K, CONTIG, true, true},
    {"d64_masked_keys_inf_causal", 2, 3, 77, 77, 64, 64, 1, MASK_INF_K, CONTIG, false, true},
    {"d32_T65_S1_causal", 3, 5, 65, 1, 32, 32, 1, NO_MASK, CONTIG, false, true},
    /* D = 32 (BERT's head width) at more shapes: causal with T != S, odd S on the tile edge, more blocks
     * than a wave of six an SM, fused and padded rows, grouped heads, a broadcast mask */
    {"d32_T100_S77_causal_mask", 3, 5, 100, 77, 32, 32, 1, MASK, CONTIG, true, true},
    {"d32_T300_S128_fused_qkv", 7, 12, 300, 128, 32, 32, 0, NO_MASK, FUSED_QKV, false, true},
    {"d32_B40_T128_S127_pad8_mask", 40, 12, 128, 127, 32, 32, 0, MASK, PAD8, false, true},
    {"d32_gqa_T33_S65_causal_mask", 3, 6, 33, 65, 32, 32, 1, MASK, GQA3, true, true},
    {"d32_bcast_T17_S64_mask", 3, 5, 17, 64, 32, 32, 0, MASK_BCAST, BCAST, false, true},
    {"d32_T129_S129_mask", 3, 5, 129, 129, 32, 32, 0, MASK, CONTIG, false, true},
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
    /* D = 128 on sm_90a's wgmma kernel (128 queries a block, 128 keys a tile, buffers in rings of 2 and 3):
     * blocks of one tile and of several (the rings wrap), causal with S > T, masks, padded and fused rows,
     * grouped and shared k/v heads; the small ones under the sanitizers */
    {"d128_T131_S131_causal", 2, 3, 131, 131, 128, 128, 1, NO_MASK, CONTIG, true, true},
    {"d128_T45_S397_pad8_mask", 2, 3, 45, 397, 128, 128, 0, MASK, PAD8, true, true},
    {"gqa_d128_T33_S290_causal_mask", 2, 6, 33, 290, 128, 128, 1, MASK, GQA3, true, true},
    {"d128_fused_qkv_T259_causal", 2, 4, 259, 259, 128, 128, 1, NO_MASK, FUSED_QKV, false, true},
    {"d128_T517_S901_mask", 1, 4, 517, 901, 128, 128, 0, MASK, CONTIG, false, true},
    {"mqa_d128_T65_S200_causal", 2, 4, 65, 200, 128, 128, 1, NO_MASK, MQA, false, true},
    {"d128_B1_H8_T1024_causal", 1, 8, 1024, 1024, 128, 128, 1, NO_MASK, CONTIG, false, true},
    /* causal with more queries than keys: the first 50 (160) queries see none (zeros); a whole tile of
     * 128 sees none in the second */
    {"d128_T200_S150_causal_mask", 2, 3, 200, 150, 128, 128, 1, MASK, CONTIG, true, true},
    {"d128_T300_S140_causal", 1, 2, 300, 140, 128, 128, 1, NO_MASK, CONTIG, false, true},
    {"mqa_simt_odd_mask", 3, 6, 17, 19, 5, 7, 0, MASK, MQA, false, false},
    /* the kv append folded in (attention_append.cuh): a decode step (T <= 4) writes the new rows inside the
     * decode kernels, at B=64 (4 warps a row), B=28 (8), B=8 (16) and fewer rows (split over a cluster's
     * blocks on sm_90a, else 16 warps); longer T through the copy
     * kernel before the flash kernels; odd S, masks, grouped heads */
    {"append_decode_T1_S545_mask", 3, 12, 1, 545, 64, 64, 1, MASK, CONTIG, true, true, FUSED_NEW},
    {"append_decode_B64_T1_S129_mask", 64, 12, 1, 129, 64, 64, 1, MASK, CONTIG, false, true, FUSED_NEW},
    {"append_decode_B28_T1_S77", 28, 12, 1, 77, 64, 64, 1, NO_MASK, CONTIG, false, true, FUSED_NEW},
    {"append_decode_B8_T1_S300_mask", 8, 12, 1, 300, 64, 64, 1, MASK, CONTIG, false, true, FUSED_NEW},
    /* few rows (48) over many keys: on sm_90a each row's keys split over a cluster of 8 blocks */
    {"append_decode_T4_S700_causal_pad8_mask", 1, 12, 4, 700, 64, 64, 1, MASK, PAD8, false, true, FUSED_NEW},
    {"append_decode_T3_S301_pad8_mask", 2, 5, 3, 301, 64, 64, 1, MASK, PAD8, false, true, CONTIG_NEW},
    {"append_decode_T1_S1", 2, 3, 1, 1, 64, 64, 1, NO_MASK, CONTIG, false, true, FUSED_NEW},
    {"append_gqa_decode_T1_S299_mask", 3, 12, 1, 299, 64, 64, 1, MASK, GQA3, true, true, CONTIG_NEW},
    {"append_mqa_decode_T2_S33", 2, 6, 2, 33, 64, 64, 1, NO_MASK, MQA, false, true, FUSED_NEW},
    {"append_prefill_T17_S17_causal", 3, 12, 17, 17, 64, 64, 1, NO_MASK, CONTIG, true, true, FUSED_NEW},
    {"append_prefill_gqa_T9_S21_mask", 2, 6, 9, 21, 64, 64, 1, MASK, GQA3, false, true, CONTIG_NEW},
    {"append_simt_T5_S11_mask", 2, 3, 5, 11, 5, 7, 1, MASK, CONTIG, true, false, CONTIG_NEW},
    /* rope folded in too (attention_rope.cuh): the decode kernels rotate as they read; the other paths
     * rotate in the append kernel (the cache's rows) and q in place */
    {"rope_decode_T1_S545_mask", 3, 12, 1, 545, 64, 64, 1, MASK, CONTIG, true, true, CONTIG_NEW, 64},
    {"rope_gqa_decode_T1_S299_mask", 3, 12, 1, 299, 64, 64, 1, MASK, GQA3, true, true, CONTIG_NEW, 64},
    {"rope_gqa_decode_B64_T1_S129_mask", 64, 12, 1, 129, 64, 64, 1, MASK, GQA3, false, true, CONTIG_NEW, 64},
    {"rope_gqa_decode_T2_S33", 2, 6, 2, 33, 64, 64, 1, NO_MASK, GQA3, false, true, CONTIG_NEW, 64},
    {"rope_gqa_decode_B8_T1_S200_mask", 8, 12, 1, 200, 64, 64, 1, MASK, GQA3, false, true, CONTIG_NEW, 64},
    {"rope_decode_T3_S301_pad8_mask_dims32", 2, 5, 3, 301, 64, 64, 1, MASK, PAD8, true, true, FUSED_NEW, 32},
    {"rope_mqa_decode_T4_S4", 2, 6, 4, 4, 64, 64, 1, NO_MASK, MQA, false, true, FUSED_NEW, 64},
    {"rope_prefill_gqa_T9_S21_mask", 2, 6, 9, 21, 64, 64, 1, MASK, GQA3, true, true, CONTIG_NEW, 64},
    {"rope_prefill_T17_S17_causal", 3, 12, 17, 17, 64, 64, 1, NO_MASK, CONTIG, false, true, FUSED_NEW, 64},
    {"rope_simt_T5_S11_mask_dims4", 2, 3, 5, 11, 5, 7, 1, MASK, CONTIG, false, false, CONTIG_NEW, 4},
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

/* The rope's cos and sin of pair i at each position, as floats, computed
 * on the device the way attention_rope.cuh's rope_cs (and emit_rope.c's
 * kernel) does: the device's double pow, cos and sin, which the host's libm
 * does not match to the last bit (a position of hundreds of radians moves
 * the float rounding of about one value in 10^5). cs[(r * half + i) * 2]. */
__global__ void rope_angles(const int *pos, int n, int dims, double base, float *cs) {
  const int half = dims / 2;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n * half; e += gridDim.x * blockDim.x) {
    const double th = (double)pos[e / half] * pow(base, -2.0 * (e % half) / dims);
    cs[2 * e] = (float)cos(th);
    cs[2 * e + 1] = (float)sin(th);
  }
}

/* Row x (w entries, stride 1) rotated as a separate rope kernel does, with
 * the angles cs of its position (half pairs): every f32 product and sum
 * rounded on its own, one rounding to T. */
template <typename T> static void host_rope(const T *x, T *y, int w, int dims, const float *cs) {
  const int half = dims / 2;
  for (int d = 0; d < w; ++d) {
    const float xd = (float)h_to(x[d]);
    if (d >= 2 * half) {
      y[d] = x[d];
      continue;
    }
    const int i = d < half ? d : d - half;
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float other = (float)h_to(x[d < half ? d + half : d - half]);
    const volatile float xc = xd * c, os = other * s; /* two roundings, never one fused multiply-add */
    y[d] = h_from<T>(d < half ? xc - os : xc + os);
  }
}

static const double ROPE_BASE = 10000.0;

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
    /* a cache of Cap rows holds the S keys (an append case's rows past S must stay as they are) */
    const long long Cap = S + (c.append ? CAP_EXTRA : 0);
    k = {0, bc ? 0 : (long long)KH * Cap * kst, Cap * kst, kst};
    v = {0, bc ? 0 : (long long)KH * Cap * vst, Cap * vst, vst};
  }
  const long long ost = Dv + (c.lay == PAD8 ? 8 : c.lay == PAD_ODD ? 1 : 0);
  o = {0, (long long)H * Tq * ost, (long long)Tq * ost, ost};

  if (c.lay == FUSED_QKV) {
    hq.resize(extent(v, B, H, Tq, D));
    fill(hq, 2.0f);
  } else {
    const int rows = S + (c.append ? CAP_EXTRA : 0);
    hq.resize(extent(q, B, H, Tq, D));
    hk.resize(std::max(extent(k, B, KH, rows, D), (size_t)1));
    hv.resize(std::max(extent(v, B, KH, rows, Dv), (size_t)1));
    fill(hq, 2.0f);
    fill(hk, 2.0f);
    fill(hv, 1.0f);
  }
  /* the new rows of an append case, and the caches as the attention must see them (rows S - T .. S - 1
   * replaced); the caches given to the kernel hold NaN there, so a block reading them shows */
  view kn{}, vn{};
  std::vector<T> hn, k_seen, v_seen;
  if (c.append) {
    const int stride = Dv > D ? Dv : D;
    if (c.append == FUSED_NEW) {
      const long long st = 2LL * KH * stride;
      kn = {0, Tq * st, stride, st};
      vn = {(long long)KH * stride, Tq * st, stride, st};
    } else {
      kn = {0, (long long)KH * Tq * D, (long long)Tq * D, D};
      vn = {(long long)B * KH * Tq * D, (long long)KH * Tq * Dv, (long long)Tq * Dv, Dv};
    }
    hn.resize(std::max(extent(vn, B, KH, Tq, Dv), extent(kn, B, KH, Tq, D)));
    fill(hn, 2.0f);
    k_seen = hk;
    v_seen = hv;
    for (int b = 0; b < B; ++b)
      for (int g = 0; g < KH; ++g)
        for (int t = 0; t < Tq; ++t) {
          for (int d = 0; d < D; ++d) {
            k_seen[k.at(b, g, S - Tq + t, d)] = hn[kn.at(b, g, t, d)];
            hk[k.at(b, g, S - Tq + t, d)] = h_from<T>(NAN);
          }
          for (int d = 0; d < Dv; ++d) {
            v_seen[v.at(b, g, S - Tq + t, d)] = hn[vn.at(b, g, t, d)];
            hv[v.at(b, g, S - Tq + t, d)] = h_from<T>(NAN);
          }
        }
  }
  /* rope: positions [B, T] of their own per batch; q as the attention must see it (hq stays as given) */
  std::vector<int> hpos;
  std::vector<T> q_seen = hq;
  if (c.rope_dims) {
    hpos.resize((size_t)B * Tq);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tq; ++t) hpos[(size_t)b * Tq + t] = S - Tq + t + 37 * b; /* left padding moves them */
    const int half = c.rope_dims / 2, np = B * Tq;
    std::vector<float> cs((size_t)np * half * 2);
    int *dp = upload(hpos);
    float *dcs = nullptr;
    CK(cudaMalloc(&dcs, cs.size() * sizeof(float)));
    rope_angles<<<(np * half + 127) / 128, 128>>>(dp, np, c.rope_dims, ROPE_BASE, dcs);
    CK(cudaGetLastError());
    CK(cudaMemcpy(cs.data(), dcs, cs.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(dcs));
    CK(cudaFree(dp));
    std::vector<T> row(std::max(D, 1)), out(std::max(D, 1));
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tq; ++t) {
        const float *at = cs.data() + ((size_t)b * Tq + t) * half * 2;
        for (int h = 0; h < H; ++h) {
          for (int d = 0; d < D; ++d) row[d] = hq[q.at(b, h, t, d)];
          host_rope(row.data(), out.data(), D, c.rope_dims, at);
          for (int d = 0; d < D; ++d) q_seen[q.at(b, h, t, d)] = out[d];
        }
        for (int g = 0; g < KH; ++g) {
          for (int d = 0; d < D; ++d) row[d] = hn[kn.at(b, g, t, d)];
          host_rope(row.data(), out.data(), D, c.rope_dims, at);
          for (int d = 0; d < D; ++d) k_seen[k.at(b, g, S - Tq + t, d)] = out[d];
        }
      }
  }
  const std::vector<T> &kk = c.lay == FUSED_QKV ? hq : c.append ? k_seen : hk;
  const std::vector<T> &vv = c.lay == FUSED_QKV ? hq : c.append ? v_seen : hv;

  std::vector<T> hm;
  long long msb = 0;
  if (c.mask != NO_MASK) {
    const int rows = c.mask == MASK_BCAST ? 1 : B;
    msb = c.mask == MASK_BCAST ? 0 : S + 3;
    hm.resize((size_t)std::max(1, rows * (S + 3)));
    std::uniform_real_distribution<float> u(0, 1);
    for (int b = 0; b < rows; ++b)
      for (int j = 0; j < S + 3; ++j)
        hm[(size_t)b * (S + 3) + j] =
            h_from<T>(((c.mask == MASK || c.mask == MASK_INF_K) && b == 1) ? 0.0f : u(rng) < 0.3f ? 0.0f : 1.0f);
    if (c.mask == MASK_INF_K)
      for (int b = 0; b < B; ++b)
        for (int j = 0; j < S; ++j)
          if (h_to(hm[(size_t)b * msb + j]) == 0)
            for (int g = 0; g < KH; ++g)
              for (int d = 0; d < D; ++d) hk[k.at(b, g, j, d)] = h_from<T>(INFINITY);
  }

  const size_t on = extent(o, B, H, Tq, Dv);
  T *dq = upload(hq), *dk = c.lay == FUSED_QKV ? dq : upload(hk), *dv = c.lay == FUSED_QKV ? dq : upload(hv);
  T *dm = hm.empty() ? nullptr : upload(hm);
  T *dn = hn.empty() ? nullptr : upload(hn);
  T *dout = nullptr;
  CK(cudaMalloc(&dout, on * sizeof(T)));
  int *dpos = nullptr;
  if (!hpos.empty()) {
    CK(cudaMalloc(&dpos, hpos.size() * sizeof(int)));
    CK(cudaMemcpy(dpos, hpos.data(), hpos.size() * sizeof(int), cudaMemcpyHostToDevice));
  }

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
  if (dn) {
    a.k_new = dn + kn.off, a.kn_sb = kn.sb, a.kn_sh = kn.sh, a.kn_st = kn.st;
    a.v_new = dn + vn.off, a.vn_sb = vn.sb, a.vn_sh = vn.sh, a.vn_st = vn.st;
  }
  if (c.rope_dims) {
    a.rope_pos = dpos, a.rope_pos_sb = Tq, a.rope_base = ROPE_BASE, a.rope_dims = c.rope_dims;
    a.rope_q = 1, a.rope_k = 1;
  }
  /* the decode kernels leave q as it was; the other paths rotate it in place */
  const std::vector<T> &q_after = c.rope_dims && !nnc_cuda_attention_uses_decode(a) ? q_seen : hq;

  const bool mma = nnc_cuda_attention_uses_mma(a, cc);
  std::vector<T> out1(on), out2(on);
  bool cache_ok = true;
  /* the second run's q, k, v and mask are written late by the kernel before
   * it (gpu_test.cuh's late_copy), from these copies: a kernel launched
   * early (pdl.cuh) that read them before its wait would see zeros. Not
   * where the call rewrites them itself (an append, rope) */
  const bool late = !dn && !c.rope_dims;
  T *sq = late ? upload(hq) : nullptr, *sk = late && c.lay != FUSED_QKV ? upload(hk) : nullptr;
  T *sv = late && c.lay != FUSED_QKV ? upload(hv) : nullptr, *sm = late && dm ? upload(hm) : nullptr;
  for (int rep = 0; rep < 2; ++rep) {
    fill_now(dout, 0xff, on * sizeof(T)); /* NaN in every type */
    cudaStream_t s = (cudaStream_t)0;
    if (late && rep == 1) {
      s = test_stream();
      std::vector<late_write> w = {{dq, sq, hq.size() * sizeof(T)}};
      if (sk) w.push_back({dk, sk, hk.size() * sizeof(T)});
      if (sv) w.push_back({dv, sv, hv.size() * sizeof(T)});
      if (sm) w.push_back({dm, sm, hm.size() * sizeof(T)});
      CK(cudaDeviceSynchronize()); /* the poison above, on the legacy stream, before the late writes */
      late_copy(w, s);
    }
    if (c.rope_dims) CK(cudaMemcpy(dq, hq.data(), hq.size() * sizeof(T), cudaMemcpyHostToDevice));
    if (dn) { /* the caches as before the step: NaN where the new rows go */
      CK(cudaMemcpy(dk, hk.data(), hk.size() * sizeof(T), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dv, hv.data(), hv.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    nnc_cuda_error err{};
    nnc_cuda_status st = nnc_cuda_attention(a, s, &err);
    if (st != NNC_CUDA_OK) {
      std::printf("FAIL %s %s: status %d: %s\n", tname, c.name, (int)st, err.msg);
      ++failures;
      return;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(rep ? out2.data() : out1.data(), dout, on * sizeof(T), cudaMemcpyDeviceToHost));
    if (dn) { /* the new rows where they belong, bit for bit, and every other cache row as it was */
      std::vector<T> ck(hk.size()), cv(hv.size());
      CK(cudaMemcpy(ck.data(), dk, ck.size() * sizeof(T), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(cv.data(), dv, cv.size() * sizeof(T), cudaMemcpyDeviceToHost));
      cache_ok = cache_ok && std::memcmp(ck.data(), k_seen.data(), ck.size() * sizeof(T)) == 0 &&
                 std::memcmp(cv.data(), v_seen.data(), cv.size() * sizeof(T)) == 0;
    }
    if (c.rope_dims) {
      std::vector<T> cq(hq.size());
      CK(cudaMemcpy(cq.data(), dq, cq.size() * sizeof(T), cudaMemcpyDeviceToHost));
      cache_ok = cache_ok && std::memcmp(cq.data(), q_after.data(), cq.size() * sizeof(T)) == 0;
    }
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
          for (int d = 0; d < D; ++d) x += h_to(q_seen[q.at(b, h, i, d)]) * h_to(kk[k.at(b, h / G, j, d)]);
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
  const bool ok = !nan && worst <= tol && same && pathok && cache_ok;
  std::printf("%s %-4s %-28s %-4s B=%d H=%d T=%d S=%d D=%d Dv=%d causal=%d mask=%d  max rel err %.3e%s%s%s%s\n",
              ok ? "PASS" : "FAIL", tname, c.name, mma ? "mma" : "simt", B, H, Tq, S, D, Dv, c.causal,
              (int)c.mask, worst, nan ? " (NaN written or left)" : "", same ? "" : " (runs differ)",
              pathok ? "" : " (expected the mma path)", cache_ok ? "" : " (caches or q not as a kv append and rope leave them)");
  if (!ok) ++failures;
  CK(cudaFree(dq));
  if (c.lay != FUSED_QKV) {
    CK(cudaFree(dk));
    CK(cudaFree(dv));
  }
  if (dm) CK(cudaFree(dm));
  for (T *p : {sq, sk, sv, sm})
    if (p) CK(cudaFree(p));
  if (dn) CK(cudaFree(dn));
  if (dpos) CK(cudaFree(dpos));
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
  /* new rows to append into a cache that every batch shares (batch stride 0), or over fewer keys than rows */
  float buf[64] = {};
  a.T = 2, a.batch = 2, a.q = a.k = a.v = buf, a.out = buf, a.k_new = buf;
  const bool shared = nnc_cuda_attention(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG &&
                      std::strstr(err.msg, "k_new") != nullptr;
  a.k_sb = 16, a.S = 1;
  const bool short_s = nnc_cuda_attention(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG;
  /* rope: keys to rotate without new rows, an odd rotated width */
  a.S = 4, a.k_new = nullptr, a.rope_k = 1, a.rope_dims = 4, a.rope_base = 10000.0;
  const bool rope_no_new = nnc_cuda_attention(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG &&
                           std::strstr(err.msg, "rope_k") != nullptr;
  a.rope_k = 0, a.rope_q = 1, a.rope_dims = 3;
  const bool rope_odd = nnc_cuda_attention(a, (cudaStream_t)0, &err) == NNC_CUDA_E_ARG &&
                        std::strstr(err.msg, "rope_dims") != nullptr;
  const bool ok = null_q && neg && empty && shared && short_s && rope_no_new && rope_odd;
  std::printf("%s args: NULL q -> E_ARG %d, T<0 -> E_ARG %d, T=0 -> OK %d, k_new into a shared cache -> E_ARG %d, "
              "S < T -> E_ARG %d, rope_k without k_new -> E_ARG %d, rope_dims 3 -> E_ARG %d\n", ok ? "PASS" : "FAIL",
              null_q, neg, empty, shared, short_s, rope_no_new, rope_odd);
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
