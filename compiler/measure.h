/* compiler/measure.h — `nnc --tune=measure`: every kernel that has several
 * implementations on the target (a CUDA GEMM: cuBLASLt with or without
 * padded rows, with its heuristic's first to fourth algorithm, nnc's own
 * tensor-core GEMM at each tile configuration) is
 * timed on this machine's GPU, and the fastest one is written.
 *
 * The times come from a probe: the model itself, emitted with every
 * implementation of those kernels (nnc_emit_request.probe), built with its
 * own Makefile, and run as `bench_<model> --tune` at the largest sizes on
 * random weights and inputs. They are appended to a tuning file, one line a
 * time, tab-separated:
 *
 *   GPU NAME  nnc VERSION  KERNEL KEY  IMPLEMENTATION  MICROSECONDS
 *
 * (the key holds what the time depends on: sizes at the maxima, dtypes,
 * fusions), and a later compile for the same GPU and nnc version reuses
 * them without building a probe. NNC_GPU_NAME names the GPU instead of
 * asking nvidia-smi, to compile on a machine without it from a tuning file
 * measured on one.
 *
 * MICROSECONDS is "unavailable" for an implementation the probe found the
 * runtime cannot run for that kernel (its error said "unsupported:", e.g.
 * cuBLASLt's heuristic returned fewer results than the one asked for): it
 * is never chosen, and not measured again. Another failure is not written,
 * so the next compile measures it again. */
#ifndef NNC_MEASURE_H
#define NNC_MEASURE_H

#include <stdio.h>

#include "emit/emit.h"

/* One measured time. */
typedef struct nnc_tuning_entry {
  char gpu[128], version[32], key[256], impl[24];
  double us;       /* INFINITY: "unavailable" */
} nnc_tuning_entry;

/* The entries of a tuning file. */
typedef struct nnc_tuning {
  nnc_tuning_entry *e;
  int n, cap;
  int malformed;   /* lines that were not five fields with a time: skipped */
} nnc_tuning;

/* Reads path into t (a missing file is an empty table). */
nnc_status nnc_tuning_read(const char *path, nnc_tuning *t, nnc_error *err);
/* The time of impl for key on gpu with this nnc version; < 0 when unknown,
 * INFINITY when unavailable. */
double nnc_tuning_find(const nnc_tuning *t, const char *gpu, const char *key, const char *impl);
/* Appends e to t and, when path is not NULL, to the file (made with its folder). */
nnc_status nnc_tuning_add(nnc_tuning *t, const nnc_tuning_entry *e, const char *path, nnc_error *err);
void nnc_tuning_free(nnc_tuning *t);

/* The default tuning file: $XDG_CACHE_HOME/nnc/tuning.tsv, else
 * $HOME/.cache/nnc/tuning.tsv. */
nnc_status nnc_tuning_default_path(char *buf, size_t n, nnc_error *err);

/* Chooses an implementation for every kernel of r that has several: sets
 * tiles[k].impl and writes the times into tiles[k].reason. Measures what the
 * tuning file (tune_file, NULL: the default) does not hold, drawing a
 * progress bar on progress. */
nnc_status nnc_measure(const nnc_emit_request *r, nnc_tile *tiles, const char *tune_file, FILE *progress,
                       nnc_error *err);

#endif
