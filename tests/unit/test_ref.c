/* tests/unit/test_ref.c — the float64 reference evaluator.
 *
 * Graph ops are checked against values worked out by hand on tiny tensors;
 * the fused kernels (GEMM with prologue and epilogue, streaming attention,
 * elementwise chains) against the unfused graph ops at odd sizes. Output
 * shapes are set by hand so these tests do not depend on shape inference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes/passes.h"
#include "ref/ref.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define VALS(...) ((const double[]){__VA_ARGS__})
#define IDS(...) ((const int[]){__VA_ARGS__})

/* ------------------------------------------------------------ building */

static nnc_srcloc here(nnc_graph *g, int line) {
  return (nnc_srcloc){nnc_graph_intern(g, "model.lua"), line};
}

static void to_dims(int rank, const int64_t *d, nnc_dim *s) {
  for (int i = 0; i < rank; i++) s[i] = nnc_dim_const(d[i]);
}

static int input_sym(nnc_graph *g, const char *name, nnc_dtype dt, int rank, const nnc_dim *s) {
  int id;
  nnc_error err;
  assert_int_equal(nnc_graph_add_input(g, name, dt, rank, s, here(g, 1), &id, &err), NNC_OK);
  return id;
}

static int input(nnc_graph *g, const char *name, nnc_dtype dt, int rank, const int64_t *d) {
  nnc_dim s[NNC_MAX_RANK];
  to_dims(rank, d, s);
  return input_sym(g, name, dt, rank, s);
}

static int param(nnc_graph *g, const char *name, int rank, const int64_t *d) {
  nnc_dim s[NNC_MAX_RANK];
  int id;
  nnc_error err;
  to_dims(rank, d, s);
  assert_int_equal(nnc_graph_add_param(g, name, NNC_F32, rank, s, here(g, 2), &id, &err), NNC_OK);
  return id;
}

/* Adds a node with nout outputs; output i gets dtype dt and shape shapes[i]
 * (symbolic dims allowed). Returns the node id. */
static int node_n(nnc_graph *g, nnc_op op, int nin, const int *in, const nnc_attrs *a, int nout, nnc_dtype dt,
                  int rank, const nnc_dim *shapes) {
  int id;
  nnc_error err;
  assert_int_equal(nnc_graph_add_node(g, op, nin, in, a, nout, here(g, 10 + g->nnodes), NULL, &id, &err), NNC_OK);
  for (int i = 0; i < nout; i++) {
    nnc_tensor *t = &g->tensors[g->nodes[id].out[i]];
    t->dtype = dt;
    t->rank = rank;
    memcpy(t->shape, shapes + i * NNC_MAX_RANK, (size_t)rank * sizeof *shapes);
  }
  return id;
}

/* One output of constant shape d; returns the output tensor. */
static int op_dt(nnc_graph *g, nnc_op op, int nin, const int *in, const nnc_attrs *a, nnc_dtype dt, int rank,
                 const int64_t *d) {
  nnc_dim s[NNC_MAX_RANK];
  to_dims(rank, d, s);
  int id = node_n(g, op, nin, in, a, 1, dt, rank, s);
  return g->nodes[id].out[0];
}

static int op(nnc_graph *g, nnc_op o, int nin, const int *in, const nnc_attrs *a, int rank, const int64_t *d) {
  return op_dt(g, o, nin, in, a, NNC_F32, rank, d);
}

static void set(nnc_ref *r, int t, const double *v) {
  double *x = nnc_ref_alloc(r, t);
  assert_non_null(x);
  memcpy(x, v, (size_t)nnc_ref_elems(r, t) * sizeof *x);
}

static void run_graph_ok(nnc_ref *r) {
  nnc_error err = {0};
  nnc_status st = nnc_ref_run_graph(r, &err);
  if (st) print_message("unexpected error: %s\n", err.msg);
  assert_int_equal(st, NNC_OK);
}

static void expect_values(const nnc_ref *r, int t, const double *want, int64_t n, double tol) {
  assert_int_equal(nnc_ref_elems(r, t), n);
  assert_non_null(r->val[t]);
  for (int64_t i = 0; i < n; i++) {
    double got = r->val[t][i];
    bool ok = (isinf(want[i]) && got == want[i]) || fabs(got - want[i]) <= tol;
    if (!ok) print_message("%s[%lld]: got %.17g, want %.17g\n", r->g->tensors[t].name, (long long)i, got, want[i]);
    assert_true(ok);
  }
}

static int kernel(nnc_schedule *s, nnc_kernel_kind kind, int nnodes, const int *nodes, int nin, const int *in,
                  int nout, const int *out) {
  int idx;
  nnc_error err;
  assert_int_equal(nnc_schedule_add(s, kind, nnodes, nodes, &idx, &err), NNC_OK);
  nnc_kernel *k = &s->k[idx];
  k->nin = nin;
  memcpy(k->in, in, (size_t)nin * sizeof *in);
  k->nout = nout;
  memcpy(k->out, out, (size_t)nout * sizeof *out);
  return idx;
}

/* Runs graph and schedule on the same random data (seed) and returns the
 * relative error of tensor t between them; both evaluators stay for checks. */
static double graph_vs_schedule(const nnc_graph *g, const nnc_schedule *s, const int64_t *sym, uint64_t seed,
                                int t, nnc_ref *rg, nnc_ref *rs) {
  nnc_error err = {0};
  assert_int_equal(nnc_ref_init(rg, g, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_init(rs, g, sym, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(rg, seed, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(rs, seed, &err), NNC_OK);
  run_graph_ok(rg);
  nnc_status st = nnc_ref_run_schedule(rs, s, &err);
  if (st) print_message("unexpected error: %s\n", err.msg);
  assert_int_equal(st, NNC_OK);
  assert_non_null(rs->val[t]);
  return nnc_ref_rel_error(rs->val[t], rg->val[t], nnc_ref_elems(rg, t));
}

/* ------------------------------------------------------ elementwise ops */

static void test_unary_values(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 1, DIMS(5));
  struct { nnc_op op; bool tanh; double want[5]; } cases[] = {
    {NNC_OP_GELU, false, {0, 0.8413447460685429, -0.15865525393145707, 2 * 0.9772498680518208, -0.5 * 0.3085375387259869}},
    {NNC_OP_GELU, true, {0, 0.8411919906082768, -0.15880800939172324, NAN, NAN}},
    {NNC_OP_RELU, false, {0, 1, 0, 2, 0}},
    {NNC_OP_SILU, false, {0, 0.7310585786300049, -0.2689414213699951, 2 * 0.8807970779778823, -0.5 * 0.3775406687981454}},
    {NNC_OP_SIGMOID, false, {0.5, 0.7310585786300049, 0.2689414213699951, 0.8807970779778823, 0.3775406687981454}},
    {NNC_OP_TANH, false, {0, 0.7615941559557649, -0.7615941559557649, 0.9640275800758169, -0.46211715726000974}},
    {NNC_OP_EXP, false, {1, M_E, 1 / M_E, M_E * M_E, 0.6065306597126334}},
    {NNC_OP_NEG, false, {0, -1, 1, -2, 0.5}},
  };
  int outs[8];
  for (int i = 0; i < 8; i++)
    outs[i] = op(&g, cases[i].op, 1, IDS(x), &(nnc_attrs){.gelu_tanh = cases[i].tanh}, 1, DIMS(5));
  int pos = input(&g, "p", NNC_F32, 1, DIMS(3));
  int lg = op(&g, NNC_OP_LOG, 1, IDS(pos), NULL, 1, DIMS(3));
  int sq = op(&g, NNC_OP_SQRT, 1, IDS(pos), NULL, 1, DIMS(3));
  nnc_op sops[] = {NNC_OP_ADD_S, NNC_OP_SUB_S, NNC_OP_RSUB_S, NNC_OP_MUL_S, NNC_OP_DIV_S, NNC_OP_RDIV_S, NNC_OP_POW_S};
  double swant[][3] = {{4, 7, 3}, {-2, 1, -3}, {2, -1, 3}, {3, 12, 0}, {1.0 / 3, 4.0 / 3, 0},
                       {3, 0.75, INFINITY}, {1, 64, 0}};
  int souts[7];
  for (int i = 0; i < 7; i++) souts[i] = op(&g, sops[i], 1, IDS(pos), &(nnc_attrs){.scalar = 3}, 1, DIMS(3));

  nnc_ref r;
  nnc_error err;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, x, VALS(0, 1, -1, 2, -0.5));
  set(&r, pos, VALS(1, 4, 0));
  run_graph_ok(&r);
  for (int i = 0; i < 8; i++) {
    int n = cases[i].op == NNC_OP_GELU && cases[i].tanh ? 3 : 5;   /* tanh form: known at 0, 1, -1 */
    for (int e = 0; e < n; e++) {
      if (fabs(r.val[outs[i]][e] - cases[i].want[e]) > 1e-12)
        print_message("case %d element %d: got %.17g want %.17g\n", i, e, r.val[outs[i]][e], cases[i].want[e]);
      assert_true(fabs(r.val[outs[i]][e] - cases[i].want[e]) <= 1e-12);
    }
  }
  expect_values(&r, lg, VALS(0, log(4.0), -INFINITY), 3, 1e-15);
  expect_values(&r, sq, VALS(1, 2, 0), 3, 1e-15);
  for (int i = 0; i < 7; i++) expect_values(&r, souts[i], swant[i], 3, 1e-15);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

static void test_cast(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 1, DIMS(7));
  int c16 = op_dt(&g, NNC_OP_CAST, 1, IDS(x), &(nnc_attrs){.to = NNC_F16}, NNC_F16, 1, DIMS(7));
  int cbf = op_dt(&g, NNC_OP_CAST, 1, IDS(x), &(nnc_attrs){.to = NNC_BF16}, NNC_BF16, 1, DIMS(7));
  int c32 = op_dt(&g, NNC_OP_CAST, 1, IDS(x), &(nnc_attrs){.to = NNC_F32}, NNC_F32, 1, DIMS(7));
  int ci = op_dt(&g, NNC_OP_CAST, 1, IDS(x), &(nnc_attrs){.to = NNC_I32}, NNC_I32, 1, DIMS(7));
  /* i32 arithmetic truncates toward 0 like C: -7 / 2 = -3 */
  int half = op_dt(&g, NNC_OP_DIV_S, 1, IDS(ci), &(nnc_attrs){.scalar = 2}, NNC_I32, 1, DIMS(7));

  nnc_ref r;
  nnc_error err;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  double tiny = ldexp(1, -25), tiny3 = 3 * ldexp(1, -26);
  set(&r, x, VALS(1.0 / 3, 65519, 65520, tiny, tiny3, -7.9, 1 + 3 * ldexp(1, -8)));
  run_graph_ok(&r);
  /* f16: 10 fraction bits, max 65504, ties to even, subnormals down to 2^-24 */
  expect_values(&r, c16, VALS(0.333251953125, 65504, INFINITY, 0, ldexp(1, -24), -7.8984375, 1.01171875), 7, 0);
  /* bf16: 7 fraction bits: 1 + 1.5 * 2^-7 is a tie that goes to the even 1 + 2^-6 */
  expect_values(&r, cbf, VALS(0.333984375, 65536, 65536, tiny, tiny3, -7.90625, 1.015625), 7, 0);
  expect_values(&r, c32, VALS(0.3333333432674408, 65519, 65520, tiny, tiny3, (double)-7.9f, 1 + 3 * ldexp(1, -8)),
                7, 0);
  expect_values(&r, ci, VALS(0, 65519, 65520, 0, 0, -7, 1), 7, 0);
  expect_values(&r, half, VALS(0, 32759, 32760, 0, 0, -3, 0), 7, 0);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

static void test_broadcast(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int a = input(&g, "a", NNC_F32, 2, DIMS(3, 1));
  int b = input(&g, "b", NNC_F32, 2, DIMS(1, 4));
  int c = input(&g, "c", NNC_F32, 1, DIMS(4));
  int sum = op(&g, NNC_OP_ADD, 2, IDS(a, b), NULL, 2, DIMS(3, 4));
  int dif = op(&g, NNC_OP_SUB, 2, IDS(c, a), NULL, 2, DIMS(3, 4));
  int prod = op(&g, NNC_OP_MUL, 2, IDS(sum, c), NULL, 2, DIMS(3, 4));
  int quo = op(&g, NNC_OP_DIV, 2, IDS(a, a), NULL, 2, DIMS(3, 1));
  nnc_ref r;
  nnc_error err;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, a, VALS(10, 20, 30));
  set(&r, b, VALS(1, 2, 3, 4));
  set(&r, c, VALS(-1, 0, 1, 2));
  run_graph_ok(&r);
  expect_values(&r, sum, VALS(11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34), 12, 0);
  expect_values(&r, dif, VALS(-11, -10, -9, -8, -21, -20, -19, -18, -31, -30, -29, -28), 12, 0);
  expect_values(&r, prod, VALS(-11, 0, 13, 28, -21, 0, 23, 48, -31, 0, 33, 68), 12, 0);
  expect_values(&r, quo, VALS(1, 1, 1), 3, 0);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

static void test_masks(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int sq = input(&g, "sq", NNC_F32, 2, DIMS(3, 3));
  int wide = input(&g, "wide", NNC_F32, 2, DIMS(2, 3));
  int sc = input(&g, "scores", NNC_F32, 3, DIMS(2, 2, 3));
  int m = input(&g, "mask", NNC_I32, 2, DIMS(2, 3));
  int c1 = op(&g, NNC_OP_CAUSAL_MASK, 1, IDS(sq), NULL, 2, DIMS(3, 3));
  int c2 = op(&g, NNC_OP_CAUSAL_MASK, 1, IDS(wide), NULL, 2, DIMS(2, 3));
  int p = op(&g, NNC_OP_PADDING_MASK, 2, IDS(sc, m), NULL, 3, DIMS(2, 2, 3));
  nnc_ref r;
  nnc_error err;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, sq, VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
  set(&r, wide, VALS(1, 2, 3, 4, 5, 6));
  set(&r, sc, VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  set(&r, m, VALS(1, 0, 1, 1, 1, 0));
  run_graph_ok(&r);
  const double I = INFINITY;
  expect_values(&r, c1, VALS(1, -I, -I, 4, 5, -I, 7, 8, 9), 9, 0);
  /* T=2, S=3: query i sees keys j <= i + 1 */
  expect_values(&r, c2, VALS(1, 2, -I, 4, 5, 6), 6, 0);
  expect_values(&r, p, VALS(1, -I, 3, 4, -I, 6, 7, 8, -I, 10, 11, -I), 12, 0);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* ------------------------------------------------------------- products */

static void test_linear_matmul(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 2, DIMS(2, 3));
  int w = param(&g, "w", 2, DIMS(2, 3));
  int wt = param(&g, "wt", 2, DIMS(3, 2));
  int bias = param(&g, "bias", 1, DIMS(2));
  int b = input(&g, "b", NNC_F32, 2, DIMS(3, 2));
  int ab = input(&g, "ab", NNC_F32, 3, DIMS(2, 2, 3));
  int l1 = op(&g, NNC_OP_LINEAR, 3, IDS(x, w, bias), NULL, 2, DIMS(2, 2));
  int l2 = op(&g, NNC_OP_LINEAR, 2, IDS(x, wt), &(nnc_attrs){.weight_in_out = true}, 2, DIMS(2, 2));
  int mm = op(&g, NNC_OP_MATMUL, 2, IDS(x, b), NULL, 2, DIMS(2, 2));
  int bm = op(&g, NNC_OP_MATMUL, 2, IDS(ab, b), NULL, 3, DIMS(2, 2, 2));
  nnc_ref r;
  nnc_error err;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, x, VALS(1, 2, 3, 4, 5, 6));
  set(&r, w, VALS(1, 0, -1, 2, 1, 0));
  set(&r, wt, VALS(1, 2, 0, 1, -1, 0));   /* w transposed */
  set(&r, bias, VALS(10, 20));
  set(&r, b, VALS(7, 8, 9, 10, 11, 12));
  set(&r, ab, VALS(1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0));
  run_graph_ok(&r);
  /* x . w^T = [[1-3, 2+2], [4-6, 8+5]] */
  expect_values(&r, l1, VALS(8, 24, 8, 33), 4, 0);
  expect_values(&r, l2, VALS(-2, 4, -2, 13), 4, 0);
  /* [[1,2,3],[4,5,6]] . [[7,8],[9,10],[11,12]] */
  expect_values(&r, mm, VALS(58, 64, 139, 154), 4, 0);
  expect_values(&r, bm, VALS(58, 64, 139, 154, 7, 8, 9, 10), 8, 0);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* ------------------------------------------------------------ row ops */

static void test_softmax_norms(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 2, DIMS(2, 3));
  int row = input(&g, "row", NNC_F32, 2, DIMS(1, 4));
  int gam = param(&g, "g", 1, DIMS(4));
  int bet = param(&g, "b", 1, DIMS(4));
  int s1 = op(&g, NNC_OP_SOFTMAX, 1, IDS(x), &(nnc_attrs){.axis = 1}, 2, DIMS(2, 3));
  int s0 = op(&g, NNC_OP_SOFTMAX, 1, IDS(x), &(nnc_attrs){.axis = 0}, 2, DIMS(2, 3));
  int ln = op(&g, NNC_OP_LAYERNORM, 3, IDS(row, gam, bet), &(nnc_attrs){.eps = 1e-5}, 2, DIMS(1, 4));
  int rms = op(&g, NNC_OP_RMSNORM, 2, IDS(row, gam), &(nnc_attrs){.eps = 1e-6}, 2, DIMS(1, 4));
  nnc_ref r;
  nnc_error err;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, x, VALS(1, 2, 3, -INFINITY, -INFINITY, -INFINITY));
  set(&r, row, VALS(1, 2, 3, 4));
  set(&r, gam, VALS(1, 2, 1, 1));
  set(&r, bet, VALS(0, 0, 0, 1));
  run_graph_ok(&r);
  /* a row of -inf (every key masked) gives zeros */
  expect_values(&r, s1, VALS(0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 0, 0, 0), 6, 1e-15);
  expect_values(&r, s0, VALS(1, 1, 1, 0, 0, 0), 6, 0);
  /* mean 2.5, biased variance 1.25 */
  double inv = 1 / sqrt(1.25 + 1e-5);
  expect_values(&r, ln, VALS(-1.5 * inv, -0.5 * inv * 2, 0.5 * inv, 1.5 * inv + 1), 4, 1e-15);
  double rinv = 1 / sqrt(7.5 + 1e-6);   /* mean of squares (1+4+9+16)/4 */
  expect_values(&r, rms, VALS(rinv, 4 * rinv, 3 * rinv, 4 * rinv), 4, 1e-15);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

static void test_reductions(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 2, DIMS(2, 3));
  int e = input(&g, "empty", NNC_F32, 2, DIMS(2, 0));
  int s1 = op(&g, NNC_OP_SUM, 1, IDS(x), &(nnc_attrs){.axis = 1}, 1, DIMS(2));
  int m1 = op(&g, NNC_OP_MEAN, 1, IDS(x), &(nnc_attrs){.axis = 1, .keepdim = true}, 2, DIMS(2, 1));
  int x0 = op(&g, NNC_OP_MAX, 1, IDS(x), &(nnc_attrs){.axis = 0}, 1, DIMS(3));
  int se = op(&g, NNC_OP_SUM, 1, IDS(e), &(nnc_attrs){.axis = 1}, 1, DIMS(2));
  int xe = op(&g, NNC_OP_MAX, 1, IDS(e), &(nnc_attrs){.axis = 1}, 1, DIMS(2));
  nnc_ref r;
  nnc_error err;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, x, VALS(1, 5, 3, -4, -2, -9));
  set(&r, e, VALS(0));
  run_graph_ok(&r);
  expect_values(&r, s1, VALS(9, -15), 2, 0);
  expect_values(&r, m1, VALS(3, -5), 2, 0);
  expect_values(&r, x0, VALS(1, 5, 3), 3, 0);
  expect_values(&r, se, VALS(0, 0), 2, 0);
  expect_values(&r, xe, VALS(-INFINITY, -INFINITY), 2, 0);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* ------------------------------------------------------- data movement */

static void test_moves(void **state) {
  nnc_graph g;
  nnc_error err;
  nnc_graph_init(&g);
  int T;
  assert_int_equal(nnc_graph_add_symbol(&g, "T", 9, here(&g, 1), &T, &err), NNC_OK);
  int x = input(&g, "x", NNC_F32, 3, DIMS(2, 3, 5));
  int tr = op(&g, NNC_OP_TRANSPOSE, 1, IDS(x), &(nnc_attrs){.perm = {2, 0, 1}}, 3, DIMS(5, 2, 3));
  int rs = op(&g, NNC_OP_RESHAPE, 1, IDS(x), NULL, 2, DIMS(6, 5));
  int sl = op(&g, NNC_OP_SLICE, 1, IDS(x), &(nnc_attrs){.axis = 2, .start = nnc_dim_const(1), .stop = nnc_dim_const(4)},
              3, DIMS(2, 3, 3));
  /* wpe[0:T] with T = 4 of at most 9 */
  int tab = param(&g, "wpe", 2, DIMS(9, 2));
  nnc_dim tshape[NNC_MAX_RANK] = {nnc_dim_sym(T), nnc_dim_const(2)};
  int sym_node = node_n(&g, NNC_OP_SLICE, 1, IDS(tab),
                        &(nnc_attrs){.axis = 0, .start = nnc_dim_const(0), .stop = nnc_dim_sym(T)}, 1, NNC_F32,
                        2, tshape);
  int sym_sl = g.nodes[sym_node].out[0];
  int a = input(&g, "a", NNC_F32, 2, DIMS(2, 1));
  int b = input(&g, "b", NNC_F32, 2, DIMS(2, 2));
  int cat = op(&g, NNC_OP_CONCAT, 2, IDS(a, b), &(nnc_attrs){.axis = 1}, 2, DIMS(2, 3));
  int sp = node_n(&g, NNC_OP_SPLIT, 1, IDS(x), &(nnc_attrs){.axis = 2}, 2, NNC_F32, 3,
                  (nnc_dim[2 * NNC_MAX_RANK]){nnc_dim_const(2), nnc_dim_const(3), nnc_dim_const(2), {0}, {0}, {0},
                                              nnc_dim_const(2), nnc_dim_const(3), nnc_dim_const(3)});
  nnc_ref r;
  assert_int_equal(nnc_ref_init(&r, &g, DIMS(4), &err), NNC_OK);
  double xv[30], tv[18];
  for (int i = 0; i < 30; i++) xv[i] = i;
  for (int i = 0; i < 18; i++) tv[i] = 100 + i;
  set(&r, x, xv);
  set(&r, tab, tv);
  set(&r, a, VALS(1, 2));
  set(&r, b, VALS(3, 4, 5, 6));
  run_graph_ok(&r);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) assert_true(r.val[tr][(i * 2 + j) * 3 + k] == xv[(j * 3 + k) * 5 + i]);
  expect_values(&r, rs, xv, 30, 0);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 3; k++) assert_true(r.val[sl][(i * 3 + j) * 3 + k] == xv[(i * 3 + j) * 5 + k + 1]);
  expect_values(&r, sym_sl, tv, 8, 0);
  expect_values(&r, cat, VALS(1, 3, 4, 2, 5, 6), 6, 0);
  int s0 = g.nodes[sp].out[0], s1 = g.nodes[sp].out[1];
  for (int row = 0; row < 6; row++) {
    assert_true(r.val[s0][row * 2] == xv[row * 5] && r.val[s0][row * 2 + 1] == xv[row * 5 + 1]);
    for (int k = 0; k < 3; k++) assert_true(r.val[s1][row * 3 + k] == xv[row * 5 + 2 + k]);
  }
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* rope by hand on rows x = (1, 2, 3, 4) at times 0, 1, 2 (D 4, base 100:
 * the pairs (0, 2) at frequency 1 and (1, 3) at 100^(-1/2) = 0.1); a
 * partial turn (dims 2: the pair (0, 1), entries 2 and 3 pass) at given
 * positions; and the turn back (rope's gradient) of the first, which is x. */
static void test_rope(void **state) {
  nnc_graph g;
  nnc_error err;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 3, DIMS(1, 3, 4));
  int pos = input(&g, "pos", NNC_I32, 1, DIMS(3));
  int a = op(&g, NNC_OP_ROPE, 1, IDS(x), &(nnc_attrs){.axis = 1, .scalar = 100, .rot_dims = 4}, 3, DIMS(1, 3, 4));
  int b = op(&g, NNC_OP_ROPE, 2, IDS(x, pos), &(nnc_attrs){.axis = 1, .scalar = 100, .rot_dims = 2}, 3, DIMS(1, 3, 4));
  int c = op(&g, NNC_OP_ROPE, 1, IDS(a), &(nnc_attrs){.axis = 1, .scalar = 100, .rot_dims = 4, .reverse = true}, 3,
             DIMS(1, 3, 4));
  for (int n = 0; n < g.nnodes; n++) assert_int_equal(nnc_infer_node(&g, n, &err), NNC_OK);
  nnc_ref r;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, x, VALS(1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4));
  set(&r, pos, VALS(5, 0, 7));
  run_graph_ok(&r);
  double wa[12], wb[12];
  for (int t = 0; t < 3; t++) {
    double p = t == 0 ? 5 : t == 1 ? 0 : 7;   /* pos */
    wa[4 * t + 0] = 1 * cos(t) - 3 * sin(t);
    wa[4 * t + 1] = 2 * cos(0.1 * t) - 4 * sin(0.1 * t);
    wa[4 * t + 2] = 3 * cos(t) + 1 * sin(t);
    wa[4 * t + 3] = 4 * cos(0.1 * t) + 2 * sin(0.1 * t);
    wb[4 * t + 0] = 1 * cos(p) - 2 * sin(p);
    wb[4 * t + 1] = 2 * cos(p) + 1 * sin(p);
    wb[4 * t + 2] = 3;
    wb[4 * t + 3] = 4;
  }
  expect_values(&r, a, wa, 12, 1e-12);
  expect_values(&r, b, wb, 12, 1e-12);
  expect_values(&r, c, VALS(1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4), 12, 1e-12);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* im2col by hand on a 3x3 image holding 1..9: plain 2x2 windows, padded and
 * strided windows of -inf (max pooling's), dilated ones, and NHWC with two
 * channels, channel-major and tap-major, and col2im of the tap-major ones;
 * the shape rule agrees with the hand-made output shapes. */
static void test_im2col(void **state) {
  nnc_graph g;
  nnc_error err;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 4, DIMS(1, 1, 3, 3));
  int xh = input(&g, "xh", NNC_F32, 4, DIMS(1, 2, 1, 2));   /* NHWC: H 2, W 1, C 2 */
  nnc_window plain = {2, 2, 1, 1, 0, 0, 1, 1, false, false}, padded = {2, 2, 2, 2, 1, 1, 1, 1, false, false};
  nnc_window dilated = {2, 2, 1, 1, 0, 0, 2, 2, false, false}, nhwc = {2, 1, 1, 1, 1, 0, 1, 1, true, false};
  nnc_window taps = nhwc;
  taps.tap_major = true;
  int a = op(&g, NNC_OP_IM2COL, 1, IDS(x), &(nnc_attrs){.win = plain}, 5, DIMS(1, 2, 2, 1, 4));
  int b = op(&g, NNC_OP_IM2COL, 1, IDS(x), &(nnc_attrs){.win = padded, .scalar = -INFINITY}, 5, DIMS(1, 2, 2, 1, 4));
  int c = op(&g, NNC_OP_IM2COL, 1, IDS(x), &(nnc_attrs){.win = dilated}, 5, DIMS(1, 1, 1, 1, 4));
  int d = op(&g, NNC_OP_IM2COL, 1, IDS(xh), &(nnc_attrs){.win = nhwc}, 5, DIMS(1, 3, 1, 2, 2));
  int e = op(&g, NNC_OP_IM2COL, 1, IDS(xh), &(nnc_attrs){.win = taps}, 5, DIMS(1, 3, 1, 2, 2));
  int f = op(&g, NNC_OP_COL2IM, 1, IDS(e), &(nnc_attrs){.win = taps}, 4, DIMS(1, 2, 1, 2));
  for (int n = 0; n < g.nnodes; n++) {
    nnc_tensor want = g.tensors[g.nodes[n].out[0]];
    assert_int_equal(nnc_infer_node(&g, n, &err), NNC_OK);
    const nnc_tensor *got = &g.tensors[g.nodes[n].out[0]];
    assert_int_equal(got->rank, want.rank);
    for (int i = 0; i < want.rank; i++) assert_true(nnc_dim_eq(got->shape[i], want.shape[i]));
  }
  nnc_ref r;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, x, VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
  set(&r, xh, VALS(1, 2, 3, 4));   /* (h 0: c 1, 2), (h 1: c 3, 4) */
  run_graph_ok(&r);
  expect_values(&r, a, VALS(1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9), 16, 0);
  const double I = -INFINITY;
  expect_values(&r, b, VALS(I, I, I, 1, I, I, 2, 3, I, 4, I, 7, 5, 6, 8, 9), 16, 0);
  expect_values(&r, c, VALS(1, 3, 7, 9), 4, 0);
  /* rows oh = 0, 1, 2 read h = oh - 1 and oh; per channel the two rows */
  expect_values(&r, d, VALS(0, 1, 0, 2, 1, 3, 2, 4, 3, 0, 4, 0), 12, 0);
  /* the same windows per tap: its two channels together */
  expect_values(&r, e, VALS(0, 0, 1, 2, 1, 2, 3, 4, 3, 4, 0, 0), 12, 0);
  /* each pixel is read by two windows */
  expect_values(&r, f, VALS(2, 4, 6, 8), 4, 0);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* --------------------------------------------------------- lookup, loss */

static void test_embedding(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int tab = param(&g, "wte", 2, DIMS(4, 3));
  int ids = input(&g, "tokens", NNC_I32, 2, DIMS(1, 3));
  int e = op(&g, NNC_OP_EMBEDDING, 2, IDS(tab, ids), NULL, 3, DIMS(1, 3, 3));
  nnc_ref r;
  nnc_error err = {0};
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, tab, VALS(0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32));
  set(&r, ids, VALS(3, 0, 3));
  run_graph_ok(&r);
  expect_values(&r, e, VALS(30, 31, 32, 0, 1, 2, 30, 31, 32), 9, 0);
  set(&r, ids, VALS(3, 4, 0));
  assert_int_not_equal(nnc_ref_run_graph(&r, &err), NNC_OK);
  assert_non_null(strstr(err.msg, "model.lua:"));
  assert_non_null(strstr(err.msg, "tokens"));
  assert_non_null(strstr(err.msg, "holds 4 at element 1"));
  assert_non_null(strstr(err.msg, "0..3"));
  assert_non_null(strstr(err.msg, "wte"));
  set(&r, ids, VALS(-1, 0, 0));
  assert_int_not_equal(nnc_ref_run_graph(&r, &err), NNC_OK);
  assert_non_null(strstr(err.msg, "holds -1 at element 0"));
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

static void test_cross_entropy(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int lg = input(&g, "logits", NNC_F32, 2, DIMS(2, 3));
  int tg = input(&g, "targets", NNC_I32, 1, DIMS(2));
  int ce = op(&g, NNC_OP_CROSS_ENTROPY, 2, IDS(lg, tg), NULL, 0, DIMS(0));
  nnc_ref r;
  nnc_error err = {0};
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  set(&r, lg, VALS(1, 2, 3, 1, 1, 1));
  set(&r, tg, VALS(2, 0));
  run_graph_ok(&r);
  /* (log(e + e^2 + e^3) - 3 + log 3) / 2 */
  expect_values(&r, ce, VALS(0.753109126556245), 1, 1e-15);
  set(&r, tg, VALS(2, 3));
  assert_int_not_equal(nnc_ref_run_graph(&r, &err), NNC_OK);
  assert_non_null(strstr(err.msg, "targets"));
  assert_non_null(strstr(err.msg, "holds 3 at element 1"));
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* ------------------------------------------------- errors and the API */

static void test_missing_and_bad_sizes(void **state) {
  nnc_graph g;
  nnc_error err = {0};
  nnc_graph_init(&g);
  int B;
  assert_int_equal(nnc_graph_add_symbol(&g, "B", 4, here(&g, 1), &B, &err), NNC_OK);
  nnc_dim s[2] = {nnc_dim_sym(B), nnc_dim_const(3)};
  int x = input_sym(&g, "image", NNC_F32, 2, s);
  int w = param(&g, "fc1.weight", 2, DIMS(2, 3));
  op(&g, NNC_OP_LINEAR, 2, IDS(x, w), NULL, 2, DIMS(1, 2));
  nnc_ref r;
  assert_int_not_equal(nnc_ref_init(&r, &g, DIMS(5), &err), NNC_OK);
  assert_non_null(strstr(err.msg, "dim B"));
  assert_int_not_equal(nnc_ref_init(&r, &g, DIMS(0), &err), NNC_OK);
  assert_int_equal(nnc_ref_init(&r, &g, DIMS(1), &err), NNC_OK);
  set(&r, x, VALS(1, 2, 3));
  assert_int_equal(nnc_ref_run_graph(&r, &err), NNC_E_USAGE);
  assert_non_null(strstr(err.msg, "model.lua:10"));
  assert_non_null(strstr(err.msg, "parameter fc1.weight"));
  /* a shape that does not follow from the inputs is an error, not a bad read */
  set(&r, w, VALS(1, 2, 3, 4, 5, 6));
  g.tensors[w].shape[1] = nnc_dim_const(2);
  assert_int_equal(nnc_ref_run_graph(&r, &err), NNC_E_SHAPE);
  assert_non_null(strstr(err.msg, "linear"));
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

/* nnc_ref_round against values worked out by hand: bf16 keeps 8
 * significant bits (spacing 2^-7 above 1), f16 11 (2^-10 above 1, 2^-24
 * between its subnormals, 65504 the largest), f32 24; ties go to the even
 * neighbour, past the largest value to infinity; i32 and non-finite values
 * pass through. */
static void test_round(void **state) {
  (void)state;
  assert_true(nnc_ref_round(1 + 0x1p-9, NNC_BF16) == 1);                   /* under half a spacing */
  assert_true(nnc_ref_round(1 + 0x1p-8 + 0x1p-20, NNC_BF16) == 1 + 0x1p-7); /* over half */
  assert_true(nnc_ref_round(1 + 0x1p-8, NNC_BF16) == 1);                   /* a tie: 1 is even */
  assert_true(nnc_ref_round(1 + 3 * 0x1p-8, NNC_BF16) == 1 + 0x1p-6);      /* a tie: 1 + 2^-6 is even */
  assert_true(nnc_ref_round(-3.14159, NNC_BF16) == -3.140625);
  assert_true(nnc_ref_round(0x1p-130, NNC_BF16) == 0x1p-130);             /* a subnormal on its grid */
  assert_true(nnc_ref_round(0x1.ffp127, NNC_BF16) == INFINITY);            /* rounds past 0x1.fep127 */
  assert_true(nnc_ref_round(-0x1.fe8p127, NNC_BF16) == -0x1.fep127);
  assert_true(nnc_ref_round(1 + 0x1p-11, NNC_F16) == 1);                   /* a tie: 1 is even */
  assert_true(nnc_ref_round(1 + 0x1p-10, NNC_F16) == 1 + 0x1p-10);
  assert_true(nnc_ref_round(65519, NNC_F16) == 65504);
  assert_true(nnc_ref_round(65520, NNC_F16) == INFINITY);                  /* the tie past 65504 */
  assert_true(nnc_ref_round(0x1p-25, NNC_F16) == 0);                       /* half the smallest subnormal */
  assert_true(nnc_ref_round(3 * 0x1p-25, NNC_F16) == 0x1p-23);
  assert_true(nnc_ref_round(1 + 0x1p-30, NNC_F32) == 1);
  assert_true(nnc_ref_round(0.1, NNC_F32) == (double)0.1f);
  assert_true(nnc_ref_round(1 + 0x1p-9, NNC_I32) == 1 + 0x1p-9);
  assert_true(isnan(nnc_ref_round(NAN, NNC_BF16)));
  assert_true(nnc_ref_round(-INFINITY, NNC_F16) == -INFINITY);
  assert_true(nnc_ref_round(0.0, NNC_BF16) == 0);
}

/* nnc_ref.store: each value a node computes is rounded to the type before
 * the next node reads it (so twice here), inputs are left as given, and an
 * evaluator with store F32 is exact. */
static void test_store_rounding(void **state) {
  (void)state;
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 1, DIMS(3));
  int w = param(&g, "w", 1, DIMS(3));
  int p = op(&g, NNC_OP_MUL, 2, IDS(x, w), NULL, 1, DIMS(3));
  int y = op(&g, NNC_OP_ADD, 2, IDS(p, x), NULL, 1, DIMS(3));
  for (int k = 0; k < 2; k++) {
    nnc_ref r;
    nnc_error err;
    assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
    assert_int_equal(r.store, NNC_F32);
    if (k) r.store = NNC_BF16;
    /* x * w = 1 + 2^-9 (to 1 in bf16), 3 (exact), -(1 + 2^-7 + 2^-9) (to -(1 + 2^-7)); then + x */
    set(&r, x, VALS(1 + 0x1p-9, 1.5, -1));
    set(&r, w, VALS(1, 2, 1 + 0x1p-7 + 0x1p-9));
    run_graph_ok(&r);
    expect_values(&r, x, VALS(1 + 0x1p-9, 1.5, -1), 3, 0);
    if (k) {
      expect_values(&r, p, VALS(1, 3, -(1 + 0x1p-7)), 3, 0);
      /* 2 + 2^-9 -> 2 (spacing 2^-6); 4.5 exact; -(2 + 2^-7) -> a tie, to -2 */
      expect_values(&r, y, VALS(2, 4.5, -2), 3, 0);
    } else {
      expect_values(&r, p, VALS(1 + 0x1p-9, 3, -(1 + 0x1p-7 + 0x1p-9)), 3, 0);
      expect_values(&r, y, VALS(2 + 0x1p-8, 4.5, -(2 + 0x1p-7 + 0x1p-9)), 3, 0);
    }
    nnc_ref_free(&r);
  }
  nnc_graph_free(&g);
}

static void test_rel_error(void **state) {
  assert_true(nnc_ref_rel_error(VALS(1, 2), VALS(1, 2), 2) == 0);
  assert_true(fabs(nnc_ref_rel_error(VALS(1, 2.5), VALS(1, 2), 2) - 0.25) < 1e-15);
  assert_true(fabs(nnc_ref_rel_error(VALS(-4, 0), VALS(-3, 0), 2) - 1.0 / 3) < 1e-15);
  assert_true(isinf(nnc_ref_rel_error(VALS(1, NAN), VALS(1, 2), 2)));
  assert_true(isinf(nnc_ref_rel_error(VALS(1, 2), VALS(NAN, 2), 2)));
  assert_true(nnc_ref_rel_error(VALS(-INFINITY, 1), VALS(-INFINITY, 1), 2) == 0);
  assert_true(isinf(nnc_ref_rel_error(VALS(0, 1), VALS(-INFINITY, 1), 2)));
  assert_true(nnc_ref_rel_error(NULL, NULL, 0) == 0);
  assert_true(nnc_ref_rel_error(VALS(1e-3), VALS(0), 1) > 1e20);
}

/* The cosine against hand-computed values: alike, opposite, orthogonal,
 * scaled, zero vectors, masked infinities, and values whose squares would
 * overflow or vanish in float64. */
static void test_cosine(void **state) {
  assert_true(fabs(nnc_ref_cosine(VALS(1, 2, 3), VALS(1, 2, 3), 3) - 1) < 1e-15);
  assert_true(fabs(nnc_ref_cosine(VALS(1, 2, 3), VALS(2, 4, 6), 3) - 1) < 1e-15);   /* scale does not count */
  assert_true(fabs(nnc_ref_cosine(VALS(1, 2), VALS(-1, -2), 2) + 1) < 1e-15);
  assert_true(fabs(nnc_ref_cosine(VALS(1, 0), VALS(0, 1), 2)) < 1e-15);
  assert_true(fabs(nnc_ref_cosine(VALS(1, 1), VALS(1, -1), 2)) < 1e-15);
  assert_true(fabs(nnc_ref_cosine(VALS(1, 2), VALS(2, 1), 2) - 0.8) < 1e-15);   /* 4 / (sqrt 5 sqrt 5) */
  assert_true(fabs(nnc_ref_cosine(VALS(2, 0), VALS(1, 1), 2) - sqrt(0.5)) < 1e-15);
  assert_true(fabs(nnc_ref_cosine(VALS(-3, 4), VALS(4, 3), 2)) < 1e-15);
  /* zero vectors: two are alike, one against a nonzero vector is orthogonal */
  assert_true(nnc_ref_cosine(VALS(0, 0), VALS(0, 0), 2) == 1);
  assert_true(nnc_ref_cosine(VALS(0, 0), VALS(1, 2), 2) == 0);
  assert_true(nnc_ref_cosine(VALS(1, 2), VALS(0, 0), 2) == 0);
  assert_true(nnc_ref_cosine(NULL, NULL, 0) == 1);
  /* NaN anywhere, or an infinity the other side lacks: undefined */
  assert_true(isnan(nnc_ref_cosine(VALS(1, NAN), VALS(1, 2), 2)));
  assert_true(isnan(nnc_ref_cosine(VALS(1, 2), VALS(NAN, 2), 2)));
  assert_true(isnan(nnc_ref_cosine(VALS(0, 1), VALS(-INFINITY, 1), 2)));
  assert_true(fabs(nnc_ref_cosine(VALS(-INFINITY, 1, 2), VALS(-INFINITY, 2, 1), 3) - 0.8) < 1e-15);
  assert_true(fabs(nnc_ref_cosine(VALS(1e300, 2e300), VALS(2e300, 1e300), 2) - 0.8) < 1e-15);
  assert_true(fabs(nnc_ref_cosine(VALS(1e-300, 2e-300), VALS(2e-300, 1e-300), 2) - 0.8) < 1e-15);
}

/* Top-1 agreement of rows of logits: argmax equality, ties in the
 * reference (exact or within float64 rounding) agreeing for each tied
 * class, ties in the model's row resolved to the first, NaN rows never
 * agreeing, and no rows at all. */
static void test_top1_agree(void **state) {
  assert_int_equal(nnc_ref_top1_agree(VALS(0.1, 0.9, 0.2, 3, 2, 1), VALS(0, 1, 0, 1, 2, 3), 2, 3), 1);
  assert_int_equal(nnc_ref_top1_agree(VALS(0.1, 0.9, 0.2, 1, 2, 3), VALS(0, 1, 0, 1, 2, 3), 2, 3), 2);
  assert_int_equal(nnc_ref_top1_agree(VALS(-3, -1, -2), VALS(-30, -10, -20), 1, 3), 1);
  /* the same values as one row of 6 and as 6 rows of 1 (always agree) */
  assert_int_equal(nnc_ref_top1_agree(VALS(0.1, 0.9, 0.2, 3, 2, 1), VALS(0, 1, 0, 1, 2, 3), 1, 6), 0);
  assert_int_equal(nnc_ref_top1_agree(VALS(0.1, 0.9, 0.2, 3, 2, 1), VALS(0, 1, 0, 1, 2, 3), 6, 1), 6);
  /* a tie in the reference: either class agrees, the third does not */
  assert_int_equal(nnc_ref_top1_agree(VALS(0, 0, 1), VALS(1, 5, 5), 1, 3), 1);
  assert_int_equal(nnc_ref_top1_agree(VALS(0, 1, 0), VALS(1, 5, 5), 1, 3), 1);
  assert_int_equal(nnc_ref_top1_agree(VALS(1, 0, 0), VALS(1, 5, 5), 1, 3), 0);
  /* within float64 rounding of the row's largest |value| a tie, beyond it not */
  assert_int_equal(nnc_ref_top1_agree(VALS(1, 0), VALS(5, 5 + 1e-13), 1, 2), 1);
  assert_int_equal(nnc_ref_top1_agree(VALS(1, 0), VALS(5, 5 + 1e-9), 1, 2), 0);
  /* a tie in the model's row: its first largest class decides */
  assert_int_equal(nnc_ref_top1_agree(VALS(2, 2, 0), VALS(1, 0, 0), 1, 3), 1);
  assert_int_equal(nnc_ref_top1_agree(VALS(2, 2, 0), VALS(0, 1, 0), 1, 3), 0);
  /* masked classes (-inf in both) and NaN */
  assert_int_equal(nnc_ref_top1_agree(VALS(-INFINITY, 0, 5), VALS(-INFINITY, 1, 2), 1, 3), 1);
  assert_int_equal(nnc_ref_top1_agree(VALS(0, NAN, 5, 0, 1, 0), VALS(1, 2, 3, 0, 1, 0), 2, 3), 1);
  assert_int_equal(nnc_ref_top1_agree(VALS(0, 1, 5), VALS(1, NAN, 3), 1, 3), 0);
  /* an empty output: no rows, or rows of no classes */
  assert_int_equal(nnc_ref_top1_agree(NULL, NULL, 0, 101), 0);
  assert_int_equal(nnc_ref_top1_agree(NULL, NULL, 4, 0), 0);
}

static void test_random_inputs(void **state) {
  nnc_graph g;
  nnc_error err = {0};
  nnc_graph_init(&g);
  int tab = param(&g, "wte", 2, DIMS(5, 3));
  int ids = input(&g, "tokens", NNC_I32, 2, DIMS(7, 9));
  int flat = op_dt(&g, NNC_OP_RESHAPE, 1, IDS(ids), NULL, NNC_I32, 1, DIMS(63));
  op(&g, NNC_OP_EMBEDDING, 2, IDS(tab, flat), NULL, 2, DIMS(63, 3));
  int lg = input(&g, "logits", NNC_F32, 2, DIMS(11, 3));
  int tg = input(&g, "targets", NNC_I32, 1, DIMS(11));
  op(&g, NNC_OP_CROSS_ENTROPY, 2, IDS(lg, tg), NULL, 0, DIMS(0));
  int sc = input(&g, "scores", NNC_F32, 3, DIMS(13, 2, 5));
  int mask = input(&g, "mask", NNC_F32, 2, DIMS(13, 5));
  op(&g, NNC_OP_PADDING_MASK, 2, IDS(sc, mask), NULL, 3, DIMS(13, 2, 5));
  int other = input(&g, "other", NNC_I32, 1, DIMS(101));
  op_dt(&g, NNC_OP_NEG, 1, IDS(other), NULL, NNC_I32, 1, DIMS(101));
  nnc_ref r, r2, r3;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_init(&r2, &g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_init(&r3, &g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r, 42, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r2, 42, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r3, 43, &err), NNC_OK);
  int seen[8] = {0};
  for (int i = 0; i < 63; i++) {
    double v = r.val[ids][i];
    assert_true(v >= 0 && v < 5 && v == floor(v));
    seen[(int)v]++;
  }
  for (int i = 0; i < 5; i++) assert_true(seen[i] > 0);   /* the whole range is drawn */
  for (int i = 0; i < 11; i++) assert_true(r.val[tg][i] >= 0 && r.val[tg][i] < 3 && r.val[tg][i] == floor(r.val[tg][i]));
  int zeros = 0;
  for (int b = 0; b < 13; b++) {
    assert_true(r.val[mask][b * 5] == 1);
    for (int j = 1; j < 5; j++) {
      assert_true(r.val[mask][b * 5 + j] == 0 || r.val[mask][b * 5 + j] == 1);
      zeros += r.val[mask][b * 5 + j] == 0;
    }
  }
  assert_true(zeros > 0 && zeros < 52);
  int hi = 0;
  for (int i = 0; i < 101; i++) {
    assert_true(r.val[other][i] >= 0 && r.val[other][i] < 8 && r.val[other][i] == floor(r.val[other][i]));
    hi += r.val[other][i] == 7;
  }
  assert_true(hi > 0);
  double lo = 1, up = -1;
  for (int i = 0; i < 15; i++) {
    assert_true(r.val[tab][i] >= -1 && r.val[tab][i] < 1);
    lo = fmin(lo, r.val[tab][i]);
    up = fmax(up, r.val[tab][i]);
  }
  assert_true(lo < 0 && up > 0);
  assert_true(nnc_ref_rel_error(r.val[lg], r2.val[lg], 33) == 0);
  assert_true(nnc_ref_rel_error(r.val[lg], r3.val[lg], 33) > 0.01);
  assert_true(nnc_ref_rel_error(r.val[lg], r.val[sc], 33) > 0.01);   /* each tensor its own stream */
  nnc_ref_free(&r);
  nnc_ref_free(&r2);
  nnc_ref_free(&r3);
  nnc_graph_free(&g);
}

/* ------------------------------------------------------------ kernels */

typedef struct attn_case {
  int64_t B, H, T, S, D, Dv;
  bool causal, padding;
} attn_case;

typedef struct attn_graph {
  nnc_graph g;
  int q, k, v, mask, out;
  int nodes[8], nnodes;
} attn_graph;

/* sdpa as the DSL writes it: q . k^T, scale, masks, softmax, . v */
static void build_attention(attn_graph *a, const attn_case *c) {
  nnc_graph *g = &a->g;
  nnc_graph_init(g);
  a->q = input(g, "q", NNC_F32, 4, DIMS(c->B, c->H, c->T, c->D));
  a->k = input(g, "k", NNC_F32, 4, DIMS(c->B, c->H, c->S, c->D));
  a->v = input(g, "v", NNC_F32, 4, DIMS(c->B, c->H, c->S, c->Dv));
  a->mask = c->padding ? input(g, "mask", NNC_I32, 2, DIMS(c->B, c->S)) : -1;
  a->nnodes = 0;
  int kt = op(g, NNC_OP_TRANSPOSE, 1, IDS(a->k), &(nnc_attrs){.perm = {0, 1, 3, 2}}, 4, DIMS(c->B, c->H, c->D, c->S));
  a->nodes[a->nnodes++] = g->nnodes - 1;
  int s = op(g, NNC_OP_MATMUL, 2, IDS(a->q, kt), NULL, 4, DIMS(c->B, c->H, c->T, c->S));
  a->nodes[a->nnodes++] = g->nnodes - 1;
  s = op(g, NNC_OP_DIV_S, 1, IDS(s), &(nnc_attrs){.scalar = sqrt((double)c->D)}, 4, DIMS(c->B, c->H, c->T, c->S));
  a->nodes[a->nnodes++] = g->nnodes - 1;
  if (c->causal) {
    s = op(g, NNC_OP_CAUSAL_MASK, 1, IDS(s), NULL, 4, DIMS(c->B, c->H, c->T, c->S));
    a->nodes[a->nnodes++] = g->nnodes - 1;
  }
  if (c->padding) {
    s = op(g, NNC_OP_PADDING_MASK, 2, IDS(s, a->mask), NULL, 4, DIMS(c->B, c->H, c->T, c->S));
    a->nodes[a->nnodes++] = g->nnodes - 1;
  }
  int p = op(g, NNC_OP_SOFTMAX, 1, IDS(s), &(nnc_attrs){.axis = 3}, 4, DIMS(c->B, c->H, c->T, c->S));
  a->nodes[a->nnodes++] = g->nnodes - 1;
  a->out = op(g, NNC_OP_MATMUL, 2, IDS(p, a->v), NULL, 4, DIMS(c->B, c->H, c->T, c->Dv));
  a->nodes[a->nnodes++] = g->nnodes - 1;
}

static void attention_schedule(attn_graph *a, const attn_case *c, nnc_schedule *s, bool causal, double scale) {
  nnc_schedule_init(s, &a->g);
  int ins[4] = {a->q, a->k, a->v, a->mask};
  int ki = kernel(s, NNC_KERNEL_ATTENTION, a->nnodes, a->nodes, c->padding ? 4 : 3, ins, 1, IDS(a->out));
  s->k[ki].d.attn = (nnc_attention_desc){.q = a->q, .k = a->k, .v = a->v, .mask = a->mask, .out = a->out, .lse = -1,
                                         .causal = causal, .scale = scale};
}

static void test_attention_streaming(void **state) {
  attn_case cases[] = {
    {2, 3, 17, 17, 13, 11, true, true},
    {2, 1, 17, 17, 13, 13, false, true},
    {1, 2, 5, 17, 13, 7, true, false},    /* T < S: queries see the S - T earlier keys too */
    {1, 1, 17, 5, 3, 3, true, false},     /* T > S: the first 12 queries see no key: zeros */
    {3, 1, 1, 1, 1, 1, true, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const attn_case *c = &cases[i];
    attn_graph a;
    nnc_schedule s;
    nnc_ref rg, rs;
    build_attention(&a, c);
    attention_schedule(&a, c, &s, c->causal, 1 / sqrt((double)c->D));
    double e = graph_vs_schedule(&a.g, &s, NULL, 7 + i, a.out, &rg, &rs);
    if (e > 1e-12) print_message("case %zu: rel error %g\n", i, e);
    assert_true(e <= 1e-12);
    /* the internal scores and probabilities were never stored */
    for (int n = 0; n < a.nnodes - 1; n++) assert_null(rs.val[a.g.nodes[a.nodes[n]].out[0]]);
    if (c->T > c->S) {
      for (int64_t x = 0; x < (c->T - c->S) * c->Dv; x++) assert_true(rs.val[a.out][x] == 0);
      assert_true(rs.val[a.out][(c->T - c->S) * c->Dv] != 0);
    }
    nnc_ref_free(&rg);
    nnc_ref_free(&rs);
    nnc_schedule_free(&s);
    nnc_graph_free(&a.g);
  }
}

static void test_attention_descriptor_matters(void **state) {
  attn_case c = {2, 2, 9, 9, 5, 5, true, true};
  attn_graph a;
  nnc_schedule s;
  nnc_ref rg, rs;
  build_attention(&a, &c);
  /* a descriptor that forgot the causal mask, or the scale, differs from the graph */
  attention_schedule(&a, &c, &s, false, 1 / sqrt(5.0));
  assert_true(graph_vs_schedule(&a.g, &s, NULL, 1, a.out, &rg, &rs) > 1e-3);
  nnc_ref_free(&rg);
  nnc_ref_free(&rs);
  nnc_schedule_free(&s);
  attention_schedule(&a, &c, &s, true, 1.0);
  assert_true(graph_vs_schedule(&a.g, &s, NULL, 1, a.out, &rg, &rs) > 1e-3);
  nnc_ref_free(&rg);
  nnc_ref_free(&rs);

  /* a batch whose keys are all padding gives zeros in both */
  nnc_error err = {0};
  assert_int_equal(nnc_ref_init(&rg, &a.g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_init(&rs, &a.g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&rg, 5, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&rs, 5, &err), NNC_OK);
  for (int j = 0; j < 9; j++) rg.val[a.mask][9 + j] = rs.val[a.mask][9 + j] = 0;
  run_graph_ok(&rg);
  s.k[0].d.attn.scale = 1 / sqrt(5.0);
  assert_int_equal(nnc_ref_run_schedule(&rs, &s, &err), NNC_OK);
  int64_t half = 2 * 9 * 5;
  for (int64_t x = half; x < 2 * half; x++) assert_true(rs.val[a.out][x] == 0 && rg.val[a.out][x] == 0);
  assert_true(nnc_ref_rel_error(rs.val[a.out], rg.val[a.out], 2 * half) <= 1e-12);
  nnc_ref_free(&rg);
  nnc_ref_free(&rs);
  nnc_schedule_free(&s);
  nnc_graph_free(&a.g);
}

typedef struct gemm_graph {
  nnc_graph g;
  int x, w, bias, gamma, beta, res, out;
  int nodes[6], nnodes;
  int internal[4], ninternal;
} gemm_graph;

/* x [2,5,7] -> norm -> linear (weight [9,7], or [7,9] in_out) -> act -> + res */
static void build_gemm(gemm_graph *m, nnc_op norm, bool in_out, nnc_op act, bool tanh) {
  nnc_graph *g = &m->g;
  nnc_graph_init(g);
  m->nnodes = m->ninternal = 0;
  m->x = input(g, "x", NNC_F32, 3, DIMS(2, 5, 7));
  m->w = in_out ? param(g, "fc.weight", 2, DIMS(7, 9)) : param(g, "fc.weight", 2, DIMS(9, 7));
  m->bias = param(g, "fc.bias", 1, DIMS(9));
  m->gamma = param(g, "ln.weight", 1, DIMS(7));
  m->beta = norm == NNC_OP_LAYERNORM ? param(g, "ln.bias", 1, DIMS(7)) : -1;
  m->res = input(g, "res", NNC_F32, 3, DIMS(2, 5, 9));
  int h = m->x;
  if (norm != NNC_OP_NONE) {
    h = norm == NNC_OP_LAYERNORM ? op(g, norm, 3, IDS(h, m->gamma, m->beta), &(nnc_attrs){.eps = 1e-5}, 3, DIMS(2, 5, 7))
                                 : op(g, norm, 2, IDS(h, m->gamma), &(nnc_attrs){.eps = 1e-5}, 3, DIMS(2, 5, 7));
    m->nodes[m->nnodes++] = g->nnodes - 1;
    m->internal[m->ninternal++] = h;
  }
  h = op(g, NNC_OP_LINEAR, 3, IDS(h, m->w, m->bias), &(nnc_attrs){.weight_in_out = in_out}, 3, DIMS(2, 5, 9));
  m->nodes[m->nnodes++] = g->nnodes - 1;
  m->internal[m->ninternal++] = h;
  h = op(g, act, 1, IDS(h), &(nnc_attrs){.gelu_tanh = tanh}, 3, DIMS(2, 5, 9));
  m->nodes[m->nnodes++] = g->nnodes - 1;
  m->internal[m->ninternal++] = h;
  m->out = op(g, NNC_OP_ADD, 2, IDS(h, m->res), NULL, 3, DIMS(2, 5, 9));
  m->nodes[m->nnodes++] = g->nnodes - 1;
}

static void gemm_schedule(gemm_graph *m, nnc_schedule *s, nnc_norm norm, bool in_out, nnc_op act, bool tanh) {
  nnc_schedule_init(s, &m->g);
  int ins[6] = {m->x, m->w, m->bias, m->gamma, m->res, m->beta};
  int ki = kernel(s, NNC_KERNEL_GEMM, m->nnodes, m->nodes, m->beta >= 0 ? 6 : 5, ins, 1, IDS(m->out));
  s->k[ki].d.gemm = (nnc_gemm_desc){.a = m->x, .b = m->w, .bias = m->bias, .residual = m->res, .out = m->out,
                                    .b_trans = !in_out, .prologue = norm, .norm_gamma = m->gamma,
                                    .norm_beta = m->beta, .norm_eps = 1e-5, .act = act, .gelu_tanh = tanh,
                                    .alpha = 1};
}

static void test_gemm_fused(void **state) {
  struct { nnc_op norm; nnc_norm pro; bool in_out; nnc_op act; bool tanh; } cases[] = {
    {NNC_OP_LAYERNORM, NNC_NORM_LAYER, false, NNC_OP_GELU, false},
    {NNC_OP_RMSNORM, NNC_NORM_RMS, true, NNC_OP_GELU, true},
    {NNC_OP_NONE, NNC_NORM_NONE, false, NNC_OP_SILU, false},
    {NNC_OP_LAYERNORM, NNC_NORM_LAYER, true, NNC_OP_RELU, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gemm_graph m;
    nnc_schedule s;
    nnc_ref rg, rs;
    build_gemm(&m, cases[i].norm, cases[i].in_out, cases[i].act, cases[i].tanh);
    gemm_schedule(&m, &s, cases[i].pro, cases[i].in_out, cases[i].act, cases[i].tanh);
    double e = graph_vs_schedule(&m.g, &s, NULL, 11 + i, m.out, &rg, &rs);
    if (e > 1e-12) print_message("case %zu: rel error %g\n", i, e);
    assert_true(e <= 1e-12);
    for (int j = 0; j < m.ninternal; j++) assert_null(rs.val[m.internal[j]]);
    nnc_ref_free(&rg);
    nnc_ref_free(&rs);
    /* the same descriptor without its prologue, or with another activation, differs */
    if (cases[i].pro != NNC_NORM_NONE) s.k[0].d.gemm.prologue = NNC_NORM_NONE;
    else s.k[0].d.gemm.act = NNC_OP_RELU;
    assert_true(graph_vs_schedule(&m.g, &s, NULL, 11 + i, m.out, &rg, &rs) > 1e-3);
    nnc_ref_free(&rg);
    nnc_ref_free(&rs);
    nnc_schedule_free(&s);
    nnc_graph_free(&m.g);
  }
}

static void test_gemm_alpha_batched(void **state) {
  /* scores = (q . k) * 0.25 as a batched GEMM with broadcast batch dims */
  nnc_graph g;
  nnc_graph_init(&g);
  int a = input(&g, "a", NNC_F32, 4, DIMS(2, 3, 5, 7));
  int b = input(&g, "b", NNC_F32, 3, DIMS(3, 7, 9));
  int mm = op(&g, NNC_OP_MATMUL, 2, IDS(a, b), NULL, 4, DIMS(2, 3, 5, 9));
  int y = op(&g, NNC_OP_MUL_S, 1, IDS(mm), &(nnc_attrs){.scalar = 0.25}, 4, DIMS(2, 3, 5, 9));
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  int ki = kernel(&s, NNC_KERNEL_GEMM, 2, IDS(0, 1), 2, IDS(a, b), 1, IDS(y));
  s.k[ki].d.gemm = (nnc_gemm_desc){.a = a, .b = b, .bias = -1, .residual = -1, .out = y, .norm_gamma = -1,
                                   .norm_beta = -1, .act = NNC_OP_NONE, .alpha = 0.25};
  nnc_ref rg, rs;
  assert_true(graph_vs_schedule(&g, &s, NULL, 3, y, &rg, &rs) <= 1e-13);
  assert_null(rs.val[mm]);
  nnc_ref_free(&rg);
  nnc_ref_free(&rs);
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
}

static void test_elementwise_kernel(void **state) {
  /* out = (gelu((x[3,1] + y[1,5]) * 2) - z[5]), with relu(x) as a second, smaller output,
   * then causal and padding masks on scores [2,3,5] */
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 2, DIMS(3, 1));
  int y = input(&g, "y", NNC_F32, 2, DIMS(1, 5));
  int z = input(&g, "z", NNC_F32, 1, DIMS(5));
  int rx = op(&g, NNC_OP_RELU, 1, IDS(x), NULL, 2, DIMS(3, 1));
  int t1 = op(&g, NNC_OP_ADD, 2, IDS(rx, y), NULL, 2, DIMS(3, 5));
  int t2 = op(&g, NNC_OP_MUL_S, 1, IDS(t1), &(nnc_attrs){.scalar = 2}, 2, DIMS(3, 5));
  int t3 = op(&g, NNC_OP_GELU, 1, IDS(t2), NULL, 2, DIMS(3, 5));
  int out = op(&g, NNC_OP_SUB, 2, IDS(t3, z), NULL, 2, DIMS(3, 5));
  int sc = input(&g, "scores", NNC_F32, 3, DIMS(2, 3, 5));
  int mask = input(&g, "mask", NNC_F32, 2, DIMS(2, 5));
  int m1 = op(&g, NNC_OP_SUB, 2, IDS(sc, out), NULL, 3, DIMS(2, 3, 5));
  int m2 = op(&g, NNC_OP_CAUSAL_MASK, 1, IDS(m1), NULL, 3, DIMS(2, 3, 5));
  int m3 = op(&g, NNC_OP_PADDING_MASK, 2, IDS(m2, mask), NULL, 3, DIMS(2, 3, 5));
  int m4 = op(&g, NNC_OP_EXP, 1, IDS(m3), NULL, 3, DIMS(2, 3, 5));
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  kernel(&s, NNC_KERNEL_ELEMENTWISE, 5, IDS(0, 1, 2, 3, 4), 3, IDS(x, y, z), 2, IDS(out, rx));
  kernel(&s, NNC_KERNEL_ELEMENTWISE, 4, IDS(5, 6, 7, 8), 3, IDS(sc, out, mask), 1, IDS(m4));
  nnc_ref rg, rs;
  assert_true(graph_vs_schedule(&g, &s, NULL, 9, m4, &rg, &rs) <= 1e-15);
  assert_true(nnc_ref_rel_error(rs.val[out], rg.val[out], 15) <= 1e-15);
  assert_true(nnc_ref_rel_error(rs.val[rx], rg.val[rx], 3) == 0);
  int zeros = 0;
  for (int i = 0; i < 30; i++) zeros += rg.val[m4][i] == 0;
  assert_true(zeros >= 6);   /* the causal mask hides 3 of the 15 scores of each batch */
  int gone[] = {t1, t2, t3, m1, m2, m3};
  for (int i = 0; i < 6; i++) assert_null(rs.val[gone[i]]);
  nnc_ref_free(&rg);
  nnc_ref_free(&rs);
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
}

static void test_node_kernels(void **state) {
  /* embedding -> reshape -> transpose -> softmax -> sum, and a loss: one kernel each */
  nnc_graph g;
  nnc_graph_init(&g);
  int tab = param(&g, "wte", 2, DIMS(11, 6));
  int ids = input(&g, "tokens", NNC_I32, 2, DIMS(3, 5));
  int tg = input(&g, "targets", NNC_I32, 1, DIMS(15));
  int e = op(&g, NNC_OP_EMBEDDING, 2, IDS(tab, ids), NULL, 3, DIMS(3, 5, 6));
  int v = op(&g, NNC_OP_RESHAPE, 1, IDS(e), NULL, 2, DIMS(15, 6));
  int t = op(&g, NNC_OP_TRANSPOSE, 1, IDS(v), &(nnc_attrs){.perm = {1, 0}}, 2, DIMS(6, 15));
  int sm = op(&g, NNC_OP_SOFTMAX, 1, IDS(t), &(nnc_attrs){.axis = 0}, 2, DIMS(6, 15));
  int su = op(&g, NNC_OP_SUM, 1, IDS(sm), &(nnc_attrs){.axis = 0}, 1, DIMS(15));
  int ce = op(&g, NNC_OP_CROSS_ENTROPY, 2, IDS(v, tg), NULL, 0, DIMS(0));
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  kernel(&s, NNC_KERNEL_GATHER, 1, IDS(0), 2, IDS(tab, ids), 1, IDS(e));
  kernel(&s, NNC_KERNEL_VIEW, 1, IDS(1), 1, IDS(e), 1, IDS(v));
  kernel(&s, NNC_KERNEL_MOVE, 1, IDS(2), 1, IDS(v), 1, IDS(t));
  kernel(&s, NNC_KERNEL_ROW, 1, IDS(3), 1, IDS(t), 1, IDS(sm));
  kernel(&s, NNC_KERNEL_REDUCE, 1, IDS(4), 1, IDS(sm), 1, IDS(su));
  kernel(&s, NNC_KERNEL_LOSS, 1, IDS(5), 2, IDS(v, tg), 1, IDS(ce));
  nnc_ref rg, rs;
  assert_true(graph_vs_schedule(&g, &s, NULL, 4, ce, &rg, &rs) == 0);
  assert_true(nnc_ref_rel_error(rs.val[su], rg.val[su], 15) == 0);
  for (int i = 0; i < 15; i++) assert_true(fabs(rs.val[su][i] - 1) < 1e-15);   /* columns of a softmax */
  assert_true(rs.val[ce][0] > 0);
  nnc_ref_free(&rg);
  nnc_ref_free(&rs);

  /* a ROW kernel covering softmax and sum that exposes only the sum frees the softmax */
  nnc_schedule s2;
  nnc_schedule_init(&s2, &g);
  kernel(&s2, NNC_KERNEL_GATHER, 1, IDS(0), 2, IDS(tab, ids), 1, IDS(e));
  kernel(&s2, NNC_KERNEL_VIEW, 1, IDS(1), 1, IDS(e), 1, IDS(v));
  kernel(&s2, NNC_KERNEL_MOVE, 1, IDS(2), 1, IDS(v), 1, IDS(t));
  kernel(&s2, NNC_KERNEL_ROW, 2, IDS(3, 4), 1, IDS(t), 1, IDS(su));
  assert_true(graph_vs_schedule(&g, &s2, NULL, 4, su, &rg, &rs) == 0);
  assert_null(rs.val[sm]);
  assert_null(rs.val[ce]);
  nnc_ref_free(&rg);
  nnc_ref_free(&rs);
  nnc_schedule_free(&s2);
  nnc_schedule_free(&s);
  nnc_graph_free(&g);
}

static void test_schedule_errors(void **state) {
  nnc_graph g;
  nnc_error err = {0};
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 1, DIMS(3));
  int a = op(&g, NNC_OP_EXP, 1, IDS(x), NULL, 1, DIMS(3));
  int b = op(&g, NNC_OP_NEG, 1, IDS(a), NULL, 1, DIMS(3));
  int c = op(&g, NNC_OP_ADD, 2, IDS(b, a), NULL, 1, DIMS(3));
  nnc_ref r;
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r, 1, &err), NNC_OK);

  /* the second kernel reads a, which the first kept internal */
  nnc_schedule s;
  nnc_schedule_init(&s, &g);
  kernel(&s, NNC_KERNEL_ELEMENTWISE, 2, IDS(0, 1), 1, IDS(x), 1, IDS(b));
  kernel(&s, NNC_KERNEL_ELEMENTWISE, 1, IDS(2), 2, IDS(b, a), 1, IDS(c));
  assert_int_equal(nnc_ref_run_schedule(&r, &s, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "kernel 1 (elementwise)"));
  assert_non_null(strstr(err.msg, "exp (input of add) to hold a value"));
  assert_null(r.val[a]);
  nnc_schedule_free(&s);

  /* a kernel that reads a tensor it does not list as an input */
  nnc_schedule_init(&s, &g);
  kernel(&s, NNC_KERNEL_ELEMENTWISE, 2, IDS(0, 1), 1, IDS(x), 2, IDS(a, b));
  kernel(&s, NNC_KERNEL_ELEMENTWISE, 1, IDS(2), 1, IDS(b), 1, IDS(c));
  assert_int_equal(nnc_ref_run_schedule(&r, &s, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "among the kernel's inputs"));
  s.k[1].in[s.k[1].nin++] = a;
  assert_int_equal(nnc_ref_run_schedule(&r, &s, &err), NNC_OK);
  assert_true(r.val[c][0] == 0 && r.val[c][2] == 0);   /* -exp(x) + exp(x) */
  nnc_schedule_free(&s);

  /* an output no node of the kernel computes stays unwritten */
  nnc_schedule_init(&s, &g);
  kernel(&s, NNC_KERNEL_ROW, 1, IDS(0), 1, IDS(x), 2, IDS(a, b));
  assert_int_equal(nnc_ref_run_schedule(&r, &s, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "unwritten"));
  nnc_schedule_free(&s);

  /* a GEMM whose descriptor names an operand it does not list (r sized for the new tensors) */
  nnc_ref_free(&r);
  int w = param(&g, "w", 2, DIMS(2, 3));
  int l = op(&g, NNC_OP_LINEAR, 2, IDS(x, w), NULL, 1, DIMS(2));
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r, 1, &err), NNC_OK);
  nnc_schedule_init(&s, &g);
  int ki = kernel(&s, NNC_KERNEL_GEMM, 1, IDS(3), 1, IDS(x), 1, IDS(l));
  s.k[ki].d.gemm = (nnc_gemm_desc){.a = x, .b = w, .bias = -1, .residual = -1, .out = l, .b_trans = true,
                                   .norm_gamma = -1, .norm_beta = -1, .alpha = 1};
  assert_int_equal(nnc_ref_run_schedule(&r, &s, &err), NNC_E_INTERNAL);
  assert_non_null(strstr(err.msg, "w (input of linear) among the kernel's inputs"));
  s.k[ki].in[s.k[ki].nin++] = w;
  assert_int_equal(nnc_ref_run_schedule(&r, &s, &err), NNC_OK);
  /* rank-1 A: out[n] = w[n,:] . x */
  for (int n = 0; n < 2; n++) {
    double dot = 0;
    for (int k = 0; k < 3; k++) dot += r.val[w][n * 3 + k] * r.val[x][k];
    assert_true(fabs(r.val[l][n] - dot) < 1e-15);
  }
  nnc_schedule_free(&s);
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

static void test_empty_tensors(void **state) {
  nnc_graph g;
  nnc_graph_init(&g);
  int x = input(&g, "x", NNC_F32, 2, DIMS(0, 3));
  int w = param(&g, "w", 2, DIMS(2, 3));
  int l = op(&g, NNC_OP_LINEAR, 2, IDS(x, w), NULL, 2, DIMS(0, 2));
  int sm = op(&g, NNC_OP_SOFTMAX, 1, IDS(l), &(nnc_attrs){.axis = 1}, 2, DIMS(0, 2));
  int e = op(&g, NNC_OP_EXP, 1, IDS(sm), NULL, 2, DIMS(0, 2));
  int k0 = input(&g, "k0", NNC_F32, 2, DIMS(2, 0));
  int z = op(&g, NNC_OP_LINEAR, 2, IDS(k0, param(&g, "w0", 2, DIMS(4, 0))), NULL, 2, DIMS(2, 4));
  nnc_ref r;
  nnc_error err = {0};
  assert_int_equal(nnc_ref_init(&r, &g, NULL, &err), NNC_OK);
  assert_int_equal(nnc_ref_random_inputs(&r, 3, &err), NNC_OK);
  run_graph_ok(&r);
  assert_int_equal(nnc_ref_elems(&r, e), 0);
  expect_values(&r, z, VALS(0, 0, 0, 0, 0, 0, 0, 0), 8, 0);   /* an empty sum */
  nnc_ref_free(&r);
  nnc_graph_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_unary_values),
    cmocka_unit_test(test_cast),
    cmocka_unit_test(test_broadcast),
    cmocka_unit_test(test_masks),
    cmocka_unit_test(test_linear_matmul),
    cmocka_unit_test(test_softmax_norms),
    cmocka_unit_test(test_reductions),
    cmocka_unit_test(test_moves),
    cmocka_unit_test(test_im2col),
    cmocka_unit_test(test_rope),
    cmocka_unit_test(test_embedding),
    cmocka_unit_test(test_cross_entropy),
    cmocka_unit_test(test_missing_and_bad_sizes),
    cmocka_unit_test(test_round),
    cmocka_unit_test(test_store_rounding),
    cmocka_unit_test(test_rel_error),
    cmocka_unit_test(test_cosine),
    cmocka_unit_test(test_top1_agree),
    cmocka_unit_test(test_random_inputs),
    cmocka_unit_test(test_attention_streaming),
    cmocka_unit_test(test_attention_descriptor_matters),
    cmocka_unit_test(test_gemm_fused),
    cmocka_unit_test(test_gemm_alpha_batched),
    cmocka_unit_test(test_elementwise_kernel),
    cmocka_unit_test(test_node_kernels),
    cmocka_unit_test(test_schedule_errors),
    cmocka_unit_test(test_empty_tensors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
