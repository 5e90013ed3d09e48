// Host entry points of the CUDA attention: argument checks that name the field at fault, and the
// run-time switch from (dtype, head dim) to the compiled instance.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "attn/cuda/forward_launch.h"
#include "attn/cuda/hopper_path.h"
#include "attn/cuda/instances.h"
#include "varpack/attention_cuda.h"
#include "varpack/error.h"

namespace varpack {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw Error("varpack CUDA attention: " + message);
}

void check_tensor(const char* name, const void* ptr, int64_t row_stride, int64_t head_stride) {
  const std::string n(name);
  require(ptr != nullptr, n + " is null");
  require(reinterpret_cast<uintptr_t>(ptr) % 16 == 0,
          n + " must be 16-byte aligned (the kernels copy 8 elements at a time)");
  require(row_stride % 8 == 0 && head_stride % 8 == 0,
          n + " row and head strides must be multiples of 8 elements (got " +
              std::to_string(row_stride) + ", " + std::to_string(head_stride) +
              "); make the tensor contiguous");
}

// Calls f(T{}, std::integral_constant<int, D>{}) for the compiled instance of the params.
template <class F>
void dispatch(const AttentionParams& p, F&& f) {
  const auto with_dim = [&](auto d) {
    if (p.dtype == DType::bf16) f(__nv_bfloat16{}, d);
    else f(__half{}, d);
  };
  switch (p.head_dim) {  // one of the compiled head dims (check_attention_params_cuda)
    case 64: return with_dim(std::integral_constant<int, 64>{});
    case 96: return with_dim(std::integral_constant<int, 96>{});
    case 128: return with_dim(std::integral_constant<int, 128>{});
    default: return with_dim(std::integral_constant<int, 256>{});
  }
}

}  // namespace

void check_attention_params_cuda(const AttentionParams& p) {
  require(p.dtype == DType::bf16 || p.dtype == DType::f16,
          "dtype must be bf16 or f16 (fp32 and fp64 run on the CPU paths)");
  require(
      p.head_dim == 64 || p.head_dim == 96 || p.head_dim == 128 || p.head_dim == 256,
      "head_dim " + std::to_string(p.head_dim) + " is not compiled; supported: 64, 96, 128, 256");
  require(p.heads > 0 && p.kv_heads > 0 && p.heads % p.kv_heads == 0,
          "heads (" + std::to_string(p.heads) + ") must be a positive multiple of kv_heads (" +
              std::to_string(p.kv_heads) + ")");
  require(p.batch >= 0 && p.total_q >= 0 && p.total_k >= 0, "batch, total_q, total_k must be >= 0");
  require(p.batch == 0 || (p.cu_seqlens_q != nullptr && p.cu_seqlens_k != nullptr),
          "cu_seqlens_q and cu_seqlens_k must be device pointers");
  require(p.softcap >= 0.f, "softcap must be >= 0 (0 disables it)");
  // The kernels take the row maximum before scaling (one multiply fewer per score).
  require(p.softmax_scale > 0.f, "softmax_scale must be > 0");
  check_tensor("q", p.q, p.q_row_stride, p.q_head_stride);
  check_tensor("k", p.k, p.k_row_stride, p.k_head_stride);
  check_tensor("v", p.v, p.v_row_stride, p.v_head_stride);
}

size_t attention_forward_workspace_bytes_cuda(const AttentionParams&) { return 16; }

void cuda::attention_forward_cuda(const AttentionParams& p, void* workspace, cudaStream_t stream,
                                  const ForwardLaunch& launch) {
  check_attention_params_cuda(p);
  check_tensor("out", p.out, p.out_row_stride, p.out_head_stride);
  require(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "workspace must be 16-byte aligned");
  dispatch(p, [&](auto t, auto d) {
    cuda::run_forward<decltype(t), decltype(d)::value>(p, workspace, stream, launch);
  });
}

void attention_forward_cuda(const AttentionParams& p, void* workspace, cudaStream_t stream) {
  cuda::attention_forward_cuda(p, workspace, stream, cuda::ForwardLaunch{});
}

void attention_forward_cuda(const AttentionParams& p, cudaStream_t stream) {
  attention_forward_cuda(p, nullptr, stream);
}

size_t attention_backward_workspace_bytes_cuda(const AttentionBackwardParams& p) {
  // Delta = rowsum(dO * O), fp32 [heads, total_q]; the atomic mode adds its fp32 dQ accumulator
  // (dQ's size in fp32, 268 MB at 64k tokens x 16 heads x 64) and the Hopper kernel's state words
  // (instances.h) where its kernels use one.
  const bool two_passes = p.deterministic || (cuda::use_hopper_kernels() &&
                                              cuda::hopper_backward_two_passes_only(p.head_dim));
  if (two_passes) return cuda::delta_workspace_bytes(p);
  return cuda::delta_workspace_bytes(p) + cuda::dq_accum_workspace_bytes(p);
}

void attention_backward_cuda(const AttentionBackwardParams& p, void* workspace,
                             cudaStream_t stream) {
  check_attention_params_cuda(p);
  check_tensor("out", p.out, p.out_row_stride, p.out_head_stride);
  check_tensor("dout", p.dout, p.dout_row_stride, p.dout_head_stride);
  check_tensor("dq", p.dq, p.dq_row_stride, p.dq_head_stride);
  check_tensor("dk", p.dk, p.dk_row_stride, p.dk_head_stride);
  check_tensor("dv", p.dv, p.dv_row_stride, p.dv_head_stride);
  require(p.lse != nullptr, "lse (the forward's log-sum-exp) is required by the backward");
  require(workspace != nullptr || attention_backward_workspace_bytes_cuda(p) == 0,
          "workspace is null; allocate attention_backward_workspace_bytes_cuda bytes");
  require(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "workspace must be 16-byte aligned");
  dispatch(p, [&](auto t, auto d) {
    cuda::run_backward<decltype(t), decltype(d)::value>(p, workspace, stream);
  });
}

}  // namespace varpack
