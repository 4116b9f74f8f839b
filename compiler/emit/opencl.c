/* compiler/emit/opencl.c — the OpenCL emitter: checks that the schedule fits
 * the target (storage f32, f16 or bf16, arithmetic f32), lays every weight
 * out at a fixed offset of one device buffer (narrow weights 2 bytes an
 * element), gives every tensor a kernel touches its slot, and writes
 * the output folder: <model>.h (the C API), <model>.c (host C11 over
 * runtime/opencl), <model>.cl (the program), the harness and reference
 * files shared with the other C-API targets, libnnrt with its OpenCL part,
 * a Makefile and a README. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "emit_c_train.h"
#include "emit_targets.h"
#include "opencl.h"
#include "validate.h"

bool ocl_narrow(const ec_ctx *x, int t) {
  nnc_dtype d = x->g->tensors[t].dtype;
  return d == NNC_F16 || d == NNC_BF16;
}

const char *ocl_type(const ocl_ctx *o, int t) {
  return o->x.g->tensors[t].dtype == NNC_I32 ? "int" : ocl_narrow(&o->x, t) ? "nnc_t" : "float";
}

/* Storage f32, f16 or bf16, arithmetic f32: every tensor a kernel touches
 * is f32, i32 or of the storage type, and the API's inputs and outputs are
 * f32 or i32 (--precision casts the float ones where they enter and leave). */
static nnc_status check_types(const ec_ctx *x, nnc_error *err) {
  const nnc_graph *g = x->g;
  const char *tn = x->r->target->name;
  nnc_dtype store = x->r->precision.storage;
  if (x->r->precision.tf32)
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "%s: --precision=tf32: expected f32, f16 or bf16 (OpenCL C has no "
                      "tf32 tensor-core products; the target computes in f32 and stores f32, f16 or bf16)", tn);
  if (store != NNC_F32 && store != NNC_F16 && store != NNC_BF16)
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC, "%s: --precision=%s: expected f32, f16 or bf16", tn,
                      x->r->precision.name);
  for (int i = 0; i < g->ninputs + g->noutputs; i++) {
    int t = i < g->ninputs ? g->inputs[i] : g->outputs[i - g->ninputs].tensor;
    nnc_dtype d = g->tensors[t].dtype;
    if (d == NNC_F32 || d == NNC_I32) continue;
    return nnc_errorf(err, NNC_E_TARGET, g->tensors[t].loc,
                      "%s: %s %s is %s, expected f32 or i32 at the API (use --precision=%s for narrow storage inside)", tn,
                      i < g->ninputs ? "input" : "output", g->tensors[t].name, nnc_dtype_name(d), nnc_dtype_name(d));
  }
  for (int t = 0; t < g->ntensors; t++) {
    const nnc_tensor *tt = &g->tensors[t];
    if (x->s->plan.buf[t].storage == NNC_STORE_NONE || tt->dtype == NNC_F32 || tt->dtype == NNC_I32 || tt->dtype == store)
      continue;
    if (store == NNC_F32)
      return nnc_errorf(err, NNC_E_TARGET, tt->loc, "%s: %s is %s, expected f32 or i32 (--precision=f32)", tn, tt->name,
                        nnc_dtype_name(tt->dtype));
    return nnc_errorf(err, NNC_E_TARGET, tt->loc, "%s: %s is %s, expected f32, i32 or %s (--precision=%s)", tn, tt->name,
                      nnc_dtype_name(tt->dtype), nnc_dtype_name(store), x->r->precision.name);
  }
  return NNC_OK;
}

static int root_of(const ec_ctx *x, int t) {
  for (int i = 0; i < x->g->ntensors; i++) {
    const nnc_buffer *b = &x->s->plan.buf[t];
    if (b->storage != NNC_STORE_ALIAS || b->alias_of < 0 || b->alias_of == t) return t;
    t = b->alias_of;
  }
  return t;
}

/* A slot for each root tensor that a kernel reads or writes. */
static nnc_status make_slots(ocl_ctx *o, nnc_error *err) {
  const ec_ctx *x = &o->x;
  int nt = x->g->ntensors ? x->g->ntensors : 1;
  o->slot_of = malloc((size_t)nt * sizeof *o->slot_of);
  o->slot_root = malloc((size_t)nt * sizeof *o->slot_root);
  int *root_slot = malloc((size_t)nt * sizeof *root_slot);
  if (!o->slot_of || !o->slot_root || !root_slot) {
    free(root_slot);
    return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while emitting");
  }
  for (int t = 0; t < nt; t++) o->slot_of[t] = root_slot[t] = -1;
  for (int t = 0; t < x->g->ntensors; t++) {
    if (x->s->plan.buf[t].storage == NNC_STORE_NONE) continue;
    int r = root_of(x, t);
    if (root_slot[r] < 0) {
      root_slot[r] = o->nslots;
      o->slot_root[o->nslots++] = r;
    }
    o->slot_of[t] = root_slot[r];
  }
  free(root_slot);
  return NNC_OK;
}

static bool starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* libnnrt (runtime/), its OpenCL part (embedded as opencl/runtime/),
 * weights loading, the harness and the reference. */
static nnc_status copy_embedded(const char *dir, nnc_error *err) {
  for (int i = 0; i < nnc_embedded_count; i++) {
    const nnc_embedded_file *f = &nnc_embedded_files[i];
    const char *path = f->path;
    char out[512];
    if (starts(path, "opencl/runtime/")) {
      snprintf(out, sizeof out, "runtime/opencl/%s", path + strlen("opencl/runtime/"));
      path = out;
    } else if (!starts(path, "runtime/") && !starts(path, "check/") && !starts(path, "support/nnc_weights") &&
               !starts(path, "support/nnc_bench") && !starts(path, "support/nnc_generate")) {
      continue;
    } else if (starts(path, "runtime/cuda/")) {
      continue;
    }
    nnc_status st = nnc_emit_write_file(dir, path, f->data, f->size, err);
    if (st) return st;
  }
  return NNC_OK;
}

static const char api_options[] =
  "  int threads;          /* unused: the device runs the work-items */\n"
  "  const char *device;   /* OpenCL device: \"P:D\" or part of its name; NULL: $NNC_OPENCL_DEVICE, else the first GPU, else the first device */\n";

nnc_status nnc_emit_opencl(const nnc_emit_request *r, const char *dir, nnc_error *err) {
  ocl_ctx *o = calloc(1, sizeof *o);
  if (!o) return nnc_errorf(err, NNC_E_NOMEM, NNC_NOLOC, "out of memory while emitting");
  nnc_status st = ec_ctx_init(&o->x, r, err);
  if (st) {
    free(o);
    return st;
  }
  nnc_sb_init(&o->cl);
  nnc_sb_init(&o->host);
  o->x.isa = r->target->isa;
  o->x.api_options = api_options;
  char extra[4096];
  const char *p = o->x.p;
  snprintf(extra, sizeof extra,
    "/* Runs the model on OpenCL buffers, with no copy to or from the host: in[i] and\n"
    " * out[i] are cl_mem buffers (passed as void *) of the model's context\n"
    " * (%s_cl_context), in the order of the fields of %s_inputs and %s_outputs,\n"
    " * each at least as large as that field at the sizes d. Does not wait for the\n"
    " * device: the outputs are ready once %s_sync returns. %s_run does the same on\n"
    " * host buffers and waits. */\n"
    "int %s_run_device(%s_model *m, const %s_dims *d, void *const *in, void *const *out);\n\n"
    "/* Waits for the model's queue; reports a failure of the device during the runs. */\n"
    "int %s_sync(%s_model *m);\n\n"
    "/* The model's cl_context and cl_command_queue (as void *), for making the\n"
    " * buffers of %s_run_device and ordering work around its runs. */\n"
    "void *%s_cl_context(const %s_model *m);\n"
    "void *%s_cl_queue(const %s_model *m);\n\n"
    "/* The options %s_create built the program with: the tiles and work-group sizes\n"
    " * it picked for the device (-DT<list>_VW=...; see README.md). \"\" before a create\n"
    " * succeeded. */\n"
    "const char *%s_build_options(const %s_model *m);\n\n"
    "/* The device's rates that the benchmark's roofline divides by: the bandwidth of a\n"
    " * device-to-device copy of a buffer larger than its caches (GB/s, bytes read plus\n"
    " * written; the median of a few runs) and the fma rate of a small dedicated kernel\n"
    " * (GFLOP/s; the best of a few), timed with profiling events. Takes about a second. */\n"
    "int %s_device_peaks(%s_model *m, double *gflops, double *gbps);\n\n",
    p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p);
  o->x.api_extra = extra;
  o->x.loop_load = ocl_loop_load;
  o->x.loop_store = ocl_loop_store;
  o->x.loop_copy = ocl_loop_copy;
  st = check_types(&o->x, err);
  if (!st) st = ec_layout_weights(&o->x, err);
  if (!st) st = make_slots(o, err);
  if (!st) st = ec_check_sizes(&o->x, err);
  if (!st) st = ec_write_header(&o->x, dir, err);
  if (!st) st = ocl_write_model(o, dir, err);
  if (!st) st = ec_write_graph(&o->x, dir, err);
  if (!st) st = ec_write_bench(&o->x, dir, err);
  if (!st) st = ec_write_gen_main(&o->x, dir, err);
  if (!st) st = ec_write_manifest(&o->x, dir, err);
  if (!st) st = ocl_write_build(o, dir, err);
  if (!st) st = copy_embedded(dir, err);
  /* a code-generation bug stops here, with its kernel, not in the user's build */
  char src[80];
  snprintf(src, sizeof src, "%s.cl", o->x.p);
  if (!st) st = nnc_validate_file(dir, src, NNC_LANG_OPENCL12, err);
  /* the host side: the API over the OpenCL runtime, the graph, the harness */
  snprintf(src, sizeof src, "%s.c", o->x.p);
  if (!st) st = nnc_validate_file(dir, src, NNC_LANG_C11, err);
  if (!st) st = ec_validate_c(&o->x, dir, true, err);
  nnc_sb_free(&o->cl);
  nnc_sb_free(&o->host);
  free(o->slot_of);
  free(o->slot_root);
  free(o->tl);
  free(o->tl_of);
  free(o->stats_of);
  free(o->gc);
  ec_ctx_free(&o->x);
  free(o);
  return st;
}
