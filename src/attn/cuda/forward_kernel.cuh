// Varlen attention forward (FlashAttention-2's algorithm) on mma.sync tensor cores, sm_80+.
// One block = one query tile of one head; each warp owns kRowTiles x 16 query rows and the block
// streams K/V tiles of kBlockN keys through double-buffered shared memory with cp.async. Scores,
// the online softmax and the output accumulate in fp32 registers; P goes to the P.V product
// without leaving registers. Included by one small .cu file per (dtype, head dim) instance.
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

// Tile shape of the forward kernel: kWarps warps, each owning kRowTiles x 16 query rows, and
// kBlockN keys per K/V tile. With one row tile per warp Q stays in registers by default; with two,
// each K/V fragment read from shared memory feeds two tensor-core instructions and Q is re-read
// from shared memory instead (registers hold two rows' worth of scores and outputs). QInRegisters =
// false re-reads Q with one row tile too, where its fragments would not fit next to the outputs
// (d256).
template <int D, int Warps, int RowTiles, int BlockN, bool QInRegisters = RowTiles == 1>
struct ForwardTile {
  static constexpr int kD = D;
  static constexpr int kWarps = Warps;
  static constexpr int kRowTiles = RowTiles;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kBlockM = Warps * 16 * RowTiles;
  static constexpr int kBlockN = BlockN;
  static constexpr bool kQInRegisters = QInRegisters;
  static constexpr int kTileBytesM = kBlockM * SwizzledTile<D>::kRowBytes;
  static constexpr int kTileBytesN = kBlockN * SwizzledTile<D>::kRowBytes;
  static constexpr int kSmemBytes = kTileBytesM + 4 * kTileBytesN;  // Q, K x2, V x2
  static_assert(BlockN % 16 == 0 && RowTiles >= 1, "key tiles are multiples of 16");
  static_assert(!QInRegisters || RowTiles == 1, "Q fragments in registers serve one row tile");
};

// The shape each head dim is compiled with: 4 warps x 2 row tiles x 32 keys, the fastest at every
// length (decisions.md: mma-forward-shape). d64 and d96 take the same shape (d96: 96 fp32 outputs
// per thread where d128 has 128).
template <int D>
struct ForwardConfig : ForwardTile<D, 4, 2, 32> {};
// d256: two row tiles would hold 256 fp32 outputs per thread; one holds 128, and Q's fragments
// would add 64 registers, so Q is re-read from shared memory (247 registers without spills). 8
// warps: FlashAttention-2's 128 x 64 d256 shape with half the keys per tile, so that the
// double-buffered K and V fit beside Q in 128 KB (sm_80 allows 163 KB).
template <>
struct ForwardConfig<256> : ForwardTile<256, 8, 1, 32, false> {};

// The softmax runs on "raw" scores r with probabilities exp2(r * c - max * c): without softcap r is
// q.k itself and c = scale * log2(e), so the scale costs nothing (one FFMA per element, as the
// exp2 needs a subtraction anyway; it needs scale > 0, checked on the host); with softcap, the
// score softcap * tanh(scale * q.k / softcap) is taken as r = tanh(scale * q.k / softcap) and
// c = softcap * log2(e), so that softcap's multiply rides in the same FFMA (tanh is increasing and
// softcap > 0, so the row maxima are the same keys'). scale / softcap, both kernel parameters, is
// hoisted out of the tile loops: (s * scale) / softcap would divide every score, some ten
// instructions each (decisions.md: softcap-fold).
template <bool kSoftcap>
__device__ __forceinline__ float raw_score(float s, float scale, float softcap) {
  if constexpr (kSoftcap) return fast_tanh(s * (scale / softcap));
  return s;
}

// c above: what a raw score is multiplied by to give exp2's argument.
template <bool kSoftcap, class Params>
__device__ __forceinline__ float raw_to_log2(const Params& p) {
  return kSoftcap ? p.softcap * kLog2e : p.softmax_scale * kLog2e;
}

template <class T, class Cfg, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads)
    forward_kernel(const AttentionParams p, int64_t slots) {
  constexpr int D = Cfg::kD;
  constexpr int kBM = Cfg::kBlockM;
  constexpr int kBN = Cfg::kBlockN;
  constexpr int RT = Cfg::kRowTiles;
  extern __shared__ __align__(128) unsigned char smem[];

  const TileSlot slot = find_slot<kBM, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const BlockTile tile = query_tile<kBM, kBN>(p, slot);
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (p.heads / p.kv_heads);
  const SequenceBounds seq = tile.seq;
  const int64_t m0 = tile.r0;
  const int64_t n_first = tile.walk.first;
  const int num_tiles = tile.walk.count;

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
  const int g = lane / 4;   // accumulator row (and row + 8)
  const int qd = lane % 4;  // accumulator column pair
  const int warp_row = warp * 16 * RT;

  cp_async_wait<1>();
  __syncthreads();
  const FragAddress<D> qa(sQ, warp_row + (lane & 15), lane >> 4);
  uint32_t qf[Cfg::kQInRegisters ? D / 16 : 1][4];
  if constexpr (Cfg::kQInRegisters) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], qa.at(kk, 0));
  }
  // K is read as the B operand of Q K^T (rows = keys), V transposed as the B operand of P V.
  const FragAddress<D> ka(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const FragAddress<D> va(sV, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  float o[RT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  const float c_log2 = raw_to_log2<kSoftcap>(p);
  // row sums are per thread; reduced over the quad at the end
  float row_max[RT][2], row_sum[RT][2];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[mt][r] = -INFINITY;
      row_sum[mt][r] = 0.f;
    }
  // Visibility of keys from this thread's rows warp_row + g + delta (delta = 16 * mt + 8 * r).
  // Rows past q_len are never stored, so their mask does not matter.
  const RowVisibility vis = row_visibility(seq, m0 + warp_row + g, p.causal, p.window_left,
                                           p.window_right, 16 * (RT + 1));

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

    float s[RT][kBN / 8][4];
#pragma unroll
    for (int mt = 0; mt < RT; ++mt)
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[RT][4];
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
        if constexpr (Cfg::kQInRegisters) {
#pragma unroll
          for (int c = 0; c < 4; ++c) a[mt][c] = qf[kk][c];
        } else {
          ldmatrix_x4(a[mt], qa.at(kk, 2 * mt));
        }
      }
#pragma unroll
      for (int np = 0; np < kBN / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ka.at(kk, 2 * np) + buf);
#pragma unroll
        for (int mt = 0; mt < RT; ++mt) {
          Mma<T>::run(s[mt][2 * np], a[mt], b[0], b[1]);
          Mma<T>::run(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    if constexpr (kSoftcap) {
#pragma unroll
      for (int mt = 0; mt < RT; ++mt)
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            s[mt][i][c] = raw_score<kSoftcap>(s[mt][i][c], p.softmax_scale, p.softcap);
    }

    if (!tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                            p.window_right)) {
      const int j0 = static_cast<int>(n0) + 2 * qd;
      const int k_len = static_cast<int>(seq.k_len);
#pragma unroll
      for (int mt = 0; mt < RT; ++mt)
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int delta = 16 * mt + 8 * (c / 2);
            const int j = j0 + i * 8 + (c & 1);
            if (j < vis.begin + delta || j >= vis.end + delta || j >= k_len)
              s[mt][i][c] = -INFINITY;
          }
    }

#pragma unroll
    for (int mt = 0; mt < RT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i)
          mx = fmaxf(mx, fmaxf(s[mt][i][2 * r], s[mt][i][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[mt][r], mx);
        // A row with no visible key so far keeps max -inf; subtract 0 so exp2 gives 0, not NaN.
        const float m_use = (m_new == -INFINITY ? 0.f : m_new) * c_log2;
        const float alpha = fast_exp2(row_max[mt][r] * c_log2 - m_use);
        row_max[mt][r] = m_new;
        row_sum[mt][r] *= alpha;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          o[mt][i][2 * r] *= alpha;
          o[mt][i][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i) {
          s[mt][i][2 * r] = fast_exp2(fmaf(s[mt][i][2 * r], c_log2, -m_use));
          s[mt][i][2 * r + 1] = fast_exp2(fmaf(s[mt][i][2 * r + 1], c_log2, -m_use));
          row_sum[mt][r] += s[mt][i][2 * r] + s[mt][i][2 * r + 1];
        }
      }

    // The m16n8 accumulator layout of two adjacent key octets is the A-fragment layout of one
    // 16-key step, so P goes from registers straight into the P.V product.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[RT][4];
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
        a[mt][0] = Mma<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = Mma<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = Mma<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = Mma<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, va.at(dp, 2 * kk) + buf);
#pragma unroll
        for (int mt = 0; mt < RT; ++mt) {
          Mma<T>::run(o[mt][2 * dp], a[mt], b[0], b[1]);
          Mma<T>::run(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with buffer t & 1 before iteration t + 1 refills it
  }
  cp_async_wait<0>();

  T* out = static_cast<T*>(p.out) + seq.q_begin * p.out_row_stride + h * p.out_head_stride;
#pragma unroll
  for (int mt = 0; mt < RT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int64_t i = m0 + warp_row + mt * 16 + g + 8 * r;
      if (i >= seq.q_len) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* row = out + i * p.out_row_stride;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<uint32_t*>(row + dn * 8 + 2 * qd) =
            Mma<T>::pack(o[mt][dn][2 * r] * inv, o[mt][dn][2 * r + 1] * inv);
      if (qd == 0 && p.lse != nullptr)
        p.lse[h * p.lse_head_stride + seq.q_begin + i] =
            sum > 0.f ? (row_max[mt][r] * c_log2 + log2f(sum)) * kLn2 : INFINITY;
    }
}

inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: launching ") + what + " failed: " +
                cudaGetErrorString(err));
}

template <class T, class Cfg, bool kSoftcap>
void launch_forward_kernel(const AttentionParams& p, int64_t slots, cudaStream_t stream) {
  const auto kernel = forward_kernel<T, Cfg, kSoftcap>;
  // Set on every launch (a few microseconds): the attribute is per device.
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: cannot reserve shared memory: ") +
                cudaGetErrorString(attr));
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, slots);
  check_launch("the forward kernel");
}

// Forward with an explicit tile shape (the experiments build several; the library one).
template <class T, class Cfg>
void launch_forward_with(const AttentionParams& p, cudaStream_t stream) {
  const int64_t slots = slot_count(p.total_q, p.batch, Cfg::kBlockM);
  if (slots <= 0 || p.heads <= 0) return;
  if (p.softcap > 0.f) launch_forward_kernel<T, Cfg, true>(p, slots, stream);
  else launch_forward_kernel<T, Cfg, false>(p, slots, stream);
}

template <class T, int D>
void launch_forward(const AttentionParams& p, cudaStream_t stream) {
  launch_forward_with<T, ForwardConfig<D>>(p, stream);
}

}  // namespace varpack::cuda
