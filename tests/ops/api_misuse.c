/* tests/ops/api_misuse.c — built by test_emit_c_simd against the folder nnc
 * emits for models/mlp.lua with -D batch=37 -D pixels=23 -D hidden1=129
 * -D hidden2=33 -D classes=10: every API call misused (NULLs, wrong order,
 * sizes above the maximum, wrong or lying weights files) must return its
 * error code with a message, never crash; then weights written as F16 to a
 * safetensors file load and give what a float64 MLP written here computes.
 * Exit 0 when every check holds; otherwise it prints the first failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "mlp.h"
#include "runtime/nnrt.h"

#define IN 23
#define H1 129
#define H2 33
#define OUT 10
#define MAXB 37

typedef struct layer { const char *w, *b; int n, k; } layer;
static const layer layers[3] = {{"fc1.weight", "fc1.bias", H1, IN}, {"fc2.weight", "fc2.bias", H2, H1},
                                {"out.weight", "out.bias", OUT, H2}};

static uint64_t rng = 12345;
static float uniform(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* Writes the six weights as F16 (shape of fc1 transposed when `lie`); the
 * values as f16 rounds them are left in w[] and b[]. */
static int write_weights(const char *path, float *w[3], float *b[3], int lie) {
  nnrt_st_desc d[6];
  uint16_t *h[6];
  const void *data[6];
  for (int l = 0; l < 3; l++) {
    int n = layers[l].n, k = layers[l].k;
    d[2 * l] = (nnrt_st_desc){layers[l].w, NNRT_F16, 2, {lie && l == 0 ? k : n, lie && l == 0 ? n : k}};
    d[2 * l + 1] = (nnrt_st_desc){layers[l].b, NNRT_F16, 1, {n}};
    h[2 * l] = malloc((size_t)n * k * 2);
    h[2 * l + 1] = malloc((size_t)n * 2);
    for (int i = 0; i < n * k; i++) {
      h[2 * l][i] = nnrt_f32_to_f16(uniform());
      w[l][i] = nnrt_f16_to_f32(h[2 * l][i]);
    }
    for (int i = 0; i < n; i++) {
      h[2 * l + 1][i] = nnrt_f32_to_f16(uniform());
      b[l][i] = nnrt_f16_to_f32(h[2 * l + 1][i]);
    }
    data[2 * l] = h[2 * l];
    data[2 * l + 1] = h[2 * l + 1];
  }
  nnrt_error e = {0};
  int rc = nnrt_st_write(path, 6, d, data, &e);
  for (int i = 0; i < 6; i++) free(h[i]);
  return rc;
}

/* The MLP in float64: relu(relu(x W1^T + b1) W2^T + b2) W3^T + b3. */
static void reference(float *w[3], float *b[3], const float *x, int B, double *y) {
  double *cur = malloc(sizeof(double) * B * H1), *next = malloc(sizeof(double) * B * H1);
  for (int i = 0; i < B * IN; i++) cur[i] = x[i];
  for (int l = 0; l < 3; l++) {
    int n = layers[l].n, k = layers[l].k;
    for (int r = 0; r < B; r++)
      for (int j = 0; j < n; j++) {
        double acc = b[l][j];
        for (int q = 0; q < k; q++) acc += cur[r * k + q] * (double)w[l][j * k + q];
        next[r * n + j] = l < 2 && acc < 0 ? 0 : acc;
      }
    double *t = cur;
    cur = next;
    next = t;
  }
  memcpy(y, cur, sizeof(double) * B * OUT);
  free(cur);
  free(next);
}

/* The largest difference of y's 3 rows from the float64 MLP, relative to
 * the reference's largest value (a NaN counts as infinite). */
static double off_reference(float *w[3], float *b[3], const float *x, const float *y) {
  double want[3 * OUT], scale = 0, diff = 0;
  reference(w, b, x, 3, want);
  for (int i = 0; i < 3 * OUT; i++) {
    scale = fmax(scale, fabs(want[i]));
    diff = isnan(y[i]) ? INFINITY : fmax(diff, fabs(y[i] - want[i]));
  }
  return diff / scale;
}

int main(int argc, char **argv) {
  const char *tmp = argc > 1 ? argv[1] : ".";
  char good[1024], bad[1024], junk[1024];
  snprintf(good, sizeof good, "%s/good.safetensors", tmp);
  snprintf(bad, sizeof bad, "%s/lying.safetensors", tmp);
  snprintf(junk, sizeof junk, "%s/junk.safetensors", tmp);

  mlp_model *m = NULL;
  EXPECT(mlp_create(NULL, NULL) == MLP_E_ARG, "create with out NULL");
  EXPECT(mlp_last_error(NULL)[0] != 0, "create's error has a message");
  mlp_options o;
  mlp_options_default(&o);
  o.max_B = MAXB + 1;
  EXPECT(mlp_create(&o, &m) == MLP_E_SIZE && m == NULL, "max_B above the compiled maximum");
  EXPECT(strstr(mlp_last_error(NULL), "max_B") != NULL, "the message names max_B: %s", mlp_last_error(NULL));
  o.max_B = 5;
  o.threads = -1;
  EXPECT(mlp_create(&o, &m) == MLP_E_ARG, "negative threads");
  o.threads = 2;
  int rc = mlp_create(&o, &m);
  EXPECT(rc == 0 && m, "create: %s", mlp_last_error(NULL));
  if (!m) return 1;

  float x[5 * IN], y[5 * OUT];
  for (int i = 0; i < 5 * IN; i++) x[i] = uniform();
  mlp_dims d = {3};
  mlp_inputs in = {x};
  mlp_outputs out = {y};
  EXPECT(mlp_run(m, &d, &in, &out) == MLP_E_STATE, "run before the weights are loaded");
  EXPECT(strstr(mlp_last_error(m), "not loaded") != NULL, "message: %s", mlp_last_error(m));
  EXPECT(mlp_run(NULL, &d, &in, &out) == MLP_E_ARG, "run with no model");
  EXPECT(mlp_run(m, NULL, &in, &out) == MLP_E_ARG, "run with dims NULL");
  EXPECT(mlp_load_weights_file(m, NULL) == MLP_E_ARG, "load NULL path");
  EXPECT(mlp_load_weights_file(m, "/nonexistent/w.safetensors") == MLP_E_IO, "load a missing file");
  EXPECT(mlp_load_weights_memory(m, NULL, 10) == MLP_E_ARG, "load NULL memory");
  FILE *f = fopen(junk, "wb");
  if (f) {
    fputs("this is not a safetensors file", f);
    fclose(f);
  }
  EXPECT(mlp_load_weights_file(m, junk) == MLP_E_FORMAT, "load a junk file: %s", mlp_last_error(m));
  float one = 1;
  EXPECT(mlp_set_weight(m, "nope", &one, 1) == MLP_E_ARG, "set an unknown weight");
  EXPECT(mlp_set_weight(m, "fc1.bias", &one, 1) == MLP_E_SIZE, "set a weight with the wrong count");
  EXPECT(mlp_set_weight(m, "fc1.bias", NULL, H1) == MLP_E_ARG, "set a weight from NULL");
  EXPECT(mlp_set_weight(NULL, "fc1.bias", &one, 1) == MLP_E_ARG, "set on no model");

  float *w[3], *b[3];
  for (int l = 0; l < 3; l++) {
    w[l] = malloc(sizeof(float) * layers[l].n * layers[l].k);
    b[l] = malloc(sizeof(float) * layers[l].n);
  }
  EXPECT(write_weights(bad, w, b, 1) == 0, "write the lying file");
  EXPECT(mlp_load_weights_file(m, bad) == MLP_E_FORMAT, "a file whose fc1.weight has the wrong shape");
  EXPECT(strstr(mlp_last_error(m), "fc1.weight") != NULL, "the message names the tensor: %s", mlp_last_error(m));
  EXPECT(mlp_run(m, &d, &in, &out) == MLP_E_STATE, "run after a failed load");
  EXPECT(write_weights(good, w, b, 0) == 0, "write the good file");
  EXPECT(mlp_load_weights_file(m, good) == 0, "load F16 weights: %s", mlp_last_error(m));

  d.B = 6;
  EXPECT(mlp_run(m, &d, &in, &out) == MLP_E_SIZE, "B above the created maximum");
  d.B = 0;
  EXPECT(mlp_run(m, &d, &in, &out) == MLP_E_SIZE, "B of 0");
  d.B = 3;
  in.image = NULL;
  EXPECT(mlp_run(m, &d, &in, &out) == MLP_E_ARG, "input NULL");
  in.image = x;
  out.logits = NULL;
  EXPECT(mlp_run(m, &d, &in, &out) == MLP_E_ARG, "output NULL");
  out.logits = y;
  for (int i = 0; i < 5 * OUT; i++) y[i] = NAN;
  EXPECT(mlp_run(m, &d, &in, &out) == 0, "run: %s", mlp_last_error(m));
  EXPECT(mlp_last_error(m)[0] == 0, "no error after a good run");
  double off = off_reference(w, b, x, y);
  EXPECT(off < 1e-5, "logits off the float64 MLP by %g (relative)", off);
  EXPECT(isnan(y[3 * OUT]), "the run wrote past B rows");

  /* a weight set after a run is the one the next run reads (the GEMMs'
   * packed copies of it are made again) */
  for (int i = 0; i < H2 * H1; i++) w[1][i] = uniform();
  EXPECT(mlp_set_weight(m, "fc2.weight", w[1], H2 * H1) == 0, "set fc2.weight: %s", mlp_last_error(m));
  for (int i = 0; i < 5 * OUT; i++) y[i] = NAN;
  EXPECT(mlp_run(m, &d, &in, &out) == 0, "run after set_weight: %s", mlp_last_error(m));
  off = off_reference(w, b, x, y);
  EXPECT(off < 1e-5, "logits after set_weight off the float64 MLP by %g (relative)", off);

  /* the same weights from memory */
  f = fopen(good, "rb");
  if (f) {
    static unsigned char img[1 << 20];
    size_t n = fread(img, 1, sizeof img, f);
    fclose(f);
    EXPECT(mlp_load_weights_memory(m, img, n) == 0, "load from memory: %s", mlp_last_error(m));
    EXPECT(mlp_load_weights_memory(m, img, n / 2) == MLP_E_FORMAT, "a truncated image");
  }
  mlp_kernel_info k;
  EXPECT(mlp_kernel_info_at(m, mlp_kernel_count(), &k) == MLP_E_ARG, "kernel index out of range");
  EXPECT(mlp_kernel_info_at(m, 0, &k) == 0 && k.flops > 0 && strstr(k.where, "mlp.lua:"), "kernel 0 info");
  mlp_destroy(m);
  mlp_destroy(NULL);
  for (int l = 0; l < 3; l++) {
    free(w[l]);
    free(b[l]);
  }
  if (!failures) printf("api_misuse: all checks hold\n");
  return failures ? 1 : 0;
}
