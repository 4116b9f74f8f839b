/* support/nnc_train_data.h — the training program's data: token files in
 * llm.c's format for language models, labelled safetensors files for
 * classifiers, checked once when read, and the batch of every micro-batch
 * as a pure function of its index (so that a resumed run sees the batches
 * it would have seen). */
#ifndef NNC_TRAIN_DATA_H
#define NNC_TRAIN_DATA_H

#include <stdint.h>

#include "nnc_train.h"

typedef struct nnc_train_data {
  const char *path;
  nnc_train_kind kind;
  int64_t n;          /* tokens, or samples */
  uint16_t *tokens;   /* NNC_TRAIN_TOKENS */
  float *x;           /* NNC_TRAIN_CLASSES: n x features */
  int32_t *y;
  int64_t features;
  int64_t *perm;      /* n entries for --shuffle (the caller allocates them): the order of pass perm_pass */
  int64_t perm_pass;
} nnc_train_data;

/* llm.c's token file: a header of 256 int32 (magic 20240520, version 1, the
 * token count), then the tokens as uint16. Every token must be below vocab;
 * at least need tokens. Messages name the file and the position at fault;
 * writes err (512 bytes). */
int nnc_train_read_tokens(const char *path, int64_t vocab, int64_t need, nnc_train_data *d, char *err);
/* A safetensors file with x (F32 [N, features...]) and y (I32 or I64 [N]),
 * labels in [0, classes), finite samples, at least need of them. */
int nnc_train_read_classes(const char *path, int64_t features, int64_t classes, int64_t need, nnc_train_data *d,
                           char *err);
void nnc_train_data_free(nnc_train_data *d);

/* The next value of the splitmix64 generator with state *s (shuffles, random
 * weights and the check's batches). */
uint64_t nnc_train_splitmix64(uint64_t *s);

/* Rank `rank`'s B rows (T tokens each) of micro-batch i, whose world x B
 * rows are what one process would take with a batch of world x B (world 1:
 * the whole micro-batch): language models take consecutive tokens from a
 * position that advances by world*B*T per micro-batch and wraps to 0 where
 * the next would not fit (B*T+1 each: the targets one token on); classifiers
 * take batch i mod floor(N / (world*B)) of the samples, in file order or,
 * with shuffle, in an order drawn afresh for every pass over the data from
 * seed. a gets ids or samples, b targets or labels. */
void nnc_train_batch(nnc_train_data *d, int64_t i, int64_t B, int64_t T, int shuffle, uint64_t seed, int rank,
                     int world, void *a, int32_t *b);

#endif
