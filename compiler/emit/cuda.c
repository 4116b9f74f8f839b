/* compiler/emit/cuda.c — the CUDA emitter: checks that the schedule fits the
 * target, lays every weight out at a fixed offset of one device block, and
 * writes the output folder: <model>.h (the C API, with device buffers and
 * streams), <model>.cu, the harness and reference files shared with the C
 * SIMD target, the kernels from templates/cuda, libnnrt with its CUDA
 * backend, a Makefile for nvcc and a README. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "embedded.h"
#include "emit_targets.h"

const char *cu_stype(const ec_ctx *x, int t) { return ec_ctype(x->g, t); }

/* Inputs and outputs keep the dtypes the model declares, f32 or i32, but
 * for outputs left in the storage dtype by --outputs=storage (uint16_t at the
 * API); other f16 and bf16 ones would need API types this version does not
 * write. */
static nnc_status check_io(const ec_ctx *x, nnc_error *err) {
  const nnc_graph *g = x->g;
  for (int i = 0; i < g->ninputs + g->noutputs; i++) {
    int t = i < g->ninputs ? g->inputs[i] : g->outputs[i - g->ninputs].tensor;
    nnc_dtype d = g->tensors[t].dtype;
    if (d == NNC_F32 || d == NNC_I32) continue;
    if (i >= g->ninputs && x->r->precision.storage_outputs && d == x->r->precision.storage) continue;
    return nnc_errorf(err, NNC_E_TARGET, g->tensors[t].loc,
                      "%s: %s %s is %s, expected f32 or i32 at the API (use --precision=%s for narrow storage inside)",
                      x->r->target->name, i < g->ninputs ? "input" : "output", g->tensors[t].name,
                      nnc_dtype_name(d), nnc_dtype_name(d));
  }
  return NNC_OK;
}

static bool starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* The kernels (templates/cuda, embedded under cuda/kernels/), libnnrt with
 * its CUDA backend, weights loading, the harness and the reference. */
static nnc_status copy_embedded(const char *dir, bool nccl, nnc_error *err) {
  for (int i = 0; i < nnc_embedded_count; i++) {
    const nnc_embedded_file *f = &nnc_embedded_files[i];
    const char *path = f->path;
    if (starts(path, "kernels/") || starts(path, "support/nnc_glue") || starts(path, "opencl/") || starts(path, "mpi/") ||
        (!nccl && starts(path, "nccl/")))
      continue;
    /* a parallel plan's NCCL communicator joins the CUDA runtime */
    if (starts(path, "cuda/")) path += 5;
    else if (starts(path, "nccl/")) path += 5;
    nnc_status st = nnc_emit_write_file(dir, path, f->data, f->size, err);
    if (st) return st;
  }
  return NNC_OK;
}

const char *cu_graphs_why(const nnc_emit_request *r) {
  return r->cuda_graphs                ? "nnc's default; --cuda-graphs=off compiles 0"
         : r->s->g->nstates > 0       ? "a --generate decoder: new dims every decode step; --cuda-graphs=on "
                                        "compiles 1"
                                      : "nnc was given --cuda-graphs=off";
}

/* The fields of <model>_options; cuda_graphs's default is nnc's. */
static void api_options(const nnc_emit_request *r, char *buf, size_t n) {
  snprintf(buf, n,
    "  int device;    /* CUDA device index; -1: $NNC_CUDA_DEVICE, else device 0 */\n"
    "  int cuda_graphs;   /* 1: each run replays a CUDA graph of the model, captured on the\n"
    "                        first run with the same dims and input/output buffers (one\n"
    "                        launch instead of one per kernel); runs while profiling go\n"
    "                        kernel by kernel. Default %d (%s) */\n",
    r->cuda_graphs ? 1 : 0, cu_graphs_why(r));
}

nnc_status nnc_emit_cuda(const nnc_emit_request *r, const char *dir, nnc_error *err) {
  ec_ctx x;
  nnc_status st = ec_ctx_init(&x, r, err);
  if (st) return st;
  x.device = true;
  x.isa = r->target->isa;
  /* 16-bit storage rounds far above nnc_gelu_erf16's error (2.1e-7); f32 keeps erff */
  if (r->precision.storage != NNC_F32) x.gelu_erf = "nnc_gelu_erf16";
  x.grads_summed_in_pass = cu_grad_buckets_on(&x);
  char options[1024];
  api_options(r, options, sizeof options);
  x.api_options = options;
  char extra[6144];
  snprintf(extra, sizeof extra,
    "/* Runs the model on device buffers (cudaMalloc'ed, the element types of\n"
    " * %s_inputs and %s_outputs) on stream, a cudaStream_t (NULL: the model's\n"
    " * own stream), without waiting for the GPU: the outputs are ready once\n"
    " * %s_sync returns or the stream has passed this point. %s_run does the\n"
    " * same on host buffers and waits. */\n"
    "int %s_run_device(%s_model *m, const %s_dims *d, const %s_inputs *in, %s_outputs *out, void *stream);\n\n"
    "/* Waits for the model's stream; reports a failure of the GPU during the runs. */\n"
    "int %s_sync(%s_model *m);\n\n"
    "/* Measures the GPU once (for the benchmark's roofline): a large device\n"
    " * copy's bandwidth in GB/s (bytes read + written) and a large GEMM's\n"
    " * GFLOP/s at the model's precision. */\n"
    "int %s_device_peaks(%s_model *m, double *gflops, double *gbps);\n\n"
    "/* Switches CUDA graphs (options.cuda_graphs) on (on != 0) or off for the\n"
    " * next runs. A graph is captured the first time a set of dims and\n"
    " * input/output device pointers runs (a few ms), then replayed; the model\n"
    " * keeps the last %d. Switching off keeps them for when graphs are back on;\n"
    " * %s_destroy frees them. When the caller's stream is itself being\n"
    " * captured, the kernels go into the caller's graph as they are. */\n"
    "int %s_cuda_graphs(%s_model *m, int on);\n\n",
    x.p, x.p, x.p, x.p, x.p, x.p, x.p, x.p, x.p, x.p, x.p, x.p, x.p, CU_GRAPH_CACHE, x.p, x.p, x.p);
  nnc_sb api;
  nnc_sb_init(&api);
  nnc_sb_puts(&api, extra);
  if (r->train) ec_train_decls(&x, &api);
  if (ec_saves_quantized(&x)) cu_qweight_decls(&x, &api);   /* <model>_save_quantized */
  x.api_extra = api.buf;
  st = ec_layout_weights(&x, err);
  if (!st) st = check_io(&x, err);
  if (!st) st = ec_check_sizes(&x, err);
  if (!st) st = ec_write_header(&x, dir, err);
  if (!st) st = cu_write_model(&x, dir, err);
  if (!st) st = ec_write_graph(&x, dir, err);
  if (!st) st = ec_write_bench(&x, dir, err);
  if (!st) st = ec_write_manifest(&x, dir, err);
  if (!st && r->train) st = ec_write_train_main(&x, dir, &x.train_main, err);
  if (!st) st = ec_write_gen_main(&x, dir, err);
  if (!st) st = cu_write_build(&x, dir, err);
  if (!st) st = copy_embedded(dir, x.world > 1, err);
  /* the C files (the harness includes the CUDA runtime's header: nvcc's part) */
  if (!st) st = ec_validate_c(&x, dir, false, err);
  ec_ctx_free(&x);
  nnc_sb_free(&api);
  return st;
}
