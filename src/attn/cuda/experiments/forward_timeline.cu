// Experiment (built with -DVARPACK_FORWARD_TIMELINE; `scripts/gpu_run.sh timeline` runs it): where
// the Hopper forward's consumer warpgroups spend a loop tile's clocks, without and with softcap
// (30), from the clock64() sums that hopper_forward.cuh's VARPACK_FORWARD_STAMP adds up per
// multiprocessor (ForwardEvent). The library's d128 forward (bf16, causal, 16 heads, persistent),
// 10 calls a point after 3 warm-up calls; the stamps cost time of their own, so the call's ms is
// printed beside them (compare tile_shapes' for the uninstrumented kernel). With ping-pong a
// consumer's softmax must fit in the other consumer's products (S = Q K^T and O += P V of its 64
// rows, about 1,024 clocks at the dense peak); its turn wait shows where it does not.
// Run: ./forward_timeline [points, default 64x1k,16x4k,4x16k,mixed]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "attn/cuda/bench_problem.h"
#include "attn/cuda/check_cuda.h"
#include "attn/cuda/experiments/timeline_run.h"
#include "attn/cuda/hopper_forward.cuh"

namespace {

using namespace varpack;
using namespace varpack::cuda;

// The library's d128 config as a type of this file's own, so that the instrumented kernel is
// instantiated here only (the library's archive holds the uninstrumented one).
struct TimelineConfig : HopperForwardConfig<128> {};

}  // namespace

int main(int argc, char** argv) {
  const bench::BenchProblem problem(16, 128, 65536);
  int* work_counter = nullptr;
  CHECK_CUDA(cudaMalloc(&work_counter, sizeof(int)));
  constexpr int kCalls = 10;
  const auto points = timeline_points(argc > 1 ? argv[1] : "64x1k,16x4k,4x16k,mixed");
  for (const float softcap : {0.f, 30.f})
    for (const TimelinePoint& pt : points) {
      double flops = 0;
      AttentionParams p = problem.causal_params(pt.lens, &flops);
      p.softcap = softcap;
      const auto t = run_timeline(
          g_forward_timeline,
          [&] {
            launch_hopper_forward_with<__nv_bfloat16, TimelineConfig>(
                p, nullptr, 0, ForwardOrder::kAuto, work_counter);
          },
          kCalls);
      const double items = static_cast<double>(t.sum[kItems]);  // warpgroup items
      const double tiles = static_cast<double>(t.sum[kLoopTiles]);
      std::printf("== %s, softcap %.0f: %.3f ms a call (instrumented), %.0f TFLOP/s; %.0f "
                  "warpgroup items a call, %.0f clocks an item, %.2f loop tiles an item\n",
                  pt.name.c_str(), softcap, t.ms / kCalls, flops * kCalls / (t.ms * 1e-3) / 1e12,
                  items / kCalls, items > 0 ? t.span(kItemStart, kItemEnd) / items : 0.0,
                  items > 0 ? tiles / items : 0.0);
      if (tiles > 0)
        std::printf("per loop tile, clocks: K/V wait %.0f | turn wait %.0f | issue %.0f | S wait "
                    "%.0f | softmax %.0f | P V wait %.0f | rescale + pack %.0f\n",
                    t.span(kTileStart, kTileLoaded) / tiles,
                    t.span(kTileLoaded, kTileTurn) / tiles,
                    t.span(kTileTurn, kTileIssued) / tiles,
                    t.span(kTileIssued, kTileScores) / tiles,
                    t.span(kTileScores, kTileSoftmax) / tiles,
                    t.span(kTileSoftmax, kTileProducts) / tiles,
                    t.span(kTileProducts, kTileDone) / tiles);
    }
  CHECK_CUDA(cudaFree(work_counter));
  return 0;
}
