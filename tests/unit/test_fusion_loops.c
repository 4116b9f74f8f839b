/* tests/unit/test_fusion_loops.c — the fusion pass's loops: elementwise
 * chains (which join, which must not), embedding lookups read inside them,
 * and chains inside the row and reduce kernels they feed; each fused
 * schedule against the unfused graph in float64 (fusion_build.h). */
#include "fusion_build.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_elementwise_chain),
    cmocka_unit_test(test_elementwise_not_fused),
    cmocka_unit_test(test_elementwise_square_and_long),
    cmocka_unit_test(test_elementwise_many_inputs),
    cmocka_unit_test(test_gather_in_loop),
    cmocka_unit_test(test_row_and_reduce_chains),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
