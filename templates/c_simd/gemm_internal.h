/* templates/c_simd/gemm_internal.h — the pieces of the blocked GEMM:
 * packing (gemm_pack.c), the register micro-kernel and the epilogue
 * (gemm_micro.c); gemm.c drives them. */
#ifndef NNC_GEMM_INTERNAL_H
#define NNC_GEMM_INTERNAL_H

#include "gemm_tiles.h"
#include "internal.h"

/* The row prologue as the packer sees it: per-row statistics already
 * computed (mean is 0 for rmsnorm). */
typedef struct nnc_gemm_pro {
  nnc_simd_prologue kind;
  const float *mean, *rstd;      /* indexed by row, for the rows packed */
  const float *gamma, *beta;     /* [K]; beta NULL is 0 */
} nnc_gemm_pro;

/* Packs rows [0, mr) (mr <= MR) of A (row stride lda), columns [pc, pc+kc),
 * into one MR x kc micro-panel: dst[k*MR + i], rows past mr zero. */
void nnc_gemm_pack_a(const float *a, ptrdiff_t lda, int mr, int pc, int kc,
                     const nnc_gemm_pro *pro, float *dst);

/* The same micro-panel from A stored [K,M] (a_trans): a points at column 0
 * of the panel's rows, rows k of A are lda apart. */
void nnc_gemm_pack_at(const float *a, ptrdiff_t lda, int mr, int pc, int kc, float *dst);

/* Packs the kc x nc block of B that starts at (k = pc, n = j0) into nc/NR
 * micro-panels of kc x NR (panel p at dst + p*NR*kc, element [k*NR + j]),
 * the last one padded with zeros. B is [K,N] (ldb), or [N,K] when trans. */
void nnc_gemm_pack_b(const float *b, ptrdiff_t ldb, int trans, int pc, int kc,
                     int j0, int nc, float *dst);

/* Where element (n, k) of B (B[k][n], or B[n][k] when b_trans) lies in B
 * packed whole for b_packed (nnc_simd_gemm_pack_b: the packing above with
 * kc = K): column n is in panel n / NR, which starts at (n / NR) * NR * K,
 * row k of a panel at + k * NR, column n % NR within it. Every reader and
 * writer of a packed B goes through this: the GEMM's panels, the packing
 * of B whole or in parts (gemm.c), an embedding's rows read out of a table
 * held packed (embedding.c). */
static inline size_t nnc_gemm_packed_b_at(int K, int n, int k) {
  return (size_t)(n / NNC_GEMM_NR) * NNC_GEMM_NR * (size_t)K + (size_t)k * NNC_GEMM_NR + (size_t)(n % NNC_GEMM_NR);
}

/* C[0:mr, 0:nr] (ldc) = (first ? 0 : C) + a . b, a an MR x kc micro-panel
 * and b a kc x NR one. */
void nnc_gemm_micro(int kc, const float *a, const float *b, float *c, ptrdiff_t ldc,
                    int mr, int nr, int first);
/* The same with a the first of MR rows of A in place (lda apart, each kc
 * long), not a packed micro-panel (nnc_simd_gemm_args.a_inplace). */
void nnc_gemm_micro_rows(int kc, const float *a, ptrdiff_t lda, const float *b, float *c, ptrdiff_t ldc,
                         int mr, int nr, int first);

/* The k runs of one KC pass over an image's windows (gemm_windows.c):
 * run r is len[r] consecutive columns of A, which the window at a pixel
 * reads at that pixel + off[r] (one tap's channels, or part of them). A
 * pass of kc columns has at most kc runs, and one more where it starts or
 * ends inside a tap. */
#define NNC_GEMM_RUNS (NNC_GEMM_KC + NNC_GEMM_KC / 4 + 2)
typedef struct nnc_gemm_runs {
  int n;
  ptrdiff_t off[NNC_GEMM_RUNS];
  int len[NNC_GEMM_RUNS];
} nnc_gemm_runs;

/* The runs of columns [pc, pc + kc) of the windows w. */
void nnc_gemm_win_runs(const nnc_simd_windows *w, int pc, int kc, nnc_gemm_runs *r);
/* The first pixel of the window of row `row` of A (image x) when rows
 * [row, row + MR) are windows of one output row that lie inside the image,
 * so the micro-kernel reads them in place (SW*C apart); NULL otherwise. */
const float *nnc_gemm_win_direct(const nnc_simd_gemm_args *g, const float *x, int row);
/* Rows [row, row + mr) of A (image x), columns [pc, pc + kc), gathered
 * into one MR x kc micro-panel as nnc_gemm_pack_a packs one. */
void nnc_gemm_win_pack(const nnc_simd_gemm_args *g, const float *x, int row, int mr, int pc, int kc, float *dst);
/* nnc_gemm_micro over MR rows of windows read in place: row i's column
 * of run r at a + i*rs + r->off[r] + (k within the run). */
void nnc_gemm_micro_windows(const nnc_gemm_runs *r, const float *a, ptrdiff_t rs, const float *b, float *c,
                            ptrdiff_t ldc, int nr, int first);

/* The epilogue on a finished tile: c = act(alpha*c + bias) + res (* res
 * when res_mul), where bias and res (ldr) are already offset to the tile
 * and may be NULL; aux
 * (ldx, offset to the tile too) per aux_mode (nnc_simd_gemm_args). */
void nnc_gemm_epilogue(float *c, ptrdiff_t ldc, int mr, int nr, float alpha,
                       const float *bias, nnc_simd_act act, const float *res,
                       ptrdiff_t ldr, int res_mul, nnc_simd_aux aux_mode, float *aux, ptrdiff_t ldx);

/* B held as int8 (gemm_q8.c, nnc_simd_q8_pack's layout). A task of at
 * most this many rows multiplies by the int8 panels directly; one with more
 * widens each panel to f32 once (nnc_gemm_widen_q8) and runs the f32
 * micro-kernel, whose k step is shorter. */
#ifndef NNC_GEMM_Q8_DIRECT_ROWS
#define NNC_GEMM_Q8_DIRECT_ROWS (4 * NNC_GEMM_MR)
/* The W8A8 GEMM (gemm_w8a8.c): its own driver, called by nnc_simd_gemm
 * after validation when b_w8a8 is set, and its workspace. */
size_t nnc_gemm_w8a8_workspace_bytes(const nnc_simd_gemm_args *g, int nthreads);
nnc_simd_status nnc_gemm_w8a8(const nnc_simd_gemm_args *g, const nnc_simd_par *par, void *workspace,
                              nnc_simd_error *err);

#endif

/* The per-column scales of an int8 B of N columns and depth K. */
const float *nnc_gemm_q8_scales(const void *q8, int N, int K);

/* The kc x nc block of an int8 B (b: its panels) at (k = pc, n = j0, a
 * multiple of NR) as f32 micro-panels in nnc_gemm_pack_b's order, each
 * value times its column's scale. */
void nnc_gemm_widen_q8(const int8_t *b, int K, int pc, int kc, int j0, int nc, const float *scale, float *dst);

/* nnc_gemm_micro with b a kc x NR int8 panel and scale its NR columns'
 * scales: C[0:mr, 0:nr] = (first ? 0 : C) + (a . b) * scale. */
void nnc_gemm_micro_q8(int kc, const float *a, const int8_t *b, const float *scale, float *c, ptrdiff_t ldc,
                       int mr, int nr, int first);

/* B held as int4 (gemm_q4.c, nnc_simd_q4_pack's layout): the scales of
 * its groups, the widening of a kc x nc block (as nnc_gemm_widen_q8, b its
 * packed nibbles), and the micro-kernel reading a panel in place from step
 * pc on (scale: that panel's groups), as nnc_gemm_micro_q8. */
const float *nnc_gemm_q4_scales(const void *q4, int N, int K);
void nnc_gemm_widen_q4(const uint8_t *b, int K, int pc, int kc, int j0, int nc, const float *scale, float *dst);
void nnc_gemm_micro_q4(int kc, int pc, const float *a, const uint8_t *b, const float *scale, float *c, ptrdiff_t ldc,
                       int mr, int nr, int first);

/* The W8A8 GEMM (gemm_w8a8.c): its own driver, called by nnc_simd_gemm
 * after validation when b_w8a8 is set, and its workspace. */
size_t nnc_gemm_w8a8_workspace_bytes(const nnc_simd_gemm_args *g, int nthreads);
nnc_simd_status nnc_gemm_w8a8(const nnc_simd_gemm_args *g, const nnc_simd_par *par, void *workspace,
                              nnc_simd_error *err);

#endif
