// How tile_shapes' variants launch a shape of hopper_forward_configs.cuh or
// hopper_backward_configs.cuh (or one derived from it with a field overridden).
#pragma once

#include <cuda_bf16.h>

#include "attn/cuda/forward_launch.h"
#include "attn/cuda/hopper_backward_launch.cuh"
#include "attn/cuda/hopper_forward.cuh"
#include "tile_variants.h"
#include "varpack/attention.h"

namespace varpack::cuda::tuning {

// The forward with shape Shape, persistent unless the launch says otherwise.
template <class Shape>
void forward_shape(const AttentionBackwardParams& p, ForwardLaunch launch = {}) {
  launch_hopper_forward_with<__nv_bfloat16, HopperForwardTile<Shape>>(p, nullptr, launch,
                                                                      work_counter);
}

// The atomic-dQ backward with shape Shape (workspace: attention_backward_workspace_bytes_cuda's).
template <class Shape>
void atomic_shape(const AttentionBackwardParams& p, void* workspace) {
  launch_hopper_backward_atomic_with<__nv_bfloat16, HopperBackwardTile<Shape>>(p, workspace,
                                                                               nullptr);
}

// The two-pass backward with dK/dV shape Shape.
template <class Shape>
void two_pass_shape(const AttentionBackwardParams& p, void* workspace) {
  launch_hopper_two_passes_with<__nv_bfloat16, HopperBackwardTile<Shape>>(p, workspace, nullptr);
}

}  // namespace varpack::cuda::tuning
