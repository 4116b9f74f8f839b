/* tests/unit/test_cse_dce.c — common-subexpression and dead-code elimination
 * (passes/cse.c, passes/dce.c): which nodes merge or die, where their uses
 * go, and that the graph still checks afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compiler/passes/passes.h"

static nnc_graph G;
static nnc_error E;
static const char *FILE_NAME;
static int SB, ST;

static int setup(void **state) {
  (void)state;
  nnc_graph_init(&G);
  memset(&E, 0, sizeof E);
  G.name = strdup("m");
  FILE_NAME = nnc_graph_intern(&G, "m.lua");
  nnc_graph_add_symbol(&G, "B", 32, (nnc_srcloc){FILE_NAME, 1}, &SB, &E);
  nnc_graph_add_symbol(&G, "T", 1024, (nnc_srcloc){FILE_NAME, 1}, &ST, &E);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  nnc_graph_free(&G);
  return 0;
}

static nnc_dim K(int64_t k) { return nnc_dim_const(k); }
static nnc_dim B(void) { return nnc_dim_sym(SB); }
static nnc_dim T(void) { return nnc_dim_sym(ST); }

#define DIMS(...) (const nnc_dim[]){__VA_ARGS__}
#define NDIMS(...) (int)(sizeof(DIMS(__VA_ARGS__)) / sizeof(nnc_dim))
#define INS(...) (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)), (const int[]){__VA_ARGS__}

static int input_r(const char *name, int rank, const nnc_dim *shape) {
  int id = -1;
  assert_int_equal(nnc_graph_add_input(&G, name, NNC_F32, rank, shape, (nnc_srcloc){FILE_NAME, 1}, &id, &E),
                   NNC_OK);
  return id;
}
#define IN(name, ...) input_r(name, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__))

static int LINE = 10;

/* Adds and infers a node; returns its node id. */
static int node(nnc_op op, int nin, const int *ins, const nnc_attrs *a) {
  int id;
  assert_int_equal(nnc_graph_add_node(&G, op, nin, ins, a, 1, (nnc_srcloc){FILE_NAME, LINE++}, NULL, &id, &E),
                   NNC_OK);
  if (nnc_infer_node(&G, id, &E)) fail_msg("unexpected error: %s", E.msg);
  return id;
}
static int out(int n) { return G.nodes[n].out[0]; }

static int reshape(int x, int rank, const nnc_dim *shape) {
  int id;
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_RESHAPE, 1, &x, NULL, 1, (nnc_srcloc){FILE_NAME, LINE++}, NULL,
                                      &id, &E), NNC_OK);
  G.tensors[out(id)].rank = rank;
  memcpy(G.tensors[out(id)].shape, shape, (size_t)rank * sizeof *shape);
  if (nnc_infer_node(&G, id, &E)) fail_msg("unexpected error: %s", E.msg);
  return id;
}
#define RESHAPE(x, ...) reshape(x, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__))

static void output(const char *name, int t) {
  assert_int_equal(nnc_graph_add_output(&G, name, t, (nnc_srcloc){FILE_NAME, 99}, &E), NNC_OK);
}

static int cse(void) {
  int merged = -1;
  assert_int_equal(nnc_pass_cse(&G, &merged, &E), NNC_OK);
  return merged;
}
static int dce(void) {
  int removed = -1;
  assert_int_equal(nnc_pass_dce(&G, &removed, &E), NNC_OK);
  return removed;
}
static void check_ok(void) {
  if (nnc_pass_check(&G, &E)) fail_msg("check failed: %s", E.msg);
}
static int live_count(void) {
  int n = 0;
  for (int i = 0; i < G.nnodes; i++) n += !G.nodes[i].dead;
  return n;
}

/* ------------------------------------------------------------------- cse */

static void cse_merges_duplicates(void **state) {
  (void)state;
  int x = IN("x", B(), K(7));
  int r1 = node(NNC_OP_RELU, INS(x), NULL);
  int r2 = node(NNC_OP_RELU, INS(x), NULL);
  int s = node(NNC_OP_ADD, INS(out(r1), out(r2)), NULL);
  output("y", out(s));
  output("r2", out(r2));
  assert_int_equal(cse(), 1);
  assert_false(G.nodes[r1].dead);
  assert_true(G.nodes[r2].dead);
  assert_int_equal(G.nodes[s].in[0], out(r1));
  assert_int_equal(G.nodes[s].in[1], out(r1));
  assert_int_equal(G.outputs[1].tensor, out(r1));
  assert_int_equal(G.outputs[0].tensor, out(s));
  check_ok();
  assert_int_equal(cse(), 0);   /* a second run finds nothing more */
}

static void cse_merges_chains(void **state) {
  (void)state;
  int x = IN("x", B(), T(), K(5));
  int a = node(NNC_OP_RELU, INS(x), NULL);
  int b = node(NNC_OP_RELU, INS(x), NULL);
  int c = node(NNC_OP_EXP, INS(out(a)), NULL);
  int d = node(NNC_OP_EXP, INS(out(b)), NULL);   /* equal to c only once b is merged into a */
  int e = node(NNC_OP_MUL, INS(out(c), out(d)), NULL);
  int f = node(NNC_OP_MUL, INS(out(d), out(c)), NULL);
  output("e", out(e));
  output("f", out(f));
  assert_int_equal(cse(), 3);
  assert_true(G.nodes[b].dead && G.nodes[d].dead && G.nodes[f].dead);
  assert_false(G.nodes[a].dead || G.nodes[c].dead || G.nodes[e].dead);
  assert_int_equal(G.nodes[c].in[0], out(a));
  assert_int_equal(G.nodes[e].in[1], out(c));
  assert_int_equal(G.outputs[1].tensor, out(e));
  check_ok();
}

static void cse_keeps_different_attrs(void **state) {
  (void)state;
  int x = IN("x", K(3), K(5), K(7));
  int s0 = node(NNC_OP_SOFTMAX, INS(x), &(nnc_attrs){.axis = 1});
  int s1 = node(NNC_OP_SOFTMAX, INS(x), &(nnc_attrs){.axis = 2});
  int m0 = node(NNC_OP_MUL_S, INS(x), &(nnc_attrs){.scalar = 0.0});
  int m1 = node(NNC_OP_MUL_S, INS(x), &(nnc_attrs){.scalar = -0.0});
  int m2 = node(NNC_OP_MUL_S, INS(x), &(nnc_attrs){.scalar = 0.5});
  int r0 = RESHAPE(x, K(15), K(7));
  int r1 = RESHAPE(x, K(21), K(5));
  int r2 = RESHAPE(x, K(-1), K(7));     /* the same shape as r0 once -1 is inferred */
  int k0 = node(NNC_OP_SUM, INS(x), &(nnc_attrs){.axis = 1});
  int k1 = node(NNC_OP_SUM, INS(x), &(nnc_attrs){.axis = 1, .keepdim = true});
  int g0 = node(NNC_OP_GELU, INS(x), NULL);
  int g1 = node(NNC_OP_GELU, INS(x), &(nnc_attrs){.gelu_tanh = true});
  int t0 = node(NNC_OP_TRANSPOSE, INS(x), &(nnc_attrs){.perm = {0, 2, 1}});
  int t1 = node(NNC_OP_TRANSPOSE, INS(x), &(nnc_attrs){.perm = {1, 0, 2}});
  int c0 = node(NNC_OP_CAST, INS(x), &(nnc_attrs){.to = NNC_F16});
  int c1 = node(NNC_OP_CAST, INS(x), &(nnc_attrs){.to = NNC_BF16});
  int e0 = node(NNC_OP_EXP, INS(x), NULL);
  int l0 = node(NNC_OP_LOG, INS(x), NULL);
  int all[] = {s0, s1, m0, m1, m2, r0, r1, r2, k0, k1, g0, g1, t0, t1, c0, c1, e0, l0};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    char name[16];
    snprintf(name, sizeof name, "o%zu", i);
    output(name, out(all[i]));
  }
  assert_int_equal(cse(), 1);
  assert_true(G.nodes[r2].dead);
  assert_int_equal(G.outputs[7].tensor, out(r0));
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (all[i] != r2) assert_false(G.nodes[all[i]].dead);
  check_ok();
}

static void cse_keeps_different_slices_and_splits(void **state) {
  (void)state;
  int wpe = IN("wpe", K(1024), K(9));
  int a = node(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.start = K(0), .stop = T()});
  int b = node(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.start = K(0), .stop = B()});
  int c = node(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.start = K(0), .stop = T()});
  int x = IN("x", B(), K(12));
  int sp[3];
  for (int i = 0; i < 3; i++) {
    assert_int_equal(nnc_graph_add_node(&G, NNC_OP_SPLIT, 1, &x, &(nnc_attrs){.axis = 1}, 2,
                                        (nnc_srcloc){FILE_NAME, 50 + i}, "qk", &sp[i], &E), NNC_OK);
    int first = i == 1 ? 4 : 5;
    nnc_tensor *o0 = &G.tensors[G.nodes[sp[i]].out[0]], *o1 = &G.tensors[G.nodes[sp[i]].out[1]];
    o0->rank = o1->rank = 2;
    o0->shape[0] = o1->shape[0] = B();
    o0->shape[1] = K(first);
    o1->shape[1] = K(12 - first);
    assert_int_equal(nnc_infer_node(&G, sp[i], &E), NNC_OK);
  }
  int u = node(NNC_OP_ADD, INS(G.nodes[sp[2]].out[1], G.nodes[sp[0]].out[1]), NULL);
  output("a", out(a));
  output("b", out(b));
  output("c", out(c));
  output("s1", G.nodes[sp[1]].out[0]);
  output("u", out(u));
  assert_int_equal(cse(), 2);
  assert_true(G.nodes[c].dead);
  assert_true(G.nodes[sp[2]].dead);
  assert_false(G.nodes[sp[1]].dead);
  assert_int_equal(G.outputs[2].tensor, out(a));
  assert_int_equal(G.nodes[u].in[0], G.nodes[sp[0]].out[1]);
  assert_int_equal(G.nodes[u].in[1], G.nodes[sp[0]].out[1]);
  check_ok();
}

/* Padding bytes in the attrs differ; the fields do not. */
static void cse_compares_fields_not_bytes(void **state) {
  (void)state;
  int x = IN("x", K(3), K(5));
  nnc_attrs a, b;
  memset(&a, 0xA5, sizeof a);
  memset(&b, 0x5A, sizeof b);
  nnc_attrs *both[] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    nnc_attrs *p = both[i];
    p->axis = 1;
    p->keepdim = false;
    for (int d = 0; d < NNC_MAX_RANK; d++) p->perm[d] = 0;
    p->start = K(0);
    p->stop = K(0);
    p->scalar = 0;
    p->eps = 0;
    p->gelu_tanh = false;
    p->weight_in_out = false;
    p->to = NNC_F32;
    p->act = NNC_OP_NONE;
    p->mask_zero = false;
    p->causal = false;
    p->win = (nnc_window){0, 0, 0, 0, 0, 0, 0, 0, false, false};
    p->reverse = false;
    p->rot_dims = 0;
  }
  int n0 = node(NNC_OP_SOFTMAX, INS(x), &a);
  int n1 = node(NNC_OP_SOFTMAX, INS(x), &b);
  memcpy(&G.nodes[n0].attrs, &a, sizeof a);   /* keep the padding bytes the struct copy may drop */
  memcpy(&G.nodes[n1].attrs, &b, sizeof b);
  output("y", out(n1));
  assert_int_equal(cse(), 1);
  assert_true(G.nodes[n1].dead);
  assert_int_equal(G.outputs[0].tensor, out(n0));
}

static void cse_ignores_dead_nodes(void **state) {
  (void)state;
  int x = IN("x", K(7));
  int a = node(NNC_OP_TANH, INS(x), NULL);
  int b = node(NNC_OP_TANH, INS(x), NULL);
  int c = node(NNC_OP_TANH, INS(x), NULL);
  G.nodes[a].dead = true;
  output("c", out(c));
  assert_int_equal(cse(), 1);
  assert_false(G.nodes[b].dead);
  assert_true(G.nodes[c].dead);
  assert_int_equal(G.outputs[0].tensor, out(b));
  check_ok();
}

static void cse_many_nodes(void **state) {
  (void)state;
  /* enough nodes to fill and probe the hash table: 37 distinct, each twice */
  int x = IN("x", K(5));
  int firsts[37];
  for (int rep = 0; rep < 2; rep++)
    for (int i = 0; i < 37; i++) {
      int n = node(NNC_OP_ADD_S, INS(x), &(nnc_attrs){.scalar = i});
      if (rep == 0) firsts[i] = n;
      else {
        char name[16];
        snprintf(name, sizeof name, "o%d", i);
        output(name, out(n));
      }
    }
  assert_int_equal(cse(), 37);
  for (int i = 0; i < 37; i++) {
    assert_false(G.nodes[firsts[i]].dead);
    assert_int_equal(G.outputs[i].tensor, out(firsts[i]));
  }
  assert_int_equal(live_count(), 37);
}

static void cse_empty_graph(void **state) {
  (void)state;
  assert_int_equal(cse(), 0);
  assert_int_equal(dce(), 0);
}

/* ------------------------------------------------------------------- dce */

static void dce_keeps_what_reaches_outputs(void **state) {
  (void)state;
  int x = IN("x", B(), K(7));
  int y = IN("y", B(), K(7));
  int a = node(NNC_OP_RELU, INS(x), NULL);          /* used by c */
  int b = node(NNC_OP_EXP, INS(y), NULL);           /* used only by dead d */
  int c = node(NNC_OP_ADD, INS(out(a), x), NULL);   /* output */
  int d = node(NNC_OP_MUL, INS(out(b), out(a)), NULL);
  int e = node(NNC_OP_SIGMOID, INS(out(d)), NULL);  /* unused */
  int f = node(NNC_OP_NEG, INS(out(c)), NULL);      /* unused, reads a live value */
  output("c", out(c));
  assert_int_equal(dce(), 4);
  assert_false(G.nodes[a].dead);
  assert_false(G.nodes[c].dead);
  assert_true(G.nodes[b].dead && G.nodes[d].dead && G.nodes[e].dead && G.nodes[f].dead);
  check_ok();
  assert_int_equal(dce(), 0);   /* already dead nodes are not counted again */
}

static void dce_keeps_split_with_one_used_output(void **state) {
  (void)state;
  int x = IN("x", K(3), K(10));
  int sp;
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_SPLIT, 1, &x, &(nnc_attrs){.axis = 1}, 2,
                                      (nnc_srcloc){FILE_NAME, 3}, "parts", &sp, &E), NNC_OK);
  for (int i = 0; i < 2; i++) {
    nnc_tensor *o = &G.tensors[G.nodes[sp].out[i]];
    o->rank = 2;
    o->shape[0] = K(3);
    o->shape[1] = K(i ? 7 : 3);
  }
  assert_int_equal(nnc_infer_node(&G, sp, &E), NNC_OK);
  int r = node(NNC_OP_RELU, INS(G.nodes[sp].out[1]), NULL);
  int unused = node(NNC_OP_RELU, INS(G.nodes[sp].out[0]), NULL);
  output("r", out(r));
  assert_int_equal(dce(), 1);
  assert_false(G.nodes[sp].dead);
  assert_false(G.nodes[r].dead);
  assert_true(G.nodes[unused].dead);
  check_ok();
}

static void dce_without_outputs_removes_all(void **state) {
  (void)state;
  int x = IN("x", K(3));
  node(NNC_OP_RELU, INS(x), NULL);
  node(NNC_OP_RELU, INS(x), NULL);
  assert_int_equal(dce(), 2);
  assert_int_equal(live_count(), 0);
}

static void dce_rejects_bad_output_ids(void **state) {
  (void)state;
  int x = IN("x", K(3));
  int a = node(NNC_OP_RELU, INS(x), NULL);
  output("a", out(a));
  G.outputs[0].tensor = 42;
  int removed = -1;
  assert_int_equal(nnc_pass_dce(&G, &removed, &E), NNC_E_INTERNAL);
  assert_string_equal(E.msg, "m.lua:99: dce: output a is not a tensor id (42)");
}

static void cse_then_dce(void **state) {
  (void)state;
  /* q and k come from the same projection written twice; v is unused */
  int x = IN("x", B(), T(), K(11));
  int w = -1;
  assert_int_equal(nnc_graph_add_param(&G, "w", NNC_F32, 2, DIMS(K(11), K(11)), (nnc_srcloc){FILE_NAME, 2},
                                       &w, &E), NNC_OK);
  int q = node(NNC_OP_LINEAR, INS(x, w), NULL);
  int k = node(NNC_OP_LINEAR, INS(x, w), NULL);
  int v = node(NNC_OP_LINEAR, INS(x, w), &(nnc_attrs){.weight_in_out = true});
  int kt = node(NNC_OP_TRANSPOSE, INS(out(k)), &(nnc_attrs){.perm = {0, 2, 1}});
  int s = node(NNC_OP_MATMUL, INS(out(q), out(kt)), NULL);
  output("scores", out(s));
  assert_int_equal(cse(), 1);
  assert_true(G.nodes[k].dead);
  assert_int_equal(G.nodes[kt].in[0], out(q));
  assert_int_equal(dce(), 1);
  assert_true(G.nodes[v].dead);
  assert_int_equal(live_count(), 3);
  check_ok();
  char buf[64];
  const nnc_tensor *t = &G.tensors[G.outputs[0].tensor];
  assert_string_equal(nnc_shape_format(&G, t->rank, t->shape, buf, sizeof buf), "[B,T,T]");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(cse_merges_duplicates, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_merges_chains, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_keeps_different_attrs, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_keeps_different_slices_and_splits, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_compares_fields_not_bytes, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_ignores_dead_nodes, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_many_nodes, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_empty_graph, setup, teardown),
    cmocka_unit_test_setup_teardown(dce_keeps_what_reaches_outputs, setup, teardown),
    cmocka_unit_test_setup_teardown(dce_keeps_split_with_one_used_output, setup, teardown),
    cmocka_unit_test_setup_teardown(dce_without_outputs_removes_all, setup, teardown),
    cmocka_unit_test_setup_teardown(dce_rejects_bad_output_ids, setup, teardown),
    cmocka_unit_test_setup_teardown(cse_then_dce, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
