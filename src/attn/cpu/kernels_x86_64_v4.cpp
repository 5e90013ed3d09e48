// The CPU attention kernels for x86-64-v4 (AVX-512): 64-byte vectors, gemm blocks of 4 rows x 4
// vectors (16 accumulators of the 32 vector registers).
#if defined(__x86_64__)
#define VARPACK_VECTOR_BYTES 64
#define VARPACK_ROW_VECTORS 4
#define VARPACK_ISA_TARGET __attribute__((target("arch=x86-64-v4")))
#define VARPACK_ISA_TABLE kKernelsX86_64_v4
#define VARPACK_ISA_NAME "x86-64-v4"
#include "isa_kernels.h"
#endif
