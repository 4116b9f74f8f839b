/* compiler/emit/opencl_loops.c — the loop kernels of device_loops.c as
 * OpenCL: each a __kernel of the model's program taking every tensor as a
 * parameter of its own (its slot), then the run's dims as longs; its host
 * launcher sets those arguments and runs it over its elements. A narrow
 * tensor (f16, bf16) is a pointer to common.cl's nnc_t, whose elements only
 * NNC_LOAD, NNC_STORE and NNC_COPY reach (a half cannot be read directly
 * without cl_khr_fp16); f32 and i32 ones are read and written plainly. */
#include <stdio.h>
#include <string.h>

#include "opencl.h"

void ocl_loop_load(const ec_ctx *x, int t, const char *name, const char *idx, char *buf, size_t n) {
  if (ocl_narrow(x, t)) snprintf(buf, n, "NNC_LOAD(%s, %s)", name, idx);
  else snprintf(buf, n, "nnc_ld(%s[%s])", name, idx);
}

void ocl_loop_store(const ec_ctx *x, int t, const char *name, const char *idx, const char *v, char *buf, size_t n) {
  if (ocl_narrow(x, t)) snprintf(buf, n, "NNC_STORE(%s, %s, %s)", name, idx, v);
  else snprintf(buf, n, "nnc_st(&%s[%s], %s)", name, idx, v);
}

void ocl_loop_copy(const ec_ctx *x, int t, const char *name, const char *idx, const char *src, const char *sidx,
                   char *buf, size_t n) {
  if (ocl_narrow(x, t)) snprintf(buf, n, "NNC_COPY(%s, %s, %s, %s)", name, idx, src, sidx);
  else snprintf(buf, n, "%s[%s] = %s[%s]", name, idx, src, sidx);
}

/* The arguments of one kernel: its tensors' parameters and slots. */
typedef struct kparams {
  nnc_sb head;
  int slot[2 * NNC_MAX_IO + 4];
  int n;
} kparams;

typedef struct ocl_loops {
  ocl_ctx *o;
  kparams kp;   /* of the kernel being written */
} ocl_loops;

static void pointer(void *self, nnc_sb *body, const char *cnst, const char *name, int t) {
  ocl_loops *l = self;
  const ocl_ctx *o = l->o;
  kparams *kp = &l->kp;
  char note[600];
  (void)body;   /* OpenCL kernels take their tensors as parameters */
  nnc_sb_printf(&kp->head, ",\n    __global %s%s *%s /* %s */", cnst, ocl_type(o, t), name,
                ec_note(&o->x, t, note, sizeof note));
  if (kp->n < (int)(sizeof kp->slot / sizeof kp->slot[0])) kp->slot[kp->n++] = o->slot_of[t];
}

/* `__kernel void k<ki>(tensors, dims)` with body into the program, and its
 * launcher over n work-items (a C expression of d->, 0: one item) into the
 * host code; frees body and kp. */
static void finish(void *self, int ki, const char *n, nnc_sb *body) {
  ocl_loops *l = self;
  ocl_ctx *o = l->o;
  kparams *kp = &l->kp;
  const ec_ctx *x = &o->x;
  const nnc_graph *g = x->g;
  int idx = ocl_kernel(o, "k%d", ki);
  nnc_sb head, pre;
  nnc_sb_init(&head);
  nnc_sb_init(&pre);
  nnc_sb_printf(&head, "__kernel void k%d(%s", ki, kp->head.buf ? kp->head.buf + 6 : "");
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(&head, ",\n    long d_%s", x->sym[i]);
  nnc_sb_printf(&head, ")");
  nnc_sb_printf(&pre, "  const %s_dims dd = {", x->p);
  for (int i = 0; i < g->nsyms; i++) nnc_sb_printf(&pre, "%sd_%s", i ? ", " : "", x->sym[i]);
  nnc_sb_printf(&pre, "%s};\n  (void)dd;\n", g->nsyms ? "" : "0");
  if (head.oom || pre.oom) o->cl.oom = true;
  ec_emit_function(x, &o->cl, head.buf ? head.buf : "", pre.buf, "&dd", body);
  nnc_sb_free(&head);
  nnc_sb_free(&pre);
  nnc_sb *h = &o->host;
  nnc_sb_printf(h, "static int k%d(%s_model *m, const %s_dims *d) {\n  cl_kernel kn = m->kern[%d];\n"
                   "  cl_int e = 0;\n  cl_uint a = 0;\n", ki, x->p, x->p, idx);
  for (int i = 0; i < kp->n; i++) nnc_sb_printf(h, "  ARG_MEM(%d);\n", kp->slot[i]);
  nnc_sb_printf(h, "  ARG_DIMS();\n  if (e) return arg_failed(m, %d, e);\n", ki);
  nnc_sb_printf(h, "  return launch_n(m, %d, kn, (long long)(%s), picked(m, %d)[LOOP_WG]);   /* list %d: the group */\n}\n\n",
                ki, n, o->tl_of[ki], o->tl_of[ki]);
  nnc_sb_free(&kp->head);
}

nnc_status ocl_emit_loop_kernel(ocl_ctx *o, int ki, nnc_error *err) {
  ocl_loops l = {.o = o};
  const ec_loop_target lt = {&o->x, &l, pointer, finish, NULL, NULL, NULL, false, false, NULL};
  nnc_status st = ec_emit_device_loop(&lt, ki, err);
  nnc_sb_free(&l.kp.head);
  return st;
}
