// The varpack::varlen_fwd / varlen_bwd / varlen_attn torch operators: the schema (declared once,
// here) and the CPU implementation over attention_forward_cpu / attention_backward_cpu.
// python/varpack/attention.py adds the fake (meta) implementations and varlen_bwd's refusal of a
// double backward; attention_autograd.cpp the autograd of varlen_fwd and varlen_attn;
// cuda/*.cpp registers the CUDA implementation.
//
// Final schema (the CUDA registration must match it exactly):
//   varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k,
//              SymInt max_seqlen_q, SymInt max_seqlen_k, float softmax_scale, bool causal,
//              SymInt window_left, SymInt window_right, float softcap) -> (Tensor out, Tensor lse)
//   varlen_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,
//              Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k,
//              float softmax_scale, bool causal, SymInt window_left, SymInt window_right,
//              float softcap, bool deterministic) -> (Tensor dq, Tensor dk, Tensor dv)
//   varlen_attn(<varlen_fwd's arguments>, bool deterministic) -> (Tensor out, Tensor lse):
//              flash_attn_varlen_func's operator, varlen_fwd with its autograd in C++
//              (attention_autograd.cpp, which registers every implementation of it).
// C++ kernels take the SymInts as int64_t and the floats as double.
//
// Contract of every implementation (the Python fake implementation mirrors it):
//   out: contiguous, shape and dtype of q; lse: contiguous float32 [heads, total_q];
//   dq, dk, dv: contiguous, like q, k, v.
//   Rows past cu_seqlens_q[-1] (or cu_seqlens_k[-1]) belong to no sequence: they are treated as
//   queries that see no key, so out is 0 and lse is +inf there, and their gradients are 0.
//   The CPU kernels never write those rows, so this file fills them; a CUDA implementation that
//   cannot read cu_seqlens[-1] without a sync allocates out/dq/dk/dv with zeros instead.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "attention_params.h"

namespace varpack::op {
namespace {

// The CPU kernels take float32, float64 and bfloat16 (bf16 in and out, float32 accumulation);
// float16 is a CUDA-only dtype. Called after the shared checks, which accept every dtype of any device.
void check_cpu_dtype(const at::Tensor& q) {
  if (q.scalar_type() == at::kHalf) {
    C10_THROW_ERROR(ValueError,
                    "varpack attention: q is torch.float16, which the CPU kernels do not take; use "
                    "torch.bfloat16 (same size, float32 accumulation), torch.float32 or torch.float64 on the CPU");
  }
}

// Rows [cu_seqlens[-1], rows) of `t` along `dim` get `value`; cu_seqlens is on the host.
void fill_past_end(at::Tensor& t, int64_t dim, const at::Tensor& cu_seqlens, double value) {
  const int64_t valid = cu_seqlens.data_ptr<int32_t>()[cu_seqlens.numel() - 1];
  t.narrow(dim, valid, t.size(dim) - valid).fill_(value);
}

std::tuple<at::Tensor, at::Tensor> varlen_fwd_cpu(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, const at::Tensor& cu_seqlens_q,
                                                  const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                                                  int64_t max_seqlen_k, double softmax_scale, bool causal,
                                                  int64_t window_left, int64_t window_right, double softcap) {
  check_forward_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  check_cpu_dtype(q);
  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat));
  rethrow_as_value_error([&] {
    const AttentionParams p = forward_params(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                             softmax_scale, causal, window_left, window_right, softcap, out, lse);
    // Empty q or k has no data pointer for the kernels; every query then sees no key.
    if (q.numel() == 0 || k.numel() == 0) {
      check_host_seqlens(p);
      out.zero_();
      lse.fill_(std::numeric_limits<double>::infinity());
      return;
    }
    attention_forward_cpu(p, at::get_num_threads());
    fill_past_end(out, 0, cu_seqlens_q, 0.0);
    fill_past_end(lse, 1, cu_seqlens_q, std::numeric_limits<double>::infinity());
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> varlen_bwd_cpu(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, bool causal, int64_t window_left,
    int64_t window_right, double softcap, bool deterministic) {
  check_backward_inputs(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  check_cpu_dtype(q);
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  rethrow_as_value_error([&] {
    const AttentionBackwardParams p =
        backward_params(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, window_left, window_right, softcap, deterministic, dq, dk, dv);
    if (q.numel() == 0 || k.numel() == 0) {
      check_host_seqlens(p);
      dq.zero_();
      dk.zero_();
      dv.zero_();
      return;
    }
    attention_backward_cpu(p, at::get_num_threads());
    fill_past_end(dq, 0, cu_seqlens_q, 0.0);
    fill_past_end(dk, 0, cu_seqlens_k, 0.0);
    fill_past_end(dv, 0, cu_seqlens_k, 0.0);
  });
  return {dq, dk, dv};
}

}  // namespace
}  // namespace varpack::op

TORCH_LIBRARY(varpack, m) {
  m.def(
      "varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
      "SymInt max_seqlen_q, SymInt max_seqlen_k, float softmax_scale, bool causal, "
      "SymInt window_left, SymInt window_right, float softcap) -> (Tensor out, Tensor lse)");
  m.def(
      "varlen_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, "
      "float softmax_scale, bool causal, SymInt window_left, SymInt window_right, float softcap, "
      "bool deterministic) -> (Tensor dq, Tensor dk, Tensor dv)");
  m.def(
      "varlen_attn(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
      "SymInt max_seqlen_q, SymInt max_seqlen_k, float softmax_scale, bool causal, "
      "SymInt window_left, SymInt window_right, float softcap, bool deterministic) "
      "-> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(varpack, CPU, m) {
  m.impl("varlen_fwd", &varpack::op::varlen_fwd_cpu);
  m.impl("varlen_bwd", &varpack::op::varlen_bwd_cpu);
}
