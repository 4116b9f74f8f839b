/* compiler/driver.h — the whole compiler in one call: model file to output
 * folder (front-end, passes, target description, tuning, emitter). */
#ifndef NNC_DRIVER_H
#define NNC_DRIVER_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/status.h"

typedef struct nnc_build_opts {
  const char *model;               /* the model file */
  const char *target;              /* a --target name */
  const char *const *defines;      /* -D name=value */
  int ndefines;
  const char *precision;           /* --precision; NULL: f32 */
  const char *outputs;             /* --outputs: "f32" or "storage" (float outputs keep the
                                      storage dtype of --precision); NULL: f32 */
  const char *out_dir;             /* NULL: stop after tuning (with explain) */
  FILE *explain;                   /* when not NULL, each kernel's tiles and why */
  int cuda_graphs;                 /* options.cuda_graphs's default in a CUDA folder: 0 nnc's (on,
                                      but off for --generate), 1 --cuda-graphs=on, -1 =off */
  bool measure;                    /* --tune=measure: time the implementations on the GPU */
  const char *tune_file;           /* --tune-file; NULL: the default path */
  bool train;                      /* --train: the training step (loss and gradients) */
  bool generate;                   /* --generate: a decoder with kv caches, and generate_<model> */
  const char *loss;                /* --loss: the loss output's name; NULL: "loss" */
  const char *recompute;           /* --recompute: none, gelu, norm or block; NULL: none */
  const char *parallel;            /* --parallel: tp:N (and dp:M); NULL: one process */
  const char *quantize;            /* --quantize: none, int8w or w8a8; NULL: none */
  bool no_hfuse;                   /* --hfuse=off: linears of one input stay one GEMM each */
  bool gelu_tanh;                  /* --gelu=tanh: erf-form GELUs computed in the tanh form */
} nnc_build_opts;

nnc_status nnc_build(const nnc_build_opts *o, nnc_error *err);

#endif
