/* tests/train/forward_mlp.c — the forward alone of models/mlp.lua compiled
 * with --train -D pixels=13 -D hidden1=33 -D hidden2=17 -D classes=5 (the
 * folder of overfit_mlp.c): mlp_forward and mlp_train_eval give the loss and
 * logits of mlp_train_accumulate on the same batch, bit for bit; an
 * evaluation between two accumulates leaves their summed gradients as they
 * are without it. Exit 0 on success, 1 on an API error, 2 on a difference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

static const char *names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "out.weight", "out.bias"};
static const size_t sizes[] = {33 * 13, 33, 17 * 33, 17, 5 * 17, 5};
enum { NW = 6, ROWS = 7, CLASSES = 5 };

/* A model with the same random weights each time. */
static mlp_model *model(void) {
  mlp_model *m;
  if (mlp_create(NULL, &m)) return NULL;
  srand(1);
  for (int i = 0; i < NW; i++) {
    float w[17 * 33];   /* the largest weight */
    for (size_t j = 0; j < sizes[i]; j++) w[j] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.6f;
    if (mlp_set_weight(m, names[i], w, sizes[i])) {
      fprintf(stderr, "%s\n", mlp_last_error(m));
      mlp_destroy(m);
      return NULL;
    }
  }
  return m;
}

/* Whether every gradient of a and b has the same bits. */
static int same_gradients(const mlp_model *a, const mlp_model *b) {
  for (int i = 0; i < NW; i++) {
    const float *ga = mlp_train_gradient(a, names[i]), *gb = mlp_train_gradient(b, names[i]);
    if (!ga || !gb || memcmp(ga, gb, sizes[i] * sizeof *ga) != 0) return 0;
  }
  return 1;
}

int main(void) {
  float x[2][ROWS * 13];
  int32_t y[2][ROWS];
  srand(2);
  for (int b = 0; b < 2; b++) {
    for (int i = 0; i < ROWS * 13; i++) x[b][i] = (float)rand() / (float)RAND_MAX;
    for (int i = 0; i < ROWS; i++) y[b][i] = (i + b) % CLASSES;
  }
  mlp_dims d = {ROWS};
  mlp_inputs in0 = {.image = x[0], .labels = y[0]}, in1 = {.image = x[1], .labels = y[1]};
  mlp_model *a = model(), *b = model();
  if (!a || !b) return 1;
  /* a: accumulate, eval, forward, accumulate; b: the two accumulates alone */
  float acc_loss = 0, eval_loss = 0, fwd_loss = 0, l = 0;
  float acc_logits[ROWS * CLASSES], eval_logits[ROWS * CLASSES], fwd_logits[ROWS * CLASSES];
  if (mlp_train_accumulate(a, &d, &in0, &acc_loss)) return 1;
  memcpy(acc_logits, mlp_train_output(a, "logits"), sizeof acc_logits);
  if (mlp_train_eval(a, &d, &in0, &eval_loss)) return 1;
  memcpy(eval_logits, mlp_train_output(a, "logits"), sizeof eval_logits);
  mlp_outputs out;
  memset(&out, 0, sizeof out);   /* the gradient fields stay NULL: _forward does not read them */
  out.loss = &fwd_loss;
  out.logits = fwd_logits;
  if (mlp_forward(a, &d, &in0, &out)) {
    fprintf(stderr, "%s\n", mlp_last_error(a));
    return 1;
  }
  if (mlp_train_accumulate(a, &d, &in1, &l) || mlp_train_accumulate(b, &d, &in0, &l) ||
      mlp_train_accumulate(b, &d, &in1, &l))
    return 1;
  const int same_loss = acc_loss == eval_loss && acc_loss == fwd_loss;
  const int same_logits = memcmp(acc_logits, eval_logits, sizeof acc_logits) == 0 &&
                          memcmp(acc_logits, fwd_logits, sizeof acc_logits) == 0;
  const int same_grads = same_gradients(a, b);
  printf("loss: accumulate %.9g, eval %.9g, forward %.9g (%s); logits %s; gradients after an eval between two "
         "accumulates: %s\n", acc_loss, eval_loss, fwd_loss, same_loss ? "the same bits" : "DIFFER",
         same_logits ? "the same bits" : "DIFFER", same_grads ? "the same bits as without it" : "CHANGED");
  mlp_destroy(a);
  mlp_destroy(b);
  return same_loss && same_logits && same_grads ? 0 : 2;
}
