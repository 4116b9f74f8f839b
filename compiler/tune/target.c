/* compiler/tune/target.c — the table of targets. */
#include <string.h>

#include "target.h"

#define SIMD NNC_FAMILY_C_SIMD
#define CUDA NNC_FAMILY_CUDA
#define OCL NNC_FAMILY_OPENCL

/* FMA pipes: two 512-bit on Skylake-SP Gold/Platinum and Ice Lake server
 * (one on some Silver/Bronze parts), two 256-bit on Haswell and later and on
 * Zen 2+, two 128-bit on Cortex-A76 / Neoverse N1; plain C has no vector FMA. */
static const nnc_target_info targets[] = {
  {"c-simd", SIMD, NULL, "C with SIMD for the host's ISA (AVX-512, AVX2+FMA, NEON or generic)",
   0, 0, 0, 0, false, NNC_DEVICE_NONE},
  {"c-avx512", SIMD, "avx512", "C with AVX-512", 16, 32, 2, 0, false, NNC_DEVICE_NONE},
  {"c-avx2", SIMD, "avx2", "C with AVX2 and FMA", 8, 16, 2, 0, false, NNC_DEVICE_NONE},
  {"c-neon", SIMD, "neon", "C with Arm NEON", 4, 32, 2, 0, false, NNC_DEVICE_NONE},
  /* plain C: one lane, the 16 registers the compiler has for scalars */
  {"c-generic", SIMD, "generic", "portable C, no intrinsics", 1, 16, 0, 0, false, NNC_DEVICE_NONE},
  {"cuda-sm70", CUDA, "sm_70", "CUDA, Volta (V100): f32 and f16; builds with CUDA 12 (13 dropped Volta)", 0, 0,
   0, 70, false, NNC_DEVICE_NONE},
  {"cuda-sm75", CUDA, "sm_75", "CUDA, Turing (T4): f32 and f16", 0, 0, 0, 75, false, NNC_DEVICE_NONE},
  {"cuda-sm80", CUDA, "sm_80", "CUDA, Ampere (A100)", 0, 0, 0, 80, false, NNC_DEVICE_NONE},
  {"cuda-sm86", CUDA, "sm_86", "CUDA, Ampere (RTX 30, A10)", 0, 0, 0, 86, false, NNC_DEVICE_NONE},
  {"cuda-sm89", CUDA, "sm_89", "CUDA, Ada (RTX 40, L4)", 0, 0, 0, 89, false, NNC_DEVICE_NONE},
  {"cuda-sm90", CUDA, "sm_90", "CUDA, Hopper (H100, H200)", 0, 0, 0, 90, false, NNC_DEVICE_NONE},
  {"cuda-sm90a", CUDA, "sm_90a", "CUDA, Hopper with sm90a-only instructions", 0, 0, 0, 90, true,
   NNC_DEVICE_NONE},
  /* a GPU is what OpenCL is mostly used for; PoCL on the host is opencl-cpu */
  {"opencl", OCL, "gpu", "OpenCL C 1.2 (any device, PoCL included; tiles for a GPU)", 0, 0, 0, 0,
   false, NNC_DEVICE_GPU},
  {"opencl-gpu", OCL, "gpu", "OpenCL C 1.2, tiles for a GPU device", 0, 0, 0, 0, false,
   NNC_DEVICE_GPU},
  {"opencl-cpu", OCL, "cpu", "OpenCL C 1.2, tiles for a CPU device (PoCL) with the host's caches", 0,
   0, 0, 0, false, NNC_DEVICE_CPU},
};
#define NTARGETS (int)(sizeof targets / sizeof targets[0])

nnc_status nnc_target_find(const char *name, const nnc_target_info **out, nnc_error *err) {
  for (int i = 0; name && i < NTARGETS; i++)
    if (strcmp(targets[i].name, name) == 0) {
      *out = &targets[i];
      return NNC_OK;
    }
  char known[512] = "";
  size_t n = 0;
  for (int i = 0; i < NTARGETS && n < sizeof known; i++)
    n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", targets[i].name);
  return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "--target: unknown target \"%s\"; known: %s",
                    name ? name : "(none)", known);
}

const nnc_target_info *nnc_target_for_isa(const char *isa) {
  for (int i = 0; isa && i < NTARGETS; i++)
    if (targets[i].family == SIMD && targets[i].isa && strcmp(targets[i].isa, isa) == 0) return &targets[i];
  return NULL;
}

const nnc_target_info *nnc_target_default(void) { return &targets[0]; }

void nnc_targets_print(FILE *f) {
  fprintf(f, "%-12s %s\n", "target", "description");
  for (int i = 0; i < NTARGETS; i++) fprintf(f, "%-12s %s\n", targets[i].name, targets[i].summary);
}
