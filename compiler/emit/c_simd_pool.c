/* compiler/emit/c_simd_pool.c — pooling and depthwise convolution read
 * straight from the NHWC image (nnc_emitter.reduce_windows): a reduce
 * kernel whose first node is an im2col (passes/fuse_patterns.c match_pool)
 * is one call of nnc_simd_pool (templates/c_simd/pool.c), and the windows
 * are never stored (MNIST's 2 x 2 max pool: a 9.4 MB copy and a pass over
 * it before). */
#include <stdio.h>

#include "c_simd.h"

nnc_status cs_emit_pool(const ec_ctx *x, int ki, nnc_sb *b) {
  const nnc_kernel *k = &x->s->k[ki];
  const nnc_node *im = &x->g->nodes[k->nodes[0]], *r = &x->g->nodes[k->nodes[k->nnodes - 1]];
  bool depthwise = k->nnodes == 3;
  char images[512];
  nnc_emit_dim_expr(x->g, x->g->tensors[im->in[0]].shape[0], "d->", images, sizeof images);
  nnc_sb body;
  nnc_sb_init(&body);
  nnc_sb_printf(&body, "  nnc_simd_pool_args g = {\n      .op = %s, .images = (int)(%s),\n",
                depthwise ? "NNC_SIMD_POOL_DEPTHWISE" : r->op == NNC_OP_MAX ? "NNC_SIMD_POOL_MAX" : "NNC_SIMD_POOL_MEAN",
                images);
  cs_window_fields(x, im, "win", "the image's", &body);
  nnc_sb_printf(&body, "  };\n");
  ec_assign(x, &body, 2, "g.x", im->in[0]);
  if (depthwise) ec_assign(x, &body, 2, "g.w", x->g->nodes[k->nodes[1]].in[1]);
  ec_assign(x, &body, 2, "g.y", r->out[0]);
  nnc_sb_printf(&body, "  nnc_simd_error e;\n  if (nnc_simd_pool(&g, &c->m->par, &e)) return kernel_failed(c->m, %d, e.msg);\n"
                       "  return 0;\n", ki);
  char head[64];
  snprintf(head, sizeof head, "static int k%d(const run_ctx *c)", ki);
  ec_emit_function(x, b, head, NULL, "c->d", &body);
  return NNC_OK;
}
