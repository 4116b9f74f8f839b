/* runtime/opencl/peaks.c — the device's rates as a benchmark's roofline sees
 * them: the bandwidth of a device-to-device copy of a buffer larger than any
 * cache (bytes read plus written; the median of a few runs), and the FMA rate
 * of a small dedicated kernel whose work-items each run eight independent
 * chains of float8 fma (neither latency nor memory bounds it; OpenCL C has no
 * tensor-core products, so this is the ceiling of every kernel; the best of a
 * few runs, since sharing the device only ever lowers a rate). Runs are
 * timed with profiling events, after a warm-up. The kernel uses fma, as
 * nnc's kernels do: PoCL's mad is a multiply and an add, at about 60% of the
 * rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_opencl_impl.h"

#define COPY_MAX ((size_t)256 << 20)   /* 8x a large CPU L3, 5x an H100's L2 */
#define COPY_MIN ((size_t)1 << 20)
#define REPS 5
#define FMA_TARGET_NS 20000000ull      /* a timed FMA run lasts about 20 ms */
#define FMA_ITEMS_PER_UNIT 2048        /* enough work-items to fill a GPU's multiprocessor */

static const char fma_source[] =
  "/* nnrt peaks: 8 chains x 8 lanes x iters fused multiply-adds a work-item */\n"
  "__kernel void nnrt_peak_fma(__global float *out, int iters, float mul, float add) {\n"
  "  const float8 m = (float8)(mul), c = (float8)(add);\n"
  "  float8 a0 = (float8)((float)get_global_id(0) * 1e-9f), a1 = a0 + 0.1f, a2 = a0 + 0.2f, a3 = a0 + 0.3f;\n"
  "  float8 a4 = a0 + 0.4f, a5 = a0 + 0.5f, a6 = a0 + 0.6f, a7 = a0 + 0.7f;\n"
  "  for (int i = 0; i < iters; i++) {\n"
  "    a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);\n"
  "    a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);\n"
  "  }\n"
  "  const float8 s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));\n"
  "  const float4 s4 = s.lo + s.hi;\n"
  "  out[get_global_id(0)] = s4.x + s4.y + s4.z + s4.w;\n"
  "}\n";
#define FMA_FLOPS_PER_ITER (8.0 * 8.0 * 2.0)

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The nanoseconds of the command whose event is ev; releases ev. */
static nnrt_status event_ns(cl_event ev, uint64_t *ns, nnrt_error *err) {
  nnrt_status st = nnrt_cl_event_elapsed_ns(ev, ns, err);
  clReleaseEvent(ev);
  if (!st && *ns == 0) *ns = 1;   /* a timer too coarse for the command: count a nanosecond */
  return st;
}

/* The copy's bytes: COPY_MAX within what one allocation may hold and an
 * eighth of the device's memory (two buffers live at once). */
static size_t copy_bytes(const nnrt_cl *cl) {
  cl_ulong max_alloc = 0;
  if (clGetDeviceInfo(cl->dev.id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL) != CL_SUCCESS)
    max_alloc = 0;
  size_t n = COPY_MAX;
  if (max_alloc && max_alloc < n) n = (size_t)max_alloc;
  if (cl->dev.global_mem && cl->dev.global_mem / 8 < n) n = (size_t)(cl->dev.global_mem / 8);
  n &= ~(size_t)4095;
  return n < COPY_MIN ? COPY_MIN : n;
}

static nnrt_status measure_copy(nnrt_cl *cl, double *gbps, nnrt_error *err) {
  const size_t bytes = copy_bytes(cl);
  cl_mem a = NULL, b = NULL;
  nnrt_status st = nnrt_cl_buffer_create(cl, bytes, &a, err);
  if (!st) st = nnrt_cl_buffer_create(cl, bytes, &b, err);
  /* every page touched before the timing starts */
  const cl_uint pattern = 0x3c003c00u;
  if (!st)
    st = nnrt_cl_check(clEnqueueFillBuffer(cl->queue, a, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL),
                       "peaks: filling the copy's source", err);
  if (!st)
    st = nnrt_cl_check(clEnqueueFillBuffer(cl->queue, b, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL),
                       "peaks: filling the copy's destination", err);
  double v[REPS];
  for (int r = 0; !st && r <= REPS; r++) {
    cl_event ev = NULL;
    uint64_t ns = 0;
    st = nnrt_cl_check(clEnqueueCopyBuffer(cl->queue, a, b, 0, 0, bytes, 0, NULL, &ev), "peaks: copying a buffer", err);
    if (!st) st = event_ns(ev, &ns, err);
    if (!st && r > 0) v[r - 1] = 2.0 * (double)bytes / (double)ns;   /* r == 0 warms up */
  }
  nnrt_cl_buffer_release(a);
  nnrt_cl_buffer_release(b);
  if (!st) *gbps = median(v, REPS);
  return st;
}

/* One run of the FMA kernel over items work-items; its time in ns. */
static nnrt_status run_fma(nnrt_cl *cl, cl_kernel k, size_t items, int iters, uint64_t *ns, nnrt_error *err) {
  cl_int e = clSetKernelArg(k, 1, sizeof iters, &iters);
  nnrt_status st = nnrt_cl_check(e, "peaks: setting the FMA kernel's arguments", err);
  cl_event ev = NULL;
  if (!st) st = nnrt_cl_run(cl, k, 1, &items, NULL, &ev, "peaks: the FMA kernel", err);
  if (!st) st = event_ns(ev, ns, err);
  return st;
}

static nnrt_status measure_fma(nnrt_cl *cl, double *gflops, nnrt_error *err) {
  cl_program prog = NULL;
  cl_kernel k = NULL;
  cl_mem out = NULL;
  const size_t items = (size_t)(cl->dev.compute_units ? cl->dev.compute_units : 1) * FMA_ITEMS_PER_UNIT;
  nnrt_status st = nnrt_cl_program_build(cl, fma_source, "-cl-std=CL1.2", "nnrt peaks (FMA kernel)", &prog, err);
  cl_int e = CL_SUCCESS;
  if (!st) {
    k = clCreateKernel(prog, "nnrt_peak_fma", &e);
    st = nnrt_cl_check(e, "peaks: the FMA kernel", err);
  }
  if (!st) st = nnrt_cl_buffer_create(cl, items * sizeof(float), &out, err);
  /* constants the compiler cannot fold: the chains stay a multiply-add a step */
  const cl_float mul = 0.999999f, add = 1e-7f;
  if (!st) {
    e = clSetKernelArg(k, 0, sizeof out, &out);
    e |= clSetKernelArg(k, 2, sizeof mul, &mul);
    e |= clSetKernelArg(k, 3, sizeof add, &add);
    st = nnrt_cl_check(e, "peaks: setting the FMA kernel's arguments", err);
  }
  /* a short run, then as many iterations as fill FMA_TARGET_NS */
  int iters = 64;
  uint64_t ns = 0;
  if (!st) st = run_fma(cl, k, items, iters, &ns, err);
  if (!st) {
    double want = (double)iters * (double)FMA_TARGET_NS / (double)ns;
    iters = want > (double)(1 << 20) ? 1 << 20 : want < 64 ? 64 : (int)want;
  }
  double best = 0;
  for (int r = 0; !st && r < REPS; r++) {
    st = run_fma(cl, k, items, iters, &ns, err);
    double v = (double)items * (double)iters * FMA_FLOPS_PER_ITER / (double)ns;
    if (!st && v > best) best = v;
  }
  nnrt_cl_buffer_release(out);
  if (k) clReleaseKernel(k);
  if (prog) clReleaseProgram(prog);
  if (!st) *gflops = best;
  return st;
}

nnrt_status nnrt_cl_measure_peaks(nnrt_cl *cl, double *gflops, double *gbps, nnrt_error *err) {
  if (!cl || !gflops || !gbps) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cl_measure_peaks: cl, gflops or gbps is NULL");
  *gflops = *gbps = 0;
  nnrt_status st = measure_copy(cl, gbps, err);
  if (!st) st = measure_fma(cl, gflops, err);
  if (!st) st = nnrt_cl_finish(cl, err);
  return st;
}
