// Forward kernel instance: bf16, head dim 64; the Hopper kernel where it serves the device.
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_forward.cuh"
#include "attn/cuda/hopper_path.h"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_forward<__nv_bfloat16, 64>(const AttentionParams& params, void* workspace,
                                    cudaStream_t stream, const ForwardLaunch& launch) {
  if (use_hopper_kernels())
    launch_hopper_forward<__nv_bfloat16, 64>(params, stream, static_cast<int*>(workspace),
                                             launch);
  else
    launch_forward<__nv_bfloat16, 64>(params, stream);
}

}  // namespace varpack::cuda
