// The varpack::merge_partial torch operator: one partial attention result (o, l) merged into a
// running one (out, lse) by their log-sum-exp, in place (PartialMerge in varpack/attention_cuda.h
// states the rule). python/varpack/cp_kernels.py merges each context-parallel kernel call's part
// with it. This file declares the schema, the shared checks and the CPU implementation, written in
// ATen ops: it is the reference the CUDA implementation (cuda/merge_cuda_op.cpp) is tested against.
//
//   merge_partial(Tensor(a!) out, Tensor(b!) lse, Tensor o, Tensor l) -> ()
//   out: float32 [rows, heads, d], unit stride along heads and d; lse: float32 [heads, rows], unit
//   stride along rows; o: [rows, heads, d] contiguous; l: float32 [heads, rows] contiguous, +inf
//   (or -inf) where the part saw no key.
#include <ATen/TensorOperators.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/logaddexp.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <limits>

#include "merge_op.h"

namespace varpack::op {

void check_merge_inputs(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& o,
                        const at::Tensor& l) {
  TORCH_CHECK_VALUE(out.dim() == 3 && out.scalar_type() == at::kFloat,
                    "merge_partial: out must be float32 [rows, heads, head_dim], got ", out.sizes(), " ",
                    out.scalar_type());
  TORCH_CHECK_VALUE(o.sizes() == out.sizes(), "merge_partial: o ", o.sizes(), " must have out's shape ",
                    out.sizes());
  const auto rows = out.size(0), heads = out.size(1);
  TORCH_CHECK_VALUE(lse.scalar_type() == at::kFloat && lse.dim() == 2 && lse.size(0) == heads &&
                        lse.size(1) == rows,
                    "merge_partial: lse must be float32 [heads, rows] = [", heads, ", ", rows, "], got ",
                    lse.sizes());
  TORCH_CHECK_VALUE(l.scalar_type() == at::kFloat && l.sizes() == lse.sizes(),
                    "merge_partial: l must be float32 ", lse.sizes(), ", got ", l.sizes(), " ", l.scalar_type());
  TORCH_CHECK_VALUE(o.is_contiguous() && l.is_contiguous(), "merge_partial: o and l must be contiguous");
  TORCH_CHECK_VALUE(out.stride(2) == 1 && out.stride(1) == out.size(2) && (rows < 2 || lse.stride(1) == 1),
                    "merge_partial: out's heads and head_dim and lse's rows must be contiguous");
  for (const at::Tensor* t : {&lse, &o, &l})
    TORCH_CHECK_VALUE(t->device() == out.device(), "merge_partial: every tensor must be on ", out.device());
}

namespace {

void merge_partial_cpu(at::Tensor out, at::Tensor lse, const at::Tensor& o, const at::Tensor& l) {
  check_merge_inputs(out, lse, o, l);
  constexpr double inf = std::numeric_limits<double>::infinity();
  const at::Tensor part = at::where(l.isinf(), -inf, l);
  const at::Tensor fresh = lse == -inf;  // nothing merged yet: out is not read
  const at::Tensor merged = at::where(fresh, part, at::logaddexp(lse, part));
  // Per (row, head), broadcast over head_dim.
  auto per_row = [](const at::Tensor& t) { return t.transpose(0, 1).unsqueeze(-1); };
  const at::Tensor w_old = per_row(at::exp(lse - merged));
  const at::Tensor w_new = per_row(at::exp(part - merged));
  const at::Tensor o_part = o.to(at::kFloat) * w_new;
  const at::Tensor updated =
      at::where(per_row(part == -inf), out, at::where(per_row(fresh), o_part, out * w_old + o_part));
  out.copy_(updated);
  lse.copy_(merged);
}

}  // namespace
}  // namespace varpack::op

TORCH_LIBRARY_FRAGMENT(varpack, m) {
  m.def("merge_partial(Tensor(a!) out, Tensor(b!) lse, Tensor o, Tensor l) -> ()");
}

TORCH_LIBRARY_IMPL(varpack, CPU, m) {
  m.impl("merge_partial", &varpack::op::merge_partial_cpu);
}
