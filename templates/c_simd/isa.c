/* templates/c_simd/isa.c — which ISA this copy of the kernels was built for. */
#include "internal.h"

const char *nnc_simd_isa(void) { return NNC_ISA_NAME; }
