/* tests/train/make_data.c — the data files of test_emit_c_simd's training
 * program checks, written with the runtime of a generated folder:
 *   make_data DIR VOCAB FEATURES CLASSES
 * DIR/tok.bin       3000 tokens below VOCAB in llm.c's format (a pattern to learn)
 * DIR/bad_magic.bin a header whose magic is wrong
 * DIR/truncated.bin a header counting more tokens than follow
 * DIR/big_id.bin    token 123 equal to VOCAB
 * DIR/cls.safetensors  x [240, FEATURES] F32, y [240] I32: CLASSES separable clusters
 * DIR/nan.safetensors  the same with x[7][3] NaN */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/nnrt.h"

static int tokens(const char *dir, const char *name, int32_t magic, int32_t count, int32_t written, int bad_at,
                  int vocab) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  int32_t h[256] = {magic, 1, count};
  int ok = fwrite(h, sizeof h, 1, f) == 1;
  for (int32_t i = 0; ok && i < written; i++) {
    uint16_t t = (uint16_t)(i == bad_at ? vocab : (i * 7 + i / 37) % vocab);
    ok = fwrite(&t, sizeof t, 1, f) == 1;
  }
  return fclose(f) != 0 || !ok;
}

static int classes(const char *dir, const char *name, int64_t features, int ncls, int nan) {
  enum { N = 240 };
  float *x = malloc((size_t)(N * features) * sizeof *x);
  int32_t y[N];
  if (!x) return 1;
  uint64_t s = 12345;
  for (int i = 0; i < N; i++) {
    y[i] = i % ncls;
    for (int64_t f = 0; f < features; f++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      double noise = (double)(s >> 11) * 0x1.0p-53 - 0.5;
      /* class c lights up feature c (mod features) */
      x[i * features + f] = (float)((f % ncls == y[i] ? 1.0 : 0.0) + 0.3 * noise);
    }
  }
  if (nan) x[7 * features + 3] = NAN;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  const nnrt_st_desc d[2] = {{"x", NNRT_F32, 2, {N, features}}, {"y", NNRT_I32, 1, {N}}};
  const void *data[2] = {x, y};
  nnrt_error e = {0};
  int rc = nnrt_st_write(path, 2, d, data, &e) != NNRT_OK;
  if (rc) fprintf(stderr, "%s\n", e.msg);
  free(x);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: make_data DIR VOCAB FEATURES CLASSES\n");
    return 2;
  }
  const char *dir = argv[1];
  int vocab = atoi(argv[2]), ncls = atoi(argv[4]);
  int64_t features = atoll(argv[3]);
  int rc = tokens(dir, "tok.bin", 20240520, 3000, 3000, -1, vocab);
  rc |= tokens(dir, "bad_magic.bin", 20240521, 3000, 3000, -1, vocab);
  rc |= tokens(dir, "truncated.bin", 20240520, 3000, 1000, -1, vocab);
  rc |= tokens(dir, "big_id.bin", 20240520, 3000, 3000, 123, vocab);
  rc |= classes(dir, "cls.safetensors", features, ncls, 0);
  rc |= classes(dir, "nan.safetensors", features, ncls, 1);
  return rc;
}
