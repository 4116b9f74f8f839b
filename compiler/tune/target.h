/* compiler/tune/target.h — the targets nnc knows by name.
 *
 * One table (target.c) lists every target with the family it belongs to,
 * whether this version of nnc can generate code for it, and what is fixed by
 * the name: a C SIMD target's ISA (vector width, registers, FMA pipes), a
 * CUDA target's compute capability, an OpenCL target's device class. The CLI,
 * the tuner and the emitters look targets up here and nowhere else; what the
 * name leaves open (caches, cores, SM count) is filled by nnc_target_describe
 * (tune.h). */
#ifndef NNC_TARGET_H
#define NNC_TARGET_H

#include <stdbool.h>
#include <stdio.h>

#include "../ir/status.h"

typedef enum nnc_target_family {
  NNC_FAMILY_C_SIMD,
  NNC_FAMILY_CUDA,
  NNC_FAMILY_OPENCL,
  NNC_FAMILY_COUNT
} nnc_target_family;

/* OpenCL device classes, whose defaults differ (tune/describe_opencl.c). */
typedef enum nnc_device_class {
  NNC_DEVICE_NONE,
  NNC_DEVICE_CPU,
  NNC_DEVICE_GPU
} nnc_device_class;

typedef struct nnc_target_info {
  const char *name;          /* as given to --target */
  nnc_target_family family;
  const char *isa;           /* C SIMD: the fixed ISA, NULL to detect the host's;
                                CUDA: the PTX arch ("sm_80"); OpenCL: "cpu" or "gpu" */
  const char *summary;       /* one line for --list-targets */
  /* C SIMD ISA: f32 lanes of a vector register, architectural vector
   * registers, FMA pipes per core (0 when there is no vector FMA) */
  int vector_width, vector_regs, fma_units;
  int sm;                    /* CUDA: compute capability times ten (80 = 8.0) */
  bool sm_arch_specific;     /* CUDA: the "a" variant (sm_90a: wgmma, setmaxnreg) */
  nnc_device_class device;   /* OpenCL */
} nnc_target_info;

/* Looks a target up by name; an unknown name is an NNC_E_TARGET error that
 * lists the known ones. */
nnc_status nnc_target_find(const char *name, const nnc_target_info **out, nnc_error *err);
/* The C SIMD target with a fixed ISA ("avx2" gives c-avx2); NULL when none. */
const nnc_target_info *nnc_target_for_isa(const char *isa);
/* The target used without --target: c-simd on a machine without a GPU. */
const nnc_target_info *nnc_target_default(void);
/* Writes the table for --list-targets. */
void nnc_targets_print(FILE *f);

#endif
