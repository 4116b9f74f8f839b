/* templates/cuda/recurrent.cuh — the forward scans of LSTM and GRU layers
 * (nnc's lstm_scan and gru_scan) as one persistent kernel,
 * `nnc_cuda_rnn_scan<T>(nnc_cuda_rnn_args<T>, stream, err)`.
 *
 * The steps of a scan depend on each other, so the whole scan is one
 * cooperative launch whose blocks all stay resident: each step every block
 * computes its tiles' gate pre-activations W_hh h_{t-1} from the h that the
 * step before wrote into y (read from L2), applies the gate math, writes
 * h_t, and the grid meets at a barrier before the next step. A tile is 8
 * hidden units (all their G gate rows of W_hh, kept in shared memory for the
 * whole scan when they fit, else read from global each step) times 32 batch
 * rows; a block owns one or more tiles, and the state of its tiles (c, and
 * the h it last wrote) stays in shared memory. The product runs on
 * mma.sync m16n8k16 for bf16 and f16 (sm_80 and later: two 16-row tiles of
 * gate rows, i f | g o or r z | n -, times 8 batch rows a warp, the K axis
 * split over the block's other warps), in float FMAs otherwise; either way
 * each k-slice's partial sums go to shared memory and are added in a fixed
 * order, so every run gives the same bits. Accumulation and gate math are
 * f32; h is rounded to T when written, and that rounded h is what the next
 * step reads (also for GRU's z h term). */
#ifndef NNC_CUDA_RECURRENT_CUH
#define NNC_CUDA_RECURRENT_CUH

#include <cooperative_groups.h>
#include <cstring>

#include "gemm_mma.cuh"
#include "nnc_cuda.cuh"

template <typename E> struct nnc_cuda_rnn_args {   /* E: float, __half or __nv_bfloat16 */
  int B, T, H;        /* batch rows, steps, hidden units */
  bool gru;           /* false: LSTM, gates i, f, g, o; true: GRU, gates r, z, n (as PyTorch) */
  bool reverse;       /* time runs from step T - 1 down to 0 */
  const E *xw;        /* [B, T, G*H]: x W_ih^T + b_ih */
  const E *w;         /* [G*H, H]: W_hh */
  const E *bias;      /* [G*H]: b_hh, or NULL for zeros */
  const E *h0, *c0;   /* [B, H] or NULL for zeros; c0 for LSTM only */
  E *y;               /* [B, T, H] */
  E *hn, *cn;         /* [B, H]: the last step's h and c (cn for LSTM only) */
  /* for tests, 0 in use: a limit on shared memory below the device's (the weights then stay in global
   * memory), and the float path for bf16/f16 too */
  int smem_limit;
  bool no_mma;
};

#define NNC_RNN_THREADS 256   /* 8 warps; the gate math: one thread per (unit, batch row) of a tile */
#define NNC_RNN_UNITS 8       /* hidden units of a tile */
#define NNC_RNN_ROWS 32       /* their gate rows: 4 gates x 8 units (a GRU's fourth gate zero) */
#define NNC_RNN_BATCH 32      /* batch rows of a tile */
#define NNC_RNN_PART_LD 40    /* floats per partial-sum row: float2 stores of a warp fall in distinct banks */
#define NNC_RNN_KC 32         /* float path: steps of K per staged chunk of h */

template <typename T> struct nnc_rnn_params {
  nnc_cuda_rnn_args<T> a;
  int bslices, tiles;   /* batch slices of 32 rows; tiles = ceil(H / 8) * bslices */
  int per_block;        /* the most tiles a block owns */
  int kpad, ksteps;     /* H rounded up to 16, and kpad / 16 */
  int ntc, kslices;     /* tensor cores: n-tiles of 8 batch rows a tile, and the K split (ntc * kslices = 8 warps) */
  bool w_smem;          /* the block's weights are in shared memory */
  int hload;            /* how h rows (y and h0) are read: 2: 8 bytes at a time, 1: 4 bytes, 0: an element */
  bool sync_hn;         /* h0 overlaps h_n: the grid meets once more before h_n is written */
};

/* Reads raw bits from L2: h comes from other blocks within this launch, which L1 does not see. */
template <typename T> __device__ __forceinline__ float nnc_rnn_ld_cg(const T *p) {
  if constexpr (sizeof(T) == 4) {
    return __ldcg(reinterpret_cast<const float *>(p));
  } else {
    const unsigned short v = __ldcg(reinterpret_cast<const unsigned short *>(p));
    T t;
    memcpy(&t, &v, 2);
    return nnc_dtype<T>::load(t);
  }
}

/* Elements k .. k + 3 of row (16-bit T) as two mma operand pairs, zeros past H or for no row. */
template <typename T>
__device__ __forceinline__ uint2 nnc_rnn_h_quad(const T *row, int k, int H, int hload) {
  if (!row || k >= H) return make_uint2(0u, 0u);
  if (hload == 2) return __ldcg(reinterpret_cast<const uint2 *>(row + k));
  if (hload == 1)
    return make_uint2(__ldcg(reinterpret_cast<const unsigned int *>(row + k)),
                      k + 2 < H ? __ldcg(reinterpret_cast<const unsigned int *>(row + k + 2)) : 0u);
  unsigned int e[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = k + i < H ? __ldcg(reinterpret_cast<const unsigned short *>(row + k + i)) : 0u;
  return make_uint2(e[0] | e[1] << 16, e[2] | e[3] << 16);
}

/* Elements k, k + 1 of the tile's gate row r (gate r / 8 of unit j0 + r % 8) of W_hh, zeros outside it. */
template <typename T>
__device__ __forceinline__ uint32_t nnc_rnn_w_pair(const T *w, int G, int H, int j0, int r, int k) {
  const int gate = r / NNC_RNN_UNITS, j = j0 + r % NNC_RNN_UNITS;
  if (gate >= G || j >= H) return 0u;
  const unsigned short *row = reinterpret_cast<const unsigned short *>(w + ((size_t)gate * H + j) * H);
  const unsigned int lo = k < H ? __ldg(row + k) : 0u, hi = k + 1 < H ? __ldg(row + k + 1) : 0u;
  return lo | hi << 16;
}

/* The A fragment (m16n8k16, row-major) of lane for m-tile mt (gate rows mt*16..) and K step ks. The
 * order of K within a step is the product's to choose as long as A and B agree: the lane whose columns
 * are 2q, 2q + 1 and 2q + 8, 2q + 9 takes elements 4q .. 4q + 3 of the step, so that its B operand is
 * one 8-byte load of h (a warp reads whole 32-byte sectors). */
template <typename T>
__device__ __forceinline__ uint4 nnc_rnn_a_frag(const T *w, int G, int H, int j0, int mt, int ks, int lane) {
  const int r = mt * 16 + lane / 4, k = ks * 16 + lane % 4 * 4;
  return make_uint4(nnc_rnn_w_pair(w, G, H, j0, r, k), nnc_rnn_w_pair(w, G, H, j0, r + 8, k),
                    nnc_rnn_w_pair(w, G, H, j0, r, k + 2), nnc_rnn_w_pair(w, G, H, j0, r + 8, k + 2));
}

/* Tensor cores: the partial sums of this warp's k-slice for n-tile nt into part[kslice][row][batch]. */
template <typename T>
__device__ __forceinline__ void nnc_rnn_mma_phase(const nnc_rnn_params<T> &p, const uint4 *wfrag, const T *src,
                                                  size_t stride, int bs, int j0, float *part) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, G = p.a.gru ? 3 : 4;
  const int nt = warp % p.ntc, ksl = warp / p.ntc;
  const int per = (p.ksteps + p.kslices - 1) / p.kslices, k0 = ksl * per, k1 = min(p.ksteps, k0 + per);
  const int b = bs * NNC_RNN_BATCH + nt * 8 + lane / 4;   /* the batch row of this lane's B column */
  const T *hrow = src && b < p.a.B ? src + (size_t)b * stride : nullptr;
  float acc[2][4] = {};
  constexpr int CH = 16;   /* K steps whose h is loaded before the first product: one trip to L2 */
  for (int kc = k0; kc < k1; kc += CH) {
    uint2 bf[CH];   /* elements 4q .. 4q + 3 of each step (nnc_rnn_a_frag's order) */
#pragma unroll
    for (int i = 0; i < CH; ++i)
      bf[i] = kc + i < k1 ? nnc_rnn_h_quad(hrow, (kc + i) * 16 + lane % 4 * 4, p.a.H, p.hload) : make_uint2(0u, 0u);
#pragma unroll
    for (int i = 0; i < CH; ++i) {
      if (kc + i >= k1) break;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint4 f = p.w_smem ? wfrag[(mt * p.ksteps + kc + i) * 32 + lane]
                                 : nnc_rnn_a_frag(p.a.w, G, p.a.H, j0, mt, kc + i, lane);
        const uint32_t a[4] = {f.x, f.y, f.z, f.w};
        nnc_mma<T>::run(acc[mt], a, bf[i].x, bf[i].y);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    float *q = part + (size_t)(ksl * NNC_RNN_ROWS + mt * 16 + lane / 4) * NNC_RNN_PART_LD + nt * 8 + lane % 4 * 2;
    *reinterpret_cast<float2 *>(q) = make_float2(acc[mt][0], acc[mt][1]);
    *reinterpret_cast<float2 *>(q + 8 * NNC_RNN_PART_LD) = make_float2(acc[mt][2], acc[mt][3]);
  }
#else
  (void)p, (void)wfrag, (void)src, (void)stride, (void)bs, (void)j0, (void)part;
  __trap();   /* the host takes this path only for code built for sm_80 or later */
#endif
}

/* Float FMAs: thread (unit u, batch row bl) sums its G gate rows against h, staged a chunk of K at a time. */
template <typename T>
__device__ __forceinline__ void nnc_rnn_simt_phase(const nnc_rnn_params<T> &p, const T *wrows, const T *src,
                                                   size_t stride, int bs, int j0, float *part, float *hs) {
  const int tid = threadIdx.x, u = tid / 32, bl = tid % 32, G = p.a.gru ? 3 : 4, H = p.a.H, j = j0 + u;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int kc = 0; kc < H; kc += NNC_RNN_KC) {
    for (int i = tid; i < NNC_RNN_BATCH * NNC_RNN_KC; i += NNC_RNN_THREADS) {
      const int r = i / NNC_RNN_KC, kk = i % NNC_RNN_KC, b = bs * NNC_RNN_BATCH + r, k = kc + kk;
      hs[r * (NNC_RNN_KC + 1) + kk] = src && b < p.a.B && k < H ? nnc_rnn_ld_cg(src + (size_t)b * stride + k) : 0.0f;
    }
    __syncthreads();
    const int kn = min(NNC_RNN_KC, H - kc);
    if (j < H)
      for (int kk = 0; kk < kn; ++kk) {
        const float hv = hs[bl * (NNC_RNN_KC + 1) + kk];
#pragma unroll
        for (int g = 0; g < 4; ++g)
          if (g < G) {
            const T wv = p.w_smem ? wrows[(size_t)(g * NNC_RNN_UNITS + u) * p.kpad + kc + kk]
                                  : p.a.w[((size_t)g * H + j) * H + kc + kk];
            acc[g] += nnc_dtype<T>::load(wv) * hv;
          }
      }
    __syncthreads();
  }
#pragma unroll
  for (int g = 0; g < 4; ++g) part[(g * NNC_RNN_UNITS + u) * NNC_RNN_PART_LD + bl] = acc[g];
}

__device__ __forceinline__ float nnc_rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The G input projections of (batch row b, unit j) at step t, zeros when the pair is outside the scan. */
template <typename T>
__device__ __forceinline__ void nnc_rnn_load_x(const nnc_cuda_rnn_args<T> &a, int b, int j, int t, bool on,
                                               float (&xv)[4]) {
  const int G = a.gru ? 3 : 4;
  const T *xr = a.xw + ((size_t)b * a.T + t) * G * a.H + j;
#pragma unroll
  for (int g = 0; g < 4; ++g) xv[g] = on && g < G ? nnc_dtype<T>::load(xr[(size_t)g * a.H]) : 0.0f;
}

template <typename T, bool MMA>
__global__ void __launch_bounds__(NNC_RNN_THREADS, 1) nnc_rnn_kernel(const nnc_rnn_params<T> p) {
  extern __shared__ uint4 nnc_rnn_smem[];
  const nnc_cuda_rnn_args<T> &a = p.a;
  const int tid = threadIdx.x, G = a.gru ? 3 : 4, B = a.B, H = a.H, TT = a.T;
  const size_t wtile = (size_t)NNC_RNN_ROWS * p.kpad;   /* elements of a tile's weights */
  T *wts = reinterpret_cast<T *>(nnc_rnn_smem);
  float *part = reinterpret_cast<float *>(wts + (p.w_smem ? p.per_block * wtile : 0));
  float *state = part + (MMA ? p.kslices : 1) * NNC_RNN_ROWS * NNC_RNN_PART_LD;   /* per tile: h[256], c[256] */
  float *bsm = state + p.per_block * 2 * NNC_RNN_THREADS;   /* per tile: b_hh of its 32 gate rows */
  float *hs = bsm + p.per_block * NNC_RNN_ROWS;
  int mine = 0;   /* tiles of this block: blockIdx.x + i * gridDim.x */
  while (mine < p.per_block && blockIdx.x + mine * gridDim.x < (unsigned)p.tiles) ++mine;
  const int u = tid / 32, bl = tid % 32;   /* the gate math's (unit, batch row) */

  for (int lt = 0; lt < mine; ++lt) {
    const int tile = blockIdx.x + lt * gridDim.x, j0 = tile / p.bslices * NNC_RNN_UNITS;
    if (p.w_smem) {
      if constexpr (MMA) {
        uint4 *f = reinterpret_cast<uint4 *>(wts + lt * wtile);
        for (int i = tid; i < 2 * p.ksteps * 32; i += NNC_RNN_THREADS)
          f[i] = nnc_rnn_a_frag(a.w, G, H, j0, i / (p.ksteps * 32), i / 32 % p.ksteps, i % 32);
      } else {
        for (size_t i = tid; i < wtile; i += NNC_RNN_THREADS) {
          const int r = (int)(i / p.kpad), k = (int)(i % p.kpad), gate = r / NNC_RNN_UNITS, j = j0 + r % NNC_RNN_UNITS;
          wts[lt * wtile + i] =
              gate < G && j < H && k < H ? a.w[((size_t)gate * H + j) * H + k] : nnc_dtype<T>::store(0.0f);
        }
      }
    }
    const int j = j0 + u, b = tile % p.bslices * NNC_RNN_BATCH + bl;
    const bool on = j < H && b < B;
    state[lt * 512 + tid] = on && a.h0 ? nnc_dtype<T>::load(a.h0[(size_t)b * H + j]) : 0.0f;
    state[lt * 512 + 256 + tid] = on && !a.gru && a.c0 ? nnc_dtype<T>::load(a.c0[(size_t)b * H + j]) : 0.0f;
    if (tid < NNC_RNN_ROWS) {
      const int gate = tid / NNC_RNN_UNITS, jb = j0 + tid % NNC_RNN_UNITS;
      bsm[lt * NNC_RNN_ROWS + tid] =
          gate < G && jb < H && a.bias ? nnc_dtype<T>::load(a.bias[(size_t)gate * H + jb]) : 0.0f;
    }
  }
  __syncthreads();
  /* the first tile's inputs of the coming step are loaded before the grid barrier, whose wait hides
     their trip to memory */
  const int j_first = (int)blockIdx.x / p.bslices * NNC_RNN_UNITS + u;
  const int b_first = (int)blockIdx.x % p.bslices * NNC_RNN_BATCH + bl;
  const bool on_first = j_first < H && b_first < B;
  float xnext[4];
  if (TT > 0) nnc_rnn_load_x(a, b_first, j_first, a.reverse ? TT - 1 : 0, on_first, xnext);

  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int s = 0; s < TT; ++s) {
    const int t = a.reverse ? TT - 1 - s : s, prev = s == 0 ? -1 : a.reverse ? t + 1 : t - 1;
    /* h_{t-1}: the step before's rows of y, or h0 (NULL: zeros) */
    const T *src = prev < 0 ? a.h0 : a.y + (size_t)prev * H;
    const size_t stride = prev < 0 ? (size_t)H : (size_t)TT * H;
    for (int lt = 0; lt < mine; ++lt) {
      const int tile = blockIdx.x + lt * gridDim.x, bs = tile % p.bslices, j0 = tile / p.bslices * NNC_RNN_UNITS;
      const int j = j0 + u, b = bs * NNC_RNN_BATCH + bl;
      const bool on = j < H && b < B;
      float xv[4];   /* the other tiles' loaded before the product, behind which their latency hides */
      if (lt == 0) {
#pragma unroll
        for (int g = 0; g < 4; ++g) xv[g] = xnext[g];
      } else {
        nnc_rnn_load_x(a, b, j, t, on, xv);
      }
      if constexpr (MMA)
        nnc_rnn_mma_phase(p, reinterpret_cast<const uint4 *>(wts + lt * wtile), src, stride, bs, j0, part);
      else
        nnc_rnn_simt_phase(p, wts + lt * wtile, src, stride, bs, j0, part, hs);
      __syncthreads();
      if (on) {
        float pre[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          pre[g] = bsm[lt * NNC_RNN_ROWS + g * NNC_RNN_UNITS + u];
          for (int k = 0; k < (MMA ? p.kslices : 1); ++k)
            pre[g] += part[(k * NNC_RNN_ROWS + g * NNC_RNN_UNITS + u) * NNC_RNN_PART_LD + bl];
        }
        float *st = state + lt * 512;
        float h;
        if (!a.gru) {
          const float ig = nnc_rnn_sigmoid(xv[0] + pre[0]), fg = nnc_rnn_sigmoid(xv[1] + pre[1]);
          const float gg = tanhf(xv[2] + pre[2]), og = nnc_rnn_sigmoid(xv[3] + pre[3]);
          const float c = fg * st[256 + tid] + ig * gg;
          st[256 + tid] = c;
          h = og * tanhf(c);
        } else {
          const float rg = nnc_rnn_sigmoid(xv[0] + pre[0]), zg = nnc_rnn_sigmoid(xv[1] + pre[1]);
          const float ng = tanhf(xv[2] + rg * pre[2]);
          h = (1.0f - zg) * ng + zg * st[tid];
        }
        const T hv = nnc_dtype<T>::store(h);
        a.y[((size_t)b * TT + t) * H + j] = hv;
        st[tid] = nnc_dtype<T>::load(hv);
      }
      if (lt + 1 < mine) __syncthreads();   /* part is the next tile's */
    }
    if (s + 1 < TT) {
      nnc_rnn_load_x(a, b_first, j_first, a.reverse ? TT - 2 - s : s + 1, on_first, xnext);
      grid.sync();   /* h_t written everywhere before any block reads it */
    }
  }
  if (p.sync_hn && TT == 1) grid.sync();   /* every block has read h0 (longer scans met after step 0) */
  for (int lt = 0; lt < mine; ++lt) {
    const int tile = blockIdx.x + lt * gridDim.x, j = tile / p.bslices * NNC_RNN_UNITS + u;
    const int b = tile % p.bslices * NNC_RNN_BATCH + bl;
    if (j >= H || b >= B) continue;
    a.hn[(size_t)b * H + j] = nnc_dtype<T>::store(state[lt * 512 + tid]);
    if (!a.gru) a.cn[(size_t)b * H + j] = nnc_dtype<T>::store(state[lt * 512 + 256 + tid]);
  }
}

/* Dynamic shared memory of a block: its tiles' weights (when w_smem), the
 * partial sums, the state and b_hh, and the float path's chunk of h. */
template <typename T> inline size_t nnc_rnn_smem_bytes(const nnc_rnn_params<T> &p, bool mma) {
  size_t n = p.w_smem ? (size_t)p.per_block * NNC_RNN_ROWS * p.kpad * sizeof(T) : 0;
  n += (size_t)(mma ? p.kslices : 1) * NNC_RNN_ROWS * NNC_RNN_PART_LD * sizeof(float);
  n += (size_t)p.per_block * (2 * NNC_RNN_THREADS + NNC_RNN_ROWS) * sizeof(float);
  if (!mma) n += (size_t)NNC_RNN_BATCH * (NNC_RNN_KC + 1) * sizeof(float);
  return n;
}

template <typename T> inline bool nnc_rnn_overlap(const T *a, const T *b, size_t n) {
  return a && b && a < b + n && b < a + n;
}

/* Runs the scan on stream: one cooperative launch of at most the blocks
 * that fit on the GPU at once. Returns NNC_CUDA_E_ARG for bad sizes or
 * pointers (or a state too large for shared memory), NNC_CUDA_E_LAUNCH when
 * the runtime refuses. B == 0 or H == 0 launches nothing; T == 0 writes
 * h_n = h0 and c_n = c0. */
template <typename T>
inline nnc_cuda_status nnc_cuda_rnn_scan(const nnc_cuda_rnn_args<T> &a, cudaStream_t stream, nnc_cuda_error *err) {
  const char *K = "nnc_cuda_rnn_scan";
  if (a.B < 0 || a.T < 0 || a.H < 0)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, K, "expected sizes >= 0, found B=%d T=%d H=%d", a.B, a.T, a.H);
  if (a.B == 0 || a.H == 0) return NNC_CUDA_OK;
  if (!a.w || !a.hn || (a.T > 0 && (!a.xw || !a.y)) || (!a.gru && !a.cn))
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, K, "expected xw, w, y, hn%s, found NULL", a.gru ? "" : " and cn");
  nnc_rnn_params<T> p = {};
  p.a = a;
  p.bslices = (a.B + NNC_RNN_BATCH - 1) / NNC_RNN_BATCH;
  p.tiles = (a.H + NNC_RNN_UNITS - 1) / NNC_RNN_UNITS * p.bslices;
  p.kpad = (a.H + 15) / 16 * 16;
  p.ksteps = p.kpad / 16;
  const int rows = a.B < NNC_RNN_BATCH ? a.B : NNC_RNN_BATCH;
  p.ntc = rows <= 8 ? 1 : rows <= 16 ? 2 : 4;
  p.kslices = 8 / p.ntc;
  const uintptr_t hbits = reinterpret_cast<uintptr_t>(a.y) | reinterpret_cast<uintptr_t>(a.h0);
  p.hload = a.H % 4 == 0 && hbits % 8 == 0 ? 2 : a.H % 2 == 0 && hbits % 4 == 0 ? 1 : 0;
  p.sync_hn = nnc_rnn_overlap(a.h0, a.hn, (size_t)a.B * a.H);
  int dev = 0, sms = 0, optin = 0;
  cudaError_t ce = cudaGetDevice(&dev);
  if (ce == cudaSuccess) ce = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (ce == cudaSuccess) ce = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (ce != cudaSuccess)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, K, "device attributes: %s", cudaGetErrorString(ce));
  void (*kern)(const nnc_rnn_params<T>) = nnc_rnn_kernel<T, false>;
  bool mma = false;
  if constexpr (sizeof(T) == 2) {
    /* the tensor-core kernel as loaded: its PTX must be sm_80's or later */
    cudaFuncAttributes fa;
    const void *tc = reinterpret_cast<const void *>(nnc_rnn_kernel<T, true>);
    if (!a.no_mma && cudaFuncGetAttributes(&fa, tc) == cudaSuccess && fa.ptxVersion >= 80) {
      kern = nnc_rnn_kernel<T, true>;
      mma = true;
    }
    (void)cudaGetLastError();
  }
  /* at least one block an SM: a block's tiles if each SM takes one */
  p.per_block = (p.tiles + sms - 1) / sms;
  if (a.smem_limit > 0 && a.smem_limit < optin) optin = a.smem_limit;
  p.w_smem = true;
  if (nnc_rnn_smem_bytes(p, mma) > (size_t)optin) p.w_smem = false;
  const size_t smem = nnc_rnn_smem_bytes(p, mma);
  if (smem > (size_t)optin)
    return nnc_cuda_fail(err, NNC_CUDA_E_ARG, K, "expected the state of %d tiles a block to fit %d bytes of shared "
                         "memory, found %zu (B=%d H=%d)", p.per_block, optin, smem, a.B, a.H);
  int occ = 0;
  ce = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (ce == cudaSuccess) ce = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, NNC_RNN_THREADS, smem);
  if (ce != cudaSuccess || occ < 1)
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, K, "no block of %zu bytes of shared memory fits an SM: %s", smem,
                         cudaGetErrorString(ce));
  const long long most = (long long)occ * sms;
  const int grid = (int)(p.tiles < most ? p.tiles : most);
  p.per_block = (p.tiles + grid - 1) / grid;   /* no more than assumed above: grid >= min(tiles, sms) */
  void *args[] = {&p};
  ce = cudaLaunchCooperativeKernel(reinterpret_cast<const void *>(kern), dim3(grid), dim3(NNC_RNN_THREADS), args, smem,
                                   stream);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return nnc_cuda_fail(err, NNC_CUDA_E_LAUNCH, K, "cooperative launch of %d blocks failed: %s", grid,
                         cudaGetErrorString(ce));
  }
  return nnc_cuda_check_launch(err, K);
}

#endif
