// Backward kernel instance: f16, head dim 64.
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_backward<__half, 64>(const AttentionBackwardParams& params, void* workspace,
                              cudaStream_t stream) {
  launch_backward<__half, 64>(params, workspace, stream);
}

}  // namespace varpack::cuda
