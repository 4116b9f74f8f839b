/* compiler/ir/print.h — the human views of a compiled graph (--emit=ir|dot|plan). */
#ifndef NNC_PRINT_H
#define NNC_PRINT_H

#include <stdio.h>

#include "schedule.h"

/* One line per live node: id, op, input and output shapes and dtypes, its
 * fused kernel, its label and its Lua file:line; then the kernels. */
nnc_status nnc_print_ir(FILE *f, const nnc_schedule *s, nnc_error *err);
/* Graphviz of the fused graph: one cluster per kernel. */
nnc_status nnc_print_dot(FILE *f, const nnc_schedule *s, nnc_error *err);
/* The memory plan: per intermediate its offset and size, then peak bytes and
 * the unplanned sum. */
nnc_status nnc_print_plan(FILE *f, const nnc_schedule *s, nnc_error *err);

#endif
