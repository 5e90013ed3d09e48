// tile_shapes' variants of head dim 256 (tile_variants.h).
#include "attn/cuda/experiments/tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/hopper_forward.cuh"

namespace varpack::cuda::tuning {

std::vector<Variant> d256_variants() {
  using T = __nv_bfloat16;
  return {
    // Head dim 256: 64-key tiles, the output staged 64 columns at a time (for room).
    {"mma fwd d256 (sm_80)", [](auto& p, void*) { launch_forward<T, 256>(p, nullptr); }, true, 256},
    {"wgmma fwd d256 (lib, pp)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<256>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
    {"wgmma fwd d256 Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, true, 24, 240, 64, 256, true, true, false, 1, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
    {"wgmma fwd d256 chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, true, 24, 240, 64, 256, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
    {"wgmma fwd d256 no pp", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, false, 24, 240, 64>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
    {"wgmma fwd d256 rescale every tile", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, true, 24, 240, 64>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
    // The mma.sync d256 backward (atomic dQ; the library's on sm_80) and the Hopper one (two
    // passes, dK/dV split by columns over 64-key blocks).
    {"mma bwd d256 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward<T, 256>(p, ws, nullptr); }, false, 256},
    {"wgmma bwd d256 (lib, two passes)", [](auto& p, void* ws) { launch_hopper_backward<T, 256>(p, ws, nullptr); }, false, 256},
    // The library's (above): S^T and dP^T split by queries between the warpgroups (SplitScores), the
    // next tile's issued ahead; then the same without issuing ahead, and the earlier shapes,
    // where both warpgroups compute all of the scores.
    {"wgmma bwd d256 split scores, no issue-ahead", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true, false, false, true>>(p, ws, nullptr); }, false, 256},
    {"wgmma bwd d256 scores twice, pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true, true>>(p, ws, nullptr); }, false, 256},
    {"wgmma bwd d256 scores twice, no pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true>>(p, ws, nullptr); }, false, 256},
    // The prologue of all threads (the library's d256 issues it from the producer: TmaPrologue).
    {"wgmma bwd d256 all-thread prologue", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true, false, true, true>>(p, ws, nullptr); }, false, 256},
  };
}

}  // namespace varpack::cuda::tuning
