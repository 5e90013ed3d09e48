// The checks every registration of varpack::merge_partial shares (schema and CPU implementation in
// merge_op.cpp, CUDA in cuda/merge_cuda_op.cpp): c10::ValueError naming the tensor at fault.
#pragma once

#include <ATen/core/Tensor.h>

namespace varpack::op {

void check_merge_inputs(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& o,
                        const at::Tensor& l);

}  // namespace varpack::op
