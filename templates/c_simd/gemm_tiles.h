/* templates/c_simd/gemm_tiles.h — the GEMM's blocking, as macros the tuner
 * may set (-DNNC_GEMM_MR=... or before including this header).
 *
 *   MR x NR  register tile of the micro-kernel: MR*NR/NNC_VW accumulators
 *            plus NR/NNC_VW vectors of B and one broadcast of A must fit in
 *            the vector registers. NR is a multiple of NNC_VW.
 *   KC       depth of a packed panel: a KC x NR micro-panel of B (reused by
 *            every MR rows) stays in L1, an MC x KC block of A in L2.
 *   MC       rows of A per block (a multiple of MR).
 *   NC       columns of B per packed panel (a multiple of NR); its KC x NC
 *            panel lives in L2/L3 and is reused by all of A.
 *
 * AVX2 + FMA (16 ymm registers): 6 x 16 — 12 accumulators + 2 B vectors + 1
 * broadcast = 15 registers; per k step 2 loads and 6 broadcasts feed 12
 * FMAs, under the load ports' limit, so the two FMA pipes stay busy (the
 * BLIS Haswell/Zen choice). 4 x 24 also fits (16 registers, no spare) but
 * needs 3 B loads per 12 FMAs and leaves no room for the compiler. KC = 256:
 * B micro-panel 16 KiB of the 32 KiB L1, A block 144 x 256 x 4 = 144 KiB of
 * the 512 KiB L2. */
#ifndef NNC_GEMM_TILES_H
#define NNC_GEMM_TILES_H

#include "simd.h"

#if defined(NNC_ISA_AVX512)
#define NNC_GEMM_MR_DEFAULT 12
#define NNC_GEMM_NR_DEFAULT 32
#define NNC_GEMM_KC_DEFAULT 384
#define NNC_GEMM_MC_DEFAULT 192
#elif defined(NNC_ISA_AVX2)
#define NNC_GEMM_MR_DEFAULT 6
#define NNC_GEMM_NR_DEFAULT 16
#define NNC_GEMM_KC_DEFAULT 256
#define NNC_GEMM_MC_DEFAULT 144
#elif defined(NNC_ISA_NEON)
#define NNC_GEMM_MR_DEFAULT 8
#define NNC_GEMM_NR_DEFAULT 12
#define NNC_GEMM_KC_DEFAULT 256
#define NNC_GEMM_MC_DEFAULT 128
#else
#define NNC_GEMM_MR_DEFAULT 4
#define NNC_GEMM_NR_DEFAULT 4
#define NNC_GEMM_KC_DEFAULT 256
#define NNC_GEMM_MC_DEFAULT 128
#endif

#ifndef NNC_GEMM_MR
#define NNC_GEMM_MR NNC_GEMM_MR_DEFAULT
#endif
#ifndef NNC_GEMM_NR
#define NNC_GEMM_NR NNC_GEMM_NR_DEFAULT
#endif
#ifndef NNC_GEMM_KC
#define NNC_GEMM_KC NNC_GEMM_KC_DEFAULT
#endif
#ifndef NNC_GEMM_MC
#define NNC_GEMM_MC NNC_GEMM_MC_DEFAULT
#endif
#ifndef NNC_GEMM_NC
#define NNC_GEMM_NC 3072
#endif

#if NNC_GEMM_NR % NNC_VW != 0
#error "NNC_GEMM_NR must be a multiple of the vector width NNC_VW"
#endif
#if NNC_GEMM_MR < 1 || NNC_GEMM_KC < 1
#error "NNC_GEMM_MR and NNC_GEMM_KC must be positive"
#endif
#if NNC_GEMM_MC % NNC_GEMM_MR != 0 || NNC_GEMM_MC < NNC_GEMM_MR
#error "NNC_GEMM_MC must be a positive multiple of NNC_GEMM_MR"
#endif
#if NNC_GEMM_NC % NNC_GEMM_NR != 0 || NNC_GEMM_NC < NNC_GEMM_NR
#error "NNC_GEMM_NC must be a positive multiple of NNC_GEMM_NR"
#endif

#endif
