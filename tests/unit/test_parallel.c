/* tests/unit/test_parallel.c — the tensor-parallel plan (passes/parallel.c).
 *
 * Each model is loaded twice at odd sizes: whole, and under tp:N. The float64
 * reference runs the whole graph once and the plan's graph for its N ranks
 * together (each rank given its slices of the same random weights, the
 * all_reduces summing across them, the all_gathers stacking); every output
 * of every rank must equal the whole graph's. The plan's shape is checked
 * too: which weights split, along which axis, one all_reduce after each
 * split pair and after each vocabulary-split embedding, one all_gather after
 * each vocabulary-split head. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

static void load(nnc_graph *g, const char *name, const char *const *defines, int ndefines, const char *parallel) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s.lua", NNC_SOURCE_ROOT, name);
  nnc_frontend_opts o = {.path = path, .defines = defines, .ndefines = ndefines};
  nnc_error err = {0};
  nnc_parallel p;
  nnc_graph_init(g);
  nnc_status st = nnc_frontend_load(&o, g, &err);
  if (!st) st = nnc_pass_check(g, &err);
  if (!st) st = nnc_parallel_parse(parallel, &p, &err);
  if (!st) st = nnc_pass_parallel(g, &p, &err);
  if (st) fail_msg("%s under %s: %s", name, parallel ? parallel : "no plan", err.msg);
}

static int count_op(const nnc_graph *g, nnc_op op) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) n += !g->nodes[i].dead && g->nodes[i].op == op;
  return n;
}

static const nnc_tensor *param(const nnc_graph *g, const char *name) {
  for (int i = 0; i < g->nparams; i++)
    if (strcmp(g->tensors[g->params[i]].name, name) == 0) return &g->tensors[g->params[i]];
  fail_msg("no parameter %s", name);
  return NULL;
}

/* The plan's ranks against the whole graph, on the same random values;
 * returns the largest relative error over every rank's outputs. */
static double ranks_vs_whole(const nnc_graph *whole, const nnc_graph *plan, int n, const int64_t *sym) {
  nnc_error err = {0};
  nnc_ref ref;
  if (nnc_ref_init(&ref, whole, sym, &err) || nnc_ref_random_inputs(&ref, 7, &err) || nnc_ref_run_graph(&ref, &err))
    fail_msg("whole graph: %s", err.msg);
  nnc_ref *rs = calloc((size_t)n, sizeof *rs);
  assert_non_null(rs);
  assert_int_equal(whole->ninputs, plan->ninputs);
  assert_int_equal(whole->nparams, plan->nparams);
  for (int r = 0; r < n; r++) {
    if (nnc_ref_init(&rs[r], plan, sym, &err)) fail_msg("rank %d: %s", r, err.msg);
    for (int i = 0; i < plan->ninputs; i++) {
      int64_t e = nnc_ref_elems(&ref, whole->inputs[i]);
      double *dst = nnc_ref_alloc(&rs[r], plan->inputs[i]);
      assert_non_null(dst);
      memcpy(dst, ref.val[whole->inputs[i]], (size_t)e * sizeof *dst);
    }
    for (int i = 0; i < plan->nparams; i++) {
      const nnc_tensor *wt = &whole->tensors[whole->params[i]], *pt = &plan->tensors[plan->params[i]];
      assert_string_equal(wt->name, pt->name);
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
  for (int r = 0; r < n; r++)
    for (int o = 0; o < plan->noutputs; o++) {
      int64_t e = nnc_ref_elems(&ref, whole->outputs[o].tensor);
      assert_int_equal(e, nnc_ref_elems(&rs[r], plan->outputs[o].tensor));
      double d = nnc_ref_rel_error(rs[r].val[plan->outputs[o].tensor], ref.val[whole->outputs[o].tensor], e);
      if (d > worst) worst = d;
    }
  for (int r = 0; r < n; r++) nnc_ref_free(&rs[r]);
  free(rs);
  nnc_ref_free(&ref);
  return worst;
}

static void check_model(const char *name, const char *const *defines, int ndefines, const char *plan, int n,
                        int want_reduces, int want_gathers) {
  nnc_graph whole, split;
  load(&whole, name, defines, ndefines, NULL);
  load(&split, name, defines, ndefines, plan);
  assert_int_equal(split.ranks, n);
  assert_int_equal(count_op(&split, NNC_OP_ALL_REDUCE), want_reduces);
  assert_int_equal(count_op(&split, NNC_OP_ALL_GATHER), want_gathers);
  int64_t sym[8];
  for (int i = 0; i < split.nsyms; i++) sym[i] = split.syms[i].max > 3 ? 3 : split.syms[i].max;
  double e = ranks_vs_whole(&whole, &split, n, sym);
  if (e > 1e-12) fail_msg("%s %s: the ranks' outputs differ from the whole graph's by %g", name, plan, e);
  nnc_graph_free(&whole);
  nnc_graph_free(&split);
}

static void test_gpt2_tp(void **state) {
  (void)state;
  const char *d[] = {"layers=2", "d=36", "heads=6", "vocab=53", "ctx=9", "batch=3"};
  /* 2 layers' pairs and the embedding: 5 all_reduces; the head: 1 all_gather */
  check_model("gpt2", d, 6, "tp:2", 2, 5, 1);
  check_model("gpt2", d, 6, "tp:3", 3, 5, 1);
  check_model("gpt2", d, 6, "tp:6", 6, 5, 1);
  nnc_graph g;
  load(&g, "gpt2", d, 6, "tp:3");
  /* q|k|v split by heads within each of the three, c_proj by input rows, wte (tied to the head) by
   * vocabulary rows: 53 over 3 ranks, 18 rows each, the last one's 17 and a zero row */
  const nnc_tensor *attn = param(&g, "h.0.attn.c_attn.weight"), *bias = param(&g, "h.0.attn.c_attn.bias");
  assert_int_equal(attn->shard.axis, 1);
  assert_int_equal(attn->shard.parts, 3);
  assert_int_equal(attn->shard.groups, 3);
  assert_true(nnc_dim_eq_const(attn->shape[1], 36));
  assert_int_equal(bias->shard.groups, 3);
  const nnc_tensor *proj = param(&g, "h.1.mlp.c_proj.weight");
  assert_int_equal(proj->shard.axis, 0);
  assert_int_equal(proj->shard.groups, 1);
  assert_true(nnc_dim_eq_const(proj->shape[0], 48));
  assert_int_equal(param(&g, "h.1.mlp.c_proj.bias")->shard.parts, 0);
  const nnc_tensor *wte = param(&g, "wte.weight");
  assert_int_equal(wte->shard.parts, 3);
  assert_int_equal(wte->shard.axis, 0);
  assert_int_equal(wte->shard.whole, 53);
  assert_true(nnc_dim_eq_const(wte->shape[0], 18));
  assert_true(nnc_dim_eq_const(wte->shape[1], 36));
  assert_int_equal(param(&g, "wpe.weight")->shard.parts, 0);
  assert_int_equal(param(&g, "ln_f.weight")->shard.parts, 0);
  nnc_graph_free(&g);
}

/* The node that writes tensor t. */
static const nnc_node *producer(const nnc_graph *g, int t) {
  assert_true(g->tensors[t].producer >= 0);
  return &g->nodes[g->tensors[t].producer];
}

/* A vocabulary that does not divide by the ranks: 101 rows over 2 ranks
 * (51 each, the second's last a zero row) and over 4 (26 each, the last
 * rank's 23 and 3 zero rows). The logits are gathered [4, B, T, 26],
 * turned to [B, T, 4, 26], joined to [B, T, 104] and sliced to 101. */
static void test_odd_vocab_tp(void **state) {
  (void)state;
  const char *d[] = {"layers=1", "d=36", "heads=6", "vocab=101", "ctx=9", "batch=3"};
  check_model("gpt2", d, 6, "tp:2", 2, 3, 1);
  check_model("gpt2", d, 6, "tp:4", 4, 2, 1);   /* 6 heads do not split 4 ways: the MLP and the embedding */
  const char *l[] = {"layers=1", "d=32", "heads=4", "kv_heads=2", "ffn=24", "vocab=101", "ctx=7", "batch=2"};
  check_model("llama", l, 8, "tp:2", 2, 3, 1);
  check_model("llama", l, 8, "tp:4", 4, 2, 1);
  nnc_graph g;
  load(&g, "gpt2", d, 6, "tp:4");
  const nnc_tensor *wte = param(&g, "wte.weight");
  assert_int_equal(wte->shard.whole, 101);
  assert_true(nnc_dim_eq_const(wte->shape[0], 26));
  const nnc_node *cut = producer(&g, g.outputs[0].tensor);
  assert_int_equal(cut->op, NNC_OP_SLICE);
  assert_true(nnc_dim_eq_const(cut->attrs.stop, 101));
  const nnc_node *joined = producer(&g, cut->in[0]);
  assert_int_equal(joined->op, NNC_OP_RESHAPE);
  assert_true(nnc_dim_eq_const(g.tensors[joined->out[0]].shape[2], 104));
  const nnc_node *turned = producer(&g, joined->in[0]);
  assert_int_equal(turned->op, NNC_OP_TRANSPOSE);
  const nnc_node *gather = producer(&g, turned->in[0]);
  assert_int_equal(gather->op, NNC_OP_ALL_GATHER);
  assert_int_equal(gather->attrs.ranks, 4);
  const nnc_tensor *stacked = &g.tensors[gather->out[0]];
  assert_int_equal(stacked->rank, 4);
  assert_true(nnc_dim_eq_const(stacked->shape[0], 4));
  assert_true(nnc_dim_eq_const(stacked->shape[3], 26));
  const nnc_node *head = producer(&g, gather->in[0]);
  assert_int_equal(head->op, NNC_OP_LINEAR);
  assert_string_equal(g.tensors[head->in[1]].name, "wte.weight");
  /* the embedding: this rank's rows of the 101, then their sum */
  int embeddings = 0;
  for (int i = 0; i < g.nnodes; i++) {
    const nnc_node *e = &g.nodes[i];
    if (e->dead || e->op != NNC_OP_EMBEDDING) continue;
    embeddings++;
    assert_int_equal(e->attrs.ranks, 4);
    assert_int_equal(e->attrs.vocab, 101);
    assert_int_equal(g.nodes[i + 1].op, NNC_OP_ALL_REDUCE);
  }
  assert_int_equal(embeddings, 1);
  nnc_graph_free(&g);
  /* llama's untied head splits as its embedding does: 51 rows a rank over 2 */
  load(&g, "llama", l, 8, "tp:2");
  const char *vocab[] = {"model.embed_tokens.weight", "lm_head.weight"};
  for (int i = 0; i < 2; i++) {
    const nnc_tensor *w = param(&g, vocab[i]);
    assert_int_equal(w->shard.parts, 2);
    assert_int_equal(w->shard.axis, 0);
    assert_int_equal(w->shard.whole, 101);
    assert_true(nnc_dim_eq_const(w->shape[0], 51));
  }
  assert_int_equal(param(&g, "model.norm.weight")->shard.parts, 0);
  nnc_graph_free(&g);
}

/* The all_gather's shape rule, and a single evaluator's refusal of it. */
static void test_all_gather_op(void **state) {
  (void)state;
  nnc_graph g;
  nnc_error err = {0};
  nnc_graph_init(&g);
  nnc_dim shape[2] = {nnc_dim_const(3), nnc_dim_const(5)};
  int x, id;
  nnc_attrs a = {.ranks = 3};
  assert_int_equal(nnc_graph_add_input(&g, "x", NNC_F32, 2, shape, NNC_NOLOC, &x, &err), NNC_OK);
  assert_int_equal(nnc_graph_add_node(&g, NNC_OP_ALL_GATHER, 1, &x, &a, 1, NNC_NOLOC, "g", &id, &err), NNC_OK);
  assert_int_equal(nnc_graph_add_output(&g, "y", g.nodes[id].out[0], NNC_NOLOC, &err), NNC_OK);
  assert_int_equal(nnc_pass_check(&g, &err), NNC_OK);
  const nnc_tensor *y = &g.tensors[g.nodes[id].out[0]];
  assert_int_equal(y->rank, 3);
  assert_true(nnc_dim_eq_const(y->shape[0], 3) && nnc_dim_eq_const(y->shape[1], 3) && nnc_dim_eq_const(y->shape[2], 5));
  /* three ranks' x stacked in rank order, on every rank */
  nnc_ref rs[3];
  for (int r = 0; r < 3; r++) {
    assert_int_equal(nnc_ref_init(&rs[r], &g, NULL, &err), NNC_OK);
    double *v = nnc_ref_alloc(&rs[r], x);
    for (int i = 0; i < 15; i++) v[i] = 100 * r + i;
  }
  assert_int_equal(nnc_ref_run_ranks(rs, 3, &err), NNC_OK);
  for (int r = 0; r < 3; r++)
    for (int q = 0; q < 3; q++)
      for (int i = 0; i < 15; i++) assert_true(rs[r].val[y - g.tensors][q * 15 + i] == 100 * q + i);
  for (int r = 0; r < 3; r++) nnc_ref_free(&rs[r]);
  /* one evaluator cannot stand for three ranks; two evaluators cannot either */
  nnc_ref one;
  assert_int_equal(nnc_ref_init(&one, &g, NULL, &err), NNC_OK);
  nnc_ref_alloc(&one, x);
  assert_int_equal(nnc_ref_run_graph(&one, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "all_gather"));
  nnc_ref_free(&one);
  /* fewer than 2 ranks is no gather */
  g.nodes[id].attrs.ranks = 1;
  assert_int_equal(nnc_pass_check(&g, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "2 or more ranks"));
  nnc_graph_free(&g);
}

static void test_bert_tp(void **state) {
  (void)state;
  const char *d[] = {"layers=2", "hidden=20", "heads=4", "intermediate=28", "vocab=31", "positions=9", "seq=7",
                     "batch=2"};
  /* the word embeddings split (31 rows over 2 and 4 ranks), the type embeddings (2 rows) stay whole */
  check_model("bert", d, 8, "tp:2", 2, 5, 0);
  check_model("bert", d, 8, "tp:4", 4, 5, 0);
}

/* LLaMA: rope on split heads, grouped-query attention (the kv heads split
 * too), SwiGLU's two column splits meeting in a product. With 2 kv heads
 * over 4 ranks the attention cannot split: only the MLP does. */
static void test_llama_tp(void **state) {
  (void)state;
  const char *d[] = {"layers=2", "d=32", "heads=4", "kv_heads=2", "ffn=24", "vocab=37", "ctx=7", "batch=2"};
  /* embed_tokens and the untied lm_head split by vocabulary (37 rows): one more all_reduce, one all_gather */
  check_model("llama", d, 8, "tp:2", 2, 5, 1);
  check_model("llama", d, 8, "tp:4", 4, 3, 1);
  nnc_graph g;
  load(&g, "llama", d, 8, "tp:2");
  assert_int_equal(param(&g, "model.layers.1.self_attn.k_proj.weight")->shard.parts, 2);
  assert_true(nnc_dim_eq_const(param(&g, "model.layers.1.self_attn.k_proj.weight")->shape[0], 8));
  assert_int_equal(param(&g, "model.layers.1.mlp.down_proj.weight")->shard.axis, 1);
  nnc_graph_free(&g);
}

static void test_mlp_tp(void **state) {
  (void)state;
  /* three layers: the first two pair up; the last one's output is the
   * graph's, so it stays whole */
  const char *d[] = {"batch=3", "pixels=13", "hidden1=10", "hidden2=6", "classes=3"};
  check_model("mlp", d, 5, "tp:2", 2, 1, 0);
}

/* A plan that finds nothing to split, and bad option text. */
static void test_refusals(void **state) {
  (void)state;
  nnc_parallel p;
  nnc_error err = {0};
  assert_int_equal(nnc_parallel_parse("tp:0", &p, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "tp:N"));
  assert_int_equal(nnc_parallel_parse("tp:2,xx:3", &p, &err), NNC_E_USAGE);
  assert_int_equal(nnc_parallel_parse("tp:", &p, &err), NNC_E_USAGE);
  assert_int_equal(nnc_parallel_parse("tp:2,dp:4", &p, &err), NNC_OK);
  assert_int_equal(p.tp, 2);
  assert_int_equal(p.dp, 4);
  assert_int_equal(nnc_parallel_supported(&p, false, false, "c-simd", true, &err), NNC_E_USAGE);
  p.dp = 1;
  /* tp:N trains (test_parallel_train.c); generating is not built */
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, false, true, "c-simd", true, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "--generate"));
  assert_int_equal(nnc_parallel_supported(&p, true, false, "cuda-sm90a", true, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, false, false, "opencl", false, &err), NNC_E_TARGET);
  assert_non_null(strstr(err.msg, "opencl"));
  /* data parallelism is for training */
  p.tp = 1;
  p.dp = 2;
  assert_int_equal(nnc_parallel_supported(&p, false, false, "c-simd", true, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "--train"));
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_OK);
  /* ZeRO-1 shards data-parallel ranks' optimizer state: dp:M and --train */
  assert_int_equal(nnc_parallel_parse("dp:3,zero1", &p, &err), NNC_OK);
  assert_int_equal(p.dp, 3);
  assert_true(p.zero1);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, false, false, "c-simd", true, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "zero1: expected --train"));
  assert_int_equal(nnc_parallel_parse("zero1", &p, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, true, false, "c-simd", true, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "expected dp:M with M >= 2"));
  assert_int_equal(nnc_parallel_parse("tp:2,zero1", &p, &err), NNC_OK);
  assert_int_equal(nnc_parallel_supported(&p, false, false, "c-simd", true, &err), NNC_E_USAGE);
  assert_int_equal(nnc_parallel_parse("dp:2,zero2", &p, &err), NNC_E_USAGE);
  assert_int_equal(nnc_parallel_parse("dp:2,zero1x", &p, &err), NNC_E_USAGE);
  p.tp = 1;
  p.dp = 1;
  p.zero1 = false;
  /* width 7: neither q|k|v (3 x 7 columns) nor the MLP (28) split 3 ways, and a vocabulary of 2 rows is
   * fewer than the ranks: the plan says so */
  char path[512];
  snprintf(path, sizeof path, "%s/models/gpt2.lua", NNC_SOURCE_ROOT);
  const char *d[] = {"layers=1", "d=7", "heads=1", "vocab=2", "ctx=4", "batch=1"};
  nnc_frontend_opts o = {.path = path, .defines = d, .ndefines = 6};
  nnc_graph g;
  nnc_graph_init(&g);
  assert_int_equal(nnc_frontend_load(&o, &g, &err), NNC_OK);
  p.tp = 3;
  assert_int_equal(nnc_pass_parallel(&g, &p, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "found none"));
  nnc_graph_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gpt2_tp),
    cmocka_unit_test(test_odd_vocab_tp),
    cmocka_unit_test(test_all_gather_op),
    cmocka_unit_test(test_bert_tp),
    cmocka_unit_test(test_llama_tp),
    cmocka_unit_test(test_mlp_tp),
    cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
