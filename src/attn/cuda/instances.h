// The compiled (dtype, head dim) instances of the CUDA kernels, one .cu file each so they build
// in parallel; attention_cuda.cu picks one at run time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "attn/cuda/forward_launch.h"
#include "varpack/attention.h"

namespace varpack::cuda {

// workspace: null, or attention_forward_workspace_bytes_cuda bytes of device memory.
template <class T, int D>
void run_forward(const AttentionParams& params, void* workspace, cudaStream_t stream,
                 const ForwardLaunch& launch);

template <class T, int D>
void run_backward(const AttentionBackwardParams& params, void* workspace, cudaStream_t stream);

// Bytes of the backward's Delta ([heads, total_q] fp32), rounded up so that the non-deterministic
// mode's dQ accumulator ([total_q, heads, head_dim] fp32) behind it in the workspace stays
// 256-byte aligned.
inline size_t delta_workspace_bytes(const AttentionBackwardParams& p) {
  const size_t bytes =
      static_cast<size_t>(p.heads) * static_cast<size_t>(p.total_q) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}
// The atomic mode's fp32 dQ accumulator [total_q, heads, head_dim] (dq_accum_bytes), then a state
// word per (query row, head), which the Hopper kernel at d128 and d96 keeps instead of a cleared
// accumulator (hopper_dq_accumulator.cuh).
inline size_t dq_accum_bytes(const AttentionBackwardParams& p) {
  return static_cast<size_t>(p.total_q) * static_cast<size_t>(p.heads) *
         static_cast<size_t>(p.head_dim) * sizeof(float);
}
inline size_t dq_accum_workspace_bytes(const AttentionBackwardParams& p) {
  return dq_accum_bytes(p) +
         static_cast<size_t>(p.total_q) * static_cast<size_t>(p.heads) * sizeof(uint32_t);
}
enum DqRowsState : uint32_t {
  kDqRowsUntouched = 0,  // cleared by the Delta pass: no block has stored the rows
  kDqRowsStoring = 1,    // claimed: the first block's bulk copies are on their way
  kDqRowsStored = 2,     // in memory: later blocks add to them
};

#define VARPACK_DECLARE_INSTANCE(T, D)                                                      \
  template <>                                                                              \
  void run_forward<T, D>(const AttentionParams& params, void* workspace, cudaStream_t stream, \
                         const ForwardLaunch& launch);                                      \
  template <>                                                                              \
  void run_backward<T, D>(const AttentionBackwardParams& params, void* workspace,          \
                          cudaStream_t stream);
VARPACK_DECLARE_INSTANCE(__nv_bfloat16, 64)
VARPACK_DECLARE_INSTANCE(__nv_bfloat16, 96)
VARPACK_DECLARE_INSTANCE(__nv_bfloat16, 128)
VARPACK_DECLARE_INSTANCE(__nv_bfloat16, 256)
VARPACK_DECLARE_INSTANCE(__half, 64)
VARPACK_DECLARE_INSTANCE(__half, 96)
VARPACK_DECLARE_INSTANCE(__half, 128)
VARPACK_DECLARE_INSTANCE(__half, 256)
#undef VARPACK_DECLARE_INSTANCE

}  // namespace varpack::cuda
