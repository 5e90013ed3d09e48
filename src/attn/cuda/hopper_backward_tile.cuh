// The Hopper backward's block (hopper_backward.cuh) as its shape (hopper_backward_configs.cuh)
// makes it: warps, tiles, the shared-memory layout and the named barriers.
#pragma once

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/hopper_backward_configs.cuh"
#include "attn/cuda/hopper_dq_accumulator.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/smem_layout.cuh"
#include "attn/cuda/wgmma.cuh"

namespace varpack::cuda {

// A shape of hopper_backward_configs.cuh with what follows from it: warps, tiles, and the
// shared-memory layout (K, V; Q and dO per stage; dS^T; dQ; the row statistics; mbarriers).
template <class Shape>
struct HopperBackwardTile : Shape {
  using Shape::kD;
  using Shape::kDataD;
  using Shape::kQueryStep;
  using Shape::kStages;
  using Shape::kSplitColumns;
  using Shape::kSplitScores;
  static_assert(kQueryStep == 64 || kQueryStep == 128, "one or two 64-row dQ products per tile");
  static_assert(kDataD <= kD && kDataD % 16 == 0, "whole k-steps of S^T = K Q^T");
  static_assert(!kSplitColumns || kDataD == kD, "halves of whole 64-column blocks");
  static_assert(!kSplitScores || (kSplitColumns && !Shape::kPingPong),
                "scores split by queries: both warpgroups on the same keys, a barrier a tile");
  // Atomic dQ: producer warps 2 and 3 add dQ to the accumulator, the rows split between them.
  static constexpr int kReducerWarps = kDqReducerWarps;
  // dK and dV columns per compute warpgroup, and the first key of warpgroup w: w * kWarpgroupKeys.
  static constexpr int kOwnCols = kSplitColumns ? kD / 2 : kDataD;
  static constexpr int kWarpgroupKeys = kSplitColumns ? 0 : 64;
  static constexpr int kThreads = 384;         // producer warpgroup + two compute warpgroups
  static constexpr int kComputeThreads = 256;
  static constexpr int kLoadThreads = 64;      // producer warps 0 and 1; then the reducing warps
  static constexpr int kProducerRegisters = 24;
  static constexpr int kComputeRegisters = 240;
  static_assert(warpgroup_registers_fit(kThreads, kProducerRegisters, kComputeRegisters),
                "the block's registers at launch hold every warpgroup's budget");
  static constexpr int kKeysPerBlock = kSplitColumns ? 64 : 128;
  static constexpr int kDqBuffers = 2;  // the reducing warps read one while the other fills
  // The two compute warpgroups split dQ's kQueryStep x D tile (wgmma rows come in 64s): a 64-row
  // tile by columns, a 128-row one by rows. Each computes kDqRowBlocks == 1 ? all 64 rows x D / 2
  // columns : its own 64 rows x D columns.
  static constexpr int kDqRowBlocks = kQueryStep / 64;
  static constexpr int kDqCols = kD * kDqRowBlocks / 2;
  // dQ rows in shared memory: D floats + 8 of padding, so that a warp's 8-byte stores of 4 rows
  // hit 32 different banks; the 16-byte multiple the bulk reductions need.
  static constexpr int kDqRowBytes = (kD + 8) * 4;
  static constexpr int kDqBytes = kQueryStep * kDqRowBytes;
  using KvTile = GmmaTile<kKeysPerBlock, kD>;
  using QTile = GmmaTile<kQueryStep, kD>;
  using DsTile = GmmaTile<kKeysPerBlock, kQueryStep>;  // dS^T: rows = keys
  // Offsets from the 1024-byte-aligned base; barriers are 8-byte mbarriers.
  struct Layout {
    int k, v, q, dout;  // q and dout: per stage
    int ds;    // dS^T (atomic dQ); with kSplitScores two buffers of P^T and dS^T
    int dq;    // kDqBuffers of dQ (atomic dQ)
    int stat;  // [stage][lse | delta][query] floats
    int stage_full, stage_empty;  // per stage
    int kv_full;  // K and V (kTmaPrologue)
    int bytes;    // what the launch reserves
  };
  static constexpr Layout layout() {
    SmemPlacer s;
    Layout l{};
    l.k = s.place(KvTile::kBytes);
    l.v = s.place(KvTile::kBytes);
    l.q = s.place(kStages * QTile::kBytes);
    l.dout = s.place(kStages * QTile::kBytes);
    l.ds = s.place(kSplitScores ? 4 * DsTile::kBytes : kSplitColumns ? 0 : DsTile::kBytes);
    l.dq = s.place(kSplitColumns ? 0 : kDqBuffers * kDqBytes);
    l.stat = s.place(kStages * 2 * kQueryStep * 4);
    l.stage_full = s.place(8 * kStages, 8);
    l.stage_empty = s.place(8 * kStages, 8);
    l.kv_full = s.place(8, 8);
    l.bytes = smem_launch_bytes(s.end);
    return l;
  }
  static constexpr Layout kSmem = layout();
  static constexpr int kSmemBytes = kSmem.bytes;
  static_assert(kSmemBytes <= 227 * 1024, "the shared memory of one Hopper multiprocessor");
};

template <int D>
using HopperBackwardConfig = HopperBackwardTile<typename BackwardShapeOf<D>::type>;
template <int D>
using HopperAtomicBackwardConfig = HopperBackwardTile<typename AtomicBackwardShapeOf<D>::type>;

// Named barriers of the kernel (0 is __syncthreads').
enum HopperBackwardBarrier : int {
  kDsReady = 1,  // both compute warpgroups' dS^T rows are in shared memory
  kDqFull = 2,   // + buffer: the compute warpgroups have stored a tile's dQ there
  kDqEmpty = 4,  // + buffer: the reducing warps have read that buffer's previous dQ
  kTurn = 6,     // + compute warpgroup: its turn to issue products (ping-pong, without atomic dQ)
  // SplitDqEmpty: kDqEmpty + buffer for compute warpgroup 0 only, this + buffer for warpgroup 1.
  kDqEmptyWg1 = 8,
  kDsFree = 10,  // + compute warpgroup (SplitDqEmpty): the other's dQ product has read its dS^T
  kDsOwn = 12,   // + compute warpgroup (DqOwnKeysFirst): its own four warps' dS^T rows are stored
};

}  // namespace varpack::cuda
