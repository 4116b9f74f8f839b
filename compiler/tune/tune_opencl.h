/* compiler/tune/tune_opencl.h — the OpenCL GEMM tile rule as a list.
 *
 * The rule is an ordered list of tile candidates, each with what it needs
 * of the device (local memory, work-group size, float vector width) and the
 * most compute units it keeps busy; the tile is the first candidate the
 * device meets. nnc_tune_opencl applies it to the class defaults of
 * describe_opencl.c (the compile-time choice `nnc --explain` prints); the
 * OpenCL emitter writes the same list into the model, whose create applies
 * it to the values clGetDeviceInfo reports. So there is one rule, and the
 * device that runs the model picks from it. */
#ifndef NNC_TUNE_OPENCL_H
#define NNC_TUNE_OPENCL_H

#include <stdbool.h>
#include <stdint.h>

#include "tune.h"

/* One tile of templates/opencl/gemm.cl. */
typedef struct nnc_ocl_gemm_tile {
  int cpu;           /* 1: the CPU way (NNC_GEMM_CPU=1, packed vectors); 0: the GPU way */
  int vw;            /* CPU: floats a vector (NNC_VW); GPU: 1 */
  int wm, wn;        /* C rows and columns a work-item (CPU: NNC_MR, NNC_NR; GPU: NNC_WM, NNC_WN) */
  int lm, ln;        /* work-items along M and along N */
  int kc;            /* K steps staged in local memory at once (CPU: NNC_KC; GPU: NNC_TK) */
  /* what the device must report for this candidate */
  int64_t need_local;   /* CL_DEVICE_LOCAL_MEM_SIZE at least: twice the group's tiles */
  int need_group;       /* CL_DEVICE_MAX_WORK_GROUP_SIZE at least: lm * ln */
  int need_vector;      /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT at least */
  int max_units;        /* CL_DEVICE_MAX_COMPUTE_UNITS at most (0: any): with more, some would idle */
} nnc_ocl_gemm_tile;

#define NNC_OCL_MAX_CANDIDATES 24

/* The candidates of GEMM kernel k of s for an OpenCL target t (its device
 * class picks the way), in the rule's order of preference, into out
 * (NNC_OCL_MAX_CANDIDATES entries); returns how many (at least 1). The last
 * one needs the least of every resource. */
int nnc_opencl_gemm_candidates(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_ocl_gemm_tile *out);

/* Whether a device described by d meets what c needs. */
bool nnc_opencl_gemm_fits(const nnc_ocl_gemm_tile *c, const nnc_opencl_desc *d);

/* The first of the n candidates c that fits d; the last one when none does. */
int nnc_opencl_gemm_pick(const nnc_ocl_gemm_tile *c, int n, const nnc_opencl_desc *d);

#endif
