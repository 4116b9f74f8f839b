/* compiler/ref/ref_attention_grad.c — an attention_grad kernel whose head
 * split and merge were folded in (passes/fold_heads.c). Its operands live in
 * other tensors (q, k, v in the fused projection, out in the merged heads,
 * dout in the merge's gradient, dq, dk, dv in the split's gradient), so it
 * gathers each into a tensor of its own through the view, runs the graph's
 * attention_grad op on them, and scatters the gradients back through theirs:
 * the views are checked against the graph's transposes, and the backward
 * itself stays the plain one of ref_attention_op.c. */
#include <stdlib.h>

#include "ref_internal.h"

/* Element (b, h, i, c) of rank-4 tensor t at offset + b*sb + h*sh + i*si + c
 * of the view's base: copied into t (gather) or out of it (scatter). */
static void move_view(nnc_ref *r, int t, const nnc_attn_view *v, double *base, bool gather) {
  nnc_ref_shape s = nnc_ref_shape_of(r, t);
  int64_t off = nnc_dim_eval(v->offset, r->sym), sb = nnc_dim_eval(v->sb, r->sym);
  int64_t sh = nnc_dim_eval(v->sh, r->sym), si = nnc_dim_eval(v->si, r->sym);
  double *x = r->val[t];
  for (int64_t b = 0; b < s.d[0]; b++)
    for (int64_t h = 0; h < s.d[1]; h++)
      for (int64_t i = 0; i < s.d[2]; i++) {
        double *row = base + off + b * sb + h * sh + i * si, *own = x + ((b * s.d[1] + h) * s.d[2] + i) * s.d[3];
        for (int64_t c = 0; c < s.d[3]; c++) {
          if (gather) own[c] = row[c];
          else row[c] = own[c];
        }
      }
}

nnc_status nnc_ref_kernel_attention_grad(nnc_ref *r, const nnc_kernel *k, int ki, nnc_error *err) {
  const nnc_attention_grad_desc *d = &k->d.attn_grad;
  int node = -1;
  for (int i = 0; i < k->nnodes; i++)
    if (r->g->nodes[k->nodes[i]].op == NNC_OP_ATTENTION_GRAD) node = k->nodes[i];
  if (node < 0)
    return nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected an attention_grad node, found none");
  if (!d->view[NNC_ATTN_DOUT].on) {
    for (int i = 0; i < k->nnodes; i++) {
      nnc_status st = nnc_ref_eval_node(r, k->nodes[i], err);
      if (st) return st;
    }
    return NNC_OK;
  }
  /* q, k, v, out and dout, each with the view it is read through */
  const int in[5] = {d->fwd.q, d->fwd.k, d->fwd.v, d->fwd.out, d->dout};
  const nnc_attn_view *vin[5] = {&d->fwd.view[NNC_ATTN_Q], &d->fwd.view[NNC_ATTN_K], &d->fwd.view[NNC_ATTN_V],
                                 &d->fwd.view[NNC_ATTN_OUT], &d->view[NNC_ATTN_DOUT]};
  const char *role[5] = {"q", "k", "v", "out", "dout"};
  nnc_status st = NNC_OK;
  int made = 0;
  for (; made < 5 && !st; made++) {
    const double *base;
    if (!vin[made]->on || r->g->tensors[in[made]].rank != 4)
      st = nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected every operand of a folded attention_grad "
                               "to have a view and rank 4, found %s without", role[made]);
    else st = nnc_ref_kernel_operand(r, k, ki, vin[made]->base, role[made], &base, err);
    if (!st && !nnc_ref_alloc(r, in[made])) st = nnc_ref_kernel_fail(r, k, ki, NNC_E_NOMEM, err, "out of memory");
    if (!st) move_view(r, in[made], vin[made], (double *)base, true);
  }
  if (!st) st = nnc_ref_eval_node(r, node, err);
  const int out[3] = {d->dq, d->dk, d->dv};
  for (int i = 0; i < 3 && !st; i++) {
    const nnc_attn_view *v = &d->view[NNC_ATTN_DQ + i];
    double *base = nnc_ref_kernel_lists(k->out, k->nout, v->base) ? nnc_ref_alloc(r, v->base) : NULL;
    if (!v->on || !base)
      st = nnc_ref_kernel_fail(r, k, ki, NNC_E_INTERNAL, err, "expected gradient %d's view base among the "
                               "kernel's outputs", i);
    else move_view(r, out[i], v, base, false);
  }
  /* the gathered copies are this kernel's business only */
  for (int i = 0; i < made; i++) {
    free(r->val[in[i]]);
    r->val[in[i]] = NULL;
  }
  return st;
}
