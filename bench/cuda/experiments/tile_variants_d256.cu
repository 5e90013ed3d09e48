// tile_shapes' variants of head dim 256 (tile_variants.h): the library's shapes and launches, and
// shapes that differ from them in named fields (hopper_*_configs.cuh).
#include "tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "shape_launches.cuh"

namespace varpack::cuda::tuning {
namespace {

struct ChainReductions : ForwardD256 { static constexpr bool kTreeReduce = false; };
struct RescaleEveryTile : ForwardD256 { static constexpr bool kLazyRescale = false; };
struct NotAhead : BackwardD256 { static constexpr bool kIssueAhead = false; };
// Both warpgroups computing all of the scores (the shapes before SplitScores), with the threads'
// prologue, with and without ping-pong.
struct ScoresTwice : BackwardD256 {
  static constexpr bool kSplitScores = false, kIssueAhead = false, kTmaPrologue = false;
};
struct ScoresTwicePingPong : ScoresTwice { static constexpr bool kPingPong = true; };
struct ThreadsPrologue : BackwardD256 { static constexpr bool kTmaPrologue = false; };

}  // namespace

std::vector<Variant> d256_variants() {
  using T = __nv_bfloat16;
  return {
    {"mma fwd d256 (sm_80)", [](auto& p, void*) { launch_forward<T, 256>(p, nullptr); }, true, 256},
    {"wgmma fwd d256 (lib, pp)", [](auto& p, void*) { forward_shape<ForwardD256>(p); }, true, 256},
    {"wgmma fwd d256 chain reductions", [](auto& p, void*) { forward_shape<ChainReductions>(p); }, true, 256},
    {"wgmma fwd d256 rescale every tile", [](auto& p, void*) { forward_shape<RescaleEveryTile>(p); }, true, 256},
    {"mma bwd d256 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward<T, 256>(p, ws, nullptr); }, false, 256},
    {"wgmma bwd d256 (lib, two passes)", [](auto& p, void* ws) { launch_hopper_backward<T, 256>(p, ws, nullptr); }, false, 256},
    {"wgmma bwd d256 split scores, no issue-ahead", [](auto& p, void* ws) { two_pass_shape<NotAhead>(p, ws); }, false, 256},
    {"wgmma bwd d256 scores twice, pp", [](auto& p, void* ws) { two_pass_shape<ScoresTwicePingPong>(p, ws); }, false, 256},
    {"wgmma bwd d256 scores twice, no pp", [](auto& p, void* ws) { two_pass_shape<ScoresTwice>(p, ws); }, false, 256},
    {"wgmma bwd d256 all-thread prologue", [](auto& p, void* ws) { two_pass_shape<ThreadsPrologue>(p, ws); }, false, 256},
  };
}

}  // namespace varpack::cuda::tuning
