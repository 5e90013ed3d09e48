// Experiment (`scripts/gpu_tune.sh rates` runs it): the clocks a warp instruction of the softmax's
// special functions takes on one multiprocessor sub-partition (SMSP), in throughput (many
// independent chains) and in latency (one chain), measured by clock64() inside the kernel, so no
// clock-rate conversion enters. Why: softcap's forward runs at ~81% of the uncapped one, and
// whether tanh.approx (MUFU.TANH) issues at the exponential's rate decides what could lift it (a
// tanh from ex2 and a shared reciprocal, or nothing on the MUFU side); the packed f16x2 / bf16x2
// forms compile to two MUFU operations each (nvdisasm), but those may be cheaper ones.
// Run: ./pipe_rates (one block of `warps` warps per multiprocessor, every multiprocessor)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "attn/cuda/hopper_path.h"
#include "check_cuda.h"

namespace {

enum class Op { kEx2, kTanh, kEx2AndTanh, kEx2F16x2, kTanhBf16x2, kFfma };
const char* op_name(Op op) {
  switch (op) {
    case Op::kEx2: return "ex2.approx.ftz.f32";
    case Op::kTanh: return "tanh.approx.f32";
    case Op::kEx2AndTanh: return "ex2 + tanh, alternating";
    case Op::kEx2F16x2: return "ex2.approx.f16x2";
    case Op::kTanhBf16x2: return "tanh.approx.bf16x2";
    case Op::kFfma: return "fma.rn.f32";
  }
  return "?";
}

constexpr int kIters = 4096;

// One step of chain value y, chain c (kept in range: ex2(-y) stays in [0.5, 1], tanh(y) shrinks
// slowly towards 0 and stays normal over kIters steps, the FMA has a fixed point). The mix runs
// ex2 on even chains and tanh on odd ones.
template <Op kOp>
__device__ __forceinline__ void step(uint32_t& y, int c) {
  if (kOp == Op::kEx2 || (kOp == Op::kEx2AndTanh && c % 2 == 0)) {
    asm volatile("{.reg .f32 t; neg.f32 t, %0; ex2.approx.ftz.f32 %0, t;}" : "+r"(y));
  } else if (kOp == Op::kTanh || kOp == Op::kEx2AndTanh) {
    asm volatile("tanh.approx.f32 %0, %0;" : "+r"(y));
  } else if (kOp == Op::kEx2F16x2) {
    asm volatile("{.reg .b32 t; neg.f16x2 t, %0; ex2.approx.f16x2 %0, t;}" : "+r"(y));
  } else if (kOp == Op::kTanhBf16x2) {
    asm volatile("tanh.approx.bf16x2 %0, %0;" : "+r"(y));
  } else {
    asm volatile("fma.rn.f32 %0, %0, 0f3F7FF000, 0f3A83126F;" : "+r"(y));
  }
}

// Each thread runs kChains independent chains for kIters steps; every warp records its clocks,
// and the host takes the slowest warp of a block.
template <Op kOp, int kChains>
__global__ void rate_kernel(long long* clocks, uint32_t* sink) {
  uint32_t y[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c)
    y[c] = kOp == Op::kEx2F16x2 ? 0x38003800u + c                  // (0.5, 0.5) in f16
           : kOp == Op::kTanhBf16x2 ? 0x3f003f00u + c              // (0.5, 0.5) in bf16
                                    : __float_as_uint(0.5f + 1e-3f * c);
  __syncthreads();
  const long long start = clock64();
  // Four steps a loop trip: the loop's own 3 instructions stay small against 32 measured ones,
  // and the code stays in the instruction cache (ptxas unrolls it all otherwise).
#pragma unroll 4
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) step<kOp>(y[c], c);
  }
  uint32_t acc = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc ^= y[c];
  const long long end = clock64();
  if (threadIdx.x % 32 == 0)
    clocks[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = end - start;
  if (acc == 0x12345678u) *sink = acc;  // never true; keeps the chains alive
}

// Clocks per op on one SMSP: the slowest warp's clocks over the ops the SMSP's warps issued
// (warps / 4 of them per SMSP, each kIters * kChains).
template <Op kOp, int kChains>
double clocks_per_instruction(int sms, int warps, long long* clocks, uint32_t* sink) {
  rate_kernel<kOp, kChains><<<sms, 32 * warps>>>(clocks, sink);  // warm-up
  rate_kernel<kOp, kChains><<<sms, 32 * warps>>>(clocks, sink);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<long long> host(static_cast<size_t>(sms) * warps);
  CHECK_CUDA(cudaMemcpy(host.data(), clocks, host.size() * sizeof(long long),
                        cudaMemcpyDeviceToHost));
  double total = 0;  // the mean over blocks of each block's slowest warp
  for (int b = 0; b < sms; ++b) {
    long long slowest = 0;
    for (int w = 0; w < warps; ++w) slowest = std::max(slowest, host[b * warps + w]);
    total += static_cast<double>(slowest);
  }
  const double per_smsp = (warps + 3) / 4;
  return total / sms / (per_smsp * kIters * kChains);
}

template <Op kOp>
void report(int sms, long long* clocks, uint32_t* sink) {
  // Latency: one warp per SMSP, one chain (the mix's is ex2's); throughput: 2 warps per SMSP (as
  // the forward's two consumer warpgroups) and 8 warps per SMSP, 8 chains each.
  const double latency = clocks_per_instruction<kOp, 1>(sms, 4, clocks, sink);
  const double two = clocks_per_instruction<kOp, 8>(sms, 8, clocks, sink);
  const double eight = clocks_per_instruction<kOp, 8>(sms, 32, clocks, sink);
  std::printf("%-26s latency %6.2f  clocks an op a warp on an SMSP: 2 warps %5.2f, 8 warps %5.2f\n",
              op_name(kOp), latency, two, eight);
}

}  // namespace

int main() {
  const int sms = varpack::cuda::multiprocessor_count();
  long long* clocks = nullptr;
  uint32_t* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&clocks, sizeof(long long) * sms * 32));
  CHECK_CUDA(cudaMalloc(&sink, sizeof(uint32_t)));
  std::printf("pipe_rates: %d multiprocessors, %d steps a chain; an op is one PTX instruction "
              "(f16x2 / bf16x2: two elements)\n", sms, kIters);
  report<Op::kFfma>(sms, clocks, sink);
  report<Op::kEx2>(sms, clocks, sink);
  report<Op::kTanh>(sms, clocks, sink);
  report<Op::kEx2AndTanh>(sms, clocks, sink);
  report<Op::kEx2F16x2>(sms, clocks, sink);
  report<Op::kTanhBf16x2>(sms, clocks, sink);
  CHECK_CUDA(cudaFree(clocks));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
