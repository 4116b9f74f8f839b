/* tests/train/overfit_mlp.c — the training step of models/mlp.lua compiled
 * with --train -D pixels=13 -D hidden1=33 -D hidden2=17 -D classes=5:
 * AdamW on one batch of 7 images for 60 steps must drive the loss below a
 * fifth of its first value (test_emit_c_simd builds and runs it). Exit 0 on
 * success, 1 on an API error, 2 when the loss did not fall. */
#include <stdio.h>
#include <stdlib.h>

#include "mlp.h"

int main(void) {
  mlp_model *m;
  mlp_options op;
  mlp_options_default(&op);
  if (mlp_create(&op, &m)) return 1;
  const char *names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "out.weight", "out.bias"};
  const size_t sizes[] = {33 * 13, 33, 17 * 33, 17, 5 * 17, 5};
  srand(1);
  for (int i = 0; i < 6; i++) {
    float *w = malloc(sizes[i] * sizeof *w);
    if (!w) return 1;
    for (size_t j = 0; j < sizes[i]; j++) w[j] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.6f;
    int rc = mlp_set_weight(m, names[i], w, sizes[i]);
    free(w);
    if (rc) {
      fprintf(stderr, "%s\n", mlp_last_error(m));
      return 1;
    }
  }
  float x[7 * 13];
  int32_t y[7];
  for (int i = 0; i < 7 * 13; i++) x[i] = (float)rand() / (float)RAND_MAX;
  for (int i = 0; i < 7; i++) y[i] = i % 5;
  mlp_dims d = {7};
  mlp_inputs in = {x, y};
  mlp_train_options o;
  mlp_train_options_default(&o);
  o.lr = 1e-2f;
  float loss = 0, norm = 0, first = 0;
  for (int s = 0; s < 60; s++) {
    if (mlp_train_step(m, &d, &in, &o, &loss, &norm)) {
      fprintf(stderr, "%s\n", mlp_last_error(m));
      return 1;
    }
    if (s == 0) first = loss;
    if (s % 10 == 0 || s == 59) printf("step %d loss %.5f gradient norm %.4f\n", s, loss, norm);
  }
  /* a bad learning rate is refused, the weights untouched */
  o.lr = 0;
  if (mlp_train_step(m, &d, &in, &o, &loss, &norm) != MLP_E_ARG) return 1;
  mlp_destroy(m);
  return loss < 0.2f * first ? 0 : 2;
}
