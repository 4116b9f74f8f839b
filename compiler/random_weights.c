/* compiler/random_weights.c — random weights for a model, through libnnrt's
 * safetensors writer (the same code that reads them back). */
#include "random_weights.h"

#include <math.h>
#include <stdlib.h>

#include "nnrt.h"

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A weight a quantized model holds (nnc_tensor.quant) on its grid: each
 * value q * s with s = max|w| / qmax of its channel (127; 31 for w8a8's
 * 6-bit grid; for int4w, max|w| / 7 of each group of `group` elements along the
 * channel), as the folder's quantizer would make it, so that quantizing it
 * again changes nothing. */
static void snap_to_grid(const nnc_tensor *t, float *w) {
  int64_t rows = t->shape[0].k, cols = t->shape[1].k;
  int64_t nch = t->quant.axis == 0 ? rows : cols, len = t->quant.axis == 0 ? cols : rows;
  bool int4 = t->quant.kind == NNC_QUANT_INT4_GROUP;
  int64_t group = int4 ? t->quant.group : len;
  float qmax = (float)t->quant.qmax;
  for (int64_t c = 0; c < nch; c++) {
    /* element i of channel c */
    float *at = t->quant.axis == 0 ? w + c * cols : w + c;
    int64_t step = t->quant.axis == 0 ? 1 : cols;
    for (int64_t i0 = 0; i0 < len; i0 += group) {
      int64_t i1 = len - i0 < group ? len : i0 + group;
      float amax = 0.0f;
      for (int64_t i = i0; i < i1; i++) amax = fabsf(at[i * step]) > amax ? fabsf(at[i * step]) : amax;
      float s = amax / qmax;
      for (int64_t i = i0; i < i1; i++) at[i * step] = s > 0.0f ? nearbyintf(at[i * step] / s) * s : 0.0f;
    }
  }
}

nnc_status nnc_write_random_weights(const nnc_graph *g, const char *path, uint64_t seed,
                                    nnc_error *err) {
  nnc_status st = NNC_OK;
  nnrt_st_desc *desc = calloc((size_t)g->nparams + 1, sizeof *desc);
  float **data = calloc((size_t)g->nparams + 1, sizeof *data);
  if (!desc || !data) {
    st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "weights: out of memory");
    goto done;
  }
  for (int i = 0; i < g->nparams; i++) {
    const nnc_tensor *t = &g->tensors[g->params[i]];
    desc[i].name = t->name;
    desc[i].dtype = NNRT_F32;
    desc[i].rank = t->rank;
    int64_t n = nnc_tensor_max_elems(g, t);
    for (int d = 0; d < t->rank; d++) desc[i].shape[d] = t->shape[d].k;
    data[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!data[i]) {
      st = nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "weights: out of memory for %s", t->name);
      goto done;
    }
    double a = t->rank >= 2 ? 1.0 / sqrt((double)t->shape[t->rank - 1].k) : 0.1;
    /* batch norm's variances are square-rooted: from [0.5, 1.5) */
    bool var = nnc_name_is_variance(t->name);
    for (int64_t j = 0; j < n; j++) {
      double u = (double)(splitmix64(&seed) >> 11) * 0x1.0p-53;
      data[i][j] = (float)(var ? 0.5 + u : a * (2.0 * u - 1.0));
    }
    if (t->quant.kind != NNC_QUANT_NONE) snap_to_grid(t, data[i]);
  }
  nnrt_error rerr = {0};
  if (nnrt_st_write(path, g->nparams, desc, (const void *const *)data, &rerr) != NNRT_OK)
    st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "weights: %s", rerr.msg);
done:
  for (int i = 0; data && i < g->nparams; i++) free(data[i]);
  free(data);
  free(desc);
  return st;
}
