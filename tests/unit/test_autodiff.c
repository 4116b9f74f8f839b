/* tests/unit/test_autodiff.c — the autodiff pass: every op's gradient against
 * float64 central differences.
 *
 * Each case loads a model, makes a scalar loss of it (its own "loss", or a
 * probe: sum over every float output of output * a random input of its
 * shape, so every element of every output is weighted differently), runs
 * the pass, evaluates the joint graph with the float64 reference and
 * compares each gradient with (L(x + h) - L(x - h)) / 2h at sampled
 * elements of every parameter and float input. Sizes are odd and small. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/frontend.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "ref/ref.h"

#define SAMPLES 10     /* elements checked per tensor */
#define STEP 1e-5

static void load(const char *rel, const char *const *defines, int ndefines, bool training, nnc_graph *g) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", NNC_SOURCE_ROOT, rel);
  nnc_frontend_opts fo = {.path = path, .defines = defines, .ndefines = ndefines, .training = training};
  nnc_error err = {0};
  nnc_graph_init(g);
  nnc_status st = nnc_frontend_load(&fo, g, &err);
  if (st) fail_msg("%s: %s", rel, err.msg);
  assert_int_equal(nnc_pass_check(g, &err), NNC_OK);
}

/* output "probe_loss" = sum over float outputs o of sum(o * probe.o); of
 * sum(exp(o) * probe.o) with `exp`, for outputs that hold -inf (masks) */
static void add_probe_loss(nnc_graph *g, bool exp) {
  nnc_error err = {0};
  ad_ctx c = {g, NNC_NOLOC, nnc_graph_intern(g, "probe"), &err, false};
  int total = -1, nout = g->noutputs;
  for (int i = 0; i < nout; i++) {
    int o = g->outputs[i].tensor;
    const nnc_tensor *t = &g->tensors[o];
    if (!nnc_dtype_is_float(t->dtype)) continue;
    nnc_dim n = nnc_dim_const(1);
    for (int d = 0; d < t->rank; d++) assert_true(nnc_dim_mul(n, t->shape[d], &n));
    char name[300];
    snprintf(name, sizeof name, "probe.%s", g->outputs[i].name);
    int probe, flat, p, s;
    assert_int_equal(nnc_graph_add_input(g, name, NNC_F32, 1, &n, NNC_NOLOC, &probe, &err), NNC_OK);
    if (exp) assert_int_equal(ad_unary(&c, NNC_OP_EXP, o, &o), NNC_OK);
    assert_int_equal(ad_shaped(&c, NNC_OP_RESHAPE, 1, &o, NULL, 1, &n, &flat), NNC_OK);
    assert_int_equal(ad_binary(&c, NNC_OP_MUL, flat, probe, &p), NNC_OK);
    assert_int_equal(ad_reduce(&c, NNC_OP_SUM, p, 0, false, &s), NNC_OK);
    if (total < 0) total = s;
    else assert_int_equal(ad_binary(&c, NNC_OP_ADD, total, s, &total), NNC_OK);
  }
  assert_true(total >= 0);
  assert_int_equal(nnc_graph_add_output(g, "probe_loss", total, NNC_NOLOC, &err), NNC_OK);
}

static int output_named(const nnc_graph *g, const char *name) {
  for (int i = 0; i < g->noutputs; i++)
    if (strcmp(g->outputs[i].name, name) == 0) return g->outputs[i].tensor;
  return -1;
}

static double loss_at(nnc_ref *r, int loss) {
  nnc_error err = {0};
  nnc_status st = nnc_ref_run_graph(r, &err);
  if (st) fail_msg("reference: %s", err.msg);
  return r->val[loss][0];
}

/* Differentiates g (loss named `loss`) and checks every gradient output;
 * syms gives each symbol's size (NULL: 3 for the first, then 5). */
static void check_grads(nnc_graph *g, const char *loss, const int64_t *syms) {
  nnc_error err = {0};
  nnc_autodiff_opts o = {.loss = loss, .input_grads = true};
  nnc_status st = nnc_pass_autodiff(g, &o, &err);
  if (st) fail_msg("autodiff: %s", err.msg);
  assert_int_equal(nnc_pass_check(g, &err), NNC_OK);
  int64_t sym[8];
  for (int i = 0; i < g->nsyms; i++) {
    int64_t want = syms ? syms[i] : (i == 0 ? 3 : 5);
    sym[i] = want < g->syms[i].max ? want : g->syms[i].max;
  }
  nnc_ref r;
  assert_int_equal(nnc_ref_init(&r, g, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r, 7, &err), NNC_OK);
  /* the loss scale: every gradient comes out times it */
  const double scale = 4;
  int ls = g->inputs[g->ninputs - 1];
  assert_string_equal(g->tensors[ls].name, NNC_LOSS_SCALE_INPUT);
  r.val[ls][0] = scale;
  int lt = g->outputs[0].tensor;
  loss_at(&r, lt);
  int checked = 0;
  for (int i = 1; i < g->noutputs; i++) {
    if (strncmp(g->outputs[i].name, "grad.", 5) != 0) continue;   /* a kept forward output */
    const char *leaf_name = g->outputs[i].name + strlen("grad.");
    int leaf = -1;
    for (int t = 0; t < g->ntensors && leaf < 0; t++)
      if (g->tensors[t].kind != NNC_TENSOR_VALUE && strcmp(g->tensors[t].name, leaf_name) == 0) leaf = t;
    assert_true(leaf >= 0);
    if (strncmp(leaf_name, "probe.", 6) == 0) continue;
    int64_t n = nnc_ref_elems(&r, leaf);
    int gt = g->outputs[i].tensor;
    double *grad = malloc((size_t)(n > 0 ? n : 1) * sizeof *grad);
    assert_non_null(grad);
    loss_at(&r, lt);
    if (n) memcpy(grad, r.val[gt], (size_t)n * sizeof *grad);
    for (int s = 0; s < SAMPLES && s < n; s++) {
      int64_t e = n <= SAMPLES ? s : (int64_t)s * (n - 1) / (SAMPLES - 1);
      double keep = r.val[leaf][e];
      r.val[leaf][e] = keep + STEP;
      double up = loss_at(&r, lt);
      r.val[leaf][e] = keep - STEP;
      double down = loss_at(&r, lt);
      r.val[leaf][e] = keep;
      double num = scale * (up - down) / (2 * STEP);
      if (!(fabs(num - grad[e]) <= 1e-6 + 1e-5 * fabs(num)))
        fail_msg("%s: d %s / d %s[%lld] is %.10g by the backward graph, %.10g by central differences",
                 g->name, g->outputs[0].name, leaf_name, (long long)e, grad[e], num);
      checked++;
    }
    free(grad);
  }
  assert_true(checked > 0);
  nnc_ref_free(&r);
}

static void check_op_file(const char *file) {
  nnc_graph g;
  load(file, NULL, 0, false, &g);
  add_probe_loss(&g, strstr(file, "masks") != NULL);
  check_grads(&g, "probe_loss", NULL);
  nnc_graph_free(&g);
}

static void test_elementwise(void **state) { (void)state; check_op_file("tests/ops/elementwise.lua"); }
static void test_masks(void **state) { (void)state; check_op_file("tests/ops/masks.lua"); }
static void test_matmul(void **state) { (void)state; check_op_file("tests/ops/matmul.lua"); }
static void test_norms(void **state) { (void)state; check_op_file("tests/ops/norms.lua"); }
static void test_reduce(void **state) { (void)state; check_op_file("tests/ops/reduce.lua"); }
static void test_move(void **state) { (void)state; check_op_file("tests/ops/move.lua"); }
static void test_softmax_axis(void **state) { (void)state; check_op_file("tests/ops/softmax_axis.lua"); }
static void test_attention(void **state) { (void)state; check_op_file("tests/ops/attention.lua"); }
static void test_embedding_loss(void **state) { (void)state; check_op_file("tests/ops/embedding_loss.lua"); }
/* convolutions and pools: im2col's gradient is col2im */
static void test_conv(void **state) { (void)state; check_op_file("tests/ops/conv.lua"); }
/* the recurrent layers: backward through time (lstm_scan_grad, gru_scan_grad), the initial states' gradients */
static void test_recurrent(void **state) { (void)state; check_op_file("tests/ops/recurrent.lua"); }
/* rope's gradient is the turn back (rope with -theta); grouped-query attention's, through the folded rows: dk and
 * dv summed over each group's query heads */
static void test_rope(void **state) { (void)state; check_op_file("tests/ops/rope.lua"); }
static void test_gqa(void **state) { (void)state; check_op_file("tests/ops/gqa.lua"); }

/* The models train with their own loss (declared when `training` is true). */
static void test_mlp_train(void **state) {
  (void)state;
  const char *d[] = {"pixels=13", "hidden1=7", "hidden2=5", "classes=4"};
  nnc_graph g;
  load("models/mlp.lua", d, 4, true, &g);
  check_grads(&g, NULL, (const int64_t[]){3});
  nnc_graph_free(&g);
}

static void test_gpt2_train(void **state) {
  (void)state;
  const char *d[] = {"layers=2", "d=12", "heads=2", "vocab=17", "ctx=9"};
  nnc_graph g;
  load("models/gpt2.lua", d, 5, true, &g);
  check_grads(&g, NULL, (const int64_t[]){3, 5});
  nnc_graph_free(&g);
}

static void test_bert_probe(void **state) {
  (void)state;
  const char *d[] = {"layers=1", "hidden=12", "heads=3", "intermediate=7", "vocab=19", "positions=9", "seq=9"};
  nnc_graph g;
  load("models/bert.lua", d, 7, false, &g);
  add_probe_loss(&g, false);
  check_grads(&g, "probe_loss", (const int64_t[]){3, 5});
  nnc_graph_free(&g);
}

/* The fused gradient ops (attention as one op whose gradient is one
 * attention_grad node, the flash backward; a norm's gradient as one
 * layernorm_grad or rmsnorm_grad node) against the same models
 * differentiated through primitive ops: every gradient output of the two
 * independent graphs agrees, at odd sizes. *fused counts the fused nodes. */
static void grads_of(const char *file, bool primitive, int *fused, double **grads, int64_t *n, nnc_graph *g) {
  load(file, NULL, 0, false, g);
  add_probe_loss(g, false);
  nnc_error err = {0};
  nnc_autodiff_opts o = {.loss = "probe_loss", .input_grads = true, .primitive_attention = primitive, .primitive_norms = primitive};
  if (nnc_pass_autodiff(g, &o, &err)) fail_msg("autodiff: %s", err.msg);
  *fused = 0;
  for (int i = 0; i < g->nnodes; i++) {
    nnc_op op = g->nodes[i].op;
    *fused += !g->nodes[i].dead && (op == NNC_OP_ATTENTION_GRAD || op == NNC_OP_LAYERNORM_GRAD ||
                                    op == NNC_OP_RMSNORM_GRAD);
  }
  nnc_ref r;
  int64_t sym[2] = {3, 17};
  assert_int_equal(nnc_ref_init(&r, g, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r, 11, &err), NNC_OK);
  loss_at(&r, g->outputs[0].tensor);
  for (int i = 0; i < g->noutputs; i++) {
    int t = g->outputs[i].tensor;
    n[i] = nnc_ref_elems(&r, t);
    grads[i] = malloc((size_t)(n[i] ? n[i] : 1) * sizeof **grads);
    assert_non_null(grads[i]);
    if (n[i]) memcpy(grads[i], r.val[t], (size_t)n[i] * sizeof **grads);
  }
  nnc_ref_free(&r);
}

static void check_fused_grads(const char *file, int want_fused) {
  enum { MAXOUT = 64 };
  nnc_graph gf, gp;
  double *f[MAXOUT], *p[MAXOUT];
  int64_t nf[MAXOUT], np[MAXOUT];
  int cf, cp;
  grads_of(file, false, &cf, f, nf, &gf);
  grads_of(file, true, &cp, p, np, &gp);
  assert_int_equal(cf, want_fused);
  assert_int_equal(cp, 0);
  assert_int_equal(gf.noutputs, gp.noutputs);
  assert_true(gf.noutputs <= MAXOUT);
  for (int i = 0; i < gf.noutputs; i++) {
    assert_string_equal(gf.outputs[i].name, gp.outputs[i].name);
    assert_int_equal(nf[i], np[i]);
    double worst = 0, scale = 0;
    for (int64_t e = 0; e < nf[i]; e++) {
      worst = fmax(worst, fabs(f[i][e] - p[i][e]));
      scale = fmax(scale, fabs(p[i][e]));
    }
    if (!(worst <= 1e-12 * scale))
      fail_msg("%s: %s differs by %g between the fused and the primitive gradients (largest %g)", file,
               gf.outputs[i].name, worst, scale);
    free(f[i]);
    free(p[i]);
  }
  nnc_graph_free(&gf);
  nnc_graph_free(&gp);
}

static void test_fused_grads(void **state) {
  (void)state;
  check_fused_grads("tests/ops/attention.lua", 3);   /* causal, padded and both */
  check_fused_grads("tests/ops/norms.lua", 4);      /* two layernorms, two rmsnorms */
}

/* Bad requests: no such loss output, a loss that is not a scalar. */
static void test_errors(void **state) {
  (void)state;
  nnc_graph g;
  nnc_error err = {0};
  load("models/mlp.lua", NULL, 0, false, &g);
  assert_int_equal(nnc_pass_autodiff(&g, NULL, &err), NNC_E_MODEL);
  assert_non_null(strstr(err.msg, "expected an output named \"loss\""));
  assert_non_null(strstr(err.msg, "found outputs logits"));
  nnc_autodiff_opts o = {.loss = "logits"};
  assert_int_equal(nnc_pass_autodiff(&g, &o, &err), NNC_E_MODEL);
  assert_non_null(strstr(err.msg, "to be a float scalar, found f32[B,10]"));
  nnc_graph_free(&g);
}

/* A parameter the loss does not reach gets a zero gradient; every gradient is
 * an output of its own. */
static void test_outputs(void **state) {
  (void)state;
  nnc_graph g;
  load("tests/ops/embedding_loss.lua", NULL, 0, false, &g);
  nnc_error err = {0};
  assert_int_equal(nnc_pass_autodiff(&g, NULL, &err), NNC_OK);
  assert_string_equal(g.outputs[0].name, "loss");
  int gw = output_named(&g, "grad.wte"), gh = output_named(&g, "grad.head.weight");
  assert_true(gw >= 0 && gh >= 0 && gw != gh);
  /* then the model's other outputs, kept */
  assert_int_equal(g.noutputs, 3 + g.nparams);
  assert_string_equal(g.outputs[g.noutputs - 2].name, "embedded");
  assert_string_equal(g.outputs[g.noutputs - 1].name, "logits");
  /* one input more, the loss scale, f32 [1], without a gradient of its own */
  const nnc_tensor *ls = &g.tensors[g.inputs[g.ninputs - 1]];
  assert_string_equal(ls->name, "loss_scale");
  assert_int_equal(ls->dtype, NNC_F32);
  assert_int_equal(ls->rank, 1);
  assert_true(nnc_dim_eq_const(ls->shape[0], 1));
  assert_int_equal(output_named(&g, "grad.loss_scale"), -1);
  nnc_graph_free(&g);
}

/* no_loss_scale: the inputs are the model's, the seed 1 */
static void test_no_loss_scale(void **state) {
  (void)state;
  nnc_graph g;
  load("tests/ops/embedding_loss.lua", NULL, 0, false, &g);
  int before = g.ninputs;
  nnc_error err = {0};
  nnc_autodiff_opts o = {.no_loss_scale = true};
  assert_int_equal(nnc_pass_autodiff(&g, &o, &err), NNC_OK);
  assert_int_equal(g.ninputs, before);
  for (int i = 0; i < g.ninputs; i++) assert_string_not_equal(g.tensors[g.inputs[i]].name, "loss_scale");
  nnc_graph_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elementwise), cmocka_unit_test(test_masks),      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_norms),       cmocka_unit_test(test_reduce),     cmocka_unit_test(test_move),
      cmocka_unit_test(test_softmax_axis), cmocka_unit_test(test_attention), cmocka_unit_test(test_embedding_loss),
      cmocka_unit_test(test_conv),
      cmocka_unit_test(test_recurrent),
    cmocka_unit_test(test_rope),
    cmocka_unit_test(test_gqa),
      cmocka_unit_test(test_mlp_train),   cmocka_unit_test(test_gpt2_train), cmocka_unit_test(test_bert_probe),
      cmocka_unit_test(test_errors),      cmocka_unit_test(test_outputs),    cmocka_unit_test(test_fused_grads),
      cmocka_unit_test(test_no_loss_scale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
