/* compiler/frontend/frontend.h — running a model file to build its graph.
 *
 * The model is ordinary Lua 5.4 run in a sandbox: no io, os, package, debug,
 * require, dofile, loadfile or load; files come in only through the DSL's
 * include(), which cannot leave the model's folder. Instructions and memory
 * have budgets; exceeding either is an NNC_E_LIMIT error at the Lua line.
 * The language itself is described in frontend/dsl.md. */
#ifndef NNC_FRONTEND_H
#define NNC_FRONTEND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../ir/ir.h"

typedef struct nnc_frontend_opts {
  const char *path;             /* the model file, as the user named it */
  const char *const *defines;   /* "name=value" overrides of config{} keys */
  int ndefines;
  uint64_t max_instructions;    /* 0: the default (200 million) */
  size_t max_memory;            /* bytes; 0: the default (512 MiB) */
  FILE *print_to;               /* where the model's print() writes; NULL: stdout */
  bool training;                /* the model's global `training` (nnc --train) */
  bool generating;              /* the model's global `generating` (nnc --generate) */
  int channel_run;              /* an NHWC image's channels are padded to a multiple of this before tap-major
                                   windows (the target's nnc_emitter.channel_run); 0: 8 */
} nnc_frontend_opts;

/* Runs the model and fills g (initialised by the caller; g->name is set from
 * the file name without folder and extension). On failure err holds the
 * message, with the Lua file:line, and g must still be freed. */
nnc_status nnc_frontend_load(const nnc_frontend_opts *o, nnc_graph *g, nnc_error *err);

#endif
