/* tests/unit/test_simd_attention.c — the streaming-softmax attention
 * against a float64 attention written here (full T x S scores, softmax,
 * times V): odd sizes, T != S, causal with both signs of S - T, padding
 * masks, rows with every key masked, interleaved [B,T,H,D] layouts and
 * threads; the row log-sum-exp (lse) it writes for the backward, and the
 * same output, bit for bit, without it. */
#include "test_simd_util.h"

typedef struct acase {
  int B, H, T, S, D, Dv;
  int causal, use_mask, interleaved, threads;
  int mask_kind;  /* 0: random zeros, 1: batch 0 all zeros */
  int group;      /* grouped-query: query heads a k/v head serves (0: 1) */
} acase;

static int run(const acase *c) {
  int B = c->B, H = c->H, T = c->T, S = c->S, D = c->D, Dv = c->Dv;
  nnc_simd_attn_args a;
  memset(&a, 0, sizeof a);
  a.batch = B; a.heads = H; a.T = T; a.S = S; a.D = D; a.Dv = Dv;
  a.scale = 1.0f / sqrtf((float)(D > 0 ? D : 1));
  a.causal = c->causal;
  a.kv_group = c->group;
  const int G = c->group > 1 ? c->group : 1;   /* query head h reads k/v head h / G */
  /* Strides: [B,H,T,D] or [B,T,H,D] (what a fused QKV projection gives). */
  if (c->interleaved) {
    a.q_st = (ptrdiff_t)H * D; a.q_sh = D; a.q_sb = (ptrdiff_t)T * H * D;
    a.k_st = (ptrdiff_t)H * D; a.k_sh = D; a.k_sb = (ptrdiff_t)S * H * D;
    a.v_st = (ptrdiff_t)H * Dv; a.v_sh = Dv; a.v_sb = (ptrdiff_t)S * H * Dv;
    a.o_st = (ptrdiff_t)H * Dv; a.o_sh = Dv; a.o_sb = (ptrdiff_t)T * H * Dv;
  } else {
    a.q_st = D; a.q_sh = (ptrdiff_t)T * D; a.q_sb = (ptrdiff_t)H * T * D;
    a.k_st = D; a.k_sh = (ptrdiff_t)S * D; a.k_sb = (ptrdiff_t)H * S * D;
    a.v_st = Dv; a.v_sh = (ptrdiff_t)S * Dv; a.v_sb = (ptrdiff_t)H * S * Dv;
    a.o_st = Dv + 1; a.o_sh = (ptrdiff_t)T * (Dv + 1); a.o_sb = (ptrdiff_t)H * T * (Dv + 1);
  }
  size_t nq = (size_t)B * H * T * D, nk = (size_t)B * H * S * D, nv = (size_t)B * H * S * Dv,
         no = (size_t)B * H * T * (Dv + 1);
  float *q = trandom(nq, -2, 2), *k = trandom(nk, -2, 2), *v = trandom(nv, -1, 1);
  float *o = talloc(no);
  tpoison(o, no);
  a.q = q; a.k = k; a.v = v; a.out = o;
  float *mask = NULL;
  if (c->use_mask) {
    mask = talloc((size_t)B * (S + 2));
    for (int i = 0; i < B * (S + 2); ++i) mask[i] = trng(0, 1) < 0.3f ? 0.0f : 1.0f;
    if (c->mask_kind == 1)
      for (int j = 0; j < S; ++j) mask[j] = 0.0f;
    a.mask = mask;
    a.mask_sb = S + 2;
  }
  tpool tp = {c->threads, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, c->threads};
  size_t wsb = nnc_simd_attention_workspace_bytes(&a, c->threads ? c->threads : 1);
  void *ws = malloc(wsb);
  nnc_simd_error err;
  nnc_simd_status st = nnc_simd_attention(&a, c->threads ? &par : NULL, ws, wsb, &err);
  if (st) fprintf(stderr, "attention: %s\n", err.msg);
  assert_int_equal(st, NNC_SIMD_OK);
  /* Once more with lse: out must not change by a bit. */
  size_t nl = (size_t)B * H * T;
  float *lse = talloc(nl), *o2 = talloc(no);
  tpoison(lse, nl);
  memcpy(o2, o, no * sizeof(float));
  tpoison(o, no);
  a.lse = lse;
  st = nnc_simd_attention(&a, c->threads ? &par : NULL, ws, wsb, &err);
  if (st) fprintf(stderr, "attention with lse: %s\n", err.msg);
  assert_int_equal(st, NNC_SIMD_OK);
  int same = 1;
  for (size_t i = 0; i < no; ++i)
    same &= memcmp(&o[i], &o2[i], sizeof(float)) == 0 || (isnan(o[i]) && isnan(o2[i]));
  if (!same) fprintf(stderr, "attention: out differs with lse\n");

  double *ref = malloc(sizeof(double) * (size_t)(T * Dv + 1));
  double *p = malloc(sizeof(double) * (size_t)(S + 1));
  float *got = talloc((size_t)(T * Dv + 1));
  int ok = same;
  for (int b = 0; b < B && ok; ++b)
    for (int h = 0; h < H && ok; ++h) {
      for (int i = 0; i < T; ++i) {
        double mx = -INFINITY;
        for (int j = 0; j < S; ++j) {
          int masked = (c->causal && j > i + (S - T)) || (mask && mask[b * a.mask_sb + j] == 0);
          double s = 0;
          for (int d = 0; d < D; ++d)
            s += (double)q[b * a.q_sb + h * a.q_sh + i * a.q_st + d] *
                 k[b * a.k_sb + h / G * a.k_sh + j * a.k_st + d];
          p[j] = masked ? -INFINITY : s * a.scale;
          if (p[j] > mx) mx = p[j];
        }
        double sum = 0;
        for (int j = 0; j < S; ++j) {
          p[j] = mx == -INFINITY ? 0 : exp(p[j] - mx);
          sum += p[j];
        }
        /* lse: +inf exactly for a row that sees nothing. */
        double rl = sum > 0 ? mx + log(sum) : INFINITY;
        float gl = lse[((ptrdiff_t)b * H + h) * T + i];
        if (!(rl == INFINITY ? gl == INFINITY : fabs(gl - rl) <= 1e-6 * (1 + fabs(rl)))) {
          fprintf(stderr, "attention lse b%d h%d row %d of B=%d H=%d T=%d S=%d D=%d causal=%d "
                  "mask=%d/%d: got %.9g expected %.9g\n", b, h, i, B, H, T, S, D, c->causal,
                  c->use_mask, c->mask_kind, (double)gl, rl);
          ok = 0;
        }
        for (int d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int j = 0; j < S; ++j) acc += p[j] * v[b * a.v_sb + h / G * a.v_sh + j * a.v_st + d];
          ref[i * Dv + d] = sum > 0 ? acc / sum : 0;
          got[i * Dv + d] = o[b * a.o_sb + h * a.o_sh + i * a.o_st + d];
        }
      }
      char what[200];
      snprintf(what, sizeof what, "attention b%d h%d of B=%d H=%d T=%d S=%d D=%d Dv=%d causal=%d "
               "mask=%d/%d interleaved=%d threads=%d", b, h, B, H, T, S, D, Dv, c->causal,
               c->use_mask, c->mask_kind, c->interleaved, c->threads);
      ok = ok && tcheck(what, got, Dv, ref, T, Dv, 1e-5);
    }
  free(q); free(k); free(v); free(o); free(mask); free(ws); free(ref); free(p); free(got);
  free(lse); free(o2);
  return ok;
}

static acase mk(int B, int H, int T, int S, int D, int Dv) {
  acase c;
  memset(&c, 0, sizeof c);
  c.B = B; c.H = H; c.T = T; c.S = S; c.D = D; c.Dv = Dv; c.threads = 3;
  return c;
}

static void test_sizes(void **state) {
  (void)state;
  static const int ts[] = {1, 3, 17, 129};
  static const int ds[] = {1, 3, 17, 64};
  int fails = 0, n = 0;
  for (int t = 0; t < 4; ++t)
    for (int s = 0; s < 4; ++s)
      for (int d = 0; d < 4; ++d, ++n) {
        acase c = mk(2, 2, ts[t], ts[s], ds[d], ds[(d + n) % 4]);
        c.causal = n % 2;
        c.interleaved = (n / 2) % 2;
        c.use_mask = (n / 4) % 2;
        c.threads = n % 3;
        fails += !run(&c);
      }
  assert_int_equal(fails, 0);
}

/* Causal with T > S: the first T - S queries see no key and give zeros;
 * T < S is decoding with a cache. */
static void test_causal_shapes(void **state) {
  (void)state;
  int fails = 0;
  acase c = mk(1, 3, 40, 7, 16, 16);
  c.causal = 1;
  fails += !run(&c);
  c = mk(2, 2, 1, 200, 32, 24);
  c.causal = 1;
  fails += !run(&c);
  c = mk(1, 2, 150, 150, 48, 48);
  c.causal = 1;
  c.use_mask = 1;
  c.interleaved = 1;
  fails += !run(&c);
  assert_int_equal(fails, 0);
}

/* Batch 0's mask is all zeros: every one of its rows is zeros. */
static void test_all_masked(void **state) {
  (void)state;
  acase c = mk(2, 2, 9, 70, 8, 5);
  c.use_mask = 1;
  c.mask_kind = 1;
  assert_true(run(&c));
  c.causal = 1;
  assert_true(run(&c));
}

/* No keys at all gives zeros; no queries writes nothing. */
static void test_s_zero_and_empty(void **state) {
  (void)state;
  acase c = mk(1, 2, 5, 0, 4, 3); /* no keys: zeros */
  assert_true(run(&c));
  nnc_simd_attn_args a;
  memset(&a, 0, sizeof a);
  a.batch = 1; a.heads = 1; a.T = 0; a.S = 4; a.D = 4; a.Dv = 4;
  assert_int_equal(nnc_simd_attention(&a, NULL, NULL, 0, NULL), NNC_SIMD_OK);
}

/* Dv == 0: no output, but lse is still written (the backward needs it). */
static void test_lse_only(void **state) {
  (void)state;
  float q[12], k[8], lse[3];
  for (int i = 0; i < 12; ++i) q[i] = trng(-1, 1);
  for (int i = 0; i < 8; ++i) k[i] = trng(-1, 1);
  tpoison(lse, 3);
  nnc_simd_attn_args a;
  memset(&a, 0, sizeof a);
  a.batch = 1; a.heads = 1; a.T = 3; a.S = 2; a.D = 4; a.Dv = 0;
  a.q = q; a.k = k; a.v = k; a.q_st = 4; a.k_st = 4; a.scale = 0.5f; a.causal = 1;
  a.lse = lse;
  size_t wsb = nnc_simd_attention_workspace_bytes(&a, 1);
  void *ws = malloc(wsb);
  nnc_simd_error err;
  assert_int_equal(nnc_simd_attention(&a, NULL, ws, wsb, &err), NNC_SIMD_OK);
  for (int i = 0; i < 3; ++i) {
    /* causal, S - T = -1: row 0 sees nothing, row i sees keys < i. */
    double mx = -INFINITY, s[2];
    for (int j = 0; j < i; ++j) {
      s[j] = 0;
      for (int d = 0; d < 4; ++d) s[j] += (double)q[i * 4 + d] * k[j * 4 + d];
      s[j] *= 0.5;
      mx = fmax(mx, s[j]);
    }
    double sum = 0;
    for (int j = 0; j < i; ++j) sum += exp(s[j] - mx);
    if (i == 0) assert_true(lse[0] == INFINITY);
    else assert_true(fabs(lse[i] - (mx + log(sum))) <= 1e-6 * (1 + fabs(mx)));
  }
  a.lse = (float *)q;
  assert_int_equal(nnc_simd_attention(&a, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "overlapping"));
  free(ws);
}

/* Grouped-query attention: 6 query heads over 3, 2 and 1 k/v heads, with
 * masks, both layouts, a decode row and causal prefill rows. */
static void test_grouped(void **state) {
  (void)state;
  static const int groups[] = {2, 3, 6};
  for (int g = 0; g < 3; ++g)
    for (int il = 0; il < 2; ++il) {
      acase c = mk(3, 6, g == 0 ? 1 : 17, 23, 16, 16);
      c.group = groups[g];
      c.interleaved = il;
      c.use_mask = 1;
      c.causal = g != 1;
      assert_true(run(&c));
    }
}

static void test_errors(void **state) {
  (void)state;
  float q[16] = {0}, k[16] = {0}, v[16] = {0}, o[16];
  tpoison(o, 16);
  nnc_simd_attn_args a;
  memset(&a, 0, sizeof a);
  a.batch = 1; a.heads = 1; a.T = 2; a.S = 2; a.D = 4; a.Dv = 4;
  a.q = q; a.k = k; a.v = v; a.out = o;
  a.q_st = 4; a.k_st = 4; a.v_st = 4; a.o_st = 4; a.scale = 1;
  size_t wsb = nnc_simd_attention_workspace_bytes(&a, 1);
  void *ws = malloc(wsb);
  nnc_simd_error err;
  nnc_simd_attn_args b = a;
  b.T = -1;
  assert_int_equal(nnc_simd_attention(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "T=-1"));
  b = a; b.k_st = 3;
  assert_int_equal(nnc_simd_attention(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "k_st=3"));
  b = a; b.out = q + 4;
  assert_int_equal(nnc_simd_attention(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "overlapping"));
  b = a; b.v = NULL;
  assert_int_equal(nnc_simd_attention(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "expected q, k, v and out"));
  assert_int_equal(nnc_simd_attention(&a, NULL, ws, 4, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "workspace"));
  assert_int_equal(nnc_simd_attention(NULL, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  b = a; b.heads = 3; b.kv_group = 2;   /* 3 query heads do not share k/v heads 2 to 1 */
  assert_int_equal(nnc_simd_attention(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "kv_group"));
  for (int i = 0; i < 16; ++i) assert_true(isnan(o[i]));
  free(ws);
}

int main(void) {
  trng_seed(3);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sizes),       cmocka_unit_test(test_causal_shapes),
      cmocka_unit_test(test_all_masked),  cmocka_unit_test(test_s_zero_and_empty),
      cmocka_unit_test(test_lse_only),    cmocka_unit_test(test_grouped),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
