/* tests/unit/test_models.c — the showcase models mlp and bert (gpt2 is
 * test_models_gpt2.c's; llama and the decode folds test_models_decode.c's).
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

#include "models_util.h"

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

/* mask_cast.c: every attention reads one cast of the i32 attention_mask
 * input to its scores' dtype, made once, not the input itself (which each
 * attention kernel would convert again). */
static void check_mask_cast_once(const model *m) {
  int mask = input_id(&m->g, "attention_mask"), cast = -1, nattn = 0;
  for (int k = 0; k < m->s.nk; k++) {
    const nnc_kernel *kn = &m->s.k[k];
    if (kn->kind != NNC_KERNEL_ATTENTION) continue;
    nattn++;
    int t = kn->d.attn.mask;
    assert_true(t >= 0 && t != mask);
    const nnc_node *p = &m->g.nodes[m->g.tensors[t].producer];
    assert_int_equal(p->op, NNC_OP_CAST);
    assert_int_equal(p->in[0], mask);
    assert_int_equal(m->g.tensors[t].dtype, m->g.tensors[kn->d.attn.q].dtype);
    if (cast < 0) cast = t;
    assert_int_equal(t, cast);
  }
  assert_true(nattn >= 2);
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
  check_heads_folded(&m, 0, false, 15);   /* the position rows are a view of the table (slice_view.c) */
  check_mask_cast_once(&m);
  model_free(&m);
}

/* fold_post_norm.c: on a target whose GEMMs take a post-norm (here up to
 * N = 512), each of BERT's two post-norm layernorms a layer runs in the
 * epilogue of the GEMM before it, and the schedule still computes the
 * graph. Not for f32 (the fused kernel is bf16/f16), nor N over the
 * target's most, nor K not a multiple of 8. */
static int post_norms(const model *m, int *row_norms) {
  int n = 0;
  *row_norms = 0;
  for (int k = 0; k < m->s.nk; k++) {
    const nnc_kernel *kn = &m->s.k[k];
    if (kn->kind == NNC_KERNEL_GEMM && kn->d.gemm.post_norm == NNC_NORM_LAYER) {
      n++;
      const nnc_node *ln = &m->g.nodes[kn->nodes[kn->nnodes - 1]];
      assert_int_equal(ln->op, NNC_OP_LAYERNORM);
      assert_int_equal(kn->d.gemm.out, ln->out[0]);
      assert_int_equal(kn->d.gemm.post_gamma, ln->in[1]);
      assert_int_equal(kn->d.gemm.post_beta, ln->in[2]);
      assert_true(kn->d.gemm.residual >= 0);
    }
    if (kn->kind == NNC_KERNEL_ROW && m->g.nodes[kn->nodes[0]].op == NNC_OP_LAYERNORM) ++*row_norms;
  }
  return n;
}

static void test_bert_post_norm(void **state) {
  (void)state;
  static const char *const fits[] = {"layers=2", "hidden=64", "heads=4", "intermediate=136",
                                     "vocab=53", "positions=29", "batch=5", "seq=19"};
  static const char *const wide[] = {"layers=1", "hidden=520", "heads=4", "intermediate=64",
                                     "vocab=53", "positions=29", "batch=2", "seq=7"};
  static const char *const odd_k[] = {"layers=1", "hidden=64", "heads=4", "intermediate=36",
                                      "vocab=53", "positions=29", "batch=2", "seq=7"};
  nnc_compile_opts co = {.gemm_post_norm = 512};
  model m;
  int rows;
  load_model_prec(&m, "bert", fits, 8, false, &co, "bf16");
  assert_int_equal(post_norms(&m, &rows), 4);
  assert_int_equal(rows, 1);   /* the embeddings' layernorm reads no GEMM */
  check_schedule(&m, 3, 13);
  check_schedule(&m, 1, 1);
  model_free(&m);
  load_model_prec(&m, "bert", fits, 8, false, &co, "f32");
  assert_int_equal(post_norms(&m, &rows), 0);
  model_free(&m);
  load_model_prec(&m, "bert", wide, 8, false, &co, "bf16");
  assert_int_equal(post_norms(&m, &rows), 0);
  assert_int_equal(rows, 3);
  model_free(&m);
  load_model_prec(&m, "bert", odd_k, 8, false, &co, "bf16");   /* output.dense: K = 36 */
  assert_int_equal(post_norms(&m, &rows), 1);
  model_free(&m);
}

/* Under CUDA's chain kernels (bf16): the mean pooling's reduce kernel also
 * writes last_hidden_state, the f32 cast of what it pools (no cast kernel
 * of its own), and the schedule still computes what the graph does. */
static void test_bert_pooling_side_output(void **state) {
  (void)state;
  static const char *const d[] = {"layers=1", "hidden=64", "heads=4", "intermediate=36",
                                  "vocab=53", "positions=29", "batch=5", "seq=19"};
  nnc_compile_opts co = {.gather_loops = true, .row_loops = true, .reduce_loops = true, .gemm_norm_rows = true,
                         .gemm_post_norm = 512};
  model m;
  load_model_prec(&m, "bert", d, 8, false, &co, "bf16");
  int hidden = output_id(&m.g, "last_hidden_state"), pooled = output_id(&m.g, "sentence_embedding");
  const nnc_kernel *k = &m.s.k[m.s.kernel_of_node[m.g.tensors[pooled].producer]];
  assert_int_equal(k->kind, NNC_KERNEL_REDUCE);
  assert_int_equal(m.s.kernel_of_node[m.g.tensors[hidden].producer], k - m.s.k);
  assert_int_equal(k->nout, 2);
  assert_int_equal(k->out[0], pooled);
  assert_int_equal(k->out[1], hidden);
  int elementwise = 0;   /* the attention mask's cast alone */
  for (int i = 0; i < m.s.nk; i++) elementwise += m.s.k[i].kind == NNC_KERNEL_ELEMENTWISE;
  assert_int_equal(elementwise, 1);
  check_schedule(&m, 3, 13);
  check_schedule(&m, 1, 1);
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
      cmocka_unit_test(test_bert_default_params),
      cmocka_unit_test(test_bert_small),
      cmocka_unit_test(test_bert_one_layer_by_hand),
      cmocka_unit_test(test_bert_post_norm),
      cmocka_unit_test(test_bert_pooling_side_output),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
