/* compiler/emit/emit_rope.c — rope's loops: the C SIMD target's (a task
 * takes whole rows of the last axis) and the device loops' (a work-item a
 * pair of rotated entries, or one entry past the rotated width). Angles are
 * computed in double, as the reference does: theta = pos * base^(-2i/dims)
 * reaches hundreds of radians at long positions, where a float's rounding
 * alone would be 1e-5 of the result. On CUDA each f32 product and sum is
 * rounded on its own (ec_loop_target.rn_products: nvcc would fuse them into
 * an FMA), so that a rope folded into the attention (attention_rope.cuh)
 * writes the same bits as this kernel. */
#include <stdio.h>

#include "c_simd.h"

#define ACCESS (EC_EXPR * 3)

/* The sizes both targets name: D, the row count, the rows between two time
 * steps (inner), the time length T and the rows a batch entry spans; where
 * row r of x starts (xrow). */
typedef struct rope_sizes {
  long long D;
  int half;
  char rows[EC_EXPR], inner[EC_EXPR], T[EC_EXPR], per_b[EC_EXPR], base[64], pos[EC_EXPR * 4];
  char xrow[EC_EXPR * 8];
} rope_sizes;

static void sizes(const ec_ctx *x, const nnc_kernel *k, const nnc_node *n, const char *t, rope_sizes *s) {
  const nnc_tensor *in = &x->g->tensors[n->in[0]];
  int r = in->rank, axis = n->attrs.axis;
  s->D = in->shape[r - 1].k;
  s->half = n->attrs.rot_dims / 2;
  ec_dims_product(x, n->in[0], 0, r - 1, s->rows, sizeof s->rows);
  ec_dims_product(x, n->in[0], axis + 1, r - 1, s->inner, sizeof s->inner);
  ec_dims_product(x, n->in[0], axis, axis + 1, s->T, sizeof s->T);
  ec_dims_product(x, n->in[0], 1, r - 1, s->per_b, sizeof s->per_b);
  ec_literal(n->attrs.scalar, true, s->base, sizeof s->base);
  /* the position of row r: its time index t, or positions[t] or positions[b, t] */
  if (n->nin < 2) snprintf(s->pos, sizeof s->pos, "%s", t);
  else if (x->g->tensors[n->in[1]].rank == 1) snprintf(s->pos, sizeof s->pos, "pos[%s]", t);
  else snprintf(s->pos, sizeof s->pos, "pos[r / (%s) * (%s) + %s]", s->per_b, s->T, t);
  const nnc_attn_view *v = &k->d.src;
  if (!v->on) {
    snprintf(s->xrow, sizeof s->xrow, "r * %lld", s->D);
    return;
  }
  /* x [B, H, T, D] read where the head split left it: row r = (b * H + h) * T + t */
  char off[EC_EXPR], sb[EC_EXPR], sh[EC_EXPR], si[EC_EXPR], H[EC_EXPR];
  nnc_emit_dim_expr(x->g, v->offset, "d->", off, sizeof off);
  nnc_emit_dim_expr(x->g, v->sb, "d->", sb, sizeof sb);
  nnc_emit_dim_expr(x->g, v->sh, "d->", sh, sizeof sh);
  nnc_emit_dim_expr(x->g, v->si, "d->", si, sizeof si);
  ec_dims_product(x, n->in[0], 1, 2, H, sizeof H);
  snprintf(s->xrow, sizeof s->xrow, "%s + (long)(r / ((%s) * T)) * (%s) + (long)(r / T %% (%s)) * (%s) + (long)(r %% T) * (%s)",
           off, H, sb, H, sh, si);
}

/* The pointer x: rope's input, or the base of its view. */
static int x_tensor(const nnc_kernel *k, const nnc_node *n) { return k->d.src.on ? k->d.src.base : n->in[0]; }

static void comment(const ec_ctx *x, const nnc_kernel *k, const nnc_node *n, const rope_sizes *s, nnc_sb *b) {
  nnc_sb_printf(b, "  /* rope: entry i < %d of each row paired with i + %d and turned by %stheta, theta = pos * %s^(-2i/%d);"
                   " entries %d..%lld pass through */\n", s->half, s->half, n->attrs.reverse ? "-" : "", s->base,
                n->attrs.rot_dims, 2 * s->half, s->D - 1);
  char src[600];
  if (k->d.src.on)
    nnc_sb_printf(b, "  /* x read in place: %s, heads split where they are */\n", ec_note(x, k->d.src.base, src, sizeof src));
}

/* ------------------------------------------------------------------ C SIMD */

nnc_status cs_emit_rope(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[k->nnodes - 1]];   /* after the head split it reads in place */
  rope_sizes s;
  sizes(x, k, n, "t", &s);
  nnc_sb body;
  nnc_sb_init(&body);
  ec_assign(x, &body, 2, "const float *x", x_tensor(k, n));
  if (n->nin > 1) ec_assign(x, &body, 2, "const int32_t *pos", n->in[1]);
  ec_assign(x, &body, 2, "float *y", n->out[0]);
  comment(x, k, n, &s, &body);
  nnc_sb_printf(&body,
    "  const int64_t D = %lld, T = %s, inner = %s;\n"
    "  double inv_freq[%d];\n"
    "  for (int i = 0; i < %d; i++) inv_freq[i] = pow(%s, -2.0 * i / %d);\n"
    "  for (int64_t r = r0; r < r1; r++) {\n"
    "    const int64_t t = r / inner %% T;\n"
    "    const double p = (double)(%s);\n"
    "    const float *xr = x + %s;\n"
    "    float *yr = y + r * D;\n"
    "    for (int i = 0; i < %d; i++) {\n"
    "      const float c = (float)cos(p * inv_freq[i]), s = %s(float)sin(p * inv_freq[i]);\n"
    "      const float a = xr[i], b = xr[i + %d];\n"
    "      yr[i] = a * c - b * s;\n"
    "      yr[i + %d] = b * c + a * s;\n"
    "    }\n"
    "    for (int64_t k = %d; k < D; k++) yr[k] = xr[k];\n"
    "  }\n",
    s.D, s.T, s.inner, s.half, s.half, s.base, n->attrs.rot_dims, s.pos, s.xrow, s.half, n->attrs.reverse ? "-" : "",
    s.half, s.half, 2 * s.half);
  char work[EC_EXPR];
  snprintf(work, sizeof work, "%lld", s.D * 4);
  cs_emit_rows_fns(x, ki, s.rows, work, &body, out);
  return NNC_OK;
}

/* ------------------------------------------------------------ device loops */

nnc_status ec_emit_device_rope(const ec_loop_target *lt, int ki, nnc_error *err) {
  (void)err;
  const ec_ctx *x = lt->x;
  const nnc_kernel *kn = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[kn->nodes[kn->nnodes - 1]];   /* after the head split it reads in place */
  rope_sizes s;
  sizes(x, kn, n, "t", &s);
  nnc_sb body;
  nnc_sb_init(&body);
  /* HALF as a name keeps the index texts below one shape for every use */
  nnc_sb_printf(&body, "  const int HALF = %d;\n", s.half);
  lt->pointer(lt->self, &body, "const ", "x", x_tensor(kn, n));
  if (n->nin > 1) lt->pointer(lt->self, &body, "const ", "pos", n->in[1]);
  lt->pointer(lt->self, &body, "", "y", n->out[0]);
  comment(x, kn, n, &s, &body);
  char cnt[EC_EXPR * 2 + 8], width[32], a[ACCESS], b[ACCESS], k[ACCESS], s1[ACCESS * 2], s2[ACCESS * 2], s3[ACCESS * 2];
  snprintf(width, sizeof width, "%lld", s.D - s.half);
  ec_mul(s.rows, width, cnt, sizeof cnt);
  /* a row's D - half work-items: the pairs first, then the entries past the rotated width */
  nnc_sb_printf(&body,
    "  const int W = %lld, T = (int)(%s), inner = (int)(%s);\n"
    "  NNC_LOOP(e, %s) {\n"
    "    const int r = e / W, i = e %% W, t = r / inner %% T;\n"
    "    const long xr = %s;   /* where row r of x starts */\n"
    "    if (i < %d) {\n"
    "      const double th = (double)(%s) * pow(%s, -2.0 * i / %d);\n"
    "      const float c = (float)cos(th), s = %s(float)sin(th);\n"
    "      const float a = %s, b = %s;\n"
    "      %s;\n"
    "      %s;\n"
    "    } else {\n"
    "      %s;\n"
    "    }\n"
    "  }\n",
    s.D - s.half, s.T, s.inner, cnt, s.xrow, s.half, s.pos, s.base, n->attrs.rot_dims, n->attrs.reverse ? "-" : "",
    ec_loop_ld(x, n->in[0], "x", "xr + i", a, sizeof a),
    ec_loop_ld(x, n->in[0], "x", "xr + i + HALF", b, sizeof b),
    ec_loop_st(x, n->out[0], "y", "r * (W + HALF) + i", lt->rn_products ? "__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s))" : "a * c - b * s",
               s1, sizeof s1),
    ec_loop_st(x, n->out[0], "y", "r * (W + HALF) + i + HALF",
               lt->rn_products ? "__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s))" : "b * c + a * s", s2, sizeof s2),
    ec_loop_st(x, n->out[0], "y", "r * (W + HALF) + i + HALF", ec_loop_ld(x, n->in[0], "x", "xr + i + HALF", k, sizeof k), s3,
       sizeof s3));
  lt->finish(lt->self, ki, cnt, &body);
  return NNC_OK;
}
