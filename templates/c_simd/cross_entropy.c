/* templates/c_simd/cross_entropy.c — softmax cross-entropy over the rows of
 * logits, and its gradient, each row in one read of the logits for the
 * maximum and one for e^(x - max):
 *   loss_r = max + log(sum e^(x - max)) - x[t_r]
 *   dx_r   = (e^(x - max) / sum - onehot(t_r)) * scale
 * Rows run in parallel; the caller sums the row losses (in double). */
#include "internal.h"
#include "simd_math.h"

static const char *const KERNEL = "nnc_simd_cross_entropy";

typedef struct xent_job {
  int V;
  const float *x;
  const int32_t *t;
  float *loss, *dx;
  float scale;
} xent_job;

/* e^(x - m) for n values into y (may be NULL), returning their sum. */
static float exp_sum(const float *x, float *y, int n, float m) {
  nnc_vf vm = nnc_vset1(m), vs = nnc_vzero();
  int j = 0;
  for (; j + NNC_VW <= n; j += NNC_VW) {
    nnc_vf e = nnc_vexp(nnc_vsub(nnc_vload(x + j), vm));
    if (y) nnc_vstore(y + j, e);
    vs = nnc_vadd(vs, e);
  }
  float s = nnc_vhsum(vs);
  if (j < n) {
    /* the tail through a padded vector: padding -inf gives e^ = 0 */
    float buf[NNC_VW];
    for (int k = 0; k < NNC_VW; ++k) buf[k] = j + k < n ? x[j + k] : -INFINITY;
    nnc_vstore(buf, nnc_vexp(nnc_vsub(nnc_vload(buf), vm)));
    for (int k = 0; j + k < n; ++k) {
      if (y) y[j + k] = buf[k];
      s += buf[k];
    }
  }
  return s;
}

static void xent_rows(void *ctx, int r0, int r1) {
  const xent_job *jb = ctx;
  const int n = jb->V;
  for (int r = r0; r < r1; ++r) {
    const float *x = jb->x + (ptrdiff_t)r * n;
    nnc_vf vm = nnc_vset1(-INFINITY);
    int j = 0;
    for (; j + NNC_VW <= n; j += NNC_VW) vm = nnc_vmax(vm, nnc_vload(x + j));
    float m = nnc_vhmax(vm);
    for (; j < n; ++j) m = x[j] > m ? x[j] : m;
    float *dx = jb->dx ? jb->dx + (ptrdiff_t)r * n : NULL;
    const float s = exp_sum(x, dx, n, m);
    const int32_t t = jb->t[r];
    if (jb->loss) jb->loss[r] = m + logf(s) - x[t];
    if (!dx) continue;
    nnc_vf k = nnc_vset1(jb->scale / s);
    for (j = 0; j + NNC_VW <= n; j += NNC_VW) nnc_vstore(dx + j, nnc_vmul(nnc_vload(dx + j), k));
    for (; j < n; ++j) dx[j] *= jb->scale / s;
    dx[t] -= jb->scale;
  }
}

nnc_simd_status nnc_simd_cross_entropy(int rows, int V, const float *x, const int32_t *t, float *row_loss,
                                       float *dx, float scale, const nnc_simd_par *par, nnc_simd_error *err) {
  if (rows < 0 || V < 1)
    return nnc_simd_fail(err, KERNEL, "expected rows >= 0 and V >= 1, found rows=%d V=%d", rows, V);
  if (nnc_simd_check_par(par, KERNEL, err)) return NNC_SIMD_E_ARG;
  if (rows == 0) return NNC_SIMD_OK;
  if (!x || !t || (!row_loss && !dx))
    return nnc_simd_fail(err, KERNEL, "expected logits, targets and an output, found x=%p t=%p loss=%p dx=%p",
                         (const void *)x, (const void *)t, (void *)row_loss, (void *)dx);
  for (int r = 0; r < rows; ++r)
    if (t[r] < 0 || t[r] >= V)
      return nnc_simd_fail(err, KERNEL, "target %d of row %d is outside [0, %d)", (int)t[r], r, V);
  xent_job jb = {V, x, t, row_loss, dx, scale};
  nnc_simd_run_rows(par, rows, V, xent_rows, &jb);
  return NNC_SIMD_OK;
}
