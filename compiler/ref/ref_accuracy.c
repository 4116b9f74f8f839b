/* compiler/ref/ref_accuracy.c — how close a model's output is to the
 * reference's beyond its largest error: the cosine similarity of the whole
 * output, and for logits how many rows pick the reference's top-1 class.
 * bench --check prints both, so that a quantized model whose logits drift
 * from the float model's shows it even where no single element is far off. */
#include <math.h>

#include "ref.h"

/* How far below a row's maximum the reference's value at the model's argmax
 * may be, relative to the row's largest |value|, and still count as a tie:
 * float64 rounding of sums of a few thousand terms, far below any float32
 * difference a model could make. */
#define TIE 1e-12

/* Equal infinities (masked scores) are left out; any other non-finite
 * element makes the cosine undefined. */
static bool skipped(double a, double b) { return a == b && isinf(a); }

double nnc_ref_cosine(const double *a, const double *b, int64_t n) {
  /* scaling each side by its largest |value| first keeps the squares of
   * huge or tiny values from overflowing or vanishing */
  double ma = 0, mb = 0;
  for (int64_t i = 0; i < n; i++) {
    if (skipped(a[i], b[i])) continue;
    if (!isfinite(a[i]) || !isfinite(b[i])) return NAN;
    ma = fmax(ma, fabs(a[i]));
    mb = fmax(mb, fabs(b[i]));
  }
  if (ma == 0 || mb == 0) return ma == mb ? 1 : 0;
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; i++) {
    if (skipped(a[i], b[i])) continue;
    double x = a[i] / ma, y = b[i] / mb;
    ab += x * y;
    aa += x * x;
    bb += y * y;
  }
  double c = ab / (sqrt(aa) * sqrt(bb));
  return fmax(-1.0, fmin(1.0, c));   /* rounding may step just past +-1 */
}

/* Whether got's first largest element sits where want is largest, up to TIE. */
static bool row_agrees(const double *got, const double *want, int64_t cols) {
  int64_t best = 0;
  double wmax = -INFINITY, scale = 0;
  for (int64_t j = 0; j < cols; j++) {
    if (isnan(got[j]) || isnan(want[j])) return false;
    if (got[j] > got[best]) best = j;
    wmax = fmax(wmax, want[j]);
    if (isfinite(want[j])) scale = fmax(scale, fabs(want[j]));
  }
  return want[best] >= wmax - TIE * scale;
}

int64_t nnc_ref_top1_agree(const double *got, const double *want, int64_t rows, int64_t cols) {
  int64_t agree = 0;
  for (int64_t r = 0; cols > 0 && r < rows; r++) agree += row_agrees(got + r * cols, want + r * cols, cols);
  return agree;
}
