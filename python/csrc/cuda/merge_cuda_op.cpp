// The CUDA implementation of varpack::merge_partial (schema and reference in ../merge_op.cpp): one
// launch of merge_partial_cuda on torch's current stream.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../attention_params.h"
#include "../merge_op.h"
#include "varpack/attention_cuda.h"

namespace varpack::op {
namespace {

void merge_partial_cuda_op(at::Tensor out, at::Tensor lse, const at::Tensor& o, const at::Tensor& l) {
  check_merge_inputs(out, lse, o, l);
  const c10::cuda::CUDAGuard guard(out.device());
  PartialMerge m;
  m.out = out.data_ptr<float>();
  m.lse = lse.data_ptr<float>();
  m.o = o.data_ptr();
  m.l = l.data_ptr<float>();
  m.dtype = dtype_of(o, "o");
  m.rows = out.size(0);
  m.heads = static_cast<int>(out.size(1));
  m.head_dim = static_cast<int>(out.size(2));
  m.out_row_stride = out.stride(0);
  m.lse_head_stride = lse.stride(0);
  rethrow_as_value_error([&] { merge_partial_cuda(m, c10::cuda::getCurrentCUDAStream()); });
}

}  // namespace
}  // namespace varpack::op

TORCH_LIBRARY_IMPL(varpack, CUDA, m) {
  m.impl("merge_partial", &varpack::op::merge_partial_cuda_op);
}
