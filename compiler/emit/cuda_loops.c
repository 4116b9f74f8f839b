/* compiler/emit/cuda_loops.c — the loop kernels of device_loops.c as CUDA:
 * each is a __global__ function taking the run's buffers by value (run_args:
 * its tensors are pointers into them), launched over its elements by k<i>
 * with the grid of kernels/loops.cuh. */
#include <stdio.h>

#include "cuda.h"

typedef struct cuda_loops {
  const ec_ctx *x;
  nnc_sb *out;
} cuda_loops;

/* `const T *name = <where t lives in c>;` at the top of the kernel. */
static void pointer(void *self, nnc_sb *b, const char *cnst, const char *name, int t) {
  const ec_ctx *x = ((const cuda_loops *)self)->x;
  char lhs[128];
  snprintf(lhs, sizeof lhs, "%s%s *%s", cnst, cu_stype(x, t), name);
  ec_assign(x, b, 2, lhs, t);
}

/* Each loop kernel is launched early (kernels/pdl.cuh): its blocks may be
 * placed while the kernel before it ends, and wait for it first. */
static const char WAIT[] = "  nnc_pdl::wait();   /* launched early: the kernel before it may still run (kernels/pdl.cuh) */\n"
                           "  nnc_pdl::let_next_start();\n";

/* The __global__ k<ki>_kernel with body, then k<ki>, which launches it over
 * n elements on stream s; frees body. */
static void finish(void *self, int ki, const char *n, nnc_sb *body) {
  const cuda_loops *l = self;
  const ec_ctx *x = l->x;
  nnc_sb *b = l->out;
  char head[160];
  snprintf(head, sizeof head, "__global__ void k%d_kernel(const run_args c)", ki);
  ec_emit_function(x, b, head, WAIT, "&c.d", body);
  nnc_sb call;
  nnc_sb_init(&call);
  nnc_sb_printf(&call, "  const int n = %s;\n  if (n == 0) return 0;\n"
                       "  nnc_pdl::launch(k%d_kernel, nnc_loop_blocks(n), NNC_LOOP_THREADS, 0, s, c);\n"
                       "  return launched(m, %d);\n", n, ki, ki);
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &call);
}

/* As finish, launched as `blocks` blocks of `threads` threads. */
static void finish_grid(void *self, int ki, const char *blocks, const char *threads, nnc_sb *body) {
  const cuda_loops *l = self;
  const ec_ctx *x = l->x;
  nnc_sb *b = l->out;
  char head[160];
  snprintf(head, sizeof head, "__global__ void __launch_bounds__(%s) k%d_kernel(const run_args c)", threads, ki);
  ec_emit_function(x, b, head, WAIT, "&c.d", body);
  nnc_sb call;
  nnc_sb_init(&call);
  nnc_sb_printf(&call, "  const int blocks = %s;\n  if (blocks == 0) return 0;\n"
                       "  nnc_pdl::launch(k%d_kernel, blocks, %s, 0, s, c);\n"
                       "  return launched(m, %d);\n", blocks, ki, threads, ki);
  snprintf(head, sizeof head, "static int k%d(%s_model *m, const run_args &c, cudaStream_t s)", ki, x->p);
  ec_emit_function(x, b, head, NULL, "&c.d", &call);
}

nnc_status cu_emit_loop_kernel(const ec_ctx *x, int ki, nnc_sb *b, nnc_error *err) {
  cuda_loops l = {x, b};
  const ec_loop_target lt = {x, &l, pointer, finish, "uint4", "make_uint4", x->g->ranks > 1 ? "c.rank" : NULL, true, true,
                             finish_grid};
  return ec_emit_device_loop(&lt, ki, err);
}
