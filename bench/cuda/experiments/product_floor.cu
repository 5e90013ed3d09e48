// Experiment (`scripts/gpu_tune.sh rates` runs it): the floor that the d128 atomic backward's
// products alone put under its tile. Two compute warpgroups issue, per 64-query tile, the
// library's five products in its order, commit groups and waits (hopper_backward.cuh, without
// IssueAhead):
// - S^T = K Q^T and dP^T = V dO^T, SS, 64 keys x 64 queries x 128;
// - dV += P^T dO with A from registers (N = 128, 4 k-steps);
// - the dS-ready barrier, then dQ = dS K, SS, 64 queries x 64 columns x 128 keys, both MN-major;
// - dK += dS^T Q with A from registers.
// There is no softmax, no loads from global memory and no hand-off, so what is left is the tensor
// cores and the shared-memory reads of their operands. Why: by arithmetic a tile moves ~368 KB
// through shared memory, 2,900 clocks at 128 bytes a clock, against the products' 2,560 clocks at
// the dense peak (bench/results/cuda.md), and the kernel runs ~4,300 a tile; whether the operand
// reads are the bound decides where the backward's time can come from.
// Variants:
// - "products": as the library;
// - "+ dS^T and dQ stores": also the tile's dS^T stores (16 KB by stmatrix) and dQ's staging
//   (32 KB of 8-byte stores), the kernel's other shared-memory writes;
// - "S^T's A = K in registers": S^T's A operand from registers loaded once (RS; 16 KB a
//   warpgroup less read a tile);
// - "no dQ product": the four products of the two-pass backward's dK/dV pass;
// - "no dS-ready barrier": the warpgroups not joined at each tile (what DeferDq aimed at).
// Each prints clocks a tile (the mean over blocks of the slower warpgroup) and the products' rate
// at the measured clock: 10.5 MFLOP a tile and block.
// Run: ./product_floor (one block per multiprocessor, every multiprocessor)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "attn/cuda/hopper_path.h"
#include "check_cuda.h"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/wgmma.cuh"

namespace {

using varpack::cuda::GmmaOperand;
using varpack::cuda::GmmaTile;
using varpack::cuda::Wgmma;
using T = __nv_bfloat16;

enum class Variant { kProducts, kWithStores, kKInRegisters, kNoDq, kNoBarrier };
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kProducts: return "products";
    case Variant::kWithStores: return "+ dS^T and dQ stores";
    case Variant::kKInRegisters: return "S^T's A = K in registers";
    case Variant::kNoDq: return "no dQ product";
    case Variant::kNoBarrier: return "no dS-ready barrier";
  }
  return "?";
}

constexpr int kTiles = 2048;
using KvTile = GmmaTile<128, 128>;  // 128 keys x d128
using QTile = GmmaTile<64, 128>;    // 64 queries x d128
using DsTile = GmmaTile<128, 64>;   // dS^T: 128 keys x 64 queries
constexpr uint32_t kK = 0, kV = kK + KvTile::kBytes, kQ = kV + KvTile::kBytes,
                   kDo = kQ + QTile::kBytes, kDs = kDo + QTile::kBytes, kDq = kDs + DsTile::kBytes;
constexpr uint32_t kDqRowBytes = (128 + 8) * 4;  // as the library's padded dQ rows
constexpr uint32_t kUsedBytes = kDq + 64 * kDqRowBytes;
// More than half of a multiprocessor's shared memory, so that one block runs on each.
constexpr uint32_t kSmemBytes = 1024 + std::max<uint32_t>(kUsedBytes, 120 * 1024);

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A 64 x 64 fp32 accumulator as the bf16 A fragments of four k-steps (the values do not matter).
__device__ __forceinline__ void to_fragments(const float (&acc)[32], uint32_t (&frag)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      frag[kk][j] = pack_bf16(acc[8 * kk + 2 * j], acc[8 * kk + 2 * j + 1]);
}

template <Variant kVariant>
__global__ void __launch_bounds__(256, 1) floor_kernel(long long* clocks, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace varpack::cuda;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  // Operands of small values (the tensor cores' power, and so the clock, depends on the data).
  for (uint32_t i = threadIdx.x; i < kDq / 4; i += blockDim.x)
    st_shared_b32(base + 4 * i, pack_bf16(0.01f * ((i * 37) % 17) - 0.08f,
                                          0.01f * ((i * 11) % 13) - 0.06f));
  fence_proxy_async();
  __syncthreads();

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const GmmaOperand<true> k_rows(base + kK + wg * 64 * 128, 0),
      v_rows(base + kV + wg * 64 * 128, 0);
  const GmmaOperand<true> q_rows(base + kQ, 0), do_rows(base + kDo, 0);
  const GmmaOperand<true> q_cols(base + kQ, QTile::kBlockBytes),
      do_cols(base + kDo, QTile::kBlockBytes);
  const GmmaOperand<true> ds_rows(base + kDs, DsTile::kBlockBytes);
  const GmmaOperand<true> k_cols(base + kK + wg * KvTile::kBlockBytes, KvTile::kBlockBytes);

  // K's A fragments for S^T (this warp's 16 keys, k-step kk = columns 16kk ..): ldmatrix's four
  // matrices are rows 0-7 / 8-15 of chunk 2kk, then of chunk 2kk + 1.
  uint32_t k_frag[kVariant == Variant::kKInRegisters ? 8 : 1][4];
  if constexpr (kVariant == Variant::kKInRegisters) {
    const int m = lane / 8, row = wg * 64 + warp * 16 + (m % 2) * 8 + lane % 8;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
      ldmatrix_x4(k_frag[kk], base + kK + KvTile::offset(row, 2 * kk + m / 2));
  }

  float dk[64], dv[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) dk[i] = dv[i] = 0.f;
  uint32_t pf[4][4], dsf[4][4];
  __syncthreads();
  const long long start = clock64();
  for (int it = 0; it < kTiles; ++it) {
    float st[32], dpt[32];
    pin_registers(st);
    pin_registers(dpt);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint32_t col = (kk % 4) * 32;
      if constexpr (kVariant == Variant::kKInRegisters)
        Wgmma<T, 64>::template rs<0>(st, k_frag[kk],
                                     q_rows.at((kk / 4) * QTile::kBlockBytes + col), kk > 0);
      else
        Wgmma<T, 64>::template ss<0, 0>(st, k_rows.at((kk / 4) * KvTile::kBlockBytes + col),
                                        q_rows.at((kk / 4) * QTile::kBlockBytes + col), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint32_t col = (kk % 4) * 32;
      Wgmma<T, 64>::template ss<0, 0>(dpt, v_rows.at((kk / 4) * KvTile::kBlockBytes + col),
                                      do_rows.at((kk / 4) * QTile::kBlockBytes + col), kk > 0);
    }
    wgmma_commit();
    // P^T and dS^T as A fragments, by conversion alone (the softmax's arithmetic left out).
    wgmma_wait<1>();
    pin_registers(st);
    to_fragments(st, pf);
    wgmma_wait<0>();
    pin_registers(dpt);
    to_fragments(dpt, dsf);
    if constexpr (kVariant == Variant::kWithStores) {
      // This warp's 16 keys of dS^T, 16 query columns a stmatrix (as the library's d128).
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        stmatrix_x4(base + kDs + DsTile::offset(wg * 64 + warp * 16 + lane % 8 +
                                                    8 * ((lane / 8) % 2),
                                                2 * kk + lane / 16),
                    dsf[kk]);
      fence_proxy_async();
    }

    pin_registers(dv);
    pin_registers(dk);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      Wgmma<T, 128>::template rs<1>(dv, pf[kk], do_cols.at(kk * 2048), 1);
    wgmma_commit();
    if constexpr (kVariant != Variant::kNoBarrier) named_barrier_sync(1, 256);  // dS ready
    [[maybe_unused]] float dq[32];
    if constexpr (kVariant != Variant::kNoDq) {
      pin_registers(dq);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
        Wgmma<T, 64>::template ss<1, 1>(dq, ds_rows.at(kk * 2048), k_cols.at(kk * 2048), kk > 0);
      wgmma_commit();
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      Wgmma<T, 128>::template rs<1>(dk, dsf[kk], q_cols.at(kk * 2048), 1);
    wgmma_commit();
    if constexpr (kVariant != Variant::kNoDq) {
      wgmma_wait<1>();
      pin_registers(dq);
      if constexpr (kVariant == Variant::kWithStores) {
        // dQ's staging: this warpgroup's 64 columns of the tile's 64 rows (the library's layout).
        const int g = lane / 4, qd = lane % 4;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t row =
              base + kDq + (warp * 16 + g + 8 * r) * kDqRowBytes + (wg * 64 + 2 * qd) * 4;
#pragma unroll
          for (int n = 0; n < 8; ++n)
            st_shared_f32x2(row + n * 32, dq[4 * n + 2 * r], dq[4 * n + 2 * r + 1]);
        }
      } else {
        // Kept alive: the product must not be dropped as unused.
        float keep = 0.f;
#pragma unroll
        for (int i = 0; i < 32; ++i) keep += dq[i];
        if (keep == 1.2345f) *sink = keep;
      }
    }
    wgmma_wait<0>();
    pin_registers(dv);
    pin_registers(dk);
  }
  const long long end = clock64();
  if (threadIdx.x % 128 == 0) clocks[blockIdx.x * 2 + wg] = end - start;
  float keep = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) keep += dk[i] + dv[i];
  if (keep == 1.2345f) *sink = keep;  // never true; keeps the accumulators alive
#endif
}

template <Variant kVariant>
void report(int sms, long long* clocks, float* sink) {
  CHECK_CUDA(cudaFuncSetAttribute(floor_kernel<kVariant>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  floor_kernel<kVariant><<<sms, 256, kSmemBytes>>>(clocks, sink);  // warm-up
  cudaEvent_t begin, stop;
  CHECK_CUDA(cudaEventCreate(&begin));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(begin));
  floor_kernel<kVariant><<<sms, 256, kSmemBytes>>>(clocks, sink);
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0.f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, begin, stop));
  std::vector<long long> host(static_cast<size_t>(sms) * 2);
  CHECK_CUDA(cudaMemcpy(host.data(), clocks, host.size() * sizeof(long long),
                        cudaMemcpyDeviceToHost));
  double total = 0;  // the mean over blocks of each block's slower warpgroup
  for (int b = 0; b < sms; ++b)
    total += static_cast<double>(std::max(host[2 * b], host[2 * b + 1]));
  const double per_tile = total / sms / kTiles;
  // Each product is 64 x 64 x 128 multiply-adds; two warpgroups, five products (four without dQ).
  const double flops_per_tile = 2.0 * (kVariant == Variant::kNoDq ? 4 : 5) * 2 * 64 * 64 * 128;
  const double ghz = total / sms / (ms * 1e6);  // the blocks' clocks over the launch's time
  // The dense peak: 4,096 FLOP a clock per multiprocessor (bf16, fp32 accumulate).
  std::printf("%-26s %7.0f clocks a tile (products at the dense peak: %4.0f), %6.1f TFLOP/s at "
              "%.2f GHz\n",
              variant_name(kVariant), per_tile, flops_per_tile / 4096,
              flops_per_tile * kTiles * sms / (ms * 1e9), ghz);
  CHECK_CUDA(cudaEventDestroy(begin));
  CHECK_CUDA(cudaEventDestroy(stop));
}

}  // namespace

int main() {
  const int sms = varpack::cuda::multiprocessor_count();
  long long* clocks = nullptr;
  float* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&clocks, sizeof(long long) * sms * 2));
  CHECK_CUDA(cudaMalloc(&sink, sizeof(float)));
  std::printf("product_floor: %d multiprocessors, %d tiles a block; the d128 atomic backward's "
              "products (bf16), two compute warpgroups\n",
              sms, kTiles);
  report<Variant::kProducts>(sms, clocks, sink);
  report<Variant::kWithStores>(sms, clocks, sink);
  report<Variant::kKInRegisters>(sms, clocks, sink);
  report<Variant::kNoDq>(sms, clocks, sink);
  report<Variant::kNoBarrier>(sms, clocks, sink);
  CHECK_CUDA(cudaFree(clocks));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
