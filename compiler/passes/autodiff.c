/* compiler/passes/autodiff.c — reverse-mode differentiation of the checked
 * graph (--train).
 *
 * The gradient of the loss flows from the loss output back through the live
 * nodes in reverse order; each node's vector-Jacobian product is a rule of
 * autodiff_rules.c, which appends ordinary graph nodes, so the backward goes
 * through CSE, DCE, fusion and memory planning with the forward, and the
 * float64 reference evaluates it like any other graph. Attention is first
 * made one op (attention_op.c), whose gradient is the flash-attention
 * backward rather than the T x S matrices of its primitive ops. A tensor read by
 * several nodes sums their contributions. Only nodes between a parameter (or
 * a float input, when asked) and the loss are differentiated.
 *
 * Afterwards the graph's outputs are the loss and one gradient per float
 * parameter, "grad.<name>", in declaration order (then "grad.<input>"), then
 * the model's other outputs, kept so that a training step can also report
 * what the model declares under `training` (a classifier's logits, for its
 * accuracy); a model that wants none declares none then. The graph gains
 * one input, loss_scale (f32 [1]), a factor of the backward's seed: every
 * gradient comes out multiplied by it (dynamic loss scaling for f16). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"

#define TRY(x)                       \
  do {                               \
    nnc_status st_ = (x);            \
    if (st_) return st_;             \
  } while (0)

/* ---------------------------------------------------------------- builders */

nnc_status ad_shaped(ad_ctx *c, nnc_op op, int nin, const int *in, const nnc_attrs *a, int rank,
                     const nnc_dim *shape, int *out) {
  int node;
  TRY(nnc_graph_add_node(c->g, op, nin, in, a, 1, c->loc, c->label, &node, c->err));
  nnc_tensor *t = &c->g->tensors[c->g->nodes[node].out[0]];
  if (shape) {
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  }
  TRY(nnc_infer_node(c->g, node, c->err));
  *out = c->g->nodes[node].out[0];
  return NNC_OK;
}

nnc_status ad_node(ad_ctx *c, nnc_op op, int nin, const int *in, const nnc_attrs *a, int *out) {
  return ad_shaped(c, op, nin, in, a, 0, NULL, out);
}

nnc_status ad_unary(ad_ctx *c, nnc_op op, int x, int *out) { return ad_node(c, op, 1, &x, NULL, out); }

nnc_status ad_scalar(ad_ctx *c, nnc_op op, int x, double s, int *out) {
  nnc_attrs a = {.scalar = s};
  return ad_node(c, op, 1, &x, &a, out);
}

nnc_status ad_binary(ad_ctx *c, nnc_op op, int a, int b, int *out) {
  int in[2] = {a, b};
  return ad_node(c, op, 2, in, NULL, out);
}

nnc_status ad_reduce(ad_ctx *c, nnc_op op, int x, int axis, bool keepdim, int *out) {
  nnc_attrs a = {.axis = axis, .keepdim = keepdim};
  return ad_node(c, op, 1, &x, &a, out);
}

nnc_status ad_reshape_like(ad_ctx *c, int x, int like, int *out) {
  const nnc_tensor *l = &c->g->tensors[like];
  nnc_dim shape[NNC_MAX_RANK];
  int rank = l->rank;
  memcpy(shape, l->shape, sizeof shape);
  return ad_shaped(c, NNC_OP_RESHAPE, 1, &x, NULL, rank, shape, out);
}

nnc_status ad_transpose_last(ad_ctx *c, int x, int *out) {
  int r = c->g->tensors[x].rank;
  nnc_attrs a = {0};
  for (int i = 0; i < r; i++) a.perm[i] = i;
  a.perm[r - 2] = r - 1;
  a.perm[r - 1] = r - 2;
  return ad_node(c, NNC_OP_TRANSPOSE, 1, &x, &a, out);
}

nnc_status ad_zeros_like(ad_ctx *c, int like, int *out) { return ad_scalar(c, NNC_OP_MUL_S, like, 0.0, out); }

nnc_status ad_unbroadcast(ad_ctx *c, int dy, int like, int *out) {
  int cur = dy;
  int rl = c->g->tensors[like].rank;
  /* the leading dims `like` lacks */
  while (c->g->tensors[cur].rank > rl) TRY(ad_reduce(c, NNC_OP_SUM, cur, 0, false, &cur));
  for (int i = 0; i < rl; i++) {
    nnc_dim want = c->g->tensors[like].shape[i], have = c->g->tensors[cur].shape[i];
    if (nnc_dim_eq_const(want, 1) && !nnc_dim_eq_const(have, 1)) TRY(ad_reduce(c, NNC_OP_SUM, cur, i, true, &cur));
  }
  *out = cur;
  return NNC_OK;
}

/* ---------------------------------------------------------------- the pass */

typedef struct ad_state {
  nnc_graph *g;
  int n0, t0;             /* nodes and tensors of the forward graph */
  bool primitive;         /* nnc_autodiff_opts.primitive_norms */
  int *grad;              /* per forward tensor: its gradient so far, or -1 */
  bool *requires;         /* per forward tensor: depends on something that wants a gradient */
  bool *reaches;          /* per forward tensor: the loss depends on it */
} ad_state;

static void state_free(ad_state *s) {
  free(s->grad);
  free(s->requires);
  free(s->reaches);
}

static bool wants_grad(const nnc_graph *g, int t, bool inputs) {
  const nnc_tensor *x = &g->tensors[t];
  if (!nnc_dtype_is_float(x->dtype)) return false;
  return x->kind == NNC_TENSOR_PARAM || (inputs && x->kind == NNC_TENSOR_INPUT);
}

static nnc_status find_loss(const nnc_graph *g, const char *name, int *loss, nnc_error *err) {
  for (int i = 0; i < g->noutputs; i++) {
    if (strcmp(g->outputs[i].name, name) != 0) continue;
    const nnc_tensor *t = &g->tensors[g->outputs[i].tensor];
    bool scalar = true;
    for (int d = 0; d < t->rank; d++) scalar &= nnc_dim_eq_const(t->shape[d], 1);
    if (!scalar || !nnc_dtype_is_float(t->dtype)) {
      char sh[256];
      return nnc_errorf(err, NNC_E_MODEL, g->outputs[i].loc, "--train: expected the loss \"%s\" to be a float "
                        "scalar, found %s%s", name, nnc_dtype_name(t->dtype),
                        nnc_shape_format(g, t->rank, t->shape, sh, sizeof sh));
    }
    *loss = g->outputs[i].tensor;
    return NNC_OK;
  }
  char names[512] = "";
  size_t len = 0;
  for (int i = 0; i < g->noutputs && len < sizeof names; i++)
    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", g->outputs[i].name);
  return nnc_errorf(err, NNC_E_MODEL, NNC_NOLOC, "--train: expected an output named \"%s\" (the loss), found %s%s; "
                    "declare output(\"%s\", ...) in the model (models/gpt2.lua does so when `training` is true) "
                    "or pass --loss=NAME", name, g->noutputs ? "outputs " : "no outputs", names, name);
}

/* Which forward tensors depend on a wanted leaf, and which the loss depends on. */
static void mark(ad_state *s, int loss, bool inputs) {
  const nnc_graph *g = s->g;
  for (int t = 0; t < s->t0; t++) s->requires[t] = wants_grad(g, t, inputs);
  for (int n = 0; n < s->n0; n++) {
    const nnc_node *x = &g->nodes[n];
    if (x->dead) continue;
    bool any = false;
    for (int i = 0; i < x->nin; i++) any |= s->requires[x->in[i]];
    for (int i = 0; i < x->nout; i++) s->requires[x->out[i]] = any && nnc_dtype_is_float(g->tensors[x->out[i]].dtype);
  }
  s->reaches[loss] = true;
  for (int n = s->n0 - 1; n >= 0; n--) {
    const nnc_node *x = &g->nodes[n];
    if (x->dead) continue;
    bool any = false;
    for (int i = 0; i < x->nout; i++) any |= s->reaches[x->out[i]];
    if (any)
      for (int i = 0; i < x->nin; i++) s->reaches[x->in[i]] = true;
  }
}

static nnc_status accumulate(ad_state *s, ad_ctx *c, int t, int dx) {
  if (s->grad[t] < 0) {
    s->grad[t] = dx;
    return NNC_OK;
  }
  return ad_binary(c, NNC_OP_ADD, s->grad[t], dx, &s->grad[t]);
}

static nnc_status backward_node(ad_state *s, int node, nnc_error *err) {
  nnc_graph *g = s->g;
  nnc_node n = g->nodes[node];   /* a copy: the array grows below */
  ad_vjp v = {.n = &n};
  bool any_dy = false, any_want = false;
  for (int i = 0; i < n.nout; i++) {
    v.dy[i] = s->grad[n.out[i]];
    any_dy |= v.dy[i] >= 0;
  }
  for (int i = 0; i < n.nin; i++) {
    v.want[i] = s->requires[n.in[i]];
    v.dx[i] = -1;
    any_want |= v.want[i];
  }
  if (!any_dy || !any_want) return NNC_OK;
  ad_rule rule = nnc_ad_rule_of(n.op);
  if (!rule)
    return nnc_errorf(err, NNC_E_MODEL, n.loc, "--train: %s (%s) has no gradient rule; expected ops of the "
                      "model language only", nnc_op_info_of(n.op)->name, n.label);
  char label[300];
  snprintf(label, sizeof label, "grad.%s", n.label);
  ad_ctx c = {g, n.loc, nnc_graph_intern(g, label), err, s->primitive};
  if (!c.label) return nnc_errorf(err, NNC_E_NOMEM, n.loc, "out of memory while differentiating");
  TRY(rule(&c, &v));
  for (int i = 0; i < n.nin; i++) {
    if (!v.want[i] || v.dx[i] < 0) continue;
    /* x * x: each read contributes */
    TRY(accumulate(s, &c, n.in[i], v.dx[i]));
  }
  return NNC_OK;
}

/* A gradient output needs a value of its own: copy one that is a leaf, is
 * already an output, or another parameter's gradient. */
static nnc_status own_output(nnc_graph *g, int *t, nnc_error *err) {
  if (g->tensors[*t].kind == NNC_TENSOR_VALUE && !nnc_graph_is_output(g, *t)) return NNC_OK;
  ad_ctx c = {g, g->tensors[*t].loc, nnc_graph_intern(g, "grad.copy"), err, false};
  return ad_scalar(&c, NNC_OP_MUL_S, *t, 1.0, t);
}

/* "grad.<name>" for every parameter (and float input, when asked). */
static nnc_status add_grads(ad_state *s, bool inputs, nnc_error *err) {
  nnc_graph *g = s->g;
  for (int pass = 0; pass < 2; pass++) {
    const int *ids = pass ? g->inputs : g->params;
    int count = pass ? g->ninputs : g->nparams;
    if (pass && !inputs) break;
    for (int i = 0; i < count; i++) {
      int t = ids[i];
      /* the loss scale is added after the forward: not a leaf of the loss */
      if (t >= s->t0 || !wants_grad(g, t, inputs)) continue;
      int gt = s->grad[t];
      if (gt < 0) {   /* the loss does not depend on it */
        ad_ctx c = {g, g->tensors[t].loc, nnc_graph_intern(g, "grad.unused"), err, false};
        TRY(ad_zeros_like(&c, t, &gt));
      }
      TRY(own_output(g, &gt, err));
      char name[300];
      snprintf(name, sizeof name, "grad.%s", g->tensors[t].name);
      TRY(nnc_graph_add_output(g, name, gt, g->tensors[t].loc, err));
    }
  }
  return NNC_OK;
}

/* The loss, the gradients, then the model's other outputs. */
static nnc_status add_grad_outputs(ad_state *s, int loss, const nnc_output *loss_out, bool inputs, nnc_error *err) {
  nnc_graph *g = s->g;
  int nkept = g->noutputs;
  nnc_output *kept = malloc((size_t)(nkept ? nkept : 1) * sizeof *kept);
  if (!kept) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while differentiating");
  memcpy(kept, g->outputs, (size_t)nkept * sizeof *kept);
  g->noutputs = 0;
  nnc_status st = nnc_graph_add_output(g, loss_out->name, loss, loss_out->loc, err);
  if (!st) st = add_grads(s, inputs, err);
  for (int i = 0; i < nkept; i++) {
    int t = kept[i].tensor;
    bool keep = strcmp(kept[i].name, loss_out->name) != 0;
    if (!st && keep) st = own_output(g, &t, err);
    if (!st && keep) st = nnc_graph_add_output(g, kept[i].name, t, kept[i].loc, err);
    free(kept[i].name);
  }
  free(kept);
  return st;
}

/* The backward's seed, d loss / d loss = 1, made from the loss so that it
 * stays a value of the graph (the graph has no constants) and a NaN loss
 * stays NaN; with scale, times the new input loss_scale, so that every
 * gradient comes out times it and narrow gradients keep their small values
 * above the format's underflow (the training API divides the update by it
 * again). --precision casts the input to the loss's dtype (precision.c). */
static nnc_status seed(ad_ctx *c, int loss, bool scale, int *out) {
  int zero = -1, one = -1, in = -1, like = -1;
  TRY(ad_zeros_like(c, loss, &zero));
  TRY(ad_scalar(c, NNC_OP_ADD_S, zero, 1.0, scale ? &one : out));
  if (!scale) return NNC_OK;
  const nnc_dim shape[1] = {nnc_dim_const(1)};
  TRY(nnc_graph_add_input(c->g, NNC_LOSS_SCALE_INPUT, NNC_F32, 1, shape, c->loc, &in, c->err));
  TRY(ad_reshape_like(c, in, loss, &like));
  return ad_binary(c, NNC_OP_MUL, one, like, out);
}

nnc_status nnc_pass_autodiff(nnc_graph *g, const nnc_autodiff_opts *o, nnc_error *err) {
  const char *name = o && o->loss ? o->loss : "loss";
  bool inputs = o && o->input_grads;
  int loss = -1, fused = 0;
  TRY(find_loss(g, name, &loss, err));
  if (!(o && o->primitive_attention)) TRY(nnc_pass_attention_op(g, &fused, err));
  nnc_output loss_out = {NULL, loss, NNC_NOLOC};
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].tensor == loss && strcmp(g->outputs[i].name, name) == 0) loss_out = g->outputs[i];
  char *loss_name = strdup(name);
  ad_state s = {g, g->nnodes, g->ntensors, o && o->primitive_norms, NULL, NULL, NULL};
  size_t nt = (size_t)(s.t0 ? s.t0 : 1);
  s.grad = malloc(nt * sizeof *s.grad);
  s.requires = calloc(nt, sizeof *s.requires);
  s.reaches = calloc(nt, sizeof *s.reaches);
  if (!loss_name || !s.grad || !s.requires || !s.reaches) {
    free(loss_name);
    state_free(&s);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while differentiating");
  }
  loss_out.name = loss_name;
  for (int t = 0; t < s.t0; t++) s.grad[t] = -1;
  mark(&s, loss, inputs);
  ad_ctx c = {g, loss_out.loc, nnc_graph_intern(g, "grad.loss"), err, false};
  nnc_status st = c.label ? NNC_OK : nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while differentiating");
  if (!st) st = seed(&c, loss, !(o && o->no_loss_scale), &s.grad[loss]);
  for (int n = s.n0 - 1; !st && n >= 0; n--) {
    const nnc_node *x = &g->nodes[n];
    bool on_path = false;
    for (int i = 0; i < x->nout; i++) on_path |= s.reaches[x->out[i]] && s.requires[x->out[i]];
    if (!x->dead && on_path) st = backward_node(&s, n, err);
  }
  if (!st) st = add_grad_outputs(&s, loss, &loss_out, inputs, err);
  int joined = 0;
  if (!st) st = nnc_pass_norm_residual(g, &joined, err);
  free(loss_name);
  state_free(&s);
  return st;
}
