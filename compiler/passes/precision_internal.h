/* compiler/passes/precision_internal.h — what precision.c shares with
 * precision_weights.c. */
#ifndef NNC_PRECISION_INTERNAL_H
#define NNC_PRECISION_INTERNAL_H

#include "passes.h"

/* Adds cast(t -> to) (inferred) and gives its output in *out. */
nnc_status nnc_precision_add_cast(nnc_graph *g, int t, nnc_dtype to, const char *label, int *out, nnc_error *err);

/* Gives every f32 weight the storage dtype, but for the weights read by
 * arithmetic on weights alone, which stays f32 and is cast to the storage
 * dtype where the model's kernels read it (precision_weights.c). */
nnc_status nnc_precision_keep_weight_math(nnc_graph *g, nnc_dtype storage, nnc_error *err);

#endif
