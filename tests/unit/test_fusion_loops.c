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
 * row kernel (row_loops), and so does one whose chain's value is also an
 * output (a side output); rows longer than NNC_ROW_LOOP_COLS do not. A sum takes the chain before it
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
    /* the relu is an output too: the row kernel stores it as a side output */
    assert_int_equal(kernel_of_tensor(&s, rms)->nnodes, on ? 2 : 1);
    assert_int_equal(kernel_of_tensor(&s, shared) == kernel_of_tensor(&s, rms), on);
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

/* The index of t among k's outputs, or -1. */
static int out_index(const nnc_kernel *k, int t) {
  for (int i = 0; i < k->nout; i++)
    if (k->out[i] == t) return i;
  return -1;
}

static void fuse_with(tb *b, nnc_schedule *s, const nnc_compile_opts *co) {
  nnc_error err = {0};
  nnc_schedule_init(s, &b->g);
  if (nnc_pass_fuse(&b->g, co, s, &err)) fail_msg("fuse: %s", err.msg);
  check_structure(s);
}

/* BERT's end: the last hidden state is an output (through ops on it: a relu
 * and a scale, the second an output) and the mean pooling reads it; the
 * pooling's reduce kernel computes both ops as it reads each element once
 * and writes their result as a side output, the relu staying inside.
 * Without reduce_loops they are kernels of their own. */
static void test_reduce_side_outputs(void **state) {
  (void)state;
  for (int on = 0; on < 2; on++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 3), T = sym(&b, "T", 9);
    int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(24)});
    int m = input(&b, "m", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(1)});
    int r = op1(&b, NNC_OP_RELU, x);
    int hidden = ops(&b, NNC_OP_MUL_S, r, 0.5);
    nnc_attrs ax = {.axis = 1};
    int num = out0(&b, node(&b, NNC_OP_SUM, 1, (int[]){op2(&b, NNC_OP_MUL, x, m)}, &ax, 1, 0, NULL));
    int den = out0(&b, node(&b, NNC_OP_SUM, 1, &m, &ax, 1, 0, NULL));
    int pooled = op1(&b, NNC_OP_NEG, op2(&b, NNC_OP_DIV, num, den));
    /* after the pooling in the graph, as --precision's output casts come: it still runs in the prologue */
    nnc_attrs to = {.to = NNC_F16};
    int half = out0(&b, node(&b, NNC_OP_CAST, 1, &x, &to, 1, 0, NULL));
    output(&b, "hidden", hidden);
    output(&b, "pooled", pooled);
    output(&b, "half", half);
    nnc_compile_opts co = {.reduce_loops = on};
    fuse_with(&b, &s, &co);
    const nnc_kernel *k = kernel_of_tensor(&s, pooled);
    if (on) {
      assert_int_equal(s.nk, 2);   /* sum(m), then the pooling with its side outputs */
      assert_int_equal(k->kind, NNC_KERNEL_REDUCE);
      assert_int_equal(k->nnodes, 7);   /* relu, mul_scalar, mul, cast, sum, div, neg */
      assert_int_equal(k->nout, 3);
      assert_int_equal(k->out[0], pooled);
      assert_true(out_index(k, hidden) > 0 && out_index(k, half) > 0);
      assert_int_equal(out_index(k, r), -1);   /* read only inside */
      assert_int_equal(b.g.nodes[k->nodes[k->nnodes - 1]].op, NNC_OP_NEG);
      assert_int_equal(kernel_of_tensor(&s, half), k);
    } else {
      assert_int_not_equal(kernel_of_tensor(&s, hidden), k);
    }
    check_equivalent(&s, 5);
    done(&b, &s);
  }
}

/* The reduced tensor itself read elsewhere (x * m also an output and read
 * by a later op): the prologue still joins and stores it. */
static void test_reduce_shared_input(void **state) {
  (void)state;
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int B = sym(&b, "B", 3), T = sym(&b, "T", 9);
  int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(16)});
  int m = input(&b, "m", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(1)});
  int w = op2(&b, NNC_OP_MUL, op1(&b, NNC_OP_TANH, x), m);
  nnc_attrs ax = {.axis = 2};
  int mx = ops(&b, NNC_OP_MUL_S, out0(&b, node(&b, NNC_OP_MAX, 1, &w, &ax, 1, 0, NULL)), 3.0);
  int later = op2(&b, NNC_OP_SUB, w, x);
  output(&b, "w", w);
  output(&b, "mx", mx);
  output(&b, "later", later);
  nnc_compile_opts co = {.reduce_loops = true};
  fuse_with(&b, &s, &co);
  const nnc_kernel *k = kernel_of_tensor(&s, mx);
  assert_int_equal(k->kind, NNC_KERNEL_REDUCE);
  assert_int_equal(kernel_of_tensor(&s, w), k);
  assert_true(out_index(k, w) > 0);
  /* the later op reads w and x, both in the loop: a side output too */
  assert_int_equal(kernel_of_tensor(&s, later), k);
  assert_int_equal(s.nk, 1);
  check_equivalent(&s, 5);
  done(&b, &s);
}

/* What must not join a reduce kernel as a side output: a value of another
 * shape than the reduced tensor (an op on the mask); a value whose reader
 * the kernel waits for (the other sum the pooling divides by reads it: a
 * cycle); a value with one reader outside, whose chain takes it instead;
 * and the reduced tensor when a node before the kernel's end reads it. */
static void test_reduce_side_not_fused(void **state) {
  (void)state;
  nnc_compile_opts co = {.reduce_loops = true};
  nnc_attrs ax = {.axis = 1};
  tb b;
  nnc_schedule s;
  /* another shape, and one reader outside */
  tb_init(&b);
  int B = sym(&b, "B", 3), T = sym(&b, "T", 9);
  int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(24)});
  int m = input(&b, "m", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(1)});
  int y = input(&b, "y", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(24)});
  int pooled = out0(&b, node(&b, NNC_OP_SUM, 1, (int[]){op2(&b, NNC_OP_MUL, x, m)}, &ax, 1, 0, NULL));
  int mr = op1(&b, NNC_OP_RELU, m);                    /* [B, T, 1] */
  int e = op1(&b, NNC_OP_EXP, x);                      /* read once, by the add below (with y) */
  int ey = op2(&b, NNC_OP_ADD, e, y);
  output(&b, "pooled", pooled);
  output(&b, "mr", mr);
  output(&b, "ey", ey);
  fuse_with(&b, &s, &co);
  const nnc_kernel *k = kernel_of_tensor(&s, pooled);
  assert_int_equal(k->nout, 1);
  assert_int_not_equal(kernel_of_tensor(&s, mr), k);
  assert_int_not_equal(kernel_of_tensor(&s, e), k);
  assert_int_equal(kernel_of_tensor(&s, e), kernel_of_tensor(&s, ey));
  check_equivalent(&s, 4);
  done(&b, &s);

  /* a cycle: the pooling divides by a sum of the candidate */
  tb_init(&b);
  B = sym(&b, "B", 3), T = sym(&b, "T", 9);
  x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(24)});
  m = input(&b, "m", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(1)});
  int h = op1(&b, NNC_OP_RELU, x);
  int den = out0(&b, node(&b, NNC_OP_SUM, 1, &h, &ax, 1, 0, NULL));
  int num = out0(&b, node(&b, NNC_OP_SUM, 1, (int[]){op2(&b, NNC_OP_MUL, x, m)}, &ax, 1, 0, NULL));
  pooled = op2(&b, NNC_OP_DIV, num, den);
  output(&b, "h", h);
  output(&b, "pooled", pooled);
  fuse_with(&b, &s, &co);
  k = kernel_of_tensor(&s, pooled);
  assert_int_equal(k->kind, NNC_KERNEL_REDUCE);
  assert_int_equal(k->nout, 1);
  assert_int_not_equal(kernel_of_tensor(&s, h), k);
  check_equivalent(&s, 4);
  done(&b, &s);

  /* the reduced tensor read by a node before the kernel's last (its epilogue comes after that node) */
  tb_init(&b);
  B = sym(&b, "B", 3), T = sym(&b, "T", 9);
  x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(24)});
  m = input(&b, "m", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(1)});
  int w = op2(&b, NNC_OP_MUL, x, m);
  int sw = out0(&b, node(&b, NNC_OP_SUM, 1, &w, &ax, 1, 0, NULL));
  int early = out0(&b, node(&b, NNC_OP_SOFTMAX, 1, &w, &(nnc_attrs){.axis = 2}, 1, 0, NULL));
  pooled = ops(&b, NNC_OP_MUL_S, sw, 2.0);
  output(&b, "early", early);
  output(&b, "pooled", pooled);
  fuse_with(&b, &s, &co);
  k = kernel_of_tensor(&s, pooled);
  assert_int_equal(k->kind, NNC_KERNEL_REDUCE);
  assert_int_not_equal(kernel_of_tensor(&s, w), k);
  assert_int_equal(kernel_of_tensor(&s, w)->kind, NNC_KERNEL_ELEMENTWISE);
  check_equivalent(&s, 4);
  done(&b, &s);
}

/* A norm whose input chain is read elsewhere too: the row kernel stores the
 * chain's value (the later add reads it) unless a node before the norm
 * reads it. */
static void test_row_side_output(void **state) {
  (void)state;
  for (int early = 0; early < 2; early++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 3), T = sym(&b, "T", 9);
    int x = input(&b, "x", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(40)});
    int y = input(&b, "y", NNC_F32, 3, (nnc_dim[]){S(B), S(T), K(40)});
    int g = param(&b, "g", 1, (nnc_dim[]){K(40)}), be = param(&b, "be", 1, (nnc_dim[]){K(40)});
    int e = op1(&b, NNC_OP_TANH, op2(&b, NNC_OP_ADD, ops(&b, NNC_OP_MUL_S, x, 2.0), y));
    int before = early ? op1(&b, NNC_OP_NEG, e) : -1;
    int ln = layernorm(&b, e, g, be, 1e-5);
    int res = op2(&b, NNC_OP_ADD, ln, e);
    output(&b, "res", res);
    if (early) output(&b, "before", before);
    nnc_compile_opts co = {.row_loops = true};
    fuse_with(&b, &s, &co);
    const nnc_kernel *k = kernel_of_tensor(&s, ln);
    assert_int_equal(k->kind, NNC_KERNEL_ROW);
    if (!early) {
      assert_int_equal(k->nnodes, 4);   /* mul_scalar, add, tanh, layernorm */
      assert_int_equal(k->nout, 2);
      assert_int_equal(k->out[1], e);
      assert_int_equal(s.nk, 2);
    } else {
      assert_int_equal(k->nnodes, 1);
      assert_int_not_equal(kernel_of_tensor(&s, e), k);
    }
    check_equivalent(&s, 5);
    done(&b, &s);
  }
}

/* GPT-2's first block: the embeddings' sum feeds ln_1, which a GEMM takes
 * as its prologue, and the residual. With gemm_norm_rows the norm moves
 * into the sum's kernel (a row kernel storing the sum for the residual and
 * the normalized rows for the GEMM, which reads them as they are); without,
 * the GEMM keeps it. A chain feeding a norm the GEMM keeps under a node
 * that reads the sum before the norm stays as it is. */
static void test_gemm_norm_into_chain(void **state) {
  (void)state;
  for (int on = 0; on < 2; on++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 3), T = sym(&b, "T", 9);
    int ids = input(&b, "ids", NNC_I32, 2, (nnc_dim[]){S(B), S(T)});
    int wte = param(&b, "wte", 2, (nnc_dim[]){K(29), K(32)});
    int pos = input(&b, "pos", NNC_F32, 2, (nnc_dim[]){S(T), K(32)});
    int g = param(&b, "g", 1, (nnc_dim[]){K(32)}), be = param(&b, "be", 1, (nnc_dim[]){K(32)});
    int w = param(&b, "w", 2, (nnc_dim[]){K(32), K(48)}), bias = param(&b, "bias", 1, (nnc_dim[]){K(48)});
    int w2 = param(&b, "w2", 2, (nnc_dim[]){K(48), K(32)});
    int emb = out0(&b, node(&b, NNC_OP_EMBEDDING, 2, (int[]){wte, ids}, NULL, 1, 0, NULL));
    int x = op2(&b, NNC_OP_ADD, emb, pos);
    int ln = layernorm(&b, x, g, be, 1e-5);
    int h = linear(&b, ln, w, bias, true);
    int res = op2(&b, NNC_OP_ADD, x, linear(&b, op1(&b, NNC_OP_RELU, h), w2, -1, true));
    output(&b, "res", res);
    nnc_compile_opts co = {.gather_loops = true, .row_loops = true, .gemm_norm_rows = on};
    fuse_with(&b, &s, &co);
    const nnc_kernel *kx = kernel_of_tensor(&s, x), *kh = kernel_of_tensor(&s, h);
    assert_int_equal(kh->kind, NNC_KERNEL_GEMM);
    assert_int_equal(s.nk, 3);
    if (on) {
      assert_int_equal(kx->kind, NNC_KERNEL_ROW);
      assert_int_equal(kx->nnodes, 3);   /* embedding, add, layernorm */
      assert_int_equal(kx->nout, 2);
      assert_int_equal(kx->out[0], ln);
      assert_int_equal(kx->out[1], x);
      assert_int_equal(kh->d.gemm.prologue, NNC_NORM_NONE);
      assert_int_equal(kh->d.gemm.a, ln);
      assert_int_equal(kh->nnodes, 2);   /* linear, relu */
    } else {
      assert_int_equal(kx->kind, NNC_KERNEL_ELEMENTWISE);
      assert_int_equal(kh->d.gemm.prologue, NNC_NORM_LAYER);
      assert_int_equal(kh->d.gemm.a, x);
    }
    check_equivalent(&s, 5);
    done(&b, &s);
  }
  /* the sum read before the norm (by an output op made first): the GEMM keeps its prologue */
  tb b;
  nnc_schedule s;
  tb_init(&b);
  int N = sym(&b, "N", 7);
  int x0 = input(&b, "x", NNC_F32, 2, (nnc_dim[]){S(N), K(16)});
  int g = param(&b, "g", 1, (nnc_dim[]){K(16)});
  int w = param(&b, "w", 2, (nnc_dim[]){K(16), K(8)});
  int x = op1(&b, NNC_OP_RELU, x0);
  int first = op1(&b, NNC_OP_NEG, x);
  int h = linear(&b, rmsnorm(&b, x, g, 1e-6), w, -1, true);
  output(&b, "first", first);
  output(&b, "h", h);
  nnc_compile_opts co = {.row_loops = true, .gemm_norm_rows = true};
  fuse_with(&b, &s, &co);
  assert_int_equal(kernel_of_tensor(&s, h)->d.gemm.prologue, NNC_NORM_RMS);
  assert_int_equal(kernel_of_tensor(&s, x)->kind, NNC_KERNEL_ELEMENTWISE);
  check_equivalent(&s, 4);
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
    cmocka_unit_test(test_reduce_side_outputs),
    cmocka_unit_test(test_reduce_shared_input),
    cmocka_unit_test(test_reduce_side_not_fused),
    cmocka_unit_test(test_row_side_output),
    cmocka_unit_test(test_gemm_norm_into_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
