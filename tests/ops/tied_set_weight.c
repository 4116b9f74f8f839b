/* tests/ops/tied_set_weight.c — built by test_emit_c_simd against the c-simd
 * folder of tests/ops/tied_embedding.lua, whose table wte is held packed
 * for the head's GEMM only, the lookup reading its rows out of the panels,
 * and whose table `other` keeps its values (an elementwise op reads it) with
 * a packed copy for its GEMM. Weights load from a safetensors file, then
 * each table is set again after a run (wte: packed again as it is set;
 * other: its copy packed again by prepare()). After each, every output
 * must be what the float64 model written here computes (relative error at
 * most 1e-5 of the output's largest value).
 * Usage: tied_set_weight DIR (a folder to write the weights file in); exit
 * 0 when every check holds, else it prints each failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "runtime/nnrt.h"
#include "tied_embedding.h"

#define B 3
#define T 7
#define V 69   /* wte [V, D] */
#define D 300
#define VO 37  /* other [VO, DO] */
#define DO 20

static uint64_t rng = 4242;
static float uniform(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void fill(float *p, int n) {
  for (int i = 0; i < n; i++) p[i] = uniform();
}

/* The largest difference of got [B*T, v] from the float64 tied model
 * table[ids] . table^T (table [v, d]), relative to its largest value. */
static double off_tied(const float *table, int v, int d, const int32_t *ids, const float *got) {
  double worst = 0, scale = 0;
  for (int i = 0; i < B * T; i++)
    for (int j = 0; j < v; j++) {
      double want = 0;
      for (int k = 0; k < d; k++) want += (double)table[ids[i] * d + k] * table[j * d + k];
      double diff = fabs(got[i * v + j] - want);
      worst = diff > worst || isnan(diff) ? diff : worst;
      scale = fabs(want) > scale ? fabs(want) : scale;
    }
  return isnan(worst) ? INFINITY : worst / scale;
}

static float wte[V * D], other[VO * DO];
static int32_t ids[B * T], near[B * T];
static float logits[B * T * V], other_logits[B * T * VO], other_doubled[VO * DO];

/* Runs m and checks every output against the tables as they are now. */
static void run_and_check(tied_embedding_model *m, const char *when) {
  tied_embedding_dims d = {B, T};
  tied_embedding_inputs in = {ids, near};
  tied_embedding_outputs out = {logits, other_logits, other_doubled};
  int rc = tied_embedding_run(m, &d, &in, &out);
  EXPECT(rc == 0, "run %s: %s", when, tied_embedding_last_error(m));
  if (rc) return;
  double off = off_tied(wte, V, D, ids, logits);
  EXPECT(off <= 1e-5, "logits %s: off the float64 model by %g (relative)", when, off);
  off = off_tied(other, VO, DO, near, other_logits);
  EXPECT(off <= 1e-5, "other_logits %s: off the float64 model by %g (relative)", when, off);
  for (int i = 0; i < VO * DO; i++)
    EXPECT(other_doubled[i] == 2 * other[i], "other_doubled[%d] %s: %g, expected %g", i, when, (double)other_doubled[i],
           2.0 * other[i]);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: tied_set_weight DIR\n");
    return 2;
  }
  /* every row of each table is looked up somewhere, the first and last ones (the last panel's) included */
  for (int i = 0; i < B * T; i++) {
    ids[i] = (int32_t)((i * 37 + 5) % V);
    near[i] = (int32_t)((i * 11 + 3) % VO);
  }
  ids[0] = 0, ids[1] = V - 1, near[0] = 0, near[1] = VO - 1;
  fill(wte, V * D), fill(other, VO * DO);
  char path[4096];
  snprintf(path, sizeof path, "%s/tied.safetensors", argv[1]);
  const nnrt_st_desc desc[2] = {{"wte", NNRT_F32, 2, {V, D}}, {"other", NNRT_F32, 2, {VO, DO}}};
  const void *data[2] = {wte, other};
  nnrt_error e = {0};
  if (nnrt_st_write(path, 2, desc, data, &e)) {
    fprintf(stderr, "writing %s: %s\n", path, e.msg);
    return 1;
  }
  tied_embedding_model *m = NULL;
  if (tied_embedding_create(NULL, &m)) {
    fprintf(stderr, "create: %s\n", tied_embedding_last_error(NULL));
    return 1;
  }
  EXPECT(tied_embedding_load_weights_file(m, path) == 0, "load %s: %s", path, tied_embedding_last_error(m));
  run_and_check(m, "after the file loads");
  fill(wte, V * D);
  EXPECT(tied_embedding_set_weight(m, "wte", wte, V * D) == 0, "set wte: %s", tied_embedding_last_error(m));
  run_and_check(m, "after wte is set");
  fill(other, VO * DO);
  EXPECT(tied_embedding_set_weight(m, "other", other, VO * DO) == 0, "set other: %s", tied_embedding_last_error(m));
  run_and_check(m, "after other is set");
  tied_embedding_destroy(m);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
