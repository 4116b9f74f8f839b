/* compiler/smooth.h — `nnc calibrate --smooth=ALPHA`: SmoothQuant's scale
 * migration for --quantize=w8a8, done on the weights file.
 *
 * W8A8 quantizes each row of a GEMM's A with one scale, so a few input
 * channels much larger than the rest (as trained transformers have after
 * their norms) leave the others a few int8 steps. Migration divides input
 * channel k of A by s_k and multiplies column k of the weight by s_k, which
 * leaves the product unchanged and moves the range into the weight, whose
 * scale is per output channel:
 *   s_k = max|A_k|^alpha / max|W_k|^(1 - alpha)
 * over the calibration data's rows (max|W_k| over every linear that reads
 * A). Where A is a layernorm's or rmsnorm's output read by linears alone
 * (a pre-norm decoder's ln_1 -> q, k, v and ln_2 -> fc), the division folds
 * into the norm's gamma and beta, so the file stays a float checkpoint of
 * the same function and any folder loads it. Where the norm's output is
 * read by anything else too (BERT's post-norm residuals), or its gamma is
 * shared, the file's values stay and each linear's weight gets
 * `<weight>.smooth`, s as F32 [K]: a w8a8 folder then scales the weight's
 * columns by s when it quantizes it and divides A's columns by s as its
 * GEMM runs (support/nnc_weights_quant.h); other folders ignore it. The
 * linears behind one norm share one s (a CUDA folder quantizes their A
 * once). A linear not behind a norm is left as it is. */
#ifndef NNC_SMOOTH_H
#define NNC_SMOOTH_H

#include <stdio.h>

#include "ir/ir.h"
#include "ref/ref.h"
#include "runtime/nnrt.h"

/* ALPHA from --smooth=ALPHA: 0 < alpha < 1. */
nnc_status nnc_smooth_alpha(const char *text, double *alpha, nnc_error *err);

/* Migrates g's norms as above with r's values (the reference run on the
 * calibration data, the weights of w in it) and writes w's tensors to out,
 * the changed ones as F32, and the added factors. One line a norm goes to
 * report (may be NULL);
 * *count gets the number of norms migrated. */
nnc_status nnc_smooth(const nnc_graph *g, const nnc_ref *r, const nnrt_st *w, double alpha, const char *out,
                      FILE *report, int *count, nnc_error *err);

#endif
