// tile_shapes' variants of head dim 96 (tile_variants.h): the library's shapes and launches, and
// shapes that differ from them in named fields (hopper_*_configs.cuh).
#include "tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "shape_launches.cuh"

namespace varpack::cuda::tuning {
namespace {

struct WarpCopiedOut : ForwardD96 {
  static constexpr bool kTmaOut = false;
  static constexpr int kQBuffers = 1;
};
struct ChainReductions : ForwardD96 { static constexpr bool kTreeReduce = false; };
struct LazyRescale : ForwardD96 { static constexpr bool kLazyRescale = true; };
struct TwoPassPingPong : BackwardD96 { static constexpr bool kPingPong = true; };
struct ThreadsPrologue : AtomicBackwardD96 { static constexpr bool kTmaPrologue = false; };
struct NotAhead : AtomicBackwardD96 { static constexpr bool kIssueAhead = false; };
struct SharedDqEmpty : AtomicBackwardD96 { static constexpr bool kSplitDqEmpty = false; };
struct ClearedAccumulator : AtomicBackwardD96 { static constexpr bool kClaimDqRows = false; };
struct DqAfterDsReady : AtomicBackwardD96 { static constexpr bool kDqOwnKeysFirst = false; };

}  // namespace

std::vector<Variant> d96_variants() {
  using T = __nv_bfloat16;
  return {
    // Head dim 96: the Hopper kernels on d128's tiles (columns past 96 zero).
    {"mma fwd d96 (sm_80)", [](auto& p, void*) { launch_forward<T, 96>(p, nullptr); }, true, 96},
    {"wgmma fwd d96 (lib, d128 tiles)", [](auto& p, void*) { forward_shape<ForwardD96>(p); }, true, 96},
    {"wgmma fwd d96 softcap (lib)", [](auto& p, void*) { forward_shape<ForwardD96>(p); }, true, 96, true},
    {"wgmma fwd d96 block per work", [](auto& p, void*) { forward_shape<ForwardD96>(p, {0, ForwardOrder::kAuto, false}); }, true, 96},
    {"wgmma fwd d96 warp-copied out", [](auto& p, void*) { forward_shape<WarpCopiedOut>(p); }, true, 96},
    {"wgmma fwd d96 chain reductions", [](auto& p, void*) { forward_shape<ChainReductions>(p); }, true, 96},
    {"wgmma fwd d96 lazy rescale", [](auto& p, void*) { forward_shape<LazyRescale>(p); }, true, 96},
    {"mma bwd d96 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward<T, 96>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 two passes (lib det)", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardConfig<96>>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 two passes, pp", [](auto& p, void* ws) { two_pass_shape<TwoPassPingPong>(p, ws); }, false, 96},
    {"wgmma bwd d96 (lib, atomic)", [](auto& p, void* ws) { launch_hopper_backward<T, 96>(p, ws, nullptr); }, false, 96},
    {"wgmma bwd d96 all-thread prologue", [](auto& p, void* ws) { atomic_shape<ThreadsPrologue>(p, ws); }, false, 96},
    {"wgmma bwd d96 atomic, not ahead", [](auto& p, void* ws) { atomic_shape<NotAhead>(p, ws); }, false, 96},
    {"wgmma bwd d96 shared dQ-empty", [](auto& p, void* ws) { atomic_shape<SharedDqEmpty>(p, ws); }, false, 96},
    {"wgmma bwd d96 cleared accumulator", [](auto& p, void* ws) { atomic_shape<ClearedAccumulator>(p, ws); }, false, 96},
    {"wgmma bwd d96 dQ after dS-ready", [](auto& p, void* ws) { atomic_shape<DqAfterDsReady>(p, ws); }, false, 96},
    {"wgmma bwd d96 softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 96>(p, ws, nullptr); }, false, 96, true},
    {"wgmma bwd d96 softcap, dQ after dS-ready", [](auto& p, void* ws) { atomic_shape<DqAfterDsReady>(p, ws); }, false, 96, true},
  };
}

}  // namespace varpack::cuda::tuning
