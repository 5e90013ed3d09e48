// tile_shapes' variants of head dim 128, the forward (tile_variants.h).
#include "attn/cuda/experiments/tile_variants.h"

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/hopper_forward.cuh"

namespace varpack::cuda::tuning {

std::vector<Variant> d128_forward_variants() {
  using T = __nv_bfloat16;
  return {
    {"mma fwd (lib sm_80)", [](auto& p, void*) { launch_forward<T, 128>(p, nullptr); }, true, 128},
    {"wgmma fwd pp (lib)", [](auto& p, void*) { launch_hopper_forward<T, 128>(p, nullptr, work_counter); }, true, 128},
    {"wgmma fwd pp, 1 head/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 1); }, true, 128},
    {"wgmma fwd pp, 2 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 2); }, true, 128},
    {"wgmma fwd pp, 4 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 4); }, true, 128},
    // Launched by chunks of sequences, each rank after rank (LaunchOrder; an experiment).
    {"wgmma fwd by chunks", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 0, ForwardOrder::kByChunks); }, true, 128},
    {"wgmma fwd 4 heads/block by chunks", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 4, ForwardOrder::kByChunks); }, true, 128},
    // More heads per block, against the per-head start and end that weigh at 1k. Measured on the
    // H200 (2026-12-02 02:29 UTC), TFLOP/s 4 / 8 / 16 heads: 64 x 1k 388 / 387 / 349, 16 x 4k
    // 538 / 499 / 438, 4 x 16k 580 / 592 / 565 (the rule's 1 head: 565), mixed 407 / 331 / 242.
    {"wgmma fwd 8 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 8); }, true, 128},
    {"wgmma fwd 16 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 16); }, true, 128},
    // O and the row sums rescaled only past a jump of the row maximum (LazyRescale).
    {"wgmma fwd lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, true, true, true, 2>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
    // A row's maximum and sum along one chain instead of pairwise (TreeReduce = false).
    {"wgmma fwd chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, false, true, 2>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
    // The output copied out by the warps (WarpRowsOut) instead of by the TMA unit (with one Q
    // buffer: two do not fit beside its scratch).
    {"wgmma fwd warp-copied out", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
    // The library before 2026-12-02 15:40 UTC (one Q tile, a block per work); the library's
    // config with a block per work, whatever the batch.
    {"wgmma fwd one Q, block per work (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true>>(p, nullptr); }, true, 128},
    {"wgmma fwd block per work", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr); }, true, 128},
    // Persistent with 1, 2 and 4 heads per work (forward_heads_per_block's rule was derived for
    // a block per work).
    {"wgmma fwd persistent 1 head", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 1, ForwardOrder::kAuto, work_counter); }, true, 128},
    {"wgmma fwd persistent 2 heads", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 2, ForwardOrder::kAuto, work_counter); }, true, 128},
    {"wgmma fwd persistent 4 heads", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 4, ForwardOrder::kAuto, work_counter); }, true, 128},
    // The library's config with each score's mask tested per score (RowLimitMask off: d128's
    // library before 2026-12-04 21:30 UTC), without and with softcap.
    {"wgmma fwd per-score mask (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
    {"wgmma fwd softcap per-score mask (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128, true},
    // Q by the producer's cp.async (the library's before 2026-12-03 17:50 UTC; QByTma = false),
    // with and without softcap.
    {"wgmma fwd Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
    {"wgmma fwd softcap, Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128, true},
    {"wgmma fwd softcap (lib)", [](auto& p, void*) { launch_hopper_forward<T, 128>(p, nullptr, work_counter); }, true, 128, true},
    {"wgmma fwd softcap, lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, true, true, true, 2>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128, true},
  };
}

}  // namespace varpack::cuda::tuning
