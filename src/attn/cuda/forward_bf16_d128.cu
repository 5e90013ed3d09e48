// Forward kernel instance: bf16, head dim 128.
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_forward<__nv_bfloat16, 128>(const AttentionParams& params, cudaStream_t stream) {
  launch_forward<__nv_bfloat16, 128>(params, stream);
}

}  // namespace varpack::cuda
