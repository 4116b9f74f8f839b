/* compiler/emit/emit_c_train_main.c — train_<model>.c, the training
 * program's description of the model for support/nnc_train.c: what it
 * learns from (read off its inputs: a language model's ids and targets
 * [B, T], or a classifier's samples [B, features] and labels [B]), its
 * sizes, and adapters to the training API of <model>.h. */
#include <stdio.h>
#include <string.h>

#include "emit_c_train.h"

/* The smallest bound the ops that index with tensor t put on its values
 * (the rows of an embedding table, the classes of a cross-entropy),
 * following moves; 0 when none does. */
static int64_t index_bound(const nnc_graph *g, int t, int depth) {
  int64_t best = 0;
  for (int n = 0; n < g->nnodes && depth < 16; n++) {
    const nnc_node *x = &g->nodes[n];
    if (x->dead) continue;
    for (int i = 0; i < x->nin; i++) {
      if (x->in[i] != t) continue;
      int64_t b = 0;
      const nnc_tensor *a = &g->tensors[x->in[0]];
      if ((x->op == NNC_OP_EMBEDDING || x->op == NNC_OP_CE_SHARD || x->op == NNC_OP_CE_SHARD_GRAD) && i == 1 &&
          x->attrs.ranks > 1) {
        b = x->attrs.vocab;   /* a vocabulary split over the ranks: the whole vocabulary */
      } else if ((x->op == NNC_OP_EMBEDDING || x->op == NNC_OP_CROSS_ENTROPY) && i == 1 && a->rank > 0) {
        nnc_dim d = x->op == NNC_OP_EMBEDDING ? a->shape[0] : a->shape[a->rank - 1];
        b = d.nsym ? 0 : d.k;
      } else if (nnc_op_info_of(x->op)->cls == NNC_CLASS_MOVE) {
        for (int o = 0; o < x->nout; o++) {
          int64_t c = index_bound(g, x->out[o], depth + 1);
          if (c > 0 && (b == 0 || c < b)) b = c;
        }
      }
      if (b > 0 && (best == 0 || b < best)) best = b;
    }
  }
  return best;
}

/* The symbol a dim is, or -1 when it is not one symbol alone. */
static int sym_of(nnc_dim d) { return d.k == 1 && d.nsym == 1 ? d.sym[0] : -1; }

typedef struct shape_of_data {
  bool tokens;
  int a, b;              /* inputs: ids or samples, targets or labels */
  int batch_sym, seq_sym;
  int64_t classes, features;
  int logits;            /* the output of per-class scores, or -1 */
} shape_of_data;

/* What the model learns from, read off its inputs; false when it is
 * neither a language model nor a classifier the program knows. */
static bool find_data(const ec_ctx *x, shape_of_data *s) {
  const nnc_graph *g = x->g;
  /* the model's two inputs, the loss scale aside (the API fills it) */
  int in[2], n = 0;
  for (int i = 0; i < g->ninputs; i++) {
    if (i == ec_train_scale_input(x)) continue;
    if (n == 2) return false;
    in[n++] = i;
  }
  if (n != 2) return false;
  memset(s, 0, sizeof *s);
  s->logits = -1;
  for (int k = 0; k < 2; k++) {
    const nnc_tensor *t = &g->tensors[g->inputs[in[k]]], *u = &g->tensors[g->inputs[in[1 - k]]];
    /* a language model: ids and targets i32 [B, T], targets the loss's */
    if (t->dtype == NNC_I32 && u->dtype == NNC_I32 && t->rank == 2 && u->rank == 2 &&
        strcmp(u->name, "targets") == 0 && g->nsyms == 2) {
      s->tokens = true;
      s->a = in[k];
      s->b = in[1 - k];
      s->batch_sym = sym_of(t->shape[0]);
      s->seq_sym = sym_of(t->shape[1]);
      s->classes = index_bound(g, g->inputs[s->b], 0);
      int64_t ids = index_bound(g, g->inputs[s->a], 0);
      if (ids > 0 && ids < s->classes) s->classes = ids;
      return s->batch_sym >= 0 && s->seq_sym >= 0 && s->batch_sym != s->seq_sym && s->classes > 0 &&
             sym_of(u->shape[0]) == s->batch_sym && sym_of(u->shape[1]) == s->seq_sym;
    }
    /* a classifier: samples f32 [B, features] and labels i32 [B] */
    if (t->dtype == NNC_F32 && u->dtype == NNC_I32 && t->rank == 2 && u->rank == 1 && g->nsyms == 1) {
      s->a = in[k];
      s->b = in[1 - k];
      s->batch_sym = sym_of(t->shape[0]);
      s->seq_sym = -1;
      s->features = t->shape[1].nsym ? 0 : t->shape[1].k;
      s->classes = index_bound(g, g->inputs[s->b], 0);
      for (int i = 0; i < g->noutputs; i++) {
        const nnc_tensor *o = &g->tensors[g->outputs[i].tensor];
        if (ec_train_is_kept(x, i) && o->dtype == NNC_F32 && o->rank == 2 && sym_of(o->shape[0]) == s->batch_sym &&
            !o->shape[1].nsym && o->shape[1].k == s->classes)
          s->logits = i;
      }
      return s->batch_sym == 0 && s->features > 0 && s->classes > 0 && sym_of(u->shape[0]) == s->batch_sym;
    }
  }
  return false;
}

static void write_adapters(const ec_ctx *x, const shape_of_data *s, nnc_sb *b) {
  const nnc_graph *g = x->g;
  const char *p = x->p, *P = x->P;
  const char *ta = s->tokens ? "const int32_t *" : "const float *";
  nnc_sb_printf(b, "static void dims_of(const int64_t *sym, %s_dims *d) {\n  memset(d, 0, sizeof *d);\n", p);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(b, "  d->%s = sym[%d];\n", x->sym[i], i);
  nnc_sb_printf(b, "}\n\n");
  nnc_sb_printf(b,
    "static %s_inputs inputs_of(const void *a, const void *b) {\n"
    "  %s_inputs in;\n  memset(&in, 0, sizeof in);\n  in.%s = (%s)a;\n  in.%s = (const int32_t *)b;\n  return in;\n}\n\n",
    p, p, x->in_name[s->a], ta, x->in_name[s->b]);
  nnc_sb_printf(b,
    "static int t_create(int threads, void **m) {\n  %s_options o;\n  %s_options_default(&o);\n%s"
    "  %s_model *h = NULL;\n  int rc = %s_create(&o, &h);\n  *m = h;\n"
    "  return rc;\n}\n"
    "static void t_destroy(void *m) { %s_destroy(m); }\n"
    "static const char *t_last_error(const void *m) { return %s_last_error(m); }\n"
    "static int t_load(void *m, const char *path) { return %s_load(m, path); }\n"
    "static int t_save(void *m, const char *path) { return %s_save(m, path); }\n"
    "static int t_set_weight(void *m, const char *name, const float *data, size_t count) {\n"
    "  return %s_set_weight(m, name, data, count);\n}\n"
    "static int t_accumulate(void *m, const int64_t *sym, const void *a, const void *b, float *loss) {\n"
    "  %s_dims d;\n  dims_of(sym, &d);\n  %s_inputs in = inputs_of(a, b);\n"
    "  return %s_train_accumulate(m, &d, &in, loss);\n}\n"
    "static int t_eval(void *m, const int64_t *sym, const void *a, const void *b, float *loss) {\n"
    "  %s_dims d;\n  dims_of(sym, &d);\n  %s_inputs in = inputs_of(a, b);\n"
    "  return %s_train_eval(m, &d, &in, loss);\n}\n"
    "static int t_update(void *m, const nnc_train_opts *t, float *lr, float *grad_norm) {\n"
    "  const %s_train_options o = {t->sgd, t->lr, t->warmup, t->decay, t->min_ratio, t->beta1, t->beta2, t->eps,\n"
    "                              t->weight_decay, t->no_decay, t->clip, t->dynamic_scale, t->scale_window};\n"
    "  return %s_train_update(m, &o, lr, grad_norm);\n}\n"
    "static int64_t t_steps(const void *m) { return %s_train_steps(m); }\n"
    "static const float *t_gradient(const void *m, const char *name) { return %s_train_gradient(m, name); }\n"
    "static const void *t_output(const void *m, const char *name) { return %s_train_output(m, name); }\n"
    "static int t_set_scale(void *m, float scale) { return %s_train_set_loss_scale(m, scale); }\n"
    "static float t_scale(const void *m) { return %s_train_loss_scale(m); }\n"
    "static int64_t t_skipped(const void *m) { return %s_train_skipped(m); }\n\n",
    p, p, x->device ? "  (void)threads;   /* a GPU model has no host threads */\n" : "  if (threads > 0) o.threads = threads;\n",
    p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p);
  (void)P;
}

nnc_status ec_write_train_main(const ec_ctx *x, const char *dir, bool *written, nnc_error *err) {
  const nnc_graph *g = x->g;
  const char *p = x->p;
  shape_of_data s;
  *written = find_data(x, &s);
  if (!*written) return NNC_OK;
  nnc_sb b;
  nnc_sb_init(&b);
  nnc_sb_printf(&b,
    "/* train_%s.c — the training program of %s (%s): describes the model to\n"
    " * support/nnc_train.c. Run ./train_%s --help for the options. */\n"
    "#include <string.h>\n\n#include \"%s.h\"\n#include \"support/nnc_train.h\"\n\n"
    "/* the benchmark's description (bench_%s.c), for --check */\n"
    "extern const nnc_bench_model %s_bench_model;\n\n",
    p, p, s.tokens ? "a language model: ids and targets from token files"
                   : "a classifier: samples and labels from safetensors files", p, p, p, p);
  nnc_sb_printf(&b, "static const char *const sym_names[%d] = {", g->nsyms);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(&b, "%s\"%s\"", i ? ", " : "", g->syms[i].name);
  nnc_sb_printf(&b, "};\nstatic const int64_t sym_max[%d] = {", g->nsyms);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(&b, "%s%lld", i ? ", " : "", (long long)g->syms[i].max);
  nnc_sb_printf(&b, "};\n\n");
  write_adapters(x, &s, &b);
  nnc_sb_printf(&b,
    "int main(int argc, char **argv) {\n"
    "  static const nnc_train_model md = {\n"
    "    \"%s\", %s, %d, sym_names, sym_max, %d, %d,\n"
    "    %lld, %lld, %s%s%s,   /* classes, features, logits */\n"
    "    %d, NULL,\n"
    "    t_create, t_destroy, t_last_error, t_load, t_save, t_set_weight, t_accumulate, t_eval, t_update, t_steps,\n"
    "    t_gradient, t_output, &%s_bench_model,\n"
    "    t_set_scale, t_scale, t_skipped, %d,   /* loss scaling: dynamic by default under f16 storage */\n"
    "    %d,   /* ranks (--parallel=dp) */\n"
    "    %d, %lld,   /* ZeRO-1 (--parallel=dp:M,zero1); bytes of the optimizer's moments a rank */\n"
    "    %d,   /* ranks sharing the rows (--parallel=tp) */\n"
    "  };\n"
    "  nnc_train_model m = md;\n"
    "  m.manifest = %s_bench_model.manifest;\n"
    "  return nnc_train_main(&m, argc, argv);\n}\n",
    p, s.tokens ? "NNC_TRAIN_TOKENS" : "NNC_TRAIN_CLASSES", g->nsyms, s.batch_sym, s.seq_sym, (long long)s.classes,
    (long long)s.features, s.logits >= 0 ? "\"" : "", s.logits >= 0 ? g->outputs[s.logits].name : "NULL",
    s.logits >= 0 ? "\"" : "", g->nparams, p, x->r->precision.storage == NNC_F16, x->dp, x->zero1,
    (long long)ec_train_state_bytes(x), x->g->ranks > 1 ? x->g->ranks : 1, p);
  char name[128];
  snprintf(name, sizeof name, "train_%s.c", p);
  nnc_status st = nnc_emit_write_sb(dir, name, &b, err);
  nnc_sb_free(&b);
  return st;
}
