/* compiler/tune/tune.c — one tuning interface, one tuner per family. */
#include <stdlib.h>

#include "tune_rules.h"

static const nnc_tuner tuners[] = {
  {NNC_FAMILY_C_SIMD, nnc_describe_c_simd, nnc_tune_c_simd, nnc_explain_c_simd},
  {NNC_FAMILY_CUDA, nnc_describe_cuda, nnc_tune_cuda, nnc_explain_cuda},
  {NNC_FAMILY_OPENCL, nnc_describe_opencl, nnc_tune_opencl, nnc_explain_opencl},
};

const nnc_tuner *nnc_tuner_for(nnc_target_family family) {
  for (size_t i = 0; i < sizeof tuners / sizeof tuners[0]; i++)
    if (tuners[i].family == family) return &tuners[i];
  return NULL;
}

nnc_status nnc_tune_kernel(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err) {
  if (k < 0 || k >= s->nk)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "tune: expected a kernel index in [0, %d), found %d", s->nk, k);
  const nnc_tuner *tn = nnc_tuner_for(t->family);
  if (!tn)
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "target %s: no tuning rules in this version of nnc", t->name);
  return tn->rules(t, s, k, out, err);
}

void nnc_tune_explain(FILE *f, const nnc_target_desc *t, const nnc_schedule *s,
                      const nnc_tile *tiles) {
  const nnc_tuner *tn = nnc_tuner_for(t->family);
  if (tn) tn->explain(f, t);
  for (int k = 0; k < s->nk; k++) {
    const nnc_kernel *kn = &s->k[k];
    fprintf(f, "#%-4d %-11s %s:%d  %s\n", k, nnc_kernel_kind_name(kn->kind),
            kn->loc.file ? kn->loc.file : "?", kn->loc.line, tiles[k].reason);
  }
}

nnc_status nnc_tune_explain_all(FILE *f, const nnc_target_desc *t, const nnc_schedule *s,
                                nnc_error *err) {
  nnc_tile *tiles = calloc((size_t)s->nk + 1, sizeof *tiles);
  if (!tiles) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while tuning");
  nnc_status st = NNC_OK;
  for (int k = 0; !st && k < s->nk; k++) st = nnc_tune_kernel(t, s, k, &tiles[k], err);
  if (!st) nnc_tune_explain(f, t, s, tiles);
  free(tiles);
  return st;
}
