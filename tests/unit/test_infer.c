/* tests/unit/test_infer.c — the shape and dtype rules of every op
 * (passes/infer*.c) and the whole-graph check (passes/check.c).
 *
 * Graphs are built with the builder API of ir.h; expected shapes and messages
 * are written out by hand. Symbols: B (max 32) and T (max 1024). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compiler/passes/passes.h"

static nnc_graph G;
static nnc_error E;
static const char *FILE_NAME;
static int SB, ST;   /* symbol ids */

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

static nnc_srcloc L(int line) { return (nnc_srcloc){FILE_NAME, line}; }
static nnc_dim K(int64_t k) { return nnc_dim_const(k); }
static nnc_dim B(void) { return nnc_dim_sym(SB); }
static nnc_dim T(void) { return nnc_dim_sym(ST); }
static nnc_dim MUL(nnc_dim a, nnc_dim b) {
  nnc_dim r;
  assert_true(nnc_dim_mul(a, b, &r));
  return r;
}

#define DIMS(...) (const nnc_dim[]){__VA_ARGS__}
#define NDIMS(...) (int)(sizeof(DIMS(__VA_ARGS__)) / sizeof(nnc_dim))

static int input_r(const char *name, nnc_dtype dt, int rank, const nnc_dim *shape) {
  int id = -1;
  assert_int_equal(nnc_graph_add_input(&G, name, dt, rank, shape, L(1), &id, &E), NNC_OK);
  return id;
}
static int param_r(const char *name, nnc_dtype dt, int rank, const nnc_dim *shape) {
  int id = -1;
  assert_int_equal(nnc_graph_add_param(&G, name, dt, rank, shape, L(1), &id, &E), NNC_OK);
  return id;
}
#define IN(name, dt, ...) input_r(name, dt, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__))
#define PARAM(name, dt, ...) param_r(name, dt, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__))

static int LAST_NODE;

/* Adds a node at m.lua:line and infers it; the status of the inference. */
static nnc_status add(nnc_op op, int nin, const int *ins, const nnc_attrs *a, int nout, int line) {
  memset(&E, 0, sizeof E);
  assert_int_equal(nnc_graph_add_node(&G, op, nin, ins, a, nout, L(line), NULL, &LAST_NODE, &E), NNC_OK);
  return nnc_infer_node(&G, LAST_NODE, &E);
}
#define INS(...) (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)), (const int[]){__VA_ARGS__}

/* Adds a node that must infer; returns its (first) output tensor. */
static int ok(nnc_op op, int nin, const int *ins, const nnc_attrs *a) {
  nnc_status st = add(op, nin, ins, a, 1, 7);
  if (st) fail_msg("unexpected error: %s", E.msg);
  return G.nodes[LAST_NODE].out[0];
}

static void expect_type(int t, nnc_dtype dt, const char *shape) {
  char buf[256];
  const nnc_tensor *x = &G.tensors[t];
  assert_string_equal(nnc_dtype_name(x->dtype), nnc_dtype_name(dt));
  assert_string_equal(nnc_shape_format(&G, x->rank, x->shape, buf, sizeof buf), shape);
}

static void expect_err(nnc_status st, nnc_status code, const char *msg) {
  assert_int_equal(st, code);
  assert_string_equal(E.msg, msg);
}

/* Inferring a node again gives the same result (check re-runs it). */
static void expect_idempotent(int t) {
  char before[256], after[256];
  const nnc_tensor *x = &G.tensors[t];
  nnc_dtype dt = x->dtype;
  nnc_shape_format(&G, x->rank, x->shape, before, sizeof before);
  assert_int_equal(nnc_infer_node(&G, x->producer, &E), NNC_OK);
  nnc_shape_format(&G, x->rank, x->shape, after, sizeof after);
  assert_string_equal(before, after);
  assert_int_equal(x->dtype, dt);
}

/* ------------------------------------------------------------ elementwise */

static void unary_keeps_shape_and_dtype(void **state) {
  (void)state;
  int x = IN("x", NNC_BF16, B(), T(), K(7));
  int s = input_r("s", NNC_F32, 0, NULL);
  for (nnc_op op = NNC_OP_RELU; op <= NNC_OP_POW_S; op++) {
    if (op == NNC_OP_CAST) continue;
    nnc_attrs a = {.scalar = 2.5};
    expect_type(ok(op, INS(x), &a), NNC_BF16, "[B,T,7]");
    expect_type(ok(op, INS(s), &a), NNC_F32, "[]");
  }
  int e = IN("e", NNC_F16, K(0), K(3));
  expect_type(ok(NNC_OP_GELU, INS(e), NULL), NNC_F16, "[0,3]");
}

static void unary_wants_float(void **state) {
  (void)state;
  int ids = IN("ids", NNC_I32, B(), T());
  expect_err(add(NNC_OP_RELU, INS(ids), NULL, 1, 5), NNC_E_SHAPE,
             "m.lua:5: relu: expected a float input, found ids i32");
  expect_err(add(NNC_OP_MUL_S, INS(ids), NULL, 1, 6), NNC_E_SHAPE,
             "m.lua:6: mul_scalar: expected a float input, found ids i32");
}

static void cast_any_to_attr(void **state) {
  (void)state;
  int ids = IN("ids", NNC_I32, B(), K(3));
  expect_type(ok(NNC_OP_CAST, INS(ids), &(nnc_attrs){.to = NNC_F32}), NNC_F32, "[B,3]");
  int x = IN("x", NNC_F32, K(5));
  expect_type(ok(NNC_OP_CAST, INS(x), &(nnc_attrs){.to = NNC_BF16}), NNC_BF16, "[5]");
  expect_type(ok(NNC_OP_CAST, INS(x), &(nnc_attrs){.to = NNC_I32}), NNC_I32, "[5]");
  expect_err(add(NNC_OP_CAST, INS(x), &(nnc_attrs){.to = (nnc_dtype)9}, 1, 3), NNC_E_MODEL,
             "m.lua:3: cast: expected a dtype to cast to, found dtype id 9");
}

static void binary_broadcasts(void **state) {
  (void)state;
  int a = IN("a", NNC_F32, B(), T(), K(7));
  int b = IN("b", NNC_F32, K(7));
  int c = IN("c", NNC_F32, B(), K(1), K(7));
  int d = IN("d", NNC_F32, K(1), T(), K(1));
  int s = input_r("s", NNC_F32, 0, NULL);
  int one = IN("one", NNC_F32, K(1));
  int m = IN("m", NNC_F32, K(3), K(1), K(5));
  int n = IN("n", NNC_F32, K(4), K(1));
  int z = IN("z", NNC_F32, K(0), K(5));
  int z1 = IN("z1", NNC_F32, K(1), K(5));
  expect_type(ok(NNC_OP_ADD, INS(a, b), NULL), NNC_F32, "[B,T,7]");
  expect_type(ok(NNC_OP_SUB, INS(b, a), NULL), NNC_F32, "[B,T,7]");
  expect_type(ok(NNC_OP_MUL, INS(c, d), NULL), NNC_F32, "[B,T,7]");
  expect_type(ok(NNC_OP_DIV, INS(s, a), NULL), NNC_F32, "[B,T,7]");
  expect_type(ok(NNC_OP_DIV, INS(a, s), NULL), NNC_F32, "[B,T,7]");
  expect_type(ok(NNC_OP_ADD, INS(s, s), NULL), NNC_F32, "[]");
  expect_type(ok(NNC_OP_ADD, INS(one, one), NULL), NNC_F32, "[1]");
  expect_type(ok(NNC_OP_ADD, INS(one, s), NULL), NNC_F32, "[1]");
  expect_type(ok(NNC_OP_MUL, INS(m, n), NULL), NNC_F32, "[3,4,5]");
  expect_type(ok(NNC_OP_MUL, INS(n, m), NULL), NNC_F32, "[3,4,5]");
  expect_type(ok(NNC_OP_ADD, INS(z, z1), NULL), NNC_F32, "[0,5]");
  expect_type(ok(NNC_OP_ADD, INS(d, one), NULL), NNC_F32, "[1,T,1]");
  int ids = IN("ids", NNC_I32, K(3));
  expect_type(ok(NNC_OP_ADD, INS(ids, ids), NULL), NNC_I32, "[3]");
}

static void binary_mismatch_messages(void **state) {
  (void)state;
  int a = IN("a", NNC_F32, B(), K(10));
  int b = IN("b", NNC_F32, B(), K(12));
  expect_err(add(NNC_OP_ADD, INS(a, b), NULL, 1, 4), NNC_E_SHAPE,
             "m.lua:4: add: shapes [B,10] and [B,12] do not broadcast (dim 2: 10 vs 12)");
  int c = IN("c", NNC_F32, K(2), K(3), K(5));
  int d = IN("d", NNC_F32, K(4), K(5));
  expect_err(add(NNC_OP_MUL, INS(c, d), NULL, 1, 8), NNC_E_SHAPE,
             "m.lua:8: mul: shapes [2,3,5] and [4,5] do not broadcast (dim 2: 3 vs 4)");
  expect_err(add(NNC_OP_SUB, INS(d, c), NULL, 1, 9), NNC_E_SHAPE,
             "m.lua:9: sub: shapes [4,5] and [2,3,5] do not broadcast (dim 2: 4 vs 3)");
  int x = IN("x", NNC_F32, B());
  int y = IN("y", NNC_F32, T());
  expect_err(add(NNC_OP_DIV, INS(x, y), NULL, 1, 10), NNC_E_SHAPE,
             "m.lua:10: div: shapes [B] and [T] do not broadcast (dim 1: B vs T)");
  int z = IN("z", NNC_F32, K(0));
  int w = IN("w", NNC_F32, K(3));
  expect_err(add(NNC_OP_ADD, INS(z, w), NULL, 1, 11), NNC_E_SHAPE,
             "m.lua:11: add: shapes [0] and [3] do not broadcast (dim 1: 0 vs 3)");
  int i = IN("i", NNC_I32, B(), K(10));
  expect_err(add(NNC_OP_ADD, INS(a, i), NULL, 1, 12), NNC_E_SHAPE,
             "m.lua:12: add: dtypes differ: a is f32, i is i32");
}

static void masks(void **state) {
  (void)state;
  int s = IN("s", NNC_F32, B(), K(3), T(), T());
  int m = IN("mask", NNC_I32, B(), T());
  expect_type(ok(NNC_OP_CAUSAL_MASK, INS(s), NULL), NNC_F32, "[B,3,T,T]");
  expect_type(ok(NNC_OP_PADDING_MASK, INS(s, m), NULL), NNC_F32, "[B,3,T,T]");
  int s2 = IN("s2", NNC_F16, K(5), K(7));
  int m2 = IN("m2", NNC_F32, K(5), K(7));
  expect_type(ok(NNC_OP_PADDING_MASK, INS(s2, m2), NULL), NNC_F16, "[5,7]");
  int v = IN("v", NNC_F32, K(7));
  expect_err(add(NNC_OP_CAUSAL_MASK, INS(v), NULL, 1, 3), NNC_E_SHAPE,
             "m.lua:3: causal_mask: expected scores of rank >= 2 [..., T, S], found v f32[7]");
  int is = IN("is", NNC_I32, K(3), K(3));
  expect_err(add(NNC_OP_CAUSAL_MASK, INS(is), NULL, 1, 4), NNC_E_SHAPE,
             "m.lua:4: causal_mask: expected a float scores tensor, found is i32");
  int bad = IN("bad", NNC_I32, B(), K(5));
  expect_err(add(NNC_OP_PADDING_MASK, INS(s, bad), NULL, 1, 5), NNC_E_SHAPE,
             "m.lua:5: padding_mask: expected a mask [B,T] for scores s [B,3,T,T], found bad [B,5]");
  int r3 = IN("r3", NNC_I32, B(), K(1), T());
  expect_err(add(NNC_OP_PADDING_MASK, INS(s, r3), NULL, 1, 6), NNC_E_SHAPE,
             "m.lua:6: padding_mask: expected a mask [B,T] for scores s [B,3,T,T], found r3 [B,1,T]");
  int tb = IN("tb", NNC_I32, T(), T());
  expect_err(add(NNC_OP_PADDING_MASK, INS(s, tb), NULL, 1, 7), NNC_E_SHAPE,
             "m.lua:7: padding_mask: expected a mask [B,T] for scores s [B,3,T,T], found tb [T,T]");
}

/* ---------------------------------------------------------------- matmul */

static void linear_shapes(void **state) {
  (void)state;
  int x = IN("x", NNC_F32, B(), T(), K(13));
  int w = PARAM("fc.weight", NNC_F32, K(7), K(13));
  int b = PARAM("fc.bias", NNC_F32, K(7));
  int wt = PARAM("c.weight", NNC_F32, K(13), K(7));
  expect_type(ok(NNC_OP_LINEAR, INS(x, w), NULL), NNC_F32, "[B,T,7]");
  expect_type(ok(NNC_OP_LINEAR, INS(x, w, b), NULL), NNC_F32, "[B,T,7]");
  expect_type(ok(NNC_OP_LINEAR, INS(x, wt, b), &(nnc_attrs){.weight_in_out = true}), NNC_F32, "[B,T,7]");
  int v = IN("v", NNC_F32, K(13));
  expect_type(ok(NNC_OP_LINEAR, INS(v, w), NULL), NNC_F32, "[7]");
  int xs = IN("xs", NNC_F32, B(), T());
  int ws = PARAM("s.weight", NNC_F32, K(3), K(1024));
  /* a symbolic feature count never equals a constant one */
  expect_err(add(NNC_OP_LINEAR, INS(xs, ws), NULL, 1, 2), NNC_E_SHAPE,
             "m.lua:2: linear: input has T features, weight s.weight expects 1024");
}

static void linear_errors(void **state) {
  (void)state;
  int x = IN("x", NNC_F32, B(), T(), K(768));
  int w = PARAM("h.3.mlp.c_fc.weight", NNC_F32, K(768), K(3072));
  expect_err(add(NNC_OP_LINEAR, INS(x, w), NULL, 1, 31), NNC_E_SHAPE,
             "m.lua:31: linear: input has 768 features, weight h.3.mlp.c_fc.weight expects 3072");
  /* the same weight read as [in, out] fits */
  expect_type(ok(NNC_OP_LINEAR, INS(x, w), &(nnc_attrs){.weight_in_out = true}), NNC_F32, "[B,T,3072]");
  int b = PARAM("h.3.mlp.c_fc.bias", NNC_F32, K(768));
  expect_err(add(NNC_OP_LINEAR, INS(x, w, b), &(nnc_attrs){.weight_in_out = true}, 1, 32), NNC_E_SHAPE,
             "m.lua:32: linear: expected a bias [3072] for weight h.3.mlp.c_fc.weight f32[768,3072], "
             "found h.3.mlp.c_fc.bias f32[768]");
  int w1 = PARAM("w1", NNC_F32, K(768));
  expect_err(add(NNC_OP_LINEAR, INS(x, w1), NULL, 1, 33), NNC_E_SHAPE,
             "m.lua:33: linear: expected a weight of rank 2, found w1 f32[768]");
  int wb = PARAM("wb", NNC_BF16, K(5), K(768));
  expect_err(add(NNC_OP_LINEAR, INS(x, wb), NULL, 1, 34), NNC_E_SHAPE,
             "m.lua:34: linear: dtypes differ: x is f32, wb is bf16");
  int ids = IN("ids", NNC_I32, K(768));
  expect_err(add(NNC_OP_LINEAR, INS(ids, w), NULL, 1, 35), NNC_E_SHAPE,
             "m.lua:35: linear: expected a float input, found ids i32");
  int s = input_r("s", NNC_F32, 0, NULL);
  expect_err(add(NNC_OP_LINEAR, INS(s, w), NULL, 1, 36), NNC_E_SHAPE,
             "m.lua:36: linear: expected an input of rank >= 1, found s f32[]");
  int w5 = PARAM("w5", NNC_F32, K(5), K(768));
  int bi = PARAM("bi", NNC_F16, K(5));
  expect_err(add(NNC_OP_LINEAR, INS(x, w5, bi), NULL, 1, 37), NNC_E_SHAPE,
             "m.lua:37: linear: dtypes differ: x is f32, bi is f16");
}

static void matmul_shapes(void **state) {
  (void)state;
  int q = IN("q", NNC_F32, B(), K(3), T(), K(5));
  int k = IN("k", NNC_F32, B(), K(3), K(5), T());
  expect_type(ok(NNC_OP_MATMUL, INS(q, k), NULL), NNC_F32, "[B,3,T,T]");
  int a = IN("a", NNC_F32, K(3), K(1), K(7), K(5));
  int b = IN("b", NNC_F32, K(4), K(5), K(9));
  expect_type(ok(NNC_OP_MATMUL, INS(a, b), NULL), NNC_F32, "[3,4,7,9]");
  int m2 = IN("m2", NNC_F32, K(7), K(5));
  int n2 = IN("n2", NNC_F32, K(5), K(11));
  expect_type(ok(NNC_OP_MATMUL, INS(m2, n2), NULL), NNC_F32, "[7,11]");
  expect_type(ok(NNC_OP_MATMUL, INS(a, n2), NULL), NNC_F32, "[3,1,7,11]");
  expect_type(ok(NNC_OP_MATMUL, INS(m2, b), NULL), NNC_F32, "[4,7,9]");
}

static void matmul_errors(void **state) {
  (void)state;
  int q = IN("q", NNC_F32, B(), T(), K(64));
  int k = IN("k", NNC_F32, B(), K(32), T());
  expect_err(add(NNC_OP_MATMUL, INS(q, k), NULL, 1, 3), NNC_E_SHAPE,
             "m.lua:3: matmul: inner dims differ: q is [B,T,64], k is [B,32,T] (64 vs 32)");
  int a = IN("a", NNC_F32, K(3), K(7), K(5));
  int b = IN("b", NNC_F32, K(4), K(5), K(9));
  expect_err(add(NNC_OP_MATMUL, INS(a, b), NULL, 1, 4), NNC_E_SHAPE,
             "m.lua:4: matmul: batch dims of a [3,7,5] and b [4,5,9] do not broadcast (dim 1: 3 vs 4)");
  int v = IN("v", NNC_F32, K(5));
  expect_err(add(NNC_OP_MATMUL, INS(a, v), NULL, 1, 5), NNC_E_SHAPE,
             "m.lua:5: matmul: expected inputs of rank >= 2, found v f32[5]");
  int h = IN("h", NNC_F16, K(5), K(9));
  expect_err(add(NNC_OP_MATMUL, INS(a, h), NULL, 1, 6), NNC_E_SHAPE,
             "m.lua:6: matmul: dtypes differ: a is f32, h is f16");
  int i = IN("i", NNC_I32, K(7), K(5));
  expect_err(add(NNC_OP_MATMUL, INS(i, i), NULL, 1, 7), NNC_E_SHAPE,
             "m.lua:7: matmul: expected a float input, found i i32");
}

/* ------------------------------------------------------- rows, reductions */

static void softmax_axis(void **state) {
  (void)state;
  int x = IN("x", NNC_BF16, B(), T(), K(7));
  expect_type(ok(NNC_OP_SOFTMAX, INS(x), &(nnc_attrs){.axis = 2}), NNC_BF16, "[B,T,7]");
  expect_type(ok(NNC_OP_SOFTMAX, INS(x), &(nnc_attrs){.axis = 0}), NNC_BF16, "[B,T,7]");
  expect_err(add(NNC_OP_SOFTMAX, INS(x), &(nnc_attrs){.axis = 3}, 1, 4), NNC_E_SHAPE,
             "m.lua:4: softmax: expected an axis in 1..3 for x bf16[B,T,7], found 4");
  expect_err(add(NNC_OP_SOFTMAX, INS(x), &(nnc_attrs){.axis = -1}, 1, 5), NNC_E_SHAPE,
             "m.lua:5: softmax: expected an axis in 1..3 for x bf16[B,T,7], found 0");
  int s = input_r("s", NNC_F32, 0, NULL);
  expect_err(add(NNC_OP_SOFTMAX, INS(s), NULL, 1, 6), NNC_E_SHAPE,
             "m.lua:6: softmax: expected a tensor with an axis 1, found s f32[] of rank 0");
  int i = IN("i", NNC_I32, K(3));
  expect_err(add(NNC_OP_SOFTMAX, INS(i), NULL, 1, 7), NNC_E_SHAPE,
             "m.lua:7: softmax: expected a float input, found i i32");
}

static void norms(void **state) {
  (void)state;
  int x = IN("x", NNC_F32, B(), T(), K(13));
  int g = PARAM("ln.weight", NNC_F32, K(13));
  int b = PARAM("ln.bias", NNC_F32, K(13));
  int g12 = PARAM("bad.weight", NNC_F32, K(12));
  nnc_attrs eps = {.eps = 1e-5};
  expect_type(ok(NNC_OP_LAYERNORM, INS(x, g, b), &eps), NNC_F32, "[B,T,13]");
  expect_type(ok(NNC_OP_RMSNORM, INS(x, g), &eps), NNC_F32, "[B,T,13]");
  expect_err(add(NNC_OP_LAYERNORM, INS(x, g12, b), &eps, 1, 3), NNC_E_SHAPE,
             "m.lua:3: layernorm: expected gamma as a float [13] for x f32[B,T,13], found bad.weight f32[12]");
  expect_err(add(NNC_OP_LAYERNORM, INS(x, g, g12), &eps, 1, 4), NNC_E_SHAPE,
             "m.lua:4: layernorm: expected beta as a float [13] for x f32[B,T,13], found bad.weight f32[12]");
  expect_err(add(NNC_OP_RMSNORM, INS(x, g12), &eps, 1, 5), NNC_E_SHAPE,
             "m.lua:5: rmsnorm: expected gamma as a float [13] for x f32[B,T,13], found bad.weight f32[12]");
  expect_err(add(NNC_OP_LAYERNORM, INS(x, g, b), NULL, 1, 6), NNC_E_MODEL,
             "m.lua:6: layernorm: expected eps > 0, found 0");
  expect_err(add(NNC_OP_RMSNORM, INS(x, g), &(nnc_attrs){.eps = -1e-6}, 1, 7), NNC_E_MODEL,
             "m.lua:7: rmsnorm: expected eps > 0, found -1e-06");
  int gi = PARAM("gi", NNC_I32, K(13));
  expect_err(add(NNC_OP_RMSNORM, INS(x, gi), &eps, 1, 8), NNC_E_SHAPE,
             "m.lua:8: rmsnorm: expected gamma as a float [13] for x f32[B,T,13], found gi i32[13]");
  int s = input_r("s", NNC_F32, 0, NULL);
  expect_err(add(NNC_OP_RMSNORM, INS(s, g), &eps, 1, 9), NNC_E_SHAPE,
             "m.lua:9: rmsnorm: expected an input of rank >= 1, found s f32[]");
}

static void reductions(void **state) {
  (void)state;
  int x = IN("x", NNC_F32, B(), T(), K(7));
  expect_type(ok(NNC_OP_SUM, INS(x), &(nnc_attrs){.axis = 1}), NNC_F32, "[B,7]");
  expect_type(ok(NNC_OP_SUM, INS(x), &(nnc_attrs){.axis = 1, .keepdim = true}), NNC_F32, "[B,1,7]");
  expect_type(ok(NNC_OP_MEAN, INS(x), &(nnc_attrs){.axis = 2}), NNC_F32, "[B,T]");
  expect_type(ok(NNC_OP_MAX, INS(x), &(nnc_attrs){.axis = 0, .keepdim = true}), NNC_F32, "[1,T,7]");
  int v = IN("v", NNC_I32, K(9));
  expect_type(ok(NNC_OP_MAX, INS(v), NULL), NNC_I32, "[]");
  expect_err(add(NNC_OP_MEAN, INS(x), &(nnc_attrs){.axis = 5}, 1, 4), NNC_E_SHAPE,
             "m.lua:4: mean: expected an axis in 1..3 for x f32[B,T,7], found 6");
}

/* ---------------------------------------------------------- data movement */

/* A reshape node whose output the front-end has set to `shape`. */
static nnc_status reshape(int x, int rank, const nnc_dim *shape, int line, int *out) {
  memset(&E, 0, sizeof E);
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_RESHAPE, 1, &x, NULL, 1, L(line), NULL, &LAST_NODE, &E),
                   NNC_OK);
  *out = G.nodes[LAST_NODE].out[0];
  G.tensors[*out].rank = rank;
  if (rank > 0) memcpy(G.tensors[*out].shape, shape, (size_t)rank * sizeof *shape);
  return nnc_infer_node(&G, LAST_NODE, &E);
}
#define RESHAPE(x, line, out, ...) reshape(x, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__), line, out)

static void reshape_infers_minus_one(void **state) {
  (void)state;
  int x = IN("x", NNC_BF16, B(), T(), K(12));
  int o;
  assert_int_equal(RESHAPE(x, 2, &o, B(), T(), K(3), K(4)), NNC_OK);
  expect_type(o, NNC_BF16, "[B,T,3,4]");
  assert_int_equal(RESHAPE(x, 2, &o, K(-1), K(12)), NNC_OK);
  expect_type(o, NNC_BF16, "[B*T,12]");
  expect_idempotent(o);
  assert_int_equal(RESHAPE(x, 2, &o, B(), K(-1)), NNC_OK);
  expect_type(o, NNC_BF16, "[B,12*T]");
  assert_int_equal(RESHAPE(x, 2, &o, K(-1)), NNC_OK);
  expect_type(o, NNC_BF16, "[12*B*T]");
  expect_idempotent(o);
  assert_int_equal(RESHAPE(x, 2, &o, K(4), T(), K(-1)), NNC_OK);
  expect_type(o, NNC_BF16, "[4,T,3*B]");
  int y;
  assert_int_equal(RESHAPE(o, 2, &y, MUL(B(), T()), K(12)), NNC_OK);
  expect_type(y, NNC_BF16, "[B*T,12]");
  int z = IN("z", NNC_F32, K(0), K(5));
  assert_int_equal(RESHAPE(z, 2, &o, K(-1), B()), NNC_OK);
  expect_type(o, NNC_F32, "[0,B]");
  int s = input_r("s", NNC_F32, 0, NULL);
  assert_int_equal(RESHAPE(s, 2, &o, K(1), K(-1)), NNC_OK);
  expect_type(o, NNC_F32, "[1,1]");
  int v = IN("v", NNC_F32, K(1));
  assert_int_equal(reshape(v, 0, NULL, 2, &o), NNC_OK);
  expect_type(o, NNC_F32, "[]");
}

static void reshape_errors(void **state) {
  (void)state;
  int x = IN("x", NNC_F32, B(), T(), K(12));
  int o;
  expect_err(RESHAPE(x, 3, &o, B(), T(), K(5)), NNC_E_SHAPE,
             "m.lua:3: reshape: x [B,T,12] has 12*B*T elements, [B,T,5] has 5*B*T");
  expect_err(RESHAPE(x, 4, &o, K(-1), K(-1)), NNC_E_SHAPE,
             "m.lua:4: reshape: expected dims >= 0 and at most one -1, found [-1,-1]");
  expect_err(RESHAPE(x, 5, &o, K(-2), K(12)), NNC_E_SHAPE,
             "m.lua:5: reshape: expected dims >= 0 and at most one -1, found [-2,12]");
  expect_err(RESHAPE(x, 6, &o, K(-1), K(5)), NNC_E_SHAPE,
             "m.lua:6: reshape: cannot infer the -1 in [-1,5] from x f32[B,T,12]: 12*B*T elements are not a multiple of 5");
  int y = IN("y", NNC_F32, B(), K(12));
  expect_err(RESHAPE(y, 7, &o, T(), K(-1)), NNC_E_SHAPE,
             "m.lua:7: reshape: cannot infer the -1 in [T,-1] from y f32[B,12]: 12*B elements are not a multiple of T");
  expect_err(RESHAPE(y, 8, &o, T(), K(12)), NNC_E_SHAPE,
             "m.lua:8: reshape: y [B,12] has 12*B elements, [T,12] has 12*T");
}

static void transpose_perm(void **state) {
  (void)state;
  int x = IN("x", NNC_F32, B(), T(), K(7));
  expect_type(ok(NNC_OP_TRANSPOSE, INS(x), &(nnc_attrs){.perm = {0, 2, 1}}), NNC_F32, "[B,7,T]");
  expect_type(ok(NNC_OP_TRANSPOSE, INS(x), &(nnc_attrs){.perm = {2, 0, 1}}), NNC_F32, "[7,B,T]");
  int y = IN("y", NNC_I32, K(2), K(3), K(5), K(7));
  expect_type(ok(NNC_OP_TRANSPOSE, INS(y), &(nnc_attrs){.perm = {1, 0, 3, 2}}), NNC_I32, "[3,2,7,5]");
  int s = input_r("s", NNC_F32, 0, NULL);
  expect_type(ok(NNC_OP_TRANSPOSE, INS(s), NULL), NNC_F32, "[]");
  expect_err(add(NNC_OP_TRANSPOSE, INS(x), &(nnc_attrs){.perm = {0, 0, 2}}, 1, 3), NNC_E_SHAPE,
             "m.lua:3: transpose: expected a permutation of 1..3 for x f32[B,T,7], found {1,1,3}");
  expect_err(add(NNC_OP_TRANSPOSE, INS(x), &(nnc_attrs){.perm = {0, 1, 3}}, 1, 4), NNC_E_SHAPE,
             "m.lua:4: transpose: expected a permutation of 1..3 for x f32[B,T,7], found {1,2,4}");
  expect_err(add(NNC_OP_TRANSPOSE, INS(x), &(nnc_attrs){.perm = {-1, 1, 2}}, 1, 5), NNC_E_SHAPE,
             "m.lua:5: transpose: expected a permutation of 1..3 for x f32[B,T,7], found {0,2,3}");
}

static void slice_bounds(void **state) {
  (void)state;
  int wpe = PARAM("wpe.weight", NNC_F32, K(1024), K(13));
  nnc_attrs a = {.axis = 0, .start = K(0), .stop = T()};
  expect_type(ok(NNC_OP_SLICE, INS(wpe), &a), NNC_F32, "[T,13]");
  expect_idempotent(G.nodes[LAST_NODE].out[0]);
  expect_type(ok(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 1, .start = K(5), .stop = K(9)}), NNC_F32,
              "[1024,4]");
  expect_type(ok(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 1, .start = K(0), .stop = K(13)}), NNC_F32,
              "[1024,13]");
  int x = IN("x", NNC_F32, B(), T(), K(7));
  expect_type(ok(NNC_OP_SLICE, INS(x), &(nnc_attrs){.axis = 1, .start = K(0), .stop = T()}), NNC_F32,
              "[B,T,7]");
  expect_type(ok(NNC_OP_SLICE, INS(x), &(nnc_attrs){.axis = 0, .start = K(0), .stop = K(32)}), NNC_F32,
              "[32,T,7]");
  expect_err(add(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 1, .start = K(0), .stop = K(14)}, 1, 3),
             NNC_E_SHAPE,
             "m.lua:3: slice: expected a stop of at most 13 (axis 2 of wpe.weight f32[1024,13]), found 14");
  expect_err(add(NNC_OP_SLICE, INS(x), &(nnc_attrs){.axis = 0, .start = K(0), .stop = K(33)}, 1, 3),
             NNC_E_SHAPE, "m.lua:3: slice: expected a stop of at most B (axis 1 of x f32[B,T,7]), found 33");
  int small = PARAM("small", NNC_F32, K(100), K(3));
  expect_err(add(NNC_OP_SLICE, INS(small), &(nnc_attrs){.axis = 0, .start = K(0), .stop = T()}, 1, 4),
             NNC_E_SHAPE,
             "m.lua:4: slice: expected a stop of at most 100 (axis 1 of small f32[100,3]), found T (up to 1024)");
  expect_err(add(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 0, .start = K(3), .stop = T()}, 1, 5),
             NNC_E_SHAPE, "m.lua:5: slice: expected a start of 0 or constant bounds, found start 3 and stop T");
  expect_err(add(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 1, .start = K(5), .stop = K(5)}, 1, 6),
             NNC_E_SHAPE, "m.lua:6: slice: expected start < stop, found start 5 and stop 5");
  expect_err(add(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 1, .start = K(-1), .stop = K(5)}, 1, 7),
             NNC_E_SHAPE, "m.lua:7: slice: expected a start >= 0, found -1");
  expect_err(add(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 1, .start = K(0), .stop = K(0)}, 1, 8),
             NNC_E_SHAPE, "m.lua:8: slice: expected a stop >= 1, found 0");
  expect_err(add(NNC_OP_SLICE, INS(wpe), &(nnc_attrs){.axis = 2, .start = K(0), .stop = K(1)}, 1, 9),
             NNC_E_SHAPE, "m.lua:9: slice: expected an axis in 1..2 for wpe.weight f32[1024,13], found 3");
}

static void concat_sizes(void **state) {
  (void)state;
  int a = IN("a", NNC_F32, B(), K(3), K(5));
  int b = IN("b", NNC_F32, B(), K(4), K(5));
  expect_type(ok(NNC_OP_CONCAT, INS(a, b, a), &(nnc_attrs){.axis = 1}), NNC_F32, "[B,10,5]");
  expect_type(ok(NNC_OP_CONCAT, INS(a), &(nnc_attrs){.axis = 1}), NNC_F32, "[B,3,5]");
  expect_type(ok(NNC_OP_CONCAT, INS(a, a), &(nnc_attrs){.axis = 0}), NNC_F32, "[2*B,3,5]");
  int t = IN("t", NNC_F32, T(), K(5));
  int c = IN("c", NNC_F32, K(3), K(5));
  expect_type(ok(NNC_OP_CONCAT, INS(t, t, t), &(nnc_attrs){.axis = 0}), NNC_F32, "[3*T,5]");
  expect_type(ok(NNC_OP_CONCAT, INS(t, t), &(nnc_attrs){.axis = 1}), NNC_F32, "[T,10]");
  expect_err(add(NNC_OP_CONCAT, INS(t, c), &(nnc_attrs){.axis = 0}, 1, 3), NNC_E_SHAPE,
             "m.lua:3: concat: expected sizes along axis 1 that are all constants or all the same dim, found T+3");
  expect_err(add(NNC_OP_CONCAT, INS(a, b), &(nnc_attrs){.axis = 2}, 1, 4), NNC_E_SHAPE,
             "m.lua:4: concat: dim 2 differs: a is [B,3,5], b is [B,4,5]");
  expect_err(add(NNC_OP_CONCAT, INS(a, c), &(nnc_attrs){.axis = 1}, 1, 5), NNC_E_SHAPE,
             "m.lua:5: concat: ranks differ: a is [B,3,5], c is [3,5]");
  int h = IN("h", NNC_F16, B(), K(3), K(5));
  expect_err(add(NNC_OP_CONCAT, INS(a, h), &(nnc_attrs){.axis = 1}, 1, 6), NNC_E_SHAPE,
             "m.lua:6: concat: dtypes differ: a is f32, h is f16");
  expect_err(add(NNC_OP_CONCAT, INS(a, b), &(nnc_attrs){.axis = 3}, 1, 7), NNC_E_SHAPE,
             "m.lua:7: concat: expected an axis in 1..3 for a f32[B,3,5], found 4");
}

/* A split node whose outputs the front-end has shaped. */
static nnc_status split(int x, int axis, int n, const nnc_dim (*shapes)[3], int rank, int line) {
  memset(&E, 0, sizeof E);
  nnc_attrs a = {.axis = axis};
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_SPLIT, 1, &x, &a, n, L(line), "qkv", &LAST_NODE, &E), NNC_OK);
  for (int i = 0; i < n; i++) {
    nnc_tensor *o = &G.tensors[G.nodes[LAST_NODE].out[i]];
    o->rank = rank;
    memcpy(o->shape, shapes[i], (size_t)rank * sizeof(nnc_dim));
  }
  return nnc_infer_node(&G, LAST_NODE, &E);
}

static void split_sizes(void **state) {
  (void)state;
  int x = IN("x", NNC_BF16, B(), K(12), K(5));
  assert_int_equal(split(x, 1, 2, (const nnc_dim[][3]){{B(), K(5), K(5)}, {B(), K(7), K(5)}}, 3, 2), NNC_OK);
  expect_type(G.nodes[LAST_NODE].out[0], NNC_BF16, "[B,5,5]");
  expect_type(G.nodes[LAST_NODE].out[1], NNC_BF16, "[B,7,5]");
  assert_string_equal(G.tensors[G.nodes[LAST_NODE].out[1]].name, "qkv#2");
  expect_idempotent(G.nodes[LAST_NODE].out[1]);
  int y = IN("y", NNC_F32, B(), MUL(K(3), T()));
  assert_int_equal(split(y, 1, 3, (const nnc_dim[][3]){{B(), T()}, {B(), T()}, {B(), T()}}, 2, 3), NNC_OK);
  expect_type(G.nodes[LAST_NODE].out[2], NNC_F32, "[B,T]");
  expect_err(split(x, 1, 2, (const nnc_dim[][3]){{B(), K(5), K(5)}, {B(), K(6), K(5)}}, 3, 4), NNC_E_SHAPE,
             "m.lua:4: split: expected sizes that add up to 12 (axis 2 of x bf16[B,12,5]), found 5+6 = 11");
  expect_err(split(y, 1, 2, (const nnc_dim[][3]){{B(), T()}, {B(), T()}}, 2, 5), NNC_E_SHAPE,
             "m.lua:5: split: expected sizes that add up to 3*T (axis 2 of y f32[B,3*T]), found T+T = 2*T");
  expect_err(split(y, 1, 2, (const nnc_dim[][3]){{B(), T()}, {B(), K(5)}}, 2, 6), NNC_E_SHAPE,
             "m.lua:6: split: expected sizes along axis 2 that are all constants or all the same dim, found T+5");
  expect_err(split(x, 1, 2, (const nnc_dim[][3]){{B(), K(5), K(5)}, {B(), K(7), K(4)}}, 3, 7), NNC_E_SHAPE,
             "m.lua:7: split: expected output 2 shaped like x bf16[B,12,5] except along axis 2, found [B,7,4]");
  expect_err(split(x, 1, 2, (const nnc_dim[][3]){{B(), K(5)}, {B(), K(7)}}, 2, 8), NNC_E_SHAPE,
             "m.lua:8: split: expected output 1 shaped like x bf16[B,12,5] except along axis 2, found [B,5]");
  expect_err(split(x, 1, 2, (const nnc_dim[][3]){{B(), K(13), K(5)}, {B(), K(-1), K(5)}}, 3, 9), NNC_E_SHAPE,
             "m.lua:9: split: expected output 2 shaped like x bf16[B,12,5] except along axis 2, found [B,-1,5]");
  expect_err(split(x, 3, 1, (const nnc_dim[][3]){{B(), K(12), K(5)}}, 3, 10), NNC_E_SHAPE,
             "m.lua:10: split: expected an axis in 1..3 for x bf16[B,12,5], found 4");
}

/* ---------------------------------------------------------- gather, loss */

static void embedding_lookup(void **state) {
  (void)state;
  int wte = PARAM("wte.weight", NNC_BF16, K(50), K(13));
  int ids = IN("ids", NNC_I32, B(), T());
  expect_type(ok(NNC_OP_EMBEDDING, INS(wte, ids), NULL), NNC_BF16, "[B,T,13]");
  int one = input_r("one", NNC_I32, 0, NULL);
  expect_type(ok(NNC_OP_EMBEDDING, INS(wte, one), NULL), NNC_BF16, "[13]");
  int fid = IN("fid", NNC_F32, B());
  expect_err(add(NNC_OP_EMBEDDING, INS(wte, fid), NULL, 1, 3), NNC_E_SHAPE,
             "m.lua:3: embedding: expected i32 ids, found fid f32");
  int t1 = PARAM("t1", NNC_F32, K(50));
  expect_err(add(NNC_OP_EMBEDDING, INS(t1, ids), NULL, 1, 4), NNC_E_SHAPE,
             "m.lua:4: embedding: expected a table of rank 2 [rows, cols], found t1 f32[50]");
  int ti = PARAM("ti", NNC_I32, K(50), K(3));
  expect_err(add(NNC_OP_EMBEDDING, INS(ti, ids), NULL, 1, 5), NNC_E_SHAPE,
             "m.lua:5: embedding: expected a float table, found ti i32");
  int i6 = IN("i6", NNC_I32, K(1), K(2), K(3), K(1), K(2), K(3));
  expect_err(add(NNC_OP_EMBEDDING, INS(wte, i6), NULL, 1, 6), NNC_E_SHAPE,
             "m.lua:6: embedding: expected ids of rank < 6 (the output adds a dim), found i6 i32[1,2,3,1,2,3]");
}

static void cross_entropy_loss(void **state) {
  (void)state;
  int logits = IN("logits", NNC_BF16, B(), T(), K(50));
  int tg = IN("targets", NNC_I32, B(), T());
  expect_type(ok(NNC_OP_CROSS_ENTROPY, INS(logits, tg), NULL), NNC_F32, "[]");
  int l1 = IN("l1", NNC_F32, K(7));
  int t0 = input_r("t0", NNC_I32, 0, NULL);
  expect_type(ok(NNC_OP_CROSS_ENTROPY, INS(l1, t0), NULL), NNC_F32, "[]");
  int tb = IN("tb", NNC_I32, B());
  expect_err(add(NNC_OP_CROSS_ENTROPY, INS(logits, tb), NULL, 1, 3), NNC_E_SHAPE,
             "m.lua:3: cross_entropy: expected targets [B,T] for logits logits bf16[B,T,50], found tb i32[B]");
  int tt = IN("tt", NNC_I32, T(), B());
  expect_err(add(NNC_OP_CROSS_ENTROPY, INS(logits, tt), NULL, 1, 4), NNC_E_SHAPE,
             "m.lua:4: cross_entropy: expected targets [B,T] for logits logits bf16[B,T,50], found tt i32[T,B]");
  int tf = IN("tf", NNC_F32, B(), T());
  expect_err(add(NNC_OP_CROSS_ENTROPY, INS(logits, tf), NULL, 1, 5), NNC_E_SHAPE,
             "m.lua:5: cross_entropy: expected i32 targets, found tf f32");
  int s = input_r("s", NNC_F32, 0, NULL);
  expect_err(add(NNC_OP_CROSS_ENTROPY, INS(s, t0), NULL, 1, 6), NNC_E_SHAPE,
             "m.lua:6: cross_entropy: expected logits of rank >= 1, found s f32[]");
  expect_err(add(NNC_OP_CROSS_ENTROPY, INS(tg, tg), NULL, 1, 7), NNC_E_SHAPE,
             "m.lua:7: cross_entropy: expected a float logits tensor, found targets i32");
}

/* ------------------------------------------------------------ node checks */

static void node_checks(void **state) {
  (void)state;
  int x = IN("x", NNC_F32, K(3));
  expect_err(nnc_infer_node(&G, 0, &E), NNC_E_INTERNAL, "infer: node 0 is not a node id (the graph has 0)");
  expect_err(add(NNC_OP_RELU, INS(x), NULL, 2, 4), NNC_E_MODEL, "m.lua:4: relu: expected 1 output, found 2");
  /* a node edited after it was added is checked again */
  expect_type(ok(NNC_OP_RELU, INS(x), NULL), NNC_F32, "[3]");
  G.nodes[LAST_NODE].nin = 2;
  G.nodes[LAST_NODE].in[1] = x;
  expect_err(nnc_infer_node(&G, LAST_NODE, &E), NNC_E_MODEL, "m.lua:7: relu: expected 1 input, found 2");
  G.nodes[LAST_NODE].nin = 1;
  G.nodes[LAST_NODE].in[0] = 99;
  expect_err(nnc_infer_node(&G, LAST_NODE, &E), NNC_E_INTERNAL,
             "m.lua:7: relu: input 1 is not a tensor id (99)");
  G.nodes[LAST_NODE].in[0] = x;
  G.nodes[LAST_NODE].op = NNC_OP_NONE;
  expect_err(nnc_infer_node(&G, LAST_NODE, &E), NNC_E_INTERNAL, "m.lua:7: infer: node 1 has no op (0)");
  G.nodes[LAST_NODE].op = NNC_OP_RELU;
  /* the error reads no loc when the node has none */
  int n;
  assert_int_equal(nnc_graph_add_node(&G, NNC_OP_SOFTMAX, 1, &x, &(nnc_attrs){.axis = 1}, 1, NNC_NOLOC, NULL,
                                      &n, &E), NNC_OK);
  expect_err(nnc_infer_node(&G, n, &E), NNC_E_SHAPE, "softmax: expected an axis in 1..1 for x f32[3], found 2");
}

/* ------------------------------------------------------------- the check */

/* A small MLP: x -> linear -> relu -> linear, with output "logits". */
static int mlp(void) {
  int x = IN("image", NNC_F32, B(), K(17));
  int w1 = PARAM("fc1.weight", NNC_F32, K(9), K(17));
  int b1 = PARAM("fc1.bias", NNC_F32, K(9));
  int w2 = PARAM("out.weight", NNC_F32, K(3), K(9));
  int h = ok(NNC_OP_LINEAR, INS(x, w1, b1), NULL);
  h = ok(NNC_OP_RELU, INS(h), NULL);
  int y = ok(NNC_OP_LINEAR, INS(h, w2), NULL);
  int r;
  assert_int_equal(RESHAPE(y, 9, &r, K(-1)), NNC_OK);
  return r;
}

static void check_accepts_good_graph(void **state) {
  (void)state;
  int r = mlp();
  assert_int_equal(nnc_graph_add_output(&G, "logits", r, L(10), &E), NNC_OK);
  assert_int_equal(nnc_pass_check(&G, &E), NNC_OK);
  expect_type(r, NNC_F32, "[3*B]");
  assert_int_equal(nnc_pass_check(&G, &E), NNC_OK);
  expect_type(r, NNC_F32, "[3*B]");
}

static void check_wants_an_output(void **state) {
  (void)state;
  mlp();
  expect_err(nnc_pass_check(&G, &E), NNC_E_MODEL, "m: the model has no outputs: call output(name, x)");
  free(G.name);
  G.name = NULL;
  expect_err(nnc_pass_check(&G, &E), NNC_E_MODEL, "model: the model has no outputs: call output(name, x)");
}

static void check_finds_broken_graphs(void **state) {
  (void)state;
  int r = mlp();
  assert_int_equal(nnc_graph_add_output(&G, "logits", r, L(10), &E), NNC_OK);
  /* a shape changed behind the front-end's back is found again */
  G.tensors[G.params[2]].shape[1] = K(8);
  expect_err(nnc_pass_check(&G, &E), NNC_E_SHAPE,
             "m.lua:7: linear: input has 9 features, weight out.weight expects 8");
  G.tensors[G.params[2]].shape[1] = K(9);
  assert_int_equal(nnc_pass_check(&G, &E), NNC_OK);
  /* reading a value of a removed node */
  G.nodes[1].dead = true;
  expect_err(nnc_pass_check(&G, &E), NNC_E_INTERNAL, "m.lua:7: linear: reads relu, computed by removed node 1");
  G.nodes[1].dead = false;
  /* reading a value before it is computed */
  int relu_in = G.nodes[1].in[0];
  G.nodes[1].in[0] = G.nodes[2].out[0];
  expect_err(nnc_pass_check(&G, &E), NNC_E_INTERNAL, "m.lua:7: relu: reads linear before it is computed (producer 2)");
  G.nodes[1].in[0] = 1000;
  expect_err(nnc_pass_check(&G, &E), NNC_E_INTERNAL,
             "m.lua:7: relu: tensor id 1000 is out of range (the graph has 8)");
  G.nodes[1].in[0] = relu_in;
  /* an output computed by a removed node */
  G.nodes[3].dead = true;
  expect_err(nnc_pass_check(&G, &E), NNC_E_INTERNAL, "m.lua:10: logits: reads reshape, computed by removed node 3");
  G.nodes[3].dead = false;
  /* a node's output that another node claims */
  G.nodes[3].out[0] = G.nodes[2].out[0];
  expect_err(nnc_pass_check(&G, &E), NNC_E_INTERNAL, "m.lua:9: reshape: output linear is not a value computed by node 3");
  G.nodes[3].out[0] = r;
  G.inputs[0] = G.params[0];
  expect_err(nnc_pass_check(&G, &E), NNC_E_INTERNAL, "graph input 1: tensor id 1 is not of that kind");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(unary_keeps_shape_and_dtype, setup, teardown),
    cmocka_unit_test_setup_teardown(unary_wants_float, setup, teardown),
    cmocka_unit_test_setup_teardown(cast_any_to_attr, setup, teardown),
    cmocka_unit_test_setup_teardown(binary_broadcasts, setup, teardown),
    cmocka_unit_test_setup_teardown(binary_mismatch_messages, setup, teardown),
    cmocka_unit_test_setup_teardown(masks, setup, teardown),
    cmocka_unit_test_setup_teardown(linear_shapes, setup, teardown),
    cmocka_unit_test_setup_teardown(linear_errors, setup, teardown),
    cmocka_unit_test_setup_teardown(matmul_shapes, setup, teardown),
    cmocka_unit_test_setup_teardown(matmul_errors, setup, teardown),
    cmocka_unit_test_setup_teardown(softmax_axis, setup, teardown),
    cmocka_unit_test_setup_teardown(norms, setup, teardown),
    cmocka_unit_test_setup_teardown(reductions, setup, teardown),
    cmocka_unit_test_setup_teardown(reshape_infers_minus_one, setup, teardown),
    cmocka_unit_test_setup_teardown(reshape_errors, setup, teardown),
    cmocka_unit_test_setup_teardown(transpose_perm, setup, teardown),
    cmocka_unit_test_setup_teardown(slice_bounds, setup, teardown),
    cmocka_unit_test_setup_teardown(concat_sizes, setup, teardown),
    cmocka_unit_test_setup_teardown(split_sizes, setup, teardown),
    cmocka_unit_test_setup_teardown(embedding_lookup, setup, teardown),
    cmocka_unit_test_setup_teardown(cross_entropy_loss, setup, teardown),
    cmocka_unit_test_setup_teardown(node_checks, setup, teardown),
    cmocka_unit_test_setup_teardown(check_accepts_good_graph, setup, teardown),
    cmocka_unit_test_setup_teardown(check_wants_an_output, setup, teardown),
    cmocka_unit_test_setup_teardown(check_finds_broken_graphs, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
