// The CPU attention kernels for any CPU: 16-byte vectors (SSE2 on x86-64, NEON on AArch64), gemm
// blocks of 4 rows x 2 vectors.
#define VARPACK_VECTOR_BYTES 16
#define VARPACK_ROW_VECTORS 2
#define VARPACK_ISA_TARGET
#define VARPACK_ISA_TABLE kKernelsBaseline
#define VARPACK_ISA_NAME "baseline"
#include "isa_kernels.h"
