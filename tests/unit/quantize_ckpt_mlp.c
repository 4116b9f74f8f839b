/* tests/unit/quantize_ckpt_mlp.c — built by quantize_ckpt_c_simd.sh against
 * a quantized mlp folder (-I the folder, its libmlp.a): one model loads
 * the f32 weights (quantized as they load), another the quantized
 * checkpoint saved from them; both run the same input and their logits
 * must be bit-identical. Usage: quantize_ckpt_mlp F32.safetensors Q.safetensors */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

enum { B = 5, PIXELS = 784, CLASSES = 10 };

static mlp_model *loaded(const char *path) {
  mlp_model *m = NULL;
  if (mlp_create(NULL, &m)) {
    fprintf(stderr, "create: %s\n", mlp_last_error(NULL));
    return NULL;
  }
  if (mlp_load_weights_file(m, path)) {
    fprintf(stderr, "%s: %s\n", path, mlp_last_error(m));
    mlp_destroy(m);
    return NULL;
  }
  return m;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: quantize_ckpt_mlp F32.safetensors Q.safetensors\n");
    return 2;
  }
  static float image[B * PIXELS], logits[2][B * CLASSES];
  uint32_t seed = 12345;
  for (int i = 0; i < B * PIXELS; i++) {
    seed = seed * 1664525u + 1013904223u;
    image[i] = (float)(seed >> 8) / 16777216.0f;
  }
  int rc = 0;
  for (int f = 0; f < 2 && !rc; f++) {
    mlp_model *m = loaded(argv[1 + f]);
    const mlp_dims d = {B};
    const mlp_inputs in = {image};
    mlp_outputs out = {logits[f]};
    if (!m) rc = 1;
    else if (mlp_run(m, &d, &in, &out)) rc = fprintf(stderr, "run: %s\n", mlp_last_error(m)) > 0;
    mlp_destroy(m);
  }
  if (!rc && memcmp(logits[0], logits[1], sizeof logits[0]) != 0) {
    fprintf(stderr, "FAIL: the logits of the f32 file and of the quantized checkpoint differ\n");
    rc = 1;
  }
  if (!rc) printf("the logits are bit-identical (%d x %d)\n", B, CLASSES);
  return rc;
}
