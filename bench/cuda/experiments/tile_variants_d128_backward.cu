// tile_shapes' variants of head dim 128, the backward (tile_variants.h): the library's shapes and launches, and
// shapes that differ from them in named fields (hopper_*_configs.cuh).
// The timing probes of 2026-12-05 (BackwardProbe) and the variants of paths src/ no longer has
// (Q by cp.async, no ping-pong): commit aa6a6df (bench/results/decisions.md: backward-probes).
#include "tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "shape_launches.cuh"

namespace varpack::cuda::tuning {
namespace {

struct StoresDs32 : AtomicBackwardD128 { static constexpr bool kStmatrixDs = false; };
struct ThreadsPrologue : AtomicBackwardD128 { static constexpr bool kTmaPrologue = false; };
struct ScoresAfterProducts : AtomicBackwardD128 { static constexpr bool kIssueAhead = false; };
struct SharedDqEmpty : AtomicBackwardD128 { static constexpr bool kSplitDqEmpty = false; };
struct DqOwnKeysFirst : AtomicBackwardD128 { static constexpr bool kDqOwnKeysFirst = true; };
struct ClearedAccumulator : AtomicBackwardD128 { static constexpr bool kClaimDqRows = false; };
struct TwoPassTmaPrologue : BackwardD128 { static constexpr bool kTmaPrologue = true; };
struct TwoPassPingPong : BackwardD128 { static constexpr bool kPingPong = true; };

}  // namespace

std::vector<Variant> d128_backward_variants() {
  using T = __nv_bfloat16;
  return {
    // Atomic-dQ mode (max|diff| against the first: the order of the dQ sums differs).
    {"mma bwd atomic 4w q32 (lib sm_80)", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvTile<128, 4, 32>>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 128>(p, ws, nullptr); }, false, 128},
    {"wgmma bwd softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 128>(p, ws, nullptr); }, false, 128, true},
    {"wgmma bwd 32-bit dS stores", [](auto& p, void* ws) { atomic_shape<StoresDs32>(p, ws); }, false, 128},
    {"wgmma bwd all-thread prologue", [](auto& p, void* ws) { atomic_shape<ThreadsPrologue>(p, ws); }, false, 128},
    {"wgmma bwd scores after products", [](auto& p, void* ws) { atomic_shape<ScoresAfterProducts>(p, ws); }, false, 128},
    {"wgmma bwd shared dQ-empty", [](auto& p, void* ws) { atomic_shape<SharedDqEmpty>(p, ws); }, false, 128},
    {"wgmma bwd softcap shared dQ-empty", [](auto& p, void* ws) { atomic_shape<SharedDqEmpty>(p, ws); }, false, 128, true},
    {"wgmma bwd dQ own keys first", [](auto& p, void* ws) { atomic_shape<DqOwnKeysFirst>(p, ws); }, false, 128},
    {"wgmma bwd cleared accumulator", [](auto& p, void* ws) { atomic_shape<ClearedAccumulator>(p, ws); }, false, 128},
    // Deterministic mode: Hopper dK/dV, then the wgmma dQ pass.
    {"wgmma det bwd (lib)", [](auto& p, void* ws) { auto d = p; d.deterministic = true; launch_hopper_backward<T, 128>(d, ws, nullptr); }, false, 128},
    {"wgmma det bwd tma prologue", [](auto& p, void* ws) { two_pass_shape<TwoPassTmaPrologue>(p, ws); }, false, 128},
    {"wgmma det bwd, dK/dV pp", [](auto& p, void* ws) { two_pass_shape<TwoPassPingPong>(p, ws); }, false, 128},
  };
}

}  // namespace varpack::cuda::tuning
