// Backward kernel instance: f16, head dim 256; the sm_80 kernels in both modes on every device
// (the Hopper kernel is built for head dims 64 and 128 only).
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_backward<__half, 256>(const AttentionBackwardParams& params, void* workspace,
                               cudaStream_t stream) {
  launch_backward<__half, 256>(params, workspace, stream);
}

}  // namespace varpack::cuda
