/* support/nnc_train.h — the training program every model compiled with
 * --train gets: train_<model>.c describes its model in an nnc_train_model
 * (its kind, sizes, and adapters to the training API) and calls
 * nnc_train_main, which reads the data, runs the steps, prints progress,
 * evaluates, checkpoints and checks. Run ./train_<model> --help. */
#ifndef NNC_TRAIN_H
#define NNC_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "../runtime/nnrt.h"
#include "nnc_bench.h"

/* What the model learns from. */
typedef enum nnc_train_kind {
  NNC_TRAIN_TOKENS,   /* a language model: i32 ids and targets [B, T], from llm.c's .bin token files */
  NNC_TRAIN_CLASSES   /* a classifier: f32 samples [B, features] and i32 labels [B], from safetensors x and y */
} nnc_train_kind;

/* The harness's copy of <model>_train_options. */
typedef struct nnc_train_opts {
  int sgd;
  float lr;
  int64_t warmup, decay;
  float min_ratio, beta1, beta2, eps, weight_decay;
  const char *no_decay;
  float clip;
  int dynamic_scale;       /* loss scaling: 1 dynamic, -1 fixed, 0 the model's default */
  int64_t scale_window;
} nnc_train_opts;

typedef struct nnc_train_model {
  const char *name;
  nnc_train_kind kind;
  int nsyms;
  const char *const *sym_names;
  const int64_t *sym_max;
  int batch_sym, seq_sym;  /* the dims B and T (seq_sym -1 for a classifier) */
  int64_t classes;         /* targets and labels are below it (the vocabulary, the classes) */
  int64_t features;        /* a classifier's floats per sample */
  const char *logits;      /* a classifier's output of per-class scores (for the accuracy), or NULL */
  int nparams;
  const nnrt_st_desc *manifest;

  int (*create)(int threads, void **m);
  void (*destroy)(void *m);
  const char *(*last_error)(const void *m);
  int (*load)(void *m, const char *path);   /* a checkpoint, or a file of weights alone */
  int (*save)(void *m, const char *path);
  int (*set_weight)(void *m, const char *name, const float *data, size_t count);
  /* a: ids or samples, b: targets or labels, at the sizes sym */
  int (*accumulate)(void *m, const int64_t *sym, const void *a, const void *b, float *loss);
  int (*eval)(void *m, const int64_t *sym, const void *a, const void *b, float *loss);
  int (*update)(void *m, const nnc_train_opts *o, float *lr, float *grad_norm);
  int64_t (*steps)(const void *m);
  const float *(*gradient)(const void *m, const char *name);
  const void *(*output)(const void *m, const char *name);
  /* the benchmark's description of the same model, for --check's gradients */
  const nnc_bench_model *bench;
  /* loss scaling: the gradients are times the scale (_train_set_loss_scale,
   * _train_loss_scale, _train_skipped) */
  int (*set_scale)(void *m, float scale);
  float (*scale)(const void *m);
  int64_t (*skipped)(const void *m);
  int dynamic_default;     /* dynamic unless asked otherwise (f16 storage) */
  int world;               /* --parallel=dp:M's M: ranks under mpirun (N * M beside tp:N), each dp group on its
                              rows of a batch; 1: one */
  int zero1;               /* --parallel=dp:M,zero1: every rank calls save (it gathers the state's shards) */
  int64_t optim_bytes;     /* the optimizer's moments one rank keeps (bytes) */
  int tp;                  /* --parallel=tp:N's N: ranks under mpirun on the same rows, each holding its slices
                              of the weights; 1: none */
} nnc_train_model;

/* The whole program; returns the process exit code (0 ok, 1 a failure or a
 * check above tolerance, 2 a bad command line). */
int nnc_train_main(const nnc_train_model *md, int argc, char **argv);

#endif
