/* tests/unit/test_parallel_train.c — tensor-parallel training (--train
 * --parallel=tp:N): the plan of the forward, then autodiff over it.
 *
 * Each model is loaded twice in training mode at odd sizes: whole and
 * differentiated, and split by the plan then differentiated. The float64
 * reference runs the whole graph once and the plan's ranks together, each
 * rank given its slices of the same random weights. The loss of every rank
 * must equal the whole graph's; each gradient of a replicated weight too;
 * each gradient of a split weight must equal the rank's slice of the whole
 * gradient (zero in a vocabulary's padded rows). That checks every new VJP
 * rule on a real model: all_reduce's (the identity), the column-split
 * layers' partial dx all_reduced (Megatron's f), the vocabulary-split
 * embedding's scatter into the rank's rows, and the distributed
 * cross-entropy's. all_gather's (the rank's own slice of the gradient) is
 * checked on a small graph of its own. */
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
#include "passes/passes.h"
#include "ref/ref.h"

#ifndef NNC_SOURCE_ROOT
#define NNC_SOURCE_ROOT "."
#endif

typedef struct load_opts {
  const char *parallel;   /* NULL: no plan */
  bool primitive;         /* attention and norms through their primitive ops' gradients */
} load_opts;

static nnc_status load(nnc_graph *g, const char *name, const char *const *defines, int ndefines, load_opts lo,
                       nnc_error *err) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s.lua", NNC_SOURCE_ROOT, name);
  nnc_frontend_opts o = {.path = path, .defines = defines, .ndefines = ndefines, .training = true};
  nnc_autodiff_opts ad = {.primitive_attention = lo.primitive, .primitive_norms = lo.primitive};
  nnc_parallel p;
  nnc_graph_init(g);
  nnc_status st = nnc_frontend_load(&o, g, err);
  if (!st) st = nnc_pass_check(g, err);
  if (!st) st = nnc_parallel_parse(lo.parallel, &p, err);
  if (!st) st = nnc_pass_parallel(g, &p, err);
  if (!st) st = nnc_pass_autodiff(g, &ad, err);
  int removed = 0;   /* the head's gather, which the distributed loss no longer reads */
  if (!st) st = nnc_pass_dce(g, &removed, err);
  if (!st) st = nnc_pass_check(g, err);
  return st;
}

static int count_op(const nnc_graph *g, nnc_op op) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) n += !g->nodes[i].dead && g->nodes[i].op == op;
  return n;
}

static const nnc_tensor *param_named(const nnc_graph *g, const char *name) {
  for (int i = 0; i < g->nparams; i++)
    if (strcmp(g->tensors[g->params[i]].name, name) == 0) return &g->tensors[g->params[i]];
  return NULL;
}

/* The largest relative error of every rank's outputs (the loss, then the
 * gradients: whole, or the rank's slice of the whole gradient) against the
 * whole graph's. */
static double ranks_vs_whole(const nnc_graph *whole, const nnc_graph *plan, int n, const int64_t *sym) {
  nnc_error err = {0};
  nnc_ref ref;
  if (nnc_ref_init(&ref, whole, sym, &err) || nnc_ref_random_inputs(&ref, 11, &err) || nnc_ref_run_graph(&ref, &err))
    fail_msg("whole graph: %s", err.msg);
  nnc_ref *rs = calloc((size_t)n, sizeof *rs);
  assert_non_null(rs);
  assert_int_equal(whole->ninputs, plan->ninputs);
  assert_int_equal(whole->nparams, plan->nparams);
  assert_int_equal(whole->noutputs, plan->noutputs);
  for (int r = 0; r < n; r++) {
    if (nnc_ref_init(&rs[r], plan, sym, &err)) fail_msg("rank %d: %s", r, err.msg);
    for (int i = 0; i < plan->ninputs; i++) {
      assert_string_equal(whole->tensors[whole->inputs[i]].name, plan->tensors[plan->inputs[i]].name);
      double *dst = nnc_ref_alloc(&rs[r], plan->inputs[i]);
      assert_non_null(dst);
      memcpy(dst, ref.val[whole->inputs[i]], (size_t)nnc_ref_elems(&ref, whole->inputs[i]) * sizeof *dst);
    }
    for (int i = 0; i < plan->nparams; i++) {
      const nnc_tensor *wt = &whole->tensors[whole->params[i]], *pt = &plan->tensors[plan->params[i]];
      double *dst = nnc_ref_alloc(&rs[r], plan->params[i]);
      assert_non_null(dst);
      const double *src = ref.val[whole->params[i]];
      if (!pt->shard.parts) {
        memcpy(dst, src, (size_t)nnc_ref_elems(&ref, whole->params[i]) * sizeof *dst);
        continue;
      }
      int64_t shape[NNC_MAX_RANK];
      for (int d = 0; d < wt->rank; d++) shape[d] = nnc_dim_eval(wt->shape[d], sym);
      nnc_ref_shard_slice(src, wt->rank, shape, &pt->shard, r, dst);
    }
  }
  if (nnc_ref_run_ranks(rs, n, &err)) fail_msg("ranks: %s", err.msg);
  double worst = 0;
  for (int o = 0; o < plan->noutputs; o++) {
    const char *name = plan->outputs[o].name;
    assert_string_equal(name, whole->outputs[o].name);
    const nnc_tensor *wt = &whole->tensors[whole->outputs[o].tensor];
    const nnc_tensor *p = !strncmp(name, "grad.", 5) ? param_named(plan, name + 5) : NULL;
    int64_t e = nnc_ref_elems(&ref, whole->outputs[o].tensor), pe = nnc_ref_elems(&rs[0], plan->outputs[o].tensor);
    double *want = malloc((size_t)(pe > e ? pe : e) * sizeof *want);
    assert_non_null(want);
    for (int r = 0; r < n; r++) {
      const double *full = ref.val[whole->outputs[o].tensor];
      if (p && p->shard.parts) {
        int64_t shape[NNC_MAX_RANK];
        for (int d = 0; d < wt->rank; d++) shape[d] = nnc_dim_eval(wt->shape[d], sym);
        nnc_ref_shard_slice(full, wt->rank, shape, &p->shard, r, want);
      } else {
        assert_int_equal(pe, e);
        memcpy(want, full, (size_t)e * sizeof *want);
      }
      double d = nnc_ref_rel_error(rs[r].val[plan->outputs[o].tensor], want, pe);
      if (d > 1e-9) fail_msg("rank %d of %d: %s differs from the whole graph's by %g", r, n, name, d);
      if (d > worst) worst = d;
    }
    free(want);
  }
  for (int r = 0; r < n; r++) nnc_ref_free(&rs[r]);
  free(rs);
  nnc_ref_free(&ref);
  return worst;
}

static void check_model(const char *name, const char *const *defines, int ndefines, const char *plan, int n,
                        bool primitive) {
  nnc_graph whole, split;
  nnc_error err = {0};
  if (load(&whole, name, defines, ndefines, (load_opts){NULL, primitive}, &err)) fail_msg("%s: %s", name, err.msg);
  if (load(&split, name, defines, ndefines, (load_opts){plan, primitive}, &err))
    fail_msg("%s %s: %s", name, plan, err.msg);
  assert_int_equal(split.ranks, n);
  /* the loss over the split head's logits: no all_gather left, the three
   * all_reduces' numbers (the max, then the two sums in one [rows, 2]) */
  assert_int_equal(count_op(&split, NNC_OP_ALL_GATHER), 0);
  assert_int_equal(count_op(&split, NNC_OP_CE_SHARD), 1);
  assert_int_equal(count_op(&split, NNC_OP_CE_SHARD_GRAD), 1);
  assert_int_equal(count_op(&split, NNC_OP_CROSS_ENTROPY), 0);
  int64_t sym[8];
  for (int i = 0; i < split.nsyms; i++) sym[i] = split.syms[i].max > 3 ? 3 : split.syms[i].max;
  double e = ranks_vs_whole(&whole, &split, n, sym);
  print_message("%s %s%s: loss and %d gradients within %.2g of the whole graph's\n", name, plan,
                primitive ? " (primitive gradients)" : "", split.noutputs - 1, e);
  nnc_graph_free(&whole);
  nnc_graph_free(&split);
}

static const char *const gpt2_d[] = {"layers=2", "d=36", "heads=6", "vocab=101", "ctx=9", "batch=3"};

static void test_gpt2_tp_train(void **state) {
  (void)state;
  check_model("gpt2", gpt2_d, 6, "tp:2", 2, false);
  check_model("gpt2", gpt2_d, 6, "tp:3", 3, false);
  check_model("gpt2", gpt2_d, 6, "tp:4", 4, false);   /* 6 heads do not split 4 ways: MLPs and vocabulary only */
  check_model("gpt2", gpt2_d, 6, "tp:2", 2, true);
}

static void test_llama_tp_train(void **state) {
  (void)state;
  const char *l[] = {"layers=1", "d=32", "heads=4", "kv_heads=2", "ffn=24", "vocab=101", "ctx=7", "batch=2"};
  check_model("llama", l, 8, "tp:2", 2, false);
  check_model("llama", l, 8, "tp:4", 4, false);
}

/* The backward's collectives in gpt2 tp:2: one all_reduce of dx after each
 * column-split layer (2 blocks x c_attn, c_fc) and after the head (tied to
 * the embedding), besides the forward's 5 and the loss's 2. */
static void test_gpt2_collectives(void **state) {
  (void)state;
  nnc_graph g;
  nnc_error err = {0};
  if (load(&g, "gpt2", gpt2_d, 6, (load_opts){"tp:2", false}, &err)) fail_msg("%s", err.msg);
  int maxes = 0, grads = 0, total = 0;
  for (int i = 0; i < g.nnodes; i++) {
    const nnc_node *n = &g.nodes[i];
    if (n->dead || n->op != NNC_OP_ALL_REDUCE) continue;
    total++;
    maxes += n->attrs.reduce_max;
    grads += !strncmp(n->label, "grad.", 5);
  }
  assert_int_equal(maxes, 1);
  assert_int_equal(grads, 5);
  assert_int_equal(total, 5 + 2 + 5);
  /* the embedding's gradient goes to this rank's 51 rows of the 101 */
  int scatters = 0;
  for (int i = 0; i < g.nnodes; i++) {
    const nnc_node *n = &g.nodes[i];
    if (n->dead || n->op != NNC_OP_EMBEDDING_GRAD) continue;
    scatters++;
    assert_int_equal(n->attrs.ranks, 2);
    assert_int_equal(n->attrs.vocab, 101);
    assert_true(nnc_dim_eq_const(g.tensors[n->out[0]].shape[0], 51));
  }
  assert_int_equal(scatters, 1);
  nnc_graph_free(&g);
}

/* all_gather's gradient: loss = sum(y * y) over y = all_gather(w) of each
 * rank's w [3] (a [6] weight split 2 ways). The gradient of rank r's w is
 * its own entry of dy = 2 y: 2 w, the rank's slice of the whole 2 w. */
static void test_all_gather_grad(void **state) {
  (void)state;
  nnc_graph g;
  nnc_error err = {0};
  nnc_graph_init(&g);
  nnc_dim shape[1] = {nnc_dim_const(3)};
  int w, id, y, sq, flat, loss;
  assert_int_equal(nnc_graph_add_param(&g, "w", NNC_F32, 1, shape, NNC_NOLOC, &w, &err), NNC_OK);
  g.tensors[w].shard = (nnc_shard){0, 2, 1, 0};
  nnc_attrs a = {.ranks = 2};
  assert_int_equal(nnc_graph_add_node(&g, NNC_OP_ALL_GATHER, 1, &w, &a, 1, NNC_NOLOC, "gather", &id, &err), NNC_OK);
  y = g.nodes[id].out[0];
  int in[2] = {y, y};
  assert_int_equal(nnc_graph_add_node(&g, NNC_OP_MUL, 2, in, NULL, 1, NNC_NOLOC, "sq", &id, &err), NNC_OK);
  sq = g.nodes[id].out[0];
  assert_int_equal(nnc_graph_add_node(&g, NNC_OP_RESHAPE, 1, &sq, NULL, 1, NNC_NOLOC, "flat", &id, &err), NNC_OK);
  flat = g.nodes[id].out[0];
  g.tensors[flat].rank = 1;
  g.tensors[flat].shape[0] = nnc_dim_const(6);
  nnc_attrs s = {.axis = 0};
  assert_int_equal(nnc_graph_add_node(&g, NNC_OP_SUM, 1, &flat, &s, 1, NNC_NOLOC, "loss", &id, &err), NNC_OK);
  loss = g.nodes[id].out[0];
  assert_int_equal(nnc_graph_add_output(&g, "loss", loss, NNC_NOLOC, &err), NNC_OK);
  g.ranks = 2;
  assert_int_equal(nnc_pass_check(&g, &err), NNC_OK);
  nnc_autodiff_opts ad = {.no_loss_scale = true};
  if (nnc_pass_autodiff(&g, &ad, &err) || nnc_pass_check(&g, &err)) fail_msg("%s", err.msg);
  assert_int_equal(count_op(&g, NNC_OP_RANK_SLICE), 1);
  nnc_ref rs[2];
  for (int r = 0; r < 2; r++) {
    assert_int_equal(nnc_ref_init(&rs[r], &g, NULL, &err), NNC_OK);
    double *v = nnc_ref_alloc(&rs[r], w);
    for (int i = 0; i < 3; i++) v[i] = 0.5 + 3 * r + i;   /* the whole w: 0.5, 1.5, ..., 5.5 */
  }
  if (nnc_ref_run_ranks(rs, 2, &err)) fail_msg("%s", err.msg);
  assert_string_equal(g.outputs[1].name, "grad.w");
  for (int r = 0; r < 2; r++) {
    assert_true(fabs(rs[r].val[g.outputs[0].tensor][0] - (0.25 + 2.25 + 6.25 + 12.25 + 20.25 + 30.25)) < 1e-12);
    for (int i = 0; i < 3; i++) assert_true(rs[r].val[g.outputs[1].tensor][i] == 2 * (0.5 + 3 * r + i));
    nnc_ref_free(&rs[r]);
  }
  nnc_graph_free(&g);
}

/* cross_entropy_shard against a hand count: 2 ranks of R = 3 classes over a
 * vocabulary of 5 (rank 1's third class is padding), one row, target 3 (rank
 * 1's first class), shift 0. */
static void test_ce_shard_op(void **state) {
  (void)state;
  nnc_graph g;
  nnc_error err = {0};
  nnc_graph_init(&g);
  nnc_dim ls[2] = {nnc_dim_const(1), nnc_dim_const(3)}, rs1[1] = {nnc_dim_const(1)};
  int l, t, m, id, dy;
  assert_int_equal(nnc_graph_add_input(&g, "logits", NNC_F32, 2, ls, NNC_NOLOC, &l, &err), NNC_OK);
  assert_int_equal(nnc_graph_add_input(&g, "targets", NNC_I32, 1, rs1, NNC_NOLOC, &t, &err), NNC_OK);
  assert_int_equal(nnc_graph_add_input(&g, "shift", NNC_F32, 1, rs1, NNC_NOLOC, &m, &err), NNC_OK);
  nnc_dim ds[2] = {nnc_dim_const(1), nnc_dim_const(2)};
  assert_int_equal(nnc_graph_add_input(&g, "dstats", NNC_F32, 2, ds, NNC_NOLOC, &dy, &err), NNC_OK);
  nnc_attrs a = {.ranks = 2, .vocab = 5};
  int in[4] = {l, t, m, dy}, fw, bw;
  assert_int_equal(nnc_graph_add_node(&g, NNC_OP_CE_SHARD, 3, in, &a, 1, NNC_NOLOC, "ce", &id, &err), NNC_OK);
  fw = g.nodes[id].out[0];
  assert_int_equal(nnc_graph_add_node(&g, NNC_OP_CE_SHARD_GRAD, 4, in, &a, 1, NNC_NOLOC, "dce", &id, &err), NNC_OK);
  bw = g.nodes[id].out[0];
  assert_int_equal(nnc_graph_add_output(&g, "stats", fw, NNC_NOLOC, &err), NNC_OK);
  assert_int_equal(nnc_graph_add_output(&g, "dlogits", bw, NNC_NOLOC, &err), NNC_OK);
  assert_int_equal(nnc_pass_check(&g, &err), NNC_OK);
  assert_true(nnc_dim_eq_const(g.tensors[fw].shape[1], 2));
  nnc_ref r[2];
  for (int k = 0; k < 2; k++) {
    assert_int_equal(nnc_ref_init(&r[k], &g, NULL, &err), NNC_OK);
    double *v = nnc_ref_alloc(&r[k], l);
    for (int i = 0; i < 3; i++) v[i] = 0.1 * (3 * k + i);
    nnc_ref_alloc(&r[k], t)[0] = 3;
    nnc_ref_alloc(&r[k], m)[0] = 0;
    nnc_ref_alloc(&r[k], dy)[0] = 2;
    nnc_ref_alloc(&r[k], dy)[1] = -1;
  }
  if (nnc_ref_run_ranks(r, 2, &err)) fail_msg("%s", err.msg);
  const double *s0 = r[0].val[fw], *s1 = r[1].val[fw], *d0 = r[0].val[bw], *d1 = r[1].val[bw];
  assert_true(fabs(s0[0] - (exp(0.0) + exp(0.1) + exp(0.2))) < 1e-15 && s0[1] == 0);
  assert_true(fabs(s1[0] - (exp(0.3) + exp(0.4))) < 1e-15 && fabs(s1[1] - 0.3) < 1e-15);
  assert_true(fabs(d0[2] - 2 * exp(0.2)) < 1e-15);
  assert_true(fabs(d1[0] - (2 * exp(0.3) - 1)) < 1e-15 && fabs(d1[1] - 2 * exp(0.4)) < 1e-15 && d1[2] == 0);
  for (int k = 0; k < 2; k++) nnc_ref_free(&r[k]);
  nnc_graph_free(&g);
}

/* What a plan cannot split is said at the model's line. */
static void test_refusals(void **state) {
  (void)state;
  nnc_graph g;
  nnc_error err = {0};
  /* d=35 over 3 ranks: c_attn's 3 x 35 columns, c_fc's 140 do not divide, nor do 5 heads; 2 tokens are
   * fewer than the ranks */
  const char *d[] = {"layers=1", "d=35", "heads=5", "vocab=2", "ctx=9", "batch=3"};
  assert_int_equal(load(&g, "gpt2", d, 6, (load_opts){"tp:3", false}, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "gpt2.lua:"));
  assert_non_null(strstr(err.msg, "h.0.attn.c_attn.weight"));
  nnc_graph_free(&g);
  nnc_parallel p;
  assert_int_equal(nnc_parallel_parse("tp:2", &p, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, false, true, "c-simd", true, &err), NNC_E_USAGE);
  /* tp:N with dp:M trains on N * M ranks, written in either order; data
   * parallelism stays a training plan, ZeRO-1 a dp:M-alone one */
  assert_int_equal(nnc_parallel_parse("tp:2,dp:2", &p, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "cuda-sm90a", true, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, false, false, "c-simd", true, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "--train"));
  assert_int_equal(nnc_parallel_supported(&p, true, false, "opencl", false, &err), NNC_E_TARGET);
  assert_int_equal(nnc_parallel_parse("dp:3,tp:2", &p, &err), NNC_OK);
  assert_int_equal(p.tp, 2);
  assert_int_equal(p.dp, 3);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_OK);
  assert_int_equal(nnc_parallel_parse("tp:64,dp:32", &p, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "2048"));
  assert_int_equal(nnc_parallel_parse("tp:2,dp:2,zero1", &p, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "zero1"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ce_shard_op),
    cmocka_unit_test(test_all_gather_grad),
    cmocka_unit_test(test_gpt2_collectives),
    cmocka_unit_test(test_gpt2_tp_train),
    cmocka_unit_test(test_llama_tp_train),
    cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
