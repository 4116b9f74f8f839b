/* compiler/emit/emit_c_launches.c — the lists of kernel launches a C-API
 * target writes: the whole schedule in order (forward()), and in a training
 * build the forward alone (forward_only(), for evaluation): the kernels the
 * loss and the kept outputs depend on. */
#include <stdio.h>
#include <stdlib.h>

#include "emit_c_train.h"

/* Marks the kernel that writes tensor t, then the kernels it reads from. */
static void mark_producer(const nnc_schedule *s, const int *writer, int t, bool *in) {
  const int k = writer[t];
  if (k < 0 || in[k]) return;
  in[k] = true;
  for (int i = 0; i < s->k[k].nin; i++) mark_producer(s, writer, s->k[k].in[i], in);
}

int ec_train_forward_kernels(const ec_ctx *x, bool *in) {
  const nnc_schedule *s = x->s;
  const nnc_graph *g = x->g;
  for (int k = 0; k < s->nk; k++) in[k] = false;
  int *writer = malloc((size_t)(g->ntensors ? g->ntensors : 1) * sizeof *writer);
  if (!writer) return -1;
  for (int t = 0; t < g->ntensors; t++) writer[t] = -1;
  for (int k = 0; k < s->nk; k++)
    for (int o = 0; o < s->k[k].nout; o++) writer[s->k[k].out[o]] = k;
  for (int i = 0; i < g->noutputs; i++)
    if (i == ec_train_loss(x) || ec_train_is_kept(x, i)) mark_producer(s, writer, g->outputs[i].tensor, in);
  free(writer);
  int n = 0;
  for (int k = 0; k < s->nk; k++) n += in[k];
  return n;
}

/* Kernel k's launch, after a comment: Lua line, name, fused ops, number, kind. */
static void launch_commented(const ec_ctx *x, nnc_sb *b, int k, void (*launch)(const ec_ctx *x, nnc_sb *b, int k)) {
  const nnc_schedule *s = x->s;
  char where[300], ops[600], name[300];
  ec_where(s->k[k].loc, where, sizeof where);
  ec_kernel_ops(x, k, ops, sizeof ops);
  nnc_emit_comment(ec_kernel_name(x, k), name, sizeof name);
  nnc_sb_printf(b, "  /* %s  %s: %s  (kernel %d, %s) */\n", where, name, ops, k, nnc_kernel_kind_name(s->k[k].kind));
  launch(x, b, k);
}

void ec_emit_launches(const ec_ctx *x, nnc_sb *b, const bool *only, const char *why,
                      void (*launch)(const ec_ctx *x, nnc_sb *b, int k)) {
  const nnc_schedule *s = x->s;
  for (int k = 0; k < s->nk; k++) {
    if (only && !only[k]) {
      int last = k;
      while (last + 1 < s->nk && !only[last + 1]) last++;
      if (last == k) nnc_sb_printf(b, "  SKIP(%d, %d);   /* kernel %d: %s */\n", k, last, k, why);
      else nnc_sb_printf(b, "  SKIP(%d, %d);   /* kernels %d to %d: %s */\n", k, last, k, last, why);
      k = last;
      continue;
    }
    launch_commented(x, b, k, launch);
  }
}

bool ec_emit_forward_only(const ec_ctx *x, nnc_sb *b, const char *profiling, const char *skipped, const char *head,
                          void (*launch)(const ec_ctx *x, nnc_sb *b, int k)) {
  bool *only = calloc((size_t)(x->s->nk ? x->s->nk : 1), sizeof *only);
  const int n = only ? ec_train_forward_kernels(x, only) : -1;
  if (n < 0) {
    b->oom = true;
    free(only);
    return false;
  }
  nnc_sb_printf(b,
    "/* The forward alone, for evaluation (_train_eval, _forward): the %d of the\n"
    " * %d kernels above that the loss and the kept outputs depend on, in the\n"
    " * same order at the same arena offsets; the gradients are not written.\n"
    " * A fused kernel that also writes a backward value runs whole (a little\n"
    " * extra work). A skipped kernel's profiled time is 0. */\n"
    "#define NKERNELS_FORWARD %d\n"
    "#define SKIP(first, last) do { \\\n"
    "    if (%s) \\\n"
    "      for (int i_ = (first); i_ <= (last); i_++) %s; \\\n"
    "  } while (0)\n\n"
    "%s", n, x->s->nk, n, profiling, skipped, head);
  ec_emit_launches(x, b, only, "not needed by the loss or the kept outputs", launch);
  free(only);
  return true;
}

int ec_load_kernels(const ec_ctx *x) {
  int n = 0;
  for (int k = 0; k < x->s->nk; k++) n += x->s->k[k].at_load;
  return n;
}

void ec_emit_forward_launches(const ec_ctx *x, nnc_sb *b, void (*launch)(const ec_ctx *x, nnc_sb *b, int k)) {
  const nnc_schedule *s = x->s;
  bool *run = calloc((size_t)(s->nk ? s->nk : 1), sizeof *run);
  if (!run) {
    b->oom = true;
    return;
  }
  for (int k = 0; k < s->nk; k++) run[k] = !s->k[k].at_load;
  ec_emit_launches(x, b, ec_load_kernels(x) ? run : NULL, "made once the weights are loaded (prepare)", launch);
  free(run);
}

void ec_emit_prepare(const ec_ctx *x, nnc_sb *b, const char *profiling, const char *skipped, const char *head,
                     void (*launch)(const ec_ctx *x, nnc_sb *b, int k), const char *more) {
  const nnc_schedule *s = x->s;
  int n = ec_load_kernels(x);
  if (!n && !more) return;
  if (n)
    nnc_sb_printf(b,
      "/* The %d kernels that read weights alone (a batch norm folded into its\n"
      " * convolution, a weight padded or transposed): run once the weights are\n"
      " * loaded, before the first run after any change to them; what they write\n"
      " * stays in the arena for every run. forward() skips them. */\n"
      "#define SKIP(first, last) do { \\\n"
      "    if (%s) \\\n"
      "      for (int i_ = (first); i_ <= (last); i_++) %s; \\\n"
      "  } while (0)\n\n", n, profiling, skipped);
  else
    nnc_sb_printf(b, "/* Run once the weights are loaded, before the first run after any change\n"
                     " * to them. */\n");
  nnc_sb_puts(b, head);
  for (int k = 0; k < s->nk; k++) {
    if (!s->k[k].at_load) continue;
    launch_commented(x, b, k, launch);
  }
  if (more) nnc_sb_puts(b, more);
  nnc_sb_printf(b, "  return 0;\n}\n\n");
}
