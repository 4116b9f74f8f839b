/* compiler/calibrate.h — `nnc calibrate`: static activation scales for
 * --precision=fp8 from a calibration run.
 *
 * The model runs on the float64 reference evaluator with the given weights
 * and inputs; for each weight a --precision=fp8 folder holds as e4m3, the
 * largest |value| (or a percentile of them) of what its linear layers read
 * over the whole batch becomes one f32 scale, value / 448, written as
 * "<weight>.input_scale" (shape [1]) beside the weights: the output file is
 * the weights file's tensors with those added, as FP8 checkpoints in the
 * compressed-tensors format keep input_scale beside weight. A folder that
 * loads such a file quantizes those GEMMs' A with the fixed scale instead of
 * each row's own. With --smooth=ALPHA it writes SmoothQuant's migrated
 * weights for --quantize=w8a8 instead (smooth.h). */
#ifndef NNC_CALIBRATE_H
#define NNC_CALIBRATE_H

#include <stdio.h>

#include "ir/ir.h"

typedef struct nnc_calibrate_opts {
  const char *model;              /* MODEL.lua */
  const char *const *defines;     /* -D name=value */
  int ndefines;
  const char *weights;            /* the float weights (safetensors) */
  const char *data;               /* the model's inputs by name (safetensors), symbolic dims from their shapes */
  const char *out;                /* the weights and their input_scale tensors */
  double percentile;              /* of |A| per weight; 100: the largest */
  double smooth;                  /* > 0: --smooth's alpha: SmoothQuant's migration instead (smooth.h) */
} nnc_calibrate_opts;

/* A --method value: "absmax" (100) or "percentile:P" with 0 < P <= 100. */
nnc_status nnc_calibrate_method(const char *text, double *percentile, nnc_error *err);

/* Runs the calibration; one line a scale goes to report (may be NULL). */
nnc_status nnc_calibrate(const nnc_calibrate_opts *o, FILE *report, nnc_error *err);

#endif
