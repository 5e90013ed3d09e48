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
    // The dQ accumulator cleared by the Delta pass and every block adding (the library kernel
    // before 6978c1e, 2026-12-03).
    {"wgmma bwd cleared accumulator", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false>>(p, ws, nullptr); }, false, 128},
    // dQ added from the compute threads' registers by red.global.add.v2.f32 (HopperBackwardTile's
    // DqByRed: no staging, no reducing warps; the accumulator cleared as in the one above), and
    // with the freed dQ buffers' shared memory as a third load stage. Built, not yet timed (nor
    // the own-keys variants below).
    {"wgmma bwd dQ by red", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd dQ by red, 3 stages", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 3, 128, false, false, true, false, true, false, true, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap dQ by red", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true>>(p, ws, nullptr); }, false, 128, true},
    // The same with each warpgroup adding dQ over its own 64 keys, for all columns
    // (DqOwnKeys: no barrier between the warpgroups in the tile loop; twice the reductions).
    {"wgmma bwd dQ by red, own keys", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd dQ by red, own keys, 3 stages", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 3, 128, false, false, true, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128},
    // ... and taking turns to issue their products (PingPong; the loop then without IssueAhead).
    {"wgmma bwd dQ by red, own keys, pp", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, true, false, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd dQ by red, own keys, pp, 3 stages", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 3, 128, false, true, false, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap dQ by red, own keys", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128, true},
    // The library's shape with a full tile's dQ added by TMA tensor reductions, 32 x 32-float
    // boxes (DqTensorReduce), instead of a bulk reduction per row.
    {"wgmma bwd dQ by tensor reduce", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, false, false, 0, false, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap dQ by tensor reduce", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, false, false, 0, false, true>>(p, ws, nullptr); }, false, 128, true},
    // dQ by red with the idle reducing warps zeroing each tile's rows ahead of the reductions
    // (ZeroDqAhead: no clearing in the Delta pass; the conversion by query tiles). Built, not yet
    // timed.
    {"wgmma bwd dQ by red, zeros ahead", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true, false, false, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd dQ by red, own keys, zeros ahead", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true, true, false, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd dQ by red, own keys, pp, zeros ahead", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, true, false, false, true, false, true, true, true, false, true>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap dQ by red, zeros ahead", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true, false, false, true>>(p, ws, nullptr); }, false, 128, true},
    // With softcap, P^T's exponentials while dP^T's product runs (SoftcapEarlyP; the library's
    // waits for both products first), P^T * slope kept in fp32 registers or in fp16 pairs.
    {"wgmma bwd softcap, P before dP", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, false, false, 1>>(p, ws, nullptr); }, false, 128, true},
    {"wgmma bwd softcap, P before dP, fp16", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, false, false, 2>>(p, ws, nullptr); }, false, 128, true},
  };
}

}  // namespace varpack::cuda::tuning
