// The CUDA implementation of the varpack::varlen_fwd / varlen_bwd operators (schema in
// ../attention_op.cpp): the kernels of src/attn/cuda, queued on torch's current stream. No
// device-to-host copy anywhere: max_seqlen are host ints, cu_seqlens stay on the device, and the
// rows past cu_seqlens[-1] are filled by one small kernel per call that reads cu_seqlens[-1].
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "../attention_params.h"
#include "varpack/attention_cuda.h"

namespace varpack::op {
namespace {

// Zeros in t's rows past cu_seqlens[-1] (t: [rows, ...], contiguous).
PastEndFill zero_tail(at::Tensor& t, const at::Tensor& cu_seqlens) {
  PastEndFill f;
  f.data = t.data_ptr();
  f.total_rows = t.size(0);
  f.row_bytes = f.total_rows > 0 ? t.numel() / f.total_rows * t.element_size() : 0;
  f.cu_seqlens = cu_seqlens.data_ptr<int32_t>();
  f.batch = cu_seqlens.numel() - 1;
  return f;
}

// +inf in each head's rows of lse ([heads, rows], fp32) past cu_seqlens[-1].
PastEndFill infinite_lse_tail(at::Tensor& lse, const at::Tensor& cu_seqlens) {
  PastEndFill f;
  f.data = lse.data_ptr();
  f.row_bytes = 4;
  f.total_rows = lse.size(1);
  f.planes = lse.size(0);
  f.plane_stride = lse.stride(0) * 4;
  f.cu_seqlens = cu_seqlens.data_ptr<int32_t>();
  f.batch = cu_seqlens.numel() - 1;
  f.infinity = true;
  return f;
}

std::tuple<at::Tensor, at::Tensor> varlen_fwd_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    double softmax_scale, bool causal, int64_t window_left, int64_t window_right, double softcap) {
  check_forward_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat));
  rethrow_as_value_error([&] {
    if (q.numel() == 0 || k.numel() == 0) {
      out.zero_();
      lse.fill_(std::numeric_limits<double>::infinity());
      return;
    }
    const AttentionParams p =
        forward_params(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       softmax_scale, causal, window_left, window_right, softcap, out, lse);
    // The work counter of the persistent kernel, through torch's caching allocator.
    at::Tensor workspace =
        at::empty({static_cast<int64_t>(attention_forward_workspace_bytes_cuda(p))},
                  q.options().dtype(at::kByte));
    attention_forward_cuda(p, workspace.data_ptr(), stream);
    const PastEndFill fills[] = {zero_tail(out, cu_seqlens_q),
                                 infinite_lse_tail(lse, cu_seqlens_q)};
    fill_past_end_cuda(fills, 2, stream);
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> varlen_bwd_cuda(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    double softmax_scale, bool causal, int64_t window_left, int64_t window_right, double softcap,
    bool deterministic) {
  check_backward_inputs(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k);
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  rethrow_as_value_error([&] {
    if (q.numel() == 0 || k.numel() == 0) {
      dq.zero_();
      dk.zero_();
      dv.zero_();
      return;
    }
    const AttentionBackwardParams p =
        backward_params(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap,
                        deterministic, dq, dk, dv);
    // Through torch's caching allocator: no cudaMalloc, and ordered on this stream.
    at::Tensor workspace =
        at::empty({static_cast<int64_t>(attention_backward_workspace_bytes_cuda(p))},
                  q.options().dtype(at::kByte));
    attention_backward_cuda(p, workspace.data_ptr(), stream);
    const PastEndFill fills[] = {zero_tail(dq, cu_seqlens_q), zero_tail(dk, cu_seqlens_k),
                                 zero_tail(dv, cu_seqlens_k)};
    fill_past_end_cuda(fills, 3, stream);
  });
  return {dq, dk, dv};
}

}  // namespace
}  // namespace varpack::op

TORCH_LIBRARY_IMPL(varpack, CUDA, m) {
  m.impl("varlen_fwd", &varpack::op::varlen_fwd_cuda);
  m.impl("varlen_bwd", &varpack::op::varlen_bwd_cuda);
}
