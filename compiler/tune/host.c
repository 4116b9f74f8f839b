/* compiler/tune/host.c — the machine nnc runs on: its SIMD ISA, caches and
 * cores, for c-simd and for OpenCL on a CPU. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tune_rules.h"

const char *nnc_host_isa(void) {
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

/* The first line of a sysfs file, or "" when it cannot be read. */
static void read_line(const char *path, char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(buf, (int)n, f)) buf[0] = 0;
  fclose(f);
  buf[strcspn(buf, "\n")] = 0;
}

/* The data (or unified) cache of a level from sysfs, whose index order
 * differs between machines; 0 when absent. */
static int64_t sysfs_cache(int level) {
  for (int i = 0; i < 16; i++) {
    char path[96], buf[32];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    read_line(path, buf, sizeof buf);
    if (!buf[0]) break;
    if (buf[0] - '0' != level || buf[1]) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    read_line(path, buf, sizeof buf);
    if (strcmp(buf, "Data") != 0 && strcmp(buf, "Unified") != 0) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    read_line(path, buf, sizeof buf);
    long v = 0;
    char unit = 0;
    int n = sscanf(buf, "%ld%c", &v, &unit);
    if (n < 1 || v <= 0) return 0;
    return unit == 'M' ? (int64_t)v << 20 : unit == 'K' ? (int64_t)v << 10 : (int64_t)v;
  }
  return 0;
}

/* sysconf first (glibc reads CPUID on x86), then sysfs (where sysconf
 * answers 0, as on most Arm machines), then the fallback. */
static int64_t cache_bytes(int sc_name, int level, int64_t fallback) {
  long v = sysconf(sc_name);
  if (v > 0) return v;
  int64_t s = sysfs_cache(level);
  return s > 0 ? s : fallback;
}

void nnc_host_caches(int64_t *l1d, int64_t *l2, int64_t *l3, int *cores) {
  /* the fallbacks are a common desktop core: 32 KiB L1d, 512 KiB L2, 8 MiB L3 */
  *l1d = cache_bytes(_SC_LEVEL1_DCACHE_SIZE, 1, 32 << 10);
  *l2 = cache_bytes(_SC_LEVEL2_CACHE_SIZE, 2, 512 << 10);
  *l3 = cache_bytes(_SC_LEVEL3_CACHE_SIZE, 3, 8 << 20);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  *cores = n > 0 ? (int)n : 1;
}

nnc_status nnc_describe_c_simd(const nnc_target_info *info, nnc_target_desc *out, nnc_error *err) {
  const nnc_target_info *isa = info->isa ? info : nnc_target_for_isa(nnc_host_isa());
  if (!isa)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC, "target %s: the host's ISA %s has no entry in the target table",
                      info->name, nnc_host_isa());
  out->isa = isa->isa;
  out->vector_width = isa->vector_width;
  out->vector_regs = isa->vector_regs;
  out->fma_units = isa->fma_units;
  out->fma_per_cycle = isa->fma_units * isa->vector_width;
  nnc_host_caches(&out->l1d, &out->l2, &out->l3, &out->cores);
  return NNC_OK;
}
