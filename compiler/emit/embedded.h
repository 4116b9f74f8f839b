/* compiler/emit/embedded.h — the source files nnc copies into an output
 * folder (kernels, runtime, the reference evaluator for --check, support
 * code), embedded at build time by embed_gen.py so that nnc needs no source
 * tree when it runs. */
#ifndef NNC_EMBEDDED_H
#define NNC_EMBEDDED_H

#include <stddef.h>

typedef struct nnc_embedded_file {
  const char *path;   /* in the output folder: "kernels/gemm.c", "runtime/nnrt.h", ... */
  const char *data;   /* the bytes, NUL-terminated */
  size_t size;        /* without the NUL */
} nnc_embedded_file;

extern const nnc_embedded_file nnc_embedded_files[];
extern const int nnc_embedded_count;

#endif
