/* compiler/tune/target.h — the targets nnc knows by name.
 *
 * One table (target.c) lists every target with the family it belongs to and
 * whether this version of nnc can generate code for it; the CLI and later the
 * tuner and the emitters look targets up here and nowhere else. */
#ifndef NNC_TARGET_H
#define NNC_TARGET_H

#include <stdbool.h>
#include <stdio.h>

#include "../ir/status.h"

typedef enum nnc_target_family {
  NNC_FAMILY_C_SIMD,
  NNC_FAMILY_CUDA,
  NNC_FAMILY_OPENCL
} nnc_target_family;

typedef struct nnc_target_info {
  const char *name;          /* as given to --target */
  nnc_target_family family;
  const char *isa;           /* C SIMD: the fixed ISA, NULL to detect the host's */
  const char *summary;       /* one line for --list-targets */
  bool available;            /* code generation exists in this version */
} nnc_target_info;

/* Looks a target up by name; an unknown name is an NNC_E_TARGET error that
 * lists the known ones. */
nnc_status nnc_target_find(const char *name, const nnc_target_info **out, nnc_error *err);
/* The target used without --target: c-simd on a machine without a GPU. */
const nnc_target_info *nnc_target_default(void);
/* Writes the table for --list-targets. */
void nnc_targets_print(FILE *f);

#endif
