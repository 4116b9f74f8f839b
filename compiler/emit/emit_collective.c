/* compiler/emit/emit_collective.c — a parallel plan's collectives (all_reduce,
 * all_gather): each one a call to the runtime's communicator (runtime/nnrt_comm.h), which runs it
 * over the engine the ranks were launched with (MPI for C SIMD, NCCL on the
 * model's stream for CUDA). */
#include <stdio.h>

#include "c_simd.h"
#include "cuda.h"

static const char *comm_dtype(nnc_dtype t) {
  return t == NNC_BF16 ? "NNRT_BF16" : t == NNC_F16 ? "NNRT_F16" : "NNRT_F32";
}

nnc_status cs_emit_all_reduce(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  char count[EC_EXPR], note[600], head[64];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* the %s over the %d ranks of each one's %s */\n", n->attrs.reduce_max ? "max" : "sum",
                n->attrs.ranks, ec_note(x, n->in[0], note, sizeof note));
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  nnc_sb_printf(&body,
    "  nnrt_error e = {0};\n"
    "  if (nnrt_comm_all_reduce(c->m->%s, x, y, (size_t)(%s), NNRT_F32, %s, NULL, &e))\n"
    "    return fail(c->m, %s_E_COMM, \"kernel %d (%%s, %%s): %%s\", kernel_table[%d].name, kernel_table[%d].where, e.msg);\n",
    x->tpc, ec_elems(x, n->out[0], count, sizeof count), n->attrs.reduce_max ? "NNRT_REDUCE_MAX" : "NNRT_REDUCE_SUM", x->P, ki,
    ki, ki);
  if (n->attrs.scalar != 1.0)
    nnc_sb_printf(&body, "  for (size_t i = 0; i < (size_t)(%s); i++) y[i] *= %.9gf;\n", count, n->attrs.scalar);
  nnc_sb_printf(&body, "  return 0;\n");
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, out, head, NULL, "c->d", &body);
  return NNC_OK;
}

nnc_status cs_emit_all_gather(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  char count[EC_EXPR], note[600], head[64];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* the %d ranks' %s, stacked in rank order */\n", n->attrs.ranks,
                ec_note(x, n->in[0], note, sizeof note));
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  nnc_sb_printf(&body,
    "  nnrt_error e = {0};\n"
    "  if (nnrt_comm_all_gather(c->m->%s, x, y, (size_t)(%s), NNRT_F32, NULL, &e))\n"
    "    return fail(c->m, %s_E_COMM, \"kernel %d (%%s, %%s): %%s\", kernel_table[%d].name, kernel_table[%d].where, e.msg);\n"
    "  return 0;\n",
    x->tpc, ec_elems(x, n->in[0], count, sizeof count), x->P, ki, ki, ki);
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, out, head, NULL, "c->d", &body);
  return NNC_OK;
}

nnc_status cu_emit_all_gather(const ec_ctx *x, int ki, nnc_sb *out, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  char count[EC_EXPR], note[600], head[160], px[256], py[256];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* the %d ranks' %s, stacked in rank order, on the model's stream */\n", n->attrs.ranks,
                ec_note(x, n->in[0], note, sizeof note));
  nnc_sb_printf(&body,
    "  nnrt_error e = {};\n"
    "  if (nnrt_comm_all_gather(m->%s, %s, %s, (size_t)(%s), %s, s, &e))\n"
    "    return fail(m, %s_E_COMM, \"kernel %d (%%s, %%s): %%s\", kernel_table[%d].name, kernel_table[%d].where, e.msg);\n"
    "  return 0;\n",
    x->tpc, ec_ptr(x, n->in[0], px, sizeof px), ec_ptr(x, n->out[0], py, sizeof py), ec_elems(x, n->in[0], count, sizeof count),
    comm_dtype(x->g->tensors[n->out[0]].dtype), x->P, ki, ki, ki);
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, out, head, NULL, "&c.d", &body);
  return NNC_OK;
}

nnc_status cu_emit_all_reduce(const ec_ctx *x, int ki, nnc_sb *out, nnc_error *err) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  if (n->attrs.scalar != 1.0)
    return nnc_errorf(err, NNC_E_INTERNAL, n->loc, "kernel %d: expected an all_reduce of the plain sum, found a factor %g",
                      ki, n->attrs.scalar);
  char count[EC_EXPR], note[600], head[160], px[256], py[256];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* the %s over the %d ranks of each one's %s, on the model's stream */\n",
                n->attrs.reduce_max ? "max" : "sum", n->attrs.ranks, ec_note(x, n->in[0], note, sizeof note));
  nnc_sb_printf(&body,
    "  nnrt_error e = {};\n"
    "  if (nnrt_comm_all_reduce(m->%s, %s, %s, (size_t)(%s), %s, %s, s, &e))\n"
    "    return fail(m, %s_E_COMM, \"kernel %d (%%s, %%s): %%s\", kernel_table[%d].name, kernel_table[%d].where, e.msg);\n"
    "  return 0;\n",
    x->tpc, ec_ptr(x, n->in[0], px, sizeof px), ec_ptr(x, n->out[0], py, sizeof py), ec_elems(x, n->out[0], count, sizeof count),
    comm_dtype(x->g->tensors[n->out[0]].dtype), n->attrs.reduce_max ? "NNRT_REDUCE_MAX" : "NNRT_REDUCE_SUM", x->P,
    ki, ki, ki);
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, out, head, NULL, "&c.d", &body);
  return NNC_OK;
}
