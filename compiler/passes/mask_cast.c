/* compiler/passes/mask_cast.c — a padding mask that several attentions read
 * is cast to their scores' dtype once.
 *
 * BERT's attention_mask is an i32 input that every layer's padding_mask
 * reads. The attentions of CUDA and C SIMD read a mask in q's type, so each
 * of their kernels converted the same mask again (a launch per layer on a
 * GPU). One cast node per (mask, dtype) in front of the graph makes it one
 * small kernel a forward; OpenCL's attention, which reads i32 masks as they
 * are, then reads the cast like any other mask. Only masks that are graph
 * inputs or parameters are cast, so the casts can run first. */
#include "passes.h"
#include "precision_internal.h"

/* The padding masks that read t with scores of dtype `to`. */
static int readers(const nnc_graph *g, int t, nnc_dtype to) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const nnc_node *m = &g->nodes[i];
    n += !m->dead && m->op == NNC_OP_PADDING_MASK && m->in[1] == t && m->in[0] != t && g->tensors[m->in[0]].dtype == to;
  }
  return n;
}

nnc_status nnc_pass_mask_cast(nnc_graph *g, int *cast, nnc_error *err) {
  *cast = 0;
  int first_new = g->nnodes;
  nnc_status st = NNC_OK;
  for (int i = 0; !st && i < first_new; i++) {
    const nnc_node *m = &g->nodes[i];
    if (m->dead || m->op != NNC_OP_PADDING_MASK || m->in[1] == m->in[0]) continue;
    int t = m->in[1];
    nnc_dtype to = g->tensors[m->in[0]].dtype;
    if (g->tensors[t].dtype == to || g->tensors[t].producer >= 0 || readers(g, t, to) < 2) continue;
    int c;
    st = nnc_precision_add_cast(g, t, to, g->tensors[t].name, &c, err);
    /* every padding mask of this dtype reads the cast (this one included) */
    for (int j = 0; !st && j < first_new; j++) {
      nnc_node *r = &g->nodes[j];
      if (!r->dead && r->op == NNC_OP_PADDING_MASK && r->in[1] == t && r->in[0] != t &&
          g->tensors[r->in[0]].dtype == to)
        r->in[1] = c;
    }
    *cast += !st;
  }
  return st ? st : nnc_pass_nodes_to_front(g, first_new, err);
}
