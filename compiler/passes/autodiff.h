/* compiler/passes/autodiff.h — what the autodiff pass (autodiff.c) shares
 * with its table of vector-Jacobian products (autodiff_rules.c).
 *
 * A rule reads one forward node and the gradients of its outputs and appends
 * to the graph the nodes that compute the gradients of its inputs, built with
 * the helpers below: each adds one node at the forward node's Lua line, runs
 * its shape rule and gives the new tensor's id. */
#ifndef NNC_AUTODIFF_H
#define NNC_AUTODIFF_H

#include "passes.h"

typedef struct ad_ctx {
  nnc_graph *g;
  nnc_srcloc loc;       /* the forward node's line: messages and comments point there */
  const char *label;    /* "grad.<the forward node's label>" */
  nnc_error *err;
  bool primitive;       /* the norms through primitive ops (nnc_autodiff_opts.primitive_norms) */
} ad_ctx;

/* One forward node's gradients. dy[i] is the gradient of output i, or -1 when
 * nothing downstream reached it (then it is zero); want[i] says whether input
 * i needs one. The rule sets dx[i] (left -1: none) for each wanted input. */
typedef struct ad_vjp {
  const nnc_node *n;    /* a copy: adding nodes may move the graph's array */
  int dy[NNC_MAX_IO];
  bool want[NNC_MAX_IO];
  int dx[NNC_MAX_IO];
} ad_vjp;

typedef nnc_status (*ad_rule)(ad_ctx *c, ad_vjp *v);

/* The rule of op, or NULL when the op has none (an error naming it). */
ad_rule nnc_ad_rule_of(nnc_op op);

/* Node builders: *out is the new node's (first) output. */
nnc_status ad_node(ad_ctx *c, nnc_op op, int nin, const int *in, const nnc_attrs *a, int *out);
/* The same for ops whose output shape the caller gives (reshape, expand, pad,
 * embedding_grad). */
nnc_status ad_shaped(ad_ctx *c, nnc_op op, int nin, const int *in, const nnc_attrs *a, int rank,
                     const nnc_dim *shape, int *out);
nnc_status ad_unary(ad_ctx *c, nnc_op op, int x, int *out);
nnc_status ad_scalar(ad_ctx *c, nnc_op op, int x, double s, int *out);
nnc_status ad_binary(ad_ctx *c, nnc_op op, int a, int b, int *out);
nnc_status ad_reduce(ad_ctx *c, nnc_op op, int x, int axis, bool keepdim, int *out);
nnc_status ad_reshape_like(ad_ctx *c, int x, int like, int *out);
nnc_status ad_transpose_last(ad_ctx *c, int x, int *out);
/* dy summed over the dims that `like` broadcast along, in like's shape. */
nnc_status ad_unbroadcast(ad_ctx *c, int dy, int like, int *out);
/* A tensor of like's shape and dtype that is zero (like * 0: like is finite). */
nnc_status ad_zeros_like(ad_ctx *c, int like, int *out);

#endif
