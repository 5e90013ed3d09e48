// Varlen attention backward on Hopper's wgmma (sm_90a). The atomic-dQ mode (FlashAttention's
// default) is this kernel alone; the deterministic mode runs it without dQ (kAtomicDq = false:
// no dS^T staging, dQ product or reducing warps), then the wgmma dQ pass of hopper_dq.cuh. One
// block = 128 keys of one kv head; it walks every query tile (of kQueryStep rows, of every q head
// of its group) that can see its keys. The block is warp-specialized:
// - all threads load K, V and the first query tile's Q, dO, lse and Delta together (or, with
//   TmaPrologue, the producer does, below, and the compute warpgroups wait on mbarriers); then
// - a producer warpgroup: two warps load each further query tile into a ring of stages, Q and dO
//   by the TMA unit (a sequence's last, partial tile by cp.async, which zero-fills the rows past
//   its end), lse and Delta by cp.async, all counted on an mbarrier per stage; two warps add each
//   tile's dQ from shared memory to the fp32 accumulator with bulk asynchronous reductions;
// - two compute warpgroups of 64 keys each. Per tile, each computes S^T = K Q^T and
//   dP^T = V dO^T from shared memory, turns them into P^T and dS^T in registers, and accumulates
//   dV += P^T dO and dK += dS^T Q with P^T and dS^T as register operands. dS^T also goes to shared
//   memory, where after a barrier of the two each computes half of dQ = dS K over all the
//   block's keys (half of the columns, or of the rows of a 128-query tile), and hands it to the
//   reducing warps through one of two shared-memory buffers. The compute warpgroups neither issue
//   loads nor wait for dQ's global reductions.
// The shapes: hopper_backward_configs.cuh; the block's layout: hopper_backward_tile.cuh; the
// launches and modes: hopper_backward_launch.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/hopper_backward_tile.cuh"
#include "attn/cuda/hopper_dq_accumulator.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/warp_rows_out.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

template <class T, class Cfg, bool kSoftcap, bool kAtomicDq>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_backward_kernel(const AttentionBackwardParams p,
                           const __grid_constant__ CUtensorMap q_map,
                           const __grid_constant__ CUtensorMap dout_map,
                           const __grid_constant__ CUtensorMap k_map,
                           const __grid_constant__ CUtensorMap v_map, const float* delta,
                           float* dq_accum, uint32_t* dq_states, int64_t slots) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kD;
  constexpr int kDataD = Cfg::kDataD;
  // With atomic dQ and DataD < D (d96 on d128's tiles) the dQ products also compute the columns
  // past DataD (zeros: K's columns there are), and only DataD of each row reach the accumulator,
  // whose rows are DataD wide.
  static_assert(!kAtomicDq || !Cfg::kSplitColumns, "split columns keep no dQ staging");
  constexpr int kOwnCols = Cfg::kOwnCols;
  constexpr int kBN = Cfg::kKeysPerBlock;
  constexpr int kBM = Cfg::kQueryStep;
  constexpr int kStages = Cfg::kStages;
  constexpr int kDqCols = Cfg::kDqCols;
  // The compute threads + the reducing warps.
  constexpr int kDqHandoff = Cfg::kComputeThreads + 32 * Cfg::kReducerWarps;
  // SplitDqEmpty: each compute warpgroup waits for a free dQ buffer on a barrier of its own with
  // the reducing warps, not for the other warpgroup too; the dS^T rows the other warpgroup's dQ
  // product reads are then guarded by kDsFree (decisions.md: backward-split-dq-empty).
  constexpr bool kSplitDqEmpty = Cfg::kSplitDqEmpty && kAtomicDq;
  constexpr int kDqEmptyCount =
      (kSplitDqEmpty ? Cfg::kComputeThreads / 2 : Cfg::kComputeThreads) + 32 * Cfg::kReducerWarps;
  auto release_dq_buffer = [&](int b) {  // the reducing warps' arrival(s)
    named_barrier_arrive(kDqEmpty + b, kDqEmptyCount);
    if constexpr (kSplitDqEmpty) named_barrier_arrive(kDqEmptyWg1 + b, kDqEmptyCount);
  };
  using KvTile = typename Cfg::KvTile;
  using QTile = typename Cfg::QTile;
  using DsTile = typename Cfg::DsTile;
  extern __shared__ unsigned char smem_raw[];

  const TileSlot slot = find_slot<kBN, TileOrder::kFirstFirst>(p.cu_seqlens_k, p.batch, slots);
  if (!slot.valid) return;
  const BlockTile tile = key_tile<kBN, kBM>(p, slot);
  const int hk = static_cast<int>(blockIdx.y);
  const int group = p.heads / p.kv_heads;
  const SequenceBounds seq = tile.seq;
  const int64_t n0 = tile.r0;
  const TileWalk walk = tile.walk;
  const int64_t m_first = walk.first;
  const int m_tiles = walk.count;
  const int iters = m_tiles * group;
  // Iteration it: q head hk * group + it / m_tiles, query tile starting at m_first + (it %
  // m_tiles) * kBM. Every role visits the iterations in order, so each steps a TileCursor
  // instead of dividing (decisions.md: backward-tile-cursor).
  struct TileCursor {
    int head, tile;  // head within the group, query tile within the walk
    __device__ void step(int tiles) {
      if (++tile == tiles) {
        tile = 0;
        ++head;
      }
    }
  };
  auto tile_start = [&](const TileCursor& c) {
    return m_first + static_cast<int64_t>(c.tile) * kBM;
  };

  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t sK = (raw_addr + 1023) & ~1023u;
  constexpr auto kSmem = Cfg::kSmem;
  const uint32_t sV = sK + kSmem.v;
  const uint32_t sQ = sK + kSmem.q;  // per stage
  const uint32_t sdO = sK + kSmem.dout;
  const uint32_t sDs = sK + kSmem.ds;
  const uint32_t sDq = sK + kSmem.dq;
  const uint32_t sStat = sK + kSmem.stat;
  auto stage_full = [&](int s) { return sK + kSmem.stage_full + 8 * s; };
  auto stage_empty = [&](int s) { return sK + kSmem.stage_empty + 8 * s; };
  const uint32_t kv_full = sK + kSmem.kv_full;
  constexpr bool kTmaPrologue = Cfg::kTmaPrologue;
  // Queues the loads of iteration `it` (at cursor c) into stage it % kStages, by threads 0 ..
  // threads - 1, their copy loops unrolled `unroll` times (1 for the producer warps' few
  // registers).
  auto load_queries = [&](auto threads, auto unroll, int it, const TileCursor& c) {
    constexpr int kLoaders = decltype(threads)::value;
    constexpr int kUnroll = decltype(unroll)::value;
    const int s = it % kStages;
    const int h = hk * group + c.head;
    const int64_t m0 = tile_start(c);
    const T* q = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride + h * p.q_head_stride;
    const T* dout =
        static_cast<const T*>(p.dout) + seq.q_begin * p.dout_row_stride + h * p.dout_head_stride;
    load_gmma_tile_async<kBM, D, kLoaders, kUnroll, kDataD>(sQ + s * QTile::kBytes, q,
                                                            p.q_row_stride, m0, seq.q_len);
    load_gmma_tile_async<kBM, D, kLoaders, kUnroll, kDataD>(sdO + s * QTile::kBytes, dout,
                                                            p.dout_row_stride, m0, seq.q_len);
    load_row_stats_async<kBM, kLoaders>(sStat, s, p, delta, seq, h, m0);
  };
  // K and V's tile (keys n0 ..) by cp.async, by threads 0 .. threads - 1, unrolled `unroll` times.
  auto load_kv = [&](auto threads, auto unroll) {
    constexpr int kLoaders = decltype(threads)::value;
    constexpr int kUnroll = decltype(unroll)::value;
    const T* k = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride + hk * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride + hk * p.v_head_stride;
    load_gmma_tile_async<kBN, D, kLoaders, kUnroll, kDataD>(sK, k, p.k_row_stride, n0, seq.k_len);
    load_gmma_tile_async<kBN, D, kLoaders, kUnroll, kDataD>(sV, v, p.v_row_stride, n0, seq.k_len);
  };
  using AllThreads = std::integral_constant<int, Cfg::kThreads>;
  using AllUnrolled =
      std::integral_constant<int, (kBM * D / 8 + Cfg::kThreads - 1) / Cfg::kThreads>;
  using LoadThreads = std::integral_constant<int, Cfg::kLoadThreads>;

  // Without TmaPrologue, K, V and iteration 0's tiles by every thread at once: nothing can start
  // before they land. With it, only the barriers (kv_full: K and V, a phase of the producer's two
  // load warps' arrivals + the TMA bytes).
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(stage_full(s), Cfg::kLoadThreads);
      mbarrier_init(stage_empty(s), Cfg::kComputeThreads);
    }
    if (kTmaPrologue) mbarrier_init(kv_full, Cfg::kLoadThreads);
  }
  if (!kTmaPrologue && iters > 0) {
    load_kv(AllThreads{},
            std::integral_constant<int, (kBN * D / 8 + Cfg::kThreads - 1) / Cfg::kThreads>{});
    load_queries(AllThreads{}, AllUnrolled{}, 0, TileCursor{0, 0});
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();

  if (threadIdx.x < 128) {  // the producer warpgroup
    warpgroup_registers_down<Cfg::kProducerRegisters>();
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if (warp < 2) {
      if (kTmaPrologue && iters > 0) {
        // A key tile wholly inside the sequence by the TMA unit; a partial one by cp.async, which
        // zero-fills the rows past its end (the TMA box would bring the next sequence's rows).
        if (n0 + kBN <= seq.k_len) {
          if (threadIdx.x == 0) {
            mbarrier_expect_tx(kv_full, 2 * KvTile::kBytes);
            const int row = static_cast<int>(seq.k_begin + n0);
            tma_load_gmma_tile<KvTile, D>(sK, k_map, hk, row, kv_full);
            tma_load_gmma_tile<KvTile, D>(sV, v_map, hk, row, kv_full);
          }
        } else {
          load_kv(LoadThreads{}, std::integral_constant<int, 1>{});
        }
        cp_async_arrive(kv_full);
      }
      // Fill number (it - kFirst) / kStages of stage it % kStages (iteration 0 is this loop's with
      // TmaPrologue, kFirst = 0, else the prologue's); refill a stage once both compute
      // warpgroups are done with its previous tile. A tile wholly inside the sequence goes through
      // the TMA unit: issuing its copies thread by thread took these two warps about as long as
      // the compute warpgroups took for the tile, so the compute waited for data.
      TileCursor cursor{0, 0};
      constexpr int kFirst = kTmaPrologue ? 0 : 1;
      for (int it = kFirst; it < iters; ++it) {
        if (it > 0) cursor.step(m_tiles);
        const int s = it % kStages;
        if (it >= kStages) {
          mbarrier_wait(stage_empty(s), (it / kStages + 1) & 1);
        }
        const int64_t m0 = tile_start(cursor);
        if (m0 + kBM <= seq.q_len) {
          const int h = hk * group + cursor.head;
          if (threadIdx.x == 0) {
            // Before this thread's arrival below, so the phase cannot complete without the bytes.
            mbarrier_expect_tx(stage_full(s), 2 * QTile::kBytes);
            const int row = static_cast<int>(seq.q_begin + m0);
            const uint32_t stage = s * QTile::kBytes;
            tma_load_gmma_tile<QTile, D>(sQ + stage, q_map, h, row, stage_full(s));
            tma_load_gmma_tile<QTile, D>(sdO + stage, dout_map, h, row, stage_full(s));
          }
          load_row_stats_async<kBM, Cfg::kLoadThreads>(sStat, s, p, delta, seq, h, m0);
        } else {
          load_queries(LoadThreads{}, std::integral_constant<int, 1>{}, it, cursor);
        }
        cp_async_arrive(stage_full(s));
      }
      cp_async_wait<0>();
    } else if (kAtomicDq && warp >= 2 && warp < 2 + Cfg::kReducerWarps && iters > 0) {
      // Each lane adds whole dQ rows (D floats, contiguous in the [total_q, heads, D] accumulator),
      // or stores them where its block is the first at them.
      // Tile it's dQ is in buffer it % kDqBuffers; each buffer is released (an arrival that the
      // compute warpgroups' next use of it waits for) as soon as its reductions have read it: the
      // issue of a tile's reductions, not L2, is what the compute warpgroups wait for
      // (decisions.md: backward-reducing-warps).
      constexpr int kBuffers = Cfg::kDqBuffers;
      const int row_group = warp - 2;
      const int lane = static_cast<int>(threadIdx.x) % 32;
      // The rows r of the tile with dq_row_group(r) == row_group.
      const int first_row = row_group * 32 + lane;
      constexpr int kRowStep = 32 * Cfg::kReducerWarps;
      for (int b = 0; b < kBuffers && b < iters; ++b) release_dq_buffer(b);
      TileCursor cursor{0, 0};
      // With claims (Cfg::kClaimDqRows), this warp's rows of a tile (none where it has at most
      // 32 * row_group rows) are stored if this block is the first there, else added
      // (hopper_dq_accumulator.cuh). The state of the next tile's rows is read while this tile's
      // are issued, off the path the compute warpgroups wait on (decisions.md:
      // backward-dq-state-peek).
      auto state_of = [&](const TileCursor& c) {
        return dq_states + dq_state_index(seq.q_begin + tile_start(c), row_group, p.heads,
                                          hk * group + c.head);
      };
      auto has_rows = [&](const TileCursor& c) {
        return row_group * 32 < seq.q_len - tile_start(c);
      };
      uint32_t seen = kDqRowsStored;
      if constexpr (Cfg::kClaimDqRows)
        if (has_rows(cursor)) seen = peek_dq_rows(state_of(cursor));
      for (int it = 0; it < iters; ++it, cursor.step(m_tiles)) {
        const int b = it % kBuffers;
        const int h = hk * group + cursor.head;
        const int64_t m0 = tile_start(cursor);
        const int64_t left = seq.q_len - m0;
        const int rows = left < kBM ? static_cast<int>(left) : kBM;
        [[maybe_unused]] uint32_t* state = state_of(cursor);
        named_barrier_sync(kDqFull + b, kDqHandoff);
        bool first = false;
        if constexpr (Cfg::kClaimDqRows) {
          first = first_to_dq_rows(state, seen, lane);
          // One loop per operation, not the choice inside one loop: the reducing warps have 24
          // registers, and ptxas spilled inside the loop that chose.
          float* dst = dq_accum + ((seq.q_begin + m0 + first_row) * p.heads + h) * kDataD;
          const int64_t dst_step = static_cast<int64_t>(kRowStep) * p.heads * kDataD;
          uint32_t src = sDq + b * Cfg::kDqBytes + first_row * Cfg::kDqRowBytes;
          constexpr uint32_t kSrcStep = kRowStep * Cfg::kDqRowBytes;
          if (first) {
            for (int r = first_row; r < rows; r += kRowStep, dst += dst_step, src += kSrcStep)
              bulk_store(dst, src, kDataD * 4);
          } else {
            for (int r = first_row; r < rows; r += kRowStep, dst += dst_step, src += kSrcStep)
              bulk_reduce_add_f32(dst, src, kDataD * 4);
          }
        } else {
          for (int r = first_row; r < rows; r += kRowStep)
            bulk_reduce_add_f32(dq_accum + ((seq.q_begin + m0 + r) * p.heads + h) * kDataD,
                                sDq + b * Cfg::kDqBytes + r * Cfg::kDqRowBytes, kDataD * 4);
        }
        bulk_commit();
        if constexpr (Cfg::kClaimDqRows) {
          TileCursor next = cursor;
          next.step(m_tiles);
          seen = it + 1 < iters && has_rows(next) ? peek_dq_rows(state_of(next)) : kDqRowsStored;
        }
        bulk_wait_read<0>();
        if (it + kBuffers < iters) release_dq_buffer(b);
        if (first) publish_dq_rows(state, lane);
      }
      bulk_wait_read<0>();
    }
    return;
  }

  warpgroup_registers_up<Cfg::kComputeRegisters>();
  const int ctid = static_cast<int>(threadIdx.x) - 128;
  const int warp = ctid / 32;  // 0 .. 7 over both compute warpgroups: key rows warp * 16 ..
  // Warp-uniform where the descriptors are advanced (kAdvanceDescriptors), so that they live in
  // uniform registers.
  const int wg = Cfg::kAdvanceDescriptors ? warp_uniform(warp / 4) : warp / 4;
  const int lane = ctid % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const float c_log2 = raw_to_log2<kSoftcap>(p);
  const float* stat = reinterpret_cast<const float*>(smem_raw + (sStat - raw_addr));
  // This warpgroup's 64 keys in each column block, its first dK/dV column block, and its warps'
  // first keys.
  using Operand = GmmaOperand<Cfg::kAdvanceDescriptors>;
  const Operand k_rows(sK + wg * Cfg::kWarpgroupKeys * 128, 0);
  const Operand v_rows(sV + wg * Cfg::kWarpgroupKeys * 128, 0);
  const uint32_t own_cols = Cfg::kSplitColumns ? wg * (kOwnCols / 64) * QTile::kBlockBytes : 0;
  const int warp_key = Cfg::kSplitColumns ? (warp % 4) * 16 : warp * 16;
  // The tile's queries whose S^T and dP^T this warpgroup computes: all, or with SplitScores its
  // half, from q0.
  constexpr bool kSplitScores = Cfg::kSplitScores;
  constexpr int kScoreQueries = kSplitScores ? kBM / 2 : kBM;
  const int q0 = kSplitScores ? wg * kScoreQueries : 0;
  // dQ = dS K for this warpgroup's 64 query rows dq_row0 .. and kDqCols columns dq_col0 ..: dS^T
  // read MN-major from that query block, K read MN-major from that column offset.
  const int dq_row0 = wg % Cfg::kDqRowBlocks * 64;
  const int dq_col0 = wg / Cfg::kDqRowBlocks * kDqCols;
  const Operand ds_rows(sDs + (dq_row0 / 64) * DsTile::kBlockBytes, DsTile::kBlockBytes);
  const Operand k_cols(sK + (dq_col0 / 64) * KvTile::kBlockBytes + (dq_col0 % 64) * 2,
                       KvTile::kBlockBytes);

  float dk[kOwnCols / 2], dv[kOwnCols / 2];
#pragma unroll
  for (int i = 0; i < kOwnCols / 2; ++i) dk[i] = dv[i] = 0.f;

  // Keys of this thread's accumulator rows n0 + warp_key + g + 8r, inside the sequence or not.
  const int key0 = static_cast<int>(n0) + warp_key + g;
  const bool key_in[2] = {key0 < seq.k_len, key0 + 8 < seq.k_len};
  // Turns (kPingPong): warpgroup w issues a group of products when barrier kTurn + w lets it, then
  // lets the other go. Warpgroup 1 lets warpgroup 0 go once before anything, and warpgroup 0
  // absorbs warpgroup 1's last hand-over after the loop, so no arrival is left pending.
  constexpr bool kPingPong = Cfg::kPingPong && !kAtomicDq;
  constexpr int kTurnThreads = 256;  // the warpgroup that waits + the one that lets it go
  if constexpr (kPingPong) {
    if (wg == 1) named_barrier_arrive(kTurn, kTurnThreads);
  }
  auto begin_turn = [&] {
    if constexpr (kPingPong) named_barrier_sync(kTurn + wg, kTurnThreads);
  };
  auto end_turn = [&] {
    if constexpr (kPingPong) named_barrier_arrive(kTurn + 1 - wg, kTurnThreads);
  };
  // The tile loop in two halves. scores(it): S^T, dP^T and from them P^T and dS^T (in pf and dsf,
  // and with atomic dQ dS^T in shared memory); products(it): dV's, dK's and (atomic) dQ's, and dQ's
  // hand-off. With kIssueAhead, iteration it runs products(it), then scores(it + 1), so that the
  // next tile's S^T and dP^T follow this tile's dK on the tensor cores with no gap, and every
  // product is still waited for inside the iteration that issued it.
  constexpr bool kIssueAhead = Cfg::kIssueAhead && !kPingPong;
  uint32_t pf[kBM / 16][4], dsf[kBM / 16][4];
  TileCursor cursor{0, 0};  // scores(it) runs for it = 0, 1, 2, ... in turn
  auto scores = [&](int it) {
    const int s = it % kStages;
    const int64_t m0 = tile_start(cursor);
    cursor.step(m_tiles);
    if (kTmaPrologue || it > 0) {
      mbarrier_wait(stage_full(s), ((kTmaPrologue ? it : it - 1) / kStages) & 1);
      fence_proxy_async();  // the producer's cp.async writes, before wgmma reads them
    }
    // Over this warpgroup's queries q0 .. q0 + kScoreQueries - 1 of the tile (SplitScores: its
    // half; 128-byte rows, so the half starts on an 8-row group and keeps the swizzle's phase).
    // Advanced at every head dim: made at every tile, they are not held across the loop (at d64
    // the loop-wide bases below are rebuilt per product instead; kAdvanceDescriptors).
    const GmmaOperand<true> q_rows(sQ + s * QTile::kBytes + q0 * 128, 0),
        do_rows(sdO + s * QTile::kBytes + q0 * 128, 0);
    const float* lse = stat + s * 2 * kBM + q0;
    const float* dlt = lse + kBM;

    // S^T = K Q^T and dP^T = V dO^T: this warpgroup's 64 keys x kScoreQueries queries, both
    // K-major, in two groups, so that P^T = exp(S^T - lse) is computed while dP^T is still on the
    // tensor cores.
    float st[kScoreQueries / 2], dpt[kScoreQueries / 2];
    pin_registers(st);
    pin_registers(dpt);
    begin_turn();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDataD / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;  // 16 columns = 32 bytes inside a 128-byte row
      Wgmma<T, kScoreQueries>::template ss<0, 0>(
          st, k_rows.at((kk / 4) * KvTile::kBlockBytes + col),
          q_rows.at((kk / 4) * QTile::kBlockBytes + col), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kDataD / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;
      Wgmma<T, kScoreQueries>::template ss<0, 0>(
          dpt, v_rows.at((kk / 4) * KvTile::kBlockBytes + col),
          do_rows.at((kk / 4) * QTile::kBlockBytes + col), kk > 0);
    }
    wgmma_commit();
    end_turn();
    if constexpr (kIssueAhead) {
      if (it > 0) {
        wgmma_wait<2>();  // the previous tile's dK, so its stage is read
        mbarrier_arrive(stage_empty((it - 1) % kStages));
      }
    }
    // With softcap, dS^T needs each score's slope next to P^T: wait for both products.
    if constexpr (kSoftcap) wgmma_wait<0>();
    else wgmma_wait<1>();
    pin_registers(st);

    // P^T, and with softcap dS^T; accumulator (row, column) = (key warp_key + g + 8 * (c / 2),
    // query q0 + 8i + 2qd + c % 2).
    const bool full = tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                                         p.window_right);
    // Query m0 + col sees key j iff vis.begin + col <= j < vis.end + col, col < queries, j < k_len.
    const RowVisibility vis =
        row_visibility(seq, m0, p.causal, p.window_left, p.window_right, kBM);
    const int queries = seq.q_len - m0 < kBM ? static_cast<int>(seq.q_len - m0) : kBM;
    if constexpr (!kSoftcap) {
      // The exponentials, then the mask only where the tile is not wholly visible: one branch a
      // tile, where in one loop ptxas branched around each score's test (decisions.md:
      // backward-mask-after-exponentials).
#pragma unroll
      for (int i = 0; i < kScoreQueries / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          st[4 * i + c] =
              fast_exp2(fmaf(st[4 * i + c], c_log2, -lse[i * 8 + 2 * qd + (c & 1)] * kLog2e));
      if (!full) {
#pragma unroll
        for (int i = 0; i < kScoreQueries / 8; ++i)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int col = q0 + i * 8 + 2 * qd + (c & 1);
            const int shifted = key0 + 8 * (c / 2) - col;
            if (!(key_in[c / 2] && col < queries && shifted >= vis.begin && shifted < vis.end))
              st[4 * i + c] = 0.f;
          }
      }
    } else {
      // The mask inside the exponentials' loop, as two column bounds per key row
      // (visible_columns: two compares a score); without softcap the bounds gained nothing
      // (decisions.md: backward-softcap-column-mask).
      ColumnLimits limits[2];
      if (!full) {
#pragma unroll
        for (int r = 0; r < 2; ++r)
          limits[r] = visible_columns(vis, key0 + 8 * r, key_in[r], q0 + 2 * qd, queries,
                                      kScoreQueries);
      }
#pragma unroll
      for (int i = 0; i < kScoreQueries / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int col = q0 + i * 8 + 2 * qd + (c & 1);
          float raw, slope;
          raw_and_slope<kSoftcap>(st[4 * i + c], p.softmax_scale, p.softcap, raw, slope);
          float pr = fast_exp2(fmaf(raw, c_log2, -lse[col - q0] * kLog2e));
          if (!full) {
            const int k = i * 8 + (c & 1);
            if (k < limits[c / 2].lo || k >= limits[c / 2].hi) pr = 0.f;
          }
          st[4 * i + c] = pr;
          dpt[4 * i + c] = pr * (dpt[4 * i + c] - dlt[col - q0]) * slope;
        }
    }
    if constexpr (!kSoftcap) {
      wgmma_wait<0>();
      pin_registers(dpt);
#pragma unroll
      for (int i = 0; i < kScoreQueries / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          dpt[4 * i + c] = st[4 * i + c] * (dpt[4 * i + c] - dlt[i * 8 + 2 * qd + (c & 1)]);
    } else {
      pin_registers(dpt);
    }
    if constexpr (kSplitScores) {
      // P^T and dS^T of this warpgroup's queries into this tile's buffer, for both warpgroups'
      // products. The buffer was last read by the products of two tiles ago, which both
      // warpgroups waited for (finish, or IssueAhead's wait in the previous tile's scores) before
      // the previous tile's barrier here.
      const uint32_t buf = sDs + (it % 2) * 2 * DsTile::kBytes;
#pragma unroll
      for (int i = 0; i < kScoreQueries / 8; ++i)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t at = DsTile::offset(warp_key + g + 8 * r, q0 / 8 + i) + 4 * qd;
          st_shared_b32(buf + at, Mma<T>::pack(st[4 * i + 2 * r], st[4 * i + 2 * r + 1]));
          st_shared_b32(buf + DsTile::kBytes + at,
                        Mma<T>::pack(dpt[4 * i + 2 * r], dpt[4 * i + 2 * r + 1]));
        }
      fence_proxy_async();  // before the products read them
      named_barrier_sync(kDsReady, Cfg::kComputeThreads);
    } else {
      // SplitDqEmpty: this warpgroup's dS^T rows are free once the other warpgroup's dQ product of
      // the previous tile has read them (its arrival) and its own warps' have (they reach this
      // sync only past their wait for it); without it, both warpgroups' kDqEmpty sync orders it.
      if constexpr (kSplitDqEmpty)
        if (it > 0) named_barrier_sync(kDsFree + wg, Cfg::kComputeThreads);
      // As register A operands over the query dimension (k-step kk = query octets 2kk, 2kk + 1),
      // and dS^T into shared memory for the dQ product.
#pragma unroll
      for (int i = 0; i < kBM / 8; ++i)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          pf[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(st[4 * i + 2 * r], st[4 * i + 2 * r + 1]);
          dsf[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(dpt[4 * i + 2 * r], dpt[4 * i + 2 * r + 1]);
          if constexpr (kAtomicDq && !Cfg::kStmatrixDs)
            st_shared_b32(sDs + DsTile::offset(warp * 16 + g + 8 * r, i) + 4 * qd,
                          dsf[i / 2][(i & 1) * 2 + r]);
        }
      if constexpr (kAtomicDq && Cfg::kStmatrixDs) {
        // dsf[k][j] is the 8 x 8 block of key rows warp * 16 + 8 (j % 2) .. and query octet
        // 2k + j / 2, in stmatrix's layout; lanes 8j .. 8j + 7 address block j's rows: 4 stores a
        // tile at 64 queries instead of 16 (decisions.md: backward-stmatrix-ds).
        const int block = lane / 8;
#pragma unroll
        for (int k = 0; k < kBM / 16; ++k)
          stmatrix_x4(sDs + DsTile::offset(warp * 16 + lane % 8 + 8 * (block % 2),
                                           2 * k + block / 2),
                      dsf[k]);
      }
      if constexpr (kAtomicDq) fence_proxy_async();
    }
  };
  auto products = [&](int it) {
    const int s = it % kStages;
    // dO and Q read MN-major, from this warpgroup's own columns.
    const uint32_t stage = s * QTile::kBytes + own_cols;
    const GmmaOperand<true> do_cols(sdO + stage, QTile::kBlockBytes),
        q_cols(sQ + stage, QTile::kBlockBytes);
    // dV += P^T dO and dK += dS^T Q: B = dO, Q read MN-major (rows = queries). With atomic dQ, dV's
    // product, then dQ's, then dK's, so that dQ goes to the reducing warps while dK's product is
    // still on the tensor cores (FlashAttention 3's order; decisions.md: backward-product-order).
    pin_registers(dv);
    pin_registers(dk);
    begin_turn();
    wgmma_fence();
    if constexpr (kAtomicDq) {
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk)
        Wgmma<T, kOwnCols>::template rs<1>(
            dv, pf[kk], do_cols.at(kk * 2048), 1);
      wgmma_commit();
      // dQ[this warpgroup's rows, its columns] = dS K over the block's keys: A = dS^T read
      // MN-major, B = K read MN-major (rows = keys), a k-step kk = keys 16kk .. 16kk + 15.
      float dq[kDqCols / 2];
      pin_registers(dq);
      if constexpr (Cfg::kDqOwnKeysFirst) {
        static_assert(kBN == 128 && kBM == 64, "one 64-key half of dS^T per warpgroup");
        // The offsets of this warpgroup's 64 keys and of the other's in dS^T and K (2048 bytes a
        // k-step of 16 keys), made per tile behind an asm mov: ptxas hoisted them out of the loop
        // as four more descriptors, and the loop spilled 208 bytes instead of 40.
        uint32_t own;
        asm volatile("mov.b32 %0, %1;" : "=r"(own) : "r"(wg * 8192));
        const uint32_t other = 8192 - own;
        // This warpgroup's own keys first: its four warps' rows are stored.
        named_barrier_sync(kDsOwn + wg, 128);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          Wgmma<T, kDqCols>::template ss<1, 1>(dq, ds_rows.at(own + kk * 2048),
                                               k_cols.at(own + kk * 2048), kk > 0);
        // The other warpgroup's rows. (The previous tile's were free to overwrite, as in the
        // branch below.)
        named_barrier_sync(kDsReady, Cfg::kComputeThreads);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          Wgmma<T, kDqCols>::template ss<1, 1>(dq, ds_rows.at(other + kk * 2048),
                                               k_cols.at(other + kk * 2048), 1);
      } else {
        // Every warp's dS^T rows are in shared memory. (The previous tile's were free to
        // overwrite: both warpgroups passed its dQ hand-off, kDqEmpty, after their dQ product
        // completed.)
        named_barrier_sync(kDsReady, Cfg::kComputeThreads);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk)
          Wgmma<T, kDqCols>::template ss<1, 1>(
              dq, ds_rows.at(kk * 2048), k_cols.at(kk * 2048), kk > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk)
        Wgmma<T, kOwnCols>::template rs<1>(
            dk, dsf[kk], q_cols.at(kk * 2048), 1);
      wgmma_commit();
      wgmma_wait<1>();  // dV's and dQ's products
      pin_registers(dq);

      // Hand dQ to the reducing warps. Accumulator rows are queries dq_row0 + (warp % 4) * 16 + g
      // + 8r of the tile, columns dq_col0 + 8n + 2qd + {0, 1}.
      const int b = it % Cfg::kDqBuffers;
      if constexpr (kSplitDqEmpty) {
        // This warpgroup's dQ product has read both warpgroups' dS^T: the other may overwrite its
        // rows (the last tile's arrival would be left pending, so none).
        if (it + 1 < iters) named_barrier_arrive(kDsFree + 1 - wg, Cfg::kComputeThreads);
        named_barrier_sync((wg == 0 ? kDqEmpty : kDqEmptyWg1) + b, kDqEmptyCount);
      } else {
        named_barrier_sync(kDqEmpty + b, kDqEmptyCount);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t row = sDq + b * Cfg::kDqBytes +
                             (dq_row0 + (warp % 4) * 16 + g + 8 * r) * Cfg::kDqRowBytes +
                             (dq_col0 + 2 * qd) * 4;
#pragma unroll
        for (int n = 0; n < kDqCols / 8; ++n)
          st_shared_f32x2(row + n * 32, dq[4 * n + 2 * r], dq[4 * n + 2 * r + 1]);
      }
      fence_proxy_async();  // before the bulk reductions read them
      named_barrier_arrive(kDqFull + b, kDqHandoff);
    } else if constexpr (kSplitScores) {
      // P^T and dS^T from this tile's buffer, K-major (rows = keys, k-step kk = 16 queries).
      const uint32_t buf = sDs + (it % 2) * 2 * DsTile::kBytes;
      const GmmaOperand<true> p_rows(buf, 0), ds_t_rows(buf + DsTile::kBytes, 0);
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk) {
        const uint32_t at = (kk / 4) * DsTile::kBlockBytes + (kk % 4) * 32;
        Wgmma<T, kOwnCols>::template ss<0, 1>(dv, p_rows.at(at), do_cols.at(kk * 2048), 1);
        Wgmma<T, kOwnCols>::template ss<0, 1>(dk, ds_t_rows.at(at), q_cols.at(kk * 2048), 1);
      }
      wgmma_commit();
    } else {
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk) {
        Wgmma<T, kOwnCols>::template rs<1>(
            dv, pf[kk], do_cols.at(kk * 2048), 1);
        Wgmma<T, kOwnCols>::template rs<1>(
            dk, dsf[kk], q_cols.at(kk * 2048), 1);
      }
      wgmma_commit();
    }
    end_turn();
  };
  auto finish = [&](int it) {
    wgmma_wait<0>();
    mbarrier_arrive(stage_empty(it % kStages));  // Q, dO and the row statistics are read
  };
  if (kTmaPrologue && iters > 0) {
    mbarrier_wait(kv_full, 0);
    fence_proxy_async();  // K and V by cp.async (a partial tile), before wgmma reads them
  }
  if constexpr (kIssueAhead) {
    if (iters > 0) scores(0);
    for (int it = 0; it < iters; ++it) {
      products(it);
      if (it + 1 < iters) scores(it + 1);  // also releases this tile's stage
      else finish(it);
    }
  } else {
    for (int it = 0; it < iters; ++it) {
      scores(it);
      products(it);
      finish(it);
    }
  }
  pin_registers(dv);
  pin_registers(dk);
  if constexpr (kPingPong) {
    if (wg == 0) named_barrier_sync(kTurn, kTurnThreads);
  }

  // dK and dV go out through shared memory (WarpRowsOut), in K and V's tiles once both compute
  // warpgroups are done with them (their last dQ product reads all of K; a warp's scratch spans
  // the other warpgroup's rows).
  using RowsOut = WarpRowsOut<T, kOwnCols>;
  static_assert(8 * RowsOut::kScratchBytes <= 2 * KvTile::kBytes, "K and V hold 8 warps' rows");
  named_barrier_sync(kDsReady, Cfg::kComputeThreads);
  const uint32_t scratch = sK + warp * RowsOut::kScratchBytes;
  const int64_t row0 = n0 + warp_key;
  const int col0 = Cfg::kSplitColumns ? wg * kOwnCols : 0;  // this warpgroup's first column
  const float dk_scale[2] = {p.softmax_scale, p.softmax_scale}, dv_scale[2] = {1.f, 1.f};
  RowsOut::store(dk, dk_scale, scratch,
                 static_cast<T*>(p.dk) + (seq.k_begin + row0) * p.dk_row_stride +
                     hk * p.dk_head_stride + col0,
                 p.dk_row_stride, seq.k_len - row0, lane);
  RowsOut::store(dv, dv_scale, scratch,
                 static_cast<T*>(p.dv) + (seq.k_begin + row0) * p.dv_row_stride +
                     hk * p.dv_head_stride + col0,
                 p.dv_row_stride, seq.k_len - row0, lane);
#endif
}

}  // namespace varpack::cuda
