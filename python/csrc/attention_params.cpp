// Argument checks and AttentionParams for the varlen attention operators, from tensors. The
// messages reach Python users as ValueError: each names the argument, what it is and what is
// expected, in torch's own terms (shapes, dtypes, .contiguous()).
//
// The messages are joined from std::to_string, not std::ostream: an extension linked with a static
// copy of libstdc++ (as the GPU machine's image's compiler wrapper links it) crashed inserting a
// number into an ostringstream (2026-12-02: shape_of, under test_attention.py's input checks; a
// minimal extension's `ostringstream << 5` too), and an error message must not crash.
#include "attention_params.h"

#include <string>

namespace varpack::op {
namespace {

[[noreturn]] void fail(const std::string& what) {
  C10_THROW_ERROR(ValueError, "varpack attention: " + what);
}

void require_3d(const at::Tensor& t, const char* name, const char* layout) {
  if (t.dim() != 3) {
    fail(std::string(name) + " must be 3-D " + layout + ", got shape " + shape_of(t) +
         " (flatten the batch: the varlen layout has no batch dimension)");
  }
}

// Kernels index the head dimension with an implicit unit stride; the other two strides are free.
// (An empty tensor has no elements to index, whatever autograd made its strides.)
void require_unit_last_stride(const at::Tensor& t, const char* name) {
  if (t.numel() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) {
    fail(std::string(name) + " must have a contiguous last dimension (stride 1), got strides " +
         list_of(t.strides()) + "; call .contiguous() on it");
  }
}

void require_same_device(const at::Tensor& t, const char* name, const at::Tensor& q) {
  if (t.device() != q.device()) {
    fail(std::string(name) + " is on " + t.device().str() + " but q is on " + q.device().str() +
         "; move every input to one device");
  }
}

void require_like(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name) {
  if (t.sizes() != like.sizes()) {
    fail(std::string(name) + " has shape " + shape_of(t) + " but " + like_name + " has shape " +
         shape_of(like) + "; they must match");
  }
  if (t.scalar_type() != like.scalar_type()) {
    fail(std::string(name) + " is " + dtype_name(t.scalar_type()) + " but " + like_name + " is " +
         dtype_name(like.scalar_type()) + "; they must have the same dtype");
  }
  require_same_device(t, name, like);
  require_unit_last_stride(t, name);
}

void check_cu_seqlens_tensor(const at::Tensor& cu, const char* name, const at::Tensor& q) {
  if (cu.scalar_type() != at::kInt) {
    fail(std::string(name) + " must be torch.int32, got " + dtype_name(cu.scalar_type()) +
         "; convert it with .to(torch.int32)");
  }
  if (cu.dim() != 1 || cu.numel() < 1) {
    fail(std::string(name) + " must be 1-D with batch + 1 >= 1 entries (cumulative lengths starting at 0), got shape " +
         shape_of(cu));
  }
  if (cu.numel() > 1 && cu.stride(0) != 1) {
    fail(std::string(name) + " must be contiguous; call .contiguous() on it");
  }
  require_same_device(cu, name, q);
}

}  // namespace

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kHalf: return "torch.float16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    default: return c10::toString(t);
  }
}

// "[12, 4, 8]", as torch prints a shape (also strides).
std::string list_of(c10::IntArrayRef values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

std::string shape_of(const at::Tensor& t) { return list_of(t.sizes()); }

DType dtype_of(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::f32;
    case at::kDouble: return DType::f64;
    case at::kBFloat16: return DType::bf16;
    case at::kHalf: return DType::f16;
    default:
      fail(std::string(name) + " is " + dtype_name(t.scalar_type()) +
           "; attention takes torch.float32, torch.float64, torch.bfloat16 or torch.float16");
  }
}

void check_forward_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                          int64_t max_seqlen_q, int64_t max_seqlen_k) {
  require_3d(q, "q", "[total_q, heads, head_dim]");
  require_3d(k, "k", "[total_k, kv_heads, head_dim]");
  require_3d(v, "v", "[total_k, kv_heads, head_dim]");
  dtype_of(q, "q");
  require_unit_last_stride(q, "q");
  require_like(k, "k", v, "v");
  require_same_device(k, "k", q);
  if (k.scalar_type() != q.scalar_type()) {
    fail("k and v are " + dtype_name(k.scalar_type()) + " but q is " + dtype_name(q.scalar_type()) +
         "; q, k and v must have the same dtype");
  }
  const int64_t heads = q.size(1), kv_heads = k.size(1), head_dim = q.size(2);
  if (heads <= 0 || kv_heads <= 0 || head_dim <= 0) {
    fail("q has shape " + shape_of(q) + " and k " + shape_of(k) + "; heads, kv_heads and head_dim must be > 0");
  }
  if (k.size(2) != head_dim) {
    fail("k and v have head_dim " + std::to_string(k.size(2)) + " but q has " + std::to_string(head_dim) +
         " (shape " + shape_of(q) + " vs " + shape_of(k) + ")");
  }
  if (heads % kv_heads != 0) {
    fail("q has " + std::to_string(heads) + " heads, not a multiple of the " + std::to_string(kv_heads) +
         " heads of k and v (grouped-query attention: each kv head serves heads / kv_heads consecutive q heads)");
  }
  check_cu_seqlens_tensor(cu_seqlens_q, "cu_seqlens_q", q);
  check_cu_seqlens_tensor(cu_seqlens_k, "cu_seqlens_k", q);
  if (cu_seqlens_q.numel() != cu_seqlens_k.numel()) {
    fail("cu_seqlens_q has " + std::to_string(cu_seqlens_q.numel()) + " entries and cu_seqlens_k " +
         std::to_string(cu_seqlens_k.numel()) + "; both must have batch + 1 entries");
  }
  if (max_seqlen_q < 0 || max_seqlen_k < 0) {
    fail("max_seqlen_q = " + std::to_string(max_seqlen_q) + " and max_seqlen_k = " + std::to_string(max_seqlen_k) +
         " must be >= 0 (the longest sequence's length, as a Python int)");
  }
}

void check_backward_inputs(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                           const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                           int64_t max_seqlen_q, int64_t max_seqlen_k) {
  check_forward_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  require_like(out, "out", q, "q");
  require_like(dout, "dout", q, "q");
  if (lse.scalar_type() != at::kFloat || lse.dim() != 2 || lse.size(0) != q.size(1) || lse.size(1) != q.size(0)) {
    fail("lse must be torch.float32 of shape [heads, total_q] = [" + std::to_string(q.size(1)) + ", " +
         std::to_string(q.size(0)) + "], got " + dtype_name(lse.scalar_type()) + " of shape " + shape_of(lse) +
         "; pass the lse the forward returned");
  }
  require_same_device(lse, "lse", q);
  require_unit_last_stride(lse, "lse");
}

AttentionParams forward_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                               int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale,
                               bool causal, int64_t window_left, int64_t window_right, double softcap,
                               at::Tensor& out, at::Tensor& lse) {
  AttentionParams p;
  p.dtype = dtype_of(q, "q");
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.q_row_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.k_row_stride = k.stride(0);
  p.k_head_stride = k.stride(1);
  p.v_row_stride = v.stride(0);
  p.v_head_stride = v.stride(1);
  p.out_row_stride = out.stride(0);
  p.out_head_stride = out.stride(1);
  p.lse_head_stride = lse.stride(0);
  p.cu_seqlens_q = cu_seqlens_q.data_ptr<int32_t>();
  p.cu_seqlens_k = cu_seqlens_k.data_ptr<int32_t>();
  p.batch = cu_seqlens_q.numel() - 1;
  p.total_q = q.size(0);
  p.total_k = k.size(0);
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.heads = static_cast<int>(q.size(1));
  p.kv_heads = static_cast<int>(k.size(1));
  p.head_dim = static_cast<int>(q.size(2));
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.softmax_scale_f64 = softmax_scale;
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = static_cast<float>(softcap);
  return p;
}

AttentionBackwardParams backward_params(const at::Tensor& dout, const at::Tensor& q,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& out, const at::Tensor& lse,
                                        const at::Tensor& cu_seqlens_q,
                                        const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                                        int64_t max_seqlen_k, double softmax_scale, bool causal,
                                        int64_t window_left, int64_t window_right, double softcap,
                                        bool deterministic, at::Tensor& dq, at::Tensor& dk,
                                        at::Tensor& dv) {
  // The forward's outputs are read only in the backward; the struct's pointers are non-const.
  at::Tensor out_alias = out, lse_alias = lse;
  AttentionBackwardParams p;
  static_cast<AttentionParams&>(p) =
      forward_params(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                     window_left, window_right, softcap, out_alias, lse_alias);
  p.dout = dout.data_ptr();
  p.dq = dq.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
  p.dout_row_stride = dout.stride(0);
  p.dout_head_stride = dout.stride(1);
  p.dq_row_stride = dq.stride(0);
  p.dq_head_stride = dq.stride(1);
  p.dk_row_stride = dk.stride(0);
  p.dk_head_stride = dk.stride(1);
  p.dv_row_stride = dv.stride(0);
  p.dv_head_stride = dv.stride(1);
  p.deterministic = deterministic;
  return p;
}

}  // namespace varpack::op
