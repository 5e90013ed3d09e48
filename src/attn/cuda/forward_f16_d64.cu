// Forward kernel instance: f16, head dim 64.
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_forward<__half, 64>(const AttentionParams& params, cudaStream_t stream) {
  launch_forward<__half, 64>(params, stream);
}

}  // namespace varpack::cuda
