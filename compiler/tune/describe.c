/* compiler/tune/describe.c — a target's name to the description of its chip,
 * through the family's tuner. */
#include <string.h>

#include "tune_rules.h"

nnc_status nnc_target_describe(const char *name, nnc_target_desc *out, nnc_error *err) {
  const nnc_target_info *info;
  nnc_status st = nnc_target_find(name, &info, err);
  if (st) return st;
  const nnc_tuner *tn = nnc_tuner_for(info->family);
  if (!tn)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "target %s: its family has no tuner", info->name);
  memset(out, 0, sizeof *out);
  out->name = info->name;
  out->family = info->family;
  out->isa = info->isa;
  return tn->describe(info, out, err);
}
