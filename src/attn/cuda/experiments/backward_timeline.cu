// Experiment (built with -DVARPACK_BACKWARD_TIMELINE; `scripts/gpu_run.sh timeline` runs it):
// where the Hopper atomic backward's roles spend their clocks, per key block and per query tile of
// its loop, from the clock64() sums that hopper_backward.cuh's VARPACK_BACKWARD_STAMP adds up per
// multiprocessor (BackwardEvent). The library's d128 atomic backward (bf16, causal, 16 heads), and
// an experiment's config beside it where one is added to kConfigs (the dQ-from-registers,
// tensor-reduction, DeferDq and ConvertDq experiments of 2026-12-05 were, bench/results/cuda.md;
// their stamps compare phases within a config, not configs' totals), 10 calls a point after
// 3 warm-up calls; the stamps cost time of their own, so the call's ms is printed beside them
// (compare tile_shapes' "wgmma bwd (lib)" for the uninstrumented kernel). At the dense peak a loop
// tile's ten 64 x 64 x 128 products (five a compute warpgroup) take about 2,560 clocks of the SM.
// Each config first runs once at a point with a 20 s deadline; one that hangs is named ("HANG:
// <config> at <point>") and the program exits with status 3.
// Run: ./backward_timeline [points, default 64x1k,16x4k,4x16k,mixed [configs, default all]]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "attn/cuda/bench_problem.h"
#include "attn/cuda/check_cuda.h"
#include "attn/cuda/experiments/timeline_run.h"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/instances.h"

namespace {

using namespace varpack;
using namespace varpack::cuda;

// The configs as types of this file's own, so that the instrumented kernels are instantiated here
// only (the library's archive holds the uninstrumented one of the library's config).
struct LibraryConfig : HopperAtomicBackwardConfig<128> {};
// tile_shapes' "wgmma bwd shared dQ-empty (before)": the library's before SplitDqEmpty.
struct SharedDqEmptyConfig : HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true,
                                                true, true, false> {};

struct TimedConfig {
  const char* name;
  void (*launch)(const AttentionBackwardParams&, void*, cudaStream_t);
};
const TimedConfig kConfigs[] = {
    {"lib", launch_hopper_backward_atomic_with<__nv_bfloat16, LibraryConfig>},
    {"shared", launch_hopper_backward_atomic_with<__nv_bfloat16, SharedDqEmptyConfig>},
};

// Whether the comma-separated list names `name` as one of its items.
bool listed(const std::string& list, const std::string& name) {
  return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  const int heads = 16, d = 128;
  const int64_t rows = 65536;
  const bench::BenchProblem problem(heads, d, rows);
  void* ws = nullptr;
  {
    // Delta, then the fp32 dQ accumulator (with its state words), sized for these rows.
    AttentionBackwardParams sized;
    sized.heads = heads;
    sized.head_dim = d;
    sized.total_q = rows;
    CHECK_CUDA(cudaMalloc(&ws, delta_workspace_bytes(sized) + dq_accum_workspace_bytes(sized)));
  }
  constexpr int kCalls = 10;
  const std::string configs = argc > 2 ? argv[2] : "";  // empty: every config
  // An empty point list (argv[1] "") is the default one, so that configs can be named alone.
  const bool points_given = argc > 1 && argv[1][0] != '\0';
  for (const TimelinePoint& pt :
       timeline_points(points_given ? argv[1] : "64x1k,16x4k,4x16k,mixed")) {
    double flops = 0;
    const AttentionBackwardParams p = problem.causal_params(pt.lens, &flops);
    launch_forward<__nv_bfloat16, 128>(p, nullptr);  // out and lse for the backward
    for (const TimedConfig& config : kConfigs) {
      if (!configs.empty() && !listed(configs, config.name)) continue;
      config.launch(p, ws, nullptr);  // once with a deadline: an experiment's barriers may hang
      bench::finish_or_exit(20.0, config.name, pt.name);
      const auto t = run_timeline(
          g_backward_timeline, [&] { config.launch(p, ws, nullptr); }, kCalls);
      const double blocks = static_cast<double>(t.sum[kComputeBlocks]);  // warpgroup blocks
      const double tiles = static_cast<double>(t.sum[kScoreTiles]);      // warpgroup tiles
      const double reduced = static_cast<double>(t.sum[kReduceTiles]);
      const double refills = static_cast<double>(t.sum[kRefills]);
      std::printf("== %s, %s: %.3f ms a call with the kernel's Delta and dQ passes "
                  "(instrumented), %.0f TFLOP/s; %.0f key blocks a call, %.2f query tiles a "
                  "block\n",
                  pt.name.c_str(), config.name, t.ms / kCalls,
                  flops * kCalls / (t.ms * 1e-3) / 1e12, blocks / 2 / kCalls, tiles / blocks);
      if (blocks <= 0 || tiles <= 0) continue;
      std::printf("per block, clocks (a compute warpgroup): K/V wait %.0f | loop %.0f (%.0f a "
                  "tile) | dK/dV out %.0f\n",
                  t.span(kComputeStart, kKvLanded) / blocks, t.span(kKvLanded, kLoopDone) / blocks,
                  t.span(kKvLanded, kLoopDone) / tiles, t.span(kLoopDone, kComputeEnd) / blocks);
      std::printf("per tile, scores: stage wait %.0f | issue S, dP %.0f | previous dK wait %.0f | "
                  "S wait %.0f | exp + mask %.0f | dP wait %.0f | dS + pack %.0f\n",
                  t.span(kScoresStart, kStageLanded) / tiles,
                  t.span(kStageLanded, kScoresIssued) / tiles,
                  t.span(kScoresIssued, kPreviousDkDone) / tiles,
                  t.span(kPreviousDkDone, kSLanded) / tiles, t.span(kSLanded, kPDone) / tiles,
                  t.span(kPDone, kDpLanded) / tiles, t.span(kDpLanded, kScoresDone) / tiles);
      std::printf("per tile, products: issue dV %.0f | dS-ready wait %.0f | issue dQ, dK %.0f | "
                  "dV, dQ wait %.0f | dQ-buffer wait %.0f | dQ store + hand-off %.0f; between "
                  "products and the next scores %.0f\n",
                  t.span(kProductsStart, kDvIssued) / tiles,
                  t.span(kDvIssued, kDsReadyPassed) / tiles,
                  t.span(kDsReadyPassed, kDqDkIssued) / tiles,
                  t.span(kDqDkIssued, kDvDqLanded) / tiles,
                  t.span(kDvDqLanded, kDqEmptyPassed) / tiles,
                  t.span(kDqEmptyPassed, kProductsDone) / tiles,
                  (t.span(kKvLanded, kLoopDone) - t.span(kScoresStart, kScoresDone) -
                   t.span(kProductsStart, kProductsDone)) /
                      tiles);
      if (reduced > 0)
        std::printf("per tile, the first reducing warp: dQ wait %.0f | issue %.0f | read wait %.0f "
                    "(%.0f tiles a call)\n",
                    t.span(kReduceStart, kReduceFull) / reduced,
                    t.span(kReduceFull, kReduceIssued) / reduced,
                    t.span(kReduceIssued, kReduceRead) / reduced, reduced / kCalls);
      if (refills > 0)
        std::printf("per refill, the producer: stage-empty wait %.0f (%.0f refills a call)\n",
                    t.span(kRefillStart, kStageEmptied) / refills, refills / kCalls);
    }
  }
  CHECK_CUDA(cudaFree(ws));
  return 0;
}
