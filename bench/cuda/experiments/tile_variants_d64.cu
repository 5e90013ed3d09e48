// tile_shapes' variants of head dim 64 (tile_variants.h): the library's shapes and launches, and
// shapes that differ from them in named fields (hopper_*_configs.cuh).
#include "tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "shape_launches.cuh"

namespace varpack::cuda::tuning {
namespace {

struct WarpCopiedOut : ForwardD64 { static constexpr bool kTmaOut = false; };
struct ChainReductions : ForwardD64 { static constexpr bool kTreeReduce = false; };
struct LazyRescale : ForwardD64 { static constexpr bool kLazyRescale = true; };
struct LongLazyRescale : ForwardD64Long { static constexpr bool kLazyRescale = true; };
struct ClaimedRows : AtomicBackwardD64 { static constexpr bool kClaimDqRows = true; };
struct TmaPrologue : AtomicBackwardD64 { static constexpr bool kTmaPrologue = true; };

}  // namespace

std::vector<Variant> d64_variants() {
  using T = __nv_bfloat16;
  return {
    {"mma fwd d64 (lib sm_80)", [](auto& p, void*) { launch_forward<T, 64>(p, nullptr); }, true, 64},
    {"wgmma fwd d64 (lib below 4096 queries)", [](auto& p, void*) { forward_shape<ForwardD64>(p); }, true, 64},
    {"wgmma fwd d64 softcap (lib)", [](auto& p, void*) { launch_hopper_forward<T, 64>(p, nullptr, work_counter); }, true, 64, true},
    {"wgmma fwd d64 block per work", [](auto& p, void*) { forward_shape<ForwardD64>(p, {0, ForwardOrder::kAuto, false}); }, true, 64},
    {"wgmma fwd d64 by chunks", [](auto& p, void*) { forward_shape<ForwardD64>(p, {0, ForwardOrder::kByChunks}); }, true, 64},
    {"wgmma fwd d64 warp-copied out", [](auto& p, void*) { forward_shape<WarpCopiedOut>(p); }, true, 64},
    {"wgmma fwd d64 3 consumers (lib past 4096)", [](auto& p, void*) { forward_shape<ForwardD64Long>(p); }, true, 64},
    {"wgmma fwd d64 chain reductions", [](auto& p, void*) { forward_shape<ChainReductions>(p); }, true, 64},
    {"wgmma fwd d64 lazy rescale", [](auto& p, void*) { forward_shape<LazyRescale>(p); }, true, 64},
    {"wgmma fwd d64 3 consumers, lazy rescale", [](auto& p, void*) { forward_shape<LongLazyRescale>(p); }, true, 64},
    {"mma bwd d64 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvConfig<64>>(p, ws, nullptr); }, false, 64},
    {"wgmma bwd d64 (lib, atomic q128)", [](auto& p, void* ws) { launch_hopper_backward<T, 64>(p, ws, nullptr); }, false, 64},
    {"wgmma bwd d64 softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 64>(p, ws, nullptr); }, false, 64, true},
    {"wgmma bwd d64 claimed dQ rows", [](auto& p, void* ws) { atomic_shape<ClaimedRows>(p, ws); }, false, 64},
    {"wgmma bwd d64 tma prologue", [](auto& p, void* ws) { atomic_shape<TmaPrologue>(p, ws); }, false, 64},
    {"wgmma bwd d64 two passes (lib det)", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardConfig<64>>(p, ws, nullptr); }, false, 64},
  };
}

}  // namespace varpack::cuda::tuning
