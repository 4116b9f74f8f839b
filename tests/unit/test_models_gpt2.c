/* tests/unit/test_models_gpt2.c — models/gpt2.lua: Hugging Face names and
 * shapes, the fused schedule against the graph, one layer against a float64
 * GPT-2 written by hand, and the folds of its training step (head splits,
 * the GELU aux, the bias gradients, recomputation). */
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
  /* the pad of wpe's rows' gradient and the odd-width dlogits^T (the rows themselves are a view: slice_view.c) */
  check_heads_folded(&m, 2, true, 24);
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
  check_heads_folded(&m, 0, true, 24);   /* wpe's rows for T are a view of it (slice_view.c) */
  model_free(&m);
}

/* Under CUDA's chain kernels: the embeddings' sum (both lookups read in
 * its loop) and the first ln_1, which c_attn's GEMM would take as its
 * prologue, are one row kernel writing the normalized rows for the GEMM
 * and the sum for the first residual (a side output); no elementwise
 * kernel is left. In f32 and bf16 inference and in the f32 training step
 * (where ln_1 is a row kernel of its own: the weight gradient reads its
 * output), the schedule computes what the graph does (bf16: within 1e-6,
 * the other norms' rows staying unrounded in their GEMMs' prologues where
 * the graph rounds them, 3e-8 before this fusion too). */
static void test_gpt2_embeddings_row_kernel(void **state) {
  (void)state;
  for (int v = 0; v < 3; v++) {
    bool train = v == 2;
    nnc_compile_opts co = {.gather_loops = true, .row_loops = true, .reduce_loops = !train, .gemm_norm_rows = true};
    model m;
    if (train) load_model_as(&m, "gpt2", gpt2_small, 5, true, &co);
    else load_model_prec(&m, "gpt2", gpt2_small, 5, false, &co, v ? "bf16" : "f32");
    int ln = -1;
    for (int t = 0; t < m.g.ntensors && ln < 0; t++) {
      int p = m.g.tensors[t].producer;
      if (p >= 0 && !m.g.nodes[p].dead && m.g.nodes[p].op == NNC_OP_LAYERNORM && strcmp(m.g.tensors[t].name, "h.0.ln_1") == 0)
        ln = t;
    }
    assert_true(ln >= 0);
    const nnc_kernel *k = &m.s.k[m.s.kernel_of_node[m.g.tensors[ln].producer]];
    assert_int_equal(k->kind, NNC_KERNEL_ROW);
    assert_int_equal(k->nnodes, 3);   /* embedding, add, layernorm */
    assert_int_equal(k->nout, 2);
    assert_int_equal(k->out[0], ln);
    assert_int_equal(m.g.nodes[m.g.tensors[k->out[1]].producer].op, NNC_OP_ADD);
    for (int i = 0; i < m.s.nk; i++)
      if (m.s.k[i].kind == NNC_KERNEL_GEMM) assert_true(m.s.k[i].d.gemm.a != k->out[1]);
    if (!train) {
      int elementwise = 0;
      for (int i = 0; i < m.s.nk; i++) elementwise += m.s.k[i].kind == NNC_KERNEL_ELEMENTWISE;
      assert_int_equal(elementwise, 0);
    }
    check_schedule_tol(&m, 3, 17, v == 1 ? 1e-6 : 1e-12);
    check_schedule_tol(&m, 1, 1, v == 1 ? 1e-6 : 1e-12);
    model_free(&m);
  }
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpt2_default_params),
      cmocka_unit_test(test_gpt2_train_folded),
      cmocka_unit_test(test_gpt2_train_gelu),
      cmocka_unit_test(test_gpt2_train_bias_grad),
      cmocka_unit_test(test_gpt2_train_recompute),
      cmocka_unit_test(test_gpt2_small),
      cmocka_unit_test(test_gpt2_embeddings_row_kernel),
      cmocka_unit_test(test_gpt2_one_layer_by_hand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
