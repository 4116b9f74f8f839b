/* compiler/emit/emit_collective.c — a parallel plan's collectives: each one
 * a call to the runtime's communicator (runtime/nnrt_comm.h), which runs it
 * over the engine the ranks were launched with (MPI for C SIMD). */
#include <stdio.h>

#include "c_simd.h"

nnc_status cs_emit_all_reduce(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[0]];
  char count[EC_EXPR], note[600], head[64];
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  /* the sum over the %d ranks of each one's partial %s */\n", n->attrs.ranks,
                ec_note(x, n->in[0], note, sizeof note));
  ec_assign(x, &body, 2, "const float *x", n->in[0]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  nnc_sb_printf(&body,
    "  nnrt_error e = {0};\n"
    "  if (nnrt_comm_all_reduce(c->m->comm, x, y, (size_t)(%s), NNRT_F32, NNRT_REDUCE_SUM, NULL, &e))\n"
    "    return fail(c->m, %s_E_COMM, \"kernel %d (%%s, %%s): %%s\", kernel_table[%d].name, kernel_table[%d].where, e.msg);\n",
    ec_elems(x, n->out[0], count, sizeof count), x->P, ki, ki, ki);
  if (n->attrs.scalar != 1.0)
    nnc_sb_printf(&body, "  for (size_t i = 0; i < (size_t)(%s); i++) y[i] *= %.9gf;\n", count, n->attrs.scalar);
  nnc_sb_printf(&body, "  return 0;\n");
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, out, head, NULL, "c->d", &body);
  return NNC_OK;
}
