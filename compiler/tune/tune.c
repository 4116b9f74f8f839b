/* compiler/tune/tune.c — one tuning interface, one set of rules per family. */
#include "tune.h"
#include "tune_rules.h"

static const struct {
  nnc_target_family family;
  nnc_tune_rules_fn rules;
} tuners[] = {
  {NNC_FAMILY_C_SIMD, nnc_tune_c_simd},
};

nnc_status nnc_tune_kernel(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err) {
  if (k < 0 || k >= s->nk)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "tune: kernel %d of %d", k, s->nk);
  for (size_t i = 0; i < sizeof tuners / sizeof tuners[0]; i++)
    if (tuners[i].family == t->family) return tuners[i].rules(t, s, k, out, err);
  return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "target %s: no tuning rules in this version of nnc", t->name);
}

void nnc_tune_explain(FILE *f, const nnc_target_desc *t, const nnc_schedule *s,
                      const nnc_tile *tiles) {
  fprintf(f, "target %s: isa %s, %d f32 lanes x %d vector registers, L1d %lld KiB, L2 %lld KiB, "
             "L3 %lld KiB, %d cores\n",
          t->name, t->isa, t->vector_width, t->vector_regs, (long long)(t->l1d >> 10),
          (long long)(t->l2 >> 10), (long long)(t->l3 >> 10), t->cores);
  for (int k = 0; k < s->nk; k++) {
    const nnc_kernel *kn = &s->k[k];
    fprintf(f, "#%-4d %-11s %s:%d  %s\n", k, nnc_kernel_kind_name(kn->kind),
            kn->loc.file ? kn->loc.file : "?", kn->loc.line, tiles[k].reason);
  }
}
