/* compiler/passes/autodiff_rules.c — the vector-Jacobian product of every op,
 * one rule per row, indexed like ir/op_table.c.
 *
 * A rule writes the gradients of a node's inputs as graph ops. Where a
 * formula needs the forward's result it reads the forward tensor (y), so the
 * memory planner keeps it alive until the backward has used it. Broadcast
 * inputs get their gradient summed back to their shape (ad_unbroadcast). */
#include <math.h>
#include <string.h>

#include "autodiff.h"

#define TRY(x)                       \
  do {                               \
    nnc_status st_ = (x);            \
    if (st_) return st_;             \
  } while (0)

static const nnc_tensor *T(const ad_ctx *c, int t) { return &c->g->tensors[t]; }

/* ------------------------------------------------------------ elementwise */

static nnc_status vjp_activation(ad_ctx *c, ad_vjp *v) {
  nnc_attrs a = {.act = v->n->op, .gelu_tanh = v->n->attrs.gelu_tanh};
  int in[2] = {v->n->in[0], v->dy[0]};
  return ad_node(c, NNC_OP_ACT_GRAD, 2, in, &a, &v->dx[0]);
}

/* exp: dy * y */
static nnc_status vjp_exp(ad_ctx *c, ad_vjp *v) {
  return ad_binary(c, NNC_OP_MUL, v->dy[0], v->n->out[0], &v->dx[0]);
}

/* log: dy / x */
static nnc_status vjp_log(ad_ctx *c, ad_vjp *v) {
  return ad_binary(c, NNC_OP_DIV, v->dy[0], v->n->in[0], &v->dx[0]);
}

/* sqrt: dy / (2 y) */
static nnc_status vjp_sqrt(ad_ctx *c, ad_vjp *v) {
  int q;
  TRY(ad_binary(c, NNC_OP_DIV, v->dy[0], v->n->out[0], &q));
  return ad_scalar(c, NNC_OP_MUL_S, q, 0.5, &v->dx[0]);
}

static nnc_status vjp_neg(ad_ctx *c, ad_vjp *v) { return ad_unary(c, NNC_OP_NEG, v->dy[0], &v->dx[0]); }

/* cast: the gradient goes back to the input's type */
static nnc_status vjp_cast(ad_ctx *c, ad_vjp *v) {
  nnc_attrs a = {.to = T(c, v->n->in[0])->dtype};
  if (T(c, v->dy[0])->dtype == a.to) {
    v->dx[0] = v->dy[0];
    return NNC_OK;
  }
  return ad_node(c, NNC_OP_CAST, 1, &v->dy[0], &a, &v->dx[0]);
}

/* x + s, x - s: dy */
static nnc_status vjp_pass(ad_ctx *c, ad_vjp *v) {
  (void)c;
  v->dx[0] = v->dy[0];
  return NNC_OK;
}

/* x * s, x / s: dy * s, dy / s */
static nnc_status vjp_scale(ad_ctx *c, ad_vjp *v) {
  return ad_scalar(c, v->n->op, v->dy[0], v->n->attrs.scalar, &v->dx[0]);
}

/* s / x: -dy * y / x */
static nnc_status vjp_rdiv_s(ad_ctx *c, ad_vjp *v) {
  int p, q;
  TRY(ad_binary(c, NNC_OP_MUL, v->dy[0], v->n->out[0], &p));
  TRY(ad_binary(c, NNC_OP_DIV, p, v->n->in[0], &q));
  return ad_unary(c, NNC_OP_NEG, q, &v->dx[0]);
}

/* x ^ s: dy * s * x ^ (s - 1) */
static nnc_status vjp_pow_s(ad_ctx *c, ad_vjp *v) {
  int p, q;
  double s = v->n->attrs.scalar;
  TRY(ad_scalar(c, NNC_OP_POW_S, v->n->in[0], s - 1.0, &p));
  TRY(ad_binary(c, NNC_OP_MUL, v->dy[0], p, &q));
  return ad_scalar(c, NNC_OP_MUL_S, q, s, &v->dx[0]);
}

/* a + b, a - b, a * b, a / b: each operand's share, summed to its shape */
static nnc_status vjp_arith(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  int a = n->in[0], b = n->in[1], dy = v->dy[0];
  for (int i = 0; i < 2; i++) {
    if (!v->want[i]) continue;
    int d = dy;
    switch (n->op) {
    case NNC_OP_SUB:
      if (i == 1) TRY(ad_unary(c, NNC_OP_NEG, dy, &d));
      break;
    case NNC_OP_MUL: TRY(ad_binary(c, NNC_OP_MUL, dy, i ? a : b, &d)); break;
    case NNC_OP_DIV:
      if (i == 0) {
        TRY(ad_binary(c, NNC_OP_DIV, dy, b, &d));
      } else {   /* -dy * y / b */
        int p, q;
        TRY(ad_binary(c, NNC_OP_MUL, dy, n->out[0], &p));
        TRY(ad_binary(c, NNC_OP_DIV, p, b, &q));
        TRY(ad_unary(c, NNC_OP_NEG, q, &d));
      }
      break;
    default: break;
    }
    TRY(ad_unbroadcast(c, d, n->in[i], &v->dx[i]));
  }
  return NNC_OK;
}

/* masks: the gradient is 0 where the forward wrote -inf */
static nnc_status vjp_mask(ad_ctx *c, ad_vjp *v) {
  nnc_attrs a = v->n->attrs;
  a.mask_zero = true;
  int in[2] = {v->dy[0], v->n->nin > 1 ? v->n->in[1] : -1};
  return ad_node(c, v->n->op, v->n->nin, in, &a, &v->dx[0]);
}

/* expand: the sum over the broadcast dims */
static nnc_status vjp_expand(ad_ctx *c, ad_vjp *v) { return ad_unbroadcast(c, v->dy[0], v->n->in[0], &v->dx[0]); }

/* -------------------------------------------------------------- matrices */

/* Tensor t as a matrix [rows, last dim]: a view when t has rank 2 already. */
static nnc_status as_matrix(ad_ctx *c, int t, int *out) {
  const nnc_tensor *x = T(c, t);
  if (x->rank == 2) {
    *out = t;
    return NNC_OK;
  }
  nnc_dim shape[2] = {nnc_dim_const(1), x->rank ? x->shape[x->rank - 1] : nnc_dim_const(1)};
  for (int i = 0; i + 1 < x->rank; i++)
    if (!nnc_dim_mul(shape[0], x->shape[i], &shape[0]))
      return nnc_errorf(c->err, NNC_E_LIMIT, c->loc, "--train: the rows of %s have more than %d symbolic factors",
                        x->name, NNC_DIM_SYMS);
  return ad_shaped(c, NNC_OP_RESHAPE, 1, &t, NULL, 2, shape, out);
}

/* True when rows of t have a constant length that is not a multiple of 8
 * elements: 16-byte loads of such rows are unaligned in every storage type,
 * which GEMM libraries run several times slower (cuBLASLt: GPT-2's LM head,
 * N = 50257, at a sixth of its aligned speed). */
static bool odd_rows(ad_ctx *c, int t) {
  const nnc_tensor *x = T(c, t);
  return x->rank >= 1 && nnc_dim_is_const(x->shape[x->rank - 1]) && x->shape[x->rank - 1].k % 8 != 0;
}

/* linear: y = x W^T + b with W [N, K] (or x W with W [K, N], in_out).
 * dx = dy W (a linear with the other layout), dW = dy^T x (x^T dy for
 * in_out) over all rows, db = the column sums of dy. When dy's rows are odd
 * (odd_rows) and W is [N, K], dy^T is made once and both products read it:
 * dW = dy^T x as it is and dx = (dy^T)^T W, a transposed A; its rows (the
 * batch's) are aligned where dy's are not. */
static nnc_status vjp_linear_local(ad_ctx *c, ad_vjp *v);

/* Under a tensor-parallel plan a linear layer whose weight is this rank's
 * slice of the output columns (Megatron's column split, or a vocabulary
 * split's head) reads a whole input x but gives each rank only its columns'
 * share of dx: a partial sum, made whole by an all_reduce (Megatron's "f",
 * whose forward is the identity) before it joins x's other gradients. */
static nnc_status vjp_linear(ad_ctx *c, ad_vjp *v) {
  TRY(vjp_linear_local(c, v));
  const nnc_shard *sh = &T(c, v->n->in[1])->shard;
  if (!v->want[0] || v->dx[0] < 0 || sh->parts < 2 || sh->axis != (v->n->attrs.weight_in_out ? 1 : 0)) return NNC_OK;
  nnc_attrs a = {.ranks = sh->parts, .scalar = 1.0};
  return ad_node(c, NNC_OP_ALL_REDUCE, 1, &v->dx[0], &a, &v->dx[0]);
}

static nnc_status vjp_linear_local(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  bool in_out = n->attrs.weight_in_out;
  int x = n->in[0], w = n->in[1], dy = v->dy[0];
  if (!in_out && v->want[0] && v->want[1] && odd_rows(c, dy)) {
    int dy2, x2, dyt, t, d;
    TRY(as_matrix(c, dy, &dy2));
    TRY(as_matrix(c, x, &x2));
    TRY(ad_transpose_last(c, dy2, &dyt));
    TRY(ad_transpose_last(c, dyt, &t));
    TRY(ad_binary(c, NNC_OP_MATMUL, t, w, &d));
    TRY(ad_reshape_like(c, d, x, &v->dx[0]));
    TRY(ad_binary(c, NNC_OP_MATMUL, dyt, x2, &v->dx[1]));
    if (n->nin == 3 && v->want[2]) TRY(ad_reduce(c, NNC_OP_SUM, dy2, 0, false, &v->dx[2]));
    return NNC_OK;
  }
  if (v->want[0]) {
    nnc_attrs a = {.weight_in_out = !in_out};
    int in[2] = {dy, w};
    TRY(ad_node(c, NNC_OP_LINEAR, 2, in, &a, &v->dx[0]));
  }
  if (!v->want[1] && !(n->nin == 3 && v->want[2])) return NNC_OK;
  int dy2, x2, t;
  TRY(as_matrix(c, dy, &dy2));
  if (v->want[1]) {
    TRY(as_matrix(c, x, &x2));
    if (in_out) {
      TRY(ad_transpose_last(c, x2, &t));
      TRY(ad_binary(c, NNC_OP_MATMUL, t, dy2, &v->dx[1]));
    } else {
      TRY(ad_transpose_last(c, dy2, &t));
      TRY(ad_binary(c, NNC_OP_MATMUL, t, x2, &v->dx[1]));
    }
  }
  if (n->nin == 3 && v->want[2]) TRY(ad_reduce(c, NNC_OP_SUM, dy2, 0, false, &v->dx[2]));
  return NNC_OK;
}

/* matmul: y = a b over broadcast batch dims. da = dy b^T, db = a^T dy, each
 * summed over the batch dims its operand broadcast along. */
static nnc_status vjp_matmul(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  int a = n->in[0], b = n->in[1], dy = v->dy[0];
  if (v->want[0]) {
    int d;
    if (T(c, b)->rank == 2) {   /* dy b^T is a linear with weight b [K, N] */
      int in[2] = {dy, b};
      TRY(ad_node(c, NNC_OP_LINEAR, 2, in, NULL, &d));
    } else {
      int bt;
      TRY(ad_transpose_last(c, b, &bt));
      TRY(ad_binary(c, NNC_OP_MATMUL, dy, bt, &d));
    }
    TRY(ad_unbroadcast(c, d, a, &v->dx[0]));
  }
  if (v->want[1]) {
    int d, at;
    if (T(c, b)->rank == 2 && T(c, a)->rank > 2) {   /* a shared matrix: one GEMM over all rows */
      int a2, dy2;
      TRY(as_matrix(c, a, &a2));
      TRY(as_matrix(c, dy, &dy2));
      TRY(ad_transpose_last(c, a2, &at));
      TRY(ad_binary(c, NNC_OP_MATMUL, at, dy2, &v->dx[1]));
      return NNC_OK;
    }
    TRY(ad_transpose_last(c, a, &at));
    TRY(ad_binary(c, NNC_OP_MATMUL, at, dy, &d));
    TRY(ad_unbroadcast(c, d, b, &v->dx[1]));
  }
  return NNC_OK;
}

/* ------------------------------------------------------------------ rows */

/* softmax: y * (dy - sum(dy * y)) along the axis */
static nnc_status vjp_softmax(ad_ctx *c, ad_vjp *v) {
  int y = v->n->out[0], p, s, d;
  TRY(ad_binary(c, NNC_OP_MUL, v->dy[0], y, &p));
  TRY(ad_reduce(c, NNC_OP_SUM, p, v->n->attrs.axis, true, &s));
  TRY(ad_binary(c, NNC_OP_SUB, v->dy[0], s, &d));
  return ad_binary(c, NNC_OP_MUL, y, d, &v->dx[0]);
}

/* layernorm and rmsnorm over the last axis, recomputing the row statistics:
 *   xhat = (x - mean) * rstd (rms: x * rstd), g = dy * gamma,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rms: no mean(g)),
 *   dgamma = sum of dy * xhat over the rows, dbeta = sum of dy. */
static nnc_status vjp_norm_primitive(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  bool layer = n->op == NNC_OP_LAYERNORM;
  int x = n->in[0], gamma = n->in[1], dy = v->dy[0], last = T(c, x)->rank - 1;
  int xc = x, sq, var, rstd, xhat, t;
  if (layer) {
    int mu;
    TRY(ad_reduce(c, NNC_OP_MEAN, x, last, true, &mu));
    TRY(ad_binary(c, NNC_OP_SUB, x, mu, &xc));
  }
  TRY(ad_binary(c, NNC_OP_MUL, xc, xc, &sq));
  TRY(ad_reduce(c, NNC_OP_MEAN, sq, last, true, &var));
  TRY(ad_scalar(c, NNC_OP_ADD_S, var, n->attrs.eps, &t));
  TRY(ad_scalar(c, NNC_OP_POW_S, t, -0.5, &rstd));
  TRY(ad_binary(c, NNC_OP_MUL, xc, rstd, &xhat));
  if (v->want[0]) {
    int g, gx, mgx, p, d;
    TRY(ad_binary(c, NNC_OP_MUL, dy, gamma, &g));
    TRY(ad_binary(c, NNC_OP_MUL, g, xhat, &gx));
    TRY(ad_reduce(c, NNC_OP_MEAN, gx, last, true, &mgx));
    TRY(ad_binary(c, NNC_OP_MUL, xhat, mgx, &p));
    TRY(ad_binary(c, NNC_OP_SUB, g, p, &d));
    if (layer) {
      int mg;
      TRY(ad_reduce(c, NNC_OP_MEAN, g, last, true, &mg));
      TRY(ad_binary(c, NNC_OP_SUB, d, mg, &d));
    }
    TRY(ad_binary(c, NNC_OP_MUL, d, rstd, &v->dx[0]));
  }
  if (v->want[1]) {
    int p;
    TRY(ad_binary(c, NNC_OP_MUL, dy, xhat, &p));
    TRY(ad_unbroadcast(c, p, gamma, &v->dx[1]));
  }
  if (layer && v->want[2]) TRY(ad_unbroadcast(c, dy, n->in[2], &v->dx[2]));
  return NNC_OK;
}

/* The same as one node, layernorm_grad or rmsnorm_grad: one pass over the
 * rows for dx and the gamma and beta sums (the targets' fused backward),
 * unless the target has none. */
static nnc_status vjp_norm(ad_ctx *c, ad_vjp *v) {
  if (c->primitive) return vjp_norm_primitive(c, v);
  const nnc_node *n = v->n;
  bool layer = n->op == NNC_OP_LAYERNORM;
  int in[3] = {n->in[0], n->in[1], v->dy[0]}, node;
  TRY(nnc_graph_add_node(c->g, layer ? NNC_OP_LAYERNORM_GRAD : NNC_OP_RMSNORM_GRAD, 3, in, &n->attrs, layer ? 3 : 2,
                         c->loc, c->label, &node, c->err));
  TRY(nnc_infer_node(c->g, node, c->err));
  for (int i = 0; i < (layer ? 3 : 2); i++)
    if (v->want[i]) v->dx[i] = c->g->nodes[node].out[i];
  return NNC_OK;
}

/* ------------------------------------------------------------ reductions */

/* dy with the reduced axis back as a dim of 1 */
static nnc_status keep_axis(ad_ctx *c, const nnc_node *n, int dy, int *out) {
  if (n->attrs.keepdim) {
    *out = dy;
    return NNC_OK;
  }
  const nnc_tensor *x = T(c, n->in[0]);
  nnc_dim shape[NNC_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  shape[n->attrs.axis] = nnc_dim_const(1);
  return ad_shaped(c, NNC_OP_RESHAPE, 1, &dy, NULL, x->rank, shape, out);
}

static nnc_status expand_to(ad_ctx *c, int t, int like, int *out) {
  const nnc_tensor *l = T(c, like);
  nnc_dim shape[NNC_MAX_RANK];
  int rank = l->rank;
  memcpy(shape, l->shape, sizeof shape);
  return ad_shaped(c, NNC_OP_EXPAND, 1, &t, NULL, rank, shape, out);
}

/* sum: dy broadcast back; mean: also divided by the count; max: dy where x
 * equals the max (every tied element gets it) */
static nnc_status vjp_reduce(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  int x = n->in[0], dk;
  TRY(keep_axis(c, n, v->dy[0], &dk));
  if (n->op == NNC_OP_MAX) {
    int yk, eq;
    TRY(keep_axis(c, n, n->out[0], &yk));
    TRY(ad_binary(c, NNC_OP_EQUAL, x, yk, &eq));
    return ad_binary(c, NNC_OP_MUL, eq, dk, &v->dx[0]);
  }
  if (n->op == NNC_OP_SUM) return expand_to(c, dk, x, &v->dx[0]);
  nnc_dim count = T(c, x)->shape[n->attrs.axis];
  if (nnc_dim_is_const(count)) {
    int e;
    TRY(expand_to(c, dk, x, &e));
    return ad_scalar(c, NNC_OP_MUL_S, e, count.k ? 1.0 / (double)count.k : 0.0, &v->dx[0]);
  }
  /* a symbolic count: divide by the sum of ones along the axis, which is it */
  int zero, one, cnt;
  TRY(ad_zeros_like(c, x, &zero));
  TRY(ad_scalar(c, NNC_OP_ADD_S, zero, 1.0, &one));
  TRY(ad_reduce(c, NNC_OP_SUM, one, n->attrs.axis, true, &cnt));
  int q;
  TRY(ad_binary(c, NNC_OP_DIV, dk, cnt, &q));
  return expand_to(c, q, x, &v->dx[0]);
}

/* --------------------------------------------------------- data movement */

static nnc_status vjp_reshape(ad_ctx *c, ad_vjp *v) { return ad_reshape_like(c, v->dy[0], v->n->in[0], &v->dx[0]); }

static nnc_status vjp_transpose(ad_ctx *c, ad_vjp *v) {
  nnc_attrs a = {0};
  int r = T(c, v->n->in[0])->rank;
  for (int i = 0; i < r; i++) a.perm[v->n->attrs.perm[i]] = i;
  return ad_node(c, NNC_OP_TRANSPOSE, 1, &v->dy[0], &a, &v->dx[0]);
}

/* slice: dy in place, zeros around it */
static nnc_status vjp_slice(ad_ctx *c, ad_vjp *v) {
  const nnc_tensor *x = T(c, v->n->in[0]);
  nnc_attrs a = {.axis = v->n->attrs.axis, .start = v->n->attrs.start};
  nnc_dim shape[NNC_MAX_RANK];
  int rank = x->rank;
  memcpy(shape, x->shape, sizeof shape);
  return ad_shaped(c, NNC_OP_PAD, 1, &v->dy[0], &a, rank, shape, &v->dx[0]);
}

/* pad: the gradient of the part that was x, a slice of dy */
static nnc_status vjp_pad(ad_ctx *c, ad_vjp *v) {
  const nnc_tensor *x = T(c, v->n->in[0]);
  int axis = v->n->attrs.axis;
  nnc_attrs a = {.axis = axis, .start = v->n->attrs.start};
  /* the pads the front-end makes (a convolution's channels) have constant sizes */
  if (!nnc_dim_is_const(a.start) || !nnc_dim_is_const(x->shape[axis]))
    return nnc_errorf(c->err, NNC_E_INTERNAL, c->loc, "--train: expected a pad of constant size and offset");
  a.stop = nnc_dim_const(a.start.k + x->shape[axis].k);
  nnc_dim shape[NNC_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  return ad_shaped(c, NNC_OP_SLICE, 1, &v->dy[0], &a, x->rank, shape, &v->dx[0]);
}

/* im2col: each window entry's gradient back to the pixel it was read from */
static nnc_status vjp_im2col(ad_ctx *c, ad_vjp *v) {
  const nnc_tensor *x = T(c, v->n->in[0]);
  nnc_attrs a = {.win = v->n->attrs.win};
  nnc_dim shape[NNC_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  return ad_shaped(c, NNC_OP_COL2IM, 1, &v->dy[0], &a, x->rank, shape, &v->dx[0]);
}

/* rope: a rotation's transpose is the rotation back (by -theta); the
 * positions are integers, with no gradient */
static nnc_status vjp_rope(ad_ctx *c, ad_vjp *v) {
  nnc_attrs a = v->n->attrs;
  a.reverse = !a.reverse;
  int in[2] = {v->dy[0], v->n->nin > 1 ? v->n->in[1] : -1};
  return ad_node(c, NNC_OP_ROPE, v->n->nin, in, &a, &v->dx[0]);
}

/* a + b as one dim: a constant sum, or multiples of the same symbols */
static bool dim_add(nnc_dim a, nnc_dim b, nnc_dim *out) {
  if (a.k == 0 || b.k == 0) {
    *out = a.k == 0 ? b : a;
    return true;
  }
  if (a.nsym != b.nsym || memcmp(a.sym, b.sym, (size_t)a.nsym * sizeof *a.sym) != 0) return false;
  *out = a;
  return !__builtin_add_overflow(a.k, b.k, &out->k);
}

/* concat: each input's part of dy */
static nnc_status vjp_concat(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  int axis = n->attrs.axis;
  nnc_dim at = nnc_dim_const(0);
  for (int i = 0; i < n->nin; i++) {
    nnc_dim stop;
    if (!dim_add(at, T(c, n->in[i])->shape[axis], &stop))
      return nnc_errorf(c->err, NNC_E_MODEL, c->loc, "--train: concat's gradient needs the offset of input %d "
                        "along axis %d as one size, found a sum of sizes with other symbols", i + 1, axis + 1);
    if (v->want[i]) {
      nnc_attrs a = {.axis = axis, .start = at, .stop = stop};
      TRY(ad_node(c, NNC_OP_SLICE, 1, &v->dy[0], &a, &v->dx[i]));
    }
    at = stop;
  }
  return NNC_OK;
}

/* split: the parts' gradients side by side (zeros for a part nothing read) */
static nnc_status vjp_split(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  int parts[NNC_MAX_IO];
  for (int i = 0; i < n->nout; i++) {
    parts[i] = v->dy[i];
    if (parts[i] < 0) TRY(ad_zeros_like(c, n->out[i], &parts[i]));
  }
  nnc_attrs a = {.axis = n->attrs.axis};
  return ad_node(c, NNC_OP_CONCAT, n->nout, parts, &a, &v->dx[0]);
}

/* -------------------------------------------------------- lookup and loss */

/* embedding: the scatter-add of dy's rows; over a vocabulary split, into
 * this rank's rows only (the ids of the others' rows left out) */
static nnc_status vjp_embedding(ad_ctx *c, ad_vjp *v) {
  const nnc_tensor *table = T(c, v->n->in[0]);
  int in[2] = {v->dy[0], v->n->in[1]};
  nnc_dim shape[2] = {table->shape[0], table->shape[1]};
  nnc_attrs a = {.ranks = v->n->attrs.ranks, .vocab = v->n->attrs.vocab};
  return ad_shaped(c, NNC_OP_EMBEDDING_GRAD, 2, in, &a, 2, shape, &v->dx[0]);
}

static nnc_status vjp_cross_entropy(ad_ctx *c, ad_vjp *v) {
  int in[3] = {v->n->in[0], v->n->in[1], v->dy[0]};
  return ad_node(c, NNC_OP_CROSS_ENTROPY_GRAD, 3, in, NULL, &v->dx[0]);
}

/* ------------------------------------------------- tensor-parallel plans */

/* all_reduce: every rank's y is the sum of the ranks' x, and the loss each
 * rank computes from its y is the one loss, so each x's gradient is dy as
 * it is (times the all_reduce's factor). A max has no gradient here: the
 * plan takes one only as a shift the loss does not depend on. */
static nnc_status vjp_all_reduce(ad_ctx *c, ad_vjp *v) {
  if (v->n->attrs.reduce_max)
    return nnc_errorf(c->err, NNC_E_INTERNAL, c->loc, "--train: expected no gradient through the max over the ranks "
                      "(%s): a shift of the loss, not a value of it", c->label);
  if (v->n->attrs.scalar == 1.0) {
    v->dx[0] = v->dy[0];
    return NNC_OK;
  }
  return ad_scalar(c, NNC_OP_MUL_S, v->dy[0], v->n->attrs.scalar, &v->dx[0]);
}

/* all_gather: rank r's x is entry r of every rank's y, whose gradient is
 * the same on every rank: x's gradient is the rank's own entry of dy. */
static nnc_status vjp_all_gather(ad_ctx *c, ad_vjp *v) {
  nnc_attrs a = {.ranks = v->n->attrs.ranks};
  return ad_node(c, NNC_OP_RANK_SLICE, 1, &v->dy[0], &a, &v->dx[0]);
}

/* cross_entropy_shard: the gradient of its two sums with respect to the
 * rank's logits; the shift gets none (the loss log(sum) - (logit - shift)
 * does not depend on it) and the targets are integers. */
static nnc_status vjp_ce_shard(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  int in[4] = {n->in[0], n->in[1], n->in[2], v->dy[0]};
  nnc_attrs a = {.ranks = n->attrs.ranks, .vocab = n->attrs.vocab};
  if (!v->want[0]) return NNC_OK;
  return ad_node(c, NNC_OP_CE_SHARD_GRAD, 4, in, &a, &v->dx[0]);
}

/* attention: the flash-attention backward, one node giving dq, dk and dv
 * from q, k, v, the output, its rows' log-sum-exp and the output's
 * gradient. The mask gets none (it selects keys; it is not a weight). */
static nnc_status vjp_attention(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  if (v->dy[0] < 0) return NNC_OK;   /* only lse reached: nothing reads it but the backward */
  bool masked = n->nin == 4;
  int in[7] = {n->in[0], n->in[1], n->in[2], n->out[0], n->out[1], v->dy[0], masked ? n->in[3] : -1};
  int node;
  TRY(nnc_graph_add_node(c->g, NNC_OP_ATTENTION_GRAD, masked ? 7 : 6, in, &n->attrs, 3, c->loc, c->label, &node,
                         c->err));
  TRY(nnc_infer_node(c->g, node, c->err));
  for (int i = 0; i < 3; i++)
    if (v->want[i]) v->dx[i] = c->g->nodes[node].out[i];
  return NNC_OK;
}

/* lstm_scan, gru_scan: backward through time in one node (lstm_scan_grad,
 * gru_scan_grad), then the recurrent weight's gradient as one GEMM over the
 * steps of every row, da^T hprev, and its bias's as da's column sums. States
 * the forward started from zeros and outputs nothing read get zeros. */
static nnc_status vjp_scan(ad_ctx *c, ad_vjp *v) {
  const nnc_node *n = v->n;
  bool lstm = n->op == NNC_OP_LSTM_SCAN;
  int ns = lstm ? 2 : 1, in[9], k = 0;
  for (int i = 0; i < 3; i++) in[k++] = n->in[i];
  for (int i = 0; i < ns; i++) {
    if (n->nin > 3 + i) in[k++] = n->in[3 + i];
    else TRY(ad_zeros_like(c, n->out[1], &in[k++]));
  }
  in[k++] = n->out[0];
  for (int i = 0; i <= ns; i++) {
    in[k] = v->dy[i];
    if (in[k] < 0) TRY(ad_zeros_like(c, n->out[i], &in[k]));
    k++;
  }
  nnc_attrs a = {.reverse = n->attrs.reverse};
  int node;
  TRY(nnc_graph_add_node(c->g, lstm ? NNC_OP_LSTM_SCAN_GRAD : NNC_OP_GRU_SCAN_GRAD, k, in, &a, 5, c->loc, c->label,
                         &node, c->err));
  TRY(nnc_infer_node(c->g, node, c->err));
  const nnc_node *gn = &c->g->nodes[node];
  int dxw = gn->out[0], da = gn->out[lstm ? 0 : 1], dh0 = gn->out[lstm ? 1 : 2], dc0 = lstm ? gn->out[2] : -1,
      hprev = gn->out[3];
  if (v->want[0]) v->dx[0] = dxw;
  if (n->nin > 3 && v->want[3]) v->dx[3] = dh0;
  if (n->nin > 4 && v->want[4]) v->dx[4] = dc0;
  if (!v->want[1] && !v->want[2]) return NNC_OK;
  int da2;
  TRY(as_matrix(c, da, &da2));
  if (v->want[1]) {
    int h2, t;
    TRY(as_matrix(c, hprev, &h2));
    TRY(ad_transpose_last(c, da2, &t));
    TRY(ad_binary(c, NNC_OP_MATMUL, t, h2, &v->dx[1]));
  }
  if (v->want[2]) TRY(ad_reduce(c, NNC_OP_SUM, da2, 0, false, &v->dx[2]));
  return NNC_OK;
}

/* The table: an op without a rule (the gradient ops themselves) cannot be
 * differentiated, and the pass says so at its line. */
static const ad_rule rules[NNC_OP_COUNT] = {
  [NNC_OP_RELU] = vjp_activation,      [NNC_OP_GELU] = vjp_activation,     [NNC_OP_SILU] = vjp_activation,
  [NNC_OP_SIGMOID] = vjp_activation,   [NNC_OP_TANH] = vjp_activation,     [NNC_OP_EXP] = vjp_exp,
  [NNC_OP_LOG] = vjp_log,              [NNC_OP_SQRT] = vjp_sqrt,           [NNC_OP_NEG] = vjp_neg,
  [NNC_OP_CAST] = vjp_cast,            [NNC_OP_ADD_S] = vjp_pass,          [NNC_OP_SUB_S] = vjp_pass,
  [NNC_OP_RSUB_S] = vjp_neg,           [NNC_OP_MUL_S] = vjp_scale,         [NNC_OP_DIV_S] = vjp_scale,
  [NNC_OP_RDIV_S] = vjp_rdiv_s,        [NNC_OP_POW_S] = vjp_pow_s,         [NNC_OP_ADD] = vjp_arith,
  [NNC_OP_SUB] = vjp_arith,            [NNC_OP_MUL] = vjp_arith,           [NNC_OP_DIV] = vjp_arith,
  [NNC_OP_CAUSAL_MASK] = vjp_mask,     [NNC_OP_PADDING_MASK] = vjp_mask,   [NNC_OP_LINEAR] = vjp_linear,
  [NNC_OP_MATMUL] = vjp_matmul,        [NNC_OP_SOFTMAX] = vjp_softmax,     [NNC_OP_LAYERNORM] = vjp_norm,
  [NNC_OP_RMSNORM] = vjp_norm,         [NNC_OP_SUM] = vjp_reduce,          [NNC_OP_MEAN] = vjp_reduce,
  [NNC_OP_MAX] = vjp_reduce,           [NNC_OP_RESHAPE] = vjp_reshape,     [NNC_OP_TRANSPOSE] = vjp_transpose,
  [NNC_OP_SLICE] = vjp_slice,          [NNC_OP_CONCAT] = vjp_concat,       [NNC_OP_SPLIT] = vjp_split,
  [NNC_OP_EMBEDDING] = vjp_embedding,  [NNC_OP_CROSS_ENTROPY] = vjp_cross_entropy,
  [NNC_OP_EXPAND] = vjp_expand,          [NNC_OP_ATTENTION] = vjp_attention,
  [NNC_OP_IM2COL] = vjp_im2col,          [NNC_OP_PAD] = vjp_pad,          [NNC_OP_LSTM_SCAN] = vjp_scan,     [NNC_OP_GRU_SCAN] = vjp_scan,
  [NNC_OP_ROPE] = vjp_rope,
  [NNC_OP_ALL_REDUCE] = vjp_all_reduce,  [NNC_OP_ALL_GATHER] = vjp_all_gather,  [NNC_OP_CE_SHARD] = vjp_ce_shard,
};

ad_rule nnc_ad_rule_of(nnc_op op) { return op > NNC_OP_NONE && op < NNC_OP_COUNT ? rules[op] : NULL; }
