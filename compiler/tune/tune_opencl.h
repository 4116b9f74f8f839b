/* compiler/tune/tune_opencl.h — the OpenCL tile rules as lists.
 *
 * Every kernel's sizes that depend on the device (a GEMM's tiles, the
 * work-group of a row kernel, of a GEMM prologue's statistics and of a loop
 * kernel, attention's queries a group and keys a step) come from one rule:
 * an ordered list of candidates, each with what it needs of the device
 * (local memory, work-group size, float vector width) and the most compute
 * units it keeps busy; the choice is the first candidate the device meets.
 * nnc_tune_opencl applies it to the class defaults of describe_opencl.c (the
 * compile-time choice `nnc --explain` prints); the OpenCL emitter writes the
 * same lists into the model, whose create applies them to the values
 * clGetDeviceInfo reports and builds the program with the picks as -D
 * options. So there is one rule, and the device that runs the model picks
 * from it. */
#ifndef NNC_TUNE_OPENCL_H
#define NNC_TUNE_OPENCL_H

#include <stdbool.h>
#include <stdint.h>

#include "tune.h"

/* What a candidate needs of the device. */
typedef struct nnc_ocl_need {
  int64_t local;   /* CL_DEVICE_LOCAL_MEM_SIZE at least */
  int group;       /* CL_DEVICE_MAX_WORK_GROUP_SIZE at least */
  int vector;      /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT at least */
  int max_units;   /* CL_DEVICE_MAX_COMPUTE_UNITS at most (0: any): with more, some would idle */
} nnc_ocl_need;

/* What a list sizes; each family has its parameters (below), named in the
 * program as T<list>_<name>. */
typedef enum nnc_ocl_family {
  NNC_OCL_NONE,       /* a view: no list */
  NNC_OCL_GEMM,       /* templates/opencl/gemm.cl: VW WM WN LM LN KC */
  NNC_OCL_ROWS,       /* rows.cl and gemm.cl's statistics, a work-group a row: WG */
  NNC_OCL_ATTENTION,  /* attention.cl: BQ (queries = work-items a group), BK (keys staged a step) */
  NNC_OCL_LOOP,       /* nnc's own loop kernels (elementwise, moves, reductions, ...): WG */
} nnc_ocl_family;

/* The parameters of each family, as indices of nnc_ocl_choice.v. */
enum { NNC_OCL_VW, NNC_OCL_WM, NNC_OCL_WN, NNC_OCL_LM, NNC_OCL_LN, NNC_OCL_KC };
enum { NNC_OCL_WG };
enum { NNC_OCL_BQ, NNC_OCL_BK };

#define NNC_OCL_MAX_PARAMS 6
#define NNC_OCL_MAX_CANDIDATES 24

/* One candidate: the values of its family's parameters, and its needs.
 * GEMM: VW floats a vector (CPU way; 1 on the GPU way), WM x WN of C a
 * work-item, LM x LN work-items, KC K steps staged in local memory. */
typedef struct nnc_ocl_choice {
  int v[NNC_OCL_MAX_PARAMS];
  nnc_ocl_need need;
} nnc_ocl_choice;

/* The candidates of one kernel, best first; the last needs the least of
 * every resource. */
typedef struct nnc_ocl_list {
  nnc_ocl_family family;
  int cpu;    /* GEMM: 1 the CPU way (NNC_GEMM_CPU=1, packed vectors), 0 the GPU way */
  int n;
  nnc_ocl_choice c[NNC_OCL_MAX_CANDIDATES];
} nnc_ocl_list;

/* The family's name ("gemm", ...) and its parameters' names, into *names;
 * returns how many. */
const char *nnc_opencl_family_name(nnc_ocl_family f);
int nnc_opencl_params(nnc_ocl_family f, const char *const **names);

/* The list of kernel k of s for an OpenCL target t (its device class picks
 * the GEMM's way and the order of the other lists): GEMM tiles, attention
 * blocks, a row kernel's group (a softmax over another axis than the last
 * is a loop kernel), a loop kernel's group; n = 0 and NNC_OCL_NONE for a
 * view. */
void nnc_opencl_candidates(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_ocl_list *out);

/* The list of the statistics kernel of GEMM k's LayerNorm or RMSNorm
 * prologue (a row kernel over the rows of A); n = 0 without a prologue. */
void nnc_opencl_stats_candidates(const nnc_target_desc *t, const nnc_schedule *s, int k, nnc_ocl_list *out);

/* Whether a device described by d meets need. */
bool nnc_opencl_fits(const nnc_ocl_need *need, const nnc_opencl_desc *d);

/* The first candidate of l that fits d; the last one when none does. */
int nnc_opencl_pick(const nnc_ocl_list *l, const nnc_opencl_desc *d);

/* The head dims attention kernel k's arrays are sized by: the constant last
 * dims of q and v, 128 where they are symbolic. */
void nnc_opencl_attn_dmax(const nnc_schedule *s, int k, int64_t *dmax, int64_t *dvmax);

#endif
