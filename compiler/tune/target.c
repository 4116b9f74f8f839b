/* compiler/tune/target.c — the table of targets. */
#include <string.h>

#include "target.h"

static const nnc_target_info targets[] = {
  {"c-simd", NNC_FAMILY_C_SIMD, NULL, "C with SIMD for the host's ISA (AVX-512, AVX2+FMA, NEON or generic)", true},
  {"c-avx512", NNC_FAMILY_C_SIMD, "avx512", "C with AVX-512", true},
  {"c-avx2", NNC_FAMILY_C_SIMD, "avx2", "C with AVX2 and FMA", true},
  {"c-neon", NNC_FAMILY_C_SIMD, "neon", "C with Arm NEON", true},
  {"c-generic", NNC_FAMILY_C_SIMD, "generic", "portable C, no intrinsics", true},
  {"cuda-sm70", NNC_FAMILY_CUDA, NULL, "CUDA, Volta (V100)", false},
  {"cuda-sm75", NNC_FAMILY_CUDA, NULL, "CUDA, Turing (T4)", false},
  {"cuda-sm80", NNC_FAMILY_CUDA, NULL, "CUDA, Ampere (A100)", false},
  {"cuda-sm86", NNC_FAMILY_CUDA, NULL, "CUDA, Ampere (RTX 30, A10)", false},
  {"cuda-sm89", NNC_FAMILY_CUDA, NULL, "CUDA, Ada (RTX 40, L4)", false},
  {"cuda-sm90", NNC_FAMILY_CUDA, NULL, "CUDA, Hopper (H100, H200)", false},
  {"cuda-sm90a", NNC_FAMILY_CUDA, NULL, "CUDA, Hopper with sm90a-only instructions", false},
  {"opencl", NNC_FAMILY_OPENCL, NULL, "OpenCL C 1.2 (any device, PoCL included)", false},
};
#define NTARGETS (int)(sizeof targets / sizeof targets[0])

nnc_status nnc_target_find(const char *name, const nnc_target_info **out, nnc_error *err) {
  for (int i = 0; i < NTARGETS; i++)
    if (strcmp(targets[i].name, name) == 0) {
      *out = &targets[i];
      return NNC_OK;
    }
  char known[512] = "";
  size_t n = 0;
  for (int i = 0; i < NTARGETS && n < sizeof known; i++)
    n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", targets[i].name);
  return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--target: unknown target \"%s\"; known: %s", name, known);
}

const nnc_target_info *nnc_target_default(void) { return &targets[0]; }

void nnc_targets_print(FILE *f) {
  fprintf(f, "%-12s %-10s %s\n", "target", "status", "description");
  for (int i = 0; i < NTARGETS; i++)
    fprintf(f, "%-12s %-10s %s\n", targets[i].name, targets[i].available ? "available" : "planned",
            targets[i].summary);
}
