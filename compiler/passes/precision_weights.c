/* compiler/passes/precision_weights.c — arithmetic on weights alone stays
 * f32 under --precision=bf16|f16.
 *
 * A batch norm folded into its convolution makes the weight the GEMM reads
 * from the weights alone (W * gamma / sqrt(var + eps)). In narrow storage
 * each weight is rounded once when it is loaded; computing the product from
 * the rounded weights and rounding it again doubles that error, which a
 * deep network accumulates (ResNet-18 at odd sizes: 0.96% of its logits
 * before folding, 1.5% after). So the weights such arithmetic reads stay
 * f32, the arithmetic runs in f32, and its results are rounded once, by a
 * cast where a kernel of the model reads them. A weight-only component
 * without arithmetic (GPT-2's slice of wpe) stays as it was: narrow. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "precision_internal.h"

/* Node n computes from weights alone: every input a parameter or the output
 * of such a node (nodes are in topological order). */
static bool weights_only(const nnc_graph *g, const nnc_node *n, const bool *wo) {
  if (n->dead || n->nin == 0) return false;
  for (int j = 0; j < n->nin; j++)
    if (!wo[n->in[j]]) return false;
  return true;
}

static int find(int *parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

/* Puts the nodes with keep[n] first, then the rest, each in their order. */
static nnc_status reorder(nnc_graph *g, const bool *first, nnc_error *err) {
  int n = g->nnodes, k = 0;
  nnc_node *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
  int *where = malloc((size_t)(n ? n : 1) * sizeof *where);
  if (!tmp || !where) {
    free(tmp);
    free(where);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "precision: out of memory");
  }
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++)
      if (first[i] == (pass == 0)) {
        where[i] = k;
        tmp[k++] = g->nodes[i];
      }
  memcpy(g->nodes, tmp, (size_t)n * sizeof *tmp);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].producer >= 0) g->tensors[t].producer = where[g->tensors[t].producer];
  free(tmp);
  free(where);
  return NNC_OK;
}

nnc_status nnc_precision_keep_weight_math(nnc_graph *g, nnc_dtype storage, nnc_error *err) {
  int nt = g->ntensors, nn = g->nnodes;
  bool *wo = calloc((size_t)nt + 1, sizeof *wo), *arith = calloc((size_t)nn + 1, sizeof *arith);
  int *parent = malloc(((size_t)nn + 1) * sizeof *parent);
  bool *in_f32 = calloc((size_t)nn + 1, sizeof *in_f32), *keep = calloc((size_t)nt + 1, sizeof *keep);
  nnc_status st = NNC_OK;
  if (!wo || !arith || !parent || !in_f32 || !keep) {
    st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "precision: out of memory");
    goto out;
  }
  for (int i = 0; i < g->nparams; i++) wo[g->params[i]] = g->tensors[g->params[i]].dtype == NNC_F32;
  /* the weight-only nodes, joined into components through the values they share */
  for (int n = 0; n < nn; n++) {
    parent[n] = n;
    const nnc_node *x = &g->nodes[n];
    if (!weights_only(g, x, wo)) continue;
    for (int j = 0; j < x->nout; j++) wo[x->out[j]] = true;
    for (int j = 0; j < x->nin; j++) {
      int p = g->tensors[x->in[j]].producer;
      if (p >= 0) parent[find(parent, p)] = find(parent, n);
    }
  }
  for (int n = 0; n < nn; n++) {
    const nnc_node *x = &g->nodes[n];
    nnc_op_class c = nnc_op_info_of(x->op)->cls;
    if (weights_only(g, x, wo) && x->op != NNC_OP_CAST && (c == NNC_CLASS_UNARY || c == NNC_CLASS_BINARY))
      arith[find(parent, n)] = true;
  }
  for (int n = 0; n < nn; n++) in_f32[n] = weights_only(g, &g->nodes[n], wo) && arith[find(parent, n)];
  /* the weights those components read stay f32 */
  for (int n = 0; n < nn; n++)
    for (int j = 0; in_f32[n] && j < g->nodes[n].nin; j++) {
      int t = g->nodes[n].in[j];
      if (g->tensors[t].kind == NNC_TENSOR_PARAM) keep[t] = true;
    }
  for (int i = 0; i < g->nparams; i++) {
    nnc_tensor *t = &g->tensors[g->params[i]];
    if (t->dtype == NNC_F32 && !keep[g->params[i]]) t->dtype = storage;
  }
  /* every other reader of a kept weight or of a component's value reads it
   * rounded once, through one cast per value */
  int first_new = nn;
  for (int n = 0; !st && n < first_new; n++) {
    nnc_node *x = &g->nodes[n];
    if (in_f32[n] || x->dead) continue;
    for (int j = 0; !st && j < x->nin; j++) {
      int t = x->in[j], p = g->tensors[t].producer;
      bool f32 = keep[t] || (p >= 0 && p < first_new && in_f32[p]);
      if (!f32) continue;
      int cast = -1;
      for (int c = first_new; c < g->nnodes && cast < 0; c++)
        if (g->nodes[c].in[0] == t) cast = g->nodes[c].out[0];
      if (cast < 0) st = nnc_precision_add_cast(g, t, storage, g->tensors[t].name, &cast, err);
      x = &g->nodes[n];   /* add_cast may move the node array */
      if (!st) x->in[j] = cast;
    }
  }
  if (!st && g->nnodes > first_new) {
    /* the components and their casts first: they read weights only */
    bool *first = calloc((size_t)g->nnodes, sizeof *first);
    if (!first) {
      st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "precision: out of memory");
    } else {
      for (int n = 0; n < g->nnodes; n++) first[n] = n >= first_new || in_f32[n];
      st = reorder(g, first, err);
      free(first);
    }
  }
out:
  free(wo);
  free(arith);
  free(parent);
  free(in_f32);
  free(keep);
  return st;
}
