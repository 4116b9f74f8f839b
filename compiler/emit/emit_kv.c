/* compiler/emit/emit_kv.c — kv_append's loops, the C SIMD target's (a task
 * takes whole rows of D) and the device loops' (a work-item an element).
 * The kernel writes this call's T rows of each [C, D] block of the cache at
 * rows S - T .. S - 1. When something besides a folded attention reads its
 * output (the first S rows), it writes that too, every row from where it
 * is: the new rows from x, the older ones from the cache. x may be read in
 * place of a folded head split (nnc_kernel.d.src): row (b, h, t) of the
 * projection it came from. */
#include <stdio.h>

#include "c_simd.h"

#define ACCESS (EC_EXPR * 8)   /* an element access through a view: several dim expressions */

/* The sizes both targets name. */
typedef struct kv_sizes {
  long long C, D;
  bool out;            /* the first S rows are stored too */
  char outer[EC_EXPR], T[EC_EXPR], S[EC_EXPR];
  char xrow[EC_EXPR * 5];   /* where x's row (o, t) starts, o = b * H + h */
} kv_sizes;

static void sizes(const ec_ctx *x, const nnc_kernel *k, const nnc_node *n, kv_sizes *s) {
  const nnc_tensor *c = &x->g->tensors[n->in[0]];
  int r = c->rank;
  s->C = c->shape[r - 2].k;
  s->D = c->shape[r - 1].k;
  s->out = x->s->plan.buf[n->out[0]].storage != NNC_STORE_NONE;
  ec_dims_product(x, n->in[1], 0, r - 2, s->outer, sizeof s->outer);
  ec_dims_product(x, n->in[1], r - 2, r - 1, s->T, sizeof s->T);
  ec_dims_product(x, n->out[0], r - 2, r - 1, s->S, sizeof s->S);
  const nnc_attn_view *v = &k->d.src;
  if (!v->on) {
    snprintf(s->xrow, sizeof s->xrow, "(o * T + t) * D");
    return;
  }
  char off[EC_EXPR], sb[EC_EXPR], sh[EC_EXPR], si[EC_EXPR];
  nnc_emit_dim_expr(x->g, v->offset, "d->", off, sizeof off);
  nnc_emit_dim_expr(x->g, v->sb, "d->", sb, sizeof sb);
  nnc_emit_dim_expr(x->g, v->sh, "d->", sh, sizeof sh);
  nnc_emit_dim_expr(x->g, v->si, "d->", si, sizeof si);
  snprintf(s->xrow, sizeof s->xrow, "%s + o / %lld * (%s) + o %% %lld * (%s) + t * (%s)", off,
           (long long)c->shape[1].k, sb, (long long)c->shape[1].k, sh, si);
}

static void comment(const ec_ctx *x, const nnc_kernel *k, const nnc_node *n, const kv_sizes *s, nnc_sb *b) {
  char note[600], src[600];
  nnc_sb_printf(b, "  /* kv_append: x's T rows into rows S - T .. S - 1 of each %lld-row block of the cache %s%s */\n",
                s->C, ec_note(x, n->in[0], note, sizeof note),
                s->out ? "; y: the first S rows of each block" : " (the attention reads the cache in place)");
  if (k->d.src.on)
    nnc_sb_printf(b, "  /* x read in place: %s, heads split where they are */\n", ec_note(x, k->d.src.base, src, sizeof src));
}

/* The pointer x: the kv_append's input, or the base of its view. */
static int x_tensor(const nnc_kernel *k, const nnc_node *n) { return k->d.src.on ? k->d.src.base : n->in[1]; }

/* ------------------------------------------------------------------ C SIMD */

nnc_status cs_emit_kv_append(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[k->nnodes - 1]];
  kv_sizes s;
  sizes(x, k, n, &s);
  const char *ty = ec_ctype(x->g, n->in[0]);
  char lhs[64];
  nnc_sb body;
  nnc_sb_init(&body);
  snprintf(lhs, sizeof lhs, "const %s *x", ty);
  ec_assign(x, &body, 2, lhs, x_tensor(k, n));
  snprintf(lhs, sizeof lhs, "%s *cache", ty);
  ec_assign(x, &body, 2, lhs, n->in[0]);
  if (s.out) {
    snprintf(lhs, sizeof lhs, "%s *y", ty);
    ec_assign(x, &body, 2, lhs, n->out[0]);
  }
  comment(x, k, n, &s, &body);
  nnc_sb_printf(&body, "  const int64_t C = %lld, D = %lld, T = %s, S = %s;\n", s.C, s.D, s.T, s.S);
  if (s.out)
    nnc_sb_printf(&body,
      "  for (int64_t r = r0; r < r1; r++) {\n"
      "    const int64_t o = r / S, s = r %% S, t = s - (S - T);\n"
      "    const %s *src = t >= 0 ? x + %s : cache + (o * C + s) * D;\n"
      "    if (t >= 0) memcpy(cache + (o * C + s) * D, src, (size_t)D * sizeof *src);\n"
      "    memcpy(y + r * D, src, (size_t)D * sizeof *src);\n"
      "  }\n", ty, s.xrow);
  else
    nnc_sb_printf(&body,
      "  for (int64_t r = r0; r < r1; r++) {\n"
      "    const int64_t o = r / T, t = r %% T;\n"
      "    memcpy(cache + (o * C + S - T + t) * D, x + %s, (size_t)D * sizeof *x);\n"
      "  }\n", s.xrow);
  char rows[EC_EXPR * 2 + 8], work[32];
  ec_mul(s.outer, s.out ? s.S : s.T, rows, sizeof rows);
  snprintf(work, sizeof work, "%lld", s.D);
  cs_emit_rows_fns(x, ki, rows, work, &body, out);
  return NNC_OK;
}

/* ------------------------------------------------------------ device loops */

nnc_status ec_emit_device_kv_append(const ec_loop_target *lt, int ki, nnc_error *err) {
  (void)err;
  const ec_ctx *x = lt->x;
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *n = &x->g->nodes[k->nodes[k->nnodes - 1]];
  kv_sizes s;
  sizes(x, k, n, &s);
  nnc_sb body;
  nnc_sb_init(&body);
  lt->pointer(lt->self, &body, "const ", "x", x_tensor(k, n));
  lt->pointer(lt->self, &body, "", "cache", n->in[0]);
  if (s.out) lt->pointer(lt->self, &body, "", "y", n->out[0]);
  comment(x, k, n, &s, &body);
  char xi[EC_EXPR * 5 + 8], cnt[EC_EXPR * 3 + 16], rows[EC_EXPR * 2 + 8], width[32], a[ACCESS], s1[ACCESS * 2], s2[ACCESS * 2],
      s3[ACCESS * 2];
  snprintf(width, sizeof width, "%lld", s.D);
  ec_mul(ec_mul(s.outer, s.out ? s.S : s.T, rows, sizeof rows), width, cnt, sizeof cnt);
  nnc_sb_printf(&body, "  const int C = %lld, D = %lld, T = (int)(%s), S = (int)(%s);\n", s.C, s.D, s.T, s.S);
  snprintf(xi, sizeof xi, "%s + i", s.xrow);
  if (s.out)
    nnc_sb_printf(&body,
      "  NNC_LOOP(e, %s) {\n"
      "    const int i = e %% D, o = e / D / S, s = e / D %% S, t = s - (S - T);\n"
      "    if (t >= 0) {\n"
      "      const float v = %s;\n"
      "      %s;\n"
      "      %s;\n"
      "    } else {\n"
      "      %s;\n"
      "    }\n"
      "  }\n",
      cnt, ec_loop_ld(x, x_tensor(k, n), "x", xi, a, sizeof a),
      ec_loop_st(x, n->in[0], "cache", "(o * C + s) * D + i", "v", s1, sizeof s1), ec_loop_st(x, n->out[0], "y", "e", "v", s2, sizeof s2),
      ec_loop_st(x, n->out[0], "y", "e", ec_loop_ld(x, n->in[0], "cache", "(o * C + s) * D + i", a, sizeof a), s3, sizeof s3));
  else
    nnc_sb_printf(&body,
      "  NNC_LOOP(e, %s) {\n"
      "    const int i = e %% D, o = e / D / T, t = e / D %% T;\n"
      "    %s;\n"
      "  }\n",
      cnt, ec_loop_st(x, n->in[0], "cache", "(o * C + S - T + t) * D + i", ec_loop_ld(x, x_tensor(k, n), "x", xi, a, sizeof a), s1,
              sizeof s1));
  lt->finish(lt->self, ki, cnt, &body);
  return NNC_OK;
}
