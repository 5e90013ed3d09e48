// Backward kernel instance: bf16, head dim 96; the Hopper two-pass backward (on d128's tiles)
// where it serves the device, else the sm_80 kernels in both modes.
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/hopper_backward_launch.cuh"
#include "attn/cuda/hopper_path.h"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_backward<__nv_bfloat16, 96>(const AttentionBackwardParams& params, void* workspace,
                                     cudaStream_t stream) {
  if (use_hopper_kernels())
    launch_hopper_backward<__nv_bfloat16, 96>(params, workspace, stream);
  else launch_backward<__nv_bfloat16, 96>(params, workspace, stream);
}

}  // namespace varpack::cuda
