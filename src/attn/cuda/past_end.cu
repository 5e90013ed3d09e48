// Fills the rows that belong to no sequence (past cu_seqlens[batch]): zeros in outputs and
// gradients, +inf in lse. cu_seqlens[batch] is read on the device, so the host never waits.
#include <cuda_runtime.h>

#include <string>

#include "varpack/attention_cuda.h"
#include "varpack/error.h"

namespace varpack {
namespace {

struct PastEndFills {
  PastEndFill fill[kMaxPastEndFills];
};

// Region blockIdx.y, as 16-byte zeros or 4-byte +inf: its tail in every plane, flattened so that
// a small fixed grid with a grid-stride loop covers any size (the tail is usually a few rows).
__global__ void fill_past_end_kernel(const PastEndFills fills) {
  const PastEndFill& f = fills.fill[blockIdx.y];
  const int64_t begin = f.cu_seqlens[f.batch];
  const int64_t unit = f.infinity ? 4 : 16;
  const int64_t per_plane = (f.total_rows - begin) * f.row_bytes / unit;
  const int64_t units = f.planes * per_plane;
  char* const first = static_cast<char*>(f.data) + begin * f.row_bytes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / per_plane;
    char* const at = first + plane * f.plane_stride + (i - plane * per_plane) * unit;
    if (f.infinity)
      *reinterpret_cast<float*>(at) = INFINITY;
    else
      *reinterpret_cast<uint4*>(at) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace

void fill_past_end_cuda(const PastEndFill* fills, int count, cudaStream_t stream) {
  if (count < 0 || count > kMaxPastEndFills)
    throw Error("fill_past_end_cuda: " + std::to_string(count) + " regions; at most " +
                std::to_string(kMaxPastEndFills) + " per call");
  PastEndFills args{};
  int used = 0;
  for (int i = 0; i < count; ++i) {
    const PastEndFill& f = fills[i];
    if (f.total_rows <= 0 || f.row_bytes <= 0 || f.planes <= 0) continue;
    const int64_t unit = f.infinity ? 4 : 16;
    if (f.row_bytes % unit != 0 || f.plane_stride % unit != 0 ||
        reinterpret_cast<uintptr_t>(f.data) % unit != 0)
      throw Error("fill_past_end_cuda: region " + std::to_string(i) + " must have rows, planes " +
                  "and data " + std::to_string(unit) + "-byte aligned (row_bytes = " +
                  std::to_string(f.row_bytes) + ", plane_stride = " +
                  std::to_string(f.plane_stride) + ")");
    args.fill[used++] = f;
  }
  if (used == 0) return;
  fill_past_end_kernel<<<dim3(64, static_cast<unsigned>(used)), 256, 0, stream>>>(args);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: launching the past-the-end fill failed: ") +
                cudaGetErrorString(err));
}

}  // namespace varpack
