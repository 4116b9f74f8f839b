/* support/nnc_bench.h — the benchmark harness every generated bench_<model>
 * runs. bench_<model>.c describes its model in an nnc_bench_model (names,
 * sizes, and adapters to the model's C API) and calls nnc_bench_main, which
 * parses the options, measures the machine's peak once, fills weights and
 * inputs, checks against the float64 reference (--check) and times runs. */
#ifndef NNC_BENCH_H
#define NNC_BENCH_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "../check/ir/ir.h"
#include "../runtime/nnrt.h"

typedef struct nnc_bench_kernel {
  const char *name;    /* what it computes: "h.0.mlp.c_fc" */
  const char *where;   /* "gpt2.lua:31" */
  const char *kind;    /* "gemm", "attention", ... */
  const char *ops;     /* "layernorm + linear + gelu" */
  uint64_t ns;         /* time of the last profiled run */
  double flops, bytes; /* at the last run's sizes */
} nnc_bench_kernel;

typedef struct nnc_bench_model {
  const char *name;
  int nsyms;
  const char *const *sym_names;
  const int64_t *sym_max;
  int ninputs;
  const char *const *input_names;
  const int *input_i32;          /* 1: int32_t elements, 0: float */
  int noutputs;
  const char *const *output_names;
  const int *output_dtype;       /* NNRT_F32, NNRT_I32, or NNRT_BF16 / NNRT_F16: an output left
                                    in the storage dtype (nnc --outputs=storage), uint16_t bits */
  int nparams;
  const nnrt_st_desc *manifest;  /* the weights, in the graph's parameter order */
  int nkernels;

  /* adapters to the model's API; m is the model handle */
  int (*create)(int threads, void **m);
  void (*destroy)(void *m);
  const char *(*last_error)(const void *m);
  int (*load_file)(void *m, const char *path);
  int (*set_weight)(void *m, const char *name, const float *data, size_t count);
  int (*run)(void *m, const int64_t *sym, void *const *inputs, void *const *outputs);
  void (*profile)(void *m, int on);
  void (*kernel)(const void *m, int i, nnc_bench_kernel *out);
  size_t (*arena_bytes)(const void *m);
  /* elements of every input and output at the sizes sym */
  void (*elems)(const int64_t *sym, int64_t *in, int64_t *out);
  /* per input: values must be < bound[i] (0: no bound); mask[i]: a 0/1
   * padding mask whose rows are bound[i] long (never a row of zeros) */
  void (*input_rules)(const int64_t *sym, int64_t *bound, int *mask);
  /* rebuilds the model's graph for the reference evaluator */
  nnc_status (*build_graph)(nnc_graph *g, nnc_error *err);

  /* --check's largest relative error; 0: 1e-5 (f32) */
  double tolerance;
  /* A device target (NULL elsewhere): stage copies the inputs to device
   * buffers the adapter keeps, run_staged runs on them and waits, so timed
   * runs exclude host copies, and puts in *host_ns (when not NULL) the time
   * the host took to hand the run to the device, before the wait: its
   * launches' cost; peaks gives the device's measured rates. */
  int (*stage)(void *m, const int64_t *sym, void *const *inputs);
  int (*run_staged)(void *m, const int64_t *sym, uint64_t *host_ns);
  int (*peaks)(void *m, double *gflops, double *gbps);
  /* NNRT_BF16 or NNRT_F16 where the device stores the float weights in that
   * type (0 elsewhere): the reference then gets them rounded the same way, so
   * that --check measures the computation, not the rounding of the weights */
  int weight_storage;
  /* nnc --tune=measure's probe build only (NULL elsewhere): after the inputs
   * are staged and one forward has run, times every implementation of each
   * kernel that has several and prints one line each to report */
  int (*tune)(void *m, const int64_t *sym, FILE *report);
  /* CUDA targets only (NULL elsewhere): on 1 or 0 switches the replay of
   * captured CUDA graphs on or off (--cuda-graphs on|off), -1 leaves the
   * model's default; returns whether graphs are on then, or -1 when the
   * model refused (last_error says why) */
  int (*cuda_graphs)(void *m, int on);
  /* A parallel plan's model only (NULL elsewhere): what this rank's
   * collectives have moved so far (<model>_comm_stats) */
  void (*comm)(const void *m, uint64_t *bytes, double *bus_bytes, double *wait_s);
  /* A model holding quantized weights only (NULL elsewhere): writes them
   * as held to a quantized checkpoint (<model>_save_quantized) */
  int (*save_quantized)(void *m, const char *path);
} nnc_bench_model;

/* The whole harness; returns the process exit code (0 ok, 1 a check above
 * tolerance or a failure, 2 a bad command line). */
int nnc_bench_main(const nnc_bench_model *md, int argc, char **argv);

/* The machine's peak: FMA rate on all threads (GFLOP/s) and memory
 * bandwidth from a large copy (GB/s), each measured once in ~0.1 s. */
double nnc_bench_peak_gflops(int threads);
double nnc_bench_peak_gbps(void);

/* q-quantile (0..1) of n values (sorts them). */
double nnc_bench_quantile(double *v, int n, double q);
/* The weights given to model m: the file's at path, or random ones as
 * bench_<model> makes them (NULL path); for a reference (check), a
 * quantized model's as it holds them (q * scale, through its quantized
 * checkpoint); NULL after printing why. */
float **nnc_bench_weights(const nnc_bench_model *md, void *m, const char *path, int check);
/* Weight i's value w as the model holds it (rounded to bf16 or f16 storage). */
double nnc_bench_weight_value(const nnc_bench_model *md, int i, float w);

#endif
