/* compiler/random_weights.h — `nnc weights`: a safetensors file of random
 * weights that matches a model, for demos and tests. */
#ifndef NNC_RANDOM_WEIGHTS_H
#define NNC_RANDOM_WEIGHTS_H

#include <stdint.h>

#include "ir/ir.h"

/* Writes every parameter of g as F32, uniform in [-a, a) with a = 1/sqrt(n)
 * for a matrix whose rows have n elements (so activations keep their scale
 * through a deep model) and a = 0.1 for vectors; reproducible from seed.
 * A weight marked for int8 or int4 (nnc_tensor.quant, nnc weights
 * --quantize=int8w|w8a8|int4w) is rounded to its channel's int8 grid (its
 * groups' int4 grids): a folder of that mode holds it exactly,
 * and its --check then measures the kernels, not the quantization. */
nnc_status nnc_write_random_weights(const nnc_graph *g, const char *path, uint64_t seed,
                                    nnc_error *err);

#endif
