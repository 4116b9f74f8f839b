/* runtime/opencl/device.c — listing the platforms and devices, and picking
 * one by index or by name. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_opencl_impl.h"

static void dev_string(cl_device_id d, cl_device_info what, char *buf, size_t size) {
  buf[0] = '\0';
  if (clGetDeviceInfo(d, what, size, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
  buf[size - 1] = '\0';
}

static void fill_info(nnrt_cl_device_info *o, int p, int i, cl_platform_id pid, cl_device_id d) {
  memset(o, 0, sizeof *o);
  o->platform = p;
  o->index = i;
  o->platform_id = pid;
  o->id = d;
  if (clGetPlatformInfo(pid, CL_PLATFORM_NAME, sizeof o->platform_name, o->platform_name,
                        NULL) != CL_SUCCESS)
    o->platform_name[0] = '\0';
  o->platform_name[sizeof o->platform_name - 1] = '\0';
  dev_string(d, CL_DEVICE_NAME, o->name, sizeof o->name);
  dev_string(d, CL_DRIVER_VERSION, o->driver, sizeof o->driver);
  dev_string(d, CL_DEVICE_VERSION, o->version, sizeof o->version);
  /* A failed query leaves a field at zero: the fields are informative, and a
   * model's tile choice treats zero as a device that has none of it. */
  clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof o->type, &o->type, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof o->compute_units, &o->compute_units,
                  NULL);
  clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof o->global_mem, &o->global_mem, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof o->max_work_group,
                  &o->max_work_group, NULL);
  clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof o->local_mem, &o->local_mem, NULL);
  clGetDeviceInfo(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof o->preferred_vector,
                  &o->preferred_vector, NULL);
}

nnrt_status nnrt_cl_devices(nnrt_cl_device_info *out, int cap, int *count, nnrt_error *err) {
  if (!out || !count || cap <= 0)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_devices: out or count is NULL, or cap <= 0");
  *count = 0;
  cl_platform_id plats[NNRT_CL_MAX_PLATFORMS];
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(NNRT_CL_MAX_PLATFORMS, plats, &np);
  /* The ICD loader says -1001 when no vendor is installed. */
  if (e != CL_SUCCESS || np == 0)
    return nnrt_errorf(err, NNRT_E_DEVICE, "listing OpenCL platforms: %s (%d) %s",
                       e == CL_SUCCESS ? "none found" : nnrt_cl_error_name(e), (int)e,
                       NNRT_CL_NO_DEVICE_HINT);
  if (np > NNRT_CL_MAX_PLATFORMS) np = NNRT_CL_MAX_PLATFORMS;
  int n = 0;
  for (cl_uint p = 0; p < np && n < cap; p++) {
    cl_device_id devs[NNRT_CL_MAX_DEVICES];
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, NNRT_CL_MAX_DEVICES, devs, &nd) !=
        CL_SUCCESS)
      continue;
    if (nd > NNRT_CL_MAX_DEVICES) nd = NNRT_CL_MAX_DEVICES;
    for (cl_uint d = 0; d < nd && n < cap; d++) fill_info(&out[n++], (int)p, (int)d, plats[p], devs[d]);
  }
  if (n == 0)
    return nnrt_errorf(err, NNRT_E_DEVICE,
                       "listing OpenCL devices: %u platform(s) but no device %s", np,
                       NNRT_CL_NO_DEVICE_HINT);
  *count = n;
  return NNRT_OK;
}

static const char *type_name(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "GPU";
  if (t & CL_DEVICE_TYPE_CPU) return "CPU";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  return "other";
}

void nnrt_cl_device_list_text(const nnrt_cl_device_info *devs, int n, char *buf, size_t size) {
  if (!buf || size == 0) return;
  buf[0] = '\0';
  size_t used = 0;
  for (int i = 0; devs && i < n && used < size; i++) {
    int w = snprintf(buf + used, size - used, "%s%d:%d %s (%s, %s %s)", i ? "; " : "",
                     devs[i].platform, devs[i].index, devs[i].name, type_name(devs[i].type),
                     devs[i].platform_name, devs[i].driver);
    if (w < 0) break;
    used += (size_t)w;
  }
}

/* "P:D" with digits only; false for anything else, so a name such as
 * "gfx90a:sramecc+" falls through to the substring match. */
static bool parse_index(const char *s, int *p, int *d) {
  long v[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    const char *start = s;
    for (; *s >= '0' && *s <= '9'; s++) {
      v[k] = v[k] * 10 + (*s - '0');
      if (v[k] > 1000000) return false;
    }
    if (s == start) return false;
    if (k == 0 && *s++ != ':') return false;
  }
  if (*s != '\0') return false;
  *p = (int)v[0];
  *d = (int)v[1];
  return true;
}

static bool contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t k = 0;
    while (k < n && hay[k] &&
           tolower((unsigned char)hay[k]) == tolower((unsigned char)needle[k]))
      k++;
    if (k == n) return true;
  }
  return n == 0;
}

nnrt_status nnrt_cl_device_match(const nnrt_cl_device_info *devs, int n, const char *spec,
                                 const char *source, nnrt_cl_device_info *out,
                                 nnrt_error *err) {
  if (!devs || !spec || !out || n <= 0)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_device_match: devs, spec or out is NULL, or n <= 0");
  if (!source) source = "OpenCL device";
  int p = 0, d = 0;
  if (parse_index(spec, &p, &d)) {
    for (int i = 0; i < n; i++)
      if (devs[i].platform == p && devs[i].index == d) {
        *out = devs[i];
        return NNRT_OK;
      }
  } else if (spec[0] != '\0') {
    for (int i = 0; i < n; i++)
      if (contains_nocase(devs[i].name, spec)) {
        *out = devs[i];
        return NNRT_OK;
      }
  }
  char list[400];
  nnrt_cl_device_list_text(devs, n, list, sizeof list);
  return nnrt_errorf(err, NNRT_E_ARG,
                     "%s: expected \"P:D\" (platform:device) or part of a device name, found "
                     "\"%.48s\", which matches none of the %d device(s): %s",
                     source, spec, n, list);
}

nnrt_status nnrt_cl_device_choose(const char *spec, nnrt_cl_device_info *out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_device_choose: out is NULL");
  nnrt_cl_device_info *devs = calloc(NNRT_CL_MAX_DEVICES, sizeof *devs);
  if (!devs) return nnrt_errorf(err, NNRT_E_NOMEM, "listing OpenCL devices: out of memory");
  int n = 0;
  nnrt_status st = nnrt_cl_devices(devs, NNRT_CL_MAX_DEVICES, &n, err);
  if (st == NNRT_OK) {
    const char *source = "device option";
    if (!spec || !spec[0]) {
      spec = getenv("NNC_OPENCL_DEVICE");
      source = "NNC_OPENCL_DEVICE";
    }
    if (spec && spec[0]) {
      st = nnrt_cl_device_match(devs, n, spec, source, out, err);
    } else {
      int pick = 0;
      for (int i = n - 1; i >= 0; i--)
        if (devs[i].type & CL_DEVICE_TYPE_GPU) pick = i;
      *out = devs[pick];
    }
  }
  free(devs);
  return st;
}
