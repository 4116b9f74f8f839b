/* compiler/emit/validate.h — libclang's parse of the sources nnc emits.
 *
 * A code-generation bug should be reported by nnc, with the kernel and its
 * Lua line, not by the user's C compiler or OpenCL driver at run time. With
 * the LLVM/Clang feature (meson -Dclang=enabled or auto with libclang-14-dev
 * installed: NNC_HAVE_CLANG 1) the emitters parse what they wrote with
 * libclang before the output folder is renamed into place: the OpenCL
 * emitter its <model>.cl (OpenCL C 1.2, with clang's opencl-c.h for the
 * builtins) and the C SIMD emitter its <model>.c (C11). A diagnostic of
 * severity error or fatal fails the compile with NNC_E_INTERNAL.
 *
 * Built without libclang (NNC_HAVE_CLANG 0) every function here returns
 * NNC_OK and checks nothing; nnc_validate_available() says which build this
 * is. */
#ifndef NNC_VALIDATE_H
#define NNC_VALIDATE_H

#include <stdbool.h>

#include "../ir/status.h"

typedef enum nnc_source_lang {
  NNC_LANG_C11,      /* -x c -std=c11 */
  NNC_LANG_OPENCL12  /* -x cl -cl-std=CL1.2, opencl-c.h included by default */
} nnc_source_lang;

/* Whether this nnc was built with libclang, so the functions below check. */
bool nnc_validate_available(void);

/* Parses text as the file `name` (a path; `#include "..."` looks in its
 * folder first, then in the ninc include_dirs, as -I). On a diagnostic of
 * severity error or fatal returns NNC_E_INTERNAL with
 *   generated NAME:LINE:COL: <clang's message>
 * (NAME relative to name's folder), followed, when the line is inside a
 * kernel, by the comment line that the emitters write before each kernel
 * and each launch (`gpt2.lua:24  h.0.mlp.c_fc: layernorm + linear + gelu
 * (kernel 6, gemm)` between comment marks), and by the count of further
 * errors. A line is inside kernel N when the nearest such comment above it
 * names N and every function defined between the two is kN or kN_<name>. */
nnc_status nnc_validate_source(const char *name, const char *text, nnc_source_lang lang,
                               const char *const *include_dirs, int ninc, nnc_error *err);

/* Reads dir/rel and parses it as nnc_validate_source does, with dir and
 * dir/runtime as the include folders (the output folder's build files
 * compile with -I. -Iruntime). */
nnc_status nnc_validate_file(const char *dir, const char *rel, nnc_source_lang lang, nnc_error *err);

#endif
