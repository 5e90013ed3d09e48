// Standalone check of the Hopper wgmma building blocks (wgmma.cuh) on the GPU machine: one
// warpgroup multiplies random bf16 matrices laid out exactly as the attention kernels lay out their
// tiles (K-major and MN-major operands, A from registers, column offsets inside a swizzled block)
// and the products are compared with a float product on the host. A wrong descriptor or swizzle
// shows up here as one named case instead of as a wrong attention output.
// Usage: test_wgmma (exit code 1 when a case fails).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "check_cuda.h"
#include "attn/cuda/wgmma.cuh"

namespace {

using varpack::cuda::GmmaTile;
using varpack::cuda::Wgmma;
using bf16 = __nv_bfloat16;

constexpr int kM = 64, kK = 128, kN = 128;  // A is kM x kK, B is kK x kN, both row-major in global

// Writes element (row, col) of a rows x cols matrix into a GmmaTile at `tile`.
template <int ROWS, int COLS>
__device__ void put(unsigned char* tile, int row, int col, bf16 value) {
  *reinterpret_cast<bf16*>(tile + GmmaTile<ROWS, COLS>::offset(row, col / 8) + (col % 8) * 2) =
      value;
}

// C[:, n0 .. n0 + N) = A B with A K-major in shared memory (kAMn = 0), MN-major (1) or in
// registers (2), and B K-major (kBMn = 0) or MN-major (1).
template <int N, int kAMode, int kBMn>
__global__ void product(const bf16* a, const bf16* b, float* c, int n0) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace varpack::cuda;
  extern __shared__ unsigned char raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                                         ~uintptr_t(1023));
  unsigned char* sA = smem;                  // 16 KB: kM x kK either way round
  unsigned char* sB = smem + kM * kK * 2;    // 32 KB: kN x kK or kK x kN
  const int t = static_cast<int>(threadIdx.x);
  for (int i = t; i < kM * kK; i += 128) {
    const int m = i / kK, k = i % kK;
    if (kAMode == 0) put<kM, kK>(sA, m, k, a[i]);
    if (kAMode == 1) put<kK, kM>(sA, k, m, a[i]);
  }
  for (int i = t; i < kK * kN; i += 128) {
    const int k = i / kN, n = i % kN;
    if (kBMn) put<kK, kN>(sB, k, n, b[i]);
    else put<kN, kK>(sB, n, k, b[i]);
  }
  fence_proxy_async();
  __syncthreads();
  const uint32_t aBase = smem_addr(sA), bBase = smem_addr(sB);
  const int warp = t / 32, lane = t % 32, g = lane / 4, qd = lane % 4;

  // A in registers (mode 2): every k-step's fragment is loaded before the first product, as the
  // kernels do, so no register the tensor cores read changes while they run.
  uint32_t frag[kK / 16][4];
  if constexpr (kAMode == 2) {
    auto at = [&](int m, int k) { return a[m * kK + k]; };
    const int m = warp * 16 + g;
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
      const int k = kk * 16 + 2 * qd;
      const __nv_bfloat162 v[4] = {{at(m, k), at(m, k + 1)},
                                   {at(m + 8, k), at(m + 8, k + 1)},
                                   {at(m, k + 8), at(m, k + 9)},
                                   {at(m + 8, k + 8), at(m + 8, k + 9)}};
#pragma unroll
      for (int e = 0; e < 4; ++e) frag[kk][e] = *reinterpret_cast<const uint32_t*>(&v[e]);
    }
  }

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  pin_registers(d);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    uint64_t db;
    if (kBMn)  // rows = k: 16 rows per step; n0 moves along the 64-column blocks and inside one
      db = gmma_desc(bBase + kk * 2048 + (n0 / 64) * GmmaTile<kK, kN>::kBlockBytes + (n0 % 64) * 2,
                     GmmaTile<kK, kN>::kBlockBytes, 1024);
    else  // rows = n: n0 moves down the rows; k moves 32 bytes inside a 128-byte row, then blocks
      db = gmma_desc(bBase + n0 * 128 + (kk / 4) * GmmaTile<kN, kK>::kBlockBytes + (kk % 4) * 32,
                     GmmaTile<kN, kK>::kBlockBytes, 1024);
    if constexpr (kAMode == 2) {
      Wgmma<bf16, N>::template rs<kBMn>(d, frag[kk], db, 1);
    } else {
      const uint64_t da =
          kAMode == 1 ? gmma_desc(aBase + kk * 2048, GmmaTile<kK, kM>::kBlockBytes, 1024)
                      : gmma_desc(aBase + (kk / 4) * GmmaTile<kM, kK>::kBlockBytes + (kk % 4) * 32,
                                  GmmaTile<kM, kK>::kBlockBytes, 1024);
      Wgmma<bf16, N>::template ss<kAMode, kBMn>(d, da, db, 1);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(d);
#pragma unroll
  for (int i = 0; i < N / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = warp * 16 + g + 8 * (e / 2);
      const int col = n0 + 8 * i + 2 * qd + (e & 1);
      c[row * kN + col] = d[4 * i + e];
    }
#endif
}

struct Problem {
  std::vector<bf16> a, b;
  std::vector<float> af, bf;
  bf16 *da = nullptr, *db = nullptr;
  float* dc = nullptr;
};

template <int N, int kAMode, int kBMn>
bool run_case(const char* name, const Problem& p, int n0) {
  const int smem = 1024 + kM * kK * 2 + kK * kN * 2;
  const auto kernel = product<N, kAMode, kBMn>;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK_CUDA(cudaMemset(p.dc, 0xFF, kM * kN * sizeof(float)));  // NaN: unwritten outputs fail
  kernel<<<1, 128, smem>>>(p.da, p.db, p.dc, n0);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> c(kM * kN);
  CHECK_CUDA(cudaMemcpy(c.data(), p.dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0, scale = 0;
  for (int m = 0; m < kM; ++m)
    for (int n = n0; n < n0 + N; ++n) {
      double ref = 0;
      for (int k = 0; k < kK; ++k) ref += double(p.af[m * kK + k]) * p.bf[k * kN + n];
      const double err = std::fabs(c[m * kN + n] - ref);
      worst = std::isnan(c[m * kN + n]) ? INFINITY : std::max(worst, err);
      scale = std::max(scale, std::fabs(ref));
    }
  const bool ok = worst <= 1e-3 * scale + 1e-3;
  std::printf("%-6s %-44s n0=%-3d max err %.3g (max |ref| %.3g)\n", ok ? "PASS" : "FAIL", name, n0,
              worst, scale);
  return ok;
}

}  // namespace

int main() {
  Problem p;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (int i = 0; i < kM * kK; ++i) p.a.push_back(__float2bfloat16(normal(rng)));
  for (int i = 0; i < kK * kN; ++i) p.b.push_back(__float2bfloat16(normal(rng)));
  for (bf16 x : p.a) p.af.push_back(__bfloat162float(x));
  for (bf16 x : p.b) p.bf.push_back(__bfloat162float(x));
  CHECK_CUDA(cudaMalloc(&p.da, p.a.size() * 2));
  CHECK_CUDA(cudaMalloc(&p.db, p.b.size() * 2));
  CHECK_CUDA(cudaMalloc(&p.dc, kM * kN * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(p.da, p.a.data(), p.a.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(p.db, p.b.data(), p.b.size() * 2, cudaMemcpyHostToDevice));

  bool ok = true;
  // Forward S = Q K^T: both K-major, 128 keys.
  ok &= run_case<128, 0, 0>("ss A K-major, B K-major, n128", p, 0);
  ok &= run_case<64, 0, 0>("ss A K-major, B K-major, n64 at row 64", p, 64);
  // Forward O += P V and backward dV += P^T dO: A in registers, B MN-major over all head columns.
  ok &= run_case<128, 2, 1>("rs A registers, B MN-major, n128", p, 0);
  ok &= run_case<64, 2, 1>("rs A registers, B MN-major, n64", p, 0);
  // Head dim 96 on d128's tiles: N = 96 spans one and a half 64-column blocks.
  ok &= run_case<96, 2, 1>("rs A registers, B MN-major, n96", p, 0);
  // Backward dQ = dS K: A MN-major, B MN-major, one warpgroup's share of the head columns.
  ok &= run_case<64, 1, 1>("ss A MN-major, B MN-major, n64, 2nd block", p, 64);
  ok &= run_case<32, 1, 1>("ss A MN-major, B MN-major, n32, mid-block", p, 32);
  ok &= run_case<32, 1, 1>("ss A MN-major, B MN-major, n32, block 2 half 2", p, 96);
  std::printf(ok ? "ALL PASSED\n" : "SOME FAILED\n");
  return ok ? 0 : 1;
}
