// What the kernels' clock64 timelines (forward_timeline.cu, backward_timeline.cu) share: the
// benchmark's points, and a run of a kernel's calls that returns its table of per-multiprocessor
// sums (add_to_multiprocessor_row) added up over all multiprocessors, with the calls' time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attn/cuda/check_cuda.h"

namespace varpack::cuda {

struct TimelinePoint {
  std::string name;
  std::vector<int32_t> lens;
};

// The points of tile_shapes that the timelines time, those whose name `wanted` holds.
inline std::vector<TimelinePoint> timeline_points(const std::string& wanted) {
  const std::vector<TimelinePoint> all{
      {"64x1k", std::vector<int32_t>(64, 1024)},
      {"16x4k", std::vector<int32_t>(16, 4096)},
      {"4x16k", std::vector<int32_t>(4, 16384)},
      {"mixed", {4096, 300, 2000, 17, 1024, 3000, 129, 777, 4096, 64}}};
  std::vector<TimelinePoint> kept;
  for (const TimelinePoint& pt : all)
    if (wanted.find(pt.name) != std::string::npos) kept.push_back(pt);
  return kept;
}

template <int Events>
struct TimelineTotals {
  float ms = 0;                         // all `calls` calls together
  unsigned long long sum[Events] = {};  // each event's sum over all multiprocessors
  // A pair's summed differences: both events of a pair are stamped on the same multiprocessor, by
  // the same thread.
  double span(int from, int to) const { return static_cast<double>(sum[to] - sum[from]); }
};

// 3 warm-up calls, the table cleared, then `calls` calls timed by CUDA events.
template <int Events, class Call>
TimelineTotals<Events> run_timeline(unsigned long long (&table)[256][Events], const Call& call,
                                    int calls) {
  for (int i = 0; i < 3; ++i) call();
  CHECK_CUDA(cudaDeviceSynchronize());
  static unsigned long long sums[256][Events];
  for (auto& row : sums)
    for (auto& v : row) v = 0;
  CHECK_CUDA(cudaMemcpyToSymbol(table, sums, sizeof sums));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  CHECK_CUDA(cudaEventRecord(a));
  for (int i = 0; i < calls; ++i) call();
  CHECK_CUDA(cudaEventRecord(b));
  CHECK_CUDA(cudaEventSynchronize(b));
  TimelineTotals<Events> totals;
  CHECK_CUDA(cudaEventElapsedTime(&totals.ms, a, b));
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  CHECK_CUDA(cudaMemcpyFromSymbol(sums, table, sizeof sums));
  for (const auto& row : sums)
    for (int e = 0; e < Events; ++e) totals.sum[e] += row[e];
  return totals;
}

}  // namespace varpack::cuda
