/* tests/unit/test_fusion.c — the fusion pass: which kernels form from small
 * graphs (kinds, nodes, descriptors), which must not form, and that the fused
 * schedule computes what the unfused graph computes (the float64 reference,
 * many seeds, odd sizes, symbols anywhere from 1 to their maximum). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/schedule.h"
#include "passes/passes.h"
#include "ref/ref.h"

/* ------------------------------------------------------------- building */

typedef struct tb {
  nnc_graph g;
  const char *file;
  int line;
} tb;

static void tb_init(tb *b) {
  nnc_graph_init(&b->g);
  b->file = nnc_graph_intern(&b->g, "t.lua");
  b->g.name = strdup("t");
  b->line = 1;
}

static nnc_srcloc here(tb *b) { return (nnc_srcloc){b->file, b->line++}; }
static nnc_dim K(int64_t k) { return nnc_dim_const(k); }
static nnc_dim S(int s) { return nnc_dim_sym(s); }

static int sym(tb *b, const char *name, int64_t max) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_symbol(&b->g, name, max, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static int input(tb *b, const char *name, nnc_dtype dt, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_input(&b->g, name, dt, rank, shape, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static int param(tb *b, const char *name, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_param(&b->g, name, NNC_F32, rank, shape, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

/* Adds a node, presets its outputs' shapes when given (reshape, split) and
 * infers; returns the node id. */
static int node(tb *b, nnc_op op, int nin, const int *in, const nnc_attrs *a, int nout, int rank,
                const nnc_dim *shapes) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_node(&b->g, op, nin, in, a, nout, here(b), NULL, &id, &err)) fail_msg("%s", err.msg);
  for (int i = 0; shapes && i < nout; i++) {
    nnc_tensor *t = &b->g.tensors[b->g.nodes[id].out[i]];
    t->rank = rank;
    memcpy(t->shape, shapes + i * rank, (size_t)rank * sizeof *shapes);
  }
  if (nnc_infer_node(&b->g, id, &err)) fail_msg("infer: %s", err.msg);
  return id;
}

static int out0(tb *b, int n) { return b->g.nodes[n].out[0]; }

static int op1(tb *b, nnc_op op, int x) { return out0(b, node(b, op, 1, &x, NULL, 1, 0, NULL)); }
static int op2(tb *b, nnc_op op, int x, int y) {
  return out0(b, node(b, op, 2, (int[]){x, y}, NULL, 1, 0, NULL));
}
static int ops(tb *b, nnc_op op, int x, double s) {
  nnc_attrs a = {.scalar = s};
  return out0(b, node(b, op, 1, &x, &a, 1, 0, NULL));
}
static int linear(tb *b, int x, int w, int bias, bool in_out) {
  nnc_attrs a = {.weight_in_out = in_out};
  int in[3] = {x, w, bias};
  return out0(b, node(b, NNC_OP_LINEAR, bias >= 0 ? 3 : 2, in, &a, 1, 0, NULL));
}
static int transpose(tb *b, int x, int i, int j) {
  nnc_attrs a = {0};
  int r = b->g.tensors[x].rank;
  for (int d = 0; d < r; d++) a.perm[d] = d;
  a.perm[i] = j;
  a.perm[j] = i;
  return out0(b, node(b, NNC_OP_TRANSPOSE, 1, &x, &a, 1, 0, NULL));
}
static int transpose_last(tb *b, int x) {
  int r = b->g.tensors[x].rank;
  return transpose(b, x, r - 2, r - 1);
}
static int softmax(tb *b, int x, int axis) {
  nnc_attrs a = {.axis = axis};
  return out0(b, node(b, NNC_OP_SOFTMAX, 1, &x, &a, 1, 0, NULL));
}
static int layernorm(tb *b, int x, int gamma, int beta, double eps) {
  nnc_attrs a = {.eps = eps};
  return out0(b, node(b, NNC_OP_LAYERNORM, 3, (int[]){x, gamma, beta}, &a, 1, 0, NULL));
}
static int rmsnorm(tb *b, int x, int gamma, double eps) {
  nnc_attrs a = {.eps = eps};
  return out0(b, node(b, NNC_OP_RMSNORM, 2, (int[]){x, gamma}, &a, 1, 0, NULL));
}
static int gelu(tb *b, int x, bool tanh_form) {
  nnc_attrs a = {.gelu_tanh = tanh_form};
  return out0(b, node(b, NNC_OP_GELU, 1, &x, &a, 1, 0, NULL));
}
static int reshape(tb *b, int x, int rank, const nnc_dim *shape) {
  return out0(b, node(b, NNC_OP_RESHAPE, 1, &x, NULL, 1, rank, shape));
}
static void output(tb *b, const char *name, int t) {
  nnc_error err = {0};
  if (nnc_graph_add_output(&b->g, name, t, here(b), &err)) fail_msg("%s", err.msg);
}

/* Fuses b's graph into s (no clean-up passes: the tests choose the graph). */
static void fuse(tb *b, nnc_schedule *s) {
  nnc_error err = {0};
  nnc_schedule_init(s, &b->g);
  if (nnc_pass_fuse(&b->g, NULL, s, &err)) fail_msg("fuse: %s", err.msg);
}

static void done(tb *b, nnc_schedule *s) {
  nnc_schedule_free(s);
  nnc_graph_free(&b->g);
}

static int count_kind(const nnc_schedule *s, nnc_kernel_kind kind) {
  int n = 0;
  for (int i = 0; i < s->nk; i++) n += s->k[i].kind == kind;
  return n;
}

static const nnc_kernel *kernel_of_tensor(const nnc_schedule *s, int t) {
  int p = s->g->tensors[t].producer;
  assert_true(p >= 0);
  int k = s->kernel_of_node[p];
  assert_true(k >= 0 && k < s->nk);
  return &s->k[k];
}

/* ------------------------------------------------------ structural checks */

/* The schedule is well formed whatever the graph: every live node in exactly
 * one kernel, kernel_of_node agrees, nodes ascending, inputs produced by
 * earlier kernels (or given), listed once, outputs the last node's, and
 * every value a later kernel reads is one of its producer's outputs. */
static void check_structure(const nnc_schedule *s) {
  const nnc_graph *g = s->g;
  int *seen = calloc((size_t)g->nnodes + 1, sizeof *seen);
  assert_non_null(seen);
  for (int i = 0; i < s->nk; i++) {
    const nnc_kernel *k = &s->k[i];
    assert_true(k->nnodes >= 1);
    for (int j = 0; j < k->nnodes; j++) {
      int n = k->nodes[j];
      assert_false(g->nodes[n].dead);
      assert_int_equal(s->kernel_of_node[n], i);
      if (j) assert_true(k->nodes[j - 1] < n);
      seen[n]++;
    }
    const nnc_node *last = &g->nodes[k->nodes[k->nnodes - 1]];
    assert_int_equal(k->nout, last->nout);
    for (int j = 0; j < k->nout; j++) assert_int_equal(k->out[j], last->out[j]);
    for (int j = 0; j < k->nin; j++) {
      for (int q = 0; q < j; q++) assert_int_not_equal(k->in[q], k->in[j]);
      int t = k->in[j], p = g->tensors[t].producer;
      if (p < 0) continue;
      int pk = s->kernel_of_node[p];
      assert_true(pk >= 0 && pk < i);
      bool listed = false;
      for (int q = 0; q < s->k[pk].nout; q++) listed |= s->k[pk].out[q] == t;
      assert_true(listed);
    }
    /* every outside read is listed */
    for (int j = 0; j < k->nnodes; j++) {
      const nnc_node *n = &g->nodes[k->nodes[j]];
      for (int q = 0; q < n->nin; q++) {
        int p = g->tensors[n->in[q]].producer;
        if (p >= 0 && s->kernel_of_node[p] == i) continue;
        bool listed = false;
        for (int x = 0; x < k->nin; x++) listed |= k->in[x] == n->in[q];
        assert_true(listed);
      }
    }
  }
  for (int n = 0; n < g->nnodes; n++) {
    if (g->nodes[n].dead) {
      assert_int_equal(s->kernel_of_node[n], -1);
      assert_int_equal(seen[n], 0);
    } else {
      assert_int_equal(seen[n], 1);
    }
  }
  for (int i = 0; i < g->noutputs; i++) {
    const nnc_kernel *k = kernel_of_tensor(s, g->outputs[i].tensor);
    bool listed = false;
    for (int q = 0; q < k->nout; q++) listed |= k->out[q] == g->outputs[i].tensor;
    assert_true(listed);
  }
  free(seen);
}

/* ------------------------------------------------------ numeric equality */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* For `seeds` seeds: symbols at their maxima (seed 1), at 1 (seed 2), else
 * random; the schedule's kernel outputs equal the graph's to 1e-12. */
static void check_equivalent(const nnc_schedule *s, int seeds) {
  const nnc_graph *g = s->g;
  for (int seed = 1; seed <= seeds; seed++) {
    int64_t sizes[8];
    assert_true(g->nsyms <= 8);
    for (int i = 0; i < g->nsyms; i++) {
      int64_t max = g->syms[i].max;
      sizes[i] = seed == 1 ? max : seed == 2 ? 1 : 1 + (int64_t)(mix((uint64_t)(seed * 8 + i)) % (uint64_t)max);
    }
    nnc_ref a, b;
    nnc_error err = {0};
    if (nnc_ref_init(&a, g, sizes, &err) || nnc_ref_init(&b, g, sizes, &err)) fail_msg("%s", err.msg);
    if (nnc_ref_random_inputs(&a, (uint64_t)seed, &err) || nnc_ref_random_inputs(&b, (uint64_t)seed, &err))
      fail_msg("%s", err.msg);
    if (nnc_ref_run_graph(&a, &err)) fail_msg("graph: %s", err.msg);
    if (nnc_ref_run_schedule(&b, s, &err)) fail_msg("schedule: %s", err.msg);
    for (int i = 0; i < s->nk; i++)
      for (int j = 0; j < s->k[i].nout; j++) {
        int t = s->k[i].out[j];
        assert_non_null(a.val[t]);
        if (!b.val[t]) fail_msg("seed %d: kernel %d left %s without a value", seed, i, g->tensors[t].name);
        double e = nnc_ref_rel_error(b.val[t], a.val[t], nnc_ref_elems(&a, t));
        if (!(e <= 1e-12))
          fail_msg("seed %d: kernel %d (%s) output %s differs by %g", seed, i,
                   nnc_kernel_kind_name(s->k[i].kind), g->tensors[t].name, e);
      }
    nnc_ref_free(&a);
    nnc_ref_free(&b);
  }
}

/* ------------------------------------------------------------ attention */

typedef struct attn_graph {
  int q, k, v, mask, kt, scores, out;
} attn_graph;

/* q, k [B,H,T,5], v [B,H,T,7] with H = 3, B <= 2, T <= 17; scale, masks in
 * the given order ('c' causal, 'p' padding), softmax, matmul with v. */
static attn_graph build_attention(tb *b, nnc_op scale_op, double scale, const char *masks) {
  attn_graph a;
  int B = sym(b, "B", 2), T = sym(b, "T", 17);
  a.q = input(b, "q", NNC_F32, 4, (nnc_dim[]){S(B), K(3), S(T), K(5)});
  a.k = input(b, "k", NNC_F32, 4, (nnc_dim[]){S(B), K(3), S(T), K(5)});
  a.v = input(b, "v", NNC_F32, 4, (nnc_dim[]){S(B), K(3), S(T), K(7)});
  a.mask = input(b, "mask", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
  a.kt = transpose_last(b, a.k);
  int x = a.scores = op2(b, NNC_OP_MATMUL, a.q, a.kt);
  if (scale_op != NNC_OP_NONE) x = ops(b, scale_op, x, scale);
  for (const char *m = masks; *m; m++)
    x = *m == 'c' ? op1(b, NNC_OP_CAUSAL_MASK, x) : op2(b, NNC_OP_PADDING_MASK, x, a.mask);
  int p = softmax(b, x, 3);
  a.out = op2(b, NNC_OP_MATMUL, p, a.v);
  output(b, "y", a.out);
  return a;
}

static void test_attention_full(void **state) {
  (void)state;
  const char *orders[] = {"cp", "pc"};
  for (int o = 0; o < 2; o++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    attn_graph a = build_attention(&b, NNC_OP_MUL_S, 0.3, orders[o]);
    fuse(&b, &s);
    check_structure(&s);
    assert_int_equal(s.nk, 1);
    const nnc_kernel *k = &s.k[0];
    assert_int_equal(k->kind, NNC_KERNEL_ATTENTION);
    assert_int_equal(k->nnodes, 7);
    assert_int_equal(k->d.attn.q, a.q);
    assert_int_equal(k->d.attn.k, a.k);
    assert_int_equal(k->d.attn.v, a.v);
    assert_int_equal(k->d.attn.mask, a.mask);
    assert_int_equal(k->d.attn.out, a.out);
    assert_true(k->d.attn.causal);
    assert_true(k->d.attn.scale == 0.3);
    /* the kernel reports the softmax's line; nodes are in order, the softmax 6th */
    const nnc_node *sm = &b.g.nodes[k->nodes[5]];
    assert_int_equal(sm->op, NNC_OP_SOFTMAX);
    assert_int_equal(k->loc.line, sm->loc.line);
    assert_int_equal(k->nin, 4);
    assert_int_equal(k->nout, 1);
    assert_int_equal(k->out[0], a.out);
    check_equivalent(&s, 12);
    done(&b, &s);
  }
}

static void test_attention_div_and_bare(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  attn_graph a = build_attention(&b, NNC_OP_DIV_S, 4.0, "c");
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  assert_int_equal(s.k[0].kind, NNC_KERNEL_ATTENTION);
  assert_int_equal(s.k[0].nnodes, 6);
  assert_true(s.k[0].d.attn.scale == 0.25);
  assert_int_equal(s.k[0].d.attn.mask, -1);
  assert_true(s.k[0].d.attn.causal);
  (void)a;
  check_equivalent(&s, 8);
  done(&b, &s);

  tb_init(&b);
  a = build_attention(&b, NNC_OP_NONE, 0, "");
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  assert_int_equal(s.k[0].kind, NNC_KERNEL_ATTENTION);
  assert_int_equal(s.k[0].nnodes, 4);
  assert_true(s.k[0].d.attn.scale == 1.0);
  assert_int_equal(s.k[0].d.attn.mask, -1);
  assert_false(s.k[0].d.attn.causal);
  assert_int_equal(s.k[0].nin, 3);   /* the unused mask input is not read */
  check_equivalent(&s, 8);
  done(&b, &s);
}

/* Scores that are also a graph output: no attention kernel; the first
 * matmul becomes a GEMM, the softmax a ROW kernel. */
static void test_attention_not_fused(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  attn_graph a = build_attention(&b, NNC_OP_MUL_S, 0.5, "c");
  output(&b, "scores", a.scores);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(count_kind(&s, NNC_KERNEL_ATTENTION), 0);
  assert_int_equal(count_kind(&s, NNC_KERNEL_ROW), 1);
  assert_int_equal(count_kind(&s, NNC_KERNEL_GEMM), 2);
  check_equivalent(&s, 6);
  done(&b, &s);

  /* probabilities read twice */
  tb_init(&b);
  int B = sym(&b, "B", 2), T = sym(&b, "T", 17);
  int q = input(&b, "q", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(5)});
  int v = input(&b, "v", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(5)});
  int p = softmax(&b, op2(&b, NNC_OP_MATMUL, q, transpose_last(&b, q)), 2);
  int y = op2(&b, NNC_OP_MATMUL, p, v);
  output(&b, "y", op2(&b, NNC_OP_ADD, y, op2(&b, NNC_OP_MATMUL, p, v)));
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(count_kind(&s, NNC_KERNEL_ATTENTION), 0);
  check_equivalent(&s, 6);
  done(&b, &s);

  /* a transpose that swaps other axes than the last two, and a softmax
   * over another axis than the last */
  for (int variant = 0; variant < 2; variant++) {
    tb_init(&b);
    q = input(&b, "q", NNC_F32, 3, (nnc_dim[]){K(3), K(5), K(5)});
    int kk = input(&b, "k", NNC_F32, 3, (nnc_dim[]){K(5), K(3), K(5)});
    v = input(&b, "v", NNC_F32, 3, (nnc_dim[]){K(3), K(5), K(7)});
    int kt = variant == 0 ? transpose(&b, kk, 0, 1) : transpose_last(&b, transpose(&b, kk, 0, 1));
    p = softmax(&b, op2(&b, NNC_OP_MATMUL, q, kt), variant == 0 ? 2 : 1);
    output(&b, "y", op2(&b, NNC_OP_MATMUL, p, v));
    fuse(&b, &s);
    check_structure(&s);
    assert_int_equal(count_kind(&s, NNC_KERNEL_ATTENTION), 0);
    assert_int_equal(count_kind(&s, NNC_KERNEL_ROW), 1);
    check_equivalent(&s, 4);
    done(&b, &s);
  }
}

/* ----------------------------------------------------------------- GEMM */

static void test_gemm_prologue_epilogue(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 3), T = sym(&b, "T", 17);
  int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(13)});
  int r = input(&b, "r", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(29)});
  int g = param(&b, "ln.weight", 1, (nnc_dim[]){K(13)});
  int be = param(&b, "ln.bias", 1, (nnc_dim[]){K(13)});
  int w = param(&b, "fc.weight", 2, (nnc_dim[]){K(29), K(13)});
  int bias = param(&b, "fc.bias", 1, (nnc_dim[]){K(29)});
  int h = linear(&b, layernorm(&b, x, g, be, 1e-5), w, bias, false);
  int y = op2(&b, NNC_OP_ADD, r, gelu(&b, h, true));   /* residual on the left */
  output(&b, "y", y);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  const nnc_kernel *k = &s.k[0];
  assert_int_equal(k->kind, NNC_KERNEL_GEMM);
  assert_int_equal(k->nnodes, 4);
  const nnc_gemm_desc *d = &k->d.gemm;
  assert_int_equal(d->a, x);
  assert_int_equal(d->b, w);
  assert_true(d->b_trans);
  assert_int_equal(d->bias, bias);
  assert_int_equal(d->residual, r);
  assert_int_equal(d->out, y);
  assert_int_equal(d->prologue, NNC_NORM_LAYER);
  assert_int_equal(d->norm_gamma, g);
  assert_int_equal(d->norm_beta, be);
  assert_true(d->norm_eps == 1e-5);
  assert_int_equal(d->act, NNC_OP_GELU);
  assert_true(d->gelu_tanh);
  assert_true(d->alpha == 1.0);
  /* the linear's line, not the last node's */
  assert_int_equal(k->loc.line, b.g.nodes[b.g.tensors[h].producer].loc.line);
  /* first-use order: x, gamma, beta (layernorm), w, bias (linear), r (add) */
  int want[] = {x, g, be, w, bias, r};
  assert_int_equal(k->nin, 6);
  for (int i = 0; i < 6; i++) assert_int_equal(k->in[i], want[i]);
  check_equivalent(&s, 10);
  done(&b, &s);
}

/* relu(linear + bias + residual), ResNet's block end: one GEMM whose
 * activation comes after the residual (act_last); for a target without
 * (nnc_compile_opts.no_gemm_act_last) the relu is a kernel of its own. Both
 * compute what the graph does. */
static void test_gemm_act_after_residual(void **state) {
  (void)state;
  for (int plain = 0; plain < 2; plain++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 3);
    int x = input(&b, "x", NNC_F32, 4, (nnc_dim[]){S(B), K(5), K(7), K(11)});
    int r = input(&b, "r", NNC_F32, 4, (nnc_dim[]){S(B), K(5), K(7), K(13)});
    int w = param(&b, "conv.weight", 2, (nnc_dim[]){K(13), K(11)});
    int bias = param(&b, "conv.bias", 1, (nnc_dim[]){K(13)});
    int y = op1(&b, NNC_OP_RELU, op2(&b, NNC_OP_ADD, linear(&b, x, w, bias, false), r));
    output(&b, "y", y);
    nnc_error err = {0};
    nnc_compile_opts co = {.no_gemm_act_last = plain};
    nnc_schedule_init(&s, &b.g);
    if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
    check_structure(&s);
    assert_int_equal(s.nk, plain ? 2 : 1);
    const nnc_gemm_desc *d = &s.k[0].d.gemm;
    assert_int_equal(s.k[0].kind, NNC_KERNEL_GEMM);
    assert_int_equal(d->residual, r);
    assert_int_equal(d->bias, bias);
    assert_int_equal(d->act, plain ? NNC_OP_NONE : NNC_OP_RELU);
    assert_int_equal(d->act_last, !plain);
    assert_int_equal(kernel_of_tensor(&s, y)->kind, plain ? NNC_KERNEL_ELEMENTWISE : NNC_KERNEL_GEMM);
    check_equivalent(&s, 10);
    done(&b, &s);
  }
}

/* SwiGLU, silu(x W_g^T) * (x W_u^T + b_u): the gate's GEMM applies silu,
 * the up projection's GEMM multiplies by it (residual_mul); the schedule
 * computes what the graph does. With the product's operands the other way
 * round, the same; with the up projection made first, the gate's GEMM
 * multiplies by it after its silu. */
static void test_gemm_swiglu(void **state) {
  (void)state;
  for (int order = 0; order < 3; order++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 3);
    int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), K(5), K(11)});
    int wg = param(&b, "gate.weight", 2, (nnc_dim[]){K(13), K(11)});
    int wu = param(&b, "up.weight", 2, (nnc_dim[]){K(13), K(11)});
    int bu = param(&b, "up.bias", 1, (nnc_dim[]){K(13)});
    int g = -1, u = -1;
    if (order < 2) {
      g = op1(&b, NNC_OP_SILU, linear(&b, x, wg, -1, false));
      u = linear(&b, x, wu, bu, false);
    } else {
      u = linear(&b, x, wu, bu, false);
      g = op1(&b, NNC_OP_SILU, linear(&b, x, wg, -1, false));
    }
    int y = order == 1 ? op2(&b, NNC_OP_MUL, u, g) : op2(&b, NNC_OP_MUL, g, u);
    output(&b, "y", y);
    fuse(&b, &s);
    check_structure(&s);
    const nnc_kernel *ky = kernel_of_tensor(&s, y);
    assert_int_equal(s.nk, 2);
    assert_int_equal(ky->kind, NNC_KERNEL_GEMM);
    assert_true(ky->d.gemm.residual_mul);
    if (order < 2) {
      assert_int_equal(ky->d.gemm.residual, g);
      assert_int_equal(ky->d.gemm.bias, bu);
      assert_int_equal(kernel_of_tensor(&s, g)->d.gemm.act, NNC_OP_SILU);
    } else {
      /* the gate's GEMM comes second: silu(x W_g^T) * u in its epilogue */
      assert_int_equal(ky->d.gemm.residual, u);
      assert_int_equal(ky->d.gemm.act, NNC_OP_SILU);
    }
    check_equivalent(&s, 10);
    done(&b, &s);
  }
}

/* Grouped-query attention as sdpa writes it: q [B, 2, 3, T, D] over k and
 * v [B, 2, 1, S, D], with a padding mask [B, S] and the causal mask: one
 * attention kernel, equal to the graph. */
static void test_attention_grouped_mask(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 2), T = sym(&b, "T", 7);
  int q = input(&b, "q", NNC_F32, 5, (nnc_dim[]){S(B), K(2), K(3), S(T), K(5)});
  int k = input(&b, "k", NNC_F32, 5, (nnc_dim[]){S(B), K(2), K(1), S(T), K(5)});
  int v = input(&b, "v", NNC_F32, 5, (nnc_dim[]){S(B), K(2), K(1), S(T), K(4)});
  int mask = input(&b, "mask", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
  int sc = ops(&b, NNC_OP_MUL_S, op2(&b, NNC_OP_MATMUL, q, transpose_last(&b, k)), 0.4);
  int p = softmax(&b, op2(&b, NNC_OP_PADDING_MASK, op1(&b, NNC_OP_CAUSAL_MASK, sc), mask), 4);
  int y = op2(&b, NNC_OP_MATMUL, p, v);
  output(&b, "y", y);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  assert_int_equal(s.k[0].kind, NNC_KERNEL_ATTENTION);
  assert_int_equal(s.k[0].d.attn.mask, mask);
  assert_true(s.k[0].d.attn.causal);
  check_equivalent(&s, 12);
  done(&b, &s);
}

/* A convolution, im2col + reshape + linear + bias + relu over a bf16 NHWC
 * image with 64 channels (odd sizes, stride, padding and dilation): with
 * nnc_compile_opts.gemm_windows at least its 24 outputs the windows join
 * the GEMM (windowed) and the schedule computes what the graph does; not
 * with a smaller bound, an f32 image, or windows that a second reader
 * needs stored. */
static void test_gemm_windows(void **state) {
  (void)state;
  for (int c = 0; c < 4; c++) {
    bool f32 = c == 2, shared = c == 3;
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 2);
    int x = input(&b, "x", f32 ? NNC_F32 : NNC_BF16, 4, (nnc_dim[]){S(B), K(7), K(6), K(64)});
    nnc_attrs wa = {.win = {.kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0, .dh = 1, .dw = 2, .nhwc = true,
                            .tap_major = true}};
    int cols = out0(&b, node(&b, NNC_OP_IM2COL, 1, &x, &wa, 1, 0, NULL));
    const nnc_tensor *ct = &b.g.tensors[cols];
    assert_int_equal(ct->rank, 5);
    assert_true(nnc_dim_eq_const(ct->shape[1], 4) && nnc_dim_eq_const(ct->shape[2], 4));
    int a = reshape(&b, cols, 4, (nnc_dim[]){S(B), K(4), K(4), K(384)});
    int w = param(&b, "conv.weight", 2, (nnc_dim[]){K(24), K(384)});
    int bias = param(&b, "conv.bias", 1, (nnc_dim[]){K(24)});
    b.g.tensors[w].dtype = b.g.tensors[bias].dtype = b.g.tensors[x].dtype;
    int y = op1(&b, NNC_OP_RELU, linear(&b, a, w, bias, false));
    output(&b, "y", y);
    if (shared) output(&b, "cols", op1(&b, NNC_OP_RELU, cols));
    nnc_error err = {0};
    nnc_compile_opts co = {.gemm_windows = c == 1 ? 16 : 128};
    nnc_schedule_init(&s, &b.g);
    if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
    check_structure(&s);
    const nnc_kernel *k = kernel_of_tensor(&s, y);
    assert_int_equal(k->kind, NNC_KERNEL_GEMM);
    bool windowed = c == 0;
    assert_int_equal(k->d.gemm.windowed, windowed);
    assert_int_equal(kernel_of_tensor(&s, cols) == k, windowed);
    if (windowed) {
      assert_int_equal(s.nk, 1);
      assert_int_equal(k->d.gemm.window, b.g.tensors[cols].producer);
      assert_int_equal(k->nin, 3);   /* the image, the weight, the bias: never the windows */
      assert_int_equal(k->in[0], x);
    }
    check_equivalent(&s, 5);
    done(&b, &s);
  }
}

/* An RGB stem as the front-end lowers it (dsl_conv.c's row_taps): rows of
 * 8 taps x 3 channels first (a move kernel: 24 channels a pixel), then the
 * KH x 1 windows over those rows, which join the GEMM (windowed) as any
 * image of channels a multiple of 8 does; the schedule computes what the
 * graph does. */
static void test_gemm_row_windows(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 2);
  int x = input(&b, "x", NNC_BF16, 4, (nnc_dim[]){S(B), K(9), K(10), K(3)});
  nnc_attrs ra = {.win = {.kh = 1, .kw = 8, .sh = 1, .sw = 2, .ph = 0, .pw = 3, .dh = 1, .dw = 1, .nhwc = true,
                          .tap_major = true}};
  int rows = out0(&b, node(&b, NNC_OP_IM2COL, 1, &x, &ra, 1, 0, NULL));
  assert_true(nnc_dim_eq_const(b.g.tensors[rows].shape[2], 5));
  int r = reshape(&b, rows, 4, (nnc_dim[]){S(B), K(9), K(5), K(24)});
  nnc_attrs wa = {.win = {.kh = 7, .kw = 1, .sh = 2, .sw = 1, .ph = 3, .pw = 0, .dh = 1, .dw = 1, .nhwc = true,
                          .tap_major = true}};
  int cols = out0(&b, node(&b, NNC_OP_IM2COL, 1, &r, &wa, 1, 0, NULL));
  int a = reshape(&b, cols, 4, (nnc_dim[]){S(B), K(5), K(5), K(168)});
  int w = param(&b, "conv.weight", 2, (nnc_dim[]){K(16), K(168)});
  int bias = param(&b, "conv.bias", 1, (nnc_dim[]){K(16)});
  b.g.tensors[w].dtype = b.g.tensors[bias].dtype = NNC_BF16;
  int y = op1(&b, NNC_OP_RELU, linear(&b, a, w, bias, false));
  output(&b, "y", y);
  nnc_error err = {0};
  nnc_compile_opts co = {.gemm_windows = 128};
  nnc_schedule_init(&s, &b.g);
  if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
  check_structure(&s);
  const nnc_kernel *k = kernel_of_tensor(&s, y);
  assert_int_equal(k->kind, NNC_KERNEL_GEMM);
  assert_true(k->d.gemm.windowed);
  assert_int_equal(k->d.gemm.window, b.g.tensors[cols].producer);
  assert_int_equal(k->in[0], r);
  assert_true(kernel_of_tensor(&s, rows) != k);
  check_equivalent(&s, 5);
  done(&b, &s);
}

/* Pooling, a max (or mean) over the taps of NHWC tap-major windows, and a
 * depthwise convolution (the windows times a [taps, C] weight, summed):
 * with nnc_compile_opts.reduce_windows the im2col and the reduce (and the
 * product) are one reduce kernel reading the image, equal to the graph;
 * not without the option or with channels that are no multiple of 8. */
static void test_pool_windows(void **state) {
  (void)state;
  for (int c = 0; c < 5; c++) {
    bool mean = c == 1, off = c == 2, odd = c == 3, dw = c == 4;
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 2);
    int x = input(&b, "x", NNC_BF16, 4, (nnc_dim[]){S(B), K(7), K(6), K(odd ? 12 : 16)});
    nnc_attrs wa = {.win = {.kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 2, .nhwc = true,
                            .tap_major = true},
                    .scalar = mean || dw ? 0.0 : -INFINITY};
    int cols = out0(&b, node(&b, NNC_OP_IM2COL, 1, &x, &wa, 1, 0, NULL));
    nnc_attrs ra = {.axis = 3};
    int red = cols;
    if (dw) {
      int w = param(&b, "dw.weight", 2, (nnc_dim[]){K(6), K(16)});
      b.g.tensors[w].dtype = NNC_BF16;
      red = op2(&b, NNC_OP_MUL, cols, w);
    }
    int y = out0(&b, node(&b, dw ? NNC_OP_SUM : mean ? NNC_OP_MEAN : NNC_OP_MAX, 1, &red, &ra, 1, 0, NULL));
    output(&b, "y", op1(&b, NNC_OP_RELU, y));
    nnc_error err = {0};
    nnc_compile_opts co = {.reduce_windows = !off};
    nnc_schedule_init(&s, &b.g);
    if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
    check_structure(&s);
    const nnc_kernel *k = kernel_of_tensor(&s, y);
    assert_int_equal(k->kind, NNC_KERNEL_REDUCE);
    bool fused = !off && !odd;
    assert_int_equal(k->nnodes, fused ? (dw ? 3 : 2) : 1);
    assert_int_equal(kernel_of_tensor(&s, cols) == k, fused);
    if (fused) assert_int_equal(k->in[0], x);
    check_equivalent(&s, 5);
    done(&b, &s);
  }
}

/* linear with a [K,N] weight and no bias, then alpha, bias add, relu,
 * residual; and rmsnorm; and a matmul with a folded rank-2 transpose. */
static void test_gemm_alpha_bias_rms_transpose(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int x = input(&b, "x", NNC_F32, 2, (nnc_dim[]){S(N), K(13)});
  int r = input(&b, "r", NNC_F32, 2, (nnc_dim[]){S(N), K(11)});
  int g = param(&b, "rms.weight", 1, (nnc_dim[]){K(13)});
  int w = param(&b, "w", 2, (nnc_dim[]){K(13), K(11)});
  int bias = param(&b, "b", 1, (nnc_dim[]){K(11)});
  int h = linear(&b, rmsnorm(&b, x, g, 1e-6), w, -1, true);
  h = ops(&b, NNC_OP_MUL_S, h, -0.7);
  h = op2(&b, NNC_OP_ADD, h, bias);
  h = op1(&b, NNC_OP_SILU, h);
  h = op2(&b, NNC_OP_ADD, h, r);
  output(&b, "h", h);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  const nnc_gemm_desc *d = &s.k[0].d.gemm;
  assert_int_equal(s.k[0].kind, NNC_KERNEL_GEMM);
  assert_int_equal(s.k[0].nnodes, 6);
  assert_false(d->b_trans);
  assert_int_equal(d->prologue, NNC_NORM_RMS);
  assert_int_equal(d->norm_beta, -1);
  assert_true(d->alpha == -0.7);
  assert_int_equal(d->bias, bias);
  assert_int_equal(d->act, NNC_OP_SILU);
  assert_int_equal(d->residual, r);
  check_equivalent(&s, 10);
  done(&b, &s);

  tb_init(&b);
  N = sym(&b, "N", 29);
  int a = input(&b, "a", NNC_F32, 3, (nnc_dim[]){K(3), S(N), K(13)});
  int wt = input(&b, "w", NNC_F32, 2, (nnc_dim[]){K(7), K(13)});
  int y = op2(&b, NNC_OP_MATMUL, a, transpose_last(&b, wt));
  output(&b, "y", op1(&b, NNC_OP_TANH, y));
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  d = &s.k[0].d.gemm;
  assert_int_equal(s.k[0].nnodes, 3);
  assert_true(d->b_trans);
  assert_int_equal(d->b, wt);
  assert_int_equal(d->a, a);
  assert_int_equal(d->act, NNC_OP_TANH);
  assert_int_equal(d->bias, -1);
  assert_int_equal(d->residual, -1);
  check_equivalent(&s, 10);
  done(&b, &s);

  /* a weight gradient's x^T dy: the transpose of A folds in (a_trans), and
   * one of B too; a transposed A read twice stays a copy */
  tb_init(&b);
  N = sym(&b, "N", 29);
  x = input(&b, "x", NNC_F32, 2, (nnc_dim[]){S(N), K(13)});
  int dy = input(&b, "dy", NNC_F32, 2, (nnc_dim[]){S(N), K(7)});
  int e = input(&b, "e", NNC_F32, 2, (nnc_dim[]){K(5), S(N)});
  output(&b, "dw", op2(&b, NNC_OP_MATMUL, transpose_last(&b, x), dy));
  output(&b, "f", op2(&b, NNC_OP_MATMUL, transpose_last(&b, dy), transpose_last(&b, e)));
  int xt = transpose_last(&b, x);
  output(&b, "g2", op2(&b, NNC_OP_MATMUL, xt, op2(&b, NNC_OP_MATMUL, x, xt)));
  fuse(&b, &s);
  check_structure(&s);
  int trans_a = 0, both = 0, moves = 0;
  for (int i = 0; i < s.nk; i++) {
    if (s.k[i].kind == NNC_KERNEL_MOVE) moves++;
    if (s.k[i].kind != NNC_KERNEL_GEMM) continue;
    d = &s.k[i].d.gemm;
    trans_a += d->a_trans;
    both += d->a_trans && d->b_trans;
    if (d->a_trans) assert_true(d->a == x || d->a == dy);
  }
  assert_int_equal(trans_a, 2);
  assert_int_equal(both, 1);
  assert_int_equal(moves, 1);   /* xt, read by two products */
  check_equivalent(&s, 10);
  done(&b, &s);
}

static void test_gemm_not_fused(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  /* the norm's output is read twice; the linear's output is a graph output */
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int x = input(&b, "x", NNC_F32, 2, (nnc_dim[]){S(N), K(13)});
  int g = param(&b, "g", 1, (nnc_dim[]){K(13)});
  int be = param(&b, "b", 1, (nnc_dim[]){K(13)});
  int w = param(&b, "w", 2, (nnc_dim[]){K(13), K(13)});
  int ln = layernorm(&b, x, g, be, 1e-5);
  int h = linear(&b, ln, w, -1, false);
  int y = op1(&b, NNC_OP_RELU, h);
  output(&b, "h", h);
  output(&b, "y", op2(&b, NNC_OP_ADD, y, ln));
  fuse(&b, &s);
  check_structure(&s);
  const nnc_kernel *k = kernel_of_tensor(&s, h);
  assert_int_equal(k->kind, NNC_KERNEL_GEMM);
  assert_int_equal(k->nnodes, 1);
  assert_int_equal(k->d.gemm.prologue, NNC_NORM_NONE);
  assert_int_equal(k->d.gemm.act, NNC_OP_NONE);
  assert_int_equal(k->d.gemm.out, h);
  assert_int_equal(kernel_of_tensor(&s, ln)->kind, NNC_KERNEL_ROW);
  assert_int_equal(kernel_of_tensor(&s, y)->kind, NNC_KERNEL_ELEMENTWISE);
  assert_int_equal(kernel_of_tensor(&s, y)->nnodes, 2);
  check_equivalent(&s, 6);
  done(&b, &s);

  /* a linear with its own bias takes no alpha; an activation then a scale
   * keeps the scale out; a broadcasting add [1,13] is neither bias nor
   * residual */
  tb_init(&b);
  N = sym(&b, "N", 29);
  x = input(&b, "x", NNC_F32, 2, (nnc_dim[]){S(N), K(13)});
  w = param(&b, "w", 2, (nnc_dim[]){K(13), K(13)});
  int bias = param(&b, "bias", 1, (nnc_dim[]){K(13)});
  int row = param(&b, "row", 2, (nnc_dim[]){K(1), K(13)});
  int l1 = linear(&b, x, w, bias, false), l2 = linear(&b, x, w, -1, false);
  int l3 = linear(&b, x, w, -1, false), r2 = op1(&b, NNC_OP_RELU, l2);
  int h1 = ops(&b, NNC_OP_MUL_S, l1, 2.0);
  int h2 = ops(&b, NNC_OP_MUL_S, r2, 3.0);
  int h3 = op2(&b, NNC_OP_ADD, l3, row);
  output(&b, "h1", h1);
  output(&b, "h2", h2);
  output(&b, "h3", h3);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(count_kind(&s, NNC_KERNEL_GEMM), 3);
  assert_int_equal(count_kind(&s, NNC_KERNEL_ELEMENTWISE), 3);
  for (int i = 0; i < s.nk; i++) {
    if (s.k[i].kind != NNC_KERNEL_GEMM) continue;
    assert_true(s.k[i].d.gemm.alpha == 1.0);
    assert_int_equal(s.k[i].d.gemm.residual, -1);
  }
  assert_int_equal(kernel_of_tensor(&s, l1)->d.gemm.out, l1);
  assert_int_equal(kernel_of_tensor(&s, l1)->d.gemm.bias, bias);
  assert_int_equal(kernel_of_tensor(&s, l2)->d.gemm.act, NNC_OP_RELU);
  assert_int_equal(kernel_of_tensor(&s, l2)->d.gemm.out, r2);
  assert_int_equal(kernel_of_tensor(&s, l3)->d.gemm.bias, -1);
  assert_int_equal(kernel_of_tensor(&s, l3)->d.gemm.out, l3);
  check_equivalent(&s, 6);
  done(&b, &s);

  /* the residual is the GEMM's own output (x + x): not foldable */
  tb_init(&b);
  N = sym(&b, "N", 29);
  x = input(&b, "x", NNC_F32, 2, (nnc_dim[]){S(N), K(13)});
  w = param(&b, "w", 2, (nnc_dim[]){K(13), K(13)});
  h = linear(&b, x, w, -1, false);
  output(&b, "y", op2(&b, NNC_OP_ADD, h, h));
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 2);
  assert_int_equal(s.k[0].d.gemm.residual, -1);
  check_equivalent(&s, 4);
  done(&b, &s);
}

/* ----------------------------------------------------------- elementwise */

static void test_elementwise_chain(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 3), T = sym(&b, "T", 17);
  int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(13)});
  int y = input(&b, "y", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(13)});
  int c = param(&b, "c", 1, (nnc_dim[]){K(13)});
  int h = op1(&b, NNC_OP_RELU, x);
  h = ops(&b, NNC_OP_MUL_S, h, 1.5);
  h = op2(&b, NNC_OP_ADD, h, y);
  h = op2(&b, NNC_OP_MUL, h, c);          /* a broadcast input is fine */
  h = op2(&b, NNC_OP_SUB, op1(&b, NNC_OP_TANH, y), h);   /* a tree */
  h = op1(&b, NNC_OP_SIGMOID, h);
  output(&b, "out", h);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  assert_int_equal(s.k[0].kind, NNC_KERNEL_ELEMENTWISE);
  assert_int_equal(s.k[0].nnodes, 7);
  assert_int_equal(s.k[0].nin, 3);
  assert_int_equal(s.k[0].nout, 1);
  assert_int_equal(s.k[0].out[0], h);
  check_equivalent(&s, 10);
  done(&b, &s);
}

static void test_elementwise_not_fused(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  /* a value read twice */
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int x = input(&b, "x", NNC_F32, 1, (nnc_dim[]){S(N)});
  int a = op1(&b, NNC_OP_EXP, x);
  int c = op2(&b, NNC_OP_MUL, a, ops(&b, NNC_OP_ADD_S, a, 1.0));
  output(&b, "c", c);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 2);
  assert_int_equal(kernel_of_tensor(&s, a)->nnodes, 1);
  assert_int_equal(kernel_of_tensor(&s, c)->nnodes, 2);
  check_equivalent(&s, 6);
  done(&b, &s);

  /* a graph output in the middle */
  tb_init(&b);
  N = sym(&b, "N", 29);
  x = input(&b, "x", NNC_F32, 1, (nnc_dim[]){S(N)});
  a = op1(&b, NNC_OP_RELU, x);
  output(&b, "a", a);
  output(&b, "b", ops(&b, NNC_OP_MUL_S, op1(&b, NNC_OP_NEG, a), 2.0));
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 2);
  assert_int_equal(kernel_of_tensor(&s, a)->nnodes, 1);
  check_equivalent(&s, 6);
  done(&b, &s);

  /* a producer of another shape (broadcast into its reader) */
  tb_init(&b);
  N = sym(&b, "N", 29);
  x = input(&b, "x", NNC_F32, 2, (nnc_dim[]){S(N), K(13)});
  int bias = param(&b, "bias", 1, (nnc_dim[]){K(13)});
  a = op1(&b, NNC_OP_EXP, bias);
  output(&b, "y", op2(&b, NNC_OP_ADD, x, a));
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 2);
  check_equivalent(&s, 6);
  done(&b, &s);
}

/* A value read twice by one node (e * e) is still single-use and fuses;
 * a long chain of 3001 unary ops is one kernel. */
static void test_elementwise_square_and_long(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int x = input(&b, "x", NNC_F32, 1, (nnc_dim[]){S(N)});
  int e = op1(&b, NNC_OP_TANH, x);
  output(&b, "y", op2(&b, NNC_OP_MUL, e, e));
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  assert_int_equal(s.k[0].nnodes, 2);
  assert_int_equal(s.k[0].nin, 1);
  check_equivalent(&s, 4);
  done(&b, &s);

  tb_init(&b);
  N = sym(&b, "N", 29);
  int h = input(&b, "x", NNC_F32, 1, (nnc_dim[]){S(N)});
  for (int i = 0; i < 3001; i++)
    h = i % 3 == 2 ? ops(&b, NNC_OP_MUL_S, h, 0.999) : op1(&b, i % 3 ? NNC_OP_TANH : NNC_OP_NEG, h);
  output(&b, "y", h);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  assert_int_equal(s.k[0].nnodes, 3001);
  check_equivalent(&s, 2);
  done(&b, &s);
}

/* A chain reading 21 distinct tensors splits so no kernel reads more than
 * NNC_MAX_IO, and still computes the same. */
static void test_elementwise_many_inputs(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int h = input(&b, "x0", NNC_F32, 1, (nnc_dim[]){S(N)});
  for (int i = 1; i <= 20; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    h = op2(&b, i % 2 ? NNC_OP_ADD : NNC_OP_SUB, h, input(&b, name, NNC_F32, 1, (nnc_dim[]){S(N)}));
  }
  output(&b, "y", h);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 2);
  for (int i = 0; i < s.nk; i++) assert_true(s.k[i].nin <= NNC_MAX_IO);
  check_equivalent(&s, 4);
  done(&b, &s);
}

/* ------------------------------------------------- lookups inside loops */

/* BERT's embeddings: two lookups and a position table summed, then a relu.
 * With nnc_compile_opts.gather_loops the lookups whose outputs only the sum
 * reads run inside its loop (no gather kernel), equal to the graph; a
 * lookup that is also a graph output, or whose table is i32, stays a
 * kernel of its own; without the option every lookup does. */
static void test_gather_in_loop(void **state) {
  (void)state;
  for (int on = 0; on < 2; on++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 3), T = sym(&b, "T", 9);
    int ids = input(&b, "ids", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
    int types = input(&b, "types", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
    int wte = param(&b, "wte", 2, (nnc_dim[]){K(29), K(12)});
    int tte = param(&b, "tte", 2, (nnc_dim[]){K(2), K(12)});
    int pos = input(&b, "pos", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(12)});
    int w = out0(&b, node(&b, NNC_OP_EMBEDDING, 2, (int[]){wte, ids}, NULL, 1, 0, NULL));
    int t = out0(&b, node(&b, NNC_OP_EMBEDDING, 2, (int[]){tte, types}, NULL, 1, 0, NULL));
    int y = op1(&b, NNC_OP_RELU, op2(&b, NNC_OP_ADD, op2(&b, NNC_OP_ADD, w, pos), t));
    /* a lookup that is also an output: its kernel writes it */
    int kept = out0(&b, node(&b, NNC_OP_EMBEDDING, 2, (int[]){wte, types}, NULL, 1, 0, NULL));
    int z = op1(&b, NNC_OP_NEG, kept);
    output(&b, "y", y);
    output(&b, "kept", kept);
    output(&b, "z", z);
    nnc_error err = {0};
    nnc_compile_opts co = {.gather_loops = on};
    nnc_schedule_init(&s, &b.g);
    if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
    check_structure(&s);
    const nnc_kernel *k = kernel_of_tensor(&s, y);
    assert_int_equal(k->kind, NNC_KERNEL_ELEMENTWISE);
    assert_int_equal(kernel_of_tensor(&s, w) == k, on);
    assert_int_equal(kernel_of_tensor(&s, t) == k, on);
    assert_int_equal(kernel_of_tensor(&s, kept)->kind, NNC_KERNEL_GATHER);
    int gathers = 0;
    for (int i = 0; i < s.nk; i++) gathers += s.k[i].kind == NNC_KERNEL_GATHER;
    assert_int_equal(gathers, on ? 1 : 3);
    if (on) assert_int_equal(k->nin, 5);   /* wte, ids, tte, types, pos: never a lookup's output */
    check_equivalent(&s, 5);
    done(&b, &s);
  }
}

/* A layernorm whose input a chain alone computes takes the chain into its
 * row kernel (row_loops); a chain that also feeds something else, or rows
 * longer than NNC_ROW_LOOP_COLS, do not. A sum takes the chain before it
 * and the ops after it (reduce_loops), but not an op that broadcasts its
 * result back up (x - mean(x)). */
static void test_row_and_reduce_chains(void **state) {
  (void)state;
  for (int on = 0; on < 2; on++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 3), T = sym(&b, "T", 9);
    int ids = input(&b, "ids", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
    int wte = param(&b, "wte", 2, (nnc_dim[]){K(29), K(24)});
    int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(24)});
    int g = param(&b, "g", 1, (nnc_dim[]){K(24)}), be = param(&b, "be", 1, (nnc_dim[]){K(24)});
    int w = out0(&b, node(&b, NNC_OP_EMBEDDING, 2, (int[]){wte, ids}, NULL, 1, 0, NULL));
    int sum = op2(&b, NNC_OP_ADD, w, ops(&b, NNC_OP_MUL_S, x, 2.0));
    int ln = layernorm(&b, sum, g, be, 1e-5);
    int shared = op1(&b, NNC_OP_RELU, x);   /* read by the norm and by the output below */
    int rms = rmsnorm(&b, shared, g, 1e-6);
    int m = input(&b, "m", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(1)});
    nnc_attrs ax = {.axis = 1};
    int num = out0(&b, node(&b, NNC_OP_SUM, 1, (int[]){op2(&b, NNC_OP_MUL, ln, m)}, &ax, 1, 0, NULL));
    int den = out0(&b, node(&b, NNC_OP_SUM, 1, &m, &ax, 1, 0, NULL));
    int pooled = op1(&b, NNC_OP_NEG, op2(&b, NNC_OP_DIV, num, den));
    nnc_attrs keep = {.axis = 2, .keepdim = true};
    int mu = out0(&b, node(&b, NNC_OP_MEAN, 1, &x, &keep, 1, 0, NULL));
    int centred = op2(&b, NNC_OP_SUB, x, mu);
    output(&b, "ln", ln);
    output(&b, "rms", rms);
    output(&b, "shared", shared);
    output(&b, "pooled", pooled);
    output(&b, "centred", centred);
    nnc_error err = {0};
    nnc_compile_opts co = {.gather_loops = on, .row_loops = on, .reduce_loops = on};
    nnc_schedule_init(&s, &b.g);
    if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
    check_structure(&s);
    const nnc_kernel *k = kernel_of_tensor(&s, ln);
    assert_int_equal(k->kind, NNC_KERNEL_ROW);
    assert_int_equal(k->nnodes, on ? 4 : 1);   /* embedding, mul_scalar, add, layernorm */
    assert_int_equal(kernel_of_tensor(&s, sum) == k, on);
    assert_int_equal(kernel_of_tensor(&s, rms)->nnodes, 1);
    const nnc_kernel *r = kernel_of_tensor(&s, pooled);
    assert_int_equal(r->kind, on ? NNC_KERNEL_REDUCE : NNC_KERNEL_ELEMENTWISE);
    assert_int_equal(kernel_of_tensor(&s, num) == r, on);
    if (on) assert_int_equal(r->nnodes, 4);   /* mul, sum, div, neg; the other sum is its input */
    assert_int_equal(kernel_of_tensor(&s, den)->nnodes, 1);
    assert_int_equal(kernel_of_tensor(&s, mu)->nnodes, 1);   /* centred broadcasts it back: its own kernel */
    check_equivalent(&s, 5);
    done(&b, &s);
  }
  /* rows longer than a warp holds stay a row kernel of their own */
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int x = input(&b, "x", NNC_F32, 2, (nnc_dim[]){K(3), K(NNC_ROW_LOOP_COLS + 8)});
  int g = param(&b, "g", 1, (nnc_dim[]){K(NNC_ROW_LOOP_COLS + 8)});
  int y = rmsnorm(&b, op1(&b, NNC_OP_RELU, x), g, 1e-6);
  output(&b, "y", y);
  nnc_error err = {0};
  nnc_compile_opts co = {.row_loops = true};
  nnc_schedule_init(&s, &b.g);
  if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
  assert_int_equal(kernel_of_tensor(&s, y)->nnodes, 1);
  check_equivalent(&s, 2);
  done(&b, &s);
}

/* ---------------------------------------------------------------- singles */

static void test_single_kernels(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 3), T = sym(&b, "T", 17);
  int ids = input(&b, "ids", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
  int table = param(&b, "wte", 2, (nnc_dim[]){K(29), K(13)});
  int e = out0(&b, node(&b, NNC_OP_EMBEDDING, 2, (int[]){table, ids}, NULL, 1, 0, NULL));
  int sm0 = softmax(&b, e, 1);                                  /* not the last axis: a ROW kernel */
  nnc_attrs ra = {.axis = 2, .keepdim = true};
  int red = out0(&b, node(&b, NNC_OP_SUM, 1, &sm0, &ra, 1, 0, NULL));   /* [B,T,1] */
  nnc_dim bt = {1, 2, {B, T}};
  int v = reshape(&b, sm0, 2, (nnc_dim[]){bt, K(13)});
  int tr = transpose(&b, e, 0, 1);                              /* MOVE */
  nnc_attrs sa = {.axis = 2};
  int sp = node(&b, NNC_OP_SPLIT, 1, &tr, &sa, 2, 3,
                (nnc_dim[]){S(T), S(B), K(6), S(T), S(B), K(7)});
  nnc_attrs ca = {.axis = 2};
  int cat = out0(&b, node(&b, NNC_OP_CONCAT, 2, (int[]){b.g.nodes[sp].out[1], b.g.nodes[sp].out[0]}, &ca, 1, 0,
                          NULL));
  int logits = linear(&b, v, param(&b, "head", 2, (nnc_dim[]){K(29), K(13)}), -1, false);
  int tflat = reshape(&b, ids, 1, (nnc_dim[]){bt});
  int loss = out0(&b, node(&b, NNC_OP_CROSS_ENTROPY, 2, (int[]){logits, tflat}, NULL, 1, 0, NULL));
  int vo = reshape(&b, red, 2, (nnc_dim[]){S(B), S(T)});   /* a reshape that is an output: MOVE */
  output(&b, "loss", loss);
  output(&b, "cat", cat);
  output(&b, "red", vo);
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(kernel_of_tensor(&s, e)->kind, NNC_KERNEL_GATHER);
  assert_int_equal(kernel_of_tensor(&s, sm0)->kind, NNC_KERNEL_ROW);
  assert_int_equal(kernel_of_tensor(&s, red)->kind, NNC_KERNEL_REDUCE);
  assert_int_equal(kernel_of_tensor(&s, v)->kind, NNC_KERNEL_VIEW);
  assert_int_equal(kernel_of_tensor(&s, tflat)->kind, NNC_KERNEL_VIEW);
  assert_int_equal(kernel_of_tensor(&s, vo)->kind, NNC_KERNEL_MOVE);
  assert_int_equal(kernel_of_tensor(&s, tr)->kind, NNC_KERNEL_MOVE);
  assert_int_equal(s.k[s.kernel_of_node[sp]].kind, NNC_KERNEL_MOVE);
  assert_int_equal(s.k[s.kernel_of_node[sp]].nout, 2);
  assert_int_equal(kernel_of_tensor(&s, cat)->kind, NNC_KERNEL_MOVE);
  assert_int_equal(kernel_of_tensor(&s, loss)->kind, NNC_KERNEL_LOSS);
  assert_int_equal(kernel_of_tensor(&s, logits)->kind, NNC_KERNEL_GEMM);
  assert_int_equal(s.nk, 11);
  check_equivalent(&s, 8);
  done(&b, &s);
}

/* Dead nodes get no kernel; an empty graph (every node dead) no kernels. */
static void test_dead_nodes(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 29);
  int x = input(&b, "x", NNC_F32, 1, (nnc_dim[]){S(N)});
  int a = op1(&b, NNC_OP_EXP, x);
  int c = op1(&b, NNC_OP_NEG, x);
  output(&b, "c", c);
  b.g.nodes[b.g.tensors[a].producer].dead = true;
  fuse(&b, &s);
  check_structure(&s);
  assert_int_equal(s.nk, 1);
  assert_int_equal(s.kernel_of_node[b.g.tensors[a].producer], -1);
  check_equivalent(&s, 3);
  done(&b, &s);

  tb_init(&b);
  fuse(&b, &s);
  assert_int_equal(s.nk, 0);
  done(&b, &s);

  /* a schedule already filled is refused with an error, not overwritten */
  tb_init(&b);
  N = sym(&b, "N", 29);
  x = input(&b, "x", NNC_F32, 1, (nnc_dim[]){S(N)});
  output(&b, "y", op1(&b, NNC_OP_EXP, x));
  fuse(&b, &s);
  nnc_error err = {0};
  assert_int_equal(nnc_pass_fuse(&b.g, NULL, &s, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "empty schedule"));
  done(&b, &s);
}

/* ------------------------------------------------------ a whole block */

/* A pre-norm transformer block at odd sizes (T <= 17, C = 13, one head,
 * hidden N = 29), causal and padded, through the whole pipeline. */
static void test_block_pipeline(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 2), T = sym(&b, "T", 17);
  nnc_dim bt = {1, 2, {B, T}};
  int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(13)});
  int mask = input(&b, "mask", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
  int g1 = param(&b, "ln_1.weight", 1, (nnc_dim[]){K(13)});
  int b1 = param(&b, "ln_1.bias", 1, (nnc_dim[]){K(13)});
  int wqkv = param(&b, "attn.c_attn.weight", 2, (nnc_dim[]){K(13), K(39)});
  int bqkv = param(&b, "attn.c_attn.bias", 1, (nnc_dim[]){K(39)});
  int wo = param(&b, "attn.c_proj.weight", 2, (nnc_dim[]){K(13), K(13)});
  int bo = param(&b, "attn.c_proj.bias", 1, (nnc_dim[]){K(13)});
  int g2 = param(&b, "ln_2.weight", 1, (nnc_dim[]){K(13)});
  int b2 = param(&b, "ln_2.bias", 1, (nnc_dim[]){K(13)});
  int wfc = param(&b, "mlp.c_fc.weight", 2, (nnc_dim[]){K(29), K(13)});
  int bfc = param(&b, "mlp.c_fc.bias", 1, (nnc_dim[]){K(29)});
  int wpr = param(&b, "mlp.c_proj.weight", 2, (nnc_dim[]){K(13), K(29)});
  int bpr = param(&b, "mlp.c_proj.bias", 1, (nnc_dim[]){K(13)});

  int qkv = linear(&b, layernorm(&b, x, g1, b1, 1e-5), wqkv, bqkv, true);
  nnc_attrs sa = {.axis = 2};
  int sp = node(&b, NNC_OP_SPLIT, 1, &qkv, &sa, 3, 3,
                (nnc_dim[]){S(B), S(T), K(13), S(B), S(T), K(13), S(B), S(T), K(13)});
  int q = b.g.nodes[sp].out[0], k = b.g.nodes[sp].out[1], v = b.g.nodes[sp].out[2];
  int sc = ops(&b, NNC_OP_MUL_S, op2(&b, NNC_OP_MATMUL, q, transpose_last(&b, k)), 1.0 / sqrt(13.0));
  sc = op2(&b, NNC_OP_PADDING_MASK, op1(&b, NNC_OP_CAUSAL_MASK, sc), mask);
  int att = op2(&b, NNC_OP_MATMUL, softmax(&b, sc, 2), v);
  int flat = reshape(&b, att, 2, (nnc_dim[]){bt, K(13)});
  int proj = linear(&b, flat, wo, bo, true);
  int x1 = op2(&b, NNC_OP_ADD, x, reshape(&b, proj, 3, (nnc_dim[]){S(B), S(T), K(13)}));
  int h = gelu(&b, linear(&b, layernorm(&b, x1, g2, b2, 1e-5), wfc, bfc, false), true);
  int y = op2(&b, NNC_OP_ADD, linear(&b, h, wpr, bpr, false), x1);
  /* a dead branch for dce to remove */
  op1(&b, NNC_OP_EXP, y);
  output(&b, "y", y);

  nnc_error err = {0};
  nnc_schedule_init(&s, &b.g);
  if (nnc_compile_graph(&b.g, &s, &err)) fail_msg("compile: %s", err.msg);
  check_structure(&s);
  assert_int_equal(count_kind(&s, NNC_KERNEL_ATTENTION), 1);
  assert_int_equal(count_kind(&s, NNC_KERNEL_GEMM), 4);
  const nnc_kernel *ka = kernel_of_tensor(&s, att);
  assert_int_equal(ka->d.attn.q, q);
  assert_int_equal(ka->d.attn.k, k);
  assert_int_equal(ka->d.attn.v, v);
  assert_int_equal(ka->d.attn.mask, mask);
  assert_true(ka->d.attn.causal);
  const nnc_kernel *ky = kernel_of_tensor(&s, y);
  assert_int_equal(ky->kind, NNC_KERNEL_GEMM);
  assert_int_equal(ky->d.gemm.residual, x1);
  const nnc_kernel *kh = kernel_of_tensor(&s, h);
  assert_int_equal(kh->d.gemm.prologue, NNC_NORM_LAYER);
  assert_int_equal(kh->d.gemm.act, NNC_OP_GELU);
  assert_non_null(s.plan.buf);
  check_equivalent(&s, 25);
  done(&b, &s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_attention_full),
    cmocka_unit_test(test_attention_div_and_bare),
    cmocka_unit_test(test_attention_not_fused),
    cmocka_unit_test(test_gemm_prologue_epilogue),
    cmocka_unit_test(test_gemm_act_after_residual),
    cmocka_unit_test(test_gemm_swiglu),
    cmocka_unit_test(test_attention_grouped_mask),
    cmocka_unit_test(test_gemm_windows),
    cmocka_unit_test(test_gemm_row_windows),
    cmocka_unit_test(test_pool_windows),
    cmocka_unit_test(test_gemm_alpha_bias_rms_transpose),
    cmocka_unit_test(test_gemm_not_fused),
    cmocka_unit_test(test_elementwise_chain),
    cmocka_unit_test(test_elementwise_not_fused),
    cmocka_unit_test(test_elementwise_square_and_long),
    cmocka_unit_test(test_elementwise_many_inputs),
    cmocka_unit_test(test_gather_in_loop),
    cmocka_unit_test(test_row_and_reduce_chains),
    cmocka_unit_test(test_single_kernels),
    cmocka_unit_test(test_dead_nodes),
    cmocka_unit_test(test_block_pipeline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
