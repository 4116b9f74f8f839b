/* support/nnc_weights_quant.h — quantized checkpoints: the weights of a
 * folder built with --quantize (int8w, w8a8, int4w) saved as it holds them
 * and loaded back without the f32 file, for every generated model. Built
 * into lib<model>.
 *
 * The file is a safetensors file. A quantized weight <name> (a matrix the
 * manifest describes as F32 [N, K] or [K, N], N its output channels) is
 * two tensors, w = q * scale:
 *   <name>        q: I8 in the manifest's shape (int8w, w8a8), or U8 for
 *                 int4w, the manifest's shape with K's extent halved
 *                 (rounding up), two k a byte: k even in bits 0-3, k odd
 *                 in bits 4-7, two's complement (a pad nibble is 0);
 *   <name>.scale  F32, the manifest's shape with K's extent replaced by
 *                 the number of groups along K: 1 (per channel) for int8w
 *                 and w8a8, ceil(K / group) for int4w.
 * The header's __metadata__ says which: "nnc.quantize" (the mode) and, for
 * int4w, "nnc.group_size". Every other weight is stored as in any weights
 * file (F32, I32).
 *
 * SmoothQuant's migration (`nnc calibrate --smooth` where a norm's output
 * is also read by other ops, as in BERT's post-norm blocks): beside a
 * weight a w8a8 folder quantizes, a third tensor
 *   <name>.smooth F32 (or F16, BF16) [K], the factors s_k > 0;
 * a w8a8 folder multiplies the weight's input channel k by s_k before it
 * quantizes it and divides column k of the GEMM's A by s_k before it
 * quantizes A's rows: the same product, A's large channels moved into the
 * weight's per-channel scales. In an f32 file the weight is the float
 * model's; in a quantized checkpoint q * scale holds the weight times s
 * (nnc_weights_read_f32 divides it out). Other folders ignore it. */
#ifndef NNC_WEIGHTS_QUANT_H
#define NNC_WEIGHTS_QUANT_H

#include "nnc_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a model holds its quantized weights. */
typedef struct nnc_weights_qform {
  const char *mode;   /* "int8w", "w8a8" or "int4w" */
  int bits;           /* 8 or 4 */
  int group;          /* k per scale along a channel; 0: one per channel */
  int qmax;           /* the largest |q| the mode writes: 127, 31 or 7 */
} nnc_weights_qform;

/* Weight i's held form from a file's q (I8 or packed U8 bytes, as above)
 * and scales, and back; shape[i] = {N, K, 1 when [N, K]}. */
typedef void (*nnc_weights_import_fn)(void *ctx, int i, const void *values, const float *scales, void *dst);
typedef void (*nnc_weights_export_fn)(void *ctx, int i, const void *held, void *values, float *scales);

/* SmoothQuant's factors of weight i (K values, or NULL: the file has none),
 * handed to the held form at dst before its values; nonzero: failed (the
 * callee's message is in err). And back, for saving: the factors the held
 * form carries, or NULL. */
typedef int (*nnc_weights_smooth_fn)(void *ctx, int i, const float *s, void *dst, nnrt_error *err);
typedef const float *(*nnc_weights_smooth_of_fn)(void *ctx, int i, const void *held);

/* nnc_weights_load_converted for a quantized model: a quantized weight
 * (quantized[i]) stored as f32 (F32, F16, BF16) is quantized by quantize
 * as before; one stored as q and scales is checked (the file's mode and
 * group against form's, the tensors' dtypes and shapes, every q within
 * [-qmax, qmax], every scale finite and >= 0) and handed to import
 * unchanged, so the model holds exactly the values saved. With smooth
 * (w8a8), each quantized weight's `<name>.smooth` (checked: [K], every
 * factor finite and > 0) or NULL goes to smooth first. Messages name the
 * file, the tensor, what was expected and what was found. */
nnrt_status nnc_weights_load_held(const nnrt_st *st, const nnrt_st_desc *manifest, int n, void *const *dst,
                                  const unsigned char *quantized, const int (*shape)[3],
                                  const nnc_weights_qform *form, nnc_weights_convert_fn quantize,
                                  nnc_weights_import_fn import, nnc_weights_smooth_fn smooth, void *ctx,
                                  nnrt_error *err);

/* Writes the weights w (the model's held forms) to path as a quantized
 * checkpoint: f32 and i32 weights as they are, quantized ones through
 * export, with `<name>.smooth` where smooth_of (may be NULL) gives
 * factors. The file is replaced whole (nnrt_st_write). */
nnrt_status nnc_weights_save_held(const char *path, const nnrt_st_desc *manifest, int n, void *const *w,
                                  const unsigned char *quantized, const int (*shape)[3],
                                  const nnc_weights_qform *form, nnc_weights_export_fn export_fn,
                                  nnc_weights_smooth_of_fn smooth_of, void *ctx, nnrt_error *err);

/* The F32 manifest entry d as f32 values from an open file, whatever its
 * form: F32, F16 or BF16 converted, or a quantized checkpoint's q * scale
 * (the values a folder that loads the file multiplies by; over s_k along K
 * when the file has `<name>.smooth`). For the benchmark's reference. */
nnrt_status nnc_weights_read_f32(const nnrt_st *st, const nnrt_st_desc *d, float *out, nnrt_error *err);

#ifdef __cplusplus
}
#endif

#endif
