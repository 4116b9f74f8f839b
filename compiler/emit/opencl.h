/* compiler/emit/opencl.h — the OpenCL emitter's parts.
 *
 * opencl.c checks the schedule fits the target, lays the weights out in one
 * device buffer and writes the folder; opencl_model.c writes <model>.c (the
 * host API over runtime/opencl), opencl_kernels.c the OpenCL C program
 * <model>.cl (the templates of templates/opencl, one specialised copy per
 * kernel that uses one) with each kernel's host launcher, opencl_loops.c the
 * kernels nnc writes itself (elementwise chains, moves, reductions, loss),
 * and opencl_build.c the Makefile and README.
 *
 * Every tensor a kernel touches is a kernel argument of its own: a
 * sub-buffer of the arena or of the weights buffer at the tensor's planned
 * offset (the plan aligns offsets to 256 bytes), or the device copy of an
 * input or output. Such a buffer is a "slot": slot_of[t] for the tensor t
 * (views share their root's slot). */
#ifndef NNC_OPENCL_EMIT_H
#define NNC_OPENCL_EMIT_H

#include "emit_c.h"

#define OCL_MAX_KERNELS 4096

typedef struct ocl_ctx {
  ec_ctx x;
  int *slot_of;     /* per tensor: its slot, or -1 */
  int *slot_root;   /* per slot: the root tensor */
  int nslots;
  nnc_sb cl;        /* <model>.cl */
  nnc_sb host;      /* the launchers, into <model>.c */
  const char *kname[OCL_MAX_KERNELS];   /* OpenCL kernel names, in m->kern order */
  char kbuf[OCL_MAX_KERNELS][24];
  int nkern;
} ocl_ctx;

/* The OpenCL C type of tensor t: "float" or "int". */
const char *ocl_type(const ocl_ctx *o, int t);
/* Registers an OpenCL kernel name; returns its index in m->kern. */
int ocl_kernel(ocl_ctx *o, const char *fmt, int k);
/* The text of an embedded template file ("gemm.cl"), or NULL. */
const char *ocl_template(const char *name);

/* Appends every kernel to o->cl and its launcher `static int k<i>(<p>_model
 * *m, const <p>_dims *d)` to o->host. */
nnc_status ocl_emit_kernels(ocl_ctx *o, nnc_error *err);
/* The kernel and launcher of an elementwise, move, reduce, loss, gather or
 * non-last-axis softmax kernel. */
nnc_status ocl_emit_loop_kernel(ocl_ctx *o, int k, nnc_error *err);

nnc_status ocl_write_model(ocl_ctx *o, const char *dir, nnc_error *err);
nnc_status ocl_write_build(const ocl_ctx *o, const char *dir, nnc_error *err);

#endif
