// The deterministic backward's dQ pass on Hopper's wgmma (sm_90a): for one query tile of one head,
// dQ = sum over the key tiles it sees of dS K, with S = Q K^T and dP = dO V^T recomputed per tile,
// P = exp(S - lse), dS = P (dP - Delta); no atomics, so dQ is the same bits run to run. The same
// algorithm as backward_kernels.cuh's dq_kernel (the mma.sync pass), on the forward's
// warp-specialized structure (hopper_forward.cuh):
// - a producer warpgroup (setmaxnreg) loads the tile's Q and dO once (cp.async, zero-filling rows
//   past the sequence's end) and each K and V tile into rings of their own (TMA for a tile wholly
//   inside the sequence, else cp.async), a full and an empty mbarrier per stage;
// - two consumer warpgroups of 64 query rows issue S = Q K^T and dP = dO V^T (both operands from
//   shared memory) as one group, taking turns (ping-pong), then turn them into dS in registers and
//   issue dQ += dS K with dS as the register operand. dQ leaves through shared memory in 16-byte
//   chunks (WarpRowsOut).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/kv_rings.cuh"
#include "attn/cuda/smem_layout.cuh"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/warp_rows_out.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// BlockN keys per tile: S, dP (BlockN / 2 fp32 each per thread) and dQ (D / 2) live together, so
// 64-key tiles at D = 128. DataD: the head dim in memory where it is not a multiple of 64 (as in
// HopperForwardTile: D, the tiles' columns, is the next one up; the columns past DataD are zeros in
// shared memory and left out of every product and of dQ). OutCols: dQ's columns staged at a time
// (WarpRowsOut), fewer than DataD where shared memory is short.
template <int D, int BlockN, int Stages, int DataD = D, int OutCols = DataD>
struct HopperDqTile {
  static_assert(DataD <= D && DataD % 16 == 0, "whole k-steps of S = Q K^T");
  static constexpr int kD = D;
  static constexpr int kDataD = DataD;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static_assert(warpgroup_registers_fit(kThreads, kProducerRegisters, kConsumerRegisters),
                "the block's registers at launch hold every warpgroup's budget");
  using QTile = GmmaTile<kBlockM, D>;
  using KvTile = GmmaTile<kBlockN, D>;
  static constexpr int kOutCols = OutCols;
  static constexpr int kScratchBytes = 16 * (2 * OutCols + 16);  // WarpRowsOut's, per consumer warp
  using Rings = KvRings<KvTile, Stages>;
  // Offsets from the 1024-byte-aligned base: Q, dO, the K stages, the V stages, the output
  // scratch, then the mbarriers (Q and dO full; the K/V rings').
  struct Layout {
    int q, dout, k, v, out, qdo_full, rings, bytes;
  };
  static constexpr Layout layout() {
    SmemPlacer s;
    Layout l{};
    l.q = s.place(QTile::kBytes);
    l.dout = s.place(QTile::kBytes);
    l.k = s.place(Stages * KvTile::kBytes);
    l.v = s.place(Stages * KvTile::kBytes);
    l.out = s.place(4 * kConsumers * kScratchBytes);
    l.qdo_full = s.place(8, 8);
    l.rings = s.place(8 * Rings::kBarriers, 8);
    l.bytes = smem_launch_bytes(s.end);
    return l;
  }
  static constexpr Layout kSmem = layout();
  static constexpr int kSmemBytes = kSmem.bytes;
  static_assert(kSmemBytes <= 227 * 1024, "the shared memory of one Hopper multiprocessor");
};

template <class T, class Cfg, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_dq_kernel(const AttentionBackwardParams p, const __grid_constant__ CUtensorMap k_map,
                     const __grid_constant__ CUtensorMap v_map, const float* delta, int64_t slots) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kD;
  constexpr int kDataD = Cfg::kDataD;
  constexpr int kBM = Cfg::kBlockM;
  constexpr int kBN = Cfg::kBlockN;
  constexpr int kConsumerWarps = 4 * Cfg::kConsumers;
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;
  extern __shared__ unsigned char smem_raw[];

  const TileSlot slot = find_slot<kBM, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const BlockTile tile = query_tile<kBM, kBN>(p, slot);
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (p.heads / p.kv_heads);
  const SequenceBounds seq = tile.seq;
  const int64_t m0 = tile.r0;
  const int64_t n_first = tile.walk.first;
  const int num_tiles = tile.walk.count;

  const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;
  constexpr auto kSmem = Cfg::kSmem;
  const uint32_t sdO = sQ + kSmem.dout;
  const uint32_t sK = sQ + kSmem.k;
  const uint32_t sV = sQ + kSmem.v;
  // Q and dO's: the producer's 128 threads arrive once their copies have landed.
  const uint32_t qdo_full = sQ + kSmem.qdo_full;
  const typename Cfg::Rings ring{sK, sV, sQ + kSmem.rings};  // tile t in stage t % Cfg::kStages
  if (threadIdx.x == 0) {
    mbarrier_init(qdo_full, 128);
    ring.init(kConsumerWarps);
  }
  __syncthreads();  // the barriers are initialized

  if (threadIdx.x < 128) {  // the producer warpgroup
    warpgroup_registers_down<Cfg::kProducerRegisters>();
    if (num_tiles == 0) return;
    const T* q = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride + h * p.q_head_stride;
    const T* dout =
        static_cast<const T*>(p.dout) + seq.q_begin * p.dout_row_stride + h * p.dout_head_stride;
    const T* k = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride + hk * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride + hk * p.v_head_stride;
    load_gmma_tile_async<kBM, D, 128, 1, kDataD>(sQ, q, p.q_row_stride, m0, seq.q_len);
    load_gmma_tile_async<kBM, D, 128, 1, kDataD>(sdO, dout, p.dout_row_stride, m0, seq.q_len);
    cp_async_arrive(qdo_full);
    for (int t = 0; t < num_tiles; ++t)
      ring.template produce<D, kDataD>(t, n_first + static_cast<int64_t>(t) * kBN, hk, seq, k_map,
                                       k, p.k_row_stride, v_map, v, p.v_row_stride);
    return;
  }

  warpgroup_registers_up<Cfg::kConsumerRegisters>();
  const int warp = static_cast<int>(threadIdx.x) / 32 - 4;  // consumer warp
  const int wg = warp_uniform(warp / 4);                    // consumer warpgroup
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;   // accumulator row (and row + 8) inside the warp's 16
  const int qd = lane % 4;  // accumulator column pair
  const int warp_row = warp * 16;
  // Q and dO from this warpgroup's 64 rows in each column block.
  const GmmaOperand<true> q_rows(sQ + wg * 64 * 128, 0), do_rows(sdO + wg * 64 * 128, 0);
  const float c_log2 = raw_to_log2<kSoftcap>(p);

  // This thread's two query rows: their lse, Delta and visible key ranges (an invalid row sees
  // no key, so its dS is 0).
  float lse_log2[2], dlt[2];
  int kb[2], ke[2];  // positions inside one sequence fit in int32, as cu_seqlens do
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = m0 + warp_row + g + 8 * r;
    const bool valid = i < seq.q_len;
    lse_log2[r] = valid ? p.lse[h * p.lse_head_stride + seq.q_begin + i] * kLog2e : 0.f;
    dlt[r] = valid ? delta[h * p.total_q + seq.q_begin + i] : 0.f;
    kb[r] = static_cast<int>(seq.key_begin(i, p.window_left));
    ke[r] = valid ? static_cast<int>(seq.key_end(i, p.causal, p.window_right)) : 0;
  }

  // Turns: consumer c issues S and dP when named barrier 1 + c lets it, then lets the other go;
  // the second lets the first go once before anything, and the first absorbs the second's final
  // hand-over at the exit, so no arrival is left pending.
  constexpr int kTurnThreads = 256;
  if (wg == 1) named_barrier_arrive(1, kTurnThreads);

  float dq[kDataD / 2];
#pragma unroll
  for (int i = 0; i < kDataD / 2; ++i) dq[i] = 0.f;
  if (num_tiles > 0) mbarrier_wait(qdo_full, 0);
  for (int t = 0; t < num_tiles; ++t) {
    const int64_t n0 = n_first + static_cast<int64_t>(t) * kBN;
    float s[kBN / 2], dp[kBN / 2];
    ring.wait_k(t);  // its fence also orders the cp.async bytes of Q and dO before wgmma reads
    ring.wait_v(t);
    named_barrier_sync(1 + wg, kTurnThreads);
    // Descriptors advanced per product, as in the other Hopper kernels (at d128 the deterministic
    // backward measured the same with and without, 2026-12-01 19:30 UTC).
    const GmmaOperand<true> k_tile(ring.k_stage(t), 0), v_tile(ring.v_stage(t), 0);
    pin_registers(s);
    pin_registers(dp);
    pin_registers(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDataD / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;  // 16 columns = 32 bytes inside a 128-byte row
      const uint32_t block = (kk / 4) * QTile::kBlockBytes + col;
      const uint32_t kv = (kk / 4) * KvTile::kBlockBytes + col;
      Wgmma<T, kBN>::template ss<0, 0>(s, q_rows.at(block), k_tile.at(kv), kk > 0);
      Wgmma<T, kBN>::template ss<0, 0>(dp, do_rows.at(block), v_tile.at(kv), kk > 0);
    }
    wgmma_commit();
    named_barrier_arrive(1 + (wg + 1) % Cfg::kConsumers, kTurnThreads);
    wgmma_wait<0>();
    ring.release_v(t, lane);
    pin_registers(s);
    pin_registers(dp);

    // dS = P (dP - Delta) in dp, P masked to the visible keys; then packed as the A operand of
    // dQ += dS K (the accumulator layout of key octets 2kk and 2kk + 1 is the A layout of k-step
    // kk).
    const bool full = tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal,
                                         p.window_left, p.window_right);
    uint32_t ds[kBN / 16][4];
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2;
        float raw, slope;
        raw_and_slope<kSoftcap>(s[4 * i + c], p.softmax_scale, p.softcap, raw, slope);
        float pr = fast_exp2(fmaf(raw, c_log2, -lse_log2[r]));
        if (!full) {
          const int j = static_cast<int>(n0) + i * 8 + 2 * qd + (c & 1);
          if (j < kb[r] || j >= ke[r]) pr = 0.f;
        }
        dp[4 * i + c] = kSoftcap ? pr * (dp[4 * i + c] - dlt[r]) * slope
                                 : pr * (dp[4 * i + c] - dlt[r]);
      }
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        ds[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(dp[4 * i + 2 * r], dp[4 * i + 2 * r + 1]);
    // dQ += dS K: K read as the MN-major B operand ([key][d], as V in the forward's O += P V).
    pin_registers(dq);
    wgmma_fence();
    wgmma_rs_mn_major<T, kDataD, KvTile>(dq, ds, ring.k_stage(t));
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(dq);
    ring.release_k(t, lane);
  }

  using RowsOut = WarpRowsOut<T, kDataD, Cfg::kOutCols>;
  static_assert(RowsOut::kScratchBytes == Cfg::kScratchBytes, "one scratch per consumer warp");
  const float scale[2] = {p.softmax_scale, p.softmax_scale};
  RowsOut::store(dq, scale, sQ + kSmem.out + warp * Cfg::kScratchBytes,
                 static_cast<T*>(p.dq) + (seq.q_begin + m0 + warp_row) * p.dq_row_stride +
                     h * p.dq_head_stride,
                 p.dq_row_stride, seq.q_len - m0 - warp_row, lane);
  if (wg == 0) named_barrier_sync(1, kTurnThreads);
#endif
}

// 64-key tiles at head dims up to 128: at D = 128, 128-key tiles would need 64 + 64 + 64
// accumulators per thread for S, dP and dQ, beside dS (not yet measured against other shapes). d96
// on d128's tiles. d256: 32-key tiles and dQ staged 64 columns at a time, so that Q, dO (64 KB
// each) and two stages of K and V fit.
template <int D>
struct HopperDqConfig
    : std::conditional_t<D == 256, HopperDqTile<256, 32, 2, 256, 64>,
                         HopperDqTile<(D + 63) / 64 * 64, 64, 2, D>> {};

// The dQ pass over (query slot, head); delta: Delta (launch_delta).
template <class T, class Cfg>
void launch_hopper_dq_pass(const AttentionBackwardParams& p, const float* delta,
                           cudaStream_t stream) {
  constexpr int D = Cfg::kDataD;  // the tensor maps' boxes fill the columns past it with zeros
  const int64_t slots = slot_count(p.total_q, p.batch, Cfg::kBlockM);
  if (slots <= 0 || p.heads <= 0) return;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const CUtensorMap k_map = head_tile_map(p.k, kBf16, p.total_k, p.kv_heads, D, p.k_row_stride,
                                          p.k_head_stride, Cfg::kBlockN);
  const CUtensorMap v_map = head_tile_map(p.v, kBf16, p.total_k, p.kv_heads, D, p.v_row_stride,
                                          p.v_head_stride, Cfg::kBlockN);
  launch_backward_pass(p.softcap > 0.f ? hopper_dq_kernel<T, Cfg, true>
                                       : hopper_dq_kernel<T, Cfg, false>,
                       Cfg::kThreads, Cfg::kSmemBytes, slots, p.heads, "the Hopper dQ kernel",
                       stream, p, k_map, v_map, delta);
}

}  // namespace varpack::cuda
