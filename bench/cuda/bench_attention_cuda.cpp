// Standalone GPU benchmark of the CUDA attention (no torch, so no peers: the same-process
// comparison with torch's kernels is bench/cuda/bench_attention_gpu.py). bf16, 16 heads x 128,
// causal, 64k tokens per call: equal lengths 1k, 4k, 16k, 16 rows of 4096 at several padding
// rates, and 4 x 16k with a sliding window of 2048 keys (point 9). Median of CUDA-event timings;
// useful TFLOP/s = 4*H*D per visible (query, key) pair, sum(len^2)/2 pairs without a window
// (backward 2.5x that).
// The backward is timed in both modes: deterministic (2 passes, no atomics) and atomic dQ.
// Run: ./bench_attention_cuda [repeats [point index [head dim]]] (one point: for profiling under
// ncu; the head dim, default 128, one of 64, 96, 128, 256)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "varpack/attention.h"
#include "varpack/attention_cuda.h"
#include "bench_problem.h"
#include "check_cuda.h"

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 20;
  const int heads = 16, d = argc > 3 ? std::atoi(argv[3]) : 128;
  if (d != 64 && d != 96 && d != 128 && d != 256) {
    std::fprintf(stderr, "bench_attention_cuda: head dim '%s' is not one of 64, 96, 128, 256\n"
                 "usage: bench_attention_cuda [repeats [point index [head dim]]]\n", argv[3]);
    return 2;
  }
  struct Point {
    std::string name;
    std::vector<int32_t> lens;
    int64_t window_left = -1;
  };
  std::vector<Point> points{{"64 x 1k", std::vector<int32_t>(64, 1024)},
                            {"16 x 4k", std::vector<int32_t>(16, 4096)},
                            {"4 x 16k", std::vector<int32_t>(4, 16384)}};
  for (double rate : {0.03, 0.10, 0.25, 0.50, 0.75, 0.90})
    points.push_back({"16x4096 pad " + std::to_string(static_cast<int>(rate * 100)) + "%",
                      varpack::bench::padded_rows(16, 4096, rate, 7)});
  // The peer table's window point (bench_attention_gpu.py). A window of 2048 gives each key block
  // a 4k walk, so 16 x 4k is its peer: ncu put its backward at 99.8% of 16 x 4k's rate per tile
  // computed (bench/results/cuda.md, 2026-12-04 20:10 UTC).
  points.push_back({"4 x 16k window 2048", std::vector<int32_t>(4, 16384), 2048});

  const int64_t max_rows = 65536;
  const varpack::bench::BenchProblem problem(heads, d, max_rows);
  void* ws;
  {
    // The largest workspace any point needs: the atomic mode's, at max_rows.
    varpack::AttentionBackwardParams sized;
    sized.heads = heads;
    sized.head_dim = d;
    sized.total_q = max_rows;
    sized.deterministic = false;
    CHECK_CUDA(cudaMalloc(&ws, varpack::attention_backward_workspace_bytes_cuda(sized)));
  }
  void* forward_ws;  // the persistent forward's work counter
  CHECK_CUDA(cudaMalloc(&forward_ws, varpack::attention_forward_workspace_bytes_cuda({})));

  if (argc > 2) {
    const size_t only = static_cast<size_t>(std::atoi(argv[2]));
    points = {points.at(std::min(only, points.size() - 1))};
  }
  std::printf("%-20s %8s %9s %9s %11s %11s %11s %11s %8s\n", "case", "tokens", "fwd ms",
              "fwd TF/s", "bwd det ms", "det TF/s", "bwd atom ms", "atom TF/s", "det/atom");
  for (const Point& pt : points) {
    double flops = 0;
    varpack::AttentionBackwardParams p = problem.causal_params(pt.lens, &flops, pt.window_left);
    const float fwd = varpack::bench::median_ms([&] { varpack::attention_forward_cuda(p, forward_ws, nullptr); }, repeats);
    p.deterministic = true;
    const float det = varpack::bench::median_ms([&] { varpack::attention_backward_cuda(p, ws, nullptr); }, repeats);
    p.deterministic = false;
    const float atom = varpack::bench::median_ms([&] { varpack::attention_backward_cuda(p, ws, nullptr); }, repeats);
    CHECK_CUDA(cudaGetLastError());
    std::printf("%-20s %8lld %9.3f %9.1f %11.3f %11.1f %11.3f %11.1f %8.2f\n", pt.name.c_str(),
                static_cast<long long>(p.total_q), fwd, flops / fwd / 1e9, det,
                2.5 * flops / det / 1e9, atom, 2.5 * flops / atom / 1e9, det / atom);
  }
  return 0;
}
