/* tests/unit/models_util.c — what the model tests share (models_util.h):
 * loading and compiling models/<name>.lua, finding tensors, the expected
 * parameter lists, running the float64 reference over the graph and the
 * schedule, and the pieces of a plain float64 network written by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models_util.h"

/* ------------------------------------------------------------ loading */

void model_free(model *m) {
  if (m->scheduled) nnc_schedule_free(&m->s);
  nnc_graph_free(&m->g);
}

/* Loads models/<name>.lua with the given -D overrides and compiles it
 * (train: its training step, as nnc --train). */
void load_model_with(model *m, const char *name, const char *const *defines, int ndefines, bool train,
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

/* models/<name>.lua (train: its training step) under --precision=prec. */
void load_model_prec(model *m, const char *name, const char *const *defines, int ndefines, bool train,
                     const nnc_compile_opts *co, const char *prec) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s.lua", NNC_SOURCE_ROOT, name);
  nnc_frontend_opts o = {.path = path, .defines = defines, .ndefines = ndefines, .training = train};
  nnc_autodiff_opts ad = {.loss = "loss"};
  nnc_precision p;
  nnc_error err = {0};
  memset(m, 0, sizeof *m);
  nnc_graph_init(&m->g);
  nnc_status st = nnc_frontend_load(&o, &m->g, &err);
  if (!st && train) st = nnc_pass_autodiff(&m->g, &ad, &err);
  if (!st) st = nnc_precision_parse(prec, &p, &err);
  if (!st) st = nnc_pass_precision(&m->g, &p, &err);
  if (st) fail_msg("%s as %s: %s", path, prec, err.msg);
  nnc_schedule_init(&m->s, &m->g);
  m->scheduled = true;
  if (nnc_compile_graph_for(&m->g, co, &m->s, &err)) fail_msg("compiling %s as %s: %s", path, prec, err.msg);
}

void load_train_prec(model *m, const char *name, const char *const *defines, int ndefines,
                     const nnc_compile_opts *co, const char *prec) {
  load_model_prec(m, name, defines, ndefines, true, co, prec);
}

void load_model_as(model *m, const char *name, const char *const *defines, int ndefines, bool train,
                   const nnc_compile_opts *co) {
  load_model_with(m, name, defines, ndefines, train, co, NNC_RECOMPUTE_NONE);
}

void load_model(model *m, const char *name, const char *const *defines, int ndefines) {
  load_model_as(m, name, defines, ndefines, false, NULL);
}

int find_tensor(const nnc_graph *g, const int *ids, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(g->tensors[ids[i]].name, name) == 0) return ids[i];
  return -1;
}

int param_id(const nnc_graph *g, const char *name) {
  int t = find_tensor(g, g->params, g->nparams, name);
  if (t < 0) fail_msg("no parameter %s", name);
  return t;
}

int input_id(const nnc_graph *g, const char *name) {
  int t = find_tensor(g, g->inputs, g->ninputs, name);
  if (t < 0) fail_msg("no input %s", name);
  return t;
}

int output_id(const nnc_graph *g, const char *name) {
  for (int i = 0; i < g->noutputs; i++)
    if (strcmp(g->outputs[i].name, name) == 0) return g->outputs[i].tensor;
  fail_msg("no output %s", name);
  return -1;
}

/* ------------------------------------------- expected parameter lists */

void want(expect_list *l, int rank, int64_t d0, int64_t d1, const char *fmt, ...) {
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
void check_params(const nnc_graph *g, const expect_list *l) {
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

void check_shape(const nnc_graph *g, int t, nnc_dtype dtype, int rank, const dimspec *ds) {
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

/* ------------------------------------------------- running the oracle */

/* Symbol sizes by name, for nnc_ref_init. */
int64_t *sizes(const nnc_graph *g, int64_t b, int64_t t) {
  int64_t *sym = calloc((size_t)g->nsyms + 1, sizeof *sym);
  assert_non_null(sym);
  for (int i = 0; i < g->nsyms; i++) sym[i] = 1;
  int sb = nnc_graph_find_symbol(g, "B"), st = nnc_graph_find_symbol(g, "T");
  if (sb >= 0) sym[sb] = b;
  if (st >= 0) sym[st] = t;
  return sym;
}

void ref_setup(nnc_ref *r, const model *m, const int64_t *sym, uint64_t seed) {
  nnc_error err = {0};
  if (nnc_ref_init(r, &m->g, sym, &err) != NNC_OK) fail_msg("%s", err.msg);
  if (nnc_ref_random_inputs(r, seed, &err) != NNC_OK) fail_msg("%s", err.msg);
}

/* Runs the unfused graph into r (set up by ref_setup). */
void run_graph(nnc_ref *r) {
  nnc_error err = {0};
  if (nnc_ref_run_graph(r, &err) != NNC_OK) fail_msg("%s", err.msg);
}

double max_abs(const double *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
  return m;
}

void run_graph_and_schedule(const model *m, const int64_t *sym, uint64_t seed, nnc_ref *graph, nnc_ref *sched) {
  nnc_error err = {0};
  ref_setup(graph, m, sym, seed);
  ref_setup(sched, m, sym, seed);
  run_graph(graph);
  if (nnc_ref_run_schedule(sched, &m->s, &err) != NNC_OK) fail_msg("%s", err.msg);
}

/* The schedule's outputs equal the graph's (relative error <= tol) for
 * several seeds, and are finite and not all zero. */
void check_schedule_tol(const model *m, int64_t b, int64_t t, double tol) {
  int64_t *sym = sizes(&m->g, b, t);
  for (uint64_t seed = 1; seed <= 3; seed++) {
    nnc_ref graph, sched;
    run_graph_and_schedule(m, sym, seed, &graph, &sched);
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

void check_schedule(const model *m, int64_t b, int64_t t) { check_schedule_tol(m, b, t, 1e-12); }

/* ------------------------------------- a float64 network, by hand */

/* y[r, n] = sum_k x[r, k] * W + b, W [n_out, k] or, when in_out, [k, n_out]. */
void dense(const double *x, int64_t rows, int64_t k, const double *w, const double *b,
           int64_t n_out, bool in_out, double *y) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t n = 0; n < n_out; n++) {
      double acc = b ? b[n] : 0.0;
      for (int64_t i = 0; i < k; i++) acc += x[r * k + i] * (in_out ? w[i * n_out + n] : w[n * k + i]);
      y[r * n_out + n] = acc;
    }
}

void layer_norm(const double *x, int64_t rows, int64_t c, const double *g, const double *b,
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
void attend(const double *q, const double *k, const double *v, int64_t ld, int64_t batch,
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

double *vec(int64_t n) {
  double *v = calloc((size_t)n, sizeof *v);
  assert_non_null(v);
  return v;
}

const double *pval(const nnc_ref *r, const char *fmt, ...) {
  char name[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const double *v = r->val[param_id(r->g, name)];
  assert_non_null(v);
  return v;
}

void check_close(const double *got, const double *want_v, int64_t n, double tol, const char *what) {
  double e = nnc_ref_rel_error(got, want_v, n);
  if (!(e <= tol)) fail_msg("%s: rel error %g against the hand-written float64 model", what, e);
  assert_true(max_abs(want_v, n) > 0);
}

/* ------------------------------------------------------------- folds */

/* The head split and merge around every attention were folded into it
 * (passes/fold_heads.c): its operands are views, and only `moves` copy
 * kernels are left in the schedule. fused_qkv: q, k and v are thirds of one
 * projection of width 3*width, else three projections of their own. */
void check_heads_folded(const model *m, int moves, bool fused_qkv, int64_t width) {
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
