// Varlen attention forward (FlashAttention-2's algorithm) on mma.sync tensor cores, sm_80+.
// One block = one query tile of one head; each warp owns 16 query rows, keeps its Q fragments in
// registers, and streams K/V tiles of kBlockN keys through double-buffered shared memory with
// cp.async. Scores, the online softmax and the output accumulate in fp32. Included by one small
// .cu file per (dtype, head dim) instance.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/tile_bounds.cuh"
#include "varpack/attention.h"
#include "varpack/error.h"

namespace varpack::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct ForwardConfig {
  // 4 warps x 16 rows and 64-key tiles: 80 KB of shared memory at D = 128, two blocks per SM.
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kWarps * 16;
  static constexpr int kBlockN = 64;
  static constexpr int kTileBytesM = kBlockM * D * 2;
  static constexpr int kTileBytesN = kBlockN * D * 2;
  static constexpr int kSmemBytes = kTileBytesM + 4 * kTileBytesN;  // Q, K x2, V x2
};

// Scaled score in the log2 domain: softcap * tanh(scale * s / softcap) * log2(e), or
// scale * s * log2(e) without softcap.
__device__ __forceinline__ float score_log2(float s, float scale, float softcap) {
  if (softcap > 0.f) return softcap * fast_tanh(s * scale / softcap) * kLog2e;
  return s * scale * kLog2e;
}

template <class T, int D>
__global__ void __launch_bounds__(ForwardConfig<D>::kThreads)
    forward_kernel(const AttentionParams p, int64_t slots) {
  using Cfg = ForwardConfig<D>;
  constexpr int kBM = Cfg::kBlockM;
  constexpr int kBN = Cfg::kBlockN;
  extern __shared__ __align__(128) unsigned char smem[];

  const TileSlot slot = find_slot<kBM>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (p.heads / p.kv_heads);
  const SequenceBounds seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b);
  const int64_t m0 = slot.block * kBM;
  const int64_t m1 = m0 + kBM < seq.q_len ? m0 + kBM : seq.q_len;
  const Range keys = keys_for_queries(seq, m0, m1, p.causal, p.window_left, p.window_right);
  const int64_t n_first = keys.begin / kBN * kBN;
  const int num_tiles =
      keys.end > n_first ? static_cast<int>((keys.end - n_first + kBN - 1) / kBN) : 0;

  const T* q = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride + hk * p.v_head_stride;

  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK = sQ + Cfg::kTileBytesM;
  const uint32_t sV = sK + 2 * Cfg::kTileBytesN;

  load_tile_async<kBM, D, Cfg::kThreads>(sQ, q, p.q_row_stride, m0, seq.q_len);
  cp_async_commit();
  if (num_tiles > 0) {
    load_tile_async<kBN, D, Cfg::kThreads>(sK, k, p.k_row_stride, n_first, seq.k_len);
    load_tile_async<kBN, D, Cfg::kThreads>(sV, v, p.v_row_stride, n_first, seq.k_len);
  }
  cp_async_commit();

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;  // accumulator row (and row + 8)
  const int qd = lane % 4;  // accumulator column pair

  cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[D / 16][4];
  {
    const FragAddress<D> qa(sQ, warp * 16 + (lane & 15), lane >> 4);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], qa.at(kk, 0));
  }
  // K is read as the B operand of Q K^T (rows = keys), V transposed as the B operand of P V.
  const FragAddress<D> ka(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const FragAddress<D> va(sV, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};  // this thread's partial sums; reduced over the quad at the end

  // Rows of this thread and their visible key ranges (only used on tiles that need the mask).
  int64_t kb[2], ke[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = m0 + warp * 16 + g + 8 * r;
    kb[r] = seq.key_begin(i, p.window_left);
    ke[r] = i < seq.q_len ? seq.key_end(i, p.causal, p.window_right) : 0;
  }

  for (int t = 0; t < num_tiles; ++t) {
    const int64_t n0 = n_first + static_cast<int64_t>(t) * kBN;
    if (t + 1 < num_tiles) {
      const int nb = (t + 1) & 1;
      load_tile_async<kBN, D, Cfg::kThreads>(sK + nb * Cfg::kTileBytesN, k, p.k_row_stride,
                                             n0 + kBN, seq.k_len);
      load_tile_async<kBN, D, Cfg::kThreads>(sV + nb * Cfg::kTileBytesN, v, p.v_row_stride,
                                             n0 + kBN, seq.k_len);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const uint32_t buf = (t & 1) * Cfg::kTileBytesN;

    float s[kBN / 8][4];
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kBN / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ka.at(kk, 2 * np) + buf);
        Mma<T>::run(s[2 * np], qf[kk], b[0], b[1]);
        Mma<T>::run(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][c] = score_log2(s[i][c], p.softmax_scale, p.softcap);

    if (!tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                            p.window_right)) {
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int r = c / 2;
          const int64_t j = n0 + i * 8 + 2 * qd + (c & 1);
          if (j < kb[r] || j >= ke[r]) s[i][c] = -INFINITY;
        }
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) mx = fmaxf(mx, fmaxf(s[i][2 * r], s[i][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[r], mx);
      // A row with no visible key so far keeps max -inf; subtract 0 so exp2 gives 0, not NaN.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = fast_exp2(row_max[r] - m_use);
      row_max[r] = m_new;
      row_sum[r] *= alpha;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][2 * r] *= alpha;
        o[i][2 * r + 1] *= alpha;
      }
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        s[i][2 * r] = fast_exp2(s[i][2 * r] - m_use);
        s[i][2 * r + 1] = fast_exp2(s[i][2 * r + 1] - m_use);
        row_sum[r] += s[i][2 * r] + s[i][2 * r + 1];
      }
    }

    // The m16n8 accumulator layout of two adjacent key octets is the A-fragment layout of one
    // 16-key step, so P goes from registers straight into the P.V product.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint32_t a[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]),
                             Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, va.at(dp, 2 * kk) + buf);
        Mma<T>::run(o[2 * dp], a, b[0], b[1]);
        Mma<T>::run(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with buffer t & 1 before iteration t + 1 refills it
  }
  cp_async_wait<0>();

  T* out = static_cast<T*>(p.out) + seq.q_begin * p.out_row_stride + h * p.out_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t i = m0 + warp * 16 + g + 8 * r;
    if (i >= seq.q_len) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T* row = out + i * p.out_row_stride;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(row + dn * 8 + 2 * qd) =
          Mma<T>::pack(o[dn][2 * r] * inv, o[dn][2 * r + 1] * inv);
    if (qd == 0 && p.lse != nullptr)
      p.lse[h * p.lse_head_stride + seq.q_begin + i] =
          sum > 0.f ? (row_max[r] + log2f(sum)) * kLn2 : INFINITY;
  }
}

inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: launching ") + what + " failed: " +
                cudaGetErrorString(err));
}

template <class T, int D>
void launch_forward(const AttentionParams& p, cudaStream_t stream) {
  using Cfg = ForwardConfig<D>;
  const int64_t slots = slot_count(p.total_q, p.batch, Cfg::kBlockM);
  if (slots <= 0 || p.heads <= 0) return;
  // Set on every launch (a few microseconds): the attribute is per device.
  const cudaError_t attr = cudaFuncSetAttribute(
      forward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: cannot reserve shared memory: ") +
                cudaGetErrorString(attr));
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads));
  forward_kernel<T, D><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, slots);
  check_launch("the forward kernel");
}

}  // namespace varpack::cuda
