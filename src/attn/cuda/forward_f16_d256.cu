// Forward kernel instance: f16, head dim 256; the sm_80 kernel on every device (the Hopper kernel
// is built for head dims 64 and 128 only).
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/instances.h"

namespace varpack::cuda {

template <>
void run_forward<__half, 256>(const AttentionParams& params, cudaStream_t stream) {
  launch_forward<__half, 256>(params, stream);
}

}  // namespace varpack::cuda
