/* compiler/emit/c_simd.c — the C SIMD emitter: checks that the schedule fits
 * the target (f32 math, sizes that fit the kernels' int arguments), names
 * everything the API shows, and writes the output folder. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_simd.h"
#include "embedded.h"
#include "emit_targets.h"
#include "validate.h"

/* Every tensor the generated code touches is f32 or i32: the C SIMD target
 * computes in f32. */
static nnc_status check_dtypes(const ec_ctx *x, nnc_error *err) {
  const nnc_graph *g = x->g;
  for (int t = 0; t < g->ntensors; t++) {
    const nnc_tensor *tt = &g->tensors[t];
    if (tt->dtype == NNC_F32 || tt->dtype == NNC_I32) continue;
    if (tt->kind == NNC_TENSOR_VALUE && (tt->producer < 0 || g->nodes[tt->producer].dead)) continue;
    const char *what = tt->kind == NNC_TENSOR_INPUT ? "input" : tt->kind == NNC_TENSOR_PARAM ? "parameter" : "value";
    return nnc_errorf(err, NNC_E_TARGET, tt->loc, "c-simd computes in f32: %s %s is %s", what, tt->name,
                      nnc_dtype_name(tt->dtype));
  }
  return NNC_OK;
}

/* The multiply-adds of an lstm_scan or gru_scan kernel's step GEMMs at the
 * maxima (every step's gates times K, H or H + F when the kernel took its
 * input's linear: tune_c_simd.c tunes it as a GEMM), or -1 for another
 * kernel. */
static double scan_work(const ec_ctx *x, const nnc_kernel *kn) {
  int64_t K;
  const nnc_node *n = nnc_kernel_scan(x->g, kn, NULL, &K);
  if (!n) return -1;
  return (double)nnc_tensor_max_elems(x->g, &x->g->tensors[n->in[0]]) * (double)K;
}

/* The kernel of a kind with the most output elements times its inner
 * dimension (the most work at the maxima), or -1; for GEMMs with scans the
 * scans' step GEMMs count too. */
static int largest_of(const ec_ctx *x, nnc_kernel_kind kind, bool scans) {
  double best = -1;
  int pick = -1;
  for (int k = 0; k < x->s->nk; k++) {
    const nnc_kernel *kn = &x->s->k[k];
    double scan = scans ? scan_work(x, kn) : -1;
    if (scan > best) {
      best = scan;
      pick = k;
    }
    if (kn->kind != kind) continue;
    int in = kind == NNC_KERNEL_GEMM ? kn->d.gemm.a : kn->d.attn.k;
    int out = kind == NNC_KERNEL_GEMM ? kn->d.gemm.out : kn->d.attn.out;
    const nnc_tensor *t = &x->g->tensors[in];
    double work = (double)nnc_tensor_max_elems(x->g, &x->g->tensors[out]) * (double)t->shape[t->rank - 1].k;
    if (work > best) {
      best = work;
      pick = k;
    }
  }
  return pick;
}

/* The template is compiled once per folder, so the tiles of the largest GEMM
 * and the largest attention serve every call of theirs; the row rule is the
 * same for every kernel. Where a scan's step GEMMs are the most work, they
 * set the register block and KC, and the largest other GEMM, which may be
 * far taller and wider, keeps its MC (in whole blocks of the scan's rows)
 * and, the wider of the two, NC. */
static void pick_tiles(ec_ctx *x) {
  size_t n = 0;
  x->tile_defs[0] = 0;
  if (!x->r->tiles || x->s->nk == 0) return;
  int g = largest_of(x, NNC_KERNEL_GEMM, true), a = largest_of(x, NNC_KERNEL_ATTENTION, false);
  if (g >= 0) {
    nnc_tile t = x->r->tiles[g];
    int other = largest_of(x, NNC_KERNEL_GEMM, false);
    if (other >= 0 && other != g) {
      const nnc_tile *o = &x->r->tiles[other];
      t.mc = o->mc / t.mr * t.mr > t.mc ? o->mc / t.mr * t.mr : t.mc;
      t.nc = o->nc > t.nc && o->nc % t.nr == 0 ? o->nc : t.nc;
    }
    n += (size_t)snprintf(x->tile_defs + n, sizeof x->tile_defs - n,
                          "-DNNC_GEMM_MR=%d -DNNC_GEMM_NR=%d -DNNC_GEMM_KC=%d -DNNC_GEMM_MC=%d -DNNC_GEMM_NC=%d ",
                          t.mr, t.nr, t.kc, t.mc, t.nc);
  }
  if (a >= 0 && n < sizeof x->tile_defs)
    n += (size_t)snprintf(x->tile_defs + n, sizeof x->tile_defs - n, "-DNNC_ATTN_BQ=%d -DNNC_ATTN_BK=%d ",
                          x->r->tiles[a].attn_bq, x->r->tiles[a].attn_bk);
  if (n < sizeof x->tile_defs)
    snprintf(x->tile_defs + n, sizeof x->tile_defs - n, "-DNNC_ROW_MIN_ELEMS=%d", x->r->tiles[0].row_min_elems);
}

/* The ISA from the target description, and the compiler flags that select it. */
static void pick_isa(ec_ctx *x) {
  const char *isa = x->r->target->isa ? x->r->target->isa : "generic";
  x->isa = isa;
  if (strcmp(x->r->target->name, "c-simd") == 0) snprintf(x->cflags, sizeof x->cflags, "-march=native");
  else if (strcmp(isa, "avx512") == 0) snprintf(x->cflags, sizeof x->cflags, "-mavx512f -mavx2 -mfma");
  else if (strcmp(isa, "avx2") == 0) snprintf(x->cflags, sizeof x->cflags, "-mavx2 -mfma");
  else if (strcmp(isa, "neon") == 0) snprintf(x->cflags, sizeof x->cflags, "-march=armv8-a");
  else snprintf(x->cflags, sizeof x->cflags, "-DNNC_ISA_GENERIC");
}

static nnc_status copy_embedded(const char *dir, bool mpi, nnc_error *err) {
  for (int i = 0; i < nnc_embedded_count; i++) {
    const nnc_embedded_file *f = &nnc_embedded_files[i];
    /* the GPU targets' kernels and runtime backends */
    if (strncmp(f->path, "cuda/", 5) == 0 || strncmp(f->path, "runtime/cuda/", 13) == 0 ||
        strncmp(f->path, "opencl/", 7) == 0 || strncmp(f->path, "nccl/", 5) == 0 ||
        (!mpi && strncmp(f->path, "mpi/", 4) == 0))
      continue;
    /* a parallel plan's MPI communicator joins the runtime */
    const char *path = strncmp(f->path, "mpi/", 4) == 0 ? f->path + 4 : f->path;
    nnc_status st = nnc_emit_write_file(dir, path, f->data, f->size, err);
    if (st) return st;
  }
  return NNC_OK;
}

nnc_status nnc_emit_c_simd(const nnc_emit_request *r, const char *dir, nnc_error *err) {
  ec_ctx x;
  nnc_status st = ec_ctx_init(&x, r, err);
  if (st) return st;
  pick_isa(&x);
  pick_tiles(&x);
  nnc_sb train;
  nnc_sb_init(&train);
  if (r->train) {
    ec_train_decls(&x, &train);
    x.api_extra = train.buf;
  } else if (cs_quantized(&x)) {
    cs_quant_decls(&x, &train);   /* <model>_save_quantized */
    x.api_extra = train.buf;
  }
  st = check_dtypes(&x, err);
  if (!st) st = ec_check_sizes(&x, err);
  if (!st) st = cs_quant_check(&x, err);
  if (!st) st = cs_plan_packed(&x, err);
  if (!st) st = ec_write_header(&x, dir, err);
  if (!st) st = cs_write_model(&x, dir, err);
  if (!st) st = ec_write_graph(&x, dir, err);
  if (!st) st = ec_write_bench(&x, dir, err);
  if (!st && r->train) st = ec_write_train_main(&x, dir, &x.train_main, err);
  if (!st) st = ec_write_gen_main(&x, dir, err);
  if (!st) st = cs_write_build(&x, dir, err);
  if (!st) st = copy_embedded(dir, x.world > 1, err);
  /* a code-generation bug stops here, with its kernel, not in the user's build */
  char src[80];
  snprintf(src, sizeof src, "%s.c", x.p);
  if (!st) st = nnc_validate_file(dir, src, NNC_LANG_C11, err);
  if (!st) st = ec_validate_c(&x, dir, true, err);
  ec_ctx_free(&x);
  nnc_sb_free(&train);
  return st;
}
