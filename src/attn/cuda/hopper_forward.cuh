// Varlen attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a); the same
// algorithm, masks and outputs as forward_kernel.cuh (the sm_80 path), on larger tiles. A work =
// one query tile of a few consecutive heads, one head (item) after the other; a block runs one
// work, or, persistent (given a work counter), one block per multiprocessor takes works from the
// counter until none is left. The block is warp-specialized, with no block-wide barrier after its
// start:
// - a producer warpgroup (few registers, setmaxnreg) loads each item's Q and the K/V tiles: a tile
//   (of Q, K or V) wholly inside the sequence by the TMA unit, a sequence's partial last tile by
//   cp.async from its 128 threads, which zero-fills the rows past the sequence's end (nothing past
//   it is read). K and V have rings of their own, a full and an empty mbarrier per stage, so a K
//   stage is refilled as soon as every consumer's S = Q K^T on it is done and a V stage once
//   O += P V is; Q has two buffers (but d256 and d64's three consumers), so the next item's Q
//   loads during this item, and its first K/V tiles while the consumers finish it;
// - consumer warpgroups of 64 query rows each. S = Q K^T reads both operands from shared memory,
//   O += P V takes P from registers, so P never leaves the registers. A consumer issues tile t's
//   S = Q K^T together with tile t - 1's O += P V and runs tile t's softmax while the latter runs;
//   the consumers take turns to issue (named barriers), so one's softmax overlaps the other's
//   products. The output goes out through a shared-memory scratch of its own: each consumer
//   warp's 16 rows stored by the TMA unit (WarpRowsTmaOut; a sequence's partial last rows by the
//   warp), or, at d256 and with d64's three consumers (ForwardD64Long), copied out by the warp in
//   16-byte chunks (WarpRowsOut).
// The shapes: hopper_forward_configs.cuh; the works and their order: forward_scheduler.cuh.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/forward_launch.h"
#include "attn/cuda/forward_scheduler.cuh"
#include "attn/cuda/hopper_forward_configs.cuh"
#include "attn/cuda/hopper_path.h"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/kv_rings.cuh"
#include "attn/cuda/smem_layout.cuh"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/warp_rows_out.cuh"
#include "attn/cuda/warp_rows_tma_out.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// A shape of hopper_forward_configs.cuh with what follows from it: threads, tiles, and the
// shared-memory layout (Q, the K stages, the V stages, the output scratch, the mbarriers, the
// persistent kernel's two work slots).
template <class Shape>
struct HopperForwardTile : Shape {
  using Shape::kD;
  using Shape::kDataD;
  using Shape::kConsumers;
  using Shape::kStages;
  using Shape::kQBuffers;
  static_assert(kDataD <= kD && kDataD % 16 == 0, "whole k-steps of S = Q K^T");
  static_assert(kConsumers > 1, "the consumers take turns to issue (ping-pong)");
  static_assert(kQBuffers == 1 || kQBuffers == 2, "one or two Q tiles");
  static_assert(!Shape::kTmaOut || Shape::kOutCols == kD, "the TMA unit stores whole rows of boxes");
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kBlockM = 64 * kConsumers;
  static_assert(warpgroup_registers_fit(kThreads, Shape::kProducerRegisters,
                                        Shape::kConsumerRegisters),
                "the block's registers at launch hold every warpgroup's budget");
  using QTile = GmmaTile<kBlockM, kD>;
  using KvTile = GmmaTile<Shape::kBlockN, kD>;
  using Rings = KvRings<KvTile, kStages>;
  // Per consumer warp: WarpRowsTmaOut's (a multiple of 1024 bytes, as its swizzling needs) or
  // WarpRowsOut's.
  static constexpr int kScratchBytes = Shape::kTmaOut
                                           ? WarpRowsTmaOut<uint16_t, kD, kDataD>::kScratchBytes
                                           : 16 * (2 * Shape::kOutCols + 16);
  // Offsets from the 1024-byte-aligned base; barriers are 8-byte mbarriers.
  struct Layout {
    int q, k, v, out;
    int q_full, q_empty;  // per Q buffer
    int rings;            // KvRings' barriers
    int work_full, work_empty, work;  // the persistent kernel's two work slots
    int bytes;            // what the launch reserves
  };
  static constexpr Layout layout() {
    SmemPlacer s;
    Layout l{};
    l.q = s.place(kQBuffers * QTile::kBytes);
    l.k = s.place(kStages * KvTile::kBytes);
    l.v = s.place(kStages * KvTile::kBytes);
    l.out = s.place(4 * kConsumers * kScratchBytes);
    l.q_full = s.place(8 * kQBuffers, 8);
    l.q_empty = s.place(8 * kQBuffers, 8);
    l.rings = s.place(8 * Rings::kBarriers, 8);
    l.work_full = s.place(8 * 2, 8);
    l.work_empty = s.place(8 * 2, 8);
    l.work = s.place(2 * sizeof(ForwardWork), alignof(ForwardWork));
    l.bytes = smem_launch_bytes(s.end);
    return l;
  }
  static constexpr Layout kSmem = layout();
  static constexpr int kSmemBytes = kSmem.bytes;
  static_assert(!Shape::kTmaOut || kSmem.out % 1024 == 0,
                "the swizzled boxes start on 1024-byte boundaries");
  static_assert(kSmemBytes <= 227 * 1024, "the shared memory of one Hopper multiprocessor");
};

// Row r's values First .. First + N - 1 of a thread's score accumulator (value k at
// s[4 * (k / 2) + 2 * r + k % 2]) reduced pairwise by op (TreeReduce).
template <int First, int N>
struct RowPairTree {
  template <int S, class Op>
  __device__ __forceinline__ static float reduce(const float (&s)[S], int r, Op op) {
    if constexpr (N == 1) {
      return s[4 * (First / 2) + 2 * r + First % 2];
    } else {
      return op(RowPairTree<First, N / 2>::reduce(s, r, op),
                RowPairTree<First + N / 2, N / 2>::reduce(s, r, op));
    }
  }
};

// kPersistent: one block per multiprocessor (the launch's grid), each taking works (the blocks of
// the launch order, in its order) from work_counter, zeroed before the launch, as it finishes the
// previous one; without it, work blockIdx.x. A persistent block's producer thread takes the next
// work once it has issued the loads of the current one, and hands it with its sequence's bounds
// to every warp through two shared-memory slots (full / empty mbarriers each).
template <class T, class Cfg, bool kSoftcap, bool kPersistent = false>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_forward_kernel(const AttentionParams p, const __grid_constant__ CUtensorMap q_map,
                          const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap v_map,
                          const __grid_constant__ CUtensorMap out_map, const LaunchOrder order,
                          int heads_per_block, int* work_counter) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kD;
  constexpr int kDataD = Cfg::kDataD;
  constexpr int kBM = Cfg::kBlockM;
  constexpr int kBN = Cfg::kBlockN;
  constexpr int kQBuffers = Cfg::kQBuffers;
  constexpr int kConsumerWarps = 4 * Cfg::kConsumers;
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;
  extern __shared__ unsigned char smem_raw[];

  const ForwardScheduler<kBM> works{p.cu_seqlens_q, p.cu_seqlens_k, order};
  ForwardWork first;  // a block's only work (not persistent)
  if constexpr (!kPersistent) {
    first = works.at(blockIdx.x);
    if (!first.work.valid) return;
  }
  const int group = p.heads / p.kv_heads;
  // A work's items, one after the other: each of its query tiles (one, but for a rank-0 block
  // whose sequence is longer than the launch order assumed) for each of its heads. The same query
  // rows of every head see the same keys, so a tile's heads walk the same key tiles; the block's
  // g-th K/V tile in all sits in stage g % kStages, fill number g / kStages of that stage, and its
  // item-th item's Q in buffer item % kQBuffers.

  const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;
  constexpr auto kSmem = Cfg::kSmem;
  const uint32_t sK = sQ + kSmem.k;
  const uint32_t sV = sQ + kSmem.v;
  // Q's: the producer's 128 threads arrive once their cp.async copies (if any) have landed, and the
  // TMA unit's count in bytes; every consumer warp hands it back once its last S = Q K^T of the
  // head is done.
  auto q_full = [&](int item) { return sQ + kSmem.q_full + 8 * (item % kQBuffers); };
  auto q_empty = [&](int item) { return sQ + kSmem.q_empty + 8 * (item % kQBuffers); };
  const typename Cfg::Rings ring{sK, sV, sQ + kSmem.rings};
  // The persistent kernel's works: slot w % 2 holds the w-th.
  auto id_full = [&](int w) { return sQ + kSmem.work_full + 8 * (w % 2); };
  auto id_empty = [&](int w) { return sQ + kSmem.work_empty + 8 * (w % 2); };
  ForwardWork* const slots =
      reinterpret_cast<ForwardWork*>(smem_raw + (sQ - smem_addr(smem_raw)) + kSmem.work);
  if (threadIdx.x == 0) {
    for (int b = 0; b < kQBuffers; ++b) {
      mbarrier_init(q_full(b), 128);
      mbarrier_init(q_empty(b), kConsumerWarps);
    }
    ring.init(kConsumerWarps);
    if constexpr (kPersistent) {
      for (int w = 0; w < 2; ++w) {
        mbarrier_init(id_full(w), 1);
        mbarrier_init(id_empty(w), Cfg::kThreads);  // every thread of the block
      }
    }
  }
  __syncthreads();  // the barriers are initialized
  // The w-th work, by every thread (the producer's thread 0 has published it).
  auto work_number = [&](int w) -> ForwardWork {
    if constexpr (!kPersistent) {
      if (w > 0) first.work.valid = false;
      return first;
    } else {
      // Every thread arrives after its own read of the slot (racecheck); the __syncwarp keeps
      // ptxas from spilling (decisions.md: forward-work-slot-reads).
      mbarrier_wait(id_full(w), (w / 2) & 1);
      const ForwardWork fw = slots[w % 2];
      __syncwarp();
      mbarrier_arrive(id_empty(w));
      return fw;
    }
  };
  // The producer's thread 0: the next valid work from the counter into slot w % 2.
  auto publish_next = [&](int w) {
    if constexpr (kPersistent) {
      if (threadIdx.x != 0) return;
      // Index gridDim.x + n is the counter's n-th claim (the first works are the blocks' own).
      auto claim = [&] { return atomicAdd(work_counter, 1) + static_cast<int64_t>(gridDim.x); };
      const ForwardWork fw =
          works.first_valid(w == 0 ? static_cast<int64_t>(blockIdx.x) : claim(), claim);
      if (w >= 2) mbarrier_wait(id_empty(w), ((w / 2) - 1) & 1);
      slots[w % 2] = fw;
      mbarrier_arrive(id_full(w));
    }
  };

  if (threadIdx.x < 128) {  // the producer warpgroup
    warpgroup_registers_down<Cfg::kProducerRegisters>();
    int item = 0, fill = 0;  // Q's hand-overs so far, K/V tiles so far
    for (int w = 0;; ++w) {
      publish_next(w);
      const ForwardWork fw = work_number(w);
      if (!fw.work.valid) break;
      const BlockWork& work = fw.work;
      const SequenceBounds& seq = fw.seq;
      const int h_first = work.head_group * heads_per_block;
      const T* q_seq = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride;
      const T* k_seq = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride;
      const T* v_seq = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride;
      for (int64_t qt = work.first; qt < work.end; ++qt) {
        const BlockTile tile = query_tile_in<kBM, kBN>(p, seq, qt);
        if (tile.walk.count == 0) continue;  // the consumers neither wait for Q nor for K/V
        for (int i = 0; i < heads_per_block; ++i, ++item) {
          const int h = h_first + i;
          const int hk = h / group;
          if (item >= kQBuffers) mbarrier_wait(q_empty(item), ((item / kQBuffers) - 1) & 1);
          const uint32_t q_tile = sQ + (item % kQBuffers) * QTile::kBytes;
          const T* q_head = q_seq + h * p.q_head_stride;
          load_rows_tma_or_async<kBM, D, kDataD>(q_tile, q_map, h, seq.q_begin, q_head,
                                                 p.q_row_stride, tile.r0, seq.q_len, q_full(item));
          for (int t = 0; t < tile.walk.count; ++t, ++fill)
            ring.template produce<D, kDataD>(
                fill, tile.walk.first + static_cast<int64_t>(t) * kBN, hk, seq, k_map,
                k_seq + hk * p.k_head_stride, p.k_row_stride, v_map,
                v_seq + hk * p.v_head_stride, p.v_row_stride);
        }
      }
    }
    return;
  }

  warpgroup_registers_up<Cfg::kConsumerRegisters>();
  const int warp = static_cast<int>(threadIdx.x) / 32 - 4;  // consumer warp
  // Consumer warpgroup; warp-uniform where the descriptors are advanced (in uniform registers).
  const int wg = Cfg::kAdvanceDescriptors ? warp_uniform(warp / 4) : warp / 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;   // accumulator row (and row + 8) inside the warp's 16
  const int qd = lane % 4;  // accumulator column pair
  const int warp_row = warp * 16;

  float o[D / 2];
  const float c_log2 = raw_to_log2<kSoftcap>(p);
  float row_max[2], row_sum[2];  // row_sum per thread; reduced over the quad at the end
  // This warpgroup's 64 rows in each column block of the current item's Q.
  uint32_t q_rows = sQ + wg * 64 * 128;
  // P of the last tile softmax went through, as the A operand of O += P V.
  uint32_t pf[kBN / 16][4];
  using RowsOut = std::conditional_t<Cfg::kTmaOut, WarpRowsTmaOut<T, D, kDataD>,
                                     WarpRowsOut<T, D, Cfg::kOutCols, kDataD>>;
  static_assert(RowsOut::kScratchBytes == Cfg::kScratchBytes, "one scratch per consumer warp");
  const uint32_t scratch = sQ + kSmem.out + warp * Cfg::kScratchBytes;
  // The current query tile: its first row, its first key tile, and the visibility of keys from
  // this thread's rows warp_row + g + 8 * r.
  int64_t m0 = 0, n_first = 0;
  RowVisibility vis;
  SequenceBounds seq;  // the current work's sequence
  int item = 0, g0 = 0;  // as the producer counts: Q's hand-overs, the item's first K/V tile

  auto release_q = [&] {
    if (lane == 0) mbarrier_arrive(q_empty(item));
  };
  // Turns (ping-pong): consumer c issues its products when named barrier 1 + c lets it, then lets
  // c + 1 (mod the consumers) go. The last consumer lets the first go once before anything, and
  // the first absorbs the last one's final hand-over at the exit, so no arrival is left pending.
  constexpr int kTurnThreads = 256;  // the consumer that waits + the one that lets it go
  if (wg == Cfg::kConsumers - 1) named_barrier_arrive(1, kTurnThreads);
  auto begin_turn = [&] { named_barrier_sync(1 + wg, kTurnThreads); };
  auto end_turn = [&] { named_barrier_arrive(1 + (wg + 1) % Cfg::kConsumers, kTurnThreads); };
  // Issues S = Q K^T for the block's tile g_all as one wgmma group (after a fence covering o and
  // pf too), reducing over the head dim's kDataD columns. The descriptors are built once per tile
  // and advanced per product (gmma_desc_advance; O += P V's too, in wgmma_rs_mn_major): fewer
  // instructions in the loop (decisions.md: forward-issue-descriptors).
  auto issue_s = [&](int g_all, float (&s)[kBN / 2]) {
    const GmmaOperand<Cfg::kAdvanceDescriptors> q(q_rows, 0), k(ring.k_stage(g_all), 0);
    pin_registers(s);
    pin_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDataD / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;  // 16 columns = 32 bytes inside a 128-byte row
      Wgmma<T, kBN>::template ss<0, 0>(
          s, q.at((kk / 4) * QTile::kBlockBytes + col), k.at((kk / 4) * KvTile::kBlockBytes + col),
          kk > 0);
    }
    wgmma_commit();
  };
  // Issues O += P V for the block's tile g_all (P in pf, fenced by the caller) as one wgmma group,
  // over the head dim's kDataD columns (96 of d128's tiles: the rest of O stays zero).
  auto issue_pv = [&](int g_all) {
    wgmma_rs_mn_major<T, kDataD, KvTile, Cfg::kAdvanceDescriptors>(o, pf, ring.v_stage(g_all));
    wgmma_commit();
  };
  // Masks S of tile t and turns it into P in place (fp32) by the online softmax; alpha
  // is what O must be scaled by (rescale_and_pack does, once O's pending product has landed).
  auto softmax = [&](int t, float (&s)[kBN / 2], float (&alpha)[2]) {
    const int64_t n0 = n_first + static_cast<int64_t>(t) * kBN;
    if constexpr (kSoftcap) {
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i)
        s[i] = raw_score<kSoftcap>(s[i], p.softmax_scale, p.softcap);
    }
    if (!tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                            p.window_right)) {
      const int j0 = static_cast<int>(n0) + 2 * qd;
      const int k_len = static_cast<int>(seq.k_len);
      if constexpr (Cfg::kRowLimitMask) {
        // Key j0 + k is visible from row r iff lo[r] <= k < hi[r] (clamped to the tile: no
        // overflow at the bounds' far values).
        int lo[2], hi[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          lo[r] = max(vis.begin + 8 * r, j0) - j0;
          hi[r] = min(min(vis.end + 8 * r, k_len), j0 + kBN) - j0;
        }
        if (lo[0] == 0 && lo[1] == 0) {
#pragma unroll
          for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
            for (int c = 0; c < 4; ++c)
              if (i * 8 + (c & 1) >= hi[c / 2]) s[4 * i + c] = -INFINITY;
        } else {
#pragma unroll
          for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int k = i * 8 + (c & 1);
              if (k < lo[c / 2] || k >= hi[c / 2]) s[4 * i + c] = -INFINITY;
            }
        }
      } else {
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int delta = 8 * (c / 2);
            const int j = j0 + i * 8 + (c & 1);
            if (j < vis.begin + delta || j >= vis.end + delta || j >= k_len)
              s[4 * i + c] = -INFINITY;
          }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
      if constexpr (Cfg::kTreeReduce && !kSoftcap) {
        mx = RowPairTree<0, kBN / 4>::reduce(s, r, [](float a, float b) { return fmaxf(a, b); });
      } else {
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i)
          mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float m_new = fmaxf(row_max[r], mx);
      if constexpr (Cfg::kLazyRescale) {
        // Keeps the old maximum unless the new one is over 8 above it in exp2's units (a row's
        // first visible key: +inf above -inf; no visible key yet: NaN, kept at -inf).
        if (!((m_new - row_max[r]) * c_log2 > 8.f)) m_new = row_max[r];
      }
      // A row with no visible key so far keeps max -inf; subtract 0 so exp2 gives 0, not NaN.
      const float m_use = (m_new == -INFINITY ? 0.f : m_new) * c_log2;
      if (!Cfg::kLazyRescale || m_new != row_max[r]) {
        alpha[r] = fast_exp2(row_max[r] * c_log2 - m_use);
        row_max[r] = m_new;
        row_sum[r] *= alpha[r];
      } else {
        alpha[r] = 1.f;
      }
      if constexpr (Cfg::kTreeReduce && !kSoftcap) {
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i) {
          s[4 * i + 2 * r] = fast_exp2(fmaf(s[4 * i + 2 * r], c_log2, -m_use));
          s[4 * i + 2 * r + 1] = fast_exp2(fmaf(s[4 * i + 2 * r + 1], c_log2, -m_use));
        }
        row_sum[r] += RowPairTree<0, kBN / 4>::reduce(s, r, [](float a, float b) { return a + b; });
      } else {
#pragma unroll
        for (int i = 0; i < kBN / 8; ++i) {
          s[4 * i + 2 * r] = fast_exp2(fmaf(s[4 * i + 2 * r], c_log2, -m_use));
          s[4 * i + 2 * r + 1] = fast_exp2(fmaf(s[4 * i + 2 * r + 1], c_log2, -m_use));
          row_sum[r] += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
        }
      }
    }
  };
  // O *= alpha and P into pf: the accumulator layout of key octets 2kk and 2kk + 1 is the A
  // layout of k-step kk.
  auto rescale_and_pack = [&](const float (&s)[kBN / 2], const float (&alpha)[2]) {
    pin_registers(o);
    if (!Cfg::kLazyRescale || alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) o[4 * i + c] *= alpha[c / 2];
    }
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        pf[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]);
  };

  for (int w = 0;; ++w) {
    const ForwardWork fw = work_number(w);
    if (!fw.work.valid) break;
    const BlockWork& work = fw.work;
    const int h_first = work.head_group * heads_per_block;
    seq = fw.seq;
    for (int64_t qt = work.first; qt < work.end; ++qt) {
      const BlockTile tile = query_tile_in<kBM, kBN>(p, seq, qt);
      m0 = tile.r0;
      n_first = tile.walk.first;
      const int n = tile.walk.count;
      vis = row_visibility(seq, m0 + warp_row + g, p.causal, p.window_left, p.window_right, 32);
      for (int i = 0; i < heads_per_block; ++i) {
        const int h = h_first + i;
#pragma unroll
        for (int k = 0; k < D / 2; ++k) o[k] = 0.f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          row_max[r] = -INFINITY;
          row_sum[r] = 0.f;
        }
        if (n > 0) {
          mbarrier_wait(q_full(item), (item / kQBuffers) & 1);
          q_rows = sQ + (item % kQBuffers) * QTile::kBytes + wg * 64 * 128;
          // Tile 0 has no product before it, so it is peeled off: a wgmma issued on a divergent
          // path makes ptxas serialize them all.
          {
            float s[kBN / 2], alpha[2];
            ring.wait_k(g0);
            begin_turn();
            issue_s(g0, s);
            end_turn();
            wgmma_wait<0>();
            ring.release_k(g0, lane);
            if (n == 1) release_q();
            pin_registers(s);
            softmax(0, s, alpha);
            rescale_and_pack(s, alpha);
          }
          for (int t = 1; t < n; ++t) {
            float s[kBN / 2], alpha[2];
            ring.wait_k(g0 + t);
            ring.wait_v(g0 + t - 1);
            begin_turn();
            issue_s(g0 + t, s);
            issue_pv(g0 + t - 1);
            end_turn();
            wgmma_wait<1>();
            ring.release_k(g0 + t, lane);
            if (t == n - 1) release_q();
            pin_registers(s);
            softmax(t, s, alpha);
            wgmma_wait<0>();
            ring.release_v(g0 + t - 1, lane);
            rescale_and_pack(s, alpha);
          }
          ring.wait_v(g0 + n - 1);
          pin_registers(o);
          wgmma_fence();
          issue_pv(g0 + n - 1);
          wgmma_wait<0>();
          pin_registers(o);
          ring.release_v(g0 + n - 1, lane);
        }

        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float sum = row_sum[r];
          sum += __shfl_xor_sync(0xffffffffu, sum, 1);
          sum += __shfl_xor_sync(0xffffffffu, sum, 2);
          inv[r] = sum > 0.f ? 1.f / sum : 0.f;
          const int64_t row = m0 + warp_row + g + 8 * r;
          if (qd == 0 && p.lse != nullptr && row < seq.q_len)
            p.lse[h * p.lse_head_stride + seq.q_begin + row] =
                sum > 0.f ? (row_max[r] * c_log2 + log2f(sum)) * kLn2 : INFINITY;
        }
        T* const out_rows = static_cast<T*>(p.out) +
                            (seq.q_begin + m0 + warp_row) * p.out_row_stride +
                            h * p.out_head_stride;
        if constexpr (Cfg::kTmaOut)
          RowsOut::store(o, inv, scratch, out_map, h, static_cast<int>(seq.q_begin + m0 + warp_row),
                         out_rows, p.out_row_stride, seq.q_len - m0 - warp_row, lane);
        else
          RowsOut::store(o, inv, scratch, out_rows, p.out_row_stride, seq.q_len - m0 - warp_row,
                         lane);
        if (n > 0) {
          ++item;
          g0 += n;
        }
      }
    }
  }
  if (wg == 0) named_barrier_sync(1, kTurnThreads);
  if constexpr (Cfg::kTmaOut) RowsOut::drain(lane);
#endif
}


// The forward with shape Cfg, launched as `launch` says. work_counter: null (a block per work), or
// one int32 of device memory for the persistent kernel (zeroed here).
template <class T, class Cfg>
void launch_hopper_forward_with(const AttentionParams& p, cudaStream_t stream,
                                const ForwardLaunch& launch, int* work_counter) {
  if (slot_count(p.total_q, p.batch, Cfg::kBlockM) <= 0 || p.heads <= 0) return;
  const int sms = multiprocessor_count();
  const int heads_per_block =
      forward_heads_per_block(p, Cfg::kBlockM, Cfg::kBlockN, sms, Cfg::kHeadsPastLongKeys,
                              launch.max_heads_per_block);
  const LaunchOrder order =
      forward_launch_order(p, Cfg::kBlockM, heads_per_block, launch.order, sms);
  if (order.blocks() > INT32_MAX)
    throw Error("varpack CUDA attention: too many query tiles x heads for one launch (" +
                std::to_string(order.blocks()) + " blocks of " + std::to_string(Cfg::kBlockM) +
                " queries); split the batch");
  const bool persistent = launch.persistent && work_counter != nullptr;
  const auto kernel =
      p.softcap > 0.f ? (persistent ? hopper_forward_kernel<T, Cfg, true, true>
                                    : hopper_forward_kernel<T, Cfg, true, false>)
                      : (persistent ? hopper_forward_kernel<T, Cfg, false, true>
                                    : hopper_forward_kernel<T, Cfg, false, false>);
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: cannot reserve shared memory: ") +
                cudaGetErrorString(attr));
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const CUtensorMap q_map = head_tile_map(p.q, kBf16, p.total_q, p.heads, Cfg::kDataD,
                                          p.q_row_stride, p.q_head_stride, Cfg::kBlockM);
  const CUtensorMap k_map = head_tile_map(p.k, kBf16, p.total_k, p.kv_heads, Cfg::kDataD,
                                          p.k_row_stride, p.k_head_stride, Cfg::kBlockN);
  const CUtensorMap v_map = head_tile_map(p.v, kBf16, p.total_k, p.kv_heads, Cfg::kDataD,
                                          p.v_row_stride, p.v_head_stride, Cfg::kBlockN);
  // The output's boxes: one consumer warp's 16 rows (unused without kTmaOut).
  const CUtensorMap out_map =
      Cfg::kTmaOut ? head_tile_map(p.out, kBf16, p.total_q, p.heads, Cfg::kDataD,
                                   p.out_row_stride, p.out_head_stride, 16)
                   : CUtensorMap{};
  int64_t grid = order.blocks();
  if (persistent) {
    grid = std::min<int64_t>(grid, forward_persistent_blocks(sms, launch.max_blocks));
    const cudaError_t zeroed = cudaMemsetAsync(work_counter, 0, sizeof(int), stream);
    if (zeroed != cudaSuccess)
      throw Error(std::string("varpack CUDA attention: cannot zero the work counter: ") +
                  cudaGetErrorString(zeroed));
  }
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
      p, q_map, k_map, v_map, out_map, order, heads_per_block, work_counter);
  check_launch("the Hopper forward kernel");
}

template <int D>
using HopperForwardConfig = HopperForwardTile<typename ForwardShapeOf<D>::type>;

// The library's forward on Hopper: the shape of head dim D (d64's long shape from
// kLongD64Queries queries), persistent given a work counter (decisions.md: forward-persistent).
template <class T, int D>
void launch_hopper_forward(const AttentionParams& p, cudaStream_t stream, int* work_counter,
                           const ForwardLaunch& launch = {}) {
  if constexpr (D == 64) {
    if (p.max_seqlen_q >= kLongD64Queries)
      return launch_hopper_forward_with<T, HopperForwardTile<ForwardD64Long>>(p, stream, launch,
                                                                              work_counter);
  }
  launch_hopper_forward_with<T, HopperForwardConfig<D>>(p, stream, launch, work_counter);
}

}  // namespace varpack::cuda
