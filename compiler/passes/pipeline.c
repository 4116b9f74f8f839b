/* compiler/passes/pipeline.c — every pass after the front-end, in order. */
#include "passes.h"

nnc_status nnc_compile_graph(nnc_graph *g, nnc_schedule *s, nnc_error *err) {
  return nnc_compile_graph_for(g, NULL, s, err);
}

nnc_status nnc_compile_graph_for(nnc_graph *g, const nnc_compile_opts *o, nnc_schedule *s, nnc_error *err) {
  /* a caller may hand over a zeroed schedule; one set up for another graph is a bug */
  if (!s->g && s->nk == 0) nnc_schedule_init(s, g);
  if (s->g != g)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "compile: the schedule was set up for another graph");
  int merged = 0, removed = 0, cancelled = 0, masks = 0;
  nnc_status st = nnc_pass_check(g, err);
  if (!st) st = nnc_pass_layout(g, o && o->hoist_weights, &cancelled, err);
  if (!st) st = nnc_pass_mask_cast(g, &masks, err);
  if (!st) st = nnc_pass_cse(g, &merged, err);
  if (!st) st = nnc_pass_dce(g, &removed, err);
  if (!st) st = nnc_pass_fuse(g, o, s, err);
  if (!st) st = nnc_pass_fold_heads(s, err);
  if (!st && o && o->attention_append) st = nnc_pass_fold_append(s, err);
  if (!st && o && o->attention_rope) st = nnc_pass_fold_rope(s, err);
  if (!st && o && o->gemm_post_norm > 0) st = nnc_pass_fold_post_norm(s, o->gemm_post_norm, err);
  if (!st && o && o->hoist_weights) st = nnc_pass_hoist_weights(s, err);
  if (!st && o && o->hoist_weights) st = nnc_pass_join_weights(s, NULL, err);
  if (!st) st = nnc_pass_slice_view(s, NULL, err);
  if (!st) st = nnc_pass_memplan(s, err);
  return st;
}
