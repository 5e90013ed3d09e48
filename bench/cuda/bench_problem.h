// What the standalone timing programs (bench_attention_cuda, experiments/tile_shapes)
// share: a median of CUDA-event timings, a deadline for queued work (experiments'
// barrier bugs hang), and one bf16 problem on the device (q, k, v, dout random normal, never
// zeros, which run faster than real data on tensor cores) with causal params over any lengths.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check_cuda.h"
#include "varpack/attention.h"

namespace varpack::bench {

// Median time of `repeats` calls of each of fs after 3 warm-up calls each, in ms (device
// events), the calls interleaved: repeat r times one call of each, starting at fs[r % n], so that
// every variant runs as often after every other and at every stage of the run. Timed one after
// the other instead, identical launches differed by up to 10% with their place in the list
// (tile_shapes on the H200, 2026-12-01: the first Hopper variant after the slower mma.sync one
// ran fastest, 16 x 4k 569 against 519 TFLOP/s for the same launch three places later), more
// than the differences being measured.
inline std::vector<float> interleaved_median_ms(const std::vector<std::function<void()>>& fs,
                                                int repeats) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (const auto& f : fs)
    for (int i = 0; i < 3; ++i) f();
  const size_t n = fs.size();
  std::vector<std::vector<float>> t(n);
  for (int r = 0; r < repeats; ++r)
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (static_cast<size_t>(r) + j) % n;
      CHECK_CUDA(cudaEventRecord(a));
      fs[i]();
      CHECK_CUDA(cudaEventRecord(b));
      CHECK_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
      t[i].push_back(ms);
    }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::vector<float> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v.empty() ? 0.f : v[v.size() / 2]);
  }
  return medians;
}

// Median time of `repeats` calls of f after 3 warm-up calls, in ms (device events).
inline float median_ms(const std::function<void()>& f, int repeats) {
  return interleaved_median_ms({f}, repeats)[0];
}

// Waits for the work queued so far (an event polled every millisecond) up to `seconds`; if it has
// not finished by then (an experiment's barrier bug hangs), prints "HANG: <name> at <point> (not
// finished after N s)", the line scripts/gpu_tune.sh reads, and exits with status 3 at once: the
// stuck kernel holds the device, so there is no cleanup to wait for.
inline void finish_or_exit(double seconds, const std::string& name, const std::string& point) {
  cudaEvent_t done;
  CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(done));
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t state;
  while ((state = cudaEventQuery(done)) == cudaErrorNotReady) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      std::printf("HANG: %s at %s (not finished after %.0f s)\n", name.c_str(), point.c_str(),
                  seconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK_CUDA(state);
  CHECK_CUDA(cudaEventDestroy(done));
}

// Lengths of `rows` rows of `row` tokens drawn uniformly around the mean (seeded), then nudged one
// token at a time until they fill exactly round(rows * row * (1 - rate)) tokens.
inline std::vector<int32_t> padded_rows(int rows, int row, double rate, unsigned seed) {
  std::mt19937 rng(seed);
  const double mean = row * (1 - rate);
  std::uniform_real_distribution<double> u(std::max(1.0, 2 * mean - row),
                                           std::min<double>(row, 2 * mean));
  std::vector<int32_t> lens;
  for (int i = 0; i < rows; ++i) lens.push_back(static_cast<int32_t>(std::lround(u(rng))));
  const int64_t target = std::llround(static_cast<double>(rows) * row * (1 - rate));
  int64_t total = std::accumulate(lens.begin(), lens.end(), int64_t{0});
  for (size_t i = 0; total != target; ++i) {
    const int32_t step = total < target ? 1 : -1;
    int32_t& len = lens[i % lens.size()];
    if (len + step >= 1 && len + step <= row) {
      len += step;
      total += step;
    }
  }
  return lens;
}

// bf16 tensors [rows, heads, head_dim] (no GQA) and room for up to 1023 sequences' cu_seqlens.
// Device memory is held for the program's lifetime (these are one-shot programs).
struct BenchProblem {
  int heads, head_dim;
  int64_t rows;
  void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
  float* lse;
  int32_t* cu_seqlens;

  BenchProblem(int heads_, int head_dim_, int64_t rows_)
      : heads(heads_), head_dim(head_dim_), rows(rows_) {
    const int64_t elems = rows * heads * head_dim;
    for (void** p : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) CHECK_CUDA(cudaMalloc(p, elems * 2));
    CHECK_CUDA(cudaMalloc(&lse, heads * rows * 4));
    CHECK_CUDA(cudaMalloc(&cu_seqlens, 1024 * 4));
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

  // Uploads cu_seqlens for `lens` (at most 1023 sequences, at most `rows` tokens) and returns
  // causal params over them, with a sliding window of window_left keys left of the diagonal where
  // it is not -1; *flops = the forward's useful FLOPs, 4 * heads * d per visible (query, key) pair,
  // a causal sequence without a window counted as len^2 / 2 pairs (as bench_attention_gpu.py
  // counts both).
  AttentionBackwardParams causal_params(const std::vector<int32_t>& lens, double* flops,
                                        int64_t window_left = -1) const {
    std::vector<int32_t> cu_h{0};
    *flops = 0;
    for (int32_t l : lens) {
      cu_h.push_back(cu_h.back() + l);
      const double n = l, w = static_cast<double>(window_left) + 1;  // keys a query sees at most
      const double pairs = window_left < 0 ? n * n / 2
                           : n <= w       ? n * (n + 1) / 2
                                          : w * (w + 1) / 2 + (n - w) * w;
      *flops += 4.0 * heads * head_dim * pairs;
    }
    if (lens.size() > 1023 || cu_h.back() > rows) {
      std::fprintf(stderr,
                   "BenchProblem: %zu sequences of %d tokens in all; at most 1023 sequences and "
                   "%lld tokens fit (make the problem larger)\n",
                   lens.size(), cu_h.back(), static_cast<long long>(rows));
      std::exit(2);
    }
    CHECK_CUDA(cudaMemcpy(cu_seqlens, cu_h.data(), cu_h.size() * 4, cudaMemcpyHostToDevice));
    AttentionBackwardParams p;
    p.dtype = DType::bf16;
    p.q = q; p.k = k; p.v = v; p.out = out; p.lse = lse;
    p.dout = dout; p.dq = dq; p.dk = dk; p.dv = dv;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = heads * head_dim;
    p.dout_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = heads * head_dim;
    p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = head_dim;
    p.dout_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = head_dim;
    p.total_q = p.total_k = cu_h.back();
    p.lse_head_stride = p.total_q;
    p.cu_seqlens_q = p.cu_seqlens_k = cu_seqlens;
    p.batch = static_cast<int64_t>(lens.size());
    p.max_seqlen_q = p.max_seqlen_k = *std::max_element(lens.begin(), lens.end());
    p.heads = p.kv_heads = heads;
    p.head_dim = head_dim;
    p.softmax_scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    p.causal = true;
    p.window_left = window_left;
    return p;
  }
};

}  // namespace varpack::bench
