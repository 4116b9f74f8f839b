/* tests/unit/test_fusion.c — the fusion pass's attention, GEMM and single
 * kernels and a whole block: which kernels form from small graphs (kinds,
 * nodes, descriptors), which must not form, and that the fused schedule
 * computes what the unfused graph computes (the float64 reference, many
 * seeds, odd sizes, symbols anywhere from 1 to their maximum). The loops
 * and chains: test_fusion_loops.c; the builder: fusion_build.h. */
#include "fusion_build.h"

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
 * with a smaller bound, an f32 image where the target takes 16-bit ones
 * (CUDA's), or windows that a second reader needs stored; an f32 image
 * where the target takes f32 (C SIMD's) joins. */
static void test_gemm_windows(void **state) {
  (void)state;
  for (int c = 0; c < 5; c++) {
    bool f32 = c == 2 || c == 4, shared = c == 3;
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
    nnc_compile_opts co = {.gemm_windows = c == 1 ? 16 : 128,
                           .gemm_windows_types = c == 4 ? 1u << NNC_F32 : 1u << NNC_BF16 | 1u << NNC_F16};
    nnc_schedule_init(&s, &b.g);
    if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
    check_structure(&s);
    const nnc_kernel *k = kernel_of_tensor(&s, y);
    assert_int_equal(k->kind, NNC_KERNEL_GEMM);
    bool windowed = c == 0 || c == 4;
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

/* A convolution (f32, its windows gathered: C SIMD's rules), relu and a
 * max pool of 2 x 3 windows over its 6 x 9 result: with
 * nnc_compile_opts.gemm_pool the pool joins the GEMM (pooled, out the
 * pool's result) and the schedule, through the float64 reference, computes
 * what the graph does; not without the option, for a pool of stride 1
 * (overlapping windows), or when the result is also a graph output. */
static void test_gemm_pool(void **state) {
  (void)state;
  for (int c = 0; c < 4; c++) {
    tb b;
    nnc_schedule s;
    tb_init(&b);
    int B = sym(&b, "B", 2);
    int x = input(&b, "x", NNC_F32, 4, (nnc_dim[]){S(B), K(8), K(11), K(5)});
    nnc_attrs wa = {.win = {.kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 0, .pw = 0, .dh = 1, .dw = 1, .nhwc = true,
                            .tap_major = true}};
    int cols = out0(&b, node(&b, NNC_OP_IM2COL, 1, &x, &wa, 1, 0, NULL));
    int a = reshape(&b, cols, 4, (nnc_dim[]){S(B), K(6), K(9), K(45)});
    int w = param(&b, "conv.weight", 2, (nnc_dim[]){K(7), K(45)});
    int bias = param(&b, "conv.bias", 1, (nnc_dim[]){K(7)});
    int y = op1(&b, NNC_OP_RELU, linear(&b, a, w, bias, false));
    nnc_attrs pa = {.win = {.kh = 2, .kw = 3, .sh = c == 2 ? 1 : 2, .sw = c == 2 ? 1 : 3, .ph = 0, .pw = 0, .dh = 1,
                            .dw = 1, .nhwc = true, .tap_major = true},
                    .scalar = -INFINITY};
    int pcols = out0(&b, node(&b, NNC_OP_IM2COL, 1, &y, &pa, 1, 0, NULL));
    nnc_attrs ma = {.axis = 3};
    int p = out0(&b, node(&b, NNC_OP_MAX, 1, &pcols, &ma, 1, 0, NULL));
    output(&b, "p", p);
    if (c == 3) output(&b, "y", y);
    nnc_error err = {0};
    nnc_compile_opts co = {.gemm_windows = 1 << 20, .gemm_windows_types = 1u << NNC_F32, .channel_run = 1,
                           .gemm_pool = c != 1};
    nnc_schedule_init(&s, &b.g);
    if (nnc_pass_fuse(&b.g, &co, &s, &err)) fail_msg("fuse: %s", err.msg);
    check_structure(&s);
    const nnc_kernel *k = kernel_of_tensor(&s, y);
    assert_int_equal(k->kind, NNC_KERNEL_GEMM);
    assert_true(k->d.gemm.windowed);
    bool pooled = c == 0;
    assert_int_equal(k->d.gemm.pooled, pooled);
    assert_int_equal(kernel_of_tensor(&s, p) == k, pooled);
    if (pooled) {
      assert_int_equal(s.nk, 1);
      assert_int_equal(k->d.gemm.out, p);
      assert_int_equal(k->d.gemm.pool, b.g.tensors[pcols].producer);
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
  nnc_compile_opts co = {.gemm_windows = 128, .gemm_windows_types = 1u << NNC_BF16};
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
    cmocka_unit_test(test_gemm_pool),
    cmocka_unit_test(test_pool_windows),
    cmocka_unit_test(test_gemm_alpha_bias_rms_transpose),
    cmocka_unit_test(test_gemm_not_fused),
    cmocka_unit_test(test_single_kernels),
    cmocka_unit_test(test_dead_nodes),
    cmocka_unit_test(test_block_pipeline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
