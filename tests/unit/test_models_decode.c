/* tests/unit/test_models_decode.c — models/llama.lua and the --generate
 * decoders: LLaMA's names and shapes, its caches updated in place, and the
 * folds of a decode step (kv appends and ropes inside the attention) whose
 * schedule the float64 reference runs to the graph's outputs and caches. */
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
  run_graph_and_schedule(m, sym, seed, &graph, &sched);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama_default_params),
      cmocka_unit_test(test_llama_generate_in_place),
      cmocka_unit_test(test_generate_append_folded),
      cmocka_unit_test(test_generate_rope_folded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
