/* compiler/passes/parallel_internal.h — what parallel.c shares with
 * parallel_vocab.c. */
#ifndef NNC_PARALLEL_INTERNAL_H
#define NNC_PARALLEL_INTERNAL_H

#include "passes.h"

/* Replaces reads of tensor `from` by `to` in the nodes after node `after`
 * and in the graph's outputs. */
void nnc_parallel_reroute(nnc_graph *g, int after, int from, int to);

/* The vocabulary split over n ranks (parallel_vocab.c's header says how),
 * after the plan's other splits: whole[t] says tensor t (of those before
 * it) is whole on every rank. *splits: how many weights it split. */
nnc_status nnc_parallel_vocab(nnc_graph *g, int n, const bool *whole, int *splits, nnc_error *err);

#endif
