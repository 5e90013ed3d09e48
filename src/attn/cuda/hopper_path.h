// Whether the Hopper (wgmma) kernels serve the current device: they are compiled in (the sm_90a
// target, VARPACK_SM90A) and the device has compute capability 9.0. VARPACK_CUDA_KERNELS=mma in
// the environment selects the mma.sync kernels everywhere (to compare the two paths).
#pragma once

namespace varpack::cuda {

bool use_hopper_kernels();

}  // namespace varpack::cuda
