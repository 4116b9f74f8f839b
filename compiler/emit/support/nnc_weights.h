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

/* nnc_weights_load for a model that holds some weights in a form of its
 * own (C SIMD's int8 weights, --quantize=int8w): entry i with convert[i]
 * set is read as f32 into a buffer of its own and handed to
 * fn(ctx, i, values, dst[i]), which writes the held form, instead of being
 * copied. The file is checked as nnc_weights_load checks it. */
typedef void (*nnc_weights_convert_fn)(void *ctx, int i, const float *values, void *dst);
nnrt_status nnc_weights_load_converted(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                                       const unsigned char *convert, nnc_weights_convert_fn fn, void *ctx,
                                       nnrt_error *err);

/* Elements of one manifest entry. */
int64_t nnc_weights_numel(const nnrt_st_desc *d);

/* A parallel plan's slice of one weight (nnc_shard in nnc's IR): along
 * `axis`, seen as groups x parts x chunk, rank r holds [:, r, :]; parts 0:
 * the whole tensor. whole > 0 (a vocabulary split, groups 1): the file's
 * length along axis, which need not divide by parts; each rank holds
 * chunk = ceil(whole / parts) entries, rank r the file's [r * chunk, ...)
 * up to its end and zeros after it. The manifest keeps the file's (whole)
 * shapes. */
typedef struct nnc_weights_shard {
  int axis, parts, groups;
  int64_t whole;
} nnc_weights_shard;

/* Elements of rank's slice of a manifest entry. */
int64_t nnc_weights_shard_numel(const nnrt_st_desc *d, const nnc_weights_shard *s);
/* Copies rank's slice of the whole tensor `full` (elements of elem bytes,
 * shaped as d) to dst. */
void nnc_weights_slice(const void *full, size_t elem, const nnrt_st_desc *d, const nnc_weights_shard *s, int rank,
                       void *dst);
/* The inverse of nnc_weights_slice: rank's slice `part` (elements of elem
 * bytes) written to its place in the whole tensor `full` shaped as d; a
 * vocabulary slice's zero rows past the file's end are dropped. Called for
 * every rank, it rebuilds the whole tensor (a tensor-parallel checkpoint). */
void nnc_weights_unslice(const void *part, size_t elem, const nnrt_st_desc *d, const nnc_weights_shard *s, int rank,
                         void *full);
/* nnc_weights_load for one rank of a parallel plan: dst[i] receives rank's
 * slice of tensor i (as f32 for an F32 entry). An F32 tensor is sliced
 * straight from the mapped file, so a rank reads only its own pages. */
nnrt_status nnc_weights_load_shards(const nnrt_st *st, const nnrt_st_desc *manifest, const nnc_weights_shard *shards,
                                    int rank, int n, void *const *dst, nnrt_error *err);

/* A training checkpoint's optimizer state (runtime/train.c's layout) for
 * one rank of a parallel plan: rank's slices of every weight's moments
 * ("optim.m.<name>", "optim.v.<name>", whole in the file) into mom[i] and
 * vel[i], and the steps taken into *step. A file of weights alone gives
 * zero moments and step 0, as nnrt_ckpt_load_state does; path names the
 * file in messages. */
nnrt_status nnc_weights_load_state_shards(const nnrt_st *st, const char *path, const nnrt_st_desc *manifest,
                                          const nnc_weights_shard *shards, int rank, int n, float *const *mom,
                                          float *const *vel, int64_t *step, nnrt_error *err);

#ifdef __cplusplus
}
#endif

#endif
