// The Hopper forward's shipped shapes, every field named, with one line of why; HopperForwardTile
// (hopper_forward.cuh) derives the rest (threads, tiles, the shared-memory layout). The records
// behind each choice: bench/results/decisions.md (forward-shapes and the sections named below).
// A variant for an experiment derives from a shape and overrides a field.
//
// kD: the tiles' columns, whole 64-column blocks; kDataD: the head dim in memory (the columns past
//   it are zeros in shared memory, left out of S = Q K^T and of the output).
// kConsumers: consumer warpgroups of 64 query rows, taking turns to issue (ping-pong);
//   kProducerRegisters / kConsumerRegisters: their setmaxnreg budgets.
// kBlockN: keys per K/V tile; kStages: K/V ring stages; kQBuffers: Q tiles (two: the next item's Q
//   loads during this one).
// kOutCols: output columns staged at a time (WarpRowsOut); kTmaOut: the output stored by the TMA
//   unit (WarpRowsTmaOut, whole rows: kOutCols == kD).
// kLazyRescale: O and the row sum rescaled only when the row maximum grows by more than 2^8.
// kTreeReduce: a row's maximum and sum over a tile taken pairwise (not with softcap).
// kRowLimitMask: a partly visible tile's mask as two bounds per row.
// kAdvanceDescriptors: the products' descriptors advanced per product, not rebuilt.
// kHeadsPastLongKeys: several heads per block also past 4096 keys per query tile.
#pragma once

#include <cstdint>

namespace varpack::cuda {

// d128: two Q buffers and the TMA store fill shared memory (no room for a third stage).
struct ForwardD128 {
  static constexpr int kD = 128, kDataD = 128;
  static constexpr int kConsumers = 2, kProducerRegisters = 24, kConsumerRegisters = 240;
  static constexpr int kBlockN = 128, kStages = 2, kQBuffers = 2;
  static constexpr int kOutCols = 128;
  static constexpr bool kTmaOut = true;
  static constexpr bool kLazyRescale = false;  // decisions.md: forward-shapes (lazy rescaling)
  static constexpr bool kTreeReduce = true;    // decisions.md: forward-tree-reduce
  static constexpr bool kRowLimitMask = true;
  static constexpr bool kAdvanceDescriptors = true;  // decisions.md: forward-advance-descriptors
  static constexpr bool kHeadsPastLongKeys = true;   // decisions.md: forward-heads-past-long-keys
};

// d96 on d128's tiles (96 is no multiple of 64): its columns past 96 are zeros.
struct ForwardD96 : ForwardD128 {
  static constexpr int kDataD = 96;
};

// d64: three stages fit beside two Q buffers; the library's below kLongD64Queries queries.
struct ForwardD64 {
  static constexpr int kD = 64, kDataD = 64;
  static constexpr int kConsumers = 2, kProducerRegisters = 24, kConsumerRegisters = 240;
  static constexpr int kBlockN = 128, kStages = 3, kQBuffers = 2;
  static constexpr int kOutCols = 64;
  static constexpr bool kTmaOut = true;
  static constexpr bool kLazyRescale = false;
  static constexpr bool kTreeReduce = true;
  static constexpr bool kRowLimitMask = true;
  static constexpr bool kAdvanceDescriptors = true;
  static constexpr bool kHeadsPastLongKeys = false;
};

// d64 from kLongD64Queries queries: three consumers of 192-query tiles (decisions.md:
// forward-long-d64); their 160 registers leave no room for pairwise reductions or the TMA store.
struct ForwardD64Long {
  static constexpr int kD = 64, kDataD = 64;
  static constexpr int kConsumers = 3, kProducerRegisters = 32, kConsumerRegisters = 160;
  static constexpr int kBlockN = 128, kStages = 2, kQBuffers = 1;
  static constexpr int kOutCols = 64;
  static constexpr bool kTmaOut = false;
  static constexpr bool kLazyRescale = false;
  static constexpr bool kTreeReduce = false;
  static constexpr bool kRowLimitMask = false;
  static constexpr bool kAdvanceDescriptors = true;
  static constexpr bool kHeadsPastLongKeys = false;
};
inline constexpr int64_t kLongD64Queries = 4096;

// d256: 64-key tiles and the output staged 64 columns at a time, for room; lazy rescaling, since
// O's 128 columns per thread are most of the softmax's arithmetic; no registers to spare for
// advanced descriptors.
struct ForwardD256 {
  static constexpr int kD = 256, kDataD = 256;
  static constexpr int kConsumers = 2, kProducerRegisters = 24, kConsumerRegisters = 240;
  static constexpr int kBlockN = 64, kStages = 2, kQBuffers = 1;
  static constexpr int kOutCols = 64;
  static constexpr bool kTmaOut = false;
  static constexpr bool kLazyRescale = true;
  static constexpr bool kTreeReduce = true;
  static constexpr bool kRowLimitMask = false;
  static constexpr bool kAdvanceDescriptors = false;
  static constexpr bool kHeadsPastLongKeys = false;
};

// The shape of each compiled head dim (d64's below kLongD64Queries queries).
template <int D> struct ForwardShapeOf;
template <> struct ForwardShapeOf<64> { using type = ForwardD64; };
template <> struct ForwardShapeOf<96> { using type = ForwardD96; };
template <> struct ForwardShapeOf<128> { using type = ForwardD128; };
template <> struct ForwardShapeOf<256> { using type = ForwardD256; };

}  // namespace varpack::cuda
