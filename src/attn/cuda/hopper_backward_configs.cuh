// The Hopper backward's shipped shapes, every field named, with one line of why; HopperBackwardTile
// (hopper_backward.cuh) derives the rest (tiles, the shared-memory layout). The records behind each
// choice: bench/results/decisions.md (the sections named below). BackwardD* are the dK/dV pass of
// the two-pass backward (the deterministic mode, and d256's both modes); AtomicBackwardD* the
// one-kernel atomic-dQ mode. A variant for an experiment derives from a shape and overrides a field.
//
// kD: the tiles' columns, whole 64-column blocks; kDataD: the head dim in memory (columns past it
//   are zeros in shared memory, left out of every product but dQ's and of dK and dV).
// kQueryStep: queries per tile (64 or 128); kStages: Q/dO load stages.
// kSplitColumns: 64-key blocks, each compute warpgroup accumulating dK and dV for half of the
//   columns (d256, where one warpgroup cannot hold dK and dV of 64 keys x D); no dQ staging.
// kPingPong (two-pass only): the compute warpgroups take turns to issue their products.
// kIssueAhead (without ping-pong): a tile's products, then the next tile's scores, back to back.
// kSplitScores (with kSplitColumns): each warpgroup computes S^T and dP^T for half of the tile's
//   queries, shared through shared memory.
// kTmaPrologue: K, V and the first query tile issued by the producer (TMA), not all threads.
// kClaimDqRows (atomic): the first block at a query tile's rows stores dQ, later ones add; else
//   the Delta pass clears the accumulator.
// kStmatrixDs (atomic): dS^T into shared memory by stmatrix.x4, else by 32-bit stores.
// kSplitDqEmpty (atomic): a dQ-empty barrier per compute warpgroup.
// kDqOwnKeysFirst (atomic, 64-query tiles): each warpgroup's dQ k-steps over its own keys first.
// kAdvanceDescriptors: the products' descriptors advanced per product, not rebuilt.
#pragma once

namespace varpack::cuda {

// d128's dK/dV pass: 64-query tiles, two stages (decisions.md: backward-d128-shape); ping-pong
// and issuing ahead measured slower here (backward-d64-shape, backward-atomic-shapes).
struct BackwardD128 {
  static constexpr int kD = 128, kDataD = 128, kQueryStep = 64, kStages = 2;
  static constexpr bool kSplitColumns = false, kPingPong = false, kIssueAhead = false;
  static constexpr bool kSplitScores = false;
  static constexpr bool kTmaPrologue = false;  // decisions.md: backward-tma-prologue
  static constexpr bool kClaimDqRows = false, kStmatrixDs = true, kSplitDqEmpty = false;
  static constexpr bool kDqOwnKeysFirst = false;
  static constexpr bool kAdvanceDescriptors = true;  // decisions.md: backward-advance-descriptors
};

// d96's dK/dV pass on d128's tiles (96 is no multiple of 64): its columns past 96 are zeros.
struct BackwardD96 : BackwardD128 {
  static constexpr int kDataD = 96;
};

// d64's dK/dV pass: 128-query tiles (half the barriers and hand-offs) and ping-pong
// (decisions.md: backward-d64-shape); no registers to spare for advanced descriptors.
struct BackwardD64 {
  static constexpr int kD = 64, kDataD = 64, kQueryStep = 128, kStages = 2;
  static constexpr bool kSplitColumns = false, kPingPong = true, kIssueAhead = false;
  static constexpr bool kSplitScores = false;
  static constexpr bool kTmaPrologue = false;
  static constexpr bool kClaimDqRows = false, kStmatrixDs = true, kSplitDqEmpty = false;
  static constexpr bool kDqOwnKeysFirst = false;
  static constexpr bool kAdvanceDescriptors = false;
};

// d256 (both modes): 64-key blocks split by columns, scores split by queries, the next tile's
// issued ahead (decisions.md: backward-d256-split-scores), K and V by TMA.
struct BackwardD256 {
  static constexpr int kD = 256, kDataD = 256, kQueryStep = 64, kStages = 2;
  static constexpr bool kSplitColumns = true, kPingPong = false, kIssueAhead = true;
  static constexpr bool kSplitScores = true;
  static constexpr bool kTmaPrologue = true;
  static constexpr bool kClaimDqRows = false, kStmatrixDs = true, kSplitDqEmpty = false;
  static constexpr bool kDqOwnKeysFirst = false;
  static constexpr bool kAdvanceDescriptors = true;
};

// d128 atomic: the next tile's scores issued after this tile's dK, claimed dQ rows, stmatrix
// dS^T, a dQ-empty barrier per warpgroup (decisions.md: backward-atomic-shapes,
// backward-claim-dq-rows, backward-stmatrix-ds, backward-split-dq-empty).
struct AtomicBackwardD128 {
  static constexpr int kD = 128, kDataD = 128, kQueryStep = 64, kStages = 2;
  static constexpr bool kSplitColumns = false, kPingPong = false, kIssueAhead = true;
  static constexpr bool kSplitScores = false;
  static constexpr bool kTmaPrologue = true;
  static constexpr bool kClaimDqRows = true, kStmatrixDs = true, kSplitDqEmpty = true;
  static constexpr bool kDqOwnKeysFirst = false;
  static constexpr bool kAdvanceDescriptors = true;
};

// d96 atomic on d128's atomic shape, its dQ k-steps over its own keys first (decisions.md:
// backward-d96-atomic).
struct AtomicBackwardD96 : AtomicBackwardD128 {
  static constexpr int kDataD = 96;
  static constexpr bool kDqOwnKeysFirst = true;
};

// d64 atomic: 128-query tiles; the threads' prologue, a cleared accumulator and 32-bit dS^T
// stores, each measured faster at d64 (decisions.md: backward-atomic-shapes,
// backward-tma-prologue, backward-claim-dq-rows, backward-stmatrix-ds).
struct AtomicBackwardD64 {
  static constexpr int kD = 64, kDataD = 64, kQueryStep = 128, kStages = 2;
  static constexpr bool kSplitColumns = false, kPingPong = false, kIssueAhead = false;
  static constexpr bool kSplitScores = false;
  static constexpr bool kTmaPrologue = false;
  static constexpr bool kClaimDqRows = false, kStmatrixDs = false, kSplitDqEmpty = false;
  static constexpr bool kDqOwnKeysFirst = false;
  static constexpr bool kAdvanceDescriptors = false;
};

// The shapes of each compiled head dim: the dK/dV pass of two, and the atomic kernel (none at
// d256: hopper_backward_two_passes_only).
template <int D> struct BackwardShapeOf;
template <> struct BackwardShapeOf<64> { using type = BackwardD64; };
template <> struct BackwardShapeOf<96> { using type = BackwardD96; };
template <> struct BackwardShapeOf<128> { using type = BackwardD128; };
template <> struct BackwardShapeOf<256> { using type = BackwardD256; };
template <int D> struct AtomicBackwardShapeOf;
template <> struct AtomicBackwardShapeOf<64> { using type = AtomicBackwardD64; };
template <> struct AtomicBackwardShapeOf<96> { using type = AtomicBackwardD96; };
template <> struct AtomicBackwardShapeOf<128> { using type = AtomicBackwardD128; };

}  // namespace varpack::cuda
