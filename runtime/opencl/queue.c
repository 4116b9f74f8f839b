/* runtime/opencl/queue.c — the context and its profiling queue, buffers,
 * kernel launches and event timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_opencl_impl.h"

nnrt_status nnrt_cl_create(const nnrt_cl_options *opt, nnrt_cl **out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_create: out is NULL");
  *out = NULL;
  nnrt_cl_options none = {0};
  if (!opt) opt = &none;
  nnrt_cl *cl = calloc(1, sizeof *cl);
  if (!cl) return nnrt_errorf(err, NNRT_E_NOMEM, "nnrt_cl_create: out of memory");
  nnrt_status st = nnrt_cl_device_choose(opt->device, &cl->dev, err);
  if (st != NNRT_OK) goto fail;
  cl->cache_on = !opt->no_cache;
  if (cl->cache_on) {
    /* No folder to be found (no HOME) only turns the cache off: it is an
     * optimisation, never a reason not to run. A path too long is a bad
     * setting and is reported. */
    nnrt_error inner = {0};
    st = nnrt_cl_cache_dir(opt->cache_dir, cl->cache_dir, sizeof cl->cache_dir, &inner);
    if (st == NNRT_E_SIZE) {
      nnrt_errorf(err, st, "%s", inner.msg);
      goto fail;
    }
    if (st != NNRT_OK) {
      cl->cache_on = false;
      cl->cache_dir[0] = '\0';
    }
  }
  cl_int e = CL_SUCCESS;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   (cl_context_properties)cl->dev.platform_id, 0};
  char what[384];
  snprintf(what, sizeof what, "creating an OpenCL context on %.300s", cl->dev.name);
  cl->ctx = clCreateContext(props, 1, &cl->dev.id, NULL, NULL, &e);
  if ((st = nnrt_cl_check(e, what, err)) != NNRT_OK) goto fail;
  snprintf(what, sizeof what, "creating an OpenCL queue on %.300s", cl->dev.name);
  cl->queue = clCreateCommandQueue(cl->ctx, cl->dev.id, CL_QUEUE_PROFILING_ENABLE, &e);
  if ((st = nnrt_cl_check(e, what, err)) != NNRT_OK) goto fail;
  *out = cl;
  return NNRT_OK;
fail:
  nnrt_cl_destroy(cl);
  return st;
}

void nnrt_cl_destroy(nnrt_cl *cl) {
  if (!cl) return;
  if (cl->queue) {
    clFinish(cl->queue);
    clReleaseCommandQueue(cl->queue);
  }
  if (cl->ctx) clReleaseContext(cl->ctx);
  free(cl);
}

const nnrt_cl_device_info *nnrt_cl_device(const nnrt_cl *cl) { return cl ? &cl->dev : NULL; }
cl_context nnrt_cl_context(const nnrt_cl *cl) { return cl ? cl->ctx : NULL; }
cl_command_queue nnrt_cl_queue(const nnrt_cl *cl) { return cl ? cl->queue : NULL; }
const char *nnrt_cl_cache_folder(const nnrt_cl *cl) {
  return cl && cl->cache_on ? cl->cache_dir : "";
}

nnrt_cl_cache_stats nnrt_cl_get_cache_stats(const nnrt_cl *cl) {
  nnrt_cl_cache_stats zero = {0};
  return cl ? cl->stats : zero;
}

nnrt_status nnrt_cl_finish(nnrt_cl *cl, nnrt_error *err) {
  if (!cl) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_finish: cl is NULL");
  return nnrt_cl_check(clFinish(cl->queue), "waiting for the OpenCL queue", err);
}

nnrt_status nnrt_cl_buffer_create(nnrt_cl *cl, size_t bytes, cl_mem *out, nnrt_error *err) {
  if (!cl || !out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_buffer_create: cl or out is NULL");
  *out = NULL;
  cl_int e = CL_SUCCESS;
  cl_mem m = clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &e);
  char what[96];
  snprintf(what, sizeof what, "creating an OpenCL buffer of %zu bytes", bytes);
  nnrt_status st = nnrt_cl_check(e, what, err);
  if (st != NNRT_OK) return st;
  *out = m;
  return NNRT_OK;
}

void nnrt_cl_buffer_release(cl_mem m) {
  if (m) clReleaseMemObject(m);
}

nnrt_status nnrt_cl_write(nnrt_cl *cl, cl_mem dst, size_t offset, const void *src,
                          size_t bytes, nnrt_error *err) {
  if (!cl || !dst || (!src && bytes))
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_write: cl, dst or src is NULL");
  if (bytes == 0) return NNRT_OK;
  char what[128];
  snprintf(what, sizeof what, "writing %zu bytes at offset %zu of an OpenCL buffer", bytes,
           offset);
  return nnrt_cl_check(
      clEnqueueWriteBuffer(cl->queue, dst, CL_TRUE, offset, bytes, src, 0, NULL, NULL), what,
      err);
}

nnrt_status nnrt_cl_read(nnrt_cl *cl, cl_mem src, size_t offset, void *dst, size_t bytes,
                         nnrt_error *err) {
  if (!cl || !src || (!dst && bytes))
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_read: cl, src or dst is NULL");
  if (bytes == 0) return NNRT_OK;
  char what[128];
  snprintf(what, sizeof what, "reading %zu bytes at offset %zu of an OpenCL buffer", bytes,
           offset);
  return nnrt_cl_check(
      clEnqueueReadBuffer(cl->queue, src, CL_TRUE, offset, bytes, dst, 0, NULL, NULL), what,
      err);
}

nnrt_status nnrt_cl_run(nnrt_cl *cl, cl_kernel kernel, cl_uint dims, const size_t *global,
                        const size_t *local, cl_event *ev, const char *label,
                        nnrt_error *err) {
  if (ev) *ev = NULL;
  if (!label) label = "OpenCL kernel";
  if (!cl || !kernel || !global)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: launch with cl, kernel or global NULL", label);
  if (dims < 1 || dims > 3)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: expected 1 to 3 dimensions, found %u", label,
                       (unsigned)dims);
  char what[320];
  snprintf(what, sizeof what, "%.256s: launching", label);
  return nnrt_cl_check(
      clEnqueueNDRangeKernel(cl->queue, kernel, dims, NULL, global, local, 0, NULL, ev), what,
      err);
}

nnrt_status nnrt_cl_event_elapsed_ns(cl_event ev, uint64_t *ns, nnrt_error *err) {
  if (!ev || !ns) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_event_elapsed_ns: ev or ns is NULL");
  *ns = 0;
  nnrt_status st = nnrt_cl_check(clWaitForEvents(1, &ev), "waiting for an OpenCL event", err);
  if (st != NNRT_OK) return st;
  cl_ulong t0 = 0, t1 = 0;
  if ((st = nnrt_cl_check(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0,
                                                  &t0, NULL),
                          "reading an OpenCL event's start time", err)) != NNRT_OK)
    return st;
  if ((st = nnrt_cl_check(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1,
                                                  &t1, NULL),
                          "reading an OpenCL event's end time", err)) != NNRT_OK)
    return st;
  if (t1 < t0)
    return nnrt_errorf(err, NNRT_E_DEVICE,
                       "OpenCL event timing: end %llu before start %llu (driver fault)",
                       (unsigned long long)t1, (unsigned long long)t0);
  *ns = (uint64_t)(t1 - t0);
  return NNRT_OK;
}
