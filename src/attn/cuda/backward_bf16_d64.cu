// Backward kernel instance: bf16, head dim 64.
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_backward<__nv_bfloat16, 64>(const AttentionBackwardParams& params, void* workspace,
                              cudaStream_t stream) {
  launch_backward<__nv_bfloat16, 64>(params, workspace, stream);
}

}  // namespace varpack::cuda
