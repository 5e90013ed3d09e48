// Forward kernel instance: bf16, head dim 64.
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_forward<__nv_bfloat16, 64>(const AttentionParams& params, cudaStream_t stream) {
  launch_forward<__nv_bfloat16, 64>(params, stream);
}

}  // namespace varpack::cuda
