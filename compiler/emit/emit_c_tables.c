/* compiler/emit/emit_c_tables.c — the constant tables at the top of every
 * C-API target's <model>.c(u): the weights manifest, the symbolic dims with
 * their compiled maxima, and the kernel table (name, Lua line, kind, fused
 * ops) that errors and the profiler name kernels by. One writer each, so the
 * targets cannot drift apart. */
#include <stdio.h>

#include "emit_c.h"

void ec_emit_manifest(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  nnc_sb_printf(b, "static const nnrt_st_desc manifest[%d] = {\n", g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = &g->tensors[g->params[i]];
    char name[600];
    nnc_sb_printf(b, "  {\"%s\", %s, %d, {", nnc_emit_c_string(t->name, name, sizeof name), ec_nnrt_dtype(t->dtype),
                  t->rank);
    for (int d = 0; d < t->rank; d++) nnc_sb_printf(b, "%s%lld", d ? ", " : "", (long long)ec_file_dim(t, d));
    nnc_sb_printf(b, "}},\n");
  }
  if (!g->nparams) nnc_sb_printf(b, "  {\"\", NNRT_F32, 0, {0}},\n");
  nnc_sb_printf(b, "};\n");
  if (g->ranks <= 1) return;
  nnc_sb_printf(b, "\n/* Each weight's slice on this rank of the %d (the file holds them whole): along\n"
                   " * axis, seen as groups x parts x chunk, rank r holds [:, r, :]; parts 0: whole.\n"
                   " * A last field > 0: the file's rows along axis (a vocabulary), each rank's\n"
                   " * chunk ceil(rows / parts), zeros past the file's end. */\n"
                   "static const nnc_weights_shard shards[%d] = {\n", g->ranks, g->nparams ? g->nparams : 1);
  for (int i = 0; i < g->nparams; i++) {
    const nnc_shard *sh = &g->tensors[g->params[i]].shard;
    char name[600];
    nnc_sb_printf(b, "  {%d, %d, %d, %lld},   /* %s */\n", sh->axis, sh->parts, sh->parts ? sh->groups : 0,
                  (long long)(sh->parts ? sh->whole : 0), nnc_emit_comment(g->tensors[g->params[i]].name, name, sizeof name));
  }
  nnc_sb_printf(b, "};\n");
}

int64_t ec_file_dim(const nnc_tensor *t, int d) {
  if (t->shard.parts && d == t->shard.axis && t->shard.whole) return t->shard.whole;
  return t->shape[d].k * (t->shard.parts && d == t->shard.axis ? t->shard.parts : 1);
}

void ec_emit_sym_tables(const ec_ctx *x, nnc_sb *b) {
  const nnc_graph *g = x->g;
  if (!g->nsyms) return;
  nnc_sb_printf(b, "/* The symbolic dims, and the largest value of each the model was compiled for. */\n");
  nnc_sb_printf(b, "static const char *const sym_names[%d] = {", g->nsyms);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(b, "%s\"%s\"", i ? ", " : "", x->sym[i]);
  nnc_sb_printf(b, "};\nstatic const int64_t compiled_max[%d] = {", g->nsyms);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(b, "%s%lld", i ? ", " : "", (long long)g->syms[i].max);
  nnc_sb_printf(b, "};\n\n");
}

void ec_emit_kernel_table(const ec_ctx *x, nnc_sb *b) {
  const nnc_schedule *s = x->s;
  nnc_sb_printf(b, "static const struct {\n  const char *name, *where, *kind, *ops;\n} kernel_table[%d] = {\n",
                s->nk ? s->nk : 1);
  for (int k = 0; k < s->nk; k++) {
    char name[300], where[300], ops[600], e1[300], e2[600];
    ec_where(s->k[k].loc, where, sizeof where);
    ec_kernel_ops(x, k, ops, sizeof ops);
    snprintf(name, sizeof name, "%s", ec_kernel_name(x, k));
    nnc_sb_printf(b, "  {\"%s\", \"%s\", \"%s\", \"%s\"},\n", nnc_emit_c_string(name, e1, sizeof e1),
                  nnc_emit_c_string(where, e2, sizeof e2), nnc_kernel_kind_name(s->k[k].kind), ops);
  }
  if (!s->nk) nnc_sb_printf(b, "  {\"\", \"\", \"\", \"\"},\n");
  nnc_sb_printf(b, "};\n\n");
}
