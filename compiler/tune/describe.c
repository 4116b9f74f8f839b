/* compiler/tune/describe.c — the description of a target chip: its ISA from
 * the target table or the host, its caches and cores from the host. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tune.h"

/* Vector width (f32 lanes) and architectural vector registers per ISA. */
static const struct { const char *isa; int width, regs; } isas[] = {
  {"avx512", 16, 32},
  {"avx2", 8, 16},
  {"neon", 4, 32},
  {"generic", 1, 16},   /* plain C: the compiler's scalar registers */
};

static const char *host_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  return "generic";
#elif defined(__aarch64__)
  return "neon";
#else
  return "generic";
#endif
}

/* A cache size from sysconf, or from sysfs when sysconf does not know, or
 * the fallback. */
static int64_t cache_bytes(int sc_name, int sysfs_index, int64_t fallback) {
  long v = sc_name >= 0 ? sysconf(sc_name) : -1;
  if (v > 0) return v;
  char path[128];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", sysfs_index);
  FILE *f = fopen(path, "r");
  if (!f) return fallback;
  long kib = 0;
  char unit = 0;
  int n = fscanf(f, "%ld%c", &kib, &unit);
  fclose(f);
  if (n < 1 || kib <= 0) return fallback;
  return unit == 'M' ? (int64_t)kib << 20 : (int64_t)kib << 10;
}

nnc_status nnc_target_describe(const char *name, nnc_target_desc *out, nnc_error *err) {
  const nnc_target_info *info;
  nnc_status st = nnc_target_find(name, &info, err);
  if (st) return st;
  if (!info->available)
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC,
                      "target %s: code generation is not available in this version of nnc "
                      "(see nnc --list-targets)", name);
  memset(out, 0, sizeof *out);
  out->name = info->name;
  out->family = info->family;
  out->isa = info->isa ? info->isa : host_isa();
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
    if (strcmp(isas[i].isa, out->isa) == 0) {
      out->vector_width = isas[i].width;
      out->vector_regs = isas[i].regs;
    }
  /* sysfs index 0 is L1d, 2 is L2, 3 is L3 on Linux */
  out->l1d = cache_bytes(_SC_LEVEL1_DCACHE_SIZE, 0, 32 << 10);
  out->l2 = cache_bytes(_SC_LEVEL2_CACHE_SIZE, 2, 512 << 10);
  out->l3 = cache_bytes(_SC_LEVEL3_CACHE_SIZE, 3, 8 << 20);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out->cores = cores > 0 ? (int)cores : 1;
  return NNC_OK;
}
