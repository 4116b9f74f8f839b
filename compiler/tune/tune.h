/* compiler/tune/tune.h — what a target chip is, and the tile choice per kernel.
 *
 * A target description says what the tuning rules need to know about a chip:
 * vector width and registers, FMA throughput, caches, cores, and for a GPU
 * its family's own limits (shared memory, registers, warps, tensor-core
 * shapes; OpenCL's local memory and work-group size). nnc_tune_kernel is the
 * one interface from a description and a scheduled kernel to its tiles; each
 * target family has its own rules behind it (tune.c holds the table of
 * tuners), and every rule writes a short reason that `nnc --explain` prints. */
#ifndef NNC_TUNE_H
#define NNC_TUNE_H

#include <stdint.h>
#include <stdio.h>

#include "../ir/schedule.h"
#include "target.h"

/* One tensor-core instruction shape: D[m x n] += A[m x k] . B[k x n] with
 * inputs of type `ab` ("f16", "bf16", "tf32", "e4m3", "s8"); for wgmma n is
 * the largest of its N (a multiple of 8 up to it). */
typedef struct nnc_mma_shape {
  const char *ab;
  int m, n, k;
} nnc_mma_shape;

#define NNC_MAX_MMA 5

/* A CUDA compute capability (the CUDA C++ Programming Guide's "Technical
 * Specifications per Compute Capability" and the PTX ISA's mma/wgmma tables),
 * with a representative chip for what the capability does not fix. */
typedef struct nnc_cuda_desc {
  int sm;                        /* 80 for 8.0 */
  const char *chip;              /* whose SM count and L2 the description carries */
  int64_t smem_per_sm;           /* shared memory per SM */
  int64_t smem_per_block;        /* per block without opting in (48 KiB) */
  int64_t smem_per_block_optin;  /* per block with cudaFuncAttributeMaxDynamicSharedMemorySize */
  int64_t l1_smem_per_sm;        /* the unified L1 + shared memory array */
  int regs_per_sm, regs_per_block, regs_per_thread;   /* 32-bit registers */
  int max_warps_per_sm, max_blocks_per_sm, max_threads_per_block;
  int nmma;
  nnc_mma_shape mma[NNC_MAX_MMA];     /* warp-level mma.sync */
  int nwgmma;
  nnc_mma_shape wgmma[NNC_MAX_MMA];   /* warpgroup-level wgmma.mma_async (sm_90a) */
  bool ldmatrix;                 /* ldmatrix: sm_75+ */
  bool cp_async;                 /* cp.async global to shared: sm_80+ */
  bool tma;                      /* cp.async.bulk.tensor: sm_90+ */
  bool wgmma_ok;                 /* wgmma: sm_90a only */
  int last_cuda;                 /* the newest CUDA major whose nvcc builds it; 0: every one since 12 */
} nnc_cuda_desc;

/* An OpenCL device: compile-time defaults for its class; the runtime reads
 * the real values with clGetDeviceInfo. */
typedef struct nnc_opencl_desc {
  nnc_device_class device;
  int64_t local_mem;             /* CL_DEVICE_LOCAL_MEM_SIZE */
  int max_work_group;            /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
  int compute_units;             /* CL_DEVICE_MAX_COMPUTE_UNITS */
  int preferred_vector_width;    /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT */
  int simd_width;                /* work-items that run in lockstep (warp, wavefront) */
} nnc_opencl_desc;

typedef struct nnc_target_desc {
  const char *name;            /* the --target name */
  nnc_target_family family;
  const char *isa;             /* C SIMD: "avx512", "avx2", "neon" or "generic";
                                  CUDA: "sm_80"...; OpenCL: "cpu" or "gpu" */
  int vector_width;            /* f32 lanes of one vector register; a GPU's warp */
  int vector_regs;             /* architectural vector registers (C SIMD) */
  int fma_units;               /* vector FMA pipes per core; 0 when unknown or none */
  int fma_per_cycle;           /* f32 FMAs per cycle per core (per SM on CUDA); 0 when unknown */
  int64_t l1d, l2, l3;         /* data cache bytes: L1d and L2 per core, L3 shared;
                                  CUDA: L1 per SM, L2 of the chip, no L3 */
  int cores;                   /* cores; SMs; compute units */
  nnc_cuda_desc cuda;          /* NNC_FAMILY_CUDA only */
  nnc_opencl_desc opencl;      /* NNC_FAMILY_OPENCL only */
} nnc_target_desc;

/* The tiles of one kernel; fields a kernel's template does not read are 0. */
typedef struct nnc_tile {
  int threads;                 /* C SIMD: threads the kernel's tasks are spread over */
  int mr, nr, kc, mc, nc;      /* GEMM (C SIMD): register block MR x NR, cache blocks KC, MC, NC */
  int gemm_tm, gemm_tn;        /* GEMM (C SIMD): tasks per batch item along M and along N */
  int attn_bq, attn_bk;        /* attention: queries per task / block, keys per streamed block */
  int row_min_elems;           /* row kernels: the fewest elements worth one task */
  int row_block;               /* row kernels: rows per task (per block / work-group on a GPU) */
  int64_t ew_chunk;            /* elementwise, move, gather: elements per task (per block) */
  int block_m, block_n, block_k;  /* GEMM on a GPU: tile of C per block / work-group, K step */
  int warps;                   /* CUDA: warps per block */
  int stages;                  /* CUDA: shared-memory pipeline depth of the K loop */
  int group;                   /* GPU: threads per block / work-items per work-group */
  char impl[24];               /* which of the target's implementations of the kernel runs
                                  ("cublaslt", "nnc-128x256x32"...); "": the analytic rule's */
  char reason[400];            /* why, in one line */
} nnc_tile;

/* Fills the description of a target chip by name: `c-simd` detects the host's
 * ISA, `c-avx2` and the like fix it; caches and cores come from the host;
 * CUDA and OpenCL targets get their table values. An unknown name is an
 * NNC_E_TARGET error that lists the known ones. */
nnc_status nnc_target_describe(const char *name, nnc_target_desc *out, nnc_error *err);

/* The tiles of kernel k of s for target t. */
nnc_status nnc_tune_kernel(const nnc_target_desc *t, const nnc_schedule *s, int k,
                           nnc_tile *out, nnc_error *err);

/* One line for the target, then one per kernel with its tile choice and why
 * (`nnc --explain`). tiles holds s->nk entries from nnc_tune_kernel. */
void nnc_tune_explain(FILE *f, const nnc_target_desc *t, const nnc_schedule *s,
                      const nnc_tile *tiles);

/* Tunes every kernel of s and explains them: for callers that do not keep
 * the tiles. */
nnc_status nnc_tune_explain_all(FILE *f, const nnc_target_desc *t, const nnc_schedule *s,
                                nnc_error *err);

#endif
