/* tests/unit/test_layout.c — the NHWC layout pass (passes/layout.c).
 *
 * Each model is loaded twice: as the front-end wrote it, and after the
 * pass (then dead-code elimination). The float64 reference evaluates both on
 * the same random inputs and weights, which must agree: the pass rewrites by
 * identities only, so they agree to rounding. Then what the pass is for: an
 * NCHW ResNet runs the kernels of the NHWC one plus the transpose where its
 * image enters, and no rewrite adds a transpose where a tensor leaves. */
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

/* <root>/<file> with the -D overrides, as the front-end builds it (train:
 * with its backward, as nnc --train). */
static void load(nnc_graph *g, const char *file, const char *const *defines, int ndefines, bool train) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, file);
  nnc_frontend_opts o = {.path = path, .defines = defines, .ndefines = ndefines, .training = train};
  nnc_autodiff_opts ad = {.loss = "loss"};
  nnc_error err = {0};
  nnc_graph_init(g);
  nnc_status st = nnc_frontend_load(&o, g, &err);
  if (!st) st = nnc_pass_check(g, &err);
  if (!st && train) st = nnc_pass_autodiff(g, &ad, &err);
  if (st) fail_msg("loading %s: %s", path, err.msg);
}

/* The pass, then what dies after it. */
static int run_layout_at(nnc_graph *g, bool weights_at_load) {
  nnc_error err = {0};
  int cancelled = 0, removed = 0;
  if (nnc_pass_layout(g, weights_at_load, &cancelled, &err) != NNC_OK) fail_msg("layout: %s", err.msg);
  if (nnc_pass_dce(g, &removed, &err) != NNC_OK) fail_msg("dce: %s", err.msg);
  if (nnc_pass_check(g, &err) != NNC_OK) fail_msg("check after layout: %s", err.msg);
  return cancelled;
}

static int run_layout(nnc_graph *g) { return run_layout_at(g, false); }

/* Live transposes of activations of `rank` (the batch first, symbolic;
 * a weight's have constant dims). */
static int transposes(const nnc_graph *g, int rank) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const nnc_tensor *t = &g->tensors[g->nodes[i].out[0]];
    n += !g->nodes[i].dead && g->nodes[i].op == NNC_OP_TRANSPOSE && t->rank == rank && !nnc_dim_is_const(t->shape[0]);
  }
  return n;
}

/* before and after agree on every output (ids of inputs and parameters
 * are the same in both: the pass only adds values). */
static void check_same(const nnc_graph *before, const nnc_graph *after, int64_t batch) {
  assert_int_equal(before->noutputs, after->noutputs);
  int64_t *sym = calloc((size_t)before->nsyms + 1, sizeof *sym);
  assert_non_null(sym);
  for (int i = 0; i < before->nsyms; i++) sym[i] = batch;
  for (uint64_t seed = 1; seed <= 2; seed++) {
    nnc_ref a, b;
    nnc_error err = {0};
    if (nnc_ref_init(&a, before, sym, &err) || nnc_ref_random_inputs(&a, seed, &err) ||
        nnc_ref_init(&b, after, sym, &err))
      fail_msg("%s", err.msg);
    for (int pass = 0; pass < 2; pass++) {
      const int *ids = pass ? before->params : before->inputs;
      int n = pass ? before->nparams : before->ninputs;
      for (int i = 0; i < n; i++) {
        double *x = nnc_ref_alloc(&b, ids[i]);
        assert_non_null(x);
        memcpy(x, a.val[ids[i]], (size_t)nnc_ref_elems(&a, ids[i]) * sizeof *x);
      }
    }
    if (nnc_ref_run_graph(&a, &err) || nnc_ref_run_graph(&b, &err)) fail_msg("%s", err.msg);
    for (int o = 0; o < before->noutputs; o++) {
      int ta = before->outputs[o].tensor, tb = after->outputs[o].tensor;
      int64_t n = nnc_ref_elems(&a, ta);
      assert_int_equal(n, nnc_ref_elems(&b, tb));
      double e = nnc_ref_rel_error(b.val[tb], a.val[ta], n);
      if (!(e <= 1e-12))
        fail_msg("%s output %s seed %llu: after the pass vs before, rel error %g", before->name,
                 before->outputs[o].name, (unsigned long long)seed, e);
    }
    nnc_ref_free(&a);
    nnc_ref_free(&b);
  }
  free(sym);
}

/* Loads file twice, runs the pass on the second, checks they agree; the
 * second is returned in after. */
static void load_both_at(nnc_graph *before, nnc_graph *after, const char *file, const char *const *defines,
                         int ndefines, bool train, int64_t batch, bool weights_at_load) {
  load(before, file, defines, ndefines, train);
  load(after, file, defines, ndefines, train);
  run_layout_at(after, weights_at_load);
  check_same(before, after, batch);
}

static void load_both(nnc_graph *before, nnc_graph *after, const char *file, const char *const *defines,
                      int ndefines, bool train, int64_t batch) {
  load_both_at(before, after, file, defines, ndefines, train, batch, false);
}

/* ------------------------------------------------------------- ResNet-18 */

static const char *const RESNET_NCHW[] = {"size=37", "width=8", "classes=5", "batch=3"};
static const char *const RESNET_NHWC[] = {"size=37", "width=8", "classes=5", "batch=3", "layout=nhwc"};

static void resnet_nchw_agrees(void **state) {
  (void)state;
  nnc_graph a, b;
  load_both(&a, &b, "models/resnet18.lua", RESNET_NCHW, 4, false, 3);
  /* the 20 convolutions and 2 pools each had a transpose on either side
   * (and the products that batch norm folded theirs, which die); one stays
   * where the image enters (3 channels: not a view) */
  assert_true(transposes(&a, 4) >= 2 * 22);
  assert_int_equal(transposes(&b, 4), 1);
  nnc_graph_free(&a);
  nnc_graph_free(&b);
}

/* Kernels of a compiled graph that run every call, by kind. */
static void count_kernels(nnc_graph *g, int *by_kind) {
  nnc_compile_opts co = {.hoist_weights = true};
  nnc_schedule s;
  nnc_error err = {0};
  nnc_schedule_init(&s, g);
  if (nnc_compile_graph_for(g, &co, &s, &err) != NNC_OK) fail_msg("compiling %s: %s", g->name, err.msg);
  memset(by_kind, 0, NNC_KERNEL_KIND_COUNT * sizeof *by_kind);
  for (int k = 0; k < s.nk; k++)
    if (!s.k[k].at_load) by_kind[s.k[k].kind]++;
  nnc_schedule_free(&s);
}

static void resnet_nchw_runs_nhwc_kernels(void **state) {
  (void)state;
  nnc_graph nchw, nhwc;
  load(&nchw, "models/resnet18.lua", RESNET_NCHW, 4, false);
  load(&nhwc, "models/resnet18.lua", RESNET_NHWC, 5, false);
  int kc[NNC_KERNEL_KIND_COUNT], kh[NNC_KERNEL_KIND_COUNT];
  count_kernels(&nchw, kc);
  count_kernels(&nhwc, kh);
  for (int k = 0; k < NNC_KERNEL_KIND_COUNT; k++) {
    /* views cost nothing; the image's transpose where it enters is one copy more */
    if (k == NNC_KERNEL_VIEW) continue;
    int extra = k == NNC_KERNEL_MOVE ? 1 : 0;
    if (kc[k] != kh[k] + extra)
      fail_msg("%s kernels: NCHW %d, NHWC %d (expected %+d)", nnc_kernel_kind_name((nnc_kernel_kind)k), kc[k], kh[k],
               extra);
  }
  assert_int_equal(kc[NNC_KERNEL_GEMM], 21);
  nnc_graph_free(&nchw);
  nnc_graph_free(&nhwc);
}

/* ------------------------------------------------------------- MNIST CNN */

static const char *const MNIST[] = {"size=13", "conv1=5", "conv2=6", "hidden=7", "batch=3"};

static void mnist_keeps_the_flatten_order(void **state) {
  (void)state;
  nnc_graph a, b;
  load_both(&a, &b, "models/mnist_cnn.lua", MNIST, 5, false, 3);
  /* one channel enters: its transpose moves nothing, a view; the pooled
   * features go back to NCHW before the flatten, as fc1's weight expects */
  assert_int_equal(transposes(&b, 4), 1);
  int flat = -1;
  for (int i = 0; i < b.nnodes; i++)
    if (!b.nodes[i].dead && b.nodes[i].op == NNC_OP_TRANSPOSE) flat = i;
  assert_true(flat >= 0);
  const nnc_tensor *t = &b.tensors[b.nodes[flat].out[0]];
  assert_true(nnc_dim_eq_const(t->shape[1], 6) && nnc_dim_eq_const(t->shape[2], 4));
  nnc_graph_free(&a);
  nnc_graph_free(&b);
}

/* Weights made at load: fc1's weight columns follow the NHWC features
 * (layout_flatten.c), and no transpose is left to run. */
static void mnist_permutes_fc1_at_load(void **state) {
  (void)state;
  nnc_graph a, b;
  load_both_at(&a, &b, "models/mnist_cnn.lua", MNIST, 5, false, 3, true);
  assert_int_equal(transposes(&b, 4), 0);
  int fc1 = -1;
  for (int i = 0; i < b.nnodes; i++)
    if (!b.nodes[i].dead && b.nodes[i].op == NNC_OP_LINEAR && strcmp(b.nodes[i].label, "fc1") == 0) fc1 = i;
  assert_true(fc1 >= 0);
  int w = b.nodes[fc1].in[1];
  assert_int_equal(b.tensors[w].kind, NNC_TENSOR_VALUE);
  int flat = b.tensors[b.nodes[fc1].in[0]].producer;
  assert_int_equal(b.nodes[flat].op, NNC_OP_RESHAPE);
  assert_int_equal(b.nodes[b.tensors[b.nodes[flat].in[0]].producer].op, NNC_OP_MAX);
  int kinds[NNC_KERNEL_KIND_COUNT];
  count_kernels(&b, kinds);
  /* each convolution's padding and windows, the pool's windows: no transpose */
  assert_int_equal(kinds[NNC_KERNEL_MOVE], 5);
  nnc_graph_free(&a);
  nnc_graph_free(&b);
}

/* The training step: the backward's transposes cancel as the forward's do. */
static void mnist_training_step_agrees(void **state) {
  (void)state;
  nnc_graph a, b;
  load_both(&a, &b, "models/mnist_cnn.lua", MNIST, 5, true, 3);
  /* the flatten's transpose and its gradient */
  assert_int_equal(transposes(&b, 4), 2);
  assert_true(transposes(&a, 4) > 2);
  nnc_graph_free(&a);
  nnc_graph_free(&b);
}

/* ------------------------------------------ NCHW tensors that leave */

/* tests/ops/layout.lua: an unfolded batch norm, a residual, a scalar op,
 * an NCHW output that also goes on, 2 x 2 features flattened. */
static void outputs_keep_nchw(void **state) {
  (void)state;
  nnc_graph a, b;
  load_both(&a, &b, "tests/ops/layout.lua", NULL, 0, false, 2);
  /* where the image enters, where the features leave, before the flatten */
  assert_int_equal(transposes(&b, 4), 3);
  nnc_graph_free(&a);
  nnc_graph_free(&b);
}

static void conv_ops_agree(void **state) {
  (void)state;
  nnc_graph a, b;
  load_both(&a, &b, "tests/ops/conv.lua", NULL, 0, false, 3);
  nnc_graph_free(&a);
  nnc_graph_free(&b);
}

/* ----------------------------------------------- hand-built graphs */

static nnc_graph G;
static nnc_error E;

static int node(nnc_op op, int nin, const int *in, const nnc_attrs *a) {
  int id;
  assert_int_equal(nnc_graph_add_node(&G, op, nin, in, a, 1, (nnc_srcloc){"t.lua", 1}, NULL, &id, &E), NNC_OK);
  if (nnc_infer_node(&G, id, &E)) fail_msg("%s", E.msg);
  return G.nodes[id].out[0];
}

static int transpose(int x, int a, int b, int c, int d) {
  nnc_attrs at;
  memset(&at, 0, sizeof at);
  at.perm[0] = a, at.perm[1] = b, at.perm[2] = c, at.perm[3] = d;
  return node(NNC_OP_TRANSPOSE, 1, &x, &at);
}

static int image(void) {
  nnc_graph_init(&G);
  G.name = strdup("t");
  int id, b;
  assert_int_equal(nnc_graph_add_symbol(&G, "B", 2, (nnc_srcloc){"t.lua", 1}, &b, &E), NNC_OK);
  nnc_dim s[4] = {nnc_dim_sym(b), nnc_dim_const(3), nnc_dim_const(4), nnc_dim_const(5)};
  assert_int_equal(nnc_graph_add_input(&G, "x", NNC_F32, 4, s, (nnc_srcloc){"t.lua", 1}, &id, &E), NNC_OK);
  return id;
}

/* relu of a transpose that only leaves keeps its transpose before it; so
 * does one whose input also leaves (moving it would add a transpose). */
static void no_transpose_added(void **state) {
  (void)state;
  int x = image();
  int t = transpose(x, 0, 3, 1, 2);
  int r = node(NNC_OP_RELU, 1, &t, NULL);
  assert_int_equal(nnc_graph_add_output(&G, "r", r, (nnc_srcloc){"t.lua", 2}, &E), NNC_OK);
  assert_int_equal(nnc_graph_add_output(&G, "t", t, (nnc_srcloc){"t.lua", 2}, &E), NNC_OK);
  assert_int_equal(run_layout(&G), 0);
  assert_int_equal(transposes(&G, 4), 1);
  nnc_graph_free(&G);
}

/* relu between a transpose and its inverse: both go; two transposes that
 * do not cancel become one. */
static void inverses_cancel(void **state) {
  (void)state;
  int x = image();
  int t = transpose(x, 0, 3, 1, 2);
  int r = node(NNC_OP_RELU, 1, &t, NULL);
  int back = transpose(r, 0, 2, 3, 1);
  int y = node(NNC_OP_NEG, 1, &back, NULL);
  int u = transpose(transpose(y, 0, 2, 3, 1), 0, 2, 3, 1);
  assert_int_equal(nnc_graph_add_output(&G, "u", u, (nnc_srcloc){"t.lua", 2}, &E), NNC_OK);
  assert_int_equal(run_layout(&G), 1);
  assert_int_equal(transposes(&G, 4), 1);
  int out = G.outputs[0].tensor, p = G.tensors[out].producer;
  assert_int_equal(G.nodes[p].op, NNC_OP_TRANSPOSE);
  /* the whole perm: entries past the rank are 0, or --emit=ir and the
   * folders' graphs would carry a stale value (they differed between builds) */
  static const int composed[NNC_MAX_RANK] = {0, 3, 1, 2};
  assert_memory_equal(G.nodes[p].attrs.perm, composed, sizeof composed);
  nnc_graph_free(&G);
}

/* The graph check refuses a transpose with a stale perm entry past its rank. */
static void stale_perm_refused(void **state) {
  (void)state;
  int x = image();
  int t = transpose(x, 0, 3, 1, 2);
  assert_int_equal(nnc_graph_add_output(&G, "t", t, (nnc_srcloc){"t.lua", 2}, &E), NNC_OK);
  assert_int_equal(nnc_pass_check(&G, &E), NNC_OK);
  G.nodes[G.tensors[t].producer].attrs.perm[NNC_MAX_RANK - 1] = 7;
  assert_int_not_equal(nnc_pass_check(&G, &E), NNC_OK);
  assert_non_null(strstr(E.msg, "expected 0 in its perm past rank 4, found 7"));
  nnc_graph_free(&G);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(resnet_nchw_agrees),
    cmocka_unit_test(resnet_nchw_runs_nhwc_kernels),
    cmocka_unit_test(mnist_keeps_the_flatten_order),
    cmocka_unit_test(mnist_permutes_fc1_at_load),
    cmocka_unit_test(mnist_training_step_agrees),
    cmocka_unit_test(outputs_keep_nchw),
    cmocka_unit_test(conv_ops_agree),
    cmocka_unit_test(no_transpose_added),
    cmocka_unit_test(inverses_cancel),
    cmocka_unit_test(stale_perm_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
