// Tensor-side glue shared by every registration of the varpack::varlen_fwd / varlen_bwd operators
// (CPU in attention_op.cpp, CUDA in cuda/*.cpp): argument checks whose messages name the argument
// at fault, and AttentionParams filled from tensors. The schema itself is declared once, at the top
// of attention_op.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <string>

#include "varpack/attention.h"
#include "varpack/error.h"

namespace varpack::op {

// Pieces of error messages, joined from std::to_string: "torch.bfloat16"; "[12, 4, 8]" as torch
// prints a shape (or strides).
std::string dtype_name(at::ScalarType t);
std::string list_of(c10::IntArrayRef values);
std::string shape_of(const at::Tensor& t);

// Maps a torch dtype to the kernels' DType; throws c10::ValueError naming `name` for any other.
DType dtype_of(const at::Tensor& t, const char* name);

// Shapes, dtypes, devices and the last-dim stride of the forward's inputs. Content of cu_seqlens is
// not read here (it may live on the GPU); host implementations check it with check_host_seqlens.
void check_forward_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                          int64_t max_seqlen_q, int64_t max_seqlen_k);
// The forward's checks plus dout, out and lse against q.
void check_backward_inputs(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                           const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                           int64_t max_seqlen_q, int64_t max_seqlen_k);

// Pointers, int64 strides and scalars for the kernels. out [total_q, heads, d] and lse [heads, total_q]
// must be allocated by the caller (any strides with a unit last-dim stride for out).
AttentionParams forward_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                               int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale,
                               bool causal, int64_t window_left, int64_t window_right, double softcap,
                               at::Tensor& out, at::Tensor& lse);
AttentionBackwardParams backward_params(const at::Tensor& dout, const at::Tensor& q,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& out, const at::Tensor& lse,
                                        const at::Tensor& cu_seqlens_q,
                                        const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                                        int64_t max_seqlen_k, double softmax_scale, bool causal,
                                        int64_t window_left, int64_t window_right, double softcap,
                                        bool deterministic, at::Tensor& dq, at::Tensor& dk,
                                        at::Tensor& dv);

// Runs `fn`, turning a varpack::Error into c10::ValueError (Python ValueError) with the same message.
template <typename Fn>
void rethrow_as_value_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    C10_THROW_ERROR(ValueError, e.what());
  }
}

}  // namespace varpack::op
