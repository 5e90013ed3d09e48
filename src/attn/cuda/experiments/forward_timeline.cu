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
#include <cstring>
#include <string>
#include <vector>

#include "attn/cuda/bench_problem.h"
#include "attn/cuda/check_cuda.h"
#include "attn/cuda/hopper_forward.cuh"

namespace {

using namespace varpack;
using namespace varpack::cuda;

struct Point {
  std::string name;
  std::vector<int32_t> lens;
};

// The library's d128 config as a type of this file's own, so that the instrumented kernel is
// instantiated here only (the library's archive holds the uninstrumented one).
struct TimelineConfig : HopperForwardConfig<128> {};

}  // namespace

int main(int argc, char** argv) {
  const std::string wanted = argc > 1 ? argv[1] : "64x1k,16x4k,4x16k,mixed";
  const std::vector<Point> all{{"64x1k", std::vector<int32_t>(64, 1024)},
                               {"16x4k", std::vector<int32_t>(16, 4096)},
                               {"4x16k", std::vector<int32_t>(4, 16384)},
                               {"mixed", {4096, 300, 2000, 17, 1024, 3000, 129, 777, 4096, 64}}};
  const bench::BenchProblem problem(16, 128, 65536);
  int* work_counter = nullptr;
  CHECK_CUDA(cudaMalloc(&work_counter, sizeof(int)));
  constexpr int kCalls = 10;
  for (const float softcap : {0.f, 30.f})
    for (const Point& pt : all) {
      if (wanted.find(pt.name) == std::string::npos) continue;
      double flops = 0;
      AttentionParams p = problem.causal_params(pt.lens, &flops);
      p.softcap = softcap;
      auto call = [&] {
        launch_hopper_forward_with<__nv_bfloat16, TimelineConfig>(
            p, nullptr, 0, ForwardOrder::kAuto, work_counter);
      };
      for (int i = 0; i < 3; ++i) call();
      CHECK_CUDA(cudaDeviceSynchronize());
      static unsigned long long sums[256][kForwardEvents];
      std::memset(sums, 0, sizeof sums);
      CHECK_CUDA(cudaMemcpyToSymbol(g_forward_timeline, sums, sizeof sums));
      cudaEvent_t a, b;
      CHECK_CUDA(cudaEventCreate(&a));
      CHECK_CUDA(cudaEventCreate(&b));
      CHECK_CUDA(cudaEventRecord(a));
      for (int i = 0; i < kCalls; ++i) call();
      CHECK_CUDA(cudaEventRecord(b));
      CHECK_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
      CHECK_CUDA(cudaMemcpyFromSymbol(sums, g_forward_timeline, sizeof sums));
      // Over all multiprocessors: an event's total, and a pair's summed differences (both events
      // of a pair are stamped on the same multiprocessor, by the same thread).
      unsigned long long total[kForwardEvents] = {};
      for (const auto& row : sums)
        for (int e = 0; e < kForwardEvents; ++e) total[e] += row[e];
      auto span = [&](int from, int to) { return static_cast<double>(total[to] - total[from]); };
      const double items = static_cast<double>(total[kItems]);  // warpgroup items
      const double tiles = static_cast<double>(total[kLoopTiles]);
      std::printf("== %s, softcap %.0f: %.3f ms a call (instrumented), %.0f TFLOP/s; %.0f "
                  "warpgroup items a call, %.0f clocks an item, %.2f loop tiles an item\n",
                  pt.name.c_str(), softcap, ms / kCalls, flops * kCalls / (ms * 1e-3) / 1e12,
                  items / kCalls, items > 0 ? span(kItemStart, kItemEnd) / items : 0.0,
                  items > 0 ? tiles / items : 0.0);
      if (tiles > 0)
        std::printf("per loop tile, clocks: K/V wait %.0f | turn wait %.0f | issue %.0f | S wait "
                    "%.0f | softmax %.0f | P V wait %.0f | rescale + pack %.0f\n",
                    span(kTileStart, kTileLoaded) / tiles, span(kTileLoaded, kTileTurn) / tiles,
                    span(kTileTurn, kTileIssued) / tiles, span(kTileIssued, kTileScores) / tiles,
                    span(kTileScores, kTileSoftmax) / tiles,
                    span(kTileSoftmax, kTileProducts) / tiles,
                    span(kTileProducts, kTileDone) / tiles);
      CHECK_CUDA(cudaEventDestroy(a));
      CHECK_CUDA(cudaEventDestroy(b));
    }
  CHECK_CUDA(cudaFree(work_counter));
  return 0;
}
