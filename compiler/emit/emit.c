/* compiler/emit/emit.c — picks the emitter of the target's family and makes
 * the output folder appear whole or not at all.
 *
 * The emitter writes into a fresh folder beside the destination, which is
 * renamed into place only when every file was written. An existing
 * destination is replaced only when nnc wrote it (it holds the marker file),
 * so a mistyped -o never deletes a user's folder. */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emit.h"
#include "emit_targets.h"
#include "emit_util.h"

#define MARKER ".nnc-output"

static const nnc_emitter emitters[] = {
  /* C SIMD's LSTM scan computes x_t W_ih^T in each step's GEMM (c_simd_scan.c): a thread's rows of
   * [h | x_t] stay in its caches, and the xw of every step is never written and read back. Its
   * convolutions and pools read their f32 windows from the image (gemm_windows.c, c_simd_pool.c), and a
   * max pool after a convolution is pooled by its GEMM from the workspace (gemm.c pool_task) */
  {NNC_FAMILY_C_SIMD, nnc_emit_c_simd, NULL, true, true, true, false, false, true, true, true,
   nnc_c_simd_gemm_windows, true, false, false, true, NULL, false, false, true, true, true, 1u << NNC_F32, 1, true},
  /* CUDA's attention appends the kv cache's new rows itself (attention_append.cuh) and turns q's and
   * those rows by their rope (attention_rope.cuh): a decode step's appends and ropes are no kernels of
   * their own, which cost a launch each on a GPU */
  {NNC_FAMILY_CUDA, nnc_emit_cuda, nnc_cuda_variants, true, true, true, true, true, true, true, true,
   nnc_cuda_gemm_windows, true, true, true, true, nnc_cuda_gemm_post_norm, true, true, true, true, false,
   1u << NNC_BF16 | 1u << NNC_F16, 8, false},
  {NNC_FAMILY_OPENCL, nnc_emit_opencl, NULL, false, false, false, false, false, false, true, false, NULL, false, false,
   false, false, NULL, true, false, false, false, false, 0, 8, false},
};

static const nnc_emitter *emitter_of(nnc_target_family f) {
  for (size_t i = 0; i < sizeof emitters / sizeof emitters[0]; i++)
    if (emitters[i].family == f) return &emitters[i];
  return NULL;
}

bool nnc_emit_has_grad_op(nnc_target_family f, nnc_op op) {
  const nnc_emitter *e = emitter_of(f);
  if (!e) return false;
  return op == NNC_OP_ATTENTION_GRAD ? e->attention_grad : (op == NNC_OP_LAYERNORM_GRAD || op == NNC_OP_RMSNORM_GRAD) && e->norm_grad;
}

bool nnc_emit_has_gemm_aux(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->gemm_aux;
}

bool nnc_emit_has_gemm_bgrad(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->gemm_bgrad;
}

bool nnc_emit_has_gemm_act_last(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->gemm_act_last;
}

bool nnc_emit_has_hoist_weights(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->hoist_weights;
}

bool nnc_emit_has_collectives(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->collectives;
}

int nnc_emit_gemm_post_norm(const nnc_target_desc *t) {
  const nnc_emitter *e = emitter_of(t->family);
  return e && e->gemm_post_norm ? e->gemm_post_norm(t) : 0;
}

int nnc_emit_gemm_windows(const nnc_target_desc *t) {
  const nnc_emitter *e = emitter_of(t->family);
  return e && e->gemm_windows ? e->gemm_windows(t) : 0;
}

bool nnc_emit_has_gemm_pool(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->gemm_pool;
}

int nnc_emit_channel_run(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->channel_run > 0 ? e->channel_run : 8;
}

unsigned nnc_emit_gemm_windows_types(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e ? e->gemm_windows_types : 0;
}

bool nnc_emit_has_reduce_windows(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->reduce_windows;
}

bool nnc_emit_has_attention_append(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->attention_append;
}

bool nnc_emit_has_gather_loops(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->gather_loops;
}

bool nnc_emit_has_row_loops(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->row_loops;
}

bool nnc_emit_has_scan_input(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->scan_input;
}

bool nnc_emit_has_attention_rope(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->attention_rope;
}

bool nnc_emit_has_w8a8(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->w8a8;
}

bool nnc_emit_has_int8w(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->int8w;
}

bool nnc_emit_has_int4w(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->int4w;
}

bool nnc_emit_has_f32_weights(nnc_target_family f) {
  const nnc_emitter *e = emitter_of(f);
  return e && e->f32_weights;
}

nnc_status nnc_emit_variants(const nnc_emit_request *r, nnc_kernel_variants *out, nnc_error *err) {
  memset(out, 0, (size_t)r->s->nk * sizeof *out);
  const nnc_emitter *e = emitter_of(r->target->family);
  return e && e->variants ? e->variants(r, out, err) : NNC_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(path);
}

/* Removes a folder we created, with everything in it. */
static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

nnc_status nnc_emit(const nnc_emit_request *r, nnc_error *err) {
  if (!r || !r->s || !r->target || !r->out_dir || !r->out_dir[0] || !r->s->plan.buf)
    return nnc_errorf(err, NNC_E_INTERNAL, NNC_NOLOC,
                      "emit: expected a planned schedule, a target and an output folder");
  const nnc_emitter *e = emitter_of(r->target->family);
  if (!e)
    return nnc_errorf(err, NNC_E_TARGET, NNC_NOLOC,
                      "target %s: code generation for this family is not in this version of nnc",
                      r->target->name);
  char tmp[4096], old[4096], marker[4200];
  long pid = (long)getpid();
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", r->out_dir, pid) >= (int)sizeof tmp ||
      snprintf(old, sizeof old, "%s.old.%ld", r->out_dir, pid) >= (int)sizeof old)
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: path too long", r->out_dir);
  snprintf(marker, sizeof marker, "%s/" MARKER, r->out_dir);
  bool replace = false;
  if (access(r->out_dir, F_OK) == 0) {
    if (!is_dir(r->out_dir) || access(marker, F_OK) != 0)
      return nnc_errorf(err, NNC_E_IO, NNC_NOLOC,
                        "-o %s: exists and was not written by nnc (no %s in it); remove it or choose another folder",
                        r->out_dir, MARKER);
    replace = true;
  }
  if (mkdir(tmp, 0777) != 0)
    return nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: cannot create %s: %s", r->out_dir, tmp, strerror(errno));
  static const char note[] = "This folder was written by nnc; nnc replaces it when compiling again.\n";
  nnc_status st = nnc_emit_write_file(tmp, MARKER, note, sizeof note - 1, err);
  if (!st) st = e->emit(r, tmp, err);
  if (!st && replace && rename(r->out_dir, old) != 0)
    st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: cannot move the old output aside: %s", r->out_dir,
                    strerror(errno));
  if (!st && rename(tmp, r->out_dir) != 0) {
    st = nnc_errorf(err, NNC_E_IO, NNC_NOLOC, "-o %s: cannot rename %s into place: %s", r->out_dir, tmp,
                    strerror(errno));
    if (replace) rename(old, r->out_dir);
  }
  if (st) {
    remove_tree(tmp);
    return st;
  }
  if (replace) remove_tree(old);
  return NNC_OK;
}
