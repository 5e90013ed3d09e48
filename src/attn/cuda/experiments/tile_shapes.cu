// Tuning experiment (built only with -DVARPACK_CUDA_EXPERIMENTS=ON, run by scripts/gpu_run.sh):
// times tile shapes of the Hopper (wgmma) forward and the library's atomic-dQ backward against the
// mma.sync library shapes on the benchmark's shapes (bf16, 16 heads, head dims 128, 64, 256 and 96,
// causal; some variants with softcap 30: the backward's timed on the uncapped forward's output and
// lse, its gradients checked by the standalone test), and checks each against the first of its
// kind at its head dim (max |difference|), so that a shape change in HopperForwardConfig /
// HopperBackwardConfig rests on a measurement.
// Run: ./tile_shapes [repeats [head dim...]]; TUNE_ONLY=text keeps the variants whose name holds
// it, or any of its '|'-separated parts (e.g. "bwd", "(lib|lazy"); TUNE_POINTS=16x4k,4x16k keeps
// those points (so that a call's time goes to the variants and points that decide something);
// TUNE_SUSTAIN_S=2 also runs each variant back to back for 2 s a point and prints its time, energy
// (NVML) and power per call there, the state the power cap sets in training (energy_meter.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/hopper_forward.cuh"
#include "attn/cuda/bench_problem.h"
#include "attn/cuda/check_cuda.h"
#include "attn/cuda/experiments/energy_meter.h"

namespace {

using namespace varpack;
using namespace varpack::cuda;
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

struct Variant {
  std::string name;
  std::function<void(const AttentionBackwardParams&, void*)> run;
  bool forward;
  int d;                 // head dim
  bool softcap = false;  // run with softcap 30 (checked against the first such of its direction)
};

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

// The persistent forward's work counter (one int32 of device memory, zeroed by each launch).
int* work_counter = nullptr;

}  // namespace

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
  std::vector<Variant> variants{
      {"mma fwd (lib sm_80)", [](auto& p, void*) { launch_forward<T, 128>(p, nullptr); }, true, 128},
      {"wgmma fwd pp (lib)", [](auto& p, void*) { launch_hopper_forward<T, 128>(p, nullptr, work_counter); }, true, 128},
      {"wgmma fwd pp, 1 head/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 1); }, true, 128},
      {"wgmma fwd pp, 2 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 2); }, true, 128},
      {"wgmma fwd pp, 4 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 4); }, true, 128},
      // Launched by chunks of sequences, each rank after rank (LaunchOrder; an experiment).
      {"wgmma fwd by chunks", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 0, ForwardOrder::kByChunks); }, true, 128},
      {"wgmma fwd 4 heads/block by chunks", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 4, ForwardOrder::kByChunks); }, true, 128},
      // More heads per block, against the per-head start and end that weigh at 1k. Measured on the
      // H200 (2026-12-02 02:29 UTC), TFLOP/s 4 / 8 / 16 heads: 64 x 1k 388 / 387 / 349, 16 x 4k
      // 538 / 499 / 438, 4 x 16k 580 / 592 / 565 (the rule's 1 head: 565), mixed 407 / 331 / 242.
      {"wgmma fwd 8 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 8); }, true, 128},
      {"wgmma fwd 16 heads/block", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 16); }, true, 128},
      // O and the row sums rescaled only past a jump of the row maximum (LazyRescale).
      {"wgmma fwd lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, true, true, true, 2>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
      // A row's maximum and sum along one chain instead of pairwise (TreeReduce = false).
      {"wgmma fwd chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, false, true, 2>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
      // The output copied out by the warps (WarpRowsOut) instead of by the TMA unit (with one Q
      // buffer: two do not fit beside its scratch).
      {"wgmma fwd warp-copied out", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
      // The library before 2026-12-02 15:40 UTC (one Q tile, a block per work); the library's
      // config with a block per work, whatever the batch.
      {"wgmma fwd one Q, block per work (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true>>(p, nullptr); }, true, 128},
      {"wgmma fwd block per work", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr); }, true, 128},
      // Persistent with 1, 2 and 4 heads per work (forward_heads_per_block's rule was derived for
      // a block per work).
      {"wgmma fwd persistent 1 head", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 1, ForwardOrder::kAuto, work_counter); }, true, 128},
      {"wgmma fwd persistent 2 heads", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 2, ForwardOrder::kAuto, work_counter); }, true, 128},
      {"wgmma fwd persistent 4 heads", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<128>>(p, nullptr, 4, ForwardOrder::kAuto, work_counter); }, true, 128},
      // The library's config with each score's mask tested per score (RowLimitMask off: d128's
      // library before 2026-12-04 21:30 UTC), without and with softcap.
      {"wgmma fwd per-score mask (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
      {"wgmma fwd softcap per-score mask (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128, true},
      // Q by the producer's cp.async (the library's before 2026-12-03 17:50 UTC; QByTma = false),
      // with and without softcap.
      {"wgmma fwd Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128},
      {"wgmma fwd softcap, Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, false, true, true, 2, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128, true},
      {"wgmma fwd softcap (lib)", [](auto& p, void*) { launch_hopper_forward<T, 128>(p, nullptr, work_counter); }, true, 128, true},
      {"wgmma fwd softcap, lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 128, true, true, true, 2>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 128, true},
      // Backward, atomic-dQ mode (max|diff| against the first: the order of the dQ sums differs).
      {"mma bwd atomic 4w q32 (lib sm_80)", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvTile<128, 4, 32>>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 128>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 128>(p, ws, nullptr); }, false, 128, true},
      // dS^T by one 32-bit store per register (the library before StmatrixDs).
      {"wgmma bwd 32-bit dS stores (before)", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, false>>(p, ws, nullptr); }, false, 128},
      // The prologue of all threads (K, V and the first query tile by cp.async, then a block-wide
      // wait; the library's before TmaPrologue), and the deterministic mode's dK/dV with TmaPrologue.
      {"wgmma bwd all-thread prologue", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true>>(p, ws, nullptr); }, false, 128},
      {"wgmma det bwd tma prologue", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, false, false, true>>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd, scores after products", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2>>(p, ws, nullptr); }, false, 128},
      // Deterministic mode: Hopper dK/dV, then the wgmma dQ pass.
      {"wgmma det bwd (lib)", [](auto& p, void* ws) { auto d = p; d.deterministic = true; launch_hopper_backward<T, 128>(d, ws, nullptr); }, false, 128},
      {"wgmma det bwd, dK/dV pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<128, 64, 2, 128, false, true>>(p, ws, nullptr); }, false, 128},
      // Head dim 64.
      {"mma fwd d64 (lib sm_80)", [](auto& p, void*) { launch_forward<T, 64>(p, nullptr); }, true, 64},
      {"wgmma fwd d64 (lib below 4096 queries)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<64>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      {"wgmma fwd d64 one Q, block per work (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, true, true>>(p, nullptr); }, true, 64},
      {"wgmma fwd d64 softcap (lib)", [](auto& p, void*) { launch_hopper_forward<T, 64>(p, nullptr, work_counter); }, true, 64, true},
      {"wgmma fwd d64 block per work", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<64>>(p, nullptr); }, true, 64},
      {"wgmma fwd d64 warp-copied out", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, true, false, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      {"wgmma fwd d64 by chunks", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<64>>(p, nullptr, 0, ForwardOrder::kByChunks); }, true, 64},
      {"wgmma fwd d64 3 consumers (lib past 4096)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardLongD64>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      {"wgmma fwd d64 chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, false, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      {"wgmma fwd d64 lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, true, true, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      {"wgmma fwd d64 Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, true, true, 2, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      {"wgmma fwd d64 3 consumers, Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 3, 128, 2, true, 32, 160, 64, 64, false, false, false, 1, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      {"wgmma fwd d64 3 consumers, lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<64, 3, 128, 2, true, 32, 160, 64, 64, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 64},
      // Head dim 256: 64-key tiles, the output staged 64 columns at a time (for room).
      {"mma fwd d256 (sm_80)", [](auto& p, void*) { launch_forward<T, 256>(p, nullptr); }, true, 256},
      {"wgmma fwd d256 (lib, pp)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<256>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
      {"wgmma fwd d256 Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, true, 24, 240, 64, 256, true, true, false, 1, false, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
      {"wgmma fwd d256 chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, true, 24, 240, 64, 256, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
      {"wgmma fwd d256 no pp", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, false, 24, 240, 64>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
      {"wgmma fwd d256 rescale every tile", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<256, 2, 64, 2, true, 24, 240, 64>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 256},
      // The mma.sync d256 backward (atomic dQ; the library's on sm_80) and the Hopper one (two
      // passes, dK/dV split by columns over 64-key blocks).
      {"mma bwd d256 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward<T, 256>(p, ws, nullptr); }, false, 256},
      {"wgmma bwd d256 (lib, two passes)", [](auto& p, void* ws) { launch_hopper_backward<T, 256>(p, ws, nullptr); }, false, 256},
      // The library's (above): S^T and dP^T split by queries between the warpgroups (SplitScores), the
      // next tile's issued ahead; then the same without issuing ahead, and the earlier shapes,
      // where both warpgroups compute all of the scores.
      {"wgmma bwd d256 split scores, no issue-ahead", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true, false, false, true>>(p, ws, nullptr); }, false, 256},
      {"wgmma bwd d256 scores twice, pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true, true>>(p, ws, nullptr); }, false, 256},
      {"wgmma bwd d256 scores twice, no pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true>>(p, ws, nullptr); }, false, 256},
      // Head dim 96: the Hopper kernel on d128's tiles (columns past 96 zero).
      {"mma fwd d96 (sm_80)", [](auto& p, void*) { launch_forward<T, 96>(p, nullptr); }, true, 96},
      {"wgmma fwd d96 (lib, d128 tiles)", [](auto& p, void*) { launch_hopper_forward<T, 96>(p, nullptr, work_counter); }, true, 96},
      {"wgmma fwd d96 one Q, block per work (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, true, true>>(p, nullptr); }, true, 96},
      {"wgmma fwd d96 softcap (lib)", [](auto& p, void*) { launch_hopper_forward<T, 96>(p, nullptr, work_counter); }, true, 96, true},
      {"wgmma fwd d96 block per work", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardConfig<96>>(p, nullptr); }, true, 96},
      {"wgmma fwd d96 warp-copied out", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, true, false, 1, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
      {"wgmma fwd d96 chain reductions", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, false, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
      {"wgmma fwd d96 Q by cp.async (before)", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, false, true, true, 2, true, false>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
      {"wgmma fwd d96 lazy rescale", [](auto& p, void*) { launch_hopper_forward_with<T, HopperForwardTile<128, 2, 128, 2, true, 24, 240, 128, 96, true, true, true, 2, true>>(p, nullptr, 0, ForwardOrder::kAuto, work_counter); }, true, 96},
      // The mma.sync d96 backward (atomic dQ; the library's on sm_80) and the Hopper ones: the
      // two passes (the deterministic mode's), then atomic dQ (the dQ products on d128's columns,
      // 96 of each row added), with the next tile's scores issued ahead (the library's) and not.
      {"mma bwd d96 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward<T, 96>(p, ws, nullptr); }, false, 96},
      {"wgmma bwd d96 two passes (lib det)", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardConfig<96>>(p, ws, nullptr); }, false, 96},
      {"wgmma bwd d96 two passes, pp", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<128, 64, 2, 96, false, true>>(p, ws, nullptr); }, false, 96},
      {"wgmma bwd d96 (lib, atomic)", [](auto& p, void* ws) { launch_hopper_backward<T, 96>(p, ws, nullptr); }, false, 96},
      {"wgmma bwd d96 all-thread prologue", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true>>(p, ws, nullptr); }, false, 96},
      {"wgmma bwd d96 atomic, not ahead", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96>>(p, ws, nullptr); }, false, 96},
      {"mma bwd d64 atomic (lib sm_80)", [](auto& p, void* ws) { launch_backward_atomic_with<T, DkdvConfig<64>>(p, ws, nullptr); }, false, 64},
      {"wgmma bwd d64 (lib, atomic q128)", [](auto& p, void* ws) { launch_hopper_backward<T, 64>(p, ws, nullptr); }, false, 64},
      {"wgmma bwd d64 softcap (lib)", [](auto& p, void* ws) { launch_hopper_backward<T, 64>(p, ws, nullptr); }, false, 64, true},
      // The dQ accumulator cleared by the Delta pass and every block adding (d128's and d96's
      // library kernels before 6978c1e, 2026-12-03), and d64's kernel with claimed dQ rows
      // (HopperBackwardTile's ClaimDqRows).
      {"wgmma bwd cleared accumulator", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false>>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd d96 cleared accumulator", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, false>>(p, ws, nullptr); }, false, 96},
      // dQ added from the compute threads' registers by red.global.add.v2.f32 (HopperBackwardTile's
      // DqByRed: no staging, no reducing warps; the accumulator cleared as in the two above), and
      // with the freed dQ buffers' shared memory as a third load stage. Built, not yet timed (nor
      // the own-keys variants below).
      {"wgmma bwd dQ by red", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true>>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd dQ by red, 3 stages", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 3, 128, false, false, true, false, true, false, true, true>>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd softcap dQ by red", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true>>(p, ws, nullptr); }, false, 128, true},
      {"wgmma bwd d96 dQ by red", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, false, true, true>>(p, ws, nullptr); }, false, 96},
      // The same with each warpgroup adding dQ over its own 64 keys, for all columns
      // (DqOwnKeys: no barrier between the warpgroups in the tile loop; twice the reductions).
      {"wgmma bwd dQ by red, own keys", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd dQ by red, own keys, 3 stages", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 3, 128, false, false, true, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128},
      {"wgmma bwd softcap dQ by red, own keys", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 128, true},
      {"wgmma bwd d96 dQ by red, own keys", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, false, true, true, true>>(p, ws, nullptr); }, false, 96},
      {"wgmma bwd d64 dQ by red", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<64, 128, 2, 64, false, false, false, false, false, false, false, true>>(p, ws, nullptr); }, false, 64},
      {"wgmma bwd d64 claimed dQ rows", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<64, 128, 2, 64, false, false, false, false, false, true>>(p, ws, nullptr); }, false, 64},
      {"wgmma bwd d64 tma prologue", [](auto& p, void* ws) { launch_hopper_backward_atomic_with<T, HopperBackwardTile<64, 128, 2, 64, false, false, false, false, true>>(p, ws, nullptr); }, false, 64},
      {"wgmma bwd d256 all-thread prologue", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardTile<256, 64, 2, 256, true, false, true, true>>(p, ws, nullptr); }, false, 256},
      {"wgmma bwd d64 two passes (lib det)", [](auto& p, void* ws) { launch_hopper_two_passes_with<T, HopperBackwardConfig<64>>(p, ws, nullptr); }, false, 64},
  };
  struct Point {
    std::string name;
    std::vector<int32_t> lens;
    int64_t window_left = -1;  // a sliding window of that many keys left of the diagonal
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
                            {"pad90%", bench::padded_rows(16, 4096, 0.90, 7)}};
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
      const AttentionBackwardParams p = problem.causal_params(pt.lens, &flops, pt.window_left);
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
      const std::vector<float> medians = bench::interleaved_median_ms(calls, 2 * repeats);
      std::vector<float> best(variants.size(), INFINITY);
      for (size_t j = 0; j < which.size(); ++j) best[which[j]] = medians[j];
      // Each variant's seconds back to back, the first one a place later at each point, so that
      // none always runs first (coolest) or right after the heaviest.
      std::vector<Sustained> held(variants.size());
      if (sustain_s > 0)
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
      }
    }
  }
  return 0;
}
