// The CPU attention kernels for x86-64-v3 (AVX2 + FMA): 32-byte vectors, gemm blocks of 4 rows x 2
// vectors (8 accumulators of the 16 vector registers).
#if defined(__x86_64__)
#define VARPACK_VECTOR_BYTES 32
#define VARPACK_ROW_VECTORS 2
#define VARPACK_ISA_TARGET __attribute__((target("arch=x86-64-v3")))
#define VARPACK_ISA_TABLE kKernelsX86_64_v3
#define VARPACK_ISA_NAME "x86-64-v3"
#include "isa_kernels.h"
#endif
