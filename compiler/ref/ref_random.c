/* compiler/ref/ref_random.c — reproducible random inputs and parameters.
 *
 * Each tensor draws from its own splitmix64 stream, seeded from the seed and
 * the tensor's name, so a tensor gets the same values whatever else the graph
 * holds (a graph before and after a pass sees the same weights). Integer data
 * must be valid for the ops that read it, found by following the tensor
 * through copies (reshape, slice, ...) to the embedding, loss or mask. */
#include "ref_internal.h"

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform01(uint64_t *s) { return (double)(splitmix64(s) >> 11) * 0x1.0p-53; }

static uint64_t stream_of(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a of the name */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
  uint64_t s = seed ^ h;
  splitmix64(&s);
  return s;
}

typedef struct data_use {
  int64_t bound;   /* values must be < bound; INT64_MAX when nothing bounds them */
  bool mask;       /* a padding mask: 0/1 */
} data_use;

/* What the live nodes reading tensor t (directly or through copies) need. */
static void find_use(const nnc_ref *r, const nnc_uses *u, int t, int depth, data_use *use) {
  if (depth > r->g->nnodes) return;
  for (int i = u->start[t]; i < u->start[t + 1]; i++) {
    const nnc_node *n = &r->g->nodes[u->node[i]];
    bool second = n->nin > 1 && n->in[1] == t;
    if (n->op == NNC_OP_EMBEDDING && second) {
      /* a vocabulary split's ids index the whole vocabulary */
      int64_t rows = n->attrs.ranks > 1 ? n->attrs.vocab : nnc_ref_shape_of(r, n->in[0]).d[0];
      if (rows < use->bound) use->bound = rows;
    } else if (n->op == NNC_OP_CROSS_ENTROPY && second) {
      nnc_ref_shape s = nnc_ref_shape_of(r, n->in[0]);
      int64_t classes = s.rank ? s.d[s.rank - 1] : 0;
      if (classes < use->bound) use->bound = classes;
    } else if ((n->op == NNC_OP_PADDING_MASK && second) || (n->op == NNC_OP_ATTENTION && n->nin == 4 && n->in[3] == t) ||
               (n->op == NNC_OP_ATTENTION_GRAD && n->nin == 7 && n->in[6] == t)) {
      use->mask = true;
    }
    if (nnc_op_info_of(n->op)->cls == NNC_CLASS_MOVE || n->op == NNC_OP_CAST)
      for (int j = 0; j < n->nout; j++) find_use(r, u, n->out[j], depth + 1, use);
  }
}

static void fill(nnc_ref *r, const nnc_uses *u, int t, double *x, uint64_t seed) {
  const nnc_tensor *tt = &r->g->tensors[t];
  uint64_t s = stream_of(seed, tt->name);
  data_use use = {.bound = INT64_MAX, .mask = false};
  find_use(r, u, t, 0, &use);
  int64_t count = nnc_ref_elems(r, t);
  nnc_ref_shape sh = nnc_ref_shape_of(r, t);
  int64_t row = sh.rank ? sh.d[sh.rank - 1] : 1;
  for (int64_t e = 0; e < count; e++) {
    double v;
    if (use.mask) v = e % row == 0 ? 1.0 : (double)(splitmix64(&s) >> 63);   /* never a row of zeros */
    else if (tt->dtype != NNC_I32 && nnc_name_is_variance(tt->name)) v = 0.5 + uniform01(&s);   /* square-rooted */
    else if (tt->dtype != NNC_I32) v = 2.0 * uniform01(&s) - 1.0;
    else if (use.bound == INT64_MAX) v = (double)(splitmix64(&s) >> 61);
    else v = use.bound > 0 ? (double)(splitmix64(&s) % (uint64_t)use.bound) : 0.0;
    x[e] = v;
  }
}

nnc_status nnc_ref_random_inputs(nnc_ref *r, uint64_t seed, nnc_error *err) {
  nnc_uses u;
  nnc_status st = nnc_uses_build(r->g, &u, err);
  if (st) return st;
  for (int pass = 0; pass < 2; pass++) {
    const int *ids = pass ? r->g->params : r->g->inputs;
    int n = pass ? r->g->nparams : r->g->ninputs;
    for (int i = 0; i < n; i++) {
      double *x = nnc_ref_alloc(r, ids[i]);
      if (!x) {
        nnc_uses_free(&u);
        return nnc_errorf(err, NNC_E_NOMEM, r->g->tensors[ids[i]].loc,
                          "reference: out of memory for %lld values of %s",
                          (long long)nnc_ref_elems(r, ids[i]), r->g->tensors[ids[i]].name);
      }
      fill(r, &u, ids[i], x, seed);
    }
  }
  nnc_uses_free(&u);
  return NNC_OK;
}
