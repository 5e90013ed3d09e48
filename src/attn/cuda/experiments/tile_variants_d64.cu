// tile_shapes' variants of head dim 64 (tile_variants.h).
#include "attn/cuda/experiments/tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/hopper_forward.cuh"

namespace varpack::cuda::tuning {

std::vector<Variant> d64_variants() {
  using T = __nv_bfloat16;
  return {
    // Head dim 64.
    {"mma fwd d64 (lib sm_80)", [](auto& p, void*) { launch_forward<T, 64>(p, nullptr); }, true, 64},
    {"wgmma fwd d64 (lib below 4096 queries)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<64>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"wgmma fwd d64 one Q, block per work (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, true, true>>(p, nullptr); }, true, 64},
    {"wgmma fwd d64 softcap (lib)", [](auto& p, void*) { launch_hopper_forward<T, 64>(p, nullptr, work_counter); }, true, 64, true},
    {"wgmma fwd d64 block per work", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<64>>(p, nullptr); }, true, 64},
    {"wgmma fwd d64 warp-copied out", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, true, false, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"wgmma fwd d64 by chunks", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<64>>(p, nullptr, 0, ForwardOrder::kByChunks); }, true, 64},
    {"wgmma fwd d64 3 consumers (lib past 4096)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardLongD64>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"wgmma fwd d64 chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, false, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"wgmma fwd d64 lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, true, true, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"wgmma fwd d64 Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, true, true, 2, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"wgmma fwd d64 3 consumers, Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 3, 128, 2, true, 32, 160, 64, 64, false, false, false, 1, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"wgmma fwd d64 3 consumers, lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 3, 128, 2, true, 32, 160, 64, 64, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
    {"mma bwd d64 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvConfig<64>>(p, ws, nullptr); }, false, 64},
    {"wgmma bwd d64 (lib, atomic q128)", [](auto& p, void* ws) { launch_hopper_backward<T, 64>(p, ws, nullptr); }, false, 64},
    {"wgmma bwd d64 softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 64>(p, ws, nullptr); }, false, 64, true},
    // Claimed dQ rows (HopperBackwardTile's ClaimDqRows; d64's library clears the accumulator).
    {"wgmma bwd d64 claimed dQ rows", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<64, 128, 2, 64, false, false, false, false, false, true>>(p, ws, nullptr); }, false, 64},
    // K, V and the first query tile issued by the producer (TmaPrologue; d64's library keeps
    // the prologue of all threads), and the deterministic mode's two passes.
    {"wgmma bwd d64 tma prologue", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<64, 128, 2, 64, false, false, false, false, true>>(p, ws, nullptr); }, false, 64},
    {"wgmma bwd d64 two passes (lib det)", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardConfig<64>>(p, ws, nullptr); }, false, 64},
  };
}

}  // namespace varpack::cuda::tuning
