// tile_shapes' variants of head dim 128, the forward (tile_variants.h): the library's shapes and launches, and
// shapes that differ from them in named fields (hopper_*_configs.cuh).
// The timing probes of 2026-12-05 (BackwardProbe) and the variants of paths src/ no longer has
// (Q by cp.async, no ping-pong): commit aa6a6df (bench/results/decisions.md: backward-probes).
#include "tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "shape_launches.cuh"

namespace varpack::cuda::tuning {
namespace {

struct LazyRescale : ForwardD128 { static constexpr bool kLazyRescale = true; };
struct ChainReductions : ForwardD128 { static constexpr bool kTreeReduce = false; };
// The output copied out by the warps; one Q buffer, two do not fit beside its scratch.
struct WarpCopiedOut : ForwardD128 {
  static constexpr bool kTmaOut = false;
  static constexpr int kQBuffers = 1;
};
struct PerScoreMask : ForwardD128 { static constexpr bool kRowLimitMask = false; };

void library(const AttentionBackwardParams& p, ForwardLaunch launch) {
  launch_hopper_forward<__nv_bfloat16, 128>(p, nullptr, work_counter, launch);
}

}  // namespace

std::vector<Variant> d128_forward_variants() {
  using T = __nv_bfloat16;
  constexpr auto kChunks = ForwardOrder::kByChunks, kSequence = ForwardOrder::kBySequence;
  return {
    {"mma fwd (lib sm_80)", [](auto& p, void*) { launch_forward<T, 128>(p, nullptr); }, true, 128},
    {"wgmma fwd pp (lib)", [](auto& p, void*) { library(p, {}); }, true, 128},
    {"wgmma fwd 1 head/block", [](auto& p, void*) { library(p, {1}); }, true, 128},
    {"wgmma fwd 2 heads/block", [](auto& p, void*) { library(p, {2}); }, true, 128},
    {"wgmma fwd 4 heads/block", [](auto& p, void*) { library(p, {4}); }, true, 128},
    {"wgmma fwd 8 heads/block", [](auto& p, void*) { library(p, {8}); }, true, 128},
    {"wgmma fwd by chunks", [=](auto& p, void*) { library(p, {0, kChunks}); }, true, 128},
    {"wgmma fwd by sequence", [=](auto& p, void*) { library(p, {0, kSequence}); }, true, 128},
    {"wgmma fwd block per work", [](auto& p, void*) { library(p, {0, ForwardOrder::kAuto, false}); }, true, 128},
    {"wgmma fwd lazy rescale", [](auto& p, void*) { forward_shape<LazyRescale>(p); }, true, 128},
    {"wgmma fwd chain reductions", [](auto& p, void*) { forward_shape<ChainReductions>(p); }, true, 128},
    {"wgmma fwd warp-copied out", [](auto& p, void*) { forward_shape<WarpCopiedOut>(p); }, true, 128},
    {"wgmma fwd per-score mask", [](auto& p, void*) { forward_shape<PerScoreMask>(p); }, true, 128},
    {"wgmma fwd softcap (lib)", [](auto& p, void*) { library(p, {}); }, true, 128, true},
    {"wgmma fwd softcap per-score mask", [](auto& p, void*) { forward_shape<PerScoreMask>(p); }, true, 128, true},
    {"wgmma fwd softcap lazy rescale", [](auto& p, void*) { forward_shape<LazyRescale>(p); }, true, 128, true},
  };
}

}  // namespace varpack::cuda::tuning
