/* tests/train/loss_scale_mlp.c — loss scaling in the training API of
 * models/mlp.lua compiled with --train -D pixels=13 -D hidden1=33
 * -D hidden2=17 -D classes=5 (C SIMD, f32; test_emit_c_simd builds and runs
 * it in the folder of test_mlp_train_step):
 *   - at scale 2^10 the gradients are 2^10 times the unscaled ones and the
 *     update (norm, weights, moments) is the unscaled run's, bit for bit;
 *   - dynamic scaling from 2^127 overflows: the update is skipped (weights,
 *     moments and step count unchanged), the scale halves, and after enough
 *     halvings the update is the unscaled run's again;
 *   - the scale doubles after scale_window good updates; a fixed scale
 *     stays, and a fixed scale that overflows is an error;
 *   - a run resumed from a checkpoint taken mid-way (scale, good updates,
 *     skipped updates in it) ends in the same checkpoint, byte for byte.
 * Exit 0 on success, 1 on an API error, 2 on a wrong value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#include "runtime/nnrt.h"

#define B 7
static const char *names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "out.weight", "out.bias"};
static const size_t sizes[] = {33 * 13, 33, 17 * 33, 17, 5 * 17, 5};
static float x[B * 13];
static int32_t y[B];
static const mlp_dims dims = {B};

#define CHECK(cond, ...)                  \
  do {                                    \
    if (!(cond)) {                        \
      fprintf(stderr, "FAILED: " __VA_ARGS__); \
      fprintf(stderr, "\n");              \
      return 2;                           \
    }                                     \
  } while (0)

#define API(m, call)                                          \
  do {                                                        \
    if (call) {                                               \
      fprintf(stderr, "%s: %s\n", #call, mlp_last_error(m)); \
      return 1;                                               \
    }                                                         \
  } while (0)

/* The same random weights every time (inputs up to 50: gradients above 2,
 * so that 2^127 times them overflows f32). */
static mlp_model *model(void) {
  mlp_options op;
  mlp_options_default(&op);
  op.threads = 2;
  mlp_model *m = NULL;
  if (mlp_create(&op, &m)) return NULL;
  srand(3);
  for (int i = 0; i < 6; i++) {
    float w[33 * 17];
    for (size_t j = 0; j < sizes[i]; j++) w[j] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.6f;
    if (mlp_set_weight(m, names[i], w, sizes[i])) return NULL;
  }
  return m;
}

static mlp_inputs inputs(void) {
  mlp_inputs in = {x, y, NULL};   /* loss_scale: the training functions' */
  return in;
}

static mlp_train_options options(int dynamic, int64_t window) {
  mlp_train_options o;
  mlp_train_options_default(&o);
  o.lr = 1e-2f;
  o.dynamic_scale = dynamic;
  o.scale_window = window;
  return o;
}

/* Every weight, first and second moment of m (through a checkpoint) into
 * v; the number of floats. */
static size_t state_of(mlp_model *m, const char *path, float *v) {
  if (mlp_save(m, path)) return 0;
  nnrt_st *st = NULL;
  nnrt_error e = {0};
  if (nnrt_st_open(path, &st, &e)) return 0;
  size_t n = 0;
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 6; i++) {
      char name[64];
      snprintf(name, sizeof name, "%s%s", k == 0 ? "" : k == 1 ? "optim.m." : "optim.v.", names[i]);
      const nnrt_st_tensor *t;
      if (nnrt_st_find(st, name, &t, &e)) return 0;
      memcpy(v + n, t->data, sizes[i] * sizeof *v);
      n += sizes[i];
    }
  nnrt_st_close(st);
  return n;
}

#define NSTATE (3 * (33 * 13 + 33 + 17 * 33 + 17 + 5 * 17 + 5))

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* 2^10: gradients times 2^10, the same update. */
static int scaled_update(void) {
  mlp_model *a = model(), *s = model();
  if (!a || !s) return 1;
  const mlp_inputs in = inputs();
  mlp_train_options o = options(1, 0);
  float la, ls, na, ns;
  API(s, mlp_train_set_loss_scale(s, 1024));
  CHECK(mlp_train_loss_scale(a) == 1 && mlp_train_loss_scale(s) == 1024, "the scales are %g and %g",
        mlp_train_loss_scale(a), mlp_train_loss_scale(s));
  API(a, mlp_train_accumulate(a, &dims, &in, &la));
  API(s, mlp_train_accumulate(s, &dims, &in, &ls));
  CHECK(la == ls, "the loss changed with the scale: %g, %g", la, ls);
  double gmax = 0;
  for (int i = 0; i < 6; i++) {
    const float *ga = mlp_train_gradient(a, names[i]), *gs = mlp_train_gradient(s, names[i]);
    for (size_t j = 0; j < sizes[i]; j++) {
      CHECK(fabsf(gs[j] - 1024 * ga[j]) <= 1e-6f * fabsf(1024 * ga[j]), "%s[%zu]: %.9g at scale 1024, %.9g at 1",
            names[i], j, gs[j], ga[j]);
      gmax = fmax(gmax, fabs(ga[j]));
    }
  }
  CHECK(gmax > 2, "the largest gradient is %g; 2^127 times it must overflow", gmax);
  API(a, mlp_train_update(a, &o, NULL, &na));
  API(s, mlp_train_update(s, &o, NULL, &ns));
  static float va[NSTATE], vs[NSTATE];
  CHECK(state_of(a, "ls_a.st", va) == NSTATE && state_of(s, "ls_s.st", vs) == NSTATE, "reading the checkpoints");
  CHECK(na == ns && same(va, vs, NSTATE), "the update at scale 1024 differs (norms %.9g and %.9g)", na, ns);
  printf("scale 1024: gradients 1024 times, the same update (norm %.6f, largest gradient %.3f)\n", na, gmax);
  mlp_destroy(a);
  mlp_destroy(s);
  return 0;
}

/* 2^127: skipped updates, halvings, then the unscaled update. */
static int overflow(void) {
  mlp_model *a = model(), *s = model();
  if (!a || !s) return 1;
  const mlp_inputs in = inputs();
  mlp_train_options o = options(1, 0);
  float loss, lr = -1, norm;
  static float v0[NSTATE], v[NSTATE], va[NSTATE];
  CHECK(state_of(s, "ls_s.st", v0) == NSTATE, "reading the checkpoint");
  API(s, mlp_train_set_loss_scale(s, 0x1p127f));
  API(s, mlp_train_accumulate(s, &dims, &in, &loss));
  API(s, mlp_train_update(s, &o, &lr, &norm));
  CHECK(!isfinite(norm) && lr == 0, "an overflowing update: norm %g, lr %g", norm, lr);
  CHECK(mlp_train_skipped(s) == 1 && mlp_train_steps(s) == 0 && mlp_train_loss_scale(s) == 0x1p126f,
        "after the overflow: %lld skipped, %lld steps, scale %g", (long long)mlp_train_skipped(s),
        (long long)mlp_train_steps(s), mlp_train_loss_scale(s));
  CHECK(state_of(s, "ls_s.st", v) == NSTATE && same(v, v0, NSTATE), "a skipped update changed the weights");
  int tries = 1;
  while (mlp_train_steps(s) == 0 && tries < 130) {
    API(s, mlp_train_step(s, &dims, &in, &o, &loss, &norm));
    tries++;
  }
  const int64_t k = mlp_train_skipped(s);
  CHECK(mlp_train_steps(s) == 1 && tries == k + 1 && mlp_train_loss_scale(s) == ldexpf(1, 127 - (int)k),
        "after %d tries: %lld steps, %lld skipped, scale %g", tries, (long long)mlp_train_steps(s), (long long)k,
        mlp_train_loss_scale(s));
  float na;
  API(a, mlp_train_step(a, &dims, &in, &o, &loss, &na));
  CHECK(state_of(a, "ls_a.st", va) == NSTATE && state_of(s, "ls_s.st", v) == NSTATE, "reading the checkpoints");
  CHECK(na == norm && same(v, va, NSTATE), "the update at scale 2^%d differs from the unscaled one", 127 - (int)k);
  printf("scale 2^127: %lld updates skipped, weights unchanged; then at 2^%d the unscaled update\n", (long long)k,
         127 - (int)k);
  /* a fixed scale that overflows is an error, the weights unchanged */
  mlp_train_options fixed = options(-1, 0);
  API(s, mlp_train_set_loss_scale(s, 0x1p127f));
  CHECK(mlp_train_step(s, &dims, &in, &fixed, &loss, &norm) == MLP_E_ARG, "a fixed scale's overflow succeeded");
  CHECK(strstr(mlp_last_error(s), "the gradient norm is") != NULL, "the message: %s", mlp_last_error(s));
  CHECK(state_of(s, "ls_a.st", va) == NSTATE && same(v, va, NSTATE) && mlp_train_loss_scale(s) == 0x1p127f,
        "a failed update changed the model");
  CHECK(mlp_train_set_loss_scale(s, 0) == MLP_E_ARG && mlp_train_set_loss_scale(s, INFINITY) == MLP_E_ARG,
        "a scale of 0 or inf was taken");
  mlp_destroy(a);
  mlp_destroy(s);
  return 0;
}

/* Growth: scale_window good updates double the scale; a fixed one stays. */
static int growth(void) {
  mlp_model *d = model(), *f = model();
  if (!d || !f) return 1;
  const mlp_inputs in = inputs();
  mlp_train_options o = options(1, 3), fixed = options(-1, 3);
  API(d, mlp_train_set_loss_scale(d, 4));
  API(f, mlp_train_set_loss_scale(f, 4));
  const float want[7] = {4, 4, 8, 8, 8, 16, 16};   /* after each update */
  for (int i = 0; i < 7; i++) {
    float loss, norm;
    API(d, mlp_train_step(d, &dims, &in, &o, &loss, &norm));
    API(f, mlp_train_step(f, &dims, &in, &fixed, &loss, &norm));
    CHECK(mlp_train_loss_scale(d) == want[i] && mlp_train_loss_scale(f) == 4, "update %d: scales %g and %g, "
          "expected %g and 4", i + 1, mlp_train_loss_scale(d), mlp_train_loss_scale(f), want[i]);
  }
  printf("growth: 4 -> 8 -> 16 every 3 good updates; a fixed scale stays 4\n");
  mlp_destroy(d);
  mlp_destroy(f);
  return 0;
}

/* Eight tries from 2^127 with a window of 2 (skips, a good update, growth),
 * against four, a checkpoint, and four more in a new model. */
static int resume(void) {
  const mlp_inputs in = inputs();
  mlp_train_options o = options(1, 2);
  mlp_model *a = model(), *b = model();
  if (!a || !b) return 1;
  API(a, mlp_train_set_loss_scale(a, 0x1p127f));
  API(b, mlp_train_set_loss_scale(b, 0x1p127f));
  float loss, norm;
  for (int i = 0; i < 140 && mlp_train_steps(a) < 6; i++) {
    API(a, mlp_train_step(a, &dims, &in, &o, &loss, &norm));
    if (mlp_train_steps(b) < 3) API(b, mlp_train_step(b, &dims, &in, &o, &loss, &norm));
  }
  API(b, mlp_save(b, "ls_mid.st"));
  const float mid = mlp_train_loss_scale(b);
  mlp_destroy(b);
  mlp_model *c = model();
  if (!c) return 1;
  API(c, mlp_load(c, "ls_mid.st"));
  CHECK(mlp_train_loss_scale(c) == mid && mlp_train_steps(c) == 3 && mlp_train_skipped(c) == mlp_train_skipped(a),
        "the checkpoint's scaling state: scale %g (saved %g), %lld steps, %lld skipped", mlp_train_loss_scale(c), mid,
        (long long)mlp_train_steps(c), (long long)mlp_train_skipped(c));
  while (mlp_train_steps(c) < 6) API(c, mlp_train_step(c, &dims, &in, &o, &loss, &norm));
  API(a, mlp_save(a, "ls_a.st"));
  API(c, mlp_save(c, "ls_c.st"));
  FILE *fa = fopen("ls_a.st", "rb"), *fc = fopen("ls_c.st", "rb");
  int differ = !fa || !fc;
  while (!differ) {
    int ca = fgetc(fa), cc = fgetc(fc);
    differ = ca != cc;
    if (ca == EOF) break;
  }
  if (fa) fclose(fa);
  if (fc) fclose(fc);
  CHECK(!differ, "the resumed run's checkpoint differs from the uninterrupted one's");
  printf("resume: a checkpoint after 3 updates at scale %g; after 6 (%lld skipped in all, scale %g) the same "
         "checkpoint, byte for byte\n", mid, (long long)mlp_train_skipped(a), mlp_train_loss_scale(a));
  mlp_destroy(a);
  mlp_destroy(c);
  return 0;
}

int main(void) {
  srand(7);
  for (int i = 0; i < B * 13; i++) x[i] = 50.0f * (float)rand() / (float)RAND_MAX;
  for (int i = 0; i < B; i++) y[i] = i % 5;
  int rc = scaled_update();
  if (!rc) rc = overflow();
  if (!rc) rc = growth();
  if (!rc) rc = resume();
  remove("ls_a.st");
  remove("ls_s.st");
  remove("ls_c.st");
  remove("ls_mid.st");
  return rc;
}
