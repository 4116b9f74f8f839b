/* tests/unit/test_simd_attention_bwd.c — the attention backward against a
 * float64 one written here (full T x S scores, softmax, the gradients by
 * their textbook formulas), fed by the forward kernel's out and lse, which
 * is checked too: odd sizes, T != S causal both ways, padding masks with
 * fully masked rows, no keys, no queries, k/v broadcast over the batch,
 * fused-qkv strides, sizes past the blocks, and the same bits on any
 * number of threads. Outputs start as NaN, with gaps between their rows
 * that must stay NaN. */
#include "test_simd_util.h"

typedef struct bcase {
  int B, H, T, S, D, Dv;
  int causal, threads;
  int mask_kind;    /* 0 none, 1 random zeros with batch 0 all zeros, 2 random zeros */
  int layout;       /* 0 [B,H,T,D] with a gap column, 1 fused qkv [B,T,3,H,D] (D == Dv) */
  int bcast_kv;     /* k and v shared by the batch (stride 0) */
} bcase;

/* The tensors of one case: inputs, the forward's results, and gradients. */
typedef struct bdata {
  nnc_simd_attn_bwd_args a;
  float *qkv, *k_own, *v_own, *out, *dout, *lse, *mask, *grad, *dk_own, *dv_own;
  size_t n_qkv, n_grad, n_dk, n_dv;
} bdata;

static void run_forward(const bcase *c, bdata *x) {
  nnc_simd_attn_bwd_args *a = &x->a;
  nnc_simd_attn_args f;
  memset(&f, 0, sizeof f);
  f.batch = a->batch; f.heads = a->heads; f.T = a->T; f.S = a->S; f.D = a->D; f.Dv = a->Dv;
  f.q = a->q; f.q_sb = a->q_sb; f.q_sh = a->q_sh; f.q_st = a->q_st;
  f.k = a->k; f.k_sb = a->k_sb; f.k_sh = a->k_sh; f.k_st = a->k_st;
  f.v = a->v; f.v_sb = a->v_sb; f.v_sh = a->v_sh; f.v_st = a->v_st;
  f.out = x->out; f.o_sb = a->o_sb; f.o_sh = a->o_sh; f.o_st = a->o_st;
  f.scale = a->scale; f.causal = a->causal; f.mask = a->mask; f.mask_sb = a->mask_sb;
  f.lse = x->lse;
  size_t wsb = nnc_simd_attention_workspace_bytes(&f, 1);
  void *ws = malloc(wsb);
  nnc_simd_error err;
  nnc_simd_status st = nnc_simd_attention(&f, NULL, ws, wsb, &err);
  if (st) fprintf(stderr, "attention: %s\n", err.msg);
  assert_int_equal(st, NNC_SIMD_OK);
  free(ws);
  (void)c;
}

static void setup(const bcase *c, bdata *x) {
  int B = c->B, H = c->H, T = c->T, S = c->S, D = c->D, Dv = c->Dv;
  memset(x, 0, sizeof *x);
  nnc_simd_attn_bwd_args *a = &x->a;
  a->batch = B; a->heads = H; a->T = T; a->S = S; a->D = D; a->Dv = Dv;
  a->scale = 1.0f / sqrtf((float)(D > 0 ? D : 1));
  a->causal = c->causal;
  if (c->layout == 1) {
    /* q, k, v (and dq, dk, dv) interleaved in [B, T, 3, H, D]; T == S. */
    ptrdiff_t row = 3 * (ptrdiff_t)H * D;
    x->n_qkv = (size_t)B * T * row;
    x->qkv = trandom(x->n_qkv, -2, 2);
    a->q = x->qkv; a->k = x->qkv + H * D; a->v = x->qkv + 2 * H * D;
    a->q_st = a->k_st = a->v_st = row;
    a->q_sh = a->k_sh = a->v_sh = D;
    a->q_sb = a->k_sb = a->v_sb = (ptrdiff_t)T * row;
    x->n_grad = x->n_qkv;
    x->grad = talloc(x->n_grad);
    tpoison(x->grad, x->n_grad);
    a->dq = x->grad; a->dk = x->grad + H * D; a->dv = x->grad + 2 * H * D;
    a->dq_st = a->dk_st = a->dv_st = row;
    a->dq_sh = a->dk_sh = a->dv_sh = D;
    a->dq_sb = a->dk_sb = a->dv_sb = (ptrdiff_t)T * row;
  } else {
    x->n_qkv = (size_t)B * H * T * D;
    x->qkv = trandom(x->n_qkv, -2, 2);
    int kb = c->bcast_kv ? 1 : B;
    x->k_own = trandom((size_t)kb * H * S * D, -2, 2);
    x->v_own = trandom((size_t)kb * H * S * Dv, -1, 1);
    a->q = x->qkv; a->q_st = D; a->q_sh = (ptrdiff_t)T * D; a->q_sb = (ptrdiff_t)H * T * D;
    a->k = x->k_own; a->k_st = D; a->k_sh = (ptrdiff_t)S * D;
    a->k_sb = c->bcast_kv ? 0 : (ptrdiff_t)H * S * D;
    a->v = x->v_own; a->v_st = Dv; a->v_sh = (ptrdiff_t)S * Dv;
    a->v_sb = c->bcast_kv ? 0 : (ptrdiff_t)H * S * Dv;
    /* Gradients with a gap column after each row. */
    x->n_grad = (size_t)B * H * T * (D + 1);
    x->n_dk = (size_t)B * H * S * (D + 1);
    x->n_dv = (size_t)B * H * S * (Dv + 1);
    x->grad = talloc(x->n_grad);
    x->dk_own = talloc(x->n_dk);
    x->dv_own = talloc(x->n_dv);
    tpoison(x->grad, x->n_grad);
    tpoison(x->dk_own, x->n_dk);
    tpoison(x->dv_own, x->n_dv);
    a->dq = x->grad; a->dq_st = D + 1; a->dq_sh = (ptrdiff_t)T * (D + 1);
    a->dq_sb = (ptrdiff_t)H * T * (D + 1);
    a->dk = x->dk_own; a->dk_st = D + 1; a->dk_sh = (ptrdiff_t)S * (D + 1);
    a->dk_sb = (ptrdiff_t)H * S * (D + 1);
    a->dv = x->dv_own; a->dv_st = Dv + 1; a->dv_sh = (ptrdiff_t)S * (Dv + 1);
    a->dv_sb = (ptrdiff_t)H * S * (Dv + 1);
  }
  /* out and dout as [B, T, H, Dv], the layout a head merge gives. */
  size_t no = (size_t)B * T * H * Dv;
  x->out = talloc(no);
  tpoison(x->out, no);
  x->dout = trandom(no, -1, 1);
  a->out = x->out; a->o_st = (ptrdiff_t)H * Dv; a->o_sh = Dv; a->o_sb = (ptrdiff_t)T * H * Dv;
  a->dout = x->dout; a->do_st = a->o_st; a->do_sh = a->o_sh; a->do_sb = a->o_sb;
  x->lse = talloc((size_t)B * H * T);
  tpoison(x->lse, (size_t)B * H * T);
  a->lse = x->lse;
  if (c->mask_kind) {
    x->mask = talloc((size_t)B * (S + 3));
    for (int i = 0; i < B * (S + 3); ++i) x->mask[i] = trng(0, 1) < 0.3f ? 0.0f : 1.0f;
    if (c->mask_kind == 1)
      for (int j = 0; j < S; ++j) x->mask[j] = 0.0f;
    a->mask = x->mask;
    a->mask_sb = S + 3;
  }
  if (T > 0 && S > 0) run_forward(c, x);
}

static void release(bdata *x) {
  free(x->qkv); free(x->k_own); free(x->v_own); free(x->out); free(x->dout); free(x->lse);
  free(x->mask); free(x->grad); free(x->dk_own); free(x->dv_own);
}

static nnc_simd_status run_bwd(const bdata *x, int threads) {
  tpool tp = {threads, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, threads};
  size_t wsb = nnc_simd_attention_bwd_workspace_bytes(&x->a, threads ? threads : 1);
  void *ws = malloc(wsb);
  nnc_simd_error err;
  nnc_simd_status st = nnc_simd_attention_bwd(&x->a, threads ? &par : NULL, ws, wsb, &err);
  if (st) fprintf(stderr, "attention_bwd: %s\n", err.msg);
  free(ws);
  return st;
}

/* got (rows x cols, row stride ld) against ref: |got - ref| <= tol * max|ref|
 * (exactly 0 when ref is all 0); NaN fails. */
static int check_max(const char *what, const float *got, ptrdiff_t ld, const double *ref,
                     int rows, int cols, double tol) {
  double mx = 0;
  for (long i = 0; i < (long)rows * cols; ++i) mx = fmax(mx, fabs(ref[i]));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      double g = got[(ptrdiff_t)i * ld + j], r = ref[(long)i * cols + j];
      if (!(fabs(g - r) <= tol * mx)) {
        fprintf(stderr, "%s: [%d,%d] got %.9g expected %.9g (error %.3g of max |ref| %.3g > %.3g)\n",
                what, i, j, g, r, mx > 0 ? fabs(g - r) / mx : INFINITY, mx, tol);
        return 0;
      }
    }
  return 1;
}

/* The float64 reference of one (b, h): lse, dq, dk and dv. */
static int check(const bcase *c, const bdata *x, double tol) {
  const nnc_simd_attn_bwd_args *a = &x->a;
  int T = a->T, S = a->S, D = a->D, Dv = a->Dv;
  double *p = malloc(sizeof(double) * ((size_t)T * S + 1));
  double *ds = malloc(sizeof(double) * ((size_t)T * S + 1));
  double *rdq = malloc(sizeof(double) * ((size_t)T * D + 1));
  double *rdk = malloc(sizeof(double) * ((size_t)S * D + 1));
  double *rdv = malloc(sizeof(double) * ((size_t)S * Dv + 1));
  double *rl = malloc(sizeof(double) * ((size_t)T + 1));
  int ok = 1;
  for (int b = 0; b < a->batch && ok; ++b)
    for (int h = 0; h < a->heads && ok; ++h) {
      const float *q = a->q + b * a->q_sb + h * a->q_sh, *k = a->k + b * a->k_sb + h * a->k_sh;
      const float *v = a->v + b * a->v_sb + h * a->v_sh;
      const float *dout = a->dout + b * a->do_sb + h * a->do_sh;
      for (int i = 0; i < T; ++i) {
        double mx = -INFINITY, *pr = p + (size_t)i * S;
        for (int j = 0; j < S; ++j) {
          int masked = (a->causal && j > i + (S - T)) || (a->mask && a->mask[b * a->mask_sb + j] == 0);
          double s = 0;
          for (int d = 0; d < D; ++d) s += (double)q[i * a->q_st + d] * k[j * a->k_st + d];
          pr[j] = masked ? -INFINITY : s * a->scale;
          if (pr[j] > mx) mx = pr[j];
        }
        double sum = 0;
        for (int j = 0; j < S; ++j) sum += mx == -INFINITY ? 0 : exp(pr[j] - mx);
        rl[i] = sum > 0 ? mx + log(sum) : INFINITY;
        for (int j = 0; j < S; ++j) pr[j] = sum > 0 ? exp(pr[j] - rl[i]) : 0;
        /* delta from the exact output; dS = P (dP - delta). */
        double delta = 0;
        for (int e = 0; e < Dv; ++e) {
          double o = 0;
          for (int j = 0; j < S; ++j) o += pr[j] * v[j * a->v_st + e];
          delta += o * dout[i * a->do_st + e];
        }
        for (int j = 0; j < S; ++j) {
          double dp = 0;
          for (int e = 0; e < Dv; ++e) dp += (double)dout[i * a->do_st + e] * v[j * a->v_st + e];
          ds[(size_t)i * S + j] = pr[j] * (dp - delta);
        }
      }
      for (int i = 0; i < T; ++i)
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < S; ++j) acc += ds[(size_t)i * S + j] * k[j * a->k_st + d];
          rdq[i * D + d] = acc * a->scale;
        }
      for (int j = 0; j < S; ++j) {
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int i = 0; i < T; ++i) acc += ds[(size_t)i * S + j] * q[i * a->q_st + d];
          rdk[j * D + d] = acc * a->scale;
        }
        for (int e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int i = 0; i < T; ++i) acc += p[(size_t)i * S + j] * dout[i * a->do_st + e];
          rdv[j * Dv + e] = acc;
        }
      }
      char what[256];
      snprintf(what, sizeof what, "b%d h%d of B=%d H=%d T=%d S=%d D=%d Dv=%d causal=%d mask=%d "
               "layout=%d bcast=%d threads=%d", b, h, a->batch, a->heads, T, S, D, Dv, a->causal,
               c->mask_kind, c->layout, c->bcast_kv, c->threads);
      if (T > 0 && S > 0) {
        const float *lse = x->lse + ((ptrdiff_t)b * a->heads + h) * T;
        for (int i = 0; i < T && ok; ++i) {
          int good = rl[i] == INFINITY ? lse[i] == INFINITY
                                       : fabs(lse[i] - rl[i]) <= 1e-6 * (1 + fabs(rl[i]));
          if (!good) {
            fprintf(stderr, "lse %s: row %d got %.9g expected %.9g\n", what, i, (double)lse[i],
                    rl[i]);
            ok = 0;
          }
        }
      }
      char w2[300];
      snprintf(w2, sizeof w2, "dq %s", what);
      ok = ok && check_max(w2, a->dq + b * a->dq_sb + h * a->dq_sh, a->dq_st, rdq, T, D, tol);
      snprintf(w2, sizeof w2, "dk %s", what);
      ok = ok && check_max(w2, a->dk + b * a->dk_sb + h * a->dk_sh, a->dk_st, rdk, S, D, tol);
      snprintf(w2, sizeof w2, "dv %s", what);
      ok = ok && check_max(w2, a->dv + b * a->dv_sb + h * a->dv_sh, a->dv_st, rdv, S, Dv, tol);
    }
  /* The gap columns of the separate layout are never written. */
  if (ok && c->layout == 0) {
    for (size_t i = D; i < x->n_grad; i += (size_t)D + 1) ok &= isnan(x->grad[i]);
    for (size_t i = D; i < x->n_dk; i += (size_t)D + 1) ok &= isnan(x->dk_own[i]);
    for (size_t i = Dv; i < x->n_dv; i += (size_t)Dv + 1) ok &= isnan(x->dv_own[i]);
    if (!ok) fprintf(stderr, "a gap column was written\n");
  }
  free(p); free(ds); free(rdq); free(rdk); free(rdv); free(rl);
  return ok;
}

/* Relative to max |ref| per (batch, head): 1e-5. dS = P (dP - delta) cancels
 * when dP ~ delta, so its float error is about 1e-7 of |dP| + |delta|, not of
 * |dS|; with D and Dv up to 64 and the sums over 150 keys, a few 1e-6 of
 * max |ref| is what float allows. */
#define TOL 1e-5

static int run(const bcase *c) {
  bdata x;
  setup(c, &x);
  assert_int_equal(run_bwd(&x, c->threads), NNC_SIMD_OK);
  int ok = check(c, &x, TOL);
  release(&x);
  return ok;
}

static bcase mk(int B, int H, int T, int S, int D, int Dv) {
  bcase c;
  memset(&c, 0, sizeof c);
  c.B = B; c.H = H; c.T = T; c.S = S; c.D = D; c.Dv = Dv; c.threads = 3;
  return c;
}

static void test_odd_sizes(void **state) {
  (void)state;
  int fails = 0;
  for (int causal = 0; causal < 2; ++causal)
    for (int threads = 0; threads < 4; threads += 3) {
      bcase c = mk(3, 5, 17, 17, 5, 7);
      c.causal = causal;
      c.threads = threads;
      fails += !run(&c);
    }
  assert_int_equal(fails, 0);
}

/* Causal with T > S (the first T - S queries see nothing) and T < S. */
static void test_causal_shapes(void **state) {
  (void)state;
  int fails = 0;
  static const int ts[][2] = {{23, 9}, {9, 23}, {70, 5}, {5, 140}};
  for (int i = 0; i < 4; ++i)
    for (int m = 0; m < 2; ++m) {
      bcase c = mk(2, 3, ts[i][0], ts[i][1], 8, 6);
      c.causal = 1;
      c.mask_kind = m ? 2 : 0;
      c.threads = i % 2 ? 3 : 1;
      fails += !run(&c);
    }
  bcase c = mk(2, 3, 23, 9, 8, 6);
  fails += !run(&c);
  c = mk(2, 3, 9, 23, 8, 6);
  fails += !run(&c);
  assert_int_equal(fails, 0);
}

/* Batch 0's mask is all zeros: its queries see nothing (dq = 0), its keys
 * get nothing (dk = dv = 0). */
static void test_masks(void **state) {
  (void)state;
  int fails = 0;
  for (int causal = 0; causal < 2; ++causal)
    for (int kind = 1; kind < 3; ++kind) {
      bcase c = mk(3, 2, 19, 70, 8, 5);
      c.causal = causal;
      c.mask_kind = kind;
      fails += !run(&c);
    }
  assert_int_equal(fails, 0);
}

/* No keys: dq is zeros; no queries: dk and dv are zeros; empty rows. */
static void test_empty(void **state) {
  (void)state;
  int fails = 0;
  bcase c = mk(2, 3, 7, 0, 4, 3);
  fails += !run(&c);
  c = mk(2, 3, 0, 7, 4, 3);
  fails += !run(&c);
  c = mk(2, 3, 0, 7, 4, 3);
  c.causal = 1;
  c.threads = 0;
  fails += !run(&c);
  /* D == 0: only dv exists; Dv == 0: dq and dk are zeros. */
  c = mk(2, 3, 6, 9, 0, 3);
  c.causal = 1;
  fails += !run(&c);
  c = mk(2, 3, 6, 9, 4, 0);
  c.mask_kind = 2;
  fails += !run(&c);
  assert_int_equal(fails, 0);
}

static void test_layouts(void **state) {
  (void)state;
  int fails = 0;
  for (int causal = 0; causal < 2; ++causal) {
    bcase c = mk(3, 2, 33, 41, 12, 9);
    c.bcast_kv = 1;
    c.causal = causal;
    c.mask_kind = 2;
    fails += !run(&c);
    c = mk(2, 3, 37, 37, 16, 16);
    c.layout = 1;
    c.causal = causal;
    fails += !run(&c);
  }
  assert_int_equal(fails, 0);
}

/* Past the blocks in both directions (several query and key blocks). */
static void test_large(void **state) {
  (void)state;
  int fails = 0;
  for (int causal = 0; causal < 2; ++causal) {
    bcase c = mk(1, 2, 150, 150, 64, 64);
    c.causal = causal;
    fails += !run(&c);
    c = mk(2, 2, 150, 150, 64, 64);
    c.causal = causal;
    c.mask_kind = 2;
    c.layout = 1;
    c.threads = 2;
    fails += !run(&c);
  }
  bcase c = mk(1, 1, 130, 200, 64, 48);
  c.causal = 1;
  fails += !run(&c);
  assert_int_equal(fails, 0);
}

/* The same bits from 1, 2 and 3 threads: B*H = 2 runs both orders (one
 * (batch, head) a task on one thread, the two passes on more), B*H = 15
 * the fused order on all. */
static void test_threads_bitwise(void **state) {
  (void)state;
  static const int shapes[][7] = {{1, 2, 150, 150, 64, 64, 1}, {1, 2, 150, 150, 64, 64, 0},
                                  {3, 5, 17, 17, 5, 7, 1},     {1, 2, 40, 100, 24, 8, 1},
                                  {2, 1, 100, 40, 8, 24, 1}};
  for (int s = 0; s < 5; ++s) {
    bcase c = mk(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
                 shapes[s][5]);
    c.causal = shapes[s][6];
    c.mask_kind = s == 3 ? 2 : 0;
    bdata x;
    setup(&c, &x);
    float *ref[3];
    size_t n[3] = {x.n_grad, x.n_dk, x.n_dv};
    float *bufs[3] = {x.grad, x.dk_own, x.dv_own};
    assert_int_equal(run_bwd(&x, 0), NNC_SIMD_OK);
    c.threads = 0;
    assert_true(check(&c, &x, TOL));
    for (int i = 0; i < 3; ++i) {
      ref[i] = talloc(n[i]);
      memcpy(ref[i], bufs[i], n[i] * sizeof(float));
    }
    for (int t = 1; t <= 3; ++t) {
      for (int i = 0; i < 3; ++i) tpoison(bufs[i], n[i]);
      assert_int_equal(run_bwd(&x, t), NNC_SIMD_OK);
      for (int i = 0; i < 3; ++i)
        if (memcmp(ref[i], bufs[i], n[i] * sizeof(float)) != 0) {
          fprintf(stderr, "shape %d: %s differs between 1 and %d threads\n", s,
                  i == 0 ? "dq" : i == 1 ? "dk" : "dv", t);
          fail();
        }
    }
    for (int i = 0; i < 3; ++i) free(ref[i]);
    release(&x);
  }
}

static void test_errors(void **state) {
  (void)state;
  bcase c = mk(1, 2, 4, 4, 4, 4);
  bdata x;
  setup(&c, &x);
  size_t wsb = nnc_simd_attention_bwd_workspace_bytes(&x.a, 1);
  void *ws = malloc(wsb);
  nnc_simd_error err;
  nnc_simd_attn_bwd_args b = x.a;
  b.S = -1;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "S=-1"));
  b = x.a; b.lse = NULL;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "expected q, k, v, out, dout and lse"));
  b = x.a; b.dk = NULL;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "expected dq, dk and dv"));
  b = x.a; b.dv_st = 3;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "dv_st=3"));
  b = x.a; b.dq_sh = 0;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "dq_sh=0"));
  b = x.a; b.q_st = -4;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "strides >= 0"));
  b = x.a; b.dq = x.dout;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "overlapping"));
  b = x.a; b.dv = (float *)x.a.k;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "overlapping"));
  assert_int_equal(nnc_simd_attention_bwd(&x.a, NULL, ws, 4, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "workspace"));
  tpool tp = {2, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, 0};
  assert_int_equal(nnc_simd_attention_bwd(&x.a, &par, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "nthreads"));
  assert_int_equal(nnc_simd_attention_bwd(NULL, NULL, ws, wsb, &err), NNC_SIMD_E_ARG);
  for (size_t i = 0; i < x.n_grad; ++i) assert_true(isnan(x.grad[i]));
  for (size_t i = 0; i < x.n_dk; ++i) assert_true(isnan(x.dk_own[i]));
  for (size_t i = 0; i < x.n_dv; ++i) assert_true(isnan(x.dv_own[i]));
  /* Nothing to do: no batch, or nothing that exists. */
  b = x.a; b.batch = 0;
  assert_int_equal(nnc_simd_attention_bwd(&b, NULL, NULL, 0, &err), NNC_SIMD_OK);
  free(ws);
  release(&x);
}

int main(void) {
  trng_seed(7);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_odd_sizes),  cmocka_unit_test(test_causal_shapes),
      cmocka_unit_test(test_masks),      cmocka_unit_test(test_empty),
      cmocka_unit_test(test_layouts),    cmocka_unit_test(test_large),
      cmocka_unit_test(test_threads_bitwise), cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
