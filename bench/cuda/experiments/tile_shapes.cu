// Tuning experiment (built only with -DVARPACK_CUDA_EXPERIMENTS=ON, run by scripts/gpu_tune.sh):
// times tile shapes of the Hopper (wgmma) forward and the library's atomic-dQ backward against the
// mma.sync library shapes on the benchmark's shapes (bf16, 16 heads, head dims 128, 64, 256 and 96,
// causal; some variants with softcap 30: the backward's timed on the uncapped forward's output and
// lse, its gradients checked by the standalone test), and checks each against the first of its
// kind at its head dim (max |difference|), so that a shape change in hopper_forward_configs.cuh /
// hopper_backward_configs.cuh rests on a measurement.
// Run: ./tile_shapes [repeats [head dim...]]; TUNE_ONLY=text keeps the variants whose name holds
// it, or any of its '|'-separated parts (e.g. "bwd", "(lib|lazy"); TUNE_SKIP=text drops those
// whose name holds one of its parts (after TUNE_ONLY); TUNE_POINTS=16x4k,4x16k keeps
// those points (so that a call's time goes to the variants and points that decide something);
// TUNE_SUSTAIN_S=2 also runs each variant back to back for 2 s a point and prints its time, energy
// (NVML) and power per call there, the state the power cap sets in training (energy_meter.h).
// Each variant first runs once at each point with a deadline: one that has not finished in 20 s
// (a barrier protocol's bug: untested experiments run here first) is named on a line "HANG:
// <name> at <point>" and the program exits with status 3 at once, so that the round's time limit
// does not pass in silence (scripts/gpu_tune.sh then runs the round again without it).
// TUNE_CHECK_ONLY=1 runs each variant once and checks it, no timing, and TUNE_DEADLINE_S=120
// gives that first run 120 s (both for compute-sanitizer: gpu_tune.sh sanitize).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "attn/cuda/backward_kernels.cuh"
#include "bench_problem.h"
#include "check_cuda.h"
#include "energy_meter.h"
#include "tile_variants.h"
#include "attn/cuda/forward_kernel.cuh"

namespace {

using namespace varpack;
using namespace varpack::cuda;
using namespace varpack::cuda::tuning;
using T = __nv_bfloat16;

std::vector<uint16_t> fetch(const void* p, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  CHECK_CUDA(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

double max_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x = static_cast<uint32_t>(a[i]) << 16, y = static_cast<uint32_t>(b[i]) << 16;
    float fx, fy;
    std::memcpy(&fx, &x, 4);
    std::memcpy(&fy, &y, 4);
    const double d = std::abs(static_cast<double>(fx) - fy);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

// Time and energy per call of f over `seconds` of calls queued back to back (the host waits every
// 20 calls, so the queue stays short), after 3 warm-up calls.
struct Sustained {
  double ms = 0, joules = 0;
};
Sustained sustained(const std::function<void()>& f, double seconds,
                    const bench::EnergyMeter& meter) {
  for (int i = 0; i < 3; ++i) f();
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  const uint64_t mj0 = meter.millijoules();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_CUDA(cudaEventRecord(a));
  int calls = 0;
  do {  // at least one call, however short `seconds`
    f();
    if (++calls % 20 == 0) CHECK_CUDA(cudaDeviceSynchronize());
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
  CHECK_CUDA(cudaEventRecord(b));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  const uint64_t mj1 = meter.millijoules();
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return {ms / calls, (mj1 - mj0) / 1000.0 / calls};
}

}  // namespace

namespace varpack::cuda::tuning {
int* work_counter = nullptr;
}  // namespace varpack::cuda::tuning

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 10;
  // The head dims to time (all four unless listed: ./tile_shapes 10 128 64).
  std::vector<int> head_dims;
  for (int i = 2; i < argc; ++i) head_dims.push_back(std::atoi(argv[i]));
  if (head_dims.empty()) head_dims = {128, 64, 256, 96};
  const int heads = 16;
  // The mma.sync shapes were settled on 2026-11-30 (see ForwardConfig / DkdvConfig / DqConfig);
  // their library shapes stay here as the baseline of the Hopper (wgmma) shapes. Each variant runs
  // at its head dim and is checked against the first of its kind there. The forward's variants of
  // a tile shape run persistent, as the library does (given the work counter), but those named
  // "block per work" and the heads-per-block and launch-order ones (a block per work; until
  // 2026-12-03 most tile-shape variants were, against the library's persistent kernel).
  std::vector<Variant> variants;
  for (auto* part : {d128_forward_variants, d128_backward_variants, d64_variants, d256_variants,
                     d96_variants}) {
    std::vector<Variant> some = part();
    variants.insert(variants.end(), std::make_move_iterator(some.begin()),
                    std::make_move_iterator(some.end()));
  }
  struct Point {
    std::string name;
    std::vector<int32_t> lens;
    int64_t window_left = -1;  // a sliding window of that many keys left of the diagonal
    // Fewer kv heads than q heads (GQA: the first kv_heads of the problem's k and v; dK and dV
    // are written there, the rest of their buffers left as they were), 0 for as many.
    int kv_heads = 0;
  };
  std::vector<Point> points{{"64x1k", std::vector<int32_t>(64, 1024)},
                            {"16x4k", std::vector<int32_t>(16, 4096)},
                            {"4x16k", std::vector<int32_t>(4, 16384)},
                            {"window2k", std::vector<int32_t>(4, 16384), 2048},  // 4 x 16k
                            {"2x32k", std::vector<int32_t>(2, 32768)},
                            {"mixed", {4096, 300, 2000, 17, 1024, 3000, 129, 777, 4096, 64}},
                            {"pad3%", bench::padded_rows(16, 4096, 0.03, 7)},
                            {"pad10%", bench::padded_rows(16, 4096, 0.10, 7)},
                            {"pad25%", bench::padded_rows(16, 4096, 0.25, 7)},
                            {"pad50%", bench::padded_rows(16, 4096, 0.50, 7)},
                            {"pad75%", bench::padded_rows(16, 4096, 0.75, 7)},
                            {"pad90%", bench::padded_rows(16, 4096, 0.90, 7)},
                            // Few rows, for compute-sanitizer (scripts/gpu_tune.sh sanitize): partial
                            // tiles, a tile-sized sequence, one of a single row; and with 4 q
                            // heads to a kv head.
                            {"small", {300, 17, 129, 64, 1, 200, 65}},
                            {"smallgqa", {300, 17, 129, 64, 1, 200, 65}, -1, 4}};
  const int64_t rows = 65536;
  CHECK_CUDA(cudaMalloc(&work_counter, sizeof(int)));
  void* ws;
  {
    // Sized for the atomic mode at the most rows and the largest head dim: Delta, then the fp32
    // dQ accumulator.
    AttentionBackwardParams sized;
    sized.heads = heads;
    sized.head_dim = 256;
    sized.total_q = rows;
    CHECK_CUDA(cudaMalloc(&ws, delta_workspace_bytes(sized) + dq_accum_workspace_bytes(sized)));
  }
  // The parts of a list ("a|b", "a,b"): kept where a name holds one of them.
  auto holds_one_of = [](const std::string& name, const std::string& list, char separator) {
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(separator, start), list.size());
      if (end > start && name.find(list.substr(start, end - start)) != std::string::npos) return true;
      start = end + 1;
    }
    return false;
  };
  if (const char* only = std::getenv("TUNE_ONLY"))
    variants.erase(std::remove_if(variants.begin(), variants.end(),
                                  [&](const Variant& v) { return !holds_one_of(v.name, only, '|'); }),
                   variants.end());
  if (const char* skip = std::getenv("TUNE_SKIP")) {
    auto skipped = [&](const Variant& v) { return holds_one_of(v.name, skip, '|'); };
    variants.erase(std::remove_if(variants.begin(), variants.end(), skipped), variants.end());
  }
  if (const char* only = std::getenv("TUNE_POINTS"))
    points.erase(std::remove_if(points.begin(), points.end(),
                                [&](const Point& pt) { return !holds_one_of(pt.name, only, ','); }),
                 points.end());
  // The sm_80 library forward, whose output and lse feed every backward variant.
  auto reference_forward = [](const AttentionBackwardParams& p, int d) {
    if (d == 128) launch_forward<T, 128>(p, nullptr);
    else if (d == 96) launch_forward<T, 96>(p, nullptr);
    else if (d == 256) launch_forward<T, 256>(p, nullptr);
    else launch_forward<T, 64>(p, nullptr);
  };
  const bool check_only = std::getenv("TUNE_CHECK_ONLY") != nullptr;
  const char* deadline_env = std::getenv("TUNE_DEADLINE_S");
  const double deadline_s = deadline_env != nullptr ? std::atof(deadline_env) : 20.0;
  const char* sustain_env = std::getenv("TUNE_SUSTAIN_S");
  const double sustain_s = sustain_env != nullptr ? std::atof(sustain_env) : 0.0;
  const bench::EnergyMeter meter;
  if (sustain_s > 0 && !meter.available())
    std::printf("TUNE_SUSTAIN_S: no NVML energy counter here; times only\n");
  std::printf("%-36s %-7s %9s %9s %12s%s\n", "variant", "point", "ms", "TFLOP/s", "max|diff|",
              sustain_s > 0 ? "  sustained: ms, J, W per call" : "");
  int point_number = 0;
  for (const int d : head_dims) {
    const bench::BenchProblem problem(heads, d, rows);
    for (const Point& pt : points) {
      double flops = 0;
      AttentionBackwardParams p = problem.causal_params(pt.lens, &flops, pt.window_left);
      if (pt.kv_heads > 0) p.kv_heads = pt.kv_heads;
      AttentionBackwardParams capped = p;
      capped.softcap = 30.f;
      auto params_of = [&](const Variant& v) -> const AttentionBackwardParams& {
        return v.softcap ? capped : p;
      };
      const int64_t n = p.total_q * heads * d;
      reference_forward(p, d);  // so that the backward variants are timed on real output and lse
      // The head dim's variants timed interleaved (bench::interleaved_median_ms: timed one after
      // the other, a variant's place in the list moved it by up to 10%).
      std::vector<std::function<void()>> calls;
      std::vector<size_t> which;
      for (size_t i = 0; i < variants.size(); ++i)
        if (variants[i].d == d) {
          calls.push_back([&, i] { variants[i].run(params_of(variants[i]), ws); });
          which.push_back(i);
        }
      for (size_t j = 0; j < calls.size(); ++j) {
        calls[j]();
        bench::finish_or_exit(deadline_s, variants[which[j]].name, pt.name);
      }
      const std::vector<float> medians =
          check_only ? std::vector<float>(calls.size(), NAN)
                     : bench::interleaved_median_ms(calls, 2 * repeats);
      std::vector<float> best(variants.size(), INFINITY);
      for (size_t j = 0; j < which.size(); ++j) best[which[j]] = medians[j];
      // Each variant's seconds back to back, the first one a place later at each point, so that
      // none always runs first (coolest) or right after the heaviest.
      std::vector<Sustained> held(variants.size());
      if (sustain_s > 0 && !check_only)
        for (size_t j = 0; j < which.size(); ++j) {
          const size_t k = (j + point_number) % which.size();
          held[which[k]] = sustained(calls[k], sustain_s, meter);
        }
      ++point_number;
      std::vector<uint16_t> ref_out, ref_capped, ref_grads, ref_capped_grads;
      for (size_t i = 0; i < variants.size(); ++i) {
        const Variant& var = variants[i];
        if (var.d != d) continue;
        const float ms = best[i];
        CHECK_CUDA(cudaDeviceSynchronize());
        // The sm_80 library forward's output (and lse) feed every backward variant.
        if (!var.forward && ref_grads.empty()) reference_forward(p, d);
        if (!var.forward) {  // NaNs where this run writes nothing (read back as an infinite diff)
          for (void* grad : {problem.dq, problem.dk, problem.dv})
            CHECK_CUDA(cudaMemset(grad, 0xff, n * sizeof(uint16_t)));
        }
        var.run(params_of(var), ws);  // the output checked is this variant's own
        CHECK_CUDA(cudaDeviceSynchronize());
        std::vector<uint16_t> got = var.forward ? fetch(problem.out, n) : fetch(problem.dq, n);
        if (!var.forward) {
          const auto a = fetch(problem.dk, n), b = fetch(problem.dv, n);
          got.insert(got.end(), a.begin(), a.end());
          got.insert(got.end(), b.begin(), b.end());
        }
        std::vector<uint16_t>& ref = var.forward ? (var.softcap ? ref_capped : ref_out)
                                                 : (var.softcap ? ref_capped_grads : ref_grads);
        if (ref.empty()) ref = got;
        std::printf("%-36s %-7s %9.3f %9.1f %12.3e", var.name.c_str(), pt.name.c_str(), ms,
                    (var.forward ? 1.0 : 2.5) * flops / ms / 1e9, max_diff(ref, got));
        if (sustain_s > 0)
          std::printf("  %9.3f %8.4f %5.0f", held[i].ms, held[i].joules,
                      held[i].joules / (held[i].ms / 1e3));
        std::printf("\n");
        // Row by row, so that a round its caller's time limit cuts short keeps what it measured
        // (stdout into a log file is fully buffered and lost on the kill).
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
