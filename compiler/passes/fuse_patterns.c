/* compiler/passes/fuse_patterns.c — the fusion patterns, all in one table.
 *
 * The driver (fuse.c) tries the patterns in table order; for each pattern it
 * visits the free live nodes from the last to the first as anchors, so an
 * elementwise chain is grown from its sink and earlier patterns take their
 * nodes before later ones see them. A pattern only takes free nodes, and only
 * folds a value into a kernel when that value is read by one node of the
 * kernel and is not a graph output: then every kernel's visible output is
 * its last node's, and ordering kernels by their last node stays
 * topological. The exceptions are declared: a GEMM's saved aux and bias
 * gradient, and the side outputs of the row and reduce chains
 * (fuse_group.side), values their loops compute anyway that others read too,
 * whose readers outside all come after the kernel's last node (read_after),
 * so the order by last nodes stays topological with them. */
#include <math.h>
#include <string.h>

#include "fuse_match.h"

static const nnc_node *node_of(const fuse_ctx *c, int n) { return &c->g->nodes[n]; }
static const nnc_tensor *tensor_of(const fuse_ctx *c, int t) { return &c->g->tensors[t]; }

static void take(fuse_group *gr, int n) { gr->nodes[gr->nnodes++] = n; }

/* The producer of t when t may disappear into the kernel of its reader: t is
 * computed by a live free node with one output, read by exactly one node and
 * not a graph output. -1 otherwise. */
static int foldable_producer(const fuse_ctx *c, int t) {
  const nnc_tensor *x = tensor_of(c, t);
  if (x->kind != NNC_TENSOR_VALUE || x->producer < 0) return -1;
  int p = x->producer;
  const nnc_node *n = node_of(c, p);
  if (n->dead || n->nout != 1 || c->owner[p] >= 0) return -1;
  if (nnc_uses_count(&c->uses, t) != 1 || nnc_graph_is_output(c->g, t)) return -1;
  return p;
}

/* The one free node reading t, when t may disappear into that node's kernel. */
static int foldable_consumer(const fuse_ctx *c, int t) {
  if (nnc_uses_count(&c->uses, t) != 1 || nnc_graph_is_output(c->g, t)) return -1;
  int r = c->uses.node[c->uses.start[t]];
  return c->owner[r] >= 0 ? -1 : r;
}

/* How many of node n's inputs are t. */
static int reads(const nnc_node *n, int t) {
  int k = 0;
  for (int i = 0; i < n->nin; i++) k += n->in[i] == t;
  return k;
}

/* For a binary `op` node reading cur exactly once, its other operand; else -1. */
static int other_operand(const fuse_ctx *c, int n, nnc_op op, int cur) {
  const nnc_node *x = node_of(c, n);
  if (x->op != op || x->nin != 2 || reads(x, cur) != 1) return -1;
  return x->in[0] == cur ? x->in[1] : x->in[0];
}

static bool same_shape(const nnc_tensor *a, const nnc_tensor *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (!nnc_dim_eq(a->shape[i], b->shape[i])) return false;
  return true;
}

/* A transpose of a rank-`rank` tensor that swaps its last two axes only. */
static bool swaps_last_two(const nnc_node *n, int rank) {
  if (n->op != NNC_OP_TRANSPOSE || rank < 2) return false;
  for (int i = 0; i < rank - 2; i++)
    if (n->attrs.perm[i] != i) return false;
  return n->attrs.perm[rank - 2] == rank - 1 && n->attrs.perm[rank - 1] == rank - 2;
}

/* q, k and v of an attention kernel: one rank, the same batch dims, but
 * for grouped-query attention as sdpa writes it (dsl_attn.c): q
 * [B, ..., G, T, D] with k and v [B, ..., 1, S, D]. The kernels take B as
 * their batch (a padding mask's row) and every dim between as heads, query
 * head h reading the k and v of head h / G. */
static bool attention_operands_agree(const fuse_ctx *c, int q, int k, int v) {
  const nnc_tensor *tq = tensor_of(c, q), *tk = tensor_of(c, k), *tv = tensor_of(c, v);
  int r = tq->rank;
  if (r < 2 || tk->rank != r || tv->rank != r) return false;
  for (int i = 0; i < r - 2; i++) {
    if (nnc_dim_eq(tq->shape[i], tk->shape[i]) && nnc_dim_eq(tq->shape[i], tv->shape[i])) continue;
    if (i != r - 3 || i < 1 || !nnc_dim_eq_const(tk->shape[i], 1) || !nnc_dim_eq_const(tv->shape[i], 1)) return false;
  }
  return true;
}

/* softmax(masks(scale(q . transpose(k)))) . v, anchored at the softmax.
 * The two masks may come in either order (each sets entries to -inf, so
 * they commute); the scale must come before them. */
bool nnc_fuse_match_attention(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *sm = node_of(c, anchor);
  if (sm->op != NNC_OP_SOFTMAX || sm->attrs.axis != tensor_of(c, sm->in[0])->rank - 1) return false;
  int pv = foldable_consumer(c, sm->out[0]);
  if (pv < 0 || node_of(c, pv)->op != NNC_OP_MATMUL || node_of(c, pv)->in[0] != sm->out[0] ||
      node_of(c, pv)->in[1] == sm->out[0])
    return false;
  nnc_attention_desc d = {.q = -1, .k = -1, .v = node_of(c, pv)->in[1], .mask = -1, .lse = -1,
                          .out = node_of(c, pv)->out[0], .causal = false, .scale = 1.0};
  gr->nnodes = 0;
  take(gr, anchor);
  take(gr, pv);

  int t = sm->in[0], p = foldable_producer(c, t);
  bool padded = false;
  while (p >= 0) {
    const nnc_node *m = node_of(c, p);
    if (m->op == NNC_OP_CAUSAL_MASK && !d.causal) {
      d.causal = true;
    } else if (m->op == NNC_OP_PADDING_MASK && !padded && m->in[1] != m->in[0]) {
      padded = true;
      d.mask = m->in[1];
    } else {
      break;
    }
    take(gr, p);
    t = m->in[0];
    p = foldable_producer(c, t);
  }
  if (p >= 0 && (node_of(c, p)->op == NNC_OP_MUL_S || node_of(c, p)->op == NNC_OP_DIV_S)) {
    const nnc_node *sc = node_of(c, p);
    if (sc->op == NNC_OP_DIV_S && sc->attrs.scalar == 0) return false;
    d.scale = sc->op == NNC_OP_MUL_S ? sc->attrs.scalar : 1.0 / sc->attrs.scalar;
    take(gr, p);
    t = sc->in[0];
    p = foldable_producer(c, t);
  }
  if (p < 0 || node_of(c, p)->op != NNC_OP_MATMUL) return false;
  const nnc_node *qk = node_of(c, p);
  if (qk->in[0] == qk->in[1]) return false;
  int tr = foldable_producer(c, qk->in[1]);
  if (tr < 0 || !swaps_last_two(node_of(c, tr), tensor_of(c, node_of(c, tr)->in[0])->rank)) return false;
  d.q = qk->in[0];
  d.k = node_of(c, tr)->in[0];
  if (!attention_operands_agree(c, d.q, d.k, d.v)) return false;
  take(gr, p);
  take(gr, tr);
  gr->kind = NNC_KERNEL_ATTENTION;
  gr->main = anchor;   /* the softmax: where the attention's scores are normalised */
  gr->attn = d;
  return true;
}

/* The attention op and its gradient (--train, passes/attention_op.c): one
 * kernel each, their descriptors read off the node. */
static bool match_attention_op(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *n = node_of(c, anchor);
  if (nnc_op_info_of(n->op)->cls != NNC_CLASS_ATTENTION) return false;
  bool grad = n->op == NNC_OP_ATTENTION_GRAD;
  int mi = grad ? 6 : 3;
  nnc_attention_desc d = {.q = n->in[0], .k = n->in[1], .v = n->in[2], .mask = n->nin > mi ? n->in[mi] : -1,
                          .out = grad ? n->in[3] : n->out[0], .lse = grad ? n->in[4] : n->out[1],
                          .causal = n->attrs.causal, .scale = n->attrs.scalar};
  if (grad) {
    gr->attn_grad = (nnc_attention_grad_desc){.fwd = d, .dout = n->in[5], .dq = n->out[0], .dk = n->out[1],
                                              .dv = n->out[2]};
    gr->kind = NNC_KERNEL_ATTENTION_GRAD;
  } else {
    gr->attn = d;
    gr->kind = NNC_KERNEL_ATTENTION;
  }
  gr->nnodes = 0;
  take(gr, anchor);
  gr->main = anchor;
  return true;
}

/* A bias for a GEMM output `cur`: a rank-1 tensor of its last dim. */
static bool is_bias_for(const fuse_ctx *c, int bias, int cur) {
  const nnc_tensor *b = tensor_of(c, bias), *o = tensor_of(c, cur);
  return b->rank == 1 && o->rank >= 1 && nnc_dim_eq(b->shape[0], o->shape[o->rank - 1]) &&
         b->dtype == o->dtype;
}

/* cur's readers when they are an activation and that activation's
 * gradient reading cur as its input (a training step's MLP: the backward
 * needs the activation's input again): the activation node, else -1. */
static int act_with_grad(const fuse_ctx *c, int cur) {
  if (nnc_graph_is_output(c->g, cur)) return -1;
  /* besides the two, the activation's recomputed copy (--recompute) may
   * read an original cur: it is written out anyway */
  bool copy = node_of(c, c->g->tensors[cur].producer)->recompute;
  int a = -1, b = -1;
  for (int u = c->uses.start[cur]; u < c->uses.start[cur + 1]; u++) {
    int r = c->uses.node[u];
    if (node_of(c, r)->recompute && !copy) continue;
    if (a < 0) a = r;
    else if (b < 0) b = r;
    else return -1;
  }
  if (b < 0) return -1;
  if (!nnc_op_is_activation(node_of(c, a)->op)) {
    int t = a;
    a = b;
    b = t;
  }
  const nnc_node *act = node_of(c, a), *grad = node_of(c, b);
  if (!nnc_op_is_activation(act->op) || reads(act, cur) != 1 || c->owner[a] >= 0 || grad->op != NNC_OP_ACT_GRAD ||
      grad->in[0] != cur || grad->in[1] == cur || grad->attrs.act != act->op ||
      (act->op == NNC_OP_GELU && grad->attrs.gelu_tanh != act->attrs.gelu_tanh))
    return -1;
  return a;
}

/* A free sum over axis 0 of the rank-2 operand t into a vector of d's
 * output type, or -1. *cast gets the widening cast after it that --precision
 * puts before an f32 gradient when d writes f32 (its own cast folded), else
 * -1. */
static int column_sum_of(const fuse_ctx *c, const nnc_gemm_desc *d, int t, int *cast) {
  *cast = -1;
  if (tensor_of(c, t)->rank != 2) return -1;
  nnc_dtype want = tensor_of(c, d->out)->dtype;
  for (int u = c->uses.start[t]; u < c->uses.start[t + 1]; u++) {
    int r = c->uses.node[u];
    const nnc_node *n = node_of(c, r);
    if (n->op != NNC_OP_SUM || n->dead || n->recompute || c->owner[r] >= 0 || n->attrs.axis != 0 ||
        n->attrs.keepdim)
      continue;
    if (tensor_of(c, n->out[0])->dtype == want) return r;
    int w = foldable_consumer(c, n->out[0]);
    if (w >= 0 && node_of(c, w)->op == NNC_OP_CAST && tensor_of(c, node_of(c, w)->out[0])->dtype == want) {
      *cast = w;
      return r;
    }
  }
  return -1;
}

/* The bias gradient beside a weight gradient: the sum over the rows of dy
 * when dy is an operand stored with the GEMM's k along its rows (A folded
 * transposed: dW = dy^T x; or B as it is: dW = x^T dy), which the GEMM can
 * write from the dy it reads anyway. -1 when there is none or d has a
 * fusion that excludes it; *of_b says which operand, *cast is the sum's
 * widening cast or -1. */
static int bias_grad_of(const fuse_ctx *c, const nnc_gemm_desc *d, bool *of_b, int *cast) {
  *cast = -1;
  if (!c->gemm_bgrad || !d->a_trans || d->alpha != 1.0 || d->bias >= 0 || d->act != NNC_OP_NONE ||
      d->aux_kind != NNC_AUX_NONE || tensor_of(c, d->out)->rank != 2)
    return -1;
  int r = column_sum_of(c, d, d->a, cast);
  *of_b = r < 0;
  if (r < 0 && !d->b_trans) r = column_sum_of(c, d, d->b, cast);
  return r;
}

/* Whether the gathering of A's rows from an image, instead of the windows
 * tensor, fits the GEMM d of linear mm (nnc_compile_opts.gemm_windows): A
 * the [..., M, K] view of a tap-major NHWC im2col with zero padding, read
 * by mm alone; image, weight, bias, residual and out of one type, one of
 * c->gemm_windows_types (the target's: CUDA's bf16/f16, C SIMD's f32);
 * channels a multiple of c->channel_run (CUDA's 8: a 16-byte chunk never
 * spans two taps), N a multiple of it too and at most c->gemm_windows. The im2col node, or -1; *view
 * gets the reshape. */
static int windows_of(const fuse_ctx *c, const nnc_node *mm, const nnc_gemm_desc *d, int *view) {
  if (mm->op != NNC_OP_LINEAR || !d->b_trans || d->a_trans || d->prologue != NNC_NORM_NONE ||
      d->aux_kind != NNC_AUX_NONE || d->bgrad_from != NNC_BGRAD_NONE || d->residual_mul || reads(mm, d->a) != 1)
    return -1;
  if (d->act != NNC_OP_NONE && d->act != NNC_OP_RELU && d->act != NNC_OP_GELU && d->act != NNC_OP_SILU) return -1;
  *view = foldable_producer(c, d->a);
  if (*view < 0 || node_of(c, *view)->op != NNC_OP_RESHAPE) return -1;
  int w = foldable_producer(c, node_of(c, *view)->in[0]);
  if (w < 0) return -1;
  const nnc_node *im = node_of(c, w);
  const nnc_tensor *img = tensor_of(c, im->in[0]), *out = tensor_of(c, d->out);
  nnc_dtype t = img->dtype;
  if (im->op != NNC_OP_IM2COL || !im->attrs.win.nhwc || !im->attrs.win.tap_major || im->attrs.scalar != 0.0 ||
      img->rank != 4 || !(c->gemm_windows_types >> t & 1u) || tensor_of(c, d->b)->dtype != t || out->dtype != t ||
      (d->bias >= 0 && tensor_of(c, d->bias)->dtype != t) || (d->residual >= 0 && tensor_of(c, d->residual)->dtype != t))
    return -1;
  nnc_dim ch = img->shape[3], n = out->shape[out->rank - 1];
  if (!nnc_dim_is_const(ch) || ch.k % c->channel_run || !nnc_dim_is_const(n) || n.k % c->channel_run ||
      n.k > c->gemm_windows)
    return -1;
  return w;
}

/* Whether a max pool that alone reads the GEMM result cur fits the pooled
 * GEMM of linear mm (nnc_compile_opts.gemm_pool): cur an f32 NHWC image
 * [N, H, W, C] whose windows (the im2col `*pool`, read by the max over its
 * taps alone) have stride = kernel, no padding and dilation 1 and tile it
 * (H and W multiples of the kernel), with no residual, aux or bias
 * gradient in the GEMM. The max node, or -1. */
static int pool_of(const fuse_ctx *c, const nnc_node *mm, const nnc_gemm_desc *d, int cur, int *pool) {
  const nnc_tensor *y = tensor_of(c, cur);
  if (!c->gemm_pool || mm->op != NNC_OP_LINEAR || d->residual >= 0 || d->aux_kind != NNC_AUX_NONE ||
      d->bgrad_from != NNC_BGRAD_NONE || y->rank != 4 || y->dtype != NNC_F32)
    return -1;
  int im = foldable_consumer(c, cur);
  if (im < 0 || node_of(c, im)->op != NNC_OP_IM2COL) return -1;
  const nnc_window *w = &node_of(c, im)->attrs.win;
  const nnc_tensor *cols = tensor_of(c, node_of(c, im)->out[0]);
  if (!w->nhwc || !w->tap_major || node_of(c, im)->attrs.scalar != -INFINITY || w->sh != w->kh || w->sw != w->kw ||
      w->ph || w->pw || w->dh != 1 || w->dw != 1 || !nnc_dim_is_const(y->shape[1]) || !nnc_dim_is_const(y->shape[2]) ||
      !nnc_dim_eq_const(cols->shape[1], y->shape[1].k / w->kh) || y->shape[1].k % w->kh ||
      !nnc_dim_eq_const(cols->shape[2], y->shape[2].k / w->kw) || y->shape[2].k % w->kw)
    return -1;
  int m = foldable_consumer(c, node_of(c, im)->out[0]);
  if (m < 0 || node_of(c, m)->op != NNC_OP_MAX || node_of(c, m)->attrs.axis != 3 ||
      tensor_of(c, node_of(c, m)->out[0])->dtype != NNC_F32)
    return -1;
  *pool = im;
  return m;
}

/* linear / matmul with an optional norm prologue on A, a folded transpose of
 * a rank-2 A (a weight gradient's x^T: no copy of the activations) or B, and
 * the epilogue alpha, bias, activation, residual, widening
 * cast (each optional, in this order), anchored at the linear or matmul. */
static bool match_gemm(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *mm = node_of(c, anchor);
  if (mm->op != NNC_OP_LINEAR && mm->op != NNC_OP_MATMUL) return false;
  nnc_gemm_desc d = {.a = mm->in[0], .b = mm->in[1], .bias = -1, .residual = -1, .out = -1,
                     .b_trans = false, .prologue = NNC_NORM_NONE, .norm_gamma = -1,
                     .norm_beta = -1, .norm_eps = 0, .act = NNC_OP_NONE, .gelu_tanh = false,
                     .alpha = 1.0, .aux_kind = NNC_AUX_NONE, .aux = -1, .window = -1, .pool = -1};
  gr->nnodes = 0;
  take(gr, anchor);
  if (mm->op == NNC_OP_LINEAR) {
    d.b_trans = !mm->attrs.weight_in_out;   /* nn.Linear stores [N, K] */
    if (mm->nin == 3) d.bias = mm->in[2];
  } else if (reads(mm, mm->in[1]) == 1) {
    int tr = foldable_producer(c, mm->in[1]);
    if (tr >= 0 && tensor_of(c, node_of(c, tr)->in[0])->rank == 2 && swaps_last_two(node_of(c, tr), 2)) {
      d.b_trans = true;
      d.b = node_of(c, tr)->in[0];
      take(gr, tr);
    }
  }
  if (mm->op == NNC_OP_MATMUL && reads(mm, mm->in[0]) == 1 && tensor_of(c, mm->in[0])->rank == 2 &&
      tensor_of(c, mm->in[1])->rank == 2) {
    int tr = foldable_producer(c, mm->in[0]);
    if (tr >= 0 && swaps_last_two(node_of(c, tr), 2)) {
      d.a_trans = true;
      d.a = node_of(c, tr)->in[0];
      take(gr, tr);
    }
  }
  if (!d.a_trans && reads(mm, mm->in[0]) == 1) {
    int nm = foldable_producer(c, mm->in[0]);
    if (nm >= 0 && (node_of(c, nm)->op == NNC_OP_LAYERNORM || node_of(c, nm)->op == NNC_OP_RMSNORM)) {
      const nnc_node *norm = node_of(c, nm);
      d.prologue = norm->op == NNC_OP_LAYERNORM ? NNC_NORM_LAYER : NNC_NORM_RMS;
      d.a = norm->in[0];
      d.norm_gamma = norm->in[1];
      d.norm_beta = norm->op == NNC_OP_LAYERNORM ? norm->in[2] : -1;
      d.norm_eps = norm->attrs.eps;
      take(gr, nm);
    }
  }

  int cur = mm->out[0], r = foldable_consumer(c, cur), o;
  /* the product an activation's gradient multiplies (a training step's
   * dX before act_grad): out = act'(aux) * A.B */
  if (c->gemm_aux && r >= 0 && d.bias < 0 && node_of(c, r)->op == NNC_OP_ACT_GRAD && node_of(c, r)->in[1] == cur &&
      node_of(c, r)->in[0] != cur && same_shape(tensor_of(c, node_of(c, r)->in[0]), tensor_of(c, cur)) &&
      tensor_of(c, node_of(c, r)->in[0])->dtype == tensor_of(c, cur)->dtype) {
    const nnc_node *ag = node_of(c, r);
    d.act = ag->attrs.act;
    d.gelu_tanh = ag->attrs.gelu_tanh;
    d.aux_kind = NNC_AUX_ACT_GRAD;
    d.aux = ag->in[0];
    take(gr, r);
    d.out = ag->out[0];
    gr->kind = NNC_KERNEL_GEMM;
    gr->main = anchor;
    gr->gemm = d;
    return true;
  }
  if (r >= 0 && d.bias < 0 && node_of(c, r)->op == NNC_OP_MUL_S) {
    d.alpha = node_of(c, r)->attrs.scalar;
    take(gr, r);
    cur = node_of(c, r)->out[0];
    r = foldable_consumer(c, cur);
  }
  if (r >= 0 && d.bias < 0 && (o = other_operand(c, r, NNC_OP_ADD, cur)) >= 0 && is_bias_for(c, o, cur) &&
      same_shape(tensor_of(c, node_of(c, r)->out[0]), tensor_of(c, cur))) {
    d.bias = o;
    take(gr, r);
    cur = node_of(c, r)->out[0];
    r = foldable_consumer(c, cur);
  }
  int act;
  if (c->gemm_aux && r < 0 && (act = act_with_grad(c, cur)) >= 0) {
    /* the activation's input is written too, for its gradient */
    d.act = node_of(c, act)->op;
    d.gelu_tanh = d.act == NNC_OP_GELU && node_of(c, act)->attrs.gelu_tanh;
    d.aux_kind = NNC_AUX_SAVE;
    d.aux = cur;
    take(gr, act);
    d.out = node_of(c, act)->out[0];
    gr->kind = NNC_KERNEL_GEMM;
    gr->main = anchor;
    gr->gemm = d;
    return true;
  }
  if (r >= 0 && nnc_op_is_activation(node_of(c, r)->op)) {
    d.act = node_of(c, r)->op;
    d.gelu_tanh = d.act == NNC_OP_GELU && node_of(c, r)->attrs.gelu_tanh;
    take(gr, r);
    cur = node_of(c, r)->out[0];
    r = foldable_consumer(c, cur);
  }
  /* a residual made after the product (a tied weight's second gradient,
   * from the embedding's backward at the end) would hold the GEMM, and its
   * operands, until then: the add stays apart. A product with a tensor made
   * before is the same epilogue with a multiply (SwiGLU: silu(gate) * up,
   * in the up projection's GEMM). */
  bool mul = r >= 0 && node_of(c, r)->op == NNC_OP_MUL;
  if (r >= 0 && (o = other_operand(c, r, mul ? NNC_OP_MUL : NNC_OP_ADD, cur)) >= 0 && tensor_of(c, o)->producer < anchor &&
      same_shape(tensor_of(c, o), tensor_of(c, cur)) && tensor_of(c, o)->dtype == tensor_of(c, cur)->dtype) {
    d.residual = o;
    d.residual_mul = mul;
    take(gr, r);
    cur = node_of(c, r)->out[0];
    r = foldable_consumer(c, cur);
    /* an activation of the sum (ResNet's relu(conv + shortcut)) */
    if (!mul && c->gemm_act_last && d.act == NNC_OP_NONE && r >= 0 && nnc_op_is_activation(node_of(c, r)->op)) {
      d.act = node_of(c, r)->op;
      d.gelu_tanh = d.act == NNC_OP_GELU && node_of(c, r)->attrs.gelu_tanh;
      d.act_last = true;
      take(gr, r);
      cur = node_of(c, r)->out[0];
      r = foldable_consumer(c, cur);
    }
  }
  /* the cast of a narrow result to f32 that --precision puts before a model
   * output (the GPT-2 logits): the GEMM writes f32 itself, from its f32
   * accumulators; with neither bias nor residual, whose types follow the
   * narrow result */
  if (r >= 0 && node_of(c, r)->op == NNC_OP_CAST && d.bias < 0 && d.residual < 0 &&
      tensor_of(c, node_of(c, r)->out[0])->dtype == NNC_F32 &&
      (tensor_of(c, cur)->dtype == NNC_BF16 || tensor_of(c, cur)->dtype == NNC_F16)) {
    take(gr, r);
    cur = node_of(c, r)->out[0];
  }
  d.out = cur;
  int view, win = c->gemm_windows > 0 ? windows_of(c, mm, &d, &view) : -1;
  if (win >= 0) {
    d.windowed = true;
    d.window = win;
    take(gr, view);
    take(gr, win);
  }
  bool of_b;
  int bcast, bg = bias_grad_of(c, &d, &of_b, &bcast);
  if (bg >= 0) {
    d.bgrad_from = of_b ? NNC_BGRAD_B : NNC_BGRAD_A;
    d.bgrad = node_of(c, bcast >= 0 ? bcast : bg)->out[0];
    take(gr, bg);
    if (bcast >= 0) take(gr, bcast);
  }
  int pool, max = pool_of(c, mm, &d, d.out, &pool);
  if (max >= 0) {
    d.pooled = true;
    d.pool = pool;
    d.out = node_of(c, max)->out[0];
    take(gr, pool);
    take(gr, max);
  }
  gr->kind = NNC_KERNEL_GEMM;
  gr->main = anchor;   /* the linear or matmul */
  gr->gemm = d;
  return true;
}

/* Adds t to the set ext[0..*n) unless present; false when it would exceed cap. */
static bool add_external(int *ext, int *n, int cap, int t) {
  for (int i = 0; i < *n; i++)
    if (ext[i] == t) return true;
  if (*n == cap) return false;
  ext[(*n)++] = t;
  return true;
}

/* An embedding lookup that an elementwise loop can read in place of its
 * output: i32 ids, no vocabulary split (a rank's rows would need its
 * offset). The loop reads the table's row through the id of its element's
 * row (BERT's and GPT-2's embeddings summed: no kernel and no pass over
 * memory for each lookup). */
static bool gathers_in_loop(const fuse_ctx *c, int p) {
  const nnc_node *n = node_of(c, p);
  return c->gather_loops && n->op == NNC_OP_EMBEDDING && n->attrs.ranks <= 1 && tensor_of(c, n->in[1])->dtype == NNC_I32 &&
         tensor_of(c, n->in[0])->rank == 2 && tensor_of(c, n->in[0])->dtype != NNC_I32;
}

/* A tree of elementwise ops grown back from its sink (the anchor): a
 * producer joins when its output has the shape of its reader's output (no
 * broadcasting inside the loop) and the kernel still reads at most
 * NNC_MAX_IO tensors; so does an embedding lookup (gathers_in_loop), whose
 * table and ids are then read from outside. The set of tensors read from
 * outside is kept as the tree grows: a joining producer's output leaves it,
 * its inputs enter (they cannot be made inside, since every value inside
 * has its one reader there). */
static bool match_elementwise(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *sink = node_of(c, anchor);
  if (!nnc_op_is_elementwise(sink->op)) return false;
  int ext[NNC_MAX_IO], next = 0;
  for (int j = 0; j < sink->nin; j++)
    if (!add_external(ext, &next, NNC_MAX_IO, sink->in[j])) return false;
  gr->nnodes = 0;
  take(gr, anchor);
  for (int i = 0; i < gr->nnodes; i++) {
    const nnc_node *x = node_of(c, gr->nodes[i]);
    if (x->op == NNC_OP_EMBEDDING) continue;   /* its table and ids come from outside */
    for (int j = 0; j < x->nin; j++) {
      int t = x->in[j], p = foldable_producer(c, t);
      bool again = false;   /* x * x: look at the tensor once */
      for (int q = 0; q < j; q++) again |= x->in[q] == t;
      if (again) continue;
      if (p < 0 || !(nnc_op_is_elementwise(node_of(c, p)->op) || gathers_in_loop(c, p)) ||
          !same_shape(tensor_of(c, node_of(c, p)->out[0]), tensor_of(c, x->out[0])))
        continue;
      int trial[NNC_MAX_IO], n = 0;
      bool fits = true;
      for (int e = 0; e < next; e++)
        if (ext[e] != t) trial[n++] = ext[e];
      for (int q = 0; fits && q < node_of(c, p)->nin; q++)
        fits = add_external(trial, &n, NNC_MAX_IO, node_of(c, p)->in[q]);
      if (!fits) continue;
      memcpy(ext, trial, (size_t)n * sizeof *trial);
      next = n;
      take(gr, p);
    }
  }
  gr->kind = NNC_KERNEL_ELEMENTWISE;
  gr->main = anchor;   /* the sink, which writes the kernel's output */
  return true;
}

/* Whether node n is one of gr's first `count` nodes. */
static bool among(const fuse_group *gr, int count, int n) {
  for (int i = 0; i < count; i++)
    if (gr->nodes[i] == n) return true;
  return false;
}

/* How many tensors the nodes of gr, and node `extra` when >= 0, read from
 * outside them; ext (room for NNC_MAX_IO + 1, or NULL) gets them. */
static int externals_of(const fuse_ctx *c, const fuse_group *gr, int extra, int *ext) {
  int own[NNC_MAX_IO + 1], n = 0;
  if (!ext) ext = own;
  for (int i = 0; i <= gr->nnodes; i++) {
    if (i == gr->nnodes && extra < 0) break;
    const nnc_node *x = node_of(c, i < gr->nnodes ? gr->nodes[i] : extra);
    for (int j = 0; j < x->nin; j++) {
      int p = tensor_of(c, x->in[j])->producer;
      bool inside = p >= 0 && (p == extra || among(gr, gr->nnodes, p));
      if (!inside && !add_external(ext, &n, NNC_MAX_IO + 1, x->in[j])) return NNC_MAX_IO + 1;
    }
  }
  return n;
}

/* How many tensors the nodes of gr read from outside it. */
static int externals(const fuse_ctx *c, const fuse_group *gr) { return externals_of(c, gr, -1, NULL); }

static bool float_type(nnc_dtype t) { return t == NNC_F32 || t == NNC_BF16 || t == NNC_F16; }

/* Whether every node outside gr that reads t comes after node `last` (gr's
 * last in the graph's order): t can then be a side output of gr's kernel,
 * never read by a kernel that gr's kernel waits for. */
static bool read_after(const fuse_ctx *c, int t, const fuse_group *gr, int last) {
  for (int u = c->uses.start[t]; u < c->uses.start[t + 1]; u++) {
    int r = c->uses.node[u];
    if (r <= last && !among(gr, gr->nnodes, r)) return false;
  }
  return true;
}

/* The latest node of gr in the graph's order. */
static int last_node(const fuse_group *gr) {
  int last = -1;
  for (int i = 0; i < gr->nnodes; i++)
    if (gr->nodes[i] > last) last = gr->nodes[i];
  return last;
}

/* The producer of t when its chain may join t's reader although t is read
 * elsewhere too or is a graph output (then t is a side output of that
 * kernel): a live free elementwise node of one output. -1 otherwise. */
static int shared_producer(const fuse_ctx *c, int t) {
  const nnc_tensor *x = tensor_of(c, t);
  if (x->kind != NNC_TENSOR_VALUE || x->producer < 0 || !float_type(x->dtype)) return -1;
  const nnc_node *n = node_of(c, x->producer);
  if (n->dead || n->nout != 1 || c->owner[x->producer] >= 0 || !nnc_op_is_elementwise(n->op)) return -1;
  return x->producer;
}

/* A layernorm or rmsnorm of the last axis, of rows of a constant length of
 * at most NNC_ROW_LOOP_COLS, in floats: a warp holds a row in registers. */
static bool row_fits(const fuse_ctx *c, const nnc_node *r) {
  if (r->op != NNC_OP_LAYERNORM && r->op != NNC_OP_RMSNORM) return false;
  const nnc_tensor *x = tensor_of(c, r->in[0]);
  return x->rank > 0 && nnc_dim_is_const(x->shape[x->rank - 1]) && x->shape[x->rank - 1].k >= 1 &&
         x->shape[x->rank - 1].k <= NNC_ROW_LOOP_COLS && float_type(x->dtype) &&
         float_type(tensor_of(c, r->out[0])->dtype);
}

/* A layernorm or rmsnorm of the last axis whose input an elementwise chain
 * computes (BERT's embeddings: two lookups, a position row and their sum),
 * as one row kernel that computes each row in registers and normalizes it
 * (nnc_compile_opts.row_loops): the sum is never read back. When others
 * read the chain's value too (GPT-2's embeddings, also the first residual),
 * the kernel stores it as a side output from the registers that hold it,
 * provided those readers come after the norm. */
static bool match_row_chain(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *r = node_of(c, anchor);
  if (!c->row_loops || !row_fits(c, r)) return false;
  int t = r->in[0], p = foldable_producer(c, t), side = -1;
  if (p < 0 && reads(r, t) == 1 && (p = shared_producer(c, t)) >= 0) side = t;
  if (p < 0 || !nnc_op_is_elementwise(node_of(c, p)->op) || !match_elementwise(c, p, gr)) return false;
  take(gr, anchor);
  gr->kind = NNC_KERNEL_ROW;
  gr->main = anchor;
  gr->nside = 0;
  if (side >= 0) {
    if (!read_after(c, side, gr, anchor)) return false;
    gr->side[gr->nside++] = side;
  }
  return externals(c, gr) <= NNC_MAX_IO;
}

bool nnc_fuse_norm_joins_chain(const fuse_ctx *c, const fuse_group *chain, int norm, int *side) {
  *side = -1;
  const nnc_node *r = node_of(c, norm);
  if (!c->gemm_norm_rows || !row_fits(c, r) || r->nout != 1 || chain->kind != NNC_KERNEL_ELEMENTWISE ||
      chain->nnodes < 1)
    return false;
  int t = r->in[0], p = tensor_of(c, t)->producer;
  if (p < 0 || chain->main != p || last_node(chain) != p || reads(r, t) != 1 ||
      node_of(c, p)->recompute != r->recompute || externals_of(c, chain, norm, NULL) > NNC_MAX_IO)
    return false;
  if (nnc_uses_count(&c->uses, t) == 1 && !nnc_graph_is_output(c->g, t)) return true;
  /* the chain's value is read elsewhere too: a side output, read after the norm */
  for (int u = c->uses.start[t]; u < c->uses.start[t + 1]; u++)
    if (c->uses.node[u] < norm) return false;
  *side = t;
  return true;
}

/* Whether node n is elementwise with every operand of at most out's size:
 * it runs on a reduction's results, one element each. */
static bool on_results(const fuse_ctx *c, const nnc_node *n, const nnc_tensor *out) {
  if (!nnc_op_is_elementwise(n->op) || n->op == NNC_OP_PADDING_MASK || !same_shape(tensor_of(c, n->out[0]), out))
    return false;
  for (int j = 0; j < n->nin; j++) {
    const nnc_tensor *t = tensor_of(c, n->in[j]);
    if (t->rank > out->rank) return false;
  }
  return true;
}

/* Whether tensor t is in avail[0..n). */
static bool listed(const int *avail, int n, int t) {
  for (int i = 0; i < n; i++)
    if (avail[i] == t) return true;
  return false;
}

/* The most nodes a reduce kernel takes for its side outputs. */
#define SIDE_NODES (NNC_MAX_IO - 2)

/* The side outputs of reduce group gr (its prologue the first npro nodes,
 * computing X, the reduction's input, then the reduction and its
 * epilogue): elementwise nodes of X's shape whose operands the loop over
 * X's elements has at each element (what the kernel reads from outside,
 * X when the prologue makes it, their own results) join gr, and those of
 * their values that are graph outputs or read outside become side outputs
 * (BERT: the cast of the last hidden state to its f32 output, from the x
 * the pooling reads). A value with one reader outside stays with that
 * reader, whose chain may take it; every outside reader comes after gr's
 * last node (read_after). */
static void take_side_nodes(const fuse_ctx *c, fuse_group *gr, int npro, int X) {
  const nnc_node *red = node_of(c, gr->main);
  int avail[NNC_MAX_IO + 1 + SIDE_NODES], na = externals_of(c, gr, -1, avail);
  if (na > NNC_MAX_IO) return;
  if (npro > 0) avail[na++] = X;
  const int base = na, core = gr->nnodes;
  int side[SIDE_NODES], ns = 0;
  /* grow: any reader of an available value whose operands are all available */
  for (int i = 0; i < na && ns < SIDE_NODES; i++)
    for (int u = c->uses.start[avail[i]]; u < c->uses.start[avail[i] + 1] && ns < SIDE_NODES; u++) {
      int n = c->uses.node[u];
      const nnc_node *x = node_of(c, n);
      if (x->dead || c->owner[n] >= 0 || x->nout != 1 || !nnc_op_is_elementwise(x->op) ||
          x->op == NNC_OP_PADDING_MASK || x->recompute != red->recompute || among(gr, gr->nnodes, n) ||
          listed(side, ns, n) || !same_shape(tensor_of(c, x->out[0]), tensor_of(c, X)) ||
          !float_type(tensor_of(c, x->out[0])->dtype))
        continue;
      bool ok = true;
      for (int j = 0; j < x->nin && ok; j++) ok = listed(avail, na, x->in[j]);
      if (!ok) continue;
      side[ns++] = n;
      avail[na++] = x->out[0];
    }
  for (int i = 0; i < ns; i++) take(gr, side[i]);
  /* prune until stable: a value with one reader, outside, stays with it (its chain may take it); a node whose
   * operand left goes too; an outside reader before the kernel's last node sends the value's node away */
  for (bool changed = true; changed;) {
    changed = false;
    int last = last_node(gr);
    for (int i = core; i < gr->nnodes; i++) {
      const nnc_node *x = node_of(c, gr->nodes[i]);
      int t = x->out[0], readers = nnc_uses_count(&c->uses, t), inside = 0;
      for (int u = c->uses.start[t]; u < c->uses.start[t + 1]; u++) inside += among(gr, gr->nnodes, c->uses.node[u]);
      bool keep = nnc_graph_is_output(c->g, t) || readers >= 2 || (readers == 1 && inside == 1);
      if (keep && (readers > inside || nnc_graph_is_output(c->g, t))) keep = read_after(c, t, gr, last);
      for (int j = 0; j < x->nin && keep; j++) {   /* read from outside or the prologue, or made by a taken node */
        int p = tensor_of(c, x->in[j])->producer;
        keep = listed(avail, base, x->in[j]) || (p >= 0 && among(gr, gr->nnodes, p) && !among(gr, core, p));
      }
      if (!keep) {
        gr->nodes[i] = gr->nodes[--gr->nnodes];
        changed = true;
        break;
      }
    }
  }
  /* the side outputs: values of the taken nodes that a graph output names or a node outside reads */
  gr->nside = 0;
  for (int i = core; i < gr->nnodes; i++) {
    int t = node_of(c, gr->nodes[i])->out[0];
    bool out = nnc_graph_is_output(c->g, t);
    for (int u = c->uses.start[t]; u < c->uses.start[t + 1] && !out; u++) out = !among(gr, gr->nnodes, c->uses.node[u]);
    if (out) gr->side[gr->nside++] = t;
  }
}

/* A sum, mean or max of floats with the elementwise chain that computes its
 * input (BERT's mean pooling: x * mask) and the elementwise ops that alone
 * read its result (/ sum(mask), the cast of the output), as one reduce
 * kernel (nnc_compile_opts.reduce_loops): neither the product nor the sum
 * is stored. The chain's value, when others read it too, and values of its
 * shape computed from what the loop reads (take_side_nodes) are side
 * outputs, stored as the loop visits each element once. A reduction with
 * no chain before or after it stays a kernel of its own (the target's
 * template). shared: whether the chain may join although others read its
 * value (the caller tries again without when that fails). */
static bool reduce_chain(const fuse_ctx *c, int anchor, fuse_group *gr, bool shared) {
  const nnc_node *r = node_of(c, anchor);
  gr->nnodes = 0;
  gr->nside = 0;
  int X = r->in[0], p = foldable_producer(c, X);
  bool shared_x = false;
  if (p < 0 && shared && reads(r, X) == 1 && (p = shared_producer(c, X)) >= 0) shared_x = true;
  if (p >= 0 && nnc_op_is_elementwise(node_of(c, p)->op) && node_of(c, p)->op != NNC_OP_PADDING_MASK &&
      !match_elementwise(c, p, gr))
    gr->nnodes = 0;
  if (!gr->nnodes) shared_x = false;
  for (int i = 0; i < gr->nnodes; i++)   /* lookups and masks read coordinates the reduction does not keep */
    if (node_of(c, gr->nodes[i])->op == NNC_OP_EMBEDDING || node_of(c, gr->nodes[i])->op == NNC_OP_PADDING_MASK)
      return false;
  int npro = gr->nnodes;
  take(gr, anchor);
  gr->main = anchor;
  const nnc_tensor *res = tensor_of(c, r->out[0]);
  for (int cur = r->out[0], n = foldable_consumer(c, cur); n >= 0 && on_results(c, node_of(c, n), res);
       cur = node_of(c, n)->out[0], n = foldable_consumer(c, cur)) {
    take(gr, n);
    if (externals(c, gr) > NNC_MAX_IO) {
      gr->nnodes--;
      break;
    }
  }
  if (externals(c, gr) > NNC_MAX_IO) return false;
  take_side_nodes(c, gr, npro, X);
  if (shared_x) {
    if (!read_after(c, X, gr, last_node(gr))) return false;
    gr->side[gr->nside++] = X;
  }
  if (gr->nnodes == 1) return false;
  gr->kind = NNC_KERNEL_REDUCE;
  return true;
}

static bool match_reduce_chain(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *r = node_of(c, anchor);
  if (!c->reduce_loops || (r->op != NNC_OP_SUM && r->op != NNC_OP_MEAN && r->op != NNC_OP_MAX) ||
      !float_type(tensor_of(c, r->in[0])->dtype) || !float_type(tensor_of(c, r->out[0])->dtype))
    return false;
  return reduce_chain(c, anchor, gr, true) || reduce_chain(c, anchor, gr, false);
}

/* Pooling, a max or mean over the taps of an NHWC image's tap-major
 * windows that nothing else reads, and a depthwise convolution, the sum
 * over the taps of the windows times a [taps, C] weight, as one reduce
 * kernel that reads the image (nnc_compile_opts.reduce_windows): the
 * windows are never stored. Channels a multiple of c->channel_run (CUDA's
 * 8: 16-byte vectors of bf16/f16, two of f32). */
static bool match_pool(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *r = node_of(c, anchor);
  if (!c->reduce_windows || (r->op != NNC_OP_MAX && r->op != NNC_OP_MEAN && r->op != NNC_OP_SUM) ||
      r->attrs.axis != 3)
    return false;
  int prod = -1, w = foldable_producer(c, r->in[0]);
  if (w >= 0 && r->op == NNC_OP_SUM) {
    /* the product's operands: the windows (folded too) and the weight */
    const nnc_node *m = node_of(c, w);
    const nnc_tensor *wt = m->op == NNC_OP_MUL && m->nin == 2 ? tensor_of(c, m->in[1]) : NULL;
    prod = w;
    w = wt && wt->rank == 2 && wt->dtype == tensor_of(c, m->in[0])->dtype ? foldable_producer(c, m->in[0]) : -1;
    /* the weight [taps, C] itself, not one that broadcasts */
    if (w >= 0 && (!nnc_dim_eq_const(wt->shape[0], (int64_t)node_of(c, w)->attrs.win.kh * node_of(c, w)->attrs.win.kw) ||
                   !nnc_dim_eq(wt->shape[1], tensor_of(c, node_of(c, w)->in[0])->shape[3])))
      w = -1;
  }
  if (w < 0) return false;
  const nnc_node *im = node_of(c, w);
  const nnc_tensor *img = tensor_of(c, im->in[0]);
  nnc_dtype t = img->dtype;
  if (im->op != NNC_OP_IM2COL || !im->attrs.win.nhwc || !im->attrs.win.tap_major || img->rank != 4 ||
      (t != NNC_F32 && t != NNC_BF16 && t != NNC_F16) || tensor_of(c, r->out[0])->dtype != t ||
      !nnc_dim_is_const(img->shape[3]) || img->shape[3].k % c->channel_run ||
      im->attrs.scalar != (r->op == NNC_OP_MAX ? -INFINITY : 0.0))
    return false;
  gr->nnodes = 0;
  take(gr, w);
  if (prod >= 0) take(gr, prod);
  take(gr, anchor);
  gr->kind = NNC_KERNEL_REDUCE;
  gr->main = anchor;
  return true;
}

/* An lstm_scan and the linear x W_ih^T + b_ih that alone reads its input xw,
 * as one move kernel (nnc_compile_opts.scan_input): each step's GEMM takes
 * [h | x_t] by [W_hh | W_ih]^T, so xw [B, T, 4H] is never stored. Inference
 * only, in effect: a training step's backward reads xw too. f32 throughout
 * (the C SIMD target's arithmetic), W_ih [4H, F] as PyTorch stores it and
 * held as it is (not int8 or int4, which only a GEMM reads). */
static bool match_scan_input(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *s = node_of(c, anchor);
  if (!c->scan_input || s->op != NNC_OP_LSTM_SCAN) return false;
  int p = foldable_producer(c, s->in[0]);
  if (p < 0) return false;
  const nnc_node *lin = node_of(c, p);
  if (lin->op != NNC_OP_LINEAR || lin->nin != 3 || lin->attrs.weight_in_out || tensor_of(c, lin->in[0])->rank != 3 ||
      tensor_of(c, lin->in[1])->quant.kind != NNC_QUANT_NONE)
    return false;
  for (int i = 0; i < lin->nin; i++)
    if (tensor_of(c, lin->in[i])->dtype != NNC_F32) return false;
  if (tensor_of(c, s->in[0])->dtype != NNC_F32) return false;
  gr->nnodes = 0;
  take(gr, p);
  take(gr, anchor);
  gr->kind = NNC_KERNEL_MOVE;
  gr->main = anchor;
  return true;
}

/* Any other node on its own, in the kernel of its class. */
static bool match_single(const fuse_ctx *c, int anchor, fuse_group *gr) {
  const nnc_node *x = node_of(c, anchor);
  switch (nnc_op_info_of(x->op)->cls) {
  case NNC_CLASS_UNARY:
  case NNC_CLASS_BINARY:
  case NNC_CLASS_MASK: gr->kind = NNC_KERNEL_ELEMENTWISE; break;
  case NNC_CLASS_ROW:
    gr->kind = x->op == NNC_OP_LAYERNORM_GRAD || x->op == NNC_OP_RMSNORM_GRAD ? NNC_KERNEL_NORM_GRAD : NNC_KERNEL_ROW;
    break;
  case NNC_CLASS_REDUCE: gr->kind = NNC_KERNEL_REDUCE; break;
  case NNC_CLASS_GATHER: gr->kind = NNC_KERNEL_GATHER; break;
  case NNC_CLASS_LOSS: gr->kind = NNC_KERNEL_LOSS; break;
  case NNC_CLASS_MOVE:
    /* a reshape is free unless its result must land in the caller's buffer */
    gr->kind = x->op == NNC_OP_RESHAPE && !nnc_graph_is_output(c->g, x->out[0]) ? NNC_KERNEL_VIEW
                                                                                 : NNC_KERNEL_MOVE;
    break;
  case NNC_CLASS_MATMUL:   /* match_gemm takes every one */
  case NNC_CLASS_ATTENTION: /* match_attention_op takes every one */
  case NNC_CLASS_NONE: return false;
  }
  gr->nnodes = 0;
  take(gr, anchor);
  gr->main = anchor;
  return true;
}

const fuse_pattern nnc_fuse_patterns[] = {
  {"attention_op", match_attention_op},
  {"attention", nnc_fuse_match_attention},
  {"scan_input", match_scan_input},   /* before gemm, which would take the linear */
  {"gemm", match_gemm},
  {"pool", match_pool},
  {"row_chain", match_row_chain},
  {"reduce_chain", match_reduce_chain},
  {"elementwise", match_elementwise},
  {"single", match_single},
};
const int nnc_fuse_npatterns = (int)(sizeof nnc_fuse_patterns / sizeof nnc_fuse_patterns[0]);
