// What the kernels' launches ask of the current device, each asked once per device: whether the
// Hopper (wgmma) kernels serve it (they are compiled in, the sm_90a target, VARPACK_SM90A, and the
// device has compute capability 9.0; VARPACK_CUDA_KERNELS=mma in the environment selects the
// mma.sync kernels everywhere, to compare the two paths), and its multiprocessors.
#pragma once

namespace varpack::cuda {

bool use_hopper_kernels();

// The current device's multiprocessor count (varpack::Error if CUDA cannot say).
int multiprocessor_count();

// The head dims whose Hopper backward runs as two passes in both modes (dK/dV, then the wgmma dQ
// pass: no fp32 dQ accumulator): d256, whose blocks have no room to stage dQ. d64's, d96's and
// d128's non-deterministic mode accumulates dQ atomically.
constexpr bool hopper_backward_two_passes_only(int head_dim) { return head_dim == 256; }

}  // namespace varpack::cuda
