// Fills the rows that belong to no sequence (past cu_seqlens[batch]): zeros in outputs and
// gradients, +inf in lse. cu_seqlens[batch] is read on the device, so the host never waits.
#include <cuda_runtime.h>

#include <string>

#include "varpack/attention_cuda.h"
#include "varpack/error.h"

namespace varpack {
namespace {

__global__ void zero_tail_kernel(uint4* data, int64_t row_bytes, int64_t total_rows,
                                 const int32_t* cu_seqlens, int64_t batch) {
  const int64_t begin = static_cast<int64_t>(cu_seqlens[batch]) * row_bytes / 16;
  const int64_t end = total_rows * row_bytes / 16;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t i = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < end;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[i] = zero;
}

__global__ void lse_tail_kernel(float* lse, int64_t head_stride, int64_t total_rows,
                                const int32_t* cu_seqlens, int64_t batch) {
  const int64_t begin = cu_seqlens[batch];
  float* row = lse + blockIdx.y * head_stride;
  for (int64_t i = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total_rows; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    row[i] = INFINITY;
}

void check(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: launching ") + what + " failed: " +
                cudaGetErrorString(err));
}

}  // namespace

void zero_rows_past_end_cuda(void* data, int64_t row_bytes, int64_t total_rows,
                             const int32_t* cu_seqlens, int64_t batch, cudaStream_t stream) {
  if (total_rows <= 0 || row_bytes <= 0) return;
  if (row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(data) % 16 != 0)
    throw Error("zero_rows_past_end_cuda: rows must be 16-byte aligned (row_bytes = " +
                std::to_string(row_bytes) + ")");
  // The tail is usually a few rows: a small fixed grid with a grid-stride loop covers any size.
  zero_tail_kernel<<<64, 256, 0, stream>>>(static_cast<uint4*>(data), row_bytes, total_rows,
                                           cu_seqlens, batch);
  check("the past-the-end zero fill");
}

void fill_lse_past_end_cuda(float* lse, int64_t head_stride, int heads, int64_t total_rows,
                            const int32_t* cu_seqlens, int64_t batch, cudaStream_t stream) {
  if (total_rows <= 0 || heads <= 0) return;
  lse_tail_kernel<<<dim3(4, static_cast<unsigned>(heads)), 256, 0, stream>>>(
      lse, head_stride, total_rows, cu_seqlens, batch);
  check("the past-the-end lse fill");
}

}  // namespace varpack
