// tile_shapes' variants of head dim 96 (tile_variants.h).
#include "attn/cuda/experiments/tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/hopper_forward.cuh"

namespace varpack::cuda::tuning {

std::vector<Variant> d96_variants() {
  using T = __nv_bfloat16;
  return {
    // Head dim 96: the Hopper kernel on d128's tiles (columns past 96 zero).
    {"mma fwd d96 (sm_80)", [](auto& p, void*) { launch_forward<T, 96>(p, nullptr); }, true, 96},
    {"wgmma fwd d96 (lib, d128 tiles)", [](auto& p, void*) { launch_hopper_forward<T, 96>(p, nullptr, work_counter); }, true, 96},
    {"wgmma fwd d96 one Q, block per work (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, true, true>>(p, nullptr); }, true, 96},
    {"wgmma fwd d96 softcap (lib)", [](auto& p, void*) { launch_hopper_forward<T, 96>(p, nullptr, work_counter); }, true, 96, true},
    {"wgmma fwd d96 block per work", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<96>>(p, nullptr); }, true, 96},
    {"wgmma fwd d96 warp-copied out", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, true, false, 1, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
    {"wgmma fwd d96 chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, false, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
    {"wgmma fwd d96 Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, true, true, 2, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
    {"wgmma fwd d96 lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, true, true, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
    // The mma.sync d96 backward (atomic dQ; the library's on sm_80) and the Hopper ones: the
    // two passes (the deterministic mode's), then atomic dQ (the dQ products on d128's columns,
    // 96 of each row added), with the next tile's scores issued ahead (the library's) and not.
    {"mma bwd d96 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward<T, 96>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 two passes (lib det)", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardConfig<96>>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 two passes, pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<128, 64, 2, 96, false, true>>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 (lib, atomic)", [](auto& p, void* ws) { launch_hopper_backward<T, 96>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 all-thread prologue", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true>>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 atomic, not ahead", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96>>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 shared dQ-empty (before)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, true, true, false>>(p, ws, nullptr); }, false, 96},
    // The cleared accumulator (as at d128: tile_variants_d128_backward.cu).
    {"wgmma bwd d96 cleared accumulator", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, false>>(p, ws, nullptr); }, false, 96},
    // The library's shape before DqOwnKeysFirst (2026-12-05): dQ's k-steps all after the dS-ready
    // barrier.
    {"wgmma bwd d96 dQ after dS-ready (before)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, true, true, true>>(p, ws, nullptr); }, false, 96},
    // Timing probe, dQ wrong on purpose: the library's kernel without dQ's bulk stores and
    // reductions (BackwardProbe::kNoDqWrites; as at d128).
    {"wgmma bwd d96 probe: no dQ writes (wrong dQ)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, true, true, true, true, BackwardProbe::kNoDqWrites>>(p, ws, nullptr); }, false, 96},
    // Softcap: the library's.
    {"wgmma bwd d96 softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 96>(p, ws, nullptr); }, false, 96, true},
    {"wgmma bwd d96 softcap, dQ after dS-ready (before)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, true, true, true>>(p, ws, nullptr); }, false, 96, true},
  };
}

}  // namespace varpack::cuda::tuning
