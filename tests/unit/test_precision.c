/* tests/unit/test_precision.c — the precision pass (--precision) and its
 * --outputs option: by default every float output of a bf16/f16 model is
 * cast back to f32; with --outputs=storage none is, the outputs keep the
 * storage dtype, and the model computes the same values (the float64
 * reference of both graphs, and of the fused schedule). Edge cases: an i32
 * output, two outputs naming one tensor, and f32 precision, where the option
 * changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "ref/ref.h"

static char work[256];

static const char *gpt2_small[] = {"layers=2", "d=48", "heads=4", "vocab=101", "ctx=64"};
static const char *mlp_small[] = {"batch=37", "hidden1=129", "hidden2=33"};

/* Whether load() asks for f32 arithmetic on weights alone, as for CUDA. */
static bool weight_math = true;

/* Loads model (under the source root when relative) and runs the precision
 * pass with --precision=prec --outputs=outputs; asserts each step. */
static void load(const char *model, const char *const *defs, int nd, const char *prec, const char *outputs,
                 nnc_graph *g) {
  char path[512];
  snprintf(path, sizeof path, model[0] == '/' ? "%s" : NNC_SOURCE_ROOT "/%s", model);
  nnc_frontend_opts fo = {.path = path, .defines = defs, .ndefines = nd};
  nnc_error err = {0};
  nnc_precision p;
  nnc_graph_init(g);
  nnc_status st = nnc_frontend_load(&fo, g, &err);
  if (!st) st = nnc_precision_parse(prec, &p, &err);
  if (!st) st = nnc_outputs_parse(outputs, &p, &err);
  p.f32_weight_math = weight_math;
  if (!st) st = nnc_pass_precision(g, &p, &err);
  if (st) fail_msg("%s: %s", model, err.msg);
}

static int count_op(const nnc_graph *g, nnc_op op) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) n += !g->nodes[i].dead && g->nodes[i].op == op;
  return n;
}

static nnc_dtype out_dtype(const nnc_graph *g, int i) { return g->tensors[g->outputs[i].tensor].dtype; }

/* The op of the node that writes output i (NNC_OP_NONE for an input). */
static nnc_op out_producer(const nnc_graph *g, int i) {
  int p = g->tensors[g->outputs[i].tensor].producer;
  return p < 0 ? NNC_OP_NONE : g->nodes[p].op;
}

static void write_model(const char *name, const char *text, char *path, size_t n) {
  snprintf(path, n, "%s/%s", work, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_outputs_parse(void **state) {
  (void)state;
  nnc_precision p;
  nnc_error err = {0};
  assert_int_equal(nnc_precision_parse("bf16", &p, &err), NNC_OK);
  assert_false(p.storage_outputs);
  assert_int_equal(nnc_outputs_parse("storage", &p, &err), NNC_OK);
  assert_true(p.storage_outputs);
  assert_int_equal(p.storage, NNC_BF16);   /* the storage dtype is untouched */
  assert_int_equal(nnc_outputs_parse("f32", &p, &err), NNC_OK);
  assert_false(p.storage_outputs);
  assert_int_equal(nnc_outputs_parse("storage", &p, &err), NNC_OK);
  assert_int_equal(nnc_outputs_parse(NULL, &p, &err), NNC_OK);
  assert_false(p.storage_outputs);
  assert_int_equal(nnc_outputs_parse("f64", &p, &err), NNC_E_USAGE);
  assert_string_equal(err.msg, "--outputs: expected f32 or storage, found \"f64\"");
  assert_int_equal(nnc_outputs_parse("", &p, &err), NNC_E_USAGE);
  assert_string_equal(err.msg, "--outputs: expected f32 or storage, found \"\"");
  assert_int_equal(nnc_outputs_parse("Storage", &p, &err), NNC_E_USAGE);
}

/* The default: the logits cast back to f32; storage: no cast before the
 * output, which is the linear's own bf16 (f16) result. The one cast left is
 * the image's, where it enters. */
static void test_mlp_casts(void **state) {
  (void)state;
  static const char *const precs[] = {"bf16", "f16"};
  for (int k = 0; k < 2; k++) {
    nnc_graph d, s;
    load("models/mlp.lua", mlp_small, 3, precs[k], NULL, &d);
    load("models/mlp.lua", mlp_small, 3, precs[k], "storage", &s);
    nnc_dtype narrow = k ? NNC_F16 : NNC_BF16;
    assert_int_equal(d.noutputs, 1);
    assert_int_equal(out_dtype(&d, 0), NNC_F32);
    assert_int_equal(out_producer(&d, 0), NNC_OP_CAST);
    assert_int_equal(count_op(&d, NNC_OP_CAST), 2);
    assert_int_equal(s.noutputs, 1);
    assert_int_equal(out_dtype(&s, 0), narrow);
    assert_int_equal(out_producer(&s, 0), NNC_OP_LINEAR);
    assert_int_equal(count_op(&s, NNC_OP_CAST), 1);
    assert_int_equal(s.nnodes, d.nnodes - 1);
    /* the input stays f32 at the API: its cast is the first node */
    assert_int_equal(s.tensors[s.inputs[0]].dtype, NNC_F32);
    assert_int_equal(s.nodes[0].op, NNC_OP_CAST);
    assert_int_equal(s.tensors[s.nodes[0].out[0]].dtype, narrow);
    nnc_graph_free(&d);
    nnc_graph_free(&s);
  }
}

/* Both graphs compute the same function: the float64 reference of the
 * storage graph's narrow output equals the default's f32 one (the reference
 * rounds only at casts, so they differ by the final f32 rounding at most);
 * and the fused schedule of the storage graph computes what its graph does. */
static void same_values(const char *model, const char *const *defs, int nd, const int64_t *sym) {
  nnc_graph d, s;
  load(model, defs, nd, "bf16", NULL, &d);
  load(model, defs, nd, "bf16", "storage", &s);
  nnc_error err = {0};
  nnc_ref rd, rs;
  assert_int_equal(nnc_ref_init(&rd, &d, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_init(&rs, &s, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&rd, 11, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&rs, 11, &err), NNC_OK);
  assert_int_equal(nnc_ref_run_graph(&rd, &err), NNC_OK);
  assert_int_equal(nnc_ref_run_graph(&rs, &err), NNC_OK);
  int td = d.outputs[0].tensor, ts = s.outputs[0].tensor;
  int64_t n = nnc_ref_elems(&rs, ts);
  assert_int_equal(n, nnc_ref_elems(&rd, td));
  assert_true(n > 0);
  double e = nnc_ref_rel_error(rs.val[ts], rd.val[td], n);
  assert_true(e < 1e-6);
  /* a different seed gives other values: the comparison can fail */
  nnc_ref ro;
  assert_int_equal(nnc_ref_init(&ro, &s, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&ro, 12, &err), NNC_OK);
  assert_int_equal(nnc_ref_run_graph(&ro, &err), NNC_OK);
  assert_true(nnc_ref_rel_error(ro.val[ts], rd.val[td], n) > 1e-3);
  nnc_ref_free(&ro);
  /* the fused schedule */
  nnc_schedule sc;
  nnc_schedule_init(&sc, &s);
  if (nnc_compile_graph(&s, &sc, &err)) fail_msg("%s", err.msg);
  nnc_ref rk;
  assert_int_equal(nnc_ref_init(&rk, &s, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&rk, 11, &err), NNC_OK);
  if (nnc_ref_run_schedule(&rk, &sc, &err)) fail_msg("%s", err.msg);
  ts = s.outputs[0].tensor;
  assert_non_null(rk.val[ts]);
  assert_true(nnc_ref_rel_error(rk.val[ts], rs.val[ts], n) < 1e-9);
  nnc_ref_free(&rk);
  nnc_schedule_free(&sc);
  nnc_ref_free(&rd);
  nnc_ref_free(&rs);
  nnc_graph_free(&d);
  nnc_graph_free(&s);
}

static void test_same_values(void **state) {
  (void)state;
  const int64_t mlp_sym[] = {17};
  same_values("models/mlp.lua", mlp_small, 3, mlp_sym);
  const int64_t gpt2_sym[] = {3, 17};
  same_values("models/gpt2.lua", gpt2_small, 5, gpt2_sym);
}

/* The kernels: the MLP's logits have a bias, so the default's cast stays a
 * kernel of its own, which storage saves; GPT-2's LM head (no bias) folds
 * the cast into its GEMM by default, and under storage the GEMM writes the
 * bf16 output itself, in as many kernels. */
static int kernels(const char *model, const char *const *defs, int nd, const char *outputs, nnc_dtype *last_gemm_out) {
  nnc_graph g;
  load(model, defs, nd, "bf16", outputs, &g);
  nnc_schedule sc;
  nnc_schedule_init(&sc, &g);
  nnc_error err = {0};
  if (nnc_compile_graph(&g, &sc, &err)) fail_msg("%s", err.msg);
  int nk = sc.nk;
  *last_gemm_out = NNC_DTYPE_COUNT;
  for (int k = 0; k < sc.nk; k++)
    if (sc.k[k].kind == NNC_KERNEL_GEMM) *last_gemm_out = g.tensors[sc.k[k].d.gemm.out].dtype;
  nnc_schedule_free(&sc);
  nnc_graph_free(&g);
  return nk;
}

static void test_kernels(void **state) {
  (void)state;
  nnc_dtype dd, ds;
  int kd = kernels("models/mlp.lua", mlp_small, 3, NULL, &dd), ks = kernels("models/mlp.lua", mlp_small, 3, "storage", &ds);
  assert_int_equal(ks, kd - 1);
  assert_int_equal(dd, NNC_BF16);   /* the default's last GEMM writes bf16, then a cast kernel */
  assert_int_equal(ds, NNC_BF16);
  kd = kernels("models/gpt2.lua", gpt2_small, 5, NULL, &dd);
  ks = kernels("models/gpt2.lua", gpt2_small, 5, "storage", &ds);
  assert_int_equal(ks, kd);
  assert_int_equal(dd, NNC_F32);    /* the cast folded into the LM head */
  assert_int_equal(ds, NNC_BF16);   /* the LM head writes the bf16 logits */
}

/* A batch norm folded into its convolution computes the GEMM's weight and
 * bias from the weights alone: on a target that takes weights of mixed
 * dtypes (CUDA) those weights stay f32, the arithmetic runs
 * in f32 and each result reaches the GEMM through one cast to bf16; the
 * GEMMs still read bf16 operands. A model without such arithmetic (GPT-2,
 * whose wpe slice is weight-only but no arithmetic) keeps every weight bf16. */
static void test_weight_math_f32(void **state) {
  (void)state;
  static const char *resnet[] = {"size=33", "width=4", "classes=7", "batch=2", "layout=nhwc"};
  nnc_graph g;
  load("models/resnet18.lua", resnet, 5, "bf16", NULL, &g);
  int f32 = 0, linears = 0;
  for (int i = 0; i < g.nparams; i++) {
    const nnc_tensor *t = &g.tensors[g.params[i]];
    bool folded = strstr(t->name, "conv") || strstr(t->name, "bn") || strstr(t->name, "downsample");
    assert_int_equal(t->dtype, folded ? NNC_F32 : NNC_BF16);   /* fc stays bf16 */
    f32 += folded;
  }
  assert_int_equal(f32, 20 + 20 * 4);   /* 20 convolutions, 20 batch norms */
  /* the convolutions before folding are left for DCE */
  nnc_error err = {0};
  int removed = 0;
  assert_int_equal(nnc_pass_dce(&g, &removed, &err), NNC_OK);
  for (int n = 0; n < g.nnodes; n++) {
    const nnc_node *x = &g.nodes[n];
    if (x->dead || x->op != NNC_OP_LINEAR) continue;
    linears++;
    for (int j = 0; j < x->nin; j++) {
      int t = x->in[j], p = g.tensors[t].producer;
      assert_int_equal(g.tensors[t].dtype, NNC_BF16);
      /* a folded weight or bias: rounded once, by a cast of its f32 value */
      if (j > 0 && p >= 0) {
        assert_int_equal(g.nodes[p].op, NNC_OP_CAST);
        assert_int_equal(g.tensors[g.nodes[p].in[0]].dtype, NNC_F32);
      }
    }
  }
  assert_int_equal(linears, 20 + 1);
  nnc_graph_free(&g);
  load("models/gpt2.lua", gpt2_small, 5, "bf16", NULL, &g);
  for (int i = 0; i < g.nparams; i++) assert_int_equal(g.tensors[g.params[i]].dtype, NNC_BF16);
  nnc_graph_free(&g);
  /* a target whose weights all have the storage dtype (OpenCL): every weight bf16 */
  weight_math = false;
  load("models/resnet18.lua", resnet, 5, "bf16", NULL, &g);
  weight_math = true;
  for (int i = 0; i < g.nparams; i++) assert_int_equal(g.tensors[g.params[i]].dtype, NNC_BF16);
  nnc_graph_free(&g);
}

/* An i32 output stays i32, and two outputs of one tensor share one cast by
 * default and none under storage. */
static void test_edges(void **state) {
  (void)state;
  char path[512];
  write_model("edges.lua",
              "local B = dim(\"B\", 8)\n"
              "local x = input(\"x\", f32, { B, 5 })\n"
              "local h = relu(linear(x, 7, param(\"fc\")))\n"
              "output(\"h\", h)\n"
              "output(\"h2\", h)\n"
              "output(\"n\", cast(h, i32))\n",
              path, sizeof path);
  nnc_graph d, s, f;
  load(path, NULL, 0, "bf16", NULL, &d);
  load(path, NULL, 0, "bf16", "storage", &s);
  load(path, NULL, 0, "f32", "storage", &f);
  assert_int_equal(d.noutputs, 3);
  assert_int_equal(s.noutputs, 3);
  /* h and h2: one cast shared by default, none under storage */
  assert_int_equal(out_dtype(&d, 0), NNC_F32);
  assert_int_equal(out_producer(&d, 0), NNC_OP_CAST);
  assert_int_equal(d.outputs[0].tensor, d.outputs[1].tensor);
  assert_int_equal(out_dtype(&s, 0), NNC_BF16);
  assert_int_equal(out_dtype(&s, 1), NNC_BF16);
  assert_int_equal(out_producer(&s, 0), NNC_OP_RELU);
  assert_int_equal(s.outputs[0].tensor, s.outputs[1].tensor);
  /* the i32 output */
  assert_int_equal(out_dtype(&d, 2), NNC_I32);
  assert_int_equal(out_dtype(&s, 2), NNC_I32);
  /* casts: the input's and the model's own to i32, plus h's by default */
  assert_int_equal(count_op(&s, NNC_OP_CAST), 2);
  assert_int_equal(count_op(&d, NNC_OP_CAST), 3);
  /* f32 precision: the option changes nothing, no cast is added */
  assert_int_equal(count_op(&f, NNC_OP_CAST), 1);
  for (int i = 0; i < 2; i++) assert_int_equal(out_dtype(&f, i), NNC_F32);
  assert_int_equal(f.tensors[f.params[0]].dtype, NNC_F32);
  assert_int_equal(s.tensors[s.params[0]].dtype, NNC_BF16);
  nnc_graph_free(&d);
  nnc_graph_free(&s);
  nnc_graph_free(&f);
}

static int setup(void **state) {
  (void)state;
  snprintf(work, sizeof work, "/tmp/nnc_precision_XXXXXX");
  return mkdtemp(work) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", work);
  return system(cmd) == 0 ? 0 : -1;
}

/* --train's loss scale multiplies the backward's seed, in the loss's dtype:
 * a cross-entropy's loss is f32, so the scale stays f32 (no cast: 1e9 stays
 * finite there, the f16 gradients overflow); a mean of narrow values is
 * narrow, so the scale is cast to it like any input. */
static void test_loss_scale(void **state) {
  (void)state;
  static const struct {
    const char *model;
    nnc_dtype want;
  } cases[] = {{"tests/ops/embedding_loss.lua", NNC_F32}, {"tests/ops/attention_loss.lua", NNC_F16}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char path[512];
    snprintf(path, sizeof path, NNC_SOURCE_ROOT "/%s", cases[c].model);
    nnc_frontend_opts fo = {.path = path};
    nnc_error err = {0};
    nnc_precision p;
    nnc_graph g;
    nnc_graph_init(&g);
    assert_int_equal(nnc_frontend_load(&fo, &g, &err), NNC_OK);
    assert_int_equal(nnc_pass_check(&g, &err), NNC_OK);
    assert_int_equal(nnc_pass_autodiff(&g, NULL, &err), NNC_OK);
    assert_int_equal(nnc_precision_parse("f16", &p, &err), NNC_OK);
    if (nnc_pass_precision(&g, &p, &err)) fail_msg("%s: %s", cases[c].model, err.msg);
    int scale = g.inputs[g.ninputs - 1], readers = 0;
    assert_string_equal(g.tensors[scale].name, "loss_scale");
    assert_int_equal(g.tensors[scale].dtype, NNC_F32);
    for (int n = 0; n < g.nnodes; n++) {
      const nnc_node *x = &g.nodes[n];
      if (x->dead || x->nin < 1 || x->in[0] != scale) continue;
      readers++;
      /* the one reader: the seed's reshape, or a cast to the loss's dtype */
      assert_int_equal(x->op, cases[c].want == NNC_F32 ? NNC_OP_RESHAPE : NNC_OP_CAST);
      assert_int_equal(g.tensors[x->out[0]].dtype, cases[c].want);
    }
    assert_int_equal(readers, 1);
    nnc_graph_free(&g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_outputs_parse),
    cmocka_unit_test(test_mlp_casts),
    cmocka_unit_test(test_same_values),
    cmocka_unit_test(test_kernels),
    cmocka_unit_test(test_weight_math_f32),
    cmocka_unit_test(test_edges),
    cmocka_unit_test(test_loss_scale),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
