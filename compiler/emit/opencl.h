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
 * (views share their root's slot).
 *
 * Every size that depends on the device (GEMM tiles, the work-group of a row
 * kernel, of a GEMM prologue's statistics and of a loop kernel, attention's
 * queries a group and keys a step) is chosen twice by the same rule
 * (compiler/tune/tune_opencl.c): at compile time for the target's device
 * class, and by the model's create for the device it opens, from the
 * candidate lists written into <model>.c; the program is built with the
 * picks as -D options. */
#ifndef NNC_OPENCL_EMIT_H
#define NNC_OPENCL_EMIT_H

#include "../tune/tune_opencl.h"
#include "emit_c.h"

#define OCL_MAX_KERNELS 4096

/* A distinct list of candidates (tune_opencl.h): the kernels with equal
 * lists share it, and create picks one candidate for all of them from the
 * device; their program text names the pick T<list>_<parameter>. */
typedef struct ocl_tile_list {
  nnc_ocl_list l;
  int pick;          /* the compile-time choice, for the class defaults */
} ocl_tile_list;

/* One copy of gemm.cl in the program; GEMM kernels whose macros agree share it. */
typedef struct ocl_gemm_copy {
  char key[112];     /* the macros that make it: tile lists, B layout, activation, prologue, C's type */
  int kstats, kgemm; /* indices of its OpenCL kernels (kstats -1 without a prologue) */
} ocl_gemm_copy;

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
  ocl_tile_list *tl;   /* the candidate lists */
  int ntl;
  int *tl_of;          /* per schedule kernel: its list, or -1 (views) */
  int *stats_of;       /* per GEMM kernel with a prologue: its statistics' list, else -1 */
  ocl_gemm_copy *gc;   /* the copies of gemm.cl */
  int ngc;
} ocl_ctx;

/* Whether tensor t is stored narrow (f16 or bf16, the storage type of
 * --precision): common.cl's NNC_LOAD and NNC_STORE reach its elements. */
bool ocl_narrow(const ec_ctx *x, int t);
/* The OpenCL C type of tensor t: "float", "int", or "nnc_t" (common.cl's
 * storage type) for a narrow one. */
const char *ocl_type(const ocl_ctx *o, int t);
/* ec_ctx.loop_load, loop_store and loop_copy: a narrow tensor's elements
 * through NNC_LOAD, NNC_STORE and NNC_COPY, the others as nnc_ld and nnc_st
 * (OpenCL C has no overloads that would take both). */
void ocl_loop_load(const ec_ctx *x, int t, const char *name, const char *idx, char *buf, size_t n);
void ocl_loop_store(const ec_ctx *x, int t, const char *name, const char *idx, const char *v, char *buf, size_t n);
void ocl_loop_copy(const ec_ctx *x, int t, const char *name, const char *idx, const char *src, const char *sidx,
                   char *buf, size_t n);
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

/* Fills o->tl, o->ntl, o->tl_of and o->stats_of from the tuner's candidates. */
nnc_status ocl_tile_lists(ocl_ctx *o, nnc_error *err);

nnc_status ocl_write_model(ocl_ctx *o, const char *dir, nnc_error *err);
nnc_status ocl_write_build(const ocl_ctx *o, const char *dir, nnc_error *err);

/* bench_<model>.c's device hooks for an OpenCL model (emit_c_bench.c calls
 * it): the inputs copied once to cl_mem buffers of the model's context, and
 * runs on them through <model>_run_device that wait for the queue. */
void ocl_bench_adapters(const ec_ctx *x, nnc_sb *b);

#endif
