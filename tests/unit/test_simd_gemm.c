/* tests/unit/test_simd_gemm.c — nnc_simd_gemm against a float64 GEMM
 * written here: odd sizes, both A and both B layouts, every activation, bias,
 * residual, both prologues, alpha, batches, thread counts, and bad
 * arguments. Outputs (and the padding around them) are poisoned with NaN
 * first, so an unwritten element or a write outside the matrix fails. */
#include "test_simd_util.h"

#include "gemm_internal.h"

typedef struct gcase {
  int M, N, K, batch;
  int trans;
  int a_trans;        /* A stored [K,M] */
  nnc_simd_act act;
  int bias, res;      /* res 2: the residual multiplies (residual_mul) */
  nnc_simd_prologue pro;
  int threads;        /* 0: no parallel_for */
  float alpha;
  int pad;            /* extra elements per row of every matrix */
  int bcast_b;        /* stride_b = 0 */
  nnc_simd_aux aux;   /* SAVE: aux written and checked; ACT_GRAD: aux random, read */
  int packed;         /* B packed first (nnc_simd_gemm_pack_b), read through b_packed */
  int inplace;        /* a_inplace: A's whole MR-row panels read in place */
  nnc_simd_windows win;   /* KH > 0: A is the windows of an image (M, K from it) */
  nnc_simd_windows pool;  /* KH > 0: C is max-pooled by these windows (C has M / (KH*KW) rows) */
} gcase;

/* Element (m, k) of the windows w of image x, as nnc_simd_windows defines it. */
static float win_at(const nnc_simd_windows *w, const float *x, int m, int k) {
  int img = m / (w->OH * w->OW), oh = m / w->OW % w->OH, ow = m % w->OW;
  int t = k / w->C, ih = oh * w->SH - w->PH + t / w->KW * w->DH, iw = ow * w->SW - w->PW + t % w->KW * w->DW;
  if (ih < 0 || ih >= w->H || iw < 0 || iw >= w->W) return 0.0f;
  return x[(((size_t)img * w->H + ih) * w->W + iw) * w->C + k % w->C];
}

static const char *act_name(nnc_simd_act a) {
  static const char *n[] = {"none", "relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "tanh"};
  return (unsigned)a < 7 ? n[a] : "?";
}

/* Row i of P(A) in float64. */
static void ref_prologue(const gcase *c, const float *a, const float *gamma, const float *beta,
                         double *out) {
  double mean = 0, var = 0;
  for (int k = 0; k < c->K; ++k) mean += a[k];
  mean = c->K ? mean / c->K : 0;
  for (int k = 0; k < c->K; ++k) var += (a[k] - mean) * (a[k] - mean);
  var = c->K ? var / c->K : 0;
  double ms = 0;
  for (int k = 0; k < c->K; ++k) ms += (double)a[k] * a[k];
  ms = c->K ? ms / c->K : 0;
  const double eps = 1e-5;
  for (int k = 0; k < c->K; ++k) {
    if (c->pro == NNC_SIMD_PRO_LAYERNORM)
      out[k] = (a[k] - mean) / sqrt(var + eps) * gamma[k] + beta[k];
    else if (c->pro == NNC_SIMD_PRO_RMSNORM)
      out[k] = a[k] / sqrt(ms + eps) * gamma[k];
    else
      out[k] = a[k];
  }
}

static int run_case(const gcase *c) {
  int M = c->M, N = c->N, K = c->K, nb = c->batch;
  ptrdiff_t lda = (c->a_trans ? M : K) + c->pad, ldb = (c->trans ? K : N) + c->pad, ldc = N + c->pad,
            ldr = N + 2 * c->pad + 1;
  ptrdiff_t brows = c->trans ? N : K;
  const int Mc = c->pool.KH ? M / (c->pool.KH * c->pool.KW) : M;   /* rows of C */
  ptrdiff_t sa = (c->a_trans ? K : M) * lda, sb = c->bcast_b ? 0 : brows * ldb, sc = Mc * ldc, sr = M * ldr;
  if (c->win.KH) sa = (ptrdiff_t)(M / (c->win.OH * c->win.OW)) * c->win.H * c->win.W * c->win.C;
  size_t na = (size_t)(nb * sa), nbb = (size_t)(c->bcast_b ? brows * ldb : nb * sb),
         nc = (size_t)(nb * sc), nr = (size_t)(nb * sr);
  float *A = trandom(na, -1, 1), *B = trandom(nbb, -1, 1), *C = talloc(nc);
  float *R = c->res ? trandom(nr, -1, 1) : NULL;
  float *bias = c->bias ? trandom((size_t)N, -1, 1) : NULL;
  float *gamma = trandom((size_t)K, 0.5f, 1.5f), *beta = trandom((size_t)K, -0.5f, 0.5f);
  tpoison(C, nc);
  ptrdiff_t ldx = N + c->pad + 2, sx = M * ldx;
  size_t nx = (size_t)(nb * sx);
  float *X = c->aux == NNC_SIMD_AUX_ACT_GRAD ? trandom(nx, -3, 3) : c->aux ? talloc(nx) : NULL;
  if (c->aux == NNC_SIMD_AUX_SAVE) tpoison(X, nx);
  double *xref = c->aux == NNC_SIMD_AUX_SAVE ? malloc(sizeof(double) * (size_t)(M * N + 1)) : NULL;

  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = M; g.N = N; g.K = K; g.batch = nb;
  g.A = A; g.lda = lda; g.stride_a = sa; g.a_trans = c->a_trans;
  g.B = B; g.ldb = ldb; g.stride_b = sb; g.b_trans = c->trans;
  g.C = C; g.ldc = ldc; g.stride_c = sc;
  g.alpha = c->alpha;
  g.bias = bias;
  g.act = c->act;
  g.residual = R; g.ldr = ldr; g.stride_r = sr; g.residual_mul = c->res == 2;
  g.prologue = c->pro; g.gamma = gamma; g.beta = beta; g.eps = 1e-5f;
  g.aux_mode = c->aux; g.aux = X; g.ldx = ldx; g.stride_x = sx;
  g.a_inplace = c->inplace;
  g.win = c->win;
  g.pool = c->pool;
  tpool tp = {c->threads, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, c->threads};
  float *packed = NULL;
  if (c->packed) {
    packed = talloc(nnc_simd_gemm_packed_b_floats(&g) + 1);
    nnc_simd_gemm_pack_b(&g, c->threads ? &par : NULL, packed);   /* panels over the threads, as at load */
    g.b_packed = packed;
    g.B = NULL;   /* so that a read of B fails */
  }
  size_t wsb = nnc_simd_gemm_workspace_bytes(&g, c->threads ? c->threads : 1);
  void *ws = malloc(wsb);
  assert_non_null(ws);
  nnc_simd_error err = {0};
  nnc_simd_status st = nnc_simd_gemm(&g, c->threads ? &par : NULL, ws, wsb, &err);
  if (st != NNC_SIMD_OK) fprintf(stderr, "gemm failed: %s\n", err.msg);
  assert_int_equal(st, NNC_SIMD_OK);

  double *pa = malloc(sizeof(double) * (size_t)(M * K + 1));
  float *arow = malloc(sizeof(float) * (size_t)(K + 1));   /* row i of A, gathered */
  double *ref = malloc(sizeof(double) * (size_t)(M * N + 1));
  assert_non_null(pa);
  assert_non_null(arow);
  assert_non_null(ref);
  int ok = 1;
  for (int b = 0; b < nb && ok; ++b) {
    const float *Ab = A + b * sa, *Bb = B + b * sb, *Rb = R ? R + b * sr : NULL;
    for (int i = 0; i < M; ++i) {
      for (int k = 0; k < K; ++k)
        arow[k] = c->win.KH ? win_at(&c->win, Ab, i, k) : c->a_trans ? Ab[k * lda + i] : Ab[i * lda + k];
      ref_prologue(c, arow, gamma, beta, pa + (size_t)i * K);
    }
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) {
          double bv = c->trans ? Bb[j * ldb + k] : Bb[k * ldb + j];
          s += pa[(size_t)i * K + k] * bv;
        }
        s = c->alpha * s + (bias ? bias[j] : 0.0);
        if (xref) xref[(size_t)i * N + j] = s;
        if (c->aux == NNC_SIMD_AUX_ACT_GRAD) s *= tdact(c->act, X[b * sx + i * ldx + j]);
        else s = tact(c->act, s);
        if (Rb) s = c->res == 2 ? s * Rb[i * ldr + j] : s + Rb[i * ldr + j];
        ref[(size_t)i * N + j] = s;
      }
    char what[200];
    snprintf(what, sizeof what, "gemm %dx%dx%d batch %d/%d %s%s act=%s bias=%d res=%d pro=%d "
             "thr=%d alpha=%g aux=%d", M, N, K, b, nb, c->a_trans ? "A^T " : "", c->trans ? "B^T" : "B",
             act_name(c->act), c->bias, c->res, (int)c->pro, c->threads, (double)c->alpha, (int)c->aux);
    /* An f32 sum of K products errs by ~sqrt(K) eps of the pre-activation's
     * size, which tanh's output (|y| <= 1) no longer shares: at K = 700
     * that is 1.1e-5 of C's rms with AVX-512's summation order. */
    double tol = 1e-5 * fmax(1.0, sqrt(K / 64.0));
    if (c->pool.KH) {
      /* the max over each pool window of the [.., H, W, N] result, in place in ref */
      const nnc_simd_windows *w = &c->pool;
      for (int p = 0; p < Mc; ++p)
        for (int j = 0; j < N; ++j) {
          int img = p / (w->OH * w->OW), oh = p / w->OW % w->OH, ow = p % w->OW;
          double m = -INFINITY;
          for (int t = 0; t < w->KH * w->KW; ++t) {
            int row = (img * w->H + oh * w->KH + t / w->KW) * w->W + ow * w->KW + t % w->KW;
            double v = ref[(size_t)row * N + j];
            m = v > m || v != v ? v : m;
          }
          ref[(size_t)p * N + j] = m;
        }
    }
    ok = tcheck(what, C + b * sc, ldc, ref, Mc, N, tol);
    if (ok && xref) ok = tcheck(what, X + b * sx, ldx, xref, M, N, tol);
    /* The padding of each row must still be NaN: nothing written past N. */
    for (int i = 0; i < Mc && ok; ++i)
      for (ptrdiff_t j = N; j < ldc && (i + 1 < Mc || b + 1 < nb); ++j)
        if (!isnan(C[b * sc + i * ldc + j])) {
          fprintf(stderr, "%s: padding [%d,%td] was written\n", what, i, j);
          ok = 0;
          break;
        }
  }
  free(A); free(B); free(C); free(R); free(bias); free(gamma); free(beta); free(X); free(xref);
  free(ws); free(pa); free(ref); free(arow); free(packed);
  return ok;
}

static gcase base(int M, int N, int K) {
  gcase c;
  memset(&c, 0, sizeof c);
  c.M = M; c.N = N; c.K = K; c.batch = 1; c.alpha = 1.0f; c.threads = 3;
  return c;
}

static void test_sizes(void **state) {
  (void)state;
  static const int sz[] = {1, 3, 17, 129};
  int fails = 0;
  for (int t = 0; t < 2; ++t)
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        for (int k = 0; k < 4; ++k) {
          gcase c = base(sz[a], sz[b], sz[k]);
          c.trans = t;
          c.pad = (a + b + k) % 3;
          fails += !run_case(&c);
        }
  assert_int_equal(fails, 0);
}

/* Every flag combination on an odd size that has edge tiles both ways. */
static void test_flags(void **state) {
  (void)state;
  int fails = 0, n = 0;
  for (int t = 0; t < 2; ++t)
    for (int act = 0; act < NNC_SIMD_ACT_COUNT; ++act)
      for (int bias = 0; bias < 2; ++bias)
        for (int res = 0; res < 2; ++res)
          for (int pro = 0; pro < NNC_SIMD_PRO_COUNT; ++pro, ++n) {
            gcase c = base(23, 37, 41);
            c.trans = t;
            c.act = (nnc_simd_act)act;
            c.bias = bias;
            c.res = res;
            c.pro = (nnc_simd_prologue)pro;
            c.threads = n % 4;
            c.alpha = n % 3 == 0 ? 1.0f : n % 3 == 1 ? 0.375f : -1.5f;
            c.pad = n % 2;
            fails += !run_case(&c);
          }
  assert_int_equal(fails, 0);
}

/* K up to 3072 (GPT-2's MLP), with and without a prologue. */
static void test_large_k(void **state) {
  (void)state;
  int fails = 0;
  for (int t = 0; t < 2; ++t)
    for (int pro = 0; pro < NNC_SIMD_PRO_COUNT; ++pro) {
      gcase c = base(19, 45, 3072);
      c.trans = t;
      c.pro = (nnc_simd_prologue)pro;
      c.bias = 1;
      c.act = NNC_SIMD_ACT_GELU_TANH;
      c.threads = 2;
      fails += !run_case(&c);
    }
  assert_int_equal(fails, 0);
}

/* Sizes past every block: M > MC, N > NC, K > KC. */
static void test_blocks(void **state) {
  (void)state;
  gcase c = base(151, 3090, 263);
  c.bias = 1;
  c.res = 1;
  c.threads = 2;
  assert_true(run_case(&c));
  c.res = 2;   /* SwiGLU's up projection: times silu(gate) */
  c.act = NNC_SIMD_ACT_SILU;
  assert_true(run_case(&c));
  c = base(151, 3090, 263);
  c.trans = 1;
  c.threads = 0;
  c.pro = NNC_SIMD_PRO_LAYERNORM;
  assert_true(run_case(&c));
}

static void test_batched(void **state) {
  (void)state;
  int fails = 0;
  for (int t = 0; t < 2; ++t)
    for (int bc = 0; bc < 2; ++bc) {
      gcase c = base(17, 29, 13);
      c.batch = 5;
      c.trans = t;
      c.bcast_b = bc;
      c.res = 1;
      c.pad = 2;
      c.threads = 3;
      fails += !run_case(&c);
      c = base(1, 3, 1);
      c.batch = 7;
      c.trans = t;
      c.bcast_b = bc;
      c.threads = 2;
      fails += !run_case(&c);
    }
  assert_int_equal(fails, 0);
}

/* A stored [K,M] (a folded transpose): odd sizes past the blocks, both B
 * layouts, batches, the epilogue flags, thread counts. */
static void test_a_trans(void **state) {
  (void)state;
  static const int sz[] = {1, 7, 29, 151};
  int fails = 0, n = 0;
  for (int t = 0; t < 2; ++t)
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b, ++n) {
        gcase c = base(sz[a], sz[(b + 1) % 4], sz[b]);
        c.a_trans = 1;
        c.trans = t;
        c.pad = n % 3;
        c.threads = n % 4;
        c.bias = n % 2;
        c.res = (n / 2) % 3;
        c.act = (nnc_simd_act)(n % NNC_SIMD_ACT_COUNT);
        c.alpha = n % 3 == 2 ? -0.5f : 1.0f;
        fails += !run_case(&c);
      }
  gcase c = base(13, 300, 263);
  c.a_trans = 1;
  c.batch = 3;
  c.pad = 1;
  c.threads = 2;
  fails += !run_case(&c);
  assert_int_equal(fails, 0);
}

/* A training step's MLP: the GEMM that saves its activation's input (aux =
 * alpha A.B + bias, C = act(aux)) and the one that multiplies by its
 * derivative (C = act'(aux) * alpha A.B), every activation, odd sizes, both
 * layouts, batches, padding. */
static void test_aux(void **state) {
  (void)state;
  const int sizes[][3] = {{7, 13, 5}, {17, 33, 29}, {1, 1, 1}, {64, 48, 40}};
  int n = 0;
  for (int si = 0; si < 4; si++)
    for (int mode = NNC_SIMD_AUX_SAVE; mode <= NNC_SIMD_AUX_ACT_GRAD; ++mode)
      for (int act = 1; act < NNC_SIMD_ACT_COUNT; ++act) {
        gcase c = base(sizes[si][0], sizes[si][1], sizes[si][2]);
        c.aux = (nnc_simd_aux)mode;
        c.act = (nnc_simd_act)act;
        c.bias = mode == NNC_SIMD_AUX_SAVE;
        c.trans = n % 2;
        c.a_trans = n / 2 % 2;
        c.batch = 1 + n % 3;
        c.pad = n % 4;
        c.alpha = n % 5 ? 1.0f : 0.5f;
        n++;
        assert_true(run_case(&c));
      }
}

/* K == 0: the product is zero, C = act(bias) + residual. */
static void test_k_zero(void **state) {
  (void)state;
  for (int act = 0; act < NNC_SIMD_ACT_COUNT; ++act) {
    gcase c = base(5, 19, 0);
    c.bias = 1;
    c.res = act % 3;
    c.act = (nnc_simd_act)act;
    assert_true(run_case(&c));
  }
}

/* M == 0 or N == 0 writes nothing and succeeds, even with NULL pointers. */
static void test_empty(void **state) {
  (void)state;
  float C[4] = {NAN, NAN, NAN, NAN};
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 0; g.N = 4; g.K = 3; g.batch = 1; g.C = C; g.ldc = 4; g.alpha = 1;
  assert_int_equal(nnc_simd_gemm(&g, NULL, NULL, 0, NULL), NNC_SIMD_OK);
  g.M = 1; g.N = 0;
  assert_int_equal(nnc_simd_gemm(&g, NULL, NULL, 0, NULL), NNC_SIMD_OK);
  for (int i = 0; i < 4; ++i) assert_true(isnan(C[i]));
}

/* The split into tasks must not change a single bit of the result. */
/* B packed once and read by many calls (a scan's W_hh, a weight packed at
 * load): odd sizes, one row (a decode step), K in one pass, in a pass a
 * quarter past KC, and in several; N past NC; both B layouts, with every
 * epilogue operand; packed on 0-3 threads. */
static void test_packed_b(void **state) {
  (void)state;
  static const int ks[] = {1, 64, 300, 700};
  int fails = 0, n = 0;
  for (int t = 0; t < 2; ++t)
    for (int k = 0; k < 4; ++k)
      for (int wide = 0; wide < 2; ++wide, ++n) {
        gcase c = base(wide ? 13 : k % 2 ? 1 : 37, wide ? 3090 : 257, ks[k]);
        c.trans = t;
        c.packed = 1;
        c.bias = 1;
        c.res = n % 2;
        c.act = n % 3 ? NNC_SIMD_ACT_TANH : NNC_SIMD_ACT_NONE;
        c.threads = n % 4;
        c.pad = n % 3;
        fails += !run_case(&c);
      }
  assert_int_equal(fails, 0);
}

/* The address rule of a packed B (nnc_gemm_packed_b_at), which the GEMM
 * and an embedding's gather from a table held packed both read through:
 * every element of a B packed whole is where the rule says, at N past a
 * multiple of NR and K past twice KC, both layouts, packed on 0 and 3
 * threads; what the rule does not reach (the last panel's padding) is
 * zero, and nothing is written past nnc_simd_gemm_packed_b_floats. */
static void test_packed_b_at(void **state) {
  (void)state;
  const int N = 3 * NNC_GEMM_NR + 5, K = 2 * NNC_GEMM_KC + 37;
  for (int t = 0; t < 2; ++t)
    for (int threads = 0; threads < 4; threads += 3) {
      float *B = trandom((size_t)N * K, -1, 1);
      nnc_simd_gemm_args g = {.N = N, .K = K, .B = B, .ldb = t ? K : N, .b_trans = t};
      const size_t floats = nnc_simd_gemm_packed_b_floats(&g);
      float *packed = talloc(floats + 1), *seen = talloc(floats);
      tpoison(packed, floats + 1);
      memset(seen, 0, floats * sizeof *seen);
      tpool tp = {threads, 0};
      nnc_simd_par par = {tpool_parallel_for, &tp, threads};
      nnc_simd_gemm_pack_b(&g, threads ? &par : NULL, packed);
      int fails = 0;
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) {
          size_t at = nnc_gemm_packed_b_at(K, n, k);
          assert_true(at < floats);
          fails += packed[at] != (t ? B[(size_t)n * K + k] : B[(size_t)k * N + n]);
          seen[at] = 1;
        }
      for (size_t i = 0; i < floats; ++i) fails += !seen[i] && packed[i] != 0.0f;
      assert_int_equal(fails, 0);
      assert_true(isnan(packed[floats]));
      free(B), free(packed), free(seen);
    }
}

/* A read in place (a_inplace, a scan's rows of [h | x_t]): rows a whole
 * number of MR-row panels, a short last one (packed), one row, and more
 * than MC; K in one pass and in several; padded rows (lda > K); batches;
 * packed B; epilogues; thread counts (tasks split along M); and where it
 * must not apply (A transposed, a prologue, N over several tasks), the
 * flag ignored. */
static void test_a_inplace(void **state) {
  (void)state;
  static const int ms[] = {1, 7, 8, 12, 13, 32, 37, 401};
  static const int ks[] = {1, 72, 700};
  int fails = 0, n = 0;
  for (int m = 0; m < 8; ++m)
    for (int k = 0; k < 3; ++k, ++n) {
      gcase c = base(ms[m], n % 2 ? 256 : 29, ks[k]);
      c.inplace = 1;
      c.trans = n % 2;
      c.packed = n % 3 == 0;
      c.bias = n % 2;
      c.res = n % 3 == 1;
      c.act = n % 4 ? NNC_SIMD_ACT_NONE : NNC_SIMD_ACT_SIGMOID;
      c.threads = n % 3;
      c.pad = n % 4;
      c.batch = n % 5 == 0 && !c.packed ? 2 : 1;   /* a packed B is batch 1 only */
      fails += !run_case(&c);
    }
  gcase t = base(37, 64, 72);
  t.inplace = 1;
  t.a_trans = 1;
  fails += !run_case(&t);
  t.a_trans = 0;
  t.pro = NNC_SIMD_PRO_LAYERNORM;
  fails += !run_case(&t);
  gcase w = base(37, 5000, 72);
  w.inplace = 1;
  w.threads = 3;
  fails += !run_case(&w);
  assert_int_equal(fails, 0);
}

/* A case whose A is the windows of `images` images of h x w x ch. */
static gcase win_case(int images, int h, int w, int ch, int N, int kh, int kw, int s, int pad, int dil) {
  nnc_simd_windows win = {h, w, ch, 0, 0, kh, kw, s, s, pad, pad, dil, dil};
  win.OH = (h + 2 * pad - dil * (kh - 1) - 1) / s + 1;
  win.OW = (w + 2 * pad - dil * (kw - 1) - 1) / s + 1;
  gcase c = base(images * win.OH * win.OW, N, kh * kw * ch);
  c.win = win;
  c.trans = 1;
  return c;
}

/* A as an image's windows (win): output rows that hold whole MR-row
 * panels and ones that do not (the panels that cross output rows or the
 * image's border are gathered), stride, padding and dilation, one channel
 * and many (K in several KC passes, passes that start inside a tap),
 * N in one task and several (A then packed whole first), epilogues and
 * thread counts; then the windows refused where they cannot apply. */
static void test_windows(void **state) {
  (void)state;
  int fails = 0;
  /* MNIST's conv2 at 2 images: 24 output columns, two whole panels a row */
  gcase c = win_case(2, 26, 26, 32, 64, 3, 3, 1, 0, 1);
  c.bias = 1;
  c.act = NNC_SIMD_ACT_RELU;
  fails += !run_case(&c);
  c.threads = 0;
  fails += !run_case(&c);
  fails += !run_case((c = win_case(3, 28, 28, 1, 32, 3, 3, 1, 0, 1), &c));    /* one channel: runs of 1 */
  fails += !run_case((c = win_case(2, 9, 31, 8, 17, 3, 3, 1, 1, 1), &c));     /* padding, N edge */
  fails += !run_case((c = win_case(1, 15, 40, 5, 40, 5, 3, 2, 2, 1), &c));    /* stride 2, odd channels */
  fails += !run_case((c = win_case(2, 20, 33, 3, 24, 3, 3, 1, 2, 2), &c));    /* dilation */
  fails += !run_case((c = win_case(1, 12, 30, 100, 33, 3, 3, 1, 1, 1), &c));  /* K 900: several passes */
  c = win_case(1, 8, 40, 16, 300, 1, 1, 1, 0, 1);                              /* 1 x 1, wide N */
  c.res = 1;
  fails += !run_case(&c);
  c = win_case(2, 14, 30, 64, 5000, 3, 3, 1, 1, 1);                            /* N over tasks: A packed first */
  c.packed = 1;
  fails += !run_case(&c);
  assert_int_equal(fails, 0);

  /* refused: K that is not KH*KW*C, a batch, a last window past the padded image */
  float x[64] = {0}, y[64], w[64] = {0};
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.win = (nnc_simd_windows){4, 4, 1, 2, 2, 3, 3, 1, 1, 0, 0, 1, 1};
  g.M = 4; g.N = 2; g.K = 8; g.batch = 1; g.A = x; g.B = w; g.ldb = 9; g.b_trans = 1; g.C = y; g.ldc = 2;
  g.alpha = 1;
  char ws[1 << 16];
  nnc_simd_error err = {0};
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "K = KH*KW*C = 9"));
  g.K = 9;
  g.win.OH = 3;
  g.M = 6;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "past it"));
  g.win.OH = 2;
  g.M = 4;
  g.batch = 2;
  g.stride_c = 8;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "batch 1"));
  g.batch = 1;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &err), NNC_SIMD_OK);
}

/* C max-pooled before it is stored (pool): MNIST's conv2, relu and 2 x 2
 * pool (windows read in place, one task's rows or many, serial), a plain
 * A with a 3 x 3 pool over a 6 x 9 image and N over several tasks, one
 * that pads N; and the pools it refuses. */
static void test_pool(void **state) {
  (void)state;
  int fails = 0;
  gcase c = win_case(2, 26, 26, 32, 64, 3, 3, 1, 0, 1);
  c.bias = 1;
  c.act = NNC_SIMD_ACT_RELU;
  c.pool = (nnc_simd_windows){24, 24, 64, 12, 12, 2, 2, 2, 2, 0, 0, 1, 1};
  for (int t = 0; t < 4; ++t) {
    c.threads = t;
    fails += !run_case(&c);
  }
  c = base(3 * 6 * 9, 600, 37);
  c.act = NNC_SIMD_ACT_TANH;
  c.pad = 3;
  c.pool = (nnc_simd_windows){6, 9, 600, 2, 3, 3, 3, 3, 3, 0, 0, 1, 1};
  fails += !run_case(&c);
  c = base(2 * 4 * 4, 19, 5);
  c.pool = (nnc_simd_windows){4, 4, 19, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1};
  c.threads = 2;
  fails += !run_case(&c);
  assert_int_equal(fails, 0);

  float a[64] = {0}, w[64] = {0}, y[64];
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = 16; g.N = 2; g.K = 1; g.batch = 1; g.A = a; g.lda = 1; g.B = w; g.ldb = 1; g.b_trans = 1; g.C = y;
  g.ldc = 2; g.alpha = 1;
  g.pool = (nnc_simd_windows){4, 4, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1};   /* padding */
  char ws[1 << 16];
  nnc_simd_error err = {0};
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "stride = kernel"));
  g.pool.PH = g.pool.PW = 0;
  g.residual = a;
  g.ldr = 2;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &err), NNC_SIMD_E_ARG);
  assert_non_null(strstr(err.msg, "without a residual"));
  g.residual = NULL;
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, sizeof ws, &err), NNC_SIMD_OK);
}

static void test_thread_counts_agree(void **state) {
  (void)state;
  int M = 67, N = 301, K = 300;
  float *A = trandom((size_t)M * K, -1, 1), *B = trandom((size_t)K * N, -1, 1);
  float *C0 = talloc((size_t)M * N), *C1 = talloc((size_t)M * N);
  nnc_simd_gemm_args g;
  memset(&g, 0, sizeof g);
  g.M = M; g.N = N; g.K = K; g.batch = 1;
  g.A = A; g.lda = K; g.B = B; g.ldb = N; g.C = C0; g.ldc = N; g.alpha = 1;
  g.act = NNC_SIMD_ACT_SILU;
  size_t wsb = nnc_simd_gemm_workspace_bytes(&g, 1);
  void *ws = malloc(wsb);
  assert_int_equal(nnc_simd_gemm(&g, NULL, ws, wsb, NULL), NNC_SIMD_OK);
  free(ws);
  g.C = C1;
  for (int t = 1; t <= 7; ++t) {
    tpool tp = {t, 0};
    nnc_simd_par par = {tpool_parallel_for, &tp, t};
    wsb = nnc_simd_gemm_workspace_bytes(&g, t);
    ws = malloc(wsb);
    tpoison(C1, (size_t)M * N);
    assert_int_equal(nnc_simd_gemm(&g, &par, ws, wsb, NULL), NNC_SIMD_OK);
    assert_memory_equal(C0, C1, sizeof(float) * (size_t)M * N);
    assert_true(t == 1 || tp.calls >= 1); /* the work went through the pool */
    free(ws);
  }
  free(A); free(B); free(C0); free(C1);
}

/* Expects E_ARG with a message containing `needle`, and C untouched. */
static void expect_error(const nnc_simd_gemm_args *g, const nnc_simd_par *par, void *ws,
                         size_t wsb, const char *needle) {
  nnc_simd_error err;
  memset(&err, 0, sizeof err);
  assert_int_equal(nnc_simd_gemm(g, par, ws, wsb, &err), NNC_SIMD_E_ARG);
  assert_int_equal(err.code, NNC_SIMD_E_ARG);
  if (!strstr(err.msg, needle)) fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, needle);
  assert_non_null(strstr(err.msg, needle));
  assert_non_null(strstr(err.msg, "nnc_simd_gemm"));
  /* A NULL err is allowed too. */
  assert_int_equal(nnc_simd_gemm(g, par, ws, wsb, NULL), NNC_SIMD_E_ARG);
}

static void test_errors(void **state) {
  (void)state;
  enum { M = 3, N = 5, K = 4 };
  float A[M * K] = {0}, B[K * N] = {0}, C[M * N];
  tpoison(C, M * N);
  nnc_simd_gemm_args g0;
  memset(&g0, 0, sizeof g0);
  g0.M = M; g0.N = N; g0.K = K; g0.batch = 1;
  g0.A = A; g0.lda = K; g0.B = B; g0.ldb = N; g0.C = C; g0.ldc = N; g0.alpha = 1;
  size_t wsb = nnc_simd_gemm_workspace_bytes(&g0, 4);
  void *ws = malloc(wsb);
  nnc_simd_gemm_args g;

  assert_int_equal(nnc_simd_gemm(NULL, NULL, ws, wsb, NULL), NNC_SIMD_E_ARG);
  g = g0; g.M = -1; expect_error(&g, NULL, ws, wsb, "M=-1");
  g = g0; g.batch = 0; expect_error(&g, NULL, ws, wsb, "batch >= 1");
  g = g0; g.lda = K - 1; expect_error(&g, NULL, ws, wsb, "lda >= K=4, found 3");
  g = g0; g.ldb = N - 1; expect_error(&g, NULL, ws, wsb, "ldb >= N=5");
  g = g0; g.a_trans = 1; g.lda = M - 1; expect_error(&g, NULL, ws, wsb, "lda >= M=3, found 2 (A is [K,M])");
  g = g0; g.a_trans = 1; g.lda = M; g.prologue = NNC_SIMD_PRO_LAYERNORM; g.gamma = A;
  expect_error(&g, NULL, ws, wsb, "no prologue with a_trans");
  g = g0; g.b_trans = 1; g.ldb = K - 1; expect_error(&g, NULL, ws, wsb, "[N,K]");
  g = g0; g.ldc = 2; expect_error(&g, NULL, ws, wsb, "ldc >= N=5, found 2");
  g = g0; g.A = NULL; expect_error(&g, NULL, ws, wsb, "inputs A and B");
  g = g0; g.C = NULL; expect_error(&g, NULL, ws, wsb, "output C");
  g = g0; g.act = NNC_SIMD_ACT_COUNT; expect_error(&g, NULL, ws, wsb, "unknown activation");
  g = g0; g.aux_mode = NNC_SIMD_AUX_COUNT; expect_error(&g, NULL, ws, wsb, "unknown aux mode");
  g = g0; g.aux_mode = NNC_SIMD_AUX_SAVE; g.act = NNC_SIMD_ACT_RELU;
  expect_error(&g, NULL, ws, wsb, "expected aux [M,N]");
  float aux[64];
  g.aux = aux; g.ldx = g.N; g.act = NNC_SIMD_ACT_NONE;
  expect_error(&g, NULL, ws, wsb, "expected an activation and no residual");
  g = g0; g.prologue = (nnc_simd_prologue)9; expect_error(&g, NULL, ws, wsb, "unknown prologue");
  g = g0; g.prologue = NNC_SIMD_PRO_RMSNORM; expect_error(&g, NULL, ws, wsb, "gamma");
  g = g0; g.residual = C + 2; g.ldr = N; expect_error(&g, NULL, ws, wsb, "overlap");
  g = g0; g.residual_mul = 1; expect_error(&g, NULL, ws, wsb, "expected a residual for residual_mul");
  g = g0; g.batch = 2; g.stride_a = M * K; g.stride_b = 0; g.stride_c = 0;
  expect_error(&g, NULL, ws, wsb, "stride_c");
  g = g0; expect_error(&g, NULL, ws, 8, "workspace");
  g = g0; expect_error(&g, NULL, NULL, wsb, "workspace");
  tpool tp = {0, 0};
  nnc_simd_par par = {tpool_parallel_for, &tp, 0};
  g = g0; expect_error(&g, &par, ws, wsb, "nthreads >= 1");
  for (int i = 0; i < M * N; ++i) assert_true(isnan(C[i]));
  free(ws);
}

int main(void) {
  trng_seed(1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sizes),        cmocka_unit_test(test_flags),
      cmocka_unit_test(test_large_k),      cmocka_unit_test(test_blocks),
      cmocka_unit_test(test_batched),      cmocka_unit_test(test_k_zero),      cmocka_unit_test(test_a_trans),
      cmocka_unit_test(test_aux),          cmocka_unit_test(test_packed_b),   cmocka_unit_test(test_packed_b_at),
      cmocka_unit_test(test_a_inplace), cmocka_unit_test(test_windows), cmocka_unit_test(test_pool),
      cmocka_unit_test(test_empty),        cmocka_unit_test(test_thread_counts_agree),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
