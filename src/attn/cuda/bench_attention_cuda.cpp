// Standalone GPU benchmark of the CUDA attention (no torch, so no peers: the same-process
// comparison with torch's kernels is bench/cuda/bench_attention_gpu.py). bf16, 16 heads x 128,
// causal, 64k tokens per call: equal lengths 1k, 4k, 16k and 16 rows of 4096 at several padding
// rates. Median of CUDA-event timings; useful TFLOP/s = 4*H*D*sum(len^2)/2 (backward 2.5x that).
// The backward is timed in both modes: deterministic (2 passes, no atomics) and atomic dQ.
// Run: ./bench_attention_cuda [repeats [point index]] (one point: for profiling under ncu)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "varpack/attention.h"
#include "varpack/attention_cuda.h"
#include "check_cuda.h"

namespace {

// Lengths of 16 rows of `row` tokens whose padding is close to `rate` (seeded, reproducible).
std::vector<int32_t> padded_rows(int rows, int row, double rate, unsigned seed) {
  std::mt19937 rng(seed);
  const double mean = row * (1 - rate);
  std::uniform_real_distribution<double> u(std::max(1.0, 2 * mean - row), std::min<double>(row, 2 * mean));
  std::vector<int32_t> lens;
  for (int i = 0; i < rows; ++i) lens.push_back(static_cast<int32_t>(std::lround(u(rng))));
  return lens;
}

template <class F>
float median_ms(F&& f, int repeats) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < repeats; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    f();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 20;
  const int heads = 16, d = 128;
  struct Point {
    std::string name;
    std::vector<int32_t> lens;
  };
  std::vector<Point> points{{"64 x 1k", std::vector<int32_t>(64, 1024)},
                            {"16 x 4k", std::vector<int32_t>(16, 4096)},
                            {"4 x 16k", std::vector<int32_t>(4, 16384)}};
  for (double rate : {0.03, 0.10, 0.25, 0.50, 0.75, 0.90})
    points.push_back({"16x4096 pad " + std::to_string(static_cast<int>(rate * 100)) + "%",
                      padded_rows(16, 4096, rate, 7)});

  const int64_t max_rows = 65536;
  const int64_t elems = max_rows * heads * d;
  void *q, *k, *v, *out, *dout, *dq, *dk, *dv, *ws;
  float* lse;
  int32_t* cu;
  for (void** p : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) CHECK_CUDA(cudaMalloc(p, elems * 2));
  CHECK_CUDA(cudaMalloc(&lse, heads * max_rows * 4));
  {
    // The largest workspace any point needs: the atomic mode's, at max_rows.
    varpack::AttentionBackwardParams sized;
    sized.heads = heads;
    sized.head_dim = d;
    sized.total_q = max_rows;
    sized.deterministic = false;
    CHECK_CUDA(cudaMalloc(&ws, varpack::attention_backward_workspace_bytes_cuda(sized)));
  }
  CHECK_CUDA(cudaMalloc(&cu, 1024 * 4));
  // Random bf16 inputs (never zeros: zeros run faster than real data on tensor cores).
  {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<uint16_t> h(static_cast<size_t>(elems));
    for (void* p : {q, k, v, dout}) {
      for (auto& x : h) {
        const float f = normal(rng);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        x = static_cast<uint16_t>(bits >> 16);
      }
      CHECK_CUDA(cudaMemcpy(p, h.data(), elems * 2, cudaMemcpyHostToDevice));
    }
  }

  if (argc > 2) {
    const size_t only = static_cast<size_t>(std::atoi(argv[2]));
    points = {points.at(std::min(only, points.size() - 1))};
  }
  std::printf("%-20s %8s %9s %9s %11s %11s %11s %11s %8s\n", "case", "tokens", "fwd ms",
              "fwd TF/s", "bwd det ms", "det TF/s", "bwd atom ms", "atom TF/s", "det/atom");
  for (const Point& pt : points) {
    std::vector<int32_t> cu_h{0};
    double flops = 0;
    for (int32_t l : pt.lens) {
      cu_h.push_back(cu_h.back() + l);
      flops += 4.0 * heads * d * static_cast<double>(l) * l / 2;
    }
    CHECK_CUDA(cudaMemcpy(cu, cu_h.data(), cu_h.size() * 4, cudaMemcpyHostToDevice));
    varpack::AttentionBackwardParams p;
    p.dtype = varpack::DType::bf16;
    p.q = q; p.k = k; p.v = v; p.out = out; p.lse = lse;
    p.dout = dout; p.dq = dq; p.dk = dk; p.dv = dv;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = heads * d;
    p.dout_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = heads * d;
    p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = d;
    p.dout_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = d;
    p.total_q = p.total_k = cu_h.back();
    p.lse_head_stride = p.total_q;
    p.cu_seqlens_q = p.cu_seqlens_k = cu;
    p.batch = static_cast<int64_t>(pt.lens.size());
    p.max_seqlen_q = p.max_seqlen_k = *std::max_element(pt.lens.begin(), pt.lens.end());
    p.heads = p.kv_heads = heads;
    p.head_dim = d;
    p.softmax_scale = 1.f / std::sqrt(static_cast<float>(d));
    p.causal = true;
    const float fwd = median_ms([&] { varpack::attention_forward_cuda(p, nullptr); }, repeats);
    p.deterministic = true;
    const float det = median_ms([&] { varpack::attention_backward_cuda(p, ws, nullptr); }, repeats);
    p.deterministic = false;
    const float atom = median_ms([&] { varpack::attention_backward_cuda(p, ws, nullptr); }, repeats);
    CHECK_CUDA(cudaGetLastError());
    std::printf("%-20s %8lld %9.3f %9.1f %11.3f %11.1f %11.3f %11.1f %8.2f\n", pt.name.c_str(),
                static_cast<long long>(p.total_q), fwd, flops / fwd / 1e9, det,
                2.5 * flops / det / 1e9, atom, 2.5 * flops / atom / 1e9, det / atom);
  }
  return 0;
}
