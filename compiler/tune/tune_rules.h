/* compiler/tune/tune_rules.h — the rules of each target family, behind
 * nnc_tune_kernel (tune.c). */
#ifndef NNC_TUNE_RULES_H
#define NNC_TUNE_RULES_H

#include "tune.h"

typedef nnc_status (*nnc_tune_rules_fn)(const nnc_target_desc *t, const nnc_schedule *s, int k,
                                        nnc_tile *out, nnc_error *err);

nnc_status nnc_tune_c_simd(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err);

#endif
