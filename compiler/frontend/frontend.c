/* compiler/frontend/frontend.c — nnc_frontend_load: checks the options, runs
 * the model file in the sandbox with the DSL, and checks the -D overrides. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

/* The body run in protected mode inside the sandbox. */
static int run_model(lua_State *L) {
  fe_state *fe = fe_get(L);
  fe_sandbox_open(L);
  fe_dsl_open(L);
  /* true under nnc --train: a model declares its loss (and the targets it
   * needs) only then, so inference keeps its plain inputs */
  lua_pushboolean(L, fe->training);
  lua_setglobal(L, "training");
  /* true under nnc --generate: a decoder reads this call's tokens only and
   * keeps its keys and values in kv_cache states */
  lua_pushboolean(L, fe->generating);
  lua_setglobal(L, "generating");
  fe_load_file(L, fe->path, false);
  lua_call(L, 0, 0);
  fe_check_defines(L);
  return 0;
}

/* g->name: the file name without its folder and ".lua". */
static nnc_status set_name(nnc_graph *g, const char *path, nnc_error *err) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 4 && strcmp(base + n - 4, ".lua") == 0) n -= 4;
  free(g->name);
  g->name = strndup(base, n);
  if (!g->name) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
  return NNC_OK;
}

/* fe->root and fe->root_given: the top model's folder, resolved and as given. */
static nnc_status set_root(fe_state *fe, nnc_error *err) {
  const char *slash = strrchr(fe->path, '/');
  char dir[PATH_MAX];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == fe->path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - fe->path), fe->path);
  if (!realpath(dir, fe->root))
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "cannot open %s: %s", fe->path, strerror(errno));
  snprintf(fe->root_given, sizeof fe->root_given, "%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/");
  return NNC_OK;
}

static nnc_status parse_defines(fe_state *fe, const nnc_frontend_opts *o, nnc_error *err) {
  if (o->ndefines <= 0) return NNC_OK;
  fe->defines = calloc((size_t)o->ndefines, sizeof *fe->defines);
  if (!fe->defines) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
  for (int i = 0; i < o->ndefines; i++) {
    const char *t = o->defines[i], *eq = t ? strchr(t, '=') : NULL;
    if (!eq || eq == t)
      return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "-D: expected name=value, found \"%s\"", t ? t : "");
    fe->defines[i] = (fe_define){t, (size_t)(eq - t), eq + 1, false};
  }
  fe->ndefines = o->ndefines;
  return NNC_OK;
}

nnc_status nnc_frontend_load(const nnc_frontend_opts *o, nnc_graph *g, nnc_error *err) {
  if (!o || !o->path || !o->path[0] || !g)
    return nnc_errorf(err, NNC_E_USAGE, NNC_NOLOC, "expected a model file");
  fe_state *fe = calloc(1, sizeof *fe);
  if (!fe) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory");
  fe->g = g;
  fe->path = o->path;
  fe->print_to = o->print_to ? o->print_to : stdout;
  fe->training = o->training;
  fe->generating = o->generating;
  fe->channel_run = o->channel_run > 0 ? o->channel_run : 8;
  fe->max_instructions = o->max_instructions ? o->max_instructions : FE_DEFAULT_INSTRUCTIONS;
  fe->max_memory = o->max_memory ? o->max_memory : FE_DEFAULT_MEMORY;
  nnc_status st = set_name(g, o->path, err);
  if (!st) st = set_root(fe, err);
  if (!st) st = parse_defines(fe, o, err);
  if (!st) st = fe_sandbox_run(fe, run_model, err);
  free(fe->defines);
  free(fe);
  return st;
}
