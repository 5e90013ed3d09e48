// The attention's autograd, in C++: varpack::varlen_fwd's, and that of varpack::varlen_attn,
// varlen_fwd with the backward's `deterministic` (the operator behind
// varpack.flash_attn_varlen_func). Until 2026-12-02 varlen_fwd's autograd was registered from
// Python and flash_attn_varlen_func wrapped it in a second, Python autograd.Function for
// `deterministic`: two Python layers, about 80 us of host time per forward call on a 2-core Xeon
// (bench/host_overhead.py), which a short kernel cannot hide. Here the whole path from the Python
// call to the kernels stays in C++. (The schemas are declared with the others, in
// attention_op.cpp.)
//
// Below autograd it is varlen_fwd (deterministic only matters to the backward), so every device
// and the fake tensors of torch.compile reach varlen_fwd's implementations. The backward calls
// varlen_bwd through the dispatcher, whose Python autograd refuses a double backward.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace varpack::op {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<at::Tensor, at::Tensor> call_varlen_fwd(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, c10::SymInt max_seqlen_q, c10::SymInt max_seqlen_k,
    double softmax_scale, bool causal, c10::SymInt window_left, c10::SymInt window_right,
    double softcap) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("varpack::varlen_fwd", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, c10::SymInt, c10::SymInt, double, bool, c10::SymInt,
              c10::SymInt, double)>();
  return op.call(q, k, v, cu_seqlens_q, cu_seqlens_k, std::move(max_seqlen_q),
                 std::move(max_seqlen_k), softmax_scale, causal, std::move(window_left),
                 std::move(window_right), softcap);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_varlen_bwd(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, c10::SymInt max_seqlen_q, c10::SymInt max_seqlen_k,
    double softmax_scale, bool causal, c10::SymInt window_left, c10::SymInt window_right,
    double softcap, bool deterministic) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("varpack::varlen_bwd", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              c10::SymInt, c10::SymInt, double, bool, c10::SymInt, c10::SymInt, double, bool)>();
  return op.call(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, std::move(max_seqlen_q),
                 std::move(max_seqlen_k), softmax_scale, causal, std::move(window_left),
                 std::move(window_right), softcap, deterministic);
}

// The operator below autograd: varlen_fwd.
std::tuple<at::Tensor, at::Tensor> varlen_attn_forward_only(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, c10::SymInt max_seqlen_q, c10::SymInt max_seqlen_k,
    double softmax_scale, bool causal, c10::SymInt window_left, c10::SymInt window_right,
    double softcap, bool /*deterministic: the backward's*/) {
  return call_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, std::move(max_seqlen_q),
                         std::move(max_seqlen_k), softmax_scale, causal, std::move(window_left),
                         std::move(window_right), softcap);
}

class VarlenAttention : public torch::autograd::Function<VarlenAttention> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& cu_seqlens_q,
                               const at::Tensor& cu_seqlens_k, c10::SymInt max_seqlen_q,
                               c10::SymInt max_seqlen_k, double softmax_scale, bool causal,
                               c10::SymInt window_left, c10::SymInt window_right, double softcap,
                               bool deterministic) {
    // Below autograd, straight to the device's kernels (varlen_fwd's Autograd kernel is this
    // function too: without the guard the call would come back here).
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] =
        call_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, window_left, window_right, softcap);
    ctx->save_for_backward({q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k});
    ctx->saved_data["max_seqlen_q"] = std::move(max_seqlen_q);
    ctx->saved_data["max_seqlen_k"] = std::move(max_seqlen_k);
    ctx->saved_data["softmax_scale"] = softmax_scale;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["window_left"] = std::move(window_left);
    ctx->saved_data["window_right"] = std::move(window_right);
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["deterministic"] = deterministic;
    // The kernels have no gradient for the log-sum-exp (neither has FlashAttention's).
    ctx->mark_non_differentiable({lse});
    // Otherwise autograd hands the backward a tensor of zeros for lse (heads x rows fp32, one
    // fill kernel per step: 1.8 us, and a launch gap, at 64 x 1k on the H200) that it never reads.
    // out's gradient may then be undefined too (gradcheck tries that): no gradient for q, k, v.
    ctx->set_materialize_grads(false);
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list result(13);  // one per forward input; only q, k and v have a gradient
    if (!grads[0].defined()) return result;
    const variable_list saved = ctx->get_saved_variables();
    const auto& data = ctx->saved_data;
    // Without create_graph the engine runs this with grad mode off: then straight to the kernels,
    // past varlen_bwd's (Python) autograd layer, which is only there to refuse a double backward.
    std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
    if (!at::GradMode::is_enabled()) below_autograd.emplace();
    // Autograd may hand in an expanded or transposed gradient; the kernels want a unit last stride.
    auto [dq, dk, dv] = call_varlen_bwd(
        grads[0].contiguous(), saved[0], saved[1], saved[2], saved[3], saved[4], saved[5],
        saved[6], data.at("max_seqlen_q").toSymInt(), data.at("max_seqlen_k").toSymInt(),
        data.at("softmax_scale").toDouble(), data.at("causal").toBool(),
        data.at("window_left").toSymInt(), data.at("window_right").toSymInt(),
        data.at("softcap").toDouble(), data.at("deterministic").toBool());
    result[0] = dq;
    result[1] = dk;
    result[2] = dv;
    return result;
  }
};

std::tuple<at::Tensor, at::Tensor> varlen_attn_autograd(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, c10::SymInt max_seqlen_q, c10::SymInt max_seqlen_k,
    double softmax_scale, bool causal, c10::SymInt window_left, c10::SymInt window_right,
    double softcap, bool deterministic) {
  const variable_list outputs = VarlenAttention::apply(
      q, k, v, cu_seqlens_q, cu_seqlens_k, std::move(max_seqlen_q), std::move(max_seqlen_k),
      softmax_scale, causal, std::move(window_left), std::move(window_right), softcap,
      deterministic);
  return {outputs[0], outputs[1]};
}

// varlen_fwd's autograd: varlen_attn's with the default (atomic) backward.
std::tuple<at::Tensor, at::Tensor> varlen_fwd_autograd(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, c10::SymInt max_seqlen_q, c10::SymInt max_seqlen_k,
    double softmax_scale, bool causal, c10::SymInt window_left, c10::SymInt window_right,
    double softcap) {
  return varlen_attn_autograd(q, k, v, cu_seqlens_q, cu_seqlens_k, std::move(max_seqlen_q),
                              std::move(max_seqlen_k), softmax_scale, causal,
                              std::move(window_left), std::move(window_right), softcap,
                              /*deterministic=*/false);
}

}  // namespace
}  // namespace varpack::op

TORCH_LIBRARY_IMPL(varpack, CompositeExplicitAutograd, m) {
  m.impl("varlen_attn", &varpack::op::varlen_attn_forward_only);
}

TORCH_LIBRARY_IMPL(varpack, Autograd, m) {
  m.impl("varlen_fwd", &varpack::op::varlen_fwd_autograd);
  m.impl("varlen_attn", &varpack::op::varlen_attn_autograd);
}
