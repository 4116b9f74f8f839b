/* runtime/cuda/device.c — how many devices, which one to use, and what it
 * is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_cuda_impl.h"

nnrt_status nnrt_cuda_device_count(int *out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_device_count: out is NULL");
  *out = 0;
  int n = 0;
  nnrt_status st = nnrt_cuda_check(cudaGetDeviceCount(&n), "counting CUDA devices", err);
  if (st != NNRT_OK) return st;
  if (n <= 0)
    return nnrt_errorf(err, NNRT_E_DEVICE,
                       "counting CUDA devices: found none (no usable CUDA device or driver)");
  *out = n;
  return NNRT_OK;
}

nnrt_status nnrt_cuda_need_device(const char *what, nnrt_error *err) {
  int n = 0;
  nnrt_error inner = {0};
  nnrt_status st = nnrt_cuda_device_count(&n, &inner);
  if (st != NNRT_OK) return nnrt_errorf(err, st, "%s: no CUDA device: %s", what, inner.msg);
  return NNRT_OK;
}

nnrt_status nnrt_cuda_device_parse(const char *text, int count, int *out, nnrt_error *err) {
  if (!text || !out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_device_parse: text or out is NULL");
  *out = -1;
  long v = 0;
  const char *p = text;
  /* Digits only: strtol would accept signs, spaces and "0x". */
  for (; *p >= '0' && *p <= '9'; p++) {
    v = v * 10 + (*p - '0');
    if (v > 1000000) break;
  }
  if (p == text || *p != '\0')
    return nnrt_errorf(err, NNRT_E_ARG,
                       "NNC_CUDA_DEVICE: expected a device index (0 to %d), found \"%.64s\"",
                       count - 1, text);
  if (v >= count)
    return nnrt_errorf(err, NNRT_E_ARG,
                       "NNC_CUDA_DEVICE: device %ld asked for, but there are %d device(s) "
                       "(0 to %d)", v, count, count - 1);
  *out = (int)v;
  return NNRT_OK;
}

nnrt_status nnrt_cuda_device_select(int index, int *chosen, nnrt_error *err) {
  if (chosen) *chosen = -1;
  int n = 0;
  nnrt_status st = nnrt_cuda_device_count(&n, err);
  if (st != NNRT_OK) return st;
  int dev = index;
  if (index < 0) {
    const char *env = getenv("NNC_CUDA_DEVICE");
    dev = 0;
    if (env && (st = nnrt_cuda_device_parse(env, n, &dev, err)) != NNRT_OK) return st;
  } else if (index >= n) {
    return nnrt_errorf(err, NNRT_E_ARG,
                       "nnrt_cuda_device_select: device %d asked for, but there are %d "
                       "device(s) (0 to %d)", index, n, n - 1);
  }
  char what[64];
  snprintf(what, sizeof what, "selecting CUDA device %d", dev);
  if ((st = nnrt_cuda_check(cudaSetDevice(dev), what, err)) != NNRT_OK) return st;
  if (chosen) *chosen = dev;
  return NNRT_OK;
}

nnrt_status nnrt_cuda_device_info_get(int index, nnrt_cuda_device_info *out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_device_info_get: out is NULL");
  memset(out, 0, sizeof *out);
  out->index = -1;
  int n = 0;
  nnrt_status st = nnrt_cuda_device_count(&n, err);
  if (st != NNRT_OK) return st;
  if (index < 0 || index >= n)
    return nnrt_errorf(err, NNRT_E_ARG,
                       "nnrt_cuda_device_info_get: device %d asked for, but there are %d "
                       "device(s) (0 to %d)", index, n, n - 1);
  char what[64];
  snprintf(what, sizeof what, "reading the properties of CUDA device %d", index);
  struct cudaDeviceProp p;
  if ((st = nnrt_cuda_check(cudaGetDeviceProperties(&p, index), what, err)) != NNRT_OK) return st;
  /* Clocks left cudaDeviceProp in CUDA 13; attributes have them in every
   * version. */
  int clock = 0, mem_clock = 0, bus = 0;
  if ((st = nnrt_cuda_check(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, index), what,
                            err)) != NNRT_OK ||
      (st = nnrt_cuda_check(cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, index),
                            what, err)) != NNRT_OK ||
      (st = nnrt_cuda_check(
           cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, index), what, err)) !=
          NNRT_OK)
    return st;
  out->index = index;
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->sm_count = p.multiProcessorCount;
  out->total_mem = p.totalGlobalMem;
  out->l2_bytes = p.l2CacheSize;
  out->clock_khz = clock;
  out->mem_clock_khz = mem_clock;
  out->mem_bus_bits = bus;
  out->smem_optin_bytes = p.sharedMemPerBlockOptin;
  return NNRT_OK;
}
