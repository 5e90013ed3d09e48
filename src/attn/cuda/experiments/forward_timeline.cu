// TIMELINE EXPERIMENT (not for main; built with -DVARPACK_FORWARD_TIMELINE): where the Hopper
// forward's consumer warpgroups spend their clocks, per item (a query tile of one head) and per
// tile of the loop, from the clock64() sums that hopper_forward.cuh's VARPACK_FORWARD_STAMP adds up
// per multiprocessor (ForwardEvent). The library's d128 forward (bf16, causal, 16 heads), 10 calls
// a point after 3 warm-up calls; the stamps cost time of their own, so the call's ms is printed
// beside them (compare tile_shapes' for the uninstrumented kernel).
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
// instantiated here only (the library's archive holds the uninstrumented one under the library's
// config type).
struct TimelineConfig : HopperForwardConfig<128> {};
// The same with PublishAhead, LseLast and FenceCpAsyncOnly.
struct TimelineAllThree
    : HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, true,
                        true, true> {};

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
  for (int config = 0; config < 2; ++config)
  for (const Point& pt : all) {
    if (wanted.find(pt.name) == std::string::npos) continue;
    double flops = 0;
    const AttentionParams p = problem.causal_params(pt.lens, &flops);
    auto call = [&] {
      if (config == 0)
        launch_hopper_forward_with<__nv_bfloat16, TimelineConfig>(p, nullptr, 0,
                                                                  ForwardOrder::kAuto, work_counter);
      else
        launch_hopper_forward_with<__nv_bfloat16, TimelineAllThree>(
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
    // Over all multiprocessors: an event's total, and a pair's summed differences.
    unsigned long long total[kForwardEvents] = {};
    for (const auto& row : sums)
      for (int e = 0; e < kForwardEvents; ++e) total[e] += row[e];
    auto span = [&](int from, int to) { return static_cast<double>(total[to] - total[from]); };
    const double items = static_cast<double>(total[kItems]);
    const double loop_tiles = static_cast<double>(total[kTiles]) - items;
    std::printf("== %s %s: %.3f ms a call (instrumented), %.0f TFLOP/s; %.0f warpgroup items a call, "
                "%.2f tiles an item\n",
                config == 0 ? "library" : "all three", pt.name.c_str(), ms / kCalls, flops * kCalls / (ms * 1e-3) / 1e12, items / kCalls,
                total[kTiles] / items);
    std::printf("per item, clocks: Q wait %.0f | first K wait %.0f | first turn %.0f | first S "
                "%.0f | first softmax %.0f | loop %.0f | last P V %.0f | epilogue %.0f | between "
                "items %.0f\n",
                span(kItemStart, kQLanded) / items, span(kQLanded, kFirstKLanded) / items,
                span(kFirstKLanded, kFirstTurn) / items, span(kFirstTurn, kFirstScores) / items,
                span(kFirstScores, kFirstTileDone) / items, span(kFirstTileDone, kLoopDone) / items,
                span(kLoopDone, kLastProductDone) / items,
                span(kLastProductDone, kItemDone) / items,
                (span(kConsumerStart, kConsumerEnd) - span(kItemStart, kItemDone)) / items);
    const double works = static_cast<double>(total[kWorks]);
    const double publishes = static_cast<double>(total[kPublishes]);
    std::printf("consumer per work taken: wait %.0f clocks (%.0f works a call, %.2f items a work); "
                "epilogue per item: sums and LSE %.0f, output store %.0f; producer per publish: "
                "%.0f clocks, %.2f extra tries (%.0f publishes a call)\n",
                span(kWorkWaitStart, kWorkTaken) / works, works / kCalls, items / works,
                span(kLastProductDone, kStoreStart) / items, span(kStoreStart, kItemDone) / items,
                span(kPublishStart, kPublishDone) / publishes, total[kPublishTries] / publishes,
                publishes / kCalls);
    if (loop_tiles > 0)
      std::printf("per loop tile, clocks: K/V wait %.0f | turn %.0f | S wait %.0f | softmax + "
                  "P V wait %.0f | rescale + pack %.0f\n",
                  span(kTileStart, kTileLoaded) / loop_tiles,
                  span(kTileLoaded, kTileTurn) / loop_tiles,
                  span(kTileTurn, kTileScores) / loop_tiles,
                  span(kTileScores, kTileProducts) / loop_tiles,
                  span(kTileProducts, kTileDone) / loop_tiles);
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
  }
  return 0;
}
