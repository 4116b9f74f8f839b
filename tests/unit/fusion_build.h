/* tests/unit/fusion_build.h — what the fusion tests (test_fusion.c: the
 * attention, GEMM and single kernels; test_fusion_loops.c: the loops and the
 * chains inside row and reduce kernels) share: a small graph builder, the
 * structural checks of a schedule, and its float64 equivalence with the
 * unfused graph. */
#ifndef NNC_TEST_FUSION_BUILD_H
#define NNC_TEST_FUSION_BUILD_H

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

static inline void tb_init(tb *b) {
  nnc_graph_init(&b->g);
  b->file = nnc_graph_intern(&b->g, "t.lua");
  b->g.name = strdup("t");
  b->line = 1;
}

static inline nnc_srcloc here(tb *b) { return (nnc_srcloc){b->file, b->line++}; }
static inline nnc_dim K(int64_t k) { return nnc_dim_const(k); }
static inline nnc_dim S(int s) { return nnc_dim_sym(s); }

static inline int sym(tb *b, const char *name, int64_t max) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_symbol(&b->g, name, max, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static inline int input(tb *b, const char *name, nnc_dtype dt, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_input(&b->g, name, dt, rank, shape, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

static inline int param(tb *b, const char *name, int rank, const nnc_dim *shape) {
  nnc_error err = {0};
  int id;
  if (nnc_graph_add_param(&b->g, name, NNC_F32, rank, shape, here(b), &id, &err)) fail_msg("%s", err.msg);
  return id;
}

/* Adds a node, presets its outputs' shapes when given (reshape, split) and
 * infers; returns the node id. */
static inline int node(tb *b, nnc_op op, int nin, const int *in, const nnc_attrs *a, int nout, int rank,
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

static inline int out0(tb *b, int n) { return b->g.nodes[n].out[0]; }

static inline int op1(tb *b, nnc_op op, int x) { return out0(b, node(b, op, 1, &x, NULL, 1, 0, NULL)); }
static inline int op2(tb *b, nnc_op op, int x, int y) {
  return out0(b, node(b, op, 2, (int[]){x, y}, NULL, 1, 0, NULL));
}
static inline int ops(tb *b, nnc_op op, int x, double s) {
  nnc_attrs a = {.scalar = s};
  return out0(b, node(b, op, 1, &x, &a, 1, 0, NULL));
}
static inline int linear(tb *b, int x, int w, int bias, bool in_out) {
  nnc_attrs a = {.weight_in_out = in_out};
  int in[3] = {x, w, bias};
  return out0(b, node(b, NNC_OP_LINEAR, bias >= 0 ? 3 : 2, in, &a, 1, 0, NULL));
}
static inline int transpose(tb *b, int x, int i, int j) {
  nnc_attrs a = {0};
  int r = b->g.tensors[x].rank;
  for (int d = 0; d < r; d++) a.perm[d] = d;
  a.perm[i] = j;
  a.perm[j] = i;
  return out0(b, node(b, NNC_OP_TRANSPOSE, 1, &x, &a, 1, 0, NULL));
}
static inline int transpose_last(tb *b, int x) {
  int r = b->g.tensors[x].rank;
  return transpose(b, x, r - 2, r - 1);
}
static inline int softmax(tb *b, int x, int axis) {
  nnc_attrs a = {.axis = axis};
  return out0(b, node(b, NNC_OP_SOFTMAX, 1, &x, &a, 1, 0, NULL));
}
static inline int layernorm(tb *b, int x, int gamma, int beta, double eps) {
  nnc_attrs a = {.eps = eps};
  return out0(b, node(b, NNC_OP_LAYERNORM, 3, (int[]){x, gamma, beta}, &a, 1, 0, NULL));
}
static inline int rmsnorm(tb *b, int x, int gamma, double eps) {
  nnc_attrs a = {.eps = eps};
  return out0(b, node(b, NNC_OP_RMSNORM, 2, (int[]){x, gamma}, &a, 1, 0, NULL));
}
static inline int gelu(tb *b, int x, bool tanh_form) {
  nnc_attrs a = {.gelu_tanh = tanh_form};
  return out0(b, node(b, NNC_OP_GELU, 1, &x, &a, 1, 0, NULL));
}
static inline int reshape(tb *b, int x, int rank, const nnc_dim *shape) {
  return out0(b, node(b, NNC_OP_RESHAPE, 1, &x, NULL, 1, rank, shape));
}
static inline void output(tb *b, const char *name, int t) {
  nnc_error err = {0};
  if (nnc_graph_add_output(&b->g, name, t, here(b), &err)) fail_msg("%s", err.msg);
}

/* Fuses b's graph into s (no clean-up passes: the tests choose the graph). */
static inline void fuse(tb *b, nnc_schedule *s) {
  nnc_error err = {0};
  nnc_schedule_init(s, &b->g);
  if (nnc_pass_fuse(&b->g, NULL, s, &err)) fail_msg("fuse: %s", err.msg);
}

static inline void done(tb *b, nnc_schedule *s) {
  nnc_schedule_free(s);
  nnc_graph_free(&b->g);
}

static inline int count_kind(const nnc_schedule *s, nnc_kernel_kind kind) {
  int n = 0;
  for (int i = 0; i < s->nk; i++) n += s->k[i].kind == kind;
  return n;
}

static inline const nnc_kernel *kernel_of_tensor(const nnc_schedule *s, int t) {
  int p = s->g->tensors[t].producer;
  assert_true(p >= 0);
  int k = s->kernel_of_node[p];
  assert_true(k >= 0 && k < s->nk);
  return &s->k[k];
}

/* ------------------------------------------------------ structural checks */

/* The schedule is well formed whatever the graph: every live node in exactly
 * one kernel, kernel_of_node agrees, nodes ascending (a reduce kernel with
 * side outputs: its reduction and the nodes reading its result last, each
 * node after the kernel's nodes it reads), inputs produced by earlier
 * kernels (or given), listed once, outputs the last node's and then (row
 * and reduce kernels) side outputs made by its other nodes, each a graph
 * output or read by a later kernel only, and every value a later kernel
 * reads is one of its producer's outputs. */
static inline void check_structure(const nnc_schedule *s) {
  const nnc_graph *g = s->g;
  int *seen = calloc((size_t)g->nnodes + 1, sizeof *seen);
  assert_non_null(seen);
  for (int i = 0; i < s->nk; i++) {
    const nnc_kernel *k = &s->k[i];
    assert_true(k->nnodes >= 1);
    const nnc_node *last = &g->nodes[k->nodes[k->nnodes - 1]];
    assert_true(k->nout >= last->nout);
    for (int j = 0; j < last->nout; j++) assert_int_equal(k->out[j], last->out[j]);
    bool sides = k->nout > last->nout;
    if (sides) assert_true(k->kind == NNC_KERNEL_ROW || k->kind == NNC_KERNEL_REDUCE);
    for (int j = 0; j < k->nnodes; j++) {
      int n = k->nodes[j];
      assert_false(g->nodes[n].dead);
      assert_int_equal(s->kernel_of_node[n], i);
      if (j && !sides) assert_true(k->nodes[j - 1] < n);
      /* what it reads inside the kernel is made before it */
      for (int q = 0; q < g->nodes[n].nin; q++) {
        int p = g->tensors[g->nodes[n].in[q]].producer;
        if (p < 0 || s->kernel_of_node[p] != i) continue;
        bool before = false;
        for (int b = 0; b < j; b++) before |= k->nodes[b] == p;
        assert_true(before);
      }
      seen[n]++;
    }
    for (int j = last->nout; j < k->nout; j++) {
      int t = k->out[j], p = g->tensors[t].producer;
      assert_true(p >= 0 && s->kernel_of_node[p] == i && p != k->nodes[k->nnodes - 1]);
      bool read = nnc_graph_is_output(g, t);
      for (int n = 0; n < g->nnodes; n++) {
        if (g->nodes[n].dead || s->kernel_of_node[n] == i) continue;
        for (int q = 0; q < g->nodes[n].nin; q++)
          if (g->nodes[n].in[q] == t) {
            read = true;
            assert_true(s->kernel_of_node[n] > i);
          }
      }
      assert_true(read);
    }
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

static inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* For `seeds` seeds: symbols at their maxima (seed 1), at 1 (seed 2), else
 * random; the schedule's kernel outputs equal the graph's to 1e-12. */
static inline void check_equivalent(const nnc_schedule *s, int seeds) {
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

#endif
