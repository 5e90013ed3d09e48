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
#include <string>

#include "attention_params.h"
#include "merge_op.h"

namespace varpack::op {

namespace {

// The messages are joined from std::string: see attention_params.cpp on ostream in this extension.
[[noreturn]] void fail(const std::string& what) {
  C10_THROW_ERROR(ValueError, "varpack merge_partial: " + what);
}

}  // namespace

void check_merge_inputs(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& o,
                        const at::Tensor& l) {
  if (out.dim() != 3 || out.scalar_type() != at::kFloat)
    fail("out must be float32 [rows, heads, head_dim], got " + dtype_name(out.scalar_type()) + " " + shape_of(out));
  if (o.sizes() != out.sizes())
    fail("o " + shape_of(o) + " must have out's shape " + shape_of(out));
  const std::string want = "[" + std::to_string(out.size(1)) + ", " + std::to_string(out.size(0)) + "]";
  if (lse.scalar_type() != at::kFloat || lse.dim() != 2 || lse.size(0) != out.size(1) || lse.size(1) != out.size(0))
    fail("lse must be float32 [heads, rows] = " + want + ", got " + dtype_name(lse.scalar_type()) + " " + shape_of(lse));
  if (l.scalar_type() != at::kFloat || l.sizes() != lse.sizes())
    fail("l must be float32 " + want + ", got " + dtype_name(l.scalar_type()) + " " + shape_of(l));
  if (!o.is_contiguous() || !l.is_contiguous()) fail("o and l must be contiguous");
  if (out.stride(2) != 1 || out.stride(1) != out.size(2) || (out.size(0) > 1 && lse.stride(1) != 1))
    fail("out's heads and head_dim and lse's rows must be contiguous, got strides " + list_of(out.strides()) +
         " and " + list_of(lse.strides()));
  for (const at::Tensor* t : {&lse, &o, &l})
    if (t->device() != out.device()) fail("every tensor must be on " + out.device().str());
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
