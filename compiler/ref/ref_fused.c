/* compiler/ref/ref_fused.c — an elementwise kernel one output element at a
 * time: the chain's nodes run in order on scalars, each reading either an
 * earlier node's scalar or an outside tensor broadcast from the element's
 * index, as the generated loop does; an embedding lookup in the chain reads
 * its table's row through the id of the element's row. Nothing internal is
 * ever stored. */
#include <math.h>
#include <stdlib.h>

#include "ref_internal.h"

typedef struct fused_node {
  const nnc_node *n;
  nnc_ref_shape shape;                 /* the node's output */
  nnc_dtype dtype;
  int src[2];                          /* position of the node computing input i, or -1 */
  const double *ext[2];                /* an outside input's array */
  int64_t stride[2][NNC_MAX_RANK];     /* its strides from the kernel's index */
  const double *mask;                  /* padding mask [shape.d[0], S] */
  const double *table, *ids;           /* an embedding's: its output is the loop's shape, [..., C] */
} fused_node;

static int position_of(const nnc_ref *r, const nnc_kernel *k, int upto, int t) {
  for (int i = upto - 1; i >= 0; i--)
    if (r->g->nodes[k->nodes[i]].out[0] == t) return i;
  return -1;
}

/* The node's output shape from its inputs' shapes, as the graph op checks it. */
static bool node_shape_ok(const nnc_ref *r, const nnc_node *n) {
  nnc_ref_shape a = nnc_ref_shape_of(r, n->in[0]), y = nnc_ref_shape_of(r, n->out[0]), want = a;
  nnc_op_class cls = nnc_op_info_of(n->op)->cls;
  if (cls == NNC_CLASS_BINARY) {
    nnc_ref_shape b = nnc_ref_shape_of(r, n->in[1]);
    if (!nnc_ref_broadcast(&a, &b, &want)) return false;
  }
  if (cls == NNC_CLASS_MASK && a.rank < 2) return false;
  if (n->op == NNC_OP_EXPAND) return nnc_ref_broadcast(&a, &y, &want) && nnc_ref_shape_eq(&want, &y);
  if (n->op == NNC_OP_PADDING_MASK) {
    nnc_ref_shape m = nnc_ref_shape_of(r, n->in[1]);
    if (m.rank != 2 || m.d[0] != a.d[0] || m.d[1] != a.d[a.rank - 1]) return false;
  }
  return nnc_ref_shape_eq(&want, &y);
}

/* Fills f[] and the loop's shape; errors name the node that does not fit. */
static nnc_status plan(const nnc_ref *r, const nnc_kernel *k, int ki, fused_node *f, nnc_ref_shape *dom,
                       nnc_error *err) {
  char d1[NNC_REF_DESC];
  *dom = (nnc_ref_shape){.rank = 0};
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = &r->g->nodes[k->nodes[i]];
    if (n->op == NNC_OP_EMBEDDING) {
      nnc_status st = nnc_ref_embedding_check(r, n, err);
      if (st) return st;
      if (position_of(r, k, i, n->in[0]) >= 0 || position_of(r, k, i, n->in[1]) >= 0)
        return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err, "expected the embedding's table and ids from outside "
                                 "the kernel, found one computed inside");
      f[i] = (fused_node){.n = n, .shape = nnc_ref_shape_of(r, n->out[0]), .dtype = r->g->tensors[n->out[0]].dtype,
                          .src = {-1, -1}, .table = r->val[n->in[0]], .ids = r->val[n->in[1]]};
      if (!nnc_ref_broadcast(dom, &f[i].shape, dom) || (dom->rank && !nnc_ref_shape_eq(dom, &f[i].shape)))
        return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected the embedding %s to have the loop's "
                                   "shape, found %s", r->g->tensors[n->out[0]].name, nnc_ref_desc(r, n->out[0], d1));
      continue;
    }
    if (!nnc_op_is_elementwise(n->op) || n->nout != 1 || n->nin < 1 || n->nin > 2)
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected elementwise nodes, found %s",
                                 nnc_op_info_of(n->op)->name);
    if (!node_shape_ok(r, n))
      return nnc_ref_node_fail(r, n, NNC_E_SHAPE, err, "expected an output shape that follows from the "
                               "inputs, found %s", nnc_ref_desc(r, n->out[0], d1));
    f[i] = (fused_node){.n = n, .shape = nnc_ref_shape_of(r, n->out[0]),
                        .dtype = r->g->tensors[n->out[0]].dtype, .src = {-1, -1}};
    if (!nnc_ref_broadcast(dom, &f[i].shape, dom))
      return nnc_ref_kernel_fail(r, k, ki, NNC_E_SHAPE, err, "expected the nodes' shapes to broadcast to one "
                                 "loop, found %s", nnc_ref_desc(r, n->out[0], d1));
  }
  for (int i = 0; i < k->nnodes; i++) {
    const nnc_node *n = f[i].n;
    if (n->op == NNC_OP_EMBEDDING) continue;
    int values = n->op == NNC_OP_PADDING_MASK ? 1 : n->nin;   /* the mask is read by position */
    for (int j = 0; j < values; j++) {
      f[i].src[j] = position_of(r, k, i, n->in[j]);
      if (f[i].src[j] >= 0) continue;
      nnc_ref_shape s = nnc_ref_shape_of(r, n->in[j]);
      nnc_ref_bcast_strides(&s, dom, f[i].stride[j]);
      f[i].ext[j] = r->val[n->in[j]];
    }
    if (n->op == NNC_OP_PADDING_MASK) {
      if (position_of(r, k, i, n->in[1]) >= 0)
        return nnc_ref_node_fail(r, n, NNC_E_INTERNAL, err, "expected the padding mask %s from outside the "
                                 "kernel, found it computed inside", r->g->tensors[n->in[1]].name);
      f[i].mask = r->val[n->in[1]];
    }
  }
  return NNC_OK;
}

/* Node f's value at the loop index idx (dom's coordinates), given the
 * earlier nodes' values. */
static double eval(const fused_node *f, const nnc_ref_shape *dom, const int64_t *idx, const double *vals) {
  const nnc_node *n = f->n;
  if (n->op == NNC_OP_EMBEDDING) {
    /* the loop's shape is the lookup's [..., C]: the row of ids and the column; ids checked in plan */
    int64_t row = 0, C = f->shape.d[f->shape.rank - 1];
    for (int d = 0; d + 1 < dom->rank; d++) row = row * dom->d[d] + idx[d];
    return f->table[(int64_t)f->ids[row] * C + idx[dom->rank - 1]];
  }
  double in[2] = {0, 0};
  int values = n->op == NNC_OP_PADDING_MASK ? 1 : n->nin;
  for (int j = 0; j < values; j++) {
    if (f->src[j] >= 0) {
      in[j] = vals[f->src[j]];
      continue;
    }
    int64_t off = 0;
    for (int d = 0; d < dom->rank; d++) off += idx[d] * f->stride[j][d];
    in[j] = f->ext[j][off];
  }
  switch (nnc_op_info_of(n->op)->cls) {
  case NNC_CLASS_BINARY: return nnc_ref_store(f->dtype, nnc_ref_binary(n, in[0], in[1]));
  case NNC_CLASS_MASK: {
    /* the element's position in the node's own [..., T, S] shape */
    int rn = f->shape.rank, lead = dom->rank - rn;
    int64_t T = f->shape.d[rn - 2], S = f->shape.d[rn - 1];
    int64_t i = T == 1 ? 0 : idx[lead + rn - 2], j = S == 1 ? 0 : idx[lead + rn - 1];
    int64_t b = f->shape.d[0] == 1 ? 0 : idx[lead];
    bool masked = n->op == NNC_OP_CAUSAL_MASK ? j > i + (S - T) : f->mask[b * S + j] == 0;
    return masked ? (n->attrs.mask_zero ? 0.0 : -INFINITY) : in[0];
  }
  default: return nnc_ref_store(f->dtype, nnc_ref_unary(n, in[0]));
  }
}

nnc_status nnc_ref_kernel_elementwise(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  if (k->nnodes < 1)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected at least one node, found none");
  fused_node *f = calloc((size_t)k->nnodes, sizeof *f);
  double *vals = calloc((size_t)k->nnodes, sizeof *vals);
  if (!f || !vals) {
    free(f);
    free(vals);
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
  }
  nnc_ref_shape dom;
  nnc_status st = plan(r, k, ki, f, &dom, err);
  int pos[NNC_MAX_IO];
  double *y[NNC_MAX_IO];
  int64_t ystride[NNC_MAX_IO][NNC_MAX_RANK];
  for (int o = 0; !st && o < k->nout; o++) {
    pos[o] = position_of(r, k, k->nnodes, k->out[o]);
    if (pos[o] < 0) {
      st = nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected its output %s to be computed by one of "
                               "its nodes, found it is not", r->g->tensors[k->out[o]].name);
      break;
    }
    nnc_ref_bcast_strides(&f[pos[o]].shape, &dom, ystride[o]);
    y[o] = nnc_ref_alloc(r, k->out[o]);
    if (!y[o]) st = nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
  }
  int64_t idx[NNC_MAX_RANK], count = nnc_ref_shape_elems(&dom);
  for (int64_t e = 0; !st && e < count; e++) {
    nnc_ref_unravel(&dom, e, idx);
    for (int i = 0; i < k->nnodes; i++) vals[i] = eval(&f[i], &dom, idx, vals);
    for (int o = 0; o < k->nout; o++) {
      int64_t off = 0;
      for (int d = 0; d < dom.rank; d++) off += idx[d] * ystride[o][d];
      y[o][off] = vals[pos[o]];
    }
  }
  free(f);
  free(vals);
  return st;
}
