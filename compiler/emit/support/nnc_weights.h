/* support/nnc_weights.h — loading weights against a model's manifest, for
 * every generated model (C SIMD and CUDA). Built into lib<model>. */
#ifndef NNC_WEIGHTS_H
#define NNC_WEIGHTS_H

#include <stdint.h>

#include "../runtime/nnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks an open weights file against the manifest and copies every tensor
 * to dst[i] (numel elements of the entry's dtype). An F32 entry also takes
 * an F16 or BF16 tensor, converted to f32. The file may hold tensors the
 * model does not use. */
nnrt_status nnc_weights_load(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                          nnrt_error *err);

/* Elements of one manifest entry. */
int64_t nnc_weights_numel(const nnrt_st_desc *d);

#ifdef __cplusplus
}
#endif

#endif
