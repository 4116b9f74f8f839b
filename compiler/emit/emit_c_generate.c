/* compiler/emit/emit_c_generate.c — generate_<model>.c under nnc --generate
 * (a model with kv caches): main() hands the benchmark's description of the
 * model to support/nnc_generate.c, which prefills, decodes and samples. */
#include "emit_c.h"

nnc_status ec_write_gen_main(ec_ctx *x, const char *dir, nnc_error *err) {
  if (!x->g->nstates) return NNC_OK;
  const char *p = x->p;
  nnc_sb b;
  nnc_sb_init(&b);
  nnc_sb_printf(&b,
    "/* generate_%s.c — prompts in, tokens out: a prefill call fills the kv caches,\n"
    " * then a decode call a new token appends to them (support/nnc_generate.c).\n"
    " * Run ./generate_%s --help for the options. */\n"
    "#include \"support/nnc_generate.h\"\n\n"
    "extern const nnc_bench_model %s_bench_model;\n\n"
    "int main(int argc, char **argv) { return nnc_generate_main(&%s_bench_model, argc, argv); }\n",
    p, p, p, p);
  char name[128];
  snprintf(name, sizeof name, "generate_%s.c", p);
  nnc_status st = nnc_emit_write_sb(dir, name, &b, err);
  nnc_sb_free(&b);
  if (!st) x->gen_main = true;
  return st;
}
