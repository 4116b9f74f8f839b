/* tests/unit/test_models.c — the showcase models: mlp, gpt2 and bert.
 *
 * Each model is loaded at small odd configurations and compiled; its
 * parameters are checked against the Hugging Face names and shapes (at the
 * full default configuration too); the fused schedule is evaluated against
 * the unfused graph on random weights; and each model is checked once against
 * a plain float64 implementation written here with explicit loops, reading
 * the same random weights, so a mistake in the model file itself (a wrong
 * permute, a missing residual) fails a test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "ir/schedule.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "ref/ref.h"

#ifndef NNC_SOURCE_ROOT
#define NNC_SOURCE_ROOT "."
#endif

/* ------------------------------------------------------------ loading */

typedef struct model {
  nnc_graph g;
  nnc_schedule s;
  bool scheduled;
} model;

static void model_free(model *m) {
  if (m->scheduled) nnc_schedule_free(&m->s);
  nnc_graph_free(&m->g);
}

/* Loads models/<name>.lua with the given -D overrides and compiles it
 * (train: its training step, as nnc --train). */
static void load_model_with(model *m, const char *name, const char *const *defines, int ndefines, bool train,
                            const nnc_compile_opts *co, nnc_recompute rc) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s.lua", NNC_SOURCE_ROOT, name);
  nnc_frontend_opts o = {.path = path, .defines = defines, .ndefines = ndefines, .training = train};
  nnc_error err = {0};
  memset(m, 0, sizeof *m);
  nnc_graph_init(&m->g);
  nnc_status st = nnc_frontend_load(&o, &m->g, &err);
  if (st != NNC_OK) fail_msg("loading %s: %s", path, err.msg);
  nnc_autodiff_opts ad = {.loss = "loss"};
  if (train && nnc_pass_autodiff(&m->g, &ad, &err) != NNC_OK) fail_msg("differentiating %s: %s", path, err.msg);
  int copies = 0;
  if (train && nnc_pass_recompute(&m->g, rc, &copies, &err) != NNC_OK) fail_msg("recomputing %s: %s", path, err.msg);
  if ((rc == NNC_RECOMPUTE_NONE) != (copies == 0))
    fail_msg("--recompute=%s copied %d nodes of %s", nnc_recompute_name(rc), copies, path);
  nnc_schedule_init(&m->s, &m->g);
  m->scheduled = true;
  st = nnc_compile_graph_for(&m->g, co, &m->s, &err);
  if (st != NNC_OK) fail_msg("compiling %s: %s", path, err.msg);
  assert_string_equal(m->g.name, name);
}

/* The training step of models/<name>.lua under --precision=prec. */
static void load_train_prec(model *m, const char *name, const char *const *defines, int ndefines,
                            const nnc_compile_opts *co, const char *prec) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s.lua", NNC_SOURCE_ROOT, name);
  nnc_frontend_opts o = {.path = path, .defines = defines, .ndefines = ndefines, .training = true};
  nnc_autodiff_opts ad = {.loss = "loss"};
  nnc_precision p;
  nnc_error err = {0};
  memset(m, 0, sizeof *m);
  nnc_graph_init(&m->g);
  nnc_status st = nnc_frontend_load(&o, &m->g, &err);
  if (!st) st = nnc_pass_autodiff(&m->g, &ad, &err);
  if (!st) st = nnc_precision_parse(prec, &p, &err);
  if (!st) st = nnc_pass_precision(&m->g, &p, &err);
  if (st) fail_msg("%s as %s: %s", path, prec, err.msg);
  nnc_schedule_init(&m->s, &m->g);
  m->scheduled = true;
  if (nnc_compile_graph_for(&m->g, co, &m->s, &err)) fail_msg("compiling %s as %s: %s", path, prec, err.msg);
}

static void load_model_as(model *m, const char *name, const char *const *defines, int ndefines, bool train,
                          const nnc_compile_opts *co) {
  load_model_with(m, name, defines, ndefines, train, co, NNC_RECOMPUTE_NONE);
}

static void load_model(model *m, const char *name, const char *const *defines, int ndefines) {
  load_model_as(m, name, defines, ndefines, false, NULL);
}

static int find_tensor(const nnc_graph *g, const int *ids, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(g->tensors[ids[i]].name, name) == 0) return ids[i];
  return -1;
}

static int param_id(const nnc_graph *g, const char *name) {
  int t = find_tensor(g, g->params, g->nparams, name);
  if (t < 0) fail_msg("no parameter %s", name);
  return t;
}

static int input_id(const nnc_graph *g, const char *name) {
  int t = find_tensor(g, g->inputs, g->ninputs, name);
  if (t < 0) fail_msg("no input %s", name);
  return t;
}

static int output_id(const nnc_graph *g, const char *name) {
  for (int i = 0; i < g->noutputs; i++)
    if (strcmp(g->outputs[i].name, name) == 0) return g->outputs[i].tensor;
  fail_msg("no output %s", name);
  return -1;
}

/* ------------------------------------------- expected parameter lists */

typedef struct expect {
  char name[96];
  int rank;
  int64_t dims[2];
} expect;

typedef struct expect_list {
  expect *e;
  int n, cap;
} expect_list;

static void want(expect_list *l, int rank, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void want(expect_list *l, int rank, int64_t d0, int64_t d1, const char *fmt, ...) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->e = realloc(l->e, (size_t)l->cap * sizeof *l->e);
    assert_non_null(l->e);
  }
  expect *e = &l->e[l->n++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->name, sizeof e->name, fmt, ap);
  va_end(ap);
  e->rank = rank;
  e->dims[0] = d0;
  e->dims[1] = d1;
}

/* The graph's parameters are exactly the expected ones (in any order), f32,
 * with constant shapes as listed. */
static void check_params(const nnc_graph *g, const expect_list *l) {
  assert_int_equal(g->nparams, l->n);
  for (int i = 0; i < l->n; i++) {
    const expect *e = &l->e[i];
    const nnc_tensor *t = &g->tensors[param_id(g, e->name)];
    assert_int_equal(t->kind, NNC_TENSOR_PARAM);
    assert_int_equal(t->dtype, NNC_F32);
    if (t->rank != e->rank) fail_msg("%s: rank %d, expected %d", e->name, t->rank, e->rank);
    for (int d = 0; d < e->rank; d++)
      if (!nnc_dim_eq_const(t->shape[d], e->dims[d]))
        fail_msg("%s: dim %d is not %lld", e->name, d + 1, (long long)e->dims[d]);
  }
}

/* A tensor's shape, each dim a constant (sym < 0) or one named symbol. */
typedef struct dimspec {
  const char *sym;
  int64_t k;
} dimspec;

static void check_shape(const nnc_graph *g, int t, nnc_dtype dtype, int rank, const dimspec *ds) {
  const nnc_tensor *x = &g->tensors[t];
  assert_int_equal(x->dtype, dtype);
  assert_int_equal(x->rank, rank);
  for (int d = 0; d < rank; d++) {
    nnc_dim want_d = nnc_dim_const(ds[d].k);
    if (ds[d].sym) {
      int s = nnc_graph_find_symbol(g, ds[d].sym);
      assert_true(s >= 0);
      want_d = nnc_dim_sym(s);
    }
    char a[64], b[64];
    if (!nnc_dim_eq(x->shape[d], want_d))
      fail_msg("%s dim %d: %s, expected %s", x->name, d + 1, nnc_dim_format(g, x->shape[d], a, sizeof a),
               nnc_dim_format(g, want_d, b, sizeof b));
  }
}

static void gpt2_expect(expect_list *l, int layers, int64_t d, int64_t vocab, int64_t ctx) {
  want(l, 2, vocab, d, "wte.weight");
  want(l, 2, ctx, d, "wpe.weight");
  for (int i = 0; i < layers; i++) {
    want(l, 1, d, 0, "h.%d.ln_1.weight", i);
    want(l, 1, d, 0, "h.%d.ln_1.bias", i);
    want(l, 2, d, 3 * d, "h.%d.attn.c_attn.weight", i);
    want(l, 1, 3 * d, 0, "h.%d.attn.c_attn.bias", i);
    want(l, 2, d, d, "h.%d.attn.c_proj.weight", i);
    want(l, 1, d, 0, "h.%d.attn.c_proj.bias", i);
    want(l, 1, d, 0, "h.%d.ln_2.weight", i);
    want(l, 1, d, 0, "h.%d.ln_2.bias", i);
    want(l, 2, d, 4 * d, "h.%d.mlp.c_fc.weight", i);
    want(l, 1, 4 * d, 0, "h.%d.mlp.c_fc.bias", i);
    want(l, 2, 4 * d, d, "h.%d.mlp.c_proj.weight", i);
    want(l, 1, d, 0, "h.%d.mlp.c_proj.bias", i);
  }
  want(l, 1, d, 0, "ln_f.weight");
  want(l, 1, d, 0, "ln_f.bias");
}

static void bert_expect(expect_list *l, int layers, int64_t hidden, int64_t inter, int64_t vocab,
                        int64_t positions, int64_t types) {
  want(l, 2, vocab, hidden, "embeddings.word_embeddings.weight");
  want(l, 2, positions, hidden, "embeddings.position_embeddings.weight");
  want(l, 2, types, hidden, "embeddings.token_type_embeddings.weight");
  want(l, 1, hidden, 0, "embeddings.LayerNorm.weight");
  want(l, 1, hidden, 0, "embeddings.LayerNorm.bias");
  for (int i = 0; i < layers; i++) {
    static const char *const qkv[] = {"query", "key", "value"};
    for (int j = 0; j < 3; j++) {
      want(l, 2, hidden, hidden, "encoder.layer.%d.attention.self.%s.weight", i, qkv[j]);
      want(l, 1, hidden, 0, "encoder.layer.%d.attention.self.%s.bias", i, qkv[j]);
    }
    want(l, 2, hidden, hidden, "encoder.layer.%d.attention.output.dense.weight", i);
    want(l, 1, hidden, 0, "encoder.layer.%d.attention.output.dense.bias", i);
    want(l, 1, hidden, 0, "encoder.layer.%d.attention.output.LayerNorm.weight", i);
    want(l, 1, hidden, 0, "encoder.layer.%d.attention.output.LayerNorm.bias", i);
    want(l, 2, inter, hidden, "encoder.layer.%d.intermediate.dense.weight", i);
    want(l, 1, inter, 0, "encoder.layer.%d.intermediate.dense.bias", i);
    want(l, 2, hidden, inter, "encoder.layer.%d.output.dense.weight", i);
    want(l, 1, hidden, 0, "encoder.layer.%d.output.dense.bias", i);
    want(l, 1, hidden, 0, "encoder.layer.%d.output.LayerNorm.weight", i);
    want(l, 1, hidden, 0, "encoder.layer.%d.output.LayerNorm.bias", i);
  }
}

/* ------------------------------------------------- running the oracle */

/* Symbol sizes by name, for nnc_ref_init. */
static int64_t *sizes(const nnc_graph *g, int64_t b, int64_t t) {
  int64_t *sym = calloc((size_t)g->nsyms + 1, sizeof *sym);
  assert_non_null(sym);
  for (int i = 0; i < g->nsyms; i++) sym[i] = 1;
  int sb = nnc_graph_find_symbol(g, "B"), st = nnc_graph_find_symbol(g, "T");
  if (sb >= 0) sym[sb] = b;
  if (st >= 0) sym[st] = t;
  return sym;
}

static void ref_setup(nnc_ref *r, const model *m, const int64_t *sym, uint64_t seed) {
  nnc_error err = {0};
  if (nnc_ref_init(r, &m->g, sym, &err) != NNC_OK) fail_msg("%s", err.msg);
  if (nnc_ref_random_inputs(r, seed, &err) != NNC_OK) fail_msg("%s", err.msg);
}

/* Runs the unfused graph into r (set up by ref_setup). */
static void run_graph(nnc_ref *r) {
  nnc_error err = {0};
  if (nnc_ref_run_graph(r, &err) != NNC_OK) fail_msg("%s", err.msg);
}

static double max_abs(const double *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
  return m;
}

/* The schedule's outputs equal the graph's (relative error <= tol) for
 * several seeds, and are finite and not all zero. */
static void check_schedule_tol(const model *m, int64_t b, int64_t t, double tol) {
  int64_t *sym = sizes(&m->g, b, t);
  for (uint64_t seed = 1; seed <= 3; seed++) {
    nnc_ref graph, sched;
    nnc_error err = {0};
    ref_setup(&graph, m, sym, seed);
    ref_setup(&sched, m, sym, seed);
    run_graph(&graph);
    if (nnc_ref_run_schedule(&sched, &m->s, &err) != NNC_OK) fail_msg("%s", err.msg);
    for (int o = 0; o < m->g.noutputs; o++) {
      int id = m->g.outputs[o].tensor;
      int64_t n = nnc_ref_elems(&graph, id);
      assert_true(n > 0);
      assert_non_null(graph.val[id]);
      assert_non_null(sched.val[id]);
      double e = nnc_ref_rel_error(sched.val[id], graph.val[id], n);
      if (!(e <= tol))
        fail_msg("%s output %s seed %llu: schedule vs graph rel error %g", m->g.name,
                 m->g.outputs[o].name, (unsigned long long)seed, e);
      assert_true(max_abs(graph.val[id], n) > 0);
    }
    nnc_ref_free(&sched);
    nnc_ref_free(&graph);
  }
  free(sym);
}

static void check_schedule(const model *m, int64_t b, int64_t t) { check_schedule_tol(m, b, t, 1e-12); }

/* ------------------------------------- a float64 network, by hand */

/* y[r, n] = sum_k x[r, k] * W + b, W [n_out, k] or, when in_out, [k, n_out]. */
static void dense(const double *x, int64_t rows, int64_t k, const double *w, const double *b,
                  int64_t n_out, bool in_out, double *y) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t n = 0; n < n_out; n++) {
      double acc = b ? b[n] : 0.0;
      for (int64_t i = 0; i < k; i++) acc += x[r * k + i] * (in_out ? w[i * n_out + n] : w[n * k + i]);
      y[r * n_out + n] = acc;
    }
}

static void layer_norm(const double *x, int64_t rows, int64_t c, const double *g, const double *b,
                       double eps, double *y) {
  for (int64_t r = 0; r < rows; r++) {
    const double *v = x + r * c;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < c; i++) mean += v[i];
    mean /= (double)c;
    for (int64_t i = 0; i < c; i++) var += (v[i] - mean) * (v[i] - mean);
    var /= (double)c;
    for (int64_t i = 0; i < c; i++) y[r * c + i] = (v[i] - mean) / sqrt(var + eps) * g[i] + b[i];
  }
}

/* Multi-head attention on rows laid out [B, T, C] with head h in columns
 * h*D .. h*D+D-1 of q, k and v (all with row stride ld). A key is skipped
 * when causal and after the query, or when mask (per [b, t]) is 0. */
static void attend(const double *q, const double *k, const double *v, int64_t ld, int64_t batch,
                   int64_t T, int64_t heads, int64_t D, bool causal, const double *mask, double *y) {
  double *p = malloc((size_t)T * sizeof *p);
  assert_non_null(p);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < T; i++) {
        const double *qi = q + (b * T + i) * ld + h * D;
        double top = -INFINITY;
        for (int64_t j = 0; j < T; j++) {
          bool masked = (causal && j > i) || (mask && mask[b * T + j] == 0);
          double s = -INFINITY;
          if (!masked) {
            s = 0;
            for (int64_t e = 0; e < D; e++) s += qi[e] * k[(b * T + j) * ld + h * D + e];
            s /= sqrt((double)D);
          }
          p[j] = s;
          top = fmax(top, s);
        }
        double total = 0;
        for (int64_t j = 0; j < T; j++) total += p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - top);
        for (int64_t e = 0; e < D; e++) {
          double acc = 0;
          for (int64_t j = 0; j < T; j++) acc += p[j] / total * v[(b * T + j) * ld + h * D + e];
          y[(b * T + i) * (heads * D) + h * D + e] = acc;
        }
      }
  free(p);
}

static double *vec(int64_t n) {
  double *v = calloc((size_t)n, sizeof *v);
  assert_non_null(v);
  return v;
}

static const double *pval(const nnc_ref *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const double *pval(const nnc_ref *r, const char *fmt, ...) {
  char name[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const double *v = r->val[param_id(r->g, name)];
  assert_non_null(v);
  return v;
}

static void check_close(const double *got, const double *want_v, int64_t n, double tol, const char *what) {
  double e = nnc_ref_rel_error(got, want_v, n);
  if (!(e <= tol)) fail_msg("%s: rel error %g against the hand-written float64 model", what, e);
  assert_true(max_abs(want_v, n) > 0);
}

/* ---------------------------------------------------------------- mlp */

static void mlp_by_hand(const model *m, int64_t b, int64_t pixels, int64_t h1, int64_t h2,
                        int64_t classes, uint64_t seed) {
  int64_t *sym = sizes(&m->g, b, 1);
  nnc_ref r;
  ref_setup(&r, m, sym, seed);
  run_graph(&r);
  const double *x = r.val[input_id(&m->g, "image")];
  double *a = vec(b * h1), *c = vec(b * h2), *y = vec(b * classes);
  dense(x, b, pixels, pval(&r, "fc1.weight"), pval(&r, "fc1.bias"), h1, false, a);
  for (int64_t i = 0; i < b * h1; i++) a[i] = fmax(a[i], 0.0);
  dense(a, b, h1, pval(&r, "fc2.weight"), pval(&r, "fc2.bias"), h2, false, c);
  for (int64_t i = 0; i < b * h2; i++) c[i] = fmax(c[i], 0.0);
  dense(c, b, h2, pval(&r, "out.weight"), pval(&r, "out.bias"), classes, false, y);
  check_close(r.val[output_id(&m->g, "logits")], y, b * classes, 1e-12, "mlp logits");
  free(a), free(c), free(y);
  nnc_ref_free(&r);
  free(sym);
}

static void test_mlp_default(void **state) {
  (void)state;
  model m;
  load_model(&m, "mlp", NULL, 0);
  expect_list l = {0};
  want(&l, 2, 512, 784, "fc1.weight");
  want(&l, 1, 512, 0, "fc1.bias");
  want(&l, 2, 256, 512, "fc2.weight");
  want(&l, 1, 256, 0, "fc2.bias");
  want(&l, 2, 10, 256, "out.weight");
  want(&l, 1, 10, 0, "out.bias");
  check_params(&m.g, &l);
  free(l.e);
  assert_int_equal(m.g.ninputs, 1);
  assert_int_equal(m.g.noutputs, 1);
  check_shape(&m.g, input_id(&m.g, "image"), NNC_F32, 2, (dimspec[]){{"B", 0}, {NULL, 784}});
  check_shape(&m.g, output_id(&m.g, "logits"), NNC_F32, 2, (dimspec[]){{"B", 0}, {NULL, 10}});
  assert_int_equal(m.g.syms[nnc_graph_find_symbol(&m.g, "B")].max, 256);
  check_schedule(&m, 3, 1);
  mlp_by_hand(&m, 3, 784, 512, 256, 10, 7);
  mlp_by_hand(&m, 1, 784, 512, 256, 10, 8);
  model_free(&m);
}

static void test_mlp_small(void **state) {
  (void)state;
  static const char *const defs[] = {"pixels=29", "hidden1=17", "hidden2=13", "classes=7", "batch=9"};
  model m;
  load_model(&m, "mlp", defs, 5);
  assert_int_equal(m.g.syms[nnc_graph_find_symbol(&m.g, "B")].max, 9);
  check_shape(&m.g, output_id(&m.g, "logits"), NNC_F32, 2, (dimspec[]){{"B", 0}, {NULL, 7}});
  check_schedule(&m, 3, 1);
  check_schedule(&m, 9, 1);
  for (uint64_t seed = 11; seed <= 13; seed++) mlp_by_hand(&m, 5, 29, 17, 13, 7, seed);
  model_free(&m);
}

/* --------------------------------------------------------------- gpt2 */

static const char *const gpt2_small[] = {"layers=2", "d=24", "heads=3", "vocab=101", "ctx=32"};

static void test_gpt2_default_params(void **state) {
  (void)state;
  model m;
  load_model(&m, "gpt2", NULL, 0);
  expect_list l = {0};
  gpt2_expect(&l, 12, 768, 50257, 1024);
  assert_int_equal(l.n, 12 * 12 + 4);
  check_params(&m.g, &l);
  free(l.e);
  assert_int_equal(m.g.ninputs, 1);
  assert_int_equal(m.g.noutputs, 1);
  check_shape(&m.g, input_id(&m.g, "ids"), NNC_I32, 2, (dimspec[]){{"B", 0}, {"T", 0}});
  check_shape(&m.g, output_id(&m.g, "logits"), NNC_F32, 3,
              (dimspec[]){{"B", 0}, {"T", 0}, {NULL, 50257}});
  assert_int_equal(m.g.syms[nnc_graph_find_symbol(&m.g, "B")].max, 8);
  assert_int_equal(m.g.syms[nnc_graph_find_symbol(&m.g, "T")].max, 1024);
  model_free(&m);
}

/* The head split and merge around every attention were folded into it
 * (passes/fold_heads.c): its operands are views, and only `moves` copy
 * kernels are left in the schedule. fused_qkv: q, k and v are thirds of one
 * projection of width 3*width, else three projections of their own. */
static void check_heads_folded(const model *m, int moves, bool fused_qkv, int64_t width) {
  int nmove = 0, nattn = 0;
  for (int k = 0; k < m->s.nk; k++) {
    const nnc_kernel *kn = &m->s.k[k];
    nmove += kn->kind == NNC_KERNEL_MOVE;
    if (kn->kind != NNC_KERNEL_ATTENTION) continue;
    nattn++;
    const nnc_attention_desc *a = &kn->d.attn;
    for (int i = 0; i < 4; i++) assert_true(a->view[i].on);
    for (int i = 0; i < 3; i++) {
      assert_true(nnc_dim_is_const(a->view[i].offset));
      assert_int_equal(a->view[i].offset.k, fused_qkv ? i * width : 0);
      assert_true(nnc_dim_eq_const(a->view[i].si, fused_qkv ? 3 * width : width));
      assert_true(fused_qkv ? a->view[i].base == a->view[0].base : (i == 0 || a->view[i].base != a->view[0].base));
    }
    assert_true(nnc_dim_eq_const(a->view[NNC_ATTN_OUT].si, width));
    /* the kernel reads the projection and writes the merged heads */
    bool reads = false, writes = false;
    for (int j = 0; j < kn->nin; j++) reads |= kn->in[j] == a->view[0].base;
    for (int j = 0; j < kn->nout; j++) writes |= kn->out[j] == a->view[NNC_ATTN_OUT].base;
    assert_true(reads && writes);
  }
  assert_true(nattn > 0);
  assert_int_equal(nmove, moves);
}

/* The training step folds the head split and merge of the backward too:
 * attention_grad reads q, k, v and out where the forward read and wrote them,
 * dout from the merge's gradient, and writes dq, dk, dv as thirds of the
 * concat that is the split's gradient; the schedule still computes every
 * gradient the graph does. */
static void test_gpt2_train_folded(void **state) {
  (void)state;
  model m;
  const char *d[] = {"layers=2", "d=24", "heads=3", "vocab=101", "ctx=32", "batch=3"};
  load_model_as(&m, "gpt2", d, 6, true, NULL);
  /* wpe's rows for T, the pad of their gradient and the odd-width dlogits^T */
  check_heads_folded(&m, 3, true, 24);
  int ngrad = 0;
  for (int k = 0; k < m.s.nk; k++) {
    const nnc_kernel *kn = &m.s.k[k];
    if (kn->kind != NNC_KERNEL_ATTENTION_GRAD) continue;
    ngrad++;
    const nnc_attention_grad_desc *a = &kn->d.attn_grad;
    for (int i = 0; i < 4; i++) assert_true(a->fwd.view[i].on && a->view[i].on);
    assert_true(nnc_dim_eq_const(a->view[NNC_ATTN_DOUT].si, 24));
    for (int i = 0; i < 3; i++) {
      const nnc_attn_view *v = &a->view[NNC_ATTN_DQ + i];
      assert_true(v->base == a->view[NNC_ATTN_DQ].base && nnc_dim_eq_const(v->si, 72));
      assert_int_equal(v->offset.k, 24 * i);
    }
    /* one output: the concat [B, T, 72] */
    assert_int_equal(kn->nout, 1);
    assert_int_equal(kn->out[0], a->view[NNC_ATTN_DQ].base);
  }
  assert_int_equal(ngrad, 2);
  check_schedule(&m, 3, 17);
  check_schedule(&m, 1, 1);
  model_free(&m);
}

/* Each MLP's GELU and its gradient fold into GEMMs: c_fc's GEMM writes the
 * GELU's input too (aux), c_proj's dX GEMM multiplies by gelu'(aux); no
 * gelu or act_grad kernel is left. For a target without (opencl), both
 * stay elementwise kernels. Both schedules compute what the graph does. */
static void test_gpt2_train_gelu(void **state) {
  (void)state;
  const char *d[] = {"layers=2", "d=24", "heads=3", "vocab=101", "ctx=32", "batch=3"};
  for (int plain = 0; plain < 2; plain++) {
    model m;
    nnc_compile_opts co = {.no_gemm_aux = plain};
    load_model_as(&m, "gpt2", d, 6, true, &co);
    int save = 0, grad = 0, elementwise = 0;
    for (int k = 0; k < m.s.nk; k++) {
      const nnc_kernel *kn = &m.s.k[k];
      if (kn->kind == NNC_KERNEL_GEMM) {
        const nnc_gemm_desc *g = &kn->d.gemm;
        save += g->aux_kind == NNC_AUX_SAVE;
        grad += g->aux_kind == NNC_AUX_ACT_GRAD;
        if (g->aux_kind != NNC_AUX_NONE) {
          assert_int_equal(g->act, NNC_OP_GELU);
          assert_true(g->gelu_tanh);
          assert_true(nnc_dim_eq_const(m.g.tensors[g->aux].shape[2], 96));
        }
        if (g->aux_kind == NNC_AUX_SAVE) assert_int_equal(kn->nout, 2);   /* out and aux */
      }
      for (int j = 0; j < kn->nnodes; j++) {
        nnc_op op = m.g.nodes[kn->nodes[j]].op;
        elementwise += kn->kind == NNC_KERNEL_ELEMENTWISE && (op == NNC_OP_GELU || op == NNC_OP_ACT_GRAD);
      }
    }
    assert_int_equal(save, plain ? 0 : 2);
    assert_int_equal(grad, plain ? 0 : 2);
    /* each block's two layernorm gradients add the residual's (norm_residual.c); ln_f's has none */
    int joined = 0, norms = 0;
    for (int n = 0; n < m.g.nnodes; n++) {
      const nnc_node *x = &m.g.nodes[n];
      if (x->dead || x->op != NNC_OP_LAYERNORM_GRAD) continue;
      norms++;
      joined += x->nin == 4;
    }
    assert_int_equal(norms, 5);
    assert_int_equal(joined, 4);
    for (int n = 0; n < m.g.nnodes; n++)   /* no add of a norm gradient's dx is left */
      if (!m.g.nodes[n].dead && m.g.nodes[n].op == NNC_OP_ADD)
        for (int i = 0; i < 2; i++) {
          int p = m.g.tensors[m.g.nodes[n].in[i]].producer;
          assert_false(p >= 0 && m.g.nodes[p].op == NNC_OP_LAYERNORM_GRAD);
        }
    assert_int_equal(elementwise, plain ? 4 : 0);
    check_schedule(&m, 3, 17);
    model_free(&m);
  }
}

/* Each linear's bias gradient rides its weight gradient's GEMM (cuBLASLt's
 * BGRADB on CUDA): dW = dy^T x also writes db = dy's column sums, so no
 * reduction kernel is left for the 4 linears of each block; for a target
 * without (c-simd, opencl) they stay reductions. Under bf16 the GEMM writes
 * both gradients as f32, the casts before the outputs folded in. Both
 * schedules compute what the graph does. */
static void test_gpt2_train_bias_grad(void **state) {
  (void)state;
  const char *d[] = {"layers=2", "d=24", "heads=3", "vocab=101", "ctx=32", "batch=3"};
  for (int v = 0; v < 3; v++) {
    model m;
    bool plain = v == 1, bf16 = v == 2;
    nnc_compile_opts co = {.no_gemm_bgrad = plain};
    if (bf16) load_train_prec(&m, "gpt2", d, 6, &co, "bf16");
    else load_model_as(&m, "gpt2", d, 6, true, &co);
    int fused = 0, sums = 0;
    for (int k = 0; k < m.s.nk; k++) {
      const nnc_kernel *kn = &m.s.k[k];
      if (kn->kind == NNC_KERNEL_GEMM && kn->d.gemm.bgrad_from != NNC_BGRAD_NONE) {
        const nnc_gemm_desc *g = &kn->d.gemm;
        fused++;
        /* GPT-2's Conv1D weights are [in, out]: dW = x^T dy, dy is B [rows, N] */
        assert_true(g->a_trans && g->bgrad_from == NNC_BGRAD_B && !g->b_trans);
        assert_int_equal(kn->nout, 2);   /* dW and db */
        assert_int_equal(kn->out[1], g->bgrad);
        const nnc_tensor *db = &m.g.tensors[g->bgrad], *b = &m.g.tensors[g->b];
        assert_int_equal(db->rank, 1);
        assert_true(nnc_dim_eq(db->shape[0], b->shape[1]));
        assert_int_equal(db->dtype, NNC_F32);
        assert_int_equal(m.g.tensors[g->out].dtype, NNC_F32);
        assert_int_equal(b->dtype, bf16 ? NNC_BF16 : NNC_F32);
      }
      for (int j = 0; j < kn->nnodes; j++) {
        const nnc_node *n = &m.g.nodes[kn->nodes[j]];
        /* the linears' bias gradients, named grad.h.<i>.{attn,mlp}.<linear> (the
         * other sum, grad.add, is wpe's over the batch) */
        sums += kn->kind != NNC_KERNEL_GEMM && n->op == NNC_OP_SUM &&
                strncmp(m.g.tensors[n->out[0]].name, "grad.h.", 7) == 0;
      }
    }
    assert_int_equal(fused, plain ? 0 : 8);
    assert_int_equal(sums, plain ? 8 : 0);
    /* bf16: a fused kernel rounds its result once, the graph after each op */
    check_schedule_tol(&m, 3, 17, bf16 ? 1e-6 : 1e-12);
    model_free(&m);
  }
}

/* --recompute: each level's schedule gives the outputs (loss, every
 * gradient) of the graph without recomputation, holds fewer bytes at its
 * peak than the level below, and copies only what its level names. */
static void test_gpt2_train_recompute(void **state) {
  (void)state;
  const char *d[] = {"layers=2", "d=24", "heads=3", "vocab=101", "ctx=32", "batch=3"};
  model base;
  load_model_as(&base, "gpt2", d, 6, true, NULL);
  int64_t *sym = sizes(&base.g, 3, 17);
  int64_t last_peak = base.s.plan.peak;
  for (int rc = NNC_RECOMPUTE_GELU; rc <= NNC_RECOMPUTE_BLOCK; rc++) {
    model m;
    load_model_with(&m, "gpt2", d, 6, true, NULL, (nnc_recompute)rc);
    int acts = 0, norms = 0, gemms = 0, attns = 0;
    for (int n = 0; n < m.g.nnodes; n++) {
      const nnc_node *x = &m.g.nodes[n];
      if (x->dead || !x->recompute) continue;
      acts += nnc_op_is_activation(x->op);
      norms += x->op == NNC_OP_LAYERNORM;
      gemms += x->op == NNC_OP_LINEAR;
      attns += x->op == NNC_OP_ATTENTION;
      /* a copy runs in a kernel of copies */
      const nnc_kernel *k = &m.s.k[m.s.kernel_of_node[n]];
      for (int j = 0; j < k->nnodes; j++) assert_true(m.g.nodes[k->nodes[j]].recompute);
    }
    assert_int_equal(acts, 2);   /* each layer's gelu */
    /* norm: ln_1, ln_2 and ln_f; block: not ln_f, after the last block */
    assert_int_equal(norms, rc == NNC_RECOMPUTE_GELU ? 0 : rc == NNC_RECOMPUTE_NORM ? 5 : 4);
    assert_int_equal(gemms, rc == NNC_RECOMPUTE_BLOCK ? 4 : 0);   /* c_attn and c_fc; c_proj's outputs feed the adds */
    assert_int_equal(attns, rc == NNC_RECOMPUTE_BLOCK ? 2 : 0);
    if (!(m.s.plan.peak < last_peak))
      fail_msg("--recompute=%s: peak %lld bytes, expected less than the level below's %lld",
               nnc_recompute_name((nnc_recompute)rc), (long long)m.s.plan.peak, (long long)last_peak);
    last_peak = m.s.plan.peak;
    for (uint64_t seed = 1; seed <= 2; seed++) {
      nnc_ref want, got;
      nnc_error err = {0};
      ref_setup(&want, &base, sym, seed);
      ref_setup(&got, &m, sym, seed);
      run_graph(&want);
      if (nnc_ref_run_schedule(&got, &m.s, &err) != NNC_OK) fail_msg("%s", err.msg);
      assert_int_equal(m.g.noutputs, base.g.noutputs);
      for (int o = 0; o < base.g.noutputs; o++) {
        assert_string_equal(m.g.outputs[o].name, base.g.outputs[o].name);
        int a = base.g.outputs[o].tensor, b = m.g.outputs[o].tensor;
        int64_t n = nnc_ref_elems(&want, a);
        assert_int_equal(nnc_ref_elems(&got, b), n);
        double e = nnc_ref_rel_error(got.val[b], want.val[a], n);
        if (!(e <= 1e-12))
          fail_msg("--recompute=%s output %s seed %llu: rel error %g against no recomputation",
                   nnc_recompute_name((nnc_recompute)rc), base.g.outputs[o].name, (unsigned long long)seed, e);
      }
      nnc_ref_free(&got);
      nnc_ref_free(&want);
    }
    model_free(&m);
  }
  free(sym);
  model_free(&base);
}

static void test_gpt2_small(void **state) {
  (void)state;
  model m;
  load_model(&m, "gpt2", gpt2_small, 5);
  expect_list l = {0};
  gpt2_expect(&l, 2, 24, 101, 32);
  check_params(&m.g, &l);
  free(l.e);
  check_shape(&m.g, output_id(&m.g, "logits"), NNC_F32, 3, (dimspec[]){{"B", 0}, {"T", 0}, {NULL, 101}});
  check_schedule(&m, 3, 17);
  check_schedule(&m, 1, 1);
  check_schedule(&m, 8, 32);
  check_heads_folded(&m, 1, true, 24);   /* the one move left: wpe's rows for T */
  model_free(&m);
}

/* One GPT-2 block, ln_f and the tied head, at d, heads, vocab; batch b, T. */
static void gpt2_by_hand(const model *m, int64_t b, int64_t T, int64_t d, int64_t heads, int64_t vocab,
                         uint64_t seed) {
  int64_t *sym = sizes(&m->g, b, T);
  nnc_ref r;
  ref_setup(&r, m, sym, seed);
  run_graph(&r);
  const double *ids = r.val[input_id(&m->g, "ids")];
  const double *wte = pval(&r, "wte.weight"), *wpe = pval(&r, "wpe.weight");
  int64_t rows = b * T, D = d / heads;
  double *x = vec(rows * d), *h = vec(rows * d), *qkv = vec(rows * 3 * d), *y = vec(rows * d);
  double *a = vec(rows * d), *f = vec(rows * 4 * d), *logits = vec(rows * vocab);
  for (int64_t bt = 0; bt < rows; bt++) {
    int64_t id = (int64_t)ids[bt], t = bt % T;
    assert_true(id >= 0 && id < vocab);
    for (int64_t c = 0; c < d; c++) x[bt * d + c] = wte[id * d + c] + wpe[t * d + c];
  }
  layer_norm(x, rows, d, pval(&r, "h.0.ln_1.weight"), pval(&r, "h.0.ln_1.bias"), 1e-5, h);
  dense(h, rows, d, pval(&r, "h.0.attn.c_attn.weight"), pval(&r, "h.0.attn.c_attn.bias"), 3 * d, true, qkv);
  attend(qkv, qkv + d, qkv + 2 * d, 3 * d, b, T, heads, D, true, NULL, y);
  dense(y, rows, d, pval(&r, "h.0.attn.c_proj.weight"), pval(&r, "h.0.attn.c_proj.bias"), d, true, a);
  for (int64_t i = 0; i < rows * d; i++) x[i] += a[i];
  layer_norm(x, rows, d, pval(&r, "h.0.ln_2.weight"), pval(&r, "h.0.ln_2.bias"), 1e-5, h);
  dense(h, rows, d, pval(&r, "h.0.mlp.c_fc.weight"), pval(&r, "h.0.mlp.c_fc.bias"), 4 * d, true, f);
  for (int64_t i = 0; i < rows * 4 * d; i++) {
    double v = f[i];
    f[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
  }
  dense(f, rows, 4 * d, pval(&r, "h.0.mlp.c_proj.weight"), pval(&r, "h.0.mlp.c_proj.bias"), d, true, a);
  for (int64_t i = 0; i < rows * d; i++) x[i] += a[i];
  layer_norm(x, rows, d, pval(&r, "ln_f.weight"), pval(&r, "ln_f.bias"), 1e-5, h);
  dense(h, rows, d, wte, NULL, vocab, false, logits);
  check_close(r.val[output_id(&m->g, "logits")], logits, rows * vocab, 1e-10, "gpt2 logits");
  free(x), free(h), free(qkv), free(y), free(a), free(f), free(logits);
  nnc_ref_free(&r);
  free(sym);
}

static void test_gpt2_one_layer_by_hand(void **state) {
  (void)state;
  static const char *const defs[] = {"layers=1", "d=24", "heads=3", "vocab=101", "ctx=32"};
  model m;
  load_model(&m, "gpt2", defs, 5);
  gpt2_by_hand(&m, 3, 17, 24, 3, 101, 5);
  gpt2_by_hand(&m, 2, 32, 24, 3, 101, 6);
  gpt2_by_hand(&m, 1, 1, 24, 3, 101, 7);
  model_free(&m);
}

/* -------------------------------------------------------------- llama */

/* The default config: LlamaForCausalLM's names and shapes (d 768, 12 layers,
 * 12 query heads over 4 kv heads of 64, ffn 2048, vocab 32000, no biases,
 * an untied head), 124,668,672 parameters; rope on q and k, and each
 * attention's k and v read by its 3 query heads without a copy (no kernel
 * writes a [B, 12, T, 64] k or v), in one attention kernel. */
static void test_llama_default_params(void **state) {
  (void)state;
  model m;
  load_model(&m, "llama", NULL, 0);
  assert_int_equal(m.g.nparams, 2 + 12 * 9 + 1);
  int64_t total = 0;
  for (int i = 0; i < m.g.nparams; i++) total += nnc_tensor_max_elems(&m.g, &m.g.tensors[m.g.params[i]]);
  assert_int_equal(total, 124668672);
  static const struct {
    const char *name;
    int64_t rows, cols;
  } want[] = {{"model.embed_tokens.weight", 32000, 768},
              {"model.layers.0.self_attn.q_proj.weight", 768, 768},
              {"model.layers.11.self_attn.k_proj.weight", 256, 768},
              {"model.layers.11.self_attn.v_proj.weight", 256, 768},
              {"model.layers.5.self_attn.o_proj.weight", 768, 768},
              {"model.layers.3.mlp.gate_proj.weight", 2048, 768},
              {"model.layers.3.mlp.up_proj.weight", 2048, 768},
              {"model.layers.3.mlp.down_proj.weight", 768, 2048},
              {"model.layers.7.input_layernorm.weight", 768, 0},
              {"model.layers.7.post_attention_layernorm.weight", 768, 0},
              {"model.norm.weight", 768, 0},
              {"lm_head.weight", 32000, 768}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int t = find_tensor(&m.g, m.g.params, m.g.nparams, want[i].name);
    if (t < 0) fail_msg("no parameter %s", want[i].name);
    const nnc_tensor *x = &m.g.tensors[t];
    assert_int_equal(x->rank, want[i].cols ? 2 : 1);
    assert_true(nnc_dim_eq_const(x->shape[0], want[i].rows));
    if (want[i].cols) assert_true(nnc_dim_eq_const(x->shape[1], want[i].cols));
  }
  check_shape(&m.g, output_id(&m.g, "logits"), NNC_F32, 3, (dimspec[]){{"B", 0}, {"T", 0}, {NULL, 32000}});
  int ropes = 0;
  for (int n = 0; n < m.g.nnodes; n++) {
    const nnc_node *nd = &m.g.nodes[n];
    if (nd->dead) continue;
    ropes += nd->op == NNC_OP_ROPE;
    for (int o = 0; o < nd->nout; o++) {
      const nnc_tensor *y = &m.g.tensors[nd->out[o]];
      bool heads12 = y->rank == 4 && nnc_dim_eq_const(y->shape[1], 12) && nnc_dim_eq_const(y->shape[3], 64);
      if (heads12 && nd->op != NNC_OP_ROPE && nd->op != NNC_OP_TRANSPOSE && nd->op != NNC_OP_RESHAPE)
        fail_msg("node %d (%s) writes a 12-head tensor", n, nnc_op_info_of(nd->op)->name);
    }
  }
  assert_int_equal(ropes, 2 * 12);
  /* causal grouped-query attention is one attention kernel a layer (k and v read with head stride 0) */
  int attn = 0;
  for (int k = 0; k < m.s.nk; k++) attn += m.s.k[k].kind == NNC_KERNEL_ATTENTION;
  assert_int_equal(attn, 12);
  model_free(&m);
}

/* nnc --generate of a LLaMA: each layer's grouped-query attention, with the
 * padding mask, is one kernel reading k and v from the kv caches in place
 * (their heads as h / G, no copy of the cache a step) and writing its
 * output where the head merge would; the kv_append outputs are not stored;
 * rope reads q and k where their projections wrote them (no head-split
 * copy): four copy kernels a layer, two ropes and two kv_appends. */
static void test_llama_generate_in_place(void **state) {
  (void)state;
  const char *d[] = {"layers=3", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101", "ctx=24", "batch=4"};
  char path[512];
  snprintf(path, sizeof path, "%s/models/llama.lua", NNC_SOURCE_ROOT);
  nnc_frontend_opts o = {.path = path, .defines = d, .ndefines = 8, .generating = true};
  nnc_error err = {0};
  model m;
  memset(&m, 0, sizeof m);
  nnc_graph_init(&m.g);
  if (nnc_frontend_load(&o, &m.g, &err)) fail_msg("loading %s: %s", path, err.msg);
  nnc_schedule_init(&m.s, &m.g);
  m.scheduled = true;
  if (nnc_compile_graph_for(&m.g, NULL, &m.s, &err)) fail_msg("compiling %s: %s", path, err.msg);
  int attn = 0;
  for (int k = 0; k < m.s.nk; k++) {
    const nnc_kernel *kn = &m.s.k[k];
    if (kn->kind != NNC_KERNEL_ATTENTION) continue;
    attn++;
    const nnc_attention_desc *a = &kn->d.attn;
    assert_true(a->causal && a->mask >= 0);
    for (int i = 1; i < 3; i++) {
      assert_true(a->view[i].on);
      const nnc_tensor *cache = &m.g.tensors[a->view[i].base];
      assert_int_equal(cache->kind, NNC_TENSOR_STATE);
      /* heads a capacity (24 rows of 8) apart */
      assert_true(nnc_dim_eq_const(a->view[i].sh, 24 * 8) && nnc_dim_eq_const(a->view[i].si, 8));
    }
    assert_true(a->view[NNC_ATTN_OUT].on && nnc_dim_eq_const(a->view[NNC_ATTN_OUT].si, 48));
  }
  assert_int_equal(attn, 3);
  int moves = 0, ropes = 0;
  for (int k = 0; k < m.s.nk; k++) {
    const nnc_kernel *kn = &m.s.k[k];
    if (kn->kind != NNC_KERNEL_MOVE) continue;
    moves++;
    if (m.g.nodes[kn->nodes[kn->nnodes - 1]].op != NNC_OP_ROPE) continue;
    ropes++;
    assert_true(kn->d.src.on);
    assert_int_equal(m.g.nodes[m.g.tensors[kn->d.src.base].producer].op, NNC_OP_LINEAR);
  }
  assert_int_equal(ropes, 2 * 3);
  assert_int_equal(moves, 4 * 3);
  for (int t = 0; t < m.g.ntensors; t++) {
    int p = m.g.tensors[t].producer;
    if (p >= 0 && !m.g.nodes[p].dead && m.g.nodes[p].op == NNC_OP_KV_APPEND)
      assert_int_equal(m.s.plan.buf[t].storage, NNC_STORE_NONE);
  }
  model_free(&m);
}

/* A --generate model compiled as for a target whose attention appends the
 * kv caches itself (attention_append: CUDA) or not (C SIMD, OpenCL). */
static void load_generate_opts(model *m, const char *name, const char *const *d, int nd, const nnc_compile_opts *co);

static void load_generate(model *m, const char *name, const char *const *d, int nd, bool fold) {
  nnc_compile_opts co = {.attention_append = fold};
  load_generate_opts(m, name, d, nd, &co);
}

static void load_generate_opts(model *m, const char *name, const char *const *d, int nd, const nnc_compile_opts *co) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s.lua", NNC_SOURCE_ROOT, name);
  nnc_frontend_opts o = {.path = path, .defines = d, .ndefines = nd, .generating = true};
  nnc_error err = {0};
  memset(m, 0, sizeof *m);
  nnc_graph_init(&m->g);
  if (nnc_frontend_load(&o, &m->g, &err)) fail_msg("loading %s: %s", path, err.msg);
  nnc_schedule_init(&m->s, &m->g);
  m->scheduled = true;
  if (nnc_compile_graph_for(&m->g, co, &m->s, &err)) fail_msg("compiling %s: %s", path, err.msg);
}

/* How many kernels hold a kv_append node, and how many of those are attentions. */
static void count_appends(const model *m, int *kernels, int *in_attention) {
  *kernels = *in_attention = 0;
  for (int k = 0; k < m->s.nk; k++) {
    const nnc_kernel *kn = &m->s.k[k];
    bool has = false;
    for (int i = 0; i < kn->nnodes; i++) has |= m->g.nodes[kn->nodes[i]].op == NNC_OP_KV_APPEND;
    *kernels += has;
    *in_attention += has && kn->kind == NNC_KERNEL_ATTENTION;
  }
}

/* The float64 reference runs m's folded schedule at B = 3, T = 2 and S = 5
 * keys (of which T are new) to the graph's outputs and caches within 1e-12
 * (the same values up to the order of the fused kernels' sums). */
static void schedule_equals_graph(const model *m, uint64_t seed, const char *what) {
  int64_t *sym = sizes(&m->g, 3, 2);
  int ss = nnc_graph_find_symbol(&m->g, "S");
  assert_true(ss >= 0);
  sym[ss] = 5;
  nnc_ref graph, sched;
  nnc_error err = {0};
  ref_setup(&graph, m, sym, seed);
  ref_setup(&sched, m, sym, seed);
  run_graph(&graph);
  if (nnc_ref_run_schedule(&sched, &m->s, &err) != NNC_OK) fail_msg("%s", err.msg);
  for (int o = 0; o < m->g.noutputs; o++) {
    int id = m->g.outputs[o].tensor;
    double e = nnc_ref_rel_error(sched.val[id], graph.val[id], nnc_ref_elems(&graph, id));
    if (!(e <= 1e-12)) fail_msg("%s output %s: schedule vs graph rel error %g", what, m->g.outputs[o].name, e);
  }
  for (int i = 0; i < m->g.nstates; i++) {
    int id = m->g.states[i];
    assert_non_null(sched.val[id]);
    double e = nnc_ref_rel_error(sched.val[id], graph.val[id], nnc_ref_elems(&graph, id));
    if (!(e <= 1e-12)) fail_msg("%s cache %s: schedule vs graph rel error %g", what, m->g.tensors[id].name, e);
  }
  nnc_ref_free(&sched);
  nnc_ref_free(&graph);
  free(sym);
}

/* fold_append: under --generate on a target whose attention writes the new
 * rows (CUDA), each layer's k and v appends run inside its attention kernel
 * (two kernels fewer a layer), reading the new rows where the kv_append
 * did (GPT-2: c_attn's output through the head split; LLaMA: k from rope's
 * output, v from the q|k|v projection), and no kv_append output is stored.
 * Without the capability (C SIMD, OpenCL) the schedule is as before. The
 * float64 reference runs GPT-2's folded schedule to the graph's logits and
 * the same caches, at S = 5 keys of which T = 2 are new. */
static void test_generate_append_folded(void **state) {
  (void)state;
  const char *g2[] = {"layers=2", "d=24", "heads=3", "vocab=101", "ctx=16", "batch=3"};
  const char *ll[] = {"layers=3", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101", "ctx=24", "batch=4"};
  const struct {
    const char *name;
    const char *const *d;
    int nd, layers;
  } cases[] = {{"gpt2", g2, 6, 2}, {"llama", ll, 8, 3}};
  for (int c = 0; c < 2; c++) {
    model plain, folded;
    load_generate(&plain, cases[c].name, cases[c].d, cases[c].nd, false);
    load_generate(&folded, cases[c].name, cases[c].d, cases[c].nd, true);
    int kernels, in_attn;
    count_appends(&plain, &kernels, &in_attn);
    assert_int_equal(kernels, 2 * cases[c].layers);
    assert_int_equal(in_attn, 0);
    count_appends(&folded, &kernels, &in_attn);
    assert_int_equal(kernels, cases[c].layers);
    assert_int_equal(in_attn, cases[c].layers);
    assert_int_equal(folded.s.nk, plain.s.nk - 2 * cases[c].layers);
    for (int k = 0; k < folded.s.nk; k++) {
      const nnc_kernel *kn = &folded.s.k[k];
      if (kn->kind != NNC_KERNEL_ATTENTION) continue;
      const nnc_attention_desc *a = &kn->d.attn;
      for (int i = 0; i < 2; i++) {
        assert_true(a->append[i].on && a->append[i].src.on);
        const nnc_node *n = &folded.g.nodes[a->append[i].node];
        assert_int_equal(n->op, NNC_OP_KV_APPEND);
        assert_int_equal(n->in[0], a->view[NNC_ATTN_K + i].base);   /* the cache the attention reads */
        assert_int_equal(folded.s.kernel_of_node[a->append[i].node], k);
        bool reads = false;
        for (int j = 0; j < kn->nin; j++) reads |= kn->in[j] == a->append[i].src.base;
        assert_true(reads);
        nnc_op from = folded.g.nodes[folded.g.tensors[a->append[i].src.base].producer].op;
        if (c == 1 && i == 0) assert_int_equal(from, NNC_OP_ROPE);
        else assert_int_equal(from, NNC_OP_LINEAR);
      }
    }
    for (int t = 0; t < folded.g.ntensors; t++) {
      int p = folded.g.tensors[t].producer;
      if (p >= 0 && !folded.g.nodes[p].dead && folded.g.nodes[p].op == NNC_OP_KV_APPEND)
        assert_int_equal(folded.s.plan.buf[t].storage, NNC_STORE_NONE);
    }
    if (c == 0) schedule_equals_graph(&folded, 7, "gpt2");
    model_free(&folded);
    model_free(&plain);
  }
}

/* How many kernels hold a rope node, and how many of those are attentions. */
static void count_ropes(const model *m, int *kernels, int *in_attention) {
  *kernels = *in_attention = 0;
  for (int k = 0; k < m->s.nk; k++) {
    const nnc_kernel *kn = &m->s.k[k];
    int n = 0;
    for (int i = 0; i < kn->nnodes; i++) n += m->g.nodes[kn->nodes[i]].op == NNC_OP_ROPE;
    *kernels += kn->kind != NNC_KERNEL_ATTENTION && n > 0;
    *in_attention += kn->kind == NNC_KERNEL_ATTENTION ? n : 0;
  }
}

/* fold_rope: under --generate on a target whose attention rotates (CUDA),
 * LLaMA's q and k ropes run inside its attention kernel (with grouped-query
 * attention the reshape of q's heads too: three kernels fewer a layer, two
 * without), which reads q and the new key rows where the ropes read them
 * (the q|k|v projection); the ropes' outputs are never stored. (Plain
 * multi-head LLaMA keeps its kv_append kernels: fold_heads does not read
 * its caches in place, so nothing folds.) The float64
 * reference runs the folded schedule to the graph's logits and caches, at
 * S = 5 keys of which T = 2 are new, positions and padding as drawn. */
static void test_generate_rope_folded(void **state) {
  (void)state;
  const char *gqa[] = {"layers=3", "d=48", "heads=6", "kv_heads=2", "ffn=37", "vocab=101", "ctx=24", "batch=4"};
  const char *mqa[] = {"layers=2", "d=48", "heads=6", "kv_heads=1", "ffn=37", "vocab=101", "ctx=24", "batch=4"};
  const struct {
    const char *const *d;
    int layers, fewer;   /* kernels fewer a layer */
  } cases[] = {{gqa, 3, 3}, {mqa, 2, 3}};
  for (int c = 0; c < 2; c++) {
    model plain, folded;
    nnc_compile_opts po = {.attention_append = true}, fo = {.attention_append = true, .attention_rope = true};
    load_generate_opts(&plain, "llama", cases[c].d, 8, &po);
    load_generate_opts(&folded, "llama", cases[c].d, 8, &fo);
    int kernels, in_attn;
    count_ropes(&plain, &kernels, &in_attn);
    assert_int_equal(kernels, 2 * cases[c].layers);
    assert_int_equal(in_attn, 0);
    count_ropes(&folded, &kernels, &in_attn);
    if (kernels) fail_msg("case %d: %d rope kernels left", c, kernels);
    assert_int_equal(in_attn, 2 * cases[c].layers);
    if (folded.s.nk != plain.s.nk - cases[c].fewer * cases[c].layers)
      fail_msg("case %d: %d kernels folded, %d plain", c, folded.s.nk, plain.s.nk);
    for (int k = 0; k < folded.s.nk; k++) {
      const nnc_kernel *kn = &folded.s.k[k];
      if (kn->kind != NNC_KERNEL_ATTENTION) continue;
      const nnc_attention_desc *a = &kn->d.attn;
      for (int i = 0; i < 2; i++) {
        assert_true(a->rope[i].on && a->rope[i].src.on);
        assert_int_equal(folded.g.nodes[a->rope[i].node].op, NNC_OP_ROPE);
        assert_int_equal(folded.s.kernel_of_node[a->rope[i].node], k);
        /* x where the projection wrote it, an input of the attention */
        int from = folded.g.tensors[a->rope[i].src.base].producer;
        assert_int_equal(folded.g.nodes[from].op, NNC_OP_LINEAR);
        bool reads = false;
        for (int j = 0; j < kn->nin; j++) reads |= kn->in[j] == a->rope[i].src.base;
        assert_true(reads);
        int y = folded.g.nodes[a->rope[i].node].out[0];
        assert_int_equal(folded.s.plan.buf[y].storage, NNC_STORE_NONE);
      }
      assert_int_equal(a->append[0].src.base, a->rope[1].src.base);
      assert_int_equal(folded.s.plan.buf[a->q].storage, NNC_STORE_NONE);
    }
    schedule_equals_graph(&folded, 11, "llama");
    model_free(&folded);
    model_free(&plain);
  }
}

/* --------------------------------------------------------------- bert */

static const char *const bert_small[] = {"layers=2", "hidden=15", "heads=3", "intermediate=37",
                                         "vocab=53", "positions=29", "batch=5", "seq=19"};

static void test_bert_default_params(void **state) {
  (void)state;
  model m;
  load_model(&m, "bert", NULL, 0);
  expect_list l = {0};
  bert_expect(&l, 6, 384, 1536, 30522, 512, 2);
  assert_int_equal(l.n, 6 * 16 + 5);
  check_params(&m.g, &l);
  free(l.e);
  assert_int_equal(m.g.ninputs, 3);
  static const char *const ins[] = {"input_ids", "token_type_ids", "attention_mask"};
  for (int i = 0; i < 3; i++) {
    assert_string_equal(m.g.tensors[m.g.inputs[i]].name, ins[i]);
    check_shape(&m.g, m.g.inputs[i], NNC_I32, 2, (dimspec[]){{"B", 0}, {"T", 0}});
  }
  assert_int_equal(m.g.noutputs, 2);
  check_shape(&m.g, output_id(&m.g, "last_hidden_state"), NNC_F32, 3,
              (dimspec[]){{"B", 0}, {"T", 0}, {NULL, 384}});
  check_shape(&m.g, output_id(&m.g, "sentence_embedding"), NNC_F32, 2, (dimspec[]){{"B", 0}, {NULL, 384}});
  assert_int_equal(m.g.syms[nnc_graph_find_symbol(&m.g, "B")].max, 32);
  assert_int_equal(m.g.syms[nnc_graph_find_symbol(&m.g, "T")].max, 128);
  model_free(&m);
}

static void test_bert_small(void **state) {
  (void)state;
  model m;
  load_model(&m, "bert", bert_small, 8);
  expect_list l = {0};
  bert_expect(&l, 2, 15, 37, 53, 29, 2);
  check_params(&m.g, &l);
  free(l.e);
  check_schedule(&m, 3, 13);
  check_schedule(&m, 5, 19);
  check_schedule(&m, 1, 1);
  check_heads_folded(&m, 1, false, 15);   /* the one move left: the position rows */
  model_free(&m);
}

/* One post-norm BERT layer and the masked mean pooling, at hidden, heads,
 * inter; batch b, T. */
static void bert_by_hand(const model *m, int64_t b, int64_t T, int64_t hid, int64_t heads, int64_t inter,
                         uint64_t seed) {
  int64_t *sym = sizes(&m->g, b, T);
  nnc_ref r;
  ref_setup(&r, m, sym, seed);
  run_graph(&r);
  const double *ids = r.val[input_id(&m->g, "input_ids")];
  const double *types = r.val[input_id(&m->g, "token_type_ids")];
  const double *mask = r.val[input_id(&m->g, "attention_mask")];
  const double *we = pval(&r, "embeddings.word_embeddings.weight");
  const double *pe = pval(&r, "embeddings.position_embeddings.weight");
  const double *te = pval(&r, "embeddings.token_type_embeddings.weight");
  int64_t rows = b * T;
  double *x = vec(rows * hid), *q = vec(rows * hid), *k = vec(rows * hid), *v = vec(rows * hid);
  double *y = vec(rows * hid), *a = vec(rows * hid), *f = vec(rows * inter), *pool = vec(b * hid);
  for (int64_t bt = 0; bt < rows; bt++) {
    int64_t w = (int64_t)ids[bt], s = (int64_t)types[bt], t = bt % T;
    assert_true(s == 0 || s == 1);
    for (int64_t c = 0; c < hid; c++) a[bt * hid + c] = we[w * hid + c] + pe[t * hid + c] + te[s * hid + c];
  }
  layer_norm(a, rows, hid, pval(&r, "embeddings.LayerNorm.weight"), pval(&r, "embeddings.LayerNorm.bias"),
             1e-12, x);
  const char *p = "encoder.layer.0";
  dense(x, rows, hid, pval(&r, "%s.attention.self.query.weight", p), pval(&r, "%s.attention.self.query.bias", p),
        hid, false, q);
  dense(x, rows, hid, pval(&r, "%s.attention.self.key.weight", p), pval(&r, "%s.attention.self.key.bias", p),
        hid, false, k);
  dense(x, rows, hid, pval(&r, "%s.attention.self.value.weight", p), pval(&r, "%s.attention.self.value.bias", p),
        hid, false, v);
  attend(q, k, v, hid, b, T, heads, hid / heads, false, mask, y);
  dense(y, rows, hid, pval(&r, "%s.attention.output.dense.weight", p),
        pval(&r, "%s.attention.output.dense.bias", p), hid, false, a);
  for (int64_t i = 0; i < rows * hid; i++) a[i] += x[i];
  layer_norm(a, rows, hid, pval(&r, "%s.attention.output.LayerNorm.weight", p),
             pval(&r, "%s.attention.output.LayerNorm.bias", p), 1e-12, x);
  dense(x, rows, hid, pval(&r, "%s.intermediate.dense.weight", p), pval(&r, "%s.intermediate.dense.bias", p),
        inter, false, f);
  for (int64_t i = 0; i < rows * inter; i++) f[i] = 0.5 * f[i] * (1.0 + erf(f[i] / sqrt(2.0)));
  dense(f, rows, inter, pval(&r, "%s.output.dense.weight", p), pval(&r, "%s.output.dense.bias", p), hid, false,
        a);
  for (int64_t i = 0; i < rows * hid; i++) a[i] += x[i];
  layer_norm(a, rows, hid, pval(&r, "%s.output.LayerNorm.weight", p), pval(&r, "%s.output.LayerNorm.bias", p),
             1e-12, x);
  for (int64_t bi = 0; bi < b; bi++) {
    double n = 0;
    for (int64_t t = 0; t < T; t++) n += mask[bi * T + t];
    assert_true(n >= 1);
    for (int64_t c = 0; c < hid; c++) {
      double s = 0;
      for (int64_t t = 0; t < T; t++) s += x[(bi * T + t) * hid + c] * mask[bi * T + t];
      pool[bi * hid + c] = s / n;
    }
  }
  check_close(r.val[output_id(&m->g, "last_hidden_state")], x, rows * hid, 1e-10, "bert last_hidden_state");
  check_close(r.val[output_id(&m->g, "sentence_embedding")], pool, b * hid, 1e-10, "bert sentence_embedding");
  free(x), free(q), free(k), free(v), free(y), free(a), free(f), free(pool);
  nnc_ref_free(&r);
  free(sym);
}

/* The random mask has padding somewhere, or the masked path is untested. */
static void check_mask_has_padding(const model *m, int64_t b, int64_t T, uint64_t seed) {
  int64_t *sym = sizes(&m->g, b, T);
  nnc_ref r;
  ref_setup(&r, m, sym, seed);
  const double *mask = r.val[input_id(&m->g, "attention_mask")];
  int zeros = 0;
  for (int64_t i = 0; i < b * T; i++) zeros += mask[i] == 0;
  assert_true(zeros > 0);
  nnc_ref_free(&r);
  free(sym);
}

static void test_bert_one_layer_by_hand(void **state) {
  (void)state;
  static const char *const defs[] = {"layers=1", "hidden=15", "heads=3", "intermediate=37",
                                     "vocab=53", "positions=29", "batch=5", "seq=19"};
  model m;
  load_model(&m, "bert", defs, 8);
  check_mask_has_padding(&m, 3, 13, 5);
  bert_by_hand(&m, 3, 13, 15, 3, 37, 5);
  bert_by_hand(&m, 5, 19, 15, 3, 37, 6);
  bert_by_hand(&m, 1, 1, 15, 3, 37, 7);
  model_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_default),
      cmocka_unit_test(test_mlp_small),
      cmocka_unit_test(test_gpt2_default_params),
      cmocka_unit_test(test_gpt2_small),
      cmocka_unit_test(test_gpt2_train_folded),
      cmocka_unit_test(test_gpt2_train_gelu),
      cmocka_unit_test(test_gpt2_train_bias_grad),
      cmocka_unit_test(test_gpt2_train_recompute),
      cmocka_unit_test(test_gpt2_one_layer_by_hand),
      cmocka_unit_test(test_llama_default_params),
      cmocka_unit_test(test_llama_generate_in_place),
      cmocka_unit_test(test_generate_append_folded),
      cmocka_unit_test(test_generate_rope_folded),
      cmocka_unit_test(test_bert_default_params),
      cmocka_unit_test(test_bert_small),
      cmocka_unit_test(test_bert_one_layer_by_hand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
