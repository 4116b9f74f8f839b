/* compiler/emit/emit_kv.c — kv_append's loops, the C SIMD target's (a task
 * takes whole rows of D) and the device loops' (a work-item an element).
 * The kernel writes this call's T rows of each [C, D] block of the cache at
 * rows S - T .. S - 1. When something besides a folded attention reads its
 * output (the first S rows), it writes that too, every row from where it
 * is: the new rows from x, the older ones from the cache. */
#include <stdio.h>

#include "c_simd.h"

#define ACCESS (EC_EXPR * 3)

/* The sizes both targets name. */
typedef struct kv_sizes {
  long long C, D;
  bool out;            /* the first S rows are stored too */
  char outer[EC_EXPR], T[EC_EXPR], S[EC_EXPR];
} kv_sizes;

static void sizes(const ec_ctx *x, const nnc_node *n, kv_sizes *s) {
  const nnc_tensor *c = &x->g->tensors[n->in[0]];
  int r = c->rank;
  s->C = c->shape[r - 2].k;
  s->D = c->shape[r - 1].k;
  s->out = x->s->plan.buf[n->out[0]].storage != NNC_STORE_NONE;
  ec_dims_product(x, n->in[1], 0, r - 2, s->outer, sizeof s->outer);
  ec_dims_product(x, n->in[1], r - 2, r - 1, s->T, sizeof s->T);
  ec_dims_product(x, n->out[0], r - 2, r - 1, s->S, sizeof s->S);
}

static void comment(const ec_ctx *x, const nnc_node *n, const kv_sizes *s, nnc_sb *b) {
  char note[600];
  nnc_sb_printf(b, "  /* kv_append: x's T rows into rows S - T .. S - 1 of each %lld-row block of the cache %s%s */\n",
                s->C, ec_note(x, n->in[0], note, sizeof note),
                s->out ? "; y: the first S rows of each block" : " (the attention reads the cache in place)");
}

/* ------------------------------------------------------------------ C SIMD */

nnc_status cs_emit_kv_append(const ec_ctx *x, int ki, nnc_sb *out) {
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  kv_sizes s;
  sizes(x, n, &s);
  const char *ty = ec_ctype(x->g, n->in[0]);
  char lhs[64];
  nnc_sb body;
  nnc_sb_init(&body);
  snprintf(lhs, sizeof lhs, "const %s *x", ty);
  ec_assign(x, &body, 2, lhs, n->in[1]);
  snprintf(lhs, sizeof lhs, "%s *cache", ty);
  ec_assign(x, &body, 2, lhs, n->in[0]);
  if (s.out) {
    snprintf(lhs, sizeof lhs, "%s *y", ty);
    ec_assign(x, &body, 2, lhs, n->out[0]);
  }
  comment(x, n, &s, &body);
  nnc_sb_printf(&body, "  const int64_t C = %lld, D = %lld, T = %s, S = %s;\n", s.C, s.D, s.T, s.S);
  if (s.out)
    nnc_sb_printf(&body,
      "  for (int64_t r = r0; r < r1; r++) {\n"
      "    const int64_t o = r / S, t = r %% S;\n"
      "    const %s *src = t >= S - T ? x + (o * T + t - (S - T)) * D : cache + (o * C + t) * D;\n"
      "    if (t >= S - T) memcpy(cache + (o * C + t) * D, src, (size_t)D * sizeof *src);\n"
      "    memcpy(y + r * D, src, (size_t)D * sizeof *src);\n"
      "  }\n", ty);
  else
    nnc_sb_printf(&body,
      "  for (int64_t r = r0; r < r1; r++)\n"
      "    memcpy(cache + (r / T * C + S - T + r %% T) * D, x + r * D, (size_t)D * sizeof *x);\n");
  char head[96], rows[EC_EXPR * 2 + 8], work[32];
  snprintf(head, sizeof head, "static void k%d_rows(void *p, int64_t r0, int64_t r1)", ki);
  ec_emit_function(x, out, head, "  const run_ctx *c = p;\n", "c->d", &body);
  ec_mul(s.outer, s.out ? s.S : s.T, rows, sizeof rows);
  snprintf(work, sizeof work, "%lld", s.D);
  nnc_sb call;
  nnc_sb_init(&call);
  nnc_sb_printf(&call, "  nnc_glue_rows(&c->m->pool, %s, %s, k%d_rows, (void *)c);\n  return 0;\n", rows, work, ki);
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, out, head, NULL, "c->d", &call);
  return NNC_OK;
}

/* ------------------------------------------------------------ device loops */

static char *ld(const ec_ctx *x, int t, const char *name, const char *idx, char *buf, size_t n) {
  if (x->loop_load) x->loop_load(x, t, name, idx, buf, n);
  else snprintf(buf, n, "nnc_ld(%s[%s])", name, idx);
  return buf;
}

static char *st(const ec_ctx *x, int t, const char *name, const char *idx, const char *v, char *buf, size_t n) {
  if (x->loop_store) x->loop_store(x, t, name, idx, v, buf, n);
  else snprintf(buf, n, "nnc_st(&%s[%s], %s)", name, idx, v);
  return buf;
}

nnc_status ec_emit_device_kv_append(const ec_loop_target *lt, int ki, nnc_error *err) {
  (void)err;
  const ec_ctx *x = lt->x;
  const nnc_node *n = &x->g->nodes[x->s->k[ki].nodes[0]];
  kv_sizes s;
  sizes(x, n, &s);
  nnc_sb body;
  nnc_sb_init(&body);
  lt->pointer(lt->self, &body, "const ", "x", n->in[1]);
  lt->pointer(lt->self, &body, "", "cache", n->in[0]);
  if (s.out) lt->pointer(lt->self, &body, "", "y", n->out[0]);
  comment(x, n, &s, &body);
  char cnt[EC_EXPR * 3 + 16], rows[EC_EXPR * 2 + 8], width[32], a[ACCESS], s1[ACCESS * 2], s2[ACCESS * 2],
      s3[ACCESS * 2];
  snprintf(width, sizeof width, "%lld", s.D);
  ec_mul(ec_mul(s.outer, s.out ? s.S : s.T, rows, sizeof rows), width, cnt, sizeof cnt);
  nnc_sb_printf(&body, "  const int C = %lld, D = %lld, T = (int)(%s), S = (int)(%s);\n", s.C, s.D, s.T, s.S);
  if (s.out)
    nnc_sb_printf(&body,
      "  NNC_LOOP(e, %s) {\n"
      "    const int i = e %% D, o = e / D / S, t = e / D %% S;\n"
      "    if (t >= S - T) {\n"
      "      const float v = %s;\n"
      "      %s;\n"
      "      %s;\n"
      "    } else {\n"
      "      %s;\n"
      "    }\n"
      "  }\n",
      cnt, ld(x, n->in[1], "x", "(o * T + t - (S - T)) * D + i", a, sizeof a),
      st(x, n->in[0], "cache", "(o * C + t) * D + i", "v", s1, sizeof s1), st(x, n->out[0], "y", "e", "v", s2, sizeof s2),
      st(x, n->out[0], "y", "e", ld(x, n->in[0], "cache", "(o * C + t) * D + i", a, sizeof a), s3, sizeof s3));
  else
    nnc_sb_printf(&body,
      "  NNC_LOOP(e, %s) {\n"
      "    const int i = e %% D, o = e / D / T, t = e / D %% T;\n"
      "    %s;\n"
      "  }\n",
      cnt, st(x, n->in[0], "cache", "(o * C + S - T + t) * D + i", ld(x, n->in[1], "x", "e", a, sizeof a), s1,
              sizeof s1));
  lt->finish(lt->self, ki, cnt, &body);
  return NNC_OK;
}
