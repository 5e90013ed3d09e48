// EXPERIMENT (timeline of the Hopper atomic backward's blocks): built with
// -DVARPACK_BACKWARD_TIMELINE, each block stamps clock64 at its phases (hopper_backward.cuh's
// VARPACK_STAMP); this prints, per point, the mean cycles of each phase and the gap on a
// multiprocessor between one block's end and the next block's start.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/bench_problem.h"
#include "attn/cuda/check_cuda.h"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"

namespace {
using namespace varpack;
using namespace varpack::cuda;
using T = __nv_bfloat16;

struct TmaPrologue128 : HopperAtomicBackwardConfig<128> {
  static constexpr bool kTmaPrologue = true;
};

constexpr int kEvents = 10;

void report(const char* name, int64_t blocks) {
  std::vector<long long> t(static_cast<size_t>(blocks) * kEvents);
  CHECK_CUDA(cudaMemcpyFromSymbol(t.data(), g_backward_timeline, t.size() * sizeof(long long)));
  auto at = [&](int64_t b, int e) { return t[b * kEvents + e]; };
  double search = 0, scores0 = 0, loop = 0, per_tile = 0, epilogue = 0, reducers = 0, loads = 0;
  int64_t n = 0, tiles = 0, empty = 0;
  std::map<long long, std::vector<std::pair<long long, long long>>> per_sm;  // (start, end)
  long long first = INT64_MAX, last = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const long long iters = at(b, 7);
    if (iters < 0) {
      ++empty;
      per_sm[at(b, 6)].push_back({at(b, 0), at(b, 1)});
      continue;
    }
    if (iters == 0) continue;
    ++n;
    tiles += iters;
    search += at(b, 1) - at(b, 0);
    loads += at(b, 2) - at(b, 1);
    scores0 += at(b, 3) - at(b, 2);
    loop += at(b, 4) - at(b, 3);
    if (iters > 1) per_tile += double(at(b, 4) - at(b, 3)) / iters;
    epilogue += at(b, 5) - at(b, 4);
    reducers += at(b, 8) - at(b, 4);
    const long long end = std::max(at(b, 5), at(b, 8));
    per_sm[at(b, 6)].push_back({at(b, 0), end});
  }
  double gap = 0;
  int64_t gaps = 0;
  double busy = 0, span = 0;
  for (auto& [sm, v] : per_sm) {
    std::sort(v.begin(), v.end());
    for (size_t i = 0; i + 1 < v.size(); ++i) {
      gap += v[i + 1].first - v[i].second;
      ++gaps;
    }
    for (auto& [s, e] : v) busy += e - s;
    span += v.back().second - v.front().first;
    first = std::min(first, v.front().first);
    last = std::max(last, v.back().second);
  }
  std::printf(
      "%-28s blocks %lld (+%lld empty), tiles/block %.2f; mean cycles: search+issue %.0f, "
      "loads landed %.0f, first scores %.0f, loop %.0f (%.0f/tile), epilogue %.0f, reducers' "
      "tail %.0f; gap between blocks on an SM %.0f; busy/span %.3f\n",
      name, (long long)n, (long long)empty, double(tiles) / n, search / n, loads / n,
      scores0 / n, loop / n, per_tile / n, epilogue / n, reducers / n, gaps ? gap / gaps : 0.0,
      busy / span);
}
}  // namespace

int main() {
  const int heads = 16, d = 128;
  const int64_t rows = 65536;
  const bench::BenchProblem problem(heads, d, rows);
  void* ws;
  {
    AttentionBackwardParams sized;
    sized.heads = heads;
    sized.head_dim = d;
    sized.total_q = rows;
    CHECK_CUDA(cudaMalloc(&ws, delta_workspace_bytes(sized) + dq_accum_workspace_bytes(sized)));
  }
  struct Point {
    std::string name;
    std::vector<int32_t> lens;
  };
  const std::vector<Point> points{{"64x1k", std::vector<int32_t>(64, 1024)},
                                  {"16x4k", std::vector<int32_t>(16, 4096)},
                                  {"pad10%", bench::padded_rows(16, 4096, 0.10, 7)},
                                  {"mixed", {4096, 300, 2000, 17, 1024, 3000, 129, 777, 4096, 64}}};
  for (const Point& pt : points) {
    double flops = 0;
    const AttentionBackwardParams p = problem.causal_params(pt.lens, &flops);
    launch_forward<T, 128>(p, nullptr);
    const int64_t blocks = slot_count(p.total_k, p.batch, 128) * p.kv_heads;
    for (int variant = 0; variant < 2; ++variant) {
      auto run = [&] {
        if (variant == 0)
          launch_hopper_backward_atomic_with<T, HopperAtomicBackwardConfig<128>>(p, ws, nullptr);
        else
          launch_hopper_backward_atomic_with<T, TmaPrologue128>(p, ws, nullptr);
      };
      for (int i = 0; i < 5; ++i) run();
      const float ms = bench::median_ms(run, 20);
      run();
      CHECK_CUDA(cudaDeviceSynchronize());
      const std::string name = pt.name + (variant == 0 ? " lib " : " tma prologue ") +
                               std::to_string(ms).substr(0, 5) + "ms";
      report(name.c_str(), blocks);
    }
  }
  return 0;
}
