// Backward kernel instance: f16, head dim 128; the Hopper kernel (both modes) where it serves the
// device.
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/hopper_backward_launch.cuh"
#include "attn/cuda/hopper_path.h"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_backward<__half, 128>(const AttentionBackwardParams& params, void* workspace,
                              cudaStream_t stream) {
  if (use_hopper_kernels())
    launch_hopper_backward<__half, 128>(params, workspace, stream);
  else launch_backward<__half, 128>(params, workspace, stream);
}

}  // namespace varpack::cuda
