/* tests/unit/test_graph.c — building a graph (ir/graph.c): interning,
 * symbols, inputs, parameters (tying and its mismatch message), nodes,
 * outputs, element counts and the uses index. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "compiler/ir/ir.h"

static nnc_graph G;
static nnc_error E;
static const char *FILE_NAME;

static int setup(void **state) {
  (void)state;
  nnc_graph_init(&G);
  memset(&E, 0, sizeof E);
  FILE_NAME = nnc_graph_intern(&G, "m.lua");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  nnc_graph_free(&G);
  return 0;
}

static nnc_srcloc L(int line) { return (nnc_srcloc){FILE_NAME, line}; }
static nnc_dim K(int64_t k) { return nnc_dim_const(k); }

static void expect_err(nnc_status st, nnc_status code, const char *msg) {
  assert_int_equal(st, code);
  assert_string_equal(E.msg, msg);
}

static void init_is_empty(void **state) {
  (void)state;
  nnc_graph g;
  memset(&g, 0x5A, sizeof g);
  nnc_graph_init(&g);
  assert_int_equal(g.ntensors, 0);
  assert_int_equal(g.nnodes, 0);
  assert_int_equal(g.nsyms, 0);
  assert_null(g.tensors);
  assert_null(g.name);
  nnc_graph_free(&g);
  nnc_graph_free(&g);   /* freeing twice is harmless: free leaves it empty */
}

static void intern(void **state) {
  (void)state;
  const char *a = nnc_graph_intern(&G, "gpt2.lua");
  const char *b = nnc_graph_intern(&G, "gpt2.lua");
  const char *c = nnc_graph_intern(&G, "mlp.lua");
  char tmp[] = "gpt2.lua";
  const char *d = nnc_graph_intern(&G, tmp);
  assert_non_null(a);
  assert_ptr_equal(a, b);
  assert_ptr_equal(a, d);
  assert_ptr_not_equal(a, tmp);   /* a copy, not the caller's buffer */
  assert_ptr_not_equal(a, c);
  assert_string_equal(c, "mlp.lua");
  assert_null(nnc_graph_intern(&G, NULL));
  assert_ptr_equal(nnc_graph_intern(&G, "m.lua"), FILE_NAME);
  assert_string_equal(nnc_graph_intern(&G, ""), "");
  /* many strings: growing keeps earlier pointers valid */
  for (int i = 0; i < 100; i++) {
    char s[16];
    snprintf(s, sizeof s, "s%d", i);
    assert_string_equal(nnc_graph_intern(&G, s), s);
  }
  assert_ptr_equal(nnc_graph_intern(&G, "gpt2.lua"), a);
  assert_int_equal(G.nstrings, 104);
}

static void symbols(void **state) {
  (void)state;
  int b = -1, t = -1, b2 = -1;
  assert_int_equal(nnc_graph_add_symbol(&G, "B", 32, L(1), &b, &E), NNC_OK);
  assert_int_equal(nnc_graph_add_symbol(&G, "T", 1024, L(2), &t, &E), NNC_OK);
  assert_int_equal(b, 0);
  assert_int_equal(t, 1);
  assert_int_equal(nnc_graph_add_symbol(&G, "B", 32, L(5), &b2, &E), NNC_OK);
  assert_int_equal(b2, b);
  assert_int_equal(G.nsyms, 2);
  assert_int_equal(G.syms[t].max, 1024);
  assert_int_equal(G.syms[b].loc.line, 1);   /* the first declaration is remembered */
  assert_int_equal(nnc_graph_find_symbol(&G, "T"), t);
  assert_int_equal(nnc_graph_find_symbol(&G, "S"), -1);
  expect_err(nnc_graph_add_symbol(&G, "B", 64, L(3), &b2, &E), NNC_E_MODEL,
             "m.lua:3: dim B: declared with maximum 32 at m.lua:1, now 64");
  expect_err(nnc_graph_add_symbol(&G, "", 8, L(4), &b2, &E), NNC_E_MODEL,
             "m.lua:4: dim: expected a name of 1 to 31 characters, found \"\"");
  expect_err(nnc_graph_add_symbol(&G, "abcdefghijklmnopqrstuvwxyz012345", 8, L(4), &b2, &E), NNC_E_MODEL,
             "m.lua:4: dim: expected a name of 1 to 31 characters, found \"abcdefghijklmnopqrstuvwxyz012345\"");
  int long_ok;
  assert_int_equal(nnc_graph_add_symbol(&G, "abcdefghijklmnopqrstuvwxyz01234", 8, L(4), &long_ok, &E), NNC_OK);
  expect_err(nnc_graph_add_symbol(&G, "S", 0, L(6), &b2, &E), NNC_E_MODEL,
             "m.lua:6: dim S: expected a maximum of at least 1, found 0");
  assert_int_equal(nnc_graph_add_symbol(&G, "U", 4, NNC_NOLOC, &b2, &E), NNC_OK);
  expect_err(nnc_graph_add_symbol(&G, "U", 5, L(7), &b2, &E), NNC_E_MODEL,
             "m.lua:7: dim U: declared with maximum 4 at ?:0, now 5");
  assert_int_equal(G.nsyms, 4);
}

static void inputs(void **state) {
  (void)state;
  int b, x = -1, y = -1;
  nnc_graph_add_symbol(&G, "B", 32, L(1), &b, &E);
  nnc_dim shape[] = {nnc_dim_sym(b), K(7)};
  assert_int_equal(nnc_graph_add_input(&G, "x", NNC_F32, 2, shape, L(2), &x, &E), NNC_OK);
  assert_int_equal(nnc_graph_add_input(&G, "y", NNC_I32, 0, NULL, L(3), &y, &E), NNC_OK);
  assert_int_equal(G.ninputs, 2);
  assert_int_equal(G.inputs[0], x);
  assert_int_equal(G.inputs[1], y);
  const nnc_tensor *t = &G.tensors[x];
  assert_string_equal(t->name, "x");
  assert_int_equal(t->kind, NNC_TENSOR_INPUT);
  assert_int_equal(t->dtype, NNC_F32);
  assert_int_equal(t->rank, 2);
  assert_true(nnc_dim_eq(t->shape[0], nnc_dim_sym(b)));
  assert_true(nnc_dim_eq_const(t->shape[1], 7));
  assert_int_equal(t->producer, -1);
  assert_ptr_equal(t->loc.file, FILE_NAME);
  assert_int_equal(t->loc.line, 2);
  assert_int_equal(G.tensors[y].rank, 0);
  int z;
  expect_err(nnc_graph_add_input(&G, "x", NNC_F32, 2, shape, L(4), &z, &E), NNC_E_MODEL,
             "m.lua:4: input \"x\": already declared at m.lua:2");
  nnc_dim neg[] = {K(3), K(-3)};
  expect_err(nnc_graph_add_input(&G, "n", NNC_F32, 2, neg, L(5), &z, &E), NNC_E_SHAPE,
             "m.lua:5: input n: expected dims >= 0, found -3 in dim 2");
  nnc_dim zero_sym[] = {{.k = 0, .nsym = 1, .sym = {0}}};
  expect_err(nnc_graph_add_input(&G, "n", NNC_F32, 1, zero_sym, L(5), &z, &E), NNC_E_SHAPE,
             "m.lua:5: input n: expected dims >= 0, found 0 in dim 1");
  nnc_dim unknown[] = {nnc_dim_sym(3)};
  expect_err(nnc_graph_add_input(&G, "u", NNC_F32, 1, unknown, L(6), &z, &E), NNC_E_INTERNAL,
             "m.lua:6: input u: unknown symbol id 3");
  nnc_dim seven[7] = {K(1), K(1), K(1), K(1), K(1), K(1), K(1)};
  expect_err(nnc_graph_add_input(&G, "r", NNC_F32, 7, seven, L(7), &z, &E), NNC_E_SHAPE,
             "m.lua:7: r: expected a rank of 0 to 6, found 7");
  nnc_dim empty[] = {K(0), K(5)};
  assert_int_equal(nnc_graph_add_input(&G, "e", NNC_F32, 2, empty, L(8), &z, &E), NNC_OK);
  assert_int_equal(G.ninputs, 3);
  assert_int_equal(G.ntensors, 3);
}

static void params_tie_and_mismatch(void **state) {
  (void)state;
  int w = -1, w2 = -1, v = -1;
  nnc_dim s34[] = {K(3), K(4)}, s43[] = {K(4), K(3)};
  assert_int_equal(nnc_graph_add_param(&G, "wte.weight", NNC_F32, 2, s34, L(1), &w, &E), NNC_OK);
  assert_int_equal(G.tensors[w].kind, NNC_TENSOR_PARAM);
  assert_int_equal(G.tensors[w].producer, -1);
  /* the same name, dtype and shape is the same tensor (tied weights) */
  assert_int_equal(nnc_graph_add_param(&G, "wte.weight", NNC_F32, 2, s34, L(9), &w2, &E), NNC_OK);
  assert_int_equal(w2, w);
  assert_int_equal(G.nparams, 1);
  assert_int_equal(G.ntensors, 1);
  expect_err(nnc_graph_add_param(&G, "wte.weight", NNC_F32, 2, s43, L(12), &w2, &E), NNC_E_SHAPE,
             "m.lua:12: parameter wte.weight: expected f32[3,4] as declared at m.lua:1, found f32[4,3]");
  expect_err(nnc_graph_add_param(&G, "wte.weight", NNC_BF16, 2, s34, L(13), &w2, &E), NNC_E_SHAPE,
             "m.lua:13: parameter wte.weight: expected f32[3,4] as declared at m.lua:1, found bf16[3,4]");
  expect_err(nnc_graph_add_param(&G, "wte.weight", NNC_F32, 1, s34, L(14), &w2, &E), NNC_E_SHAPE,
             "m.lua:14: parameter wte.weight: expected f32[3,4] as declared at m.lua:1, found f32[3]");
  int b;
  nnc_graph_add_symbol(&G, "B", 32, L(1), &b, &E);
  nnc_dim sym[] = {K(5), nnc_dim_sym(b)};
  expect_err(nnc_graph_add_param(&G, "p", NNC_F32, 2, sym, L(15), &v, &E), NNC_E_SHAPE,
             "m.lua:15: parameter p: expected constant dims (weights have a fixed size), found a symbolic dim 2");
  nnc_dim neg[] = {K(-1)};
  expect_err(nnc_graph_add_param(&G, "q", NNC_F32, 1, neg, L(16), &v, &E), NNC_E_SHAPE,
             "m.lua:16: parameter q: expected dims >= 0, found -1 in dim 1");
  assert_int_equal(nnc_graph_add_param(&G, "ln.bias", NNC_F32, 1, (nnc_dim[]){K(4)}, L(17), &v, &E), NNC_OK);
  assert_int_equal(G.nparams, 2);
  assert_int_equal(G.params[0], w);
  assert_int_equal(G.params[1], v);
  /* an input of the same name is another tensor */
  int x;
  assert_int_equal(nnc_graph_add_input(&G, "ln.bias", NNC_F32, 1, (nnc_dim[]){K(4)}, L(18), &x, &E), NNC_OK);
  assert_int_not_equal(x, v);
}

static void nodes(void **state) {
  (void)state;
  int x, n = -1, s = -1;
  nnc_graph_add_input(&G, "x", NNC_F32, 1, (nnc_dim[]){K(12)}, L(1), &x, &E);
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_RELU, 1, &x, NULL, 1, L(2), "h.0.act", &n, &E), NNC_OK);
  const nnc_node *nd = &G.nodes[n];
  assert_int_equal(n, 0);
  assert_int_equal(nd->op, NNC_OP_RELU);
  assert_int_equal(nd->nin, 1);
  assert_int_equal(nd->in[0], x);
  assert_int_equal(nd->nout, 1);
  assert_string_equal(nd->label, "h.0.act");
  assert_ptr_equal(nd->label, nnc_graph_intern(&G, "h.0.act"));
  assert_false(nd->dead);
  assert_int_equal(nd->loc.line, 2);
  assert_int_equal(nd->attrs.axis, 0);
  assert_false(nd->attrs.keepdim);
  const nnc_tensor *o = &G.tensors[nd->out[0]];
  assert_string_equal(o->name, "h.0.act");
  assert_int_equal(o->kind, NNC_TENSOR_VALUE);
  assert_int_equal(o->producer, n);
  assert_int_equal(o->rank, 0);
  assert_int_equal(o->loc.line, 2);
  /* several outputs are named label#i; attrs are copied */
  nnc_attrs a = {.axis = 1, .eps = 0.5};
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_SPLIT, 1, &x, &a, 3, L(3), "qkv", &s, &E), NNC_OK);
  nd = &G.nodes[s];
  assert_int_equal(s, 1);
  assert_int_equal(nd->nout, 3);
  assert_int_equal(nd->attrs.axis, 1);
  assert_true(nd->attrs.eps == 0.5);
  assert_string_equal(G.tensors[nd->out[0]].name, "qkv#1");
  assert_string_equal(G.tensors[nd->out[2]].name, "qkv#3");
  for (int i = 0; i < 3; i++) assert_int_equal(G.tensors[nd->out[i]].producer, s);
  assert_int_equal(G.ntensors, 5);
  /* without a label, the op's name */
  int c;
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_CAUSAL_MASK, 1, &x, NULL, 1, L(4), NULL, &c, &E), NNC_OK);
  assert_string_equal(G.nodes[c].label, "causal_mask");
  assert_string_equal(G.tensors[G.nodes[c].out[0]].name, "causal_mask");
  int concat_in[NNC_MAX_IO];
  for (int i = 0; i < NNC_MAX_IO; i++) concat_in[i] = x;
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_CONCAT, NNC_MAX_IO, concat_in, NULL, 1, L(5), NULL, &c, &E),
                   NNC_OK);
}

static void node_errors(void **state) {
  (void)state;
  int x, n = -7;
  nnc_graph_add_input(&G, "x", NNC_F32, 1, (nnc_dim[]){K(12)}, L(1), &x, &E);
  expect_err(nnc_graph_add_node(&G, NNC_OP_ADD, 1, &x, NULL, 1, L(4), NULL, &n, &E), NNC_E_MODEL,
             "m.lua:4: add: expected 2 to 2 inputs, found 1");
  expect_err(nnc_graph_add_node(&G, NNC_OP_LINEAR, 4, (int[]){x, x, x, x}, NULL, 1, L(5), NULL, &n, &E),
             NNC_E_MODEL, "m.lua:5: linear: expected 2 to 3 inputs, found 4");
  expect_err(nnc_graph_add_node(&G, NNC_OP_NONE, 1, &x, NULL, 1, L(6), NULL, &n, &E), NNC_E_INTERNAL,
             "m.lua:6: add_node: unknown op 0");
  char want[64];
  snprintf(want, sizeof want, "m.lua:6: add_node: unknown op %d", (int)NNC_OP_COUNT);
  expect_err(nnc_graph_add_node(&G, NNC_OP_COUNT, 1, &x, NULL, 1, L(6), NULL, &n, &E), NNC_E_INTERNAL, want);
  expect_err(nnc_graph_add_node(&G, NNC_OP_RELU, 1, (int[]){5}, NULL, 1, L(7), NULL, &n, &E), NNC_E_INTERNAL,
             "m.lua:7: relu: input 1 is not a tensor id (5)");
  expect_err(nnc_graph_add_node(&G, NNC_OP_RELU, 1, (int[]){-1}, NULL, 1, L(7), NULL, &n, &E), NNC_E_INTERNAL,
             "m.lua:7: relu: input 1 is not a tensor id (-1)");
  expect_err(nnc_graph_add_node(&G, NNC_OP_RELU, 1, &x, NULL, 0, L(8), NULL, &n, &E), NNC_E_MODEL,
             "m.lua:8: relu: expected 1 to 16 outputs, found 0");
  expect_err(nnc_graph_add_node(&G, NNC_OP_SPLIT, 1, &x, NULL, 17, L(9), NULL, &n, &E), NNC_E_MODEL,
             "m.lua:9: split: expected 1 to 16 outputs, found 17");
  assert_int_equal(n, -7);   /* failures leave the id alone */
  assert_int_equal(G.nnodes, 0);
  assert_int_equal(G.ntensors, 1);
}

static void outputs(void **state) {
  (void)state;
  int x, n, w;
  nnc_graph_add_input(&G, "x", NNC_F32, 1, (nnc_dim[]){K(3)}, L(1), &x, &E);
  nnc_graph_add_param(&G, "w", NNC_F32, 1, (nnc_dim[]){K(3)}, L(1), &w, &E);
  nnc_graph_add_node(&G, NNC_OP_EXP, 1, &x, NULL, 1, L(2), "e", &n, &E);
  int t = G.nodes[n].out[0];
  assert_false(nnc_graph_is_output(&G, t));
  assert_int_equal(nnc_graph_add_output(&G, "y", t, L(3), &E), NNC_OK);
  assert_int_equal(nnc_graph_add_output(&G, "y2", t, L(4), &E), NNC_OK);   /* one tensor, two names */
  assert_int_equal(G.noutputs, 2);
  assert_string_equal(G.outputs[0].name, "y");
  assert_int_equal(G.outputs[1].tensor, t);
  assert_int_equal(G.outputs[1].loc.line, 4);
  assert_true(nnc_graph_is_output(&G, t));
  assert_false(nnc_graph_is_output(&G, x));
  expect_err(nnc_graph_add_output(&G, "y", t, L(5), &E), NNC_E_MODEL,
             "m.lua:5: output \"y\": already declared at m.lua:3");
  expect_err(nnc_graph_add_output(&G, "z", x, L(6), &E), NNC_E_MODEL,
             "m.lua:6: output \"z\": expected a computed value, found input x (outputs must be computed by the model)");
  expect_err(nnc_graph_add_output(&G, "z", w, L(7), &E), NNC_E_MODEL,
             "m.lua:7: output \"z\": expected a computed value, found parameter w (outputs must be computed by the model)");
  expect_err(nnc_graph_add_output(&G, "z", 99, L(8), &E), NNC_E_INTERNAL, "m.lua:8: output z: not a tensor id (99)");
  expect_err(nnc_graph_add_output(&G, "z", -1, L(8), &E), NNC_E_INTERNAL, "m.lua:8: output z: not a tensor id (-1)");
  assert_int_equal(G.noutputs, 2);
}

static void element_counts(void **state) {
  (void)state;
  int b, t, x, s, e;
  nnc_graph_add_symbol(&G, "B", 32, L(1), &b, &E);
  nnc_graph_add_symbol(&G, "T", 1024, L(1), &t, &E);
  nnc_dim bt;
  assert_true(nnc_dim_mul(nnc_dim_sym(b), nnc_dim_sym(t), &bt));
  nnc_dim shape[] = {bt, K(3), K(7)};
  nnc_graph_add_input(&G, "x", NNC_F32, 3, shape, L(2), &x, &E);
  nnc_graph_add_input(&G, "s", NNC_F32, 0, NULL, L(2), &s, &E);
  nnc_graph_add_input(&G, "e", NNC_F32, 2, (nnc_dim[]){nnc_dim_sym(t), K(0)}, L(2), &e, &E);
  assert_int_equal(nnc_tensor_max_elems(&G, &G.tensors[x]), (int64_t)32 * 1024 * 21);
  assert_int_equal(nnc_tensor_max_elems(&G, &G.tensors[s]), 1);
  assert_int_equal(nnc_tensor_max_elems(&G, &G.tensors[e]), 0);
  int64_t vals[2];
  vals[b] = 5;
  vals[t] = 11;
  assert_int_equal(nnc_tensor_elems(&G.tensors[x], vals), 5 * 11 * 21);
  assert_int_equal(nnc_tensor_elems(&G.tensors[s], vals), 1);
  assert_int_equal(nnc_tensor_elems(&G.tensors[e], vals), 0);
}

static void uses(void **state) {
  (void)state;
  int x, y, a, m, d, r;
  nnc_graph_add_input(&G, "x", NNC_F32, 1, (nnc_dim[]){K(3)}, L(1), &x, &E);
  nnc_graph_add_input(&G, "y", NNC_F32, 1, (nnc_dim[]){K(3)}, L(1), &y, &E);
  nnc_graph_add_node(&G, NNC_OP_ADD, 2, (int[]){x, y}, NULL, 1, L(2), "a", &a, &E);
  nnc_graph_add_node(&G, NNC_OP_MUL, 2, (int[]){x, x}, NULL, 1, L(3), "m", &m, &E);   /* x twice */
  nnc_graph_add_node(&G, NNC_OP_EXP, 1, (int[]){y}, NULL, 1, L(4), "d", &d, &E);
  int ta = G.nodes[a].out[0], tm = G.nodes[m].out[0], td = G.nodes[d].out[0];
  nnc_graph_add_node(&G, NNC_OP_ADD, 2, (int[]){tm, td}, NULL, 1, L(5), "r", &r, &E);
  G.nodes[d].dead = true;
  nnc_uses u;
  assert_int_equal(nnc_uses_build(&G, &u, &E), NNC_OK);
  /* x: read by a and m (once, though m reads it twice) */
  assert_int_equal(nnc_uses_count(&u, x), 2);
  assert_int_equal(u.node[u.start[x]], a);
  assert_int_equal(u.node[u.start[x] + 1], m);
  /* y: read by a; d is dead */
  assert_int_equal(nnc_uses_count(&u, y), 1);
  assert_int_equal(u.node[u.start[y]], a);
  assert_int_equal(nnc_uses_count(&u, ta), 0);
  assert_int_equal(nnc_uses_count(&u, tm), 1);
  assert_int_equal(u.node[u.start[tm]], r);
  assert_int_equal(nnc_uses_count(&u, td), 1);   /* r is live, though td's producer is not */
  assert_int_equal(nnc_uses_count(&u, G.nodes[r].out[0]), 0);
  assert_int_equal(u.start[G.ntensors], 5);
  nnc_uses_free(&u);
  assert_null(u.start);
  assert_null(u.node);
  /* a graph with nothing read */
  nnc_graph g;
  nnc_graph_init(&g);
  assert_int_equal(nnc_uses_build(&g, &u, &E), NNC_OK);
  assert_int_equal(u.start[0], 0);
  nnc_uses_free(&u);
  nnc_graph_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(init_is_empty),
    cmocka_unit_test_setup_teardown(intern, setup, teardown),
    cmocka_unit_test_setup_teardown(symbols, setup, teardown),
    cmocka_unit_test_setup_teardown(inputs, setup, teardown),
    cmocka_unit_test_setup_teardown(params_tie_and_mismatch, setup, teardown),
    cmocka_unit_test_setup_teardown(nodes, setup, teardown),
    cmocka_unit_test_setup_teardown(node_errors, setup, teardown),
    cmocka_unit_test_setup_teardown(outputs, setup, teardown),
    cmocka_unit_test_setup_teardown(element_counts, setup, teardown),
    cmocka_unit_test_setup_teardown(uses, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
