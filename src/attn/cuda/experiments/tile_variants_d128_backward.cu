// tile_shapes' variants of head dim 128, the backward (tile_variants.h).
#include "attn/cuda/experiments/tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/hopper_forward.cuh"

namespace varpack::cuda::tuning {

std::vector<Variant> d128_backward_variants() {
  using T = __nv_bfloat16;
  return {
    // Backward, atomic-dQ mode (max|diff| against the first: the order of the dQ sums differs).
    {"mma bwd atomic 4w q32 (lib sm_80)", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvTile<128, 4, 32>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 128>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 128>(p, ws, nullptr); }, false, 128, true},
    // dS^T by one 32-bit store per register (the library before StmatrixDs).
    {"wgmma bwd 32-bit dS stores (before)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, false>>(p, ws, nullptr); }, false, 128},
    // The prologue of all threads (K, V and the first query tile by cp.async, then a block-wide
    // wait; the library's before TmaPrologue), and the deterministic mode's dK/dV with TmaPrologue.
    {"wgmma bwd all-thread prologue", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma det bwd tma prologue", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, false, false, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd, scores after products", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2>>(p, ws, nullptr); }, false, 128},
    // Deterministic mode: Hopper dK/dV, then the wgmma dQ pass.
    {"wgmma det bwd (lib)", [](auto& p, void* ws) { auto d = p; d.deterministic = true; launch_hopper_backward<T, 128>(d, ws, nullptr); }, false, 128},
    {"wgmma det bwd, dK/dV pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<128, 64, 2, 128, false, true>>(p, ws, nullptr); }, false, 128},
    // The library's shape before SplitDqEmpty (2026-12-05): both compute warpgroups and the
    // reducing warps on one dQ-empty barrier per buffer.
    {"wgmma bwd shared dQ-empty (before)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, false>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap shared dQ-empty (before)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, false>>(p, ws, nullptr); }, false, 128, true},
    // The dQ product's k-steps over the warpgroup's own keys issued before the dS-ready barrier
    // (DqOwnKeysFirst), the other warpgroup's after it.
    {"wgmma bwd dQ own keys first", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap dQ own keys first", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, true>>(p, ws, nullptr); }, false, 128, true},
    // Timing probes, dQ wrong on purpose: the library's kernel without dQ's bulk stores and
    // reductions (BackwardProbe::kNoDqWrites), what any cheaper way of adding dQ could gain.
    {"wgmma bwd probe: no dQ writes (wrong dQ)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, false, BackwardProbe::kNoDqWrites>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap probe: no dQ writes (wrong dQ)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, false, BackwardProbe::kNoDqWrites>>(p, ws, nullptr); }, false, 128, true},
    // What a cluster of two key blocks sharing their query tiles could gain and cost, bounded:
    // each Q/dO tile loaded for two tiles (kHalfQdoLoads; every gradient wrong on purpose), and
    // odd key blocks walking two masked tiles first, as they would in lockstep with the even one
    // (kOddBlocksStartEarly; right results).
    {"wgmma bwd probe: half Q/dO loads (wrong grads)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, false, BackwardProbe::kHalfQdoLoads>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap probe: half Q/dO loads (wrong grads)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, false, BackwardProbe::kHalfQdoLoads>>(p, ws, nullptr); }, false, 128, true},
    {"wgmma bwd probe: odd blocks start early", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, false, BackwardProbe::kOddBlocksStartEarly>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap probe: odd blocks start early", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true, false, BackwardProbe::kOddBlocksStartEarly>>(p, ws, nullptr); }, false, 128, true},
    // The dQ accumulator cleared by the Delta pass and every block adding (the library kernel
    // before 6978c1e, 2026-12-03).
    {"wgmma bwd cleared accumulator", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false>>(p, ws, nullptr); }, false, 128},
  };
}

}  // namespace varpack::cuda::tuning
