/* tests/ops/hfuse_set_weight.c — built by tests/unit/hfuse.sh against the
 * c-simd folder of tests/ops/hfuse.lua, whose qkv.a|b|c and io.d|e run as
 * one GEMM each over weights concatenated when they load. Setting one of
 * those weights after a run must rebuild the concatenation: model A loads
 * the file, runs, then takes new values for qkv.b.weight and io.e.weight
 * and runs again; model B loads the file and takes the same new values
 * before its first run. A's second run must equal B's bit for bit, and
 * differ from A's first where those weights matter.
 * Usage: hfuse_set_weight WEIGHTS.safetensors; exit 0 when every check holds. */
#include <stdio.h>
#include <string.h>

#include "hfuse.h"

#define ROWS 5

static float x[ROWS * 13], x2[ROWS * 13], x3[ROWS * 13], z[ROWS * 6], u[ROWS * 6], v[ROWS * 8], w[ROWS * 10];
static float wb[3 * 13], we[13 * 9];

typedef struct outs {
  float fused[ROWS * 19], in_out[ROWS * 14], inputs[ROWS * 4], bias[ROWS * 4], tied[ROWS * 4], out_itself[ROWS * 3],
      out_other[ROWS * 3], swiglu[ROWS * 6];
} outs;

static unsigned seed = 12345;
static float next(void) {
  seed = seed * 1103515245u + 12345u;
  return (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void fill(float *p, int n) {
  for (int i = 0; i < n; i++) p[i] = next();
}

static int run(hfuse_model *m, outs *o) {
  hfuse_dims d = {.B = ROWS};
  hfuse_inputs in = {x, x2, x3, z, u, v, w};
  hfuse_outputs out = {o->fused, o->in_out, o->inputs, o->bias, o->tied, o->out_itself, o->out_other, o->swiglu};
  int rc = hfuse_run(m, &d, &in, &out);
  if (rc) fprintf(stderr, "run: %s\n", hfuse_last_error(m));
  return rc;
}

static int set_new(hfuse_model *m) {
  int rc = hfuse_set_weight(m, "qkv.b.weight", wb, sizeof wb / sizeof *wb);
  if (!rc) rc = hfuse_set_weight(m, "io.e.weight", we, sizeof we / sizeof *we);
  if (rc) fprintf(stderr, "set_weight: %s\n", hfuse_last_error(m));
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: hfuse_set_weight WEIGHTS.safetensors\n");
    return 2;
  }
  fill(x, ROWS * 13), fill(x2, ROWS * 13), fill(x3, ROWS * 13), fill(z, ROWS * 6), fill(u, ROWS * 6), fill(v, ROWS * 8);
  fill(w, ROWS * 10), fill(wb, 3 * 13), fill(we, 13 * 9);
  hfuse_model *a = NULL, *b = NULL;
  static outs first, second, fresh;
  int rc = hfuse_create(NULL, &a);
  if (!rc) rc = hfuse_create(NULL, &b);
  if (rc) {
    fprintf(stderr, "create: %s\n", hfuse_last_error(NULL));
    return 1;
  }
  rc = hfuse_load_weights_file(a, argv[1]);
  if (!rc) rc = hfuse_load_weights_file(b, argv[1]);
  if (rc) fprintf(stderr, "load: %s %s\n", hfuse_last_error(a), hfuse_last_error(b));
  if (!rc) rc = run(a, &first);
  if (!rc) rc = set_new(a);
  if (!rc) rc = run(a, &second);
  if (!rc) rc = set_new(b);
  if (!rc) rc = run(b, &fresh);
  hfuse_destroy(a);
  hfuse_destroy(b);
  if (rc) return 1;
  int failures = 0;
  if (memcmp(&second, &fresh, sizeof second) != 0) {
    fprintf(stderr, "after set_weight the outputs differ from a model given those weights before its first run\n");
    failures++;
  }
  if (memcmp(first.fused, second.fused, sizeof first.fused) == 0 ||
      memcmp(first.in_out, second.in_out, sizeof first.in_out) == 0) {
    fprintf(stderr, "the new qkv.b and io.e weights changed nothing: the concatenated weights were not rebuilt\n");
    failures++;
  }
  if (memcmp(first.swiglu, second.swiglu, sizeof first.swiglu) != 0) {
    fprintf(stderr, "an output that reads neither weight changed\n");
    failures++;
  }
  if (!failures) printf("set_weight: the concatenated weights rebuilt\n");
  return failures ? 1 : 0;
}
