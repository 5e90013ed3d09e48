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
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/hopper_dq.cuh"
#include "attn/cuda/hopper_dq_accumulator.cuh"
#include "attn/cuda/hopper_path.h"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/warp_rows_out.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// The block's shape: kQueryStep queries per tile (64 or 128), kStages load stages. DataD: the head
// dim in memory where it is not a multiple of 64 (as in HopperForwardTile: D, the tiles' columns,
// is the next one up; the columns past DataD are zeros in shared memory and left out of every
// product but dQ's and of dK and dV; with atomic dQ, dQ's products compute those columns, zeros,
// which are not added to the accumulator).
// SplitColumns (head dim 256, where one warpgroup cannot hold dK and dV of 64 keys x D): a block
// of 64 keys, both compute warpgroups on all of them, each accumulating dK and dV for half of the
// columns (both compute S^T and dP^T, but for SplitScores); only without atomic dQ, so without dQ
// in shared memory.
// PingPong (only without atomic dQ, whose dQ product joins the two compute warpgroups at every
// tile): the compute warpgroups take turns to issue their products (named barriers), so that one's
// P^T / dS^T arithmetic runs while the other's products are on the tensor cores, as in the
// forward; without it both issue at once, both wait, and the tensor cores idle while both compute
// P^T and dS^T.
// IssueAhead (without ping-pong): the tile loop runs one tile's products, then the next tile's
// scores (see the kernel).
// TmaPrologue: K and V by the TMA unit (a partial last key tile by the producer's cp.async, which
// zero-fills past the sequence) and the first query tile through the ring like every other, all
// issued by the producer, the compute warpgroups waiting on a K/V mbarrier and the stage's; without
// it all 384 threads copy K, V and the first tile by cp.async and wait for them together. Per-block
// clock64 stamps (commit fb07d02's experiments/backward_timeline.cu; H200, bf16, d128, 64 x 1k)
// had the block's start to its first scores at 4855 + 1167 cycles of a ~47,700-cycle block with
// the threads' copies, 1854 + 175 with TMA (the first scores then wait ~2300 cycles longer for the
// data). Measured on the H200 (tile_shapes, interleaved, two rounds, 2026-12-03 05:55 UTC),
// TFLOP/s with / without at 64 x 1k / 16 x 4k / 4 x 16k / mixed / 10% padding: d128 atomic 308.9
// / 455.6 / 519.6 / 417.2 / 436.6 against 300.8 / 449.2 / 518.1 / 412.6 / 432.5 (second round
// +2.8 / +1.4 / +0.9 / +1.3 / +1.4%); d96 atomic +1.2 to +1.7% at every point; d256 +3.7 / +1.6 /
// -0.2 / +1.4 (-0.8) / +1.4%; but d64 atomic +0.3% at 1k and -1.8 to -3.4% from 4k, and d128's
// deterministic dK/dV pass +2.4% at 1k, -0.6 / -1.7% at 4 x 16k: those two keep the threads'.
// SplitScores (with SplitColumns, without ping-pong): with split columns alone both warpgroups
// compute S^T and dP^T for all of the block's 64 keys and the tile's queries, so a third of the
// dK/dV pass's tensor work is done twice. With SplitScores each computes them for half of the
// tile's queries, and P^T and dS^T reach both through shared memory (two buffers, one barrier a
// tile), from where dV's and dK's products read them: 4 products' work a tile instead of 6, and
// half of the P^T / dS^T arithmetic per warpgroup.
// ClaimDqRows (atomic dQ): nothing clears the accumulator; the first block at a group of a query
// tile's rows stores them, later ones add (hopper_dq_accumulator.cuh); without it the Delta pass
// clears the accumulator and every block adds. Measured on the H200 (bf16, causal, 16 heads,
// tile_shapes, interleaved with main's library, two rounds, 2026-12-03 11:00 UTC), TFLOP/s at
// 64 x 1k / 16 x 4k / 4 x 16k / mixed / 10% padding: d128 344.1 / 471.4 / 531.0 / 436.7 / 452.9
// against 328.2 / 473.2 / 533.8 / 429.9 / 446.3; d96 289.7 / 407.3 / 466.8 / 371.4 / 388.1 against
// 276.1 / 407.8 / 467.7 / 364.4 / 385.2; d64 228.3 / 364.5 / 421.3 / 308.4 / 348.0 against 235.9 /
// 387.2 / 443.1 / 323.3 / 358.6, and there the claims' code with the Delta pass clearing was as
// slow (so the loss lies in what both share and this kernel without claims lacks: the conversion
// by query tiles or the reducing loop's per-tile work), so d64 keeps the cleared accumulator.
// StmatrixDs (atomic dQ): dS^T into shared memory by stmatrix.x4 (measured at the store), else by
// one 32-bit store per register.
// SplitDqEmpty (atomic dQ): each compute warpgroup waits for a free dQ buffer on a barrier of its
// own with the reducing warps, not for the other warpgroup too (see the kernel).
// DqOwnKeysFirst (atomic dQ, 64-query tiles): each warpgroup issues the k-steps of its dQ product
// over its own 64 keys before the barrier that waits for the other warpgroup's dS^T rows
// (kDsReady), and the other 64 keys' after it, so that the tensor cores hold more of its work
// while it waits.
// Probe: kNone in the library; the others are timing probes of the atomic kernel (experiments
// only), each bounding what one lead could gain or cost. Measured at d128 on an H100 (bf16,
// causal, 16 heads, tile_shapes, 2026-12-05 18:08-18:30 UTC, cuda.md), the library's time over the
// probe's at 64 x 1k / 16 x 4k / 4 x 16k / mixed with the clock free, then at the 700 W power cap
// (calls back to back): kNoDqWrites 1.03 / 1.01 / 0.99-1.01 / 1.02, at the cap 1.07 / 1.07-1.08
// / 1.08 / 1.06-1.07; kHalfQdoLoads 1.00 / 0.99-1.00 / 1.04-1.05 / 1.00, at the cap 1.01 / 1.02
// / 1.02 / 1.01; kOddBlocksStartEarly 0.90 / 0.97 / 1.02 / 0.96, at the cap 0.91 / 0.97 / 1.00 /
// 0.97. So a cluster pair of key blocks (dQ added in distributed shared memory, Q/dO multicast)
// gains at most +2.8% at the cap at 16 x 4k and loses with the clock free: not written.
enum class BackwardProbe {
  kNone,
  // The reducing warps do everything but issue the bulk stores and reductions of dQ (dQ wrong on
  // purpose): what any cheaper way of adding dQ (fewer or smaller reductions) could gain.
  kNoDqWrites,
  // Every other refill of the ring skips Q's and dO's TMA copies and computes on the stage's
  // previous tile (all three gradients wrong on purpose): what loading each query tile once for
  // two key blocks (a cluster's multicast) could gain at most.
  kHalfQdoLoads,
  // Odd key blocks of a sequence start two query tiles early, on tiles their keys do not see
  // (masked whole; results right): what two key blocks walking their query tiles in lockstep
  // would cost at most.
  kOddBlocksStartEarly,
};

template <int D, int QueryStep, int Stages, int DataD = D, bool SplitColumns = false,
          bool PingPong = false, bool IssueAhead = false, bool SplitScores = false,
          bool TmaPrologue = false, bool ClaimDqRows = false, bool StmatrixDs = true,
          bool SplitDqEmpty = false, bool DqOwnKeysFirst = false,
          BackwardProbe Probe = BackwardProbe::kNone>
struct HopperBackwardTile {
  static_assert(QueryStep == 64 || QueryStep == 128, "one or two 64-row dQ products per tile");
  static_assert(DataD <= D && DataD % 16 == 0, "whole k-steps of S^T = K Q^T");
  static_assert(!SplitColumns || DataD == D, "halves of whole 64-column blocks");
  static_assert(!SplitScores || (SplitColumns && !PingPong),
                "scores split by queries: both warpgroups on the same keys, a barrier a tile");
  static constexpr int kD = D;
  static constexpr int kDataD = DataD;
  static constexpr bool kSplitColumns = SplitColumns;
  static constexpr bool kPingPong = PingPong;
  // Atomic dQ: producer warps 2 and 3 add dQ to the accumulator, the rows split between them.
  static constexpr int kReducerWarps = kDqReducerWarps;
  static constexpr bool kIssueAhead = IssueAhead;
  static constexpr bool kSplitScores = SplitScores;
  static constexpr bool kTmaPrologue = TmaPrologue;
  static constexpr bool kClaimDqRows = ClaimDqRows;
  static constexpr bool kStmatrixDs = StmatrixDs;
  static constexpr bool kSplitDqEmpty = SplitDqEmpty;
  static constexpr bool kDqOwnKeysFirst = DqOwnKeysFirst;
  static constexpr BackwardProbe kProbe = Probe;
  // The products' descriptors built once per operand tile and advanced by a 32-bit add per product
  // (GmmaOperand) instead of rebuilt from an address each time: 15% fewer instructions in d128's
  // loop. Measured on the H200 (bf16, causal, 16 heads, tile_shapes against the previous library,
  // two rounds, 2026-12-01 19:30 UTC): d128 atomic +1.5 / +1.7 / +1.8 / +1.3% at 64 x 1k / 16 x 4k
  // / 4 x 16k / mixed; but d64's 128-query atomic kernel (no register to spare) -1.9 / -3.5 / -3.6
  // / -3.0% (ptxas moved spills into its loop), so not at d64.
  static constexpr bool kAdvanceDescriptors = D != 64;
  // dK and dV columns per compute warpgroup, and the first key of warpgroup w: w * kWarpgroupKeys.
  static constexpr int kOwnCols = SplitColumns ? D / 2 : DataD;
  static constexpr int kWarpgroupKeys = SplitColumns ? 0 : 64;
  static constexpr int kThreads = 384;         // producer warpgroup + two compute warpgroups
  static constexpr int kComputeThreads = 256;
  static constexpr int kLoadThreads = 64;      // producer warps 0 and 1; then the reducing warps
  static constexpr int kProducerRegisters = 24;
  static constexpr int kComputeRegisters = 240;
  static_assert(warpgroup_registers_fit(kThreads, kProducerRegisters, kComputeRegisters),
                "the block's registers at launch hold every warpgroup's budget");
  static constexpr int kKeysPerBlock = SplitColumns ? 64 : 128;
  static constexpr int kQueryStep = QueryStep;
  static constexpr int kStages = Stages;
  static constexpr int kDqBuffers = 2;  // the reducing warps read one while the other fills
  // The two compute warpgroups split dQ's kQueryStep x D tile (wgmma rows come in 64s): a 64-row
  // tile by columns, a 128-row one by rows. Each computes kDqRowBlocks == 1 ? all 64 rows x D / 2
  // columns : its own 64 rows x D columns.
  static constexpr int kDqRowBlocks = QueryStep / 64;
  static constexpr int kDqCols = D * kDqRowBlocks / 2;
  // dQ rows in shared memory: D floats + 8 of padding, so that a warp's 8-byte stores of 4 rows
  // hit 32 different banks; the 16-byte multiple the bulk reductions need.
  static constexpr int kDqRowBytes = (D + 8) * 4;
  using KvTile = GmmaTile<kKeysPerBlock, D>;
  using QTile = GmmaTile<kQueryStep, D>;
  using DsTile = GmmaTile<kKeysPerBlock, kQueryStep>;  // dS^T: rows = keys
  // K, V; Q and dO per stage; dS^T; dQ; [stage][lse | delta][query] floats; mbarriers.
  static constexpr int kQOffset = 2 * KvTile::kBytes;
  static constexpr int kDoOffset = kQOffset + kStages * QTile::kBytes;
  static constexpr int kDsOffset = kDoOffset + kStages * QTile::kBytes;
  // dS^T (atomic dQ); with SplitScores two buffers of P^T and dS^T.
  static constexpr int kDqOffset =
      kDsOffset + (SplitScores ? 4 * DsTile::kBytes : SplitColumns ? 0 : DsTile::kBytes);
  static constexpr int kDqBytes = kQueryStep * kDqRowBytes;
  static constexpr int kStatOffset = kDqOffset + (SplitColumns ? 0 : kDqBuffers * kDqBytes);
  static constexpr int kBarrierOffset = kStatOffset + kStages * 2 * kQueryStep * 4;
  static constexpr int kBarriers = 2 * kStages + 1;  // per stage: full, empty; K and V full
  static constexpr int kSmemBytes = 1024 + kBarrierOffset + kBarriers * 8;
  static_assert(kSmemBytes <= 227 * 1024, "the shared memory of one Hopper multiprocessor");
};

// Measured on the H200 (bf16, d128, causal, 16 heads; 64 x 1k / 16 x 4k / 4 x 16k TFLOP/s, the
// standalone benchmark, 2026-11-30): this shape 251 / 387 / 449 (then: one reducing warp, dQ after
// dK; today's product order and reducing warps, measured since, are described at their code:
// tile_shapes 279.5 / 409.5 / 462.1 on 2026-12-01); with three load stages and one
// dQ buffer (the compute warpgroups then waited for the reducing warp to read the previous tile's
// dQ before storing the next) 246 / 379 / 438. With the producer's two warps
// issuing every Q and dO copy by cp.async, 212 / 310 / 352: ncu (64 x 1k) showed the producer
// never waiting for a free stage and the compute warps spending 14% of their time waiting for a
// full one. With FlashAttention 3's order (dK's product left in flight into the next tile),
// 212 / 303 / 341. With cp.async loads: two load stages and two dS^T
// buffers 212 / 306 / 348; a persistent variant (one block per multiprocessor taking key blocks
// from a global counter, loading the next block's K and V while writing dK and dV) 196 / 272 / 302,
// slower at every length, so not kept. The earlier two-warpgroup block without a producer, where
// the compute warpgroups issued the loads and dQ's reductions themselves, ran 183 / 271 / 309
// (experiments/tile_shapes.cu); there dQ's reductions took about a third of the time, and staging
// them for bulk reductions issued by the compute threads (175 / 256 / 288), 16-byte vector
// reductions (178 / 258 / 292), a per-block rotation of the query tiles (179 / 265 / 300),
// warpgroup ping-pong (176 / 255 / 287), deferring dV/dK by an iteration (168 / 242 / 267) or
// one-warpgroup blocks (159 / 201 / 212) did not help.
template <int D>
struct HopperBackwardConfig : HopperBackwardTile<D, 64, 2> {};
// Head dim 64: 128-query tiles, half as many tiles, barriers and dQ hand-offs per block (dK and
// dV take half of d128's registers, so S^T and dP^T of 128 queries fit beside them). Measured on
// the H200 (bf16, d64, causal, 16 heads, experiments/tile_shapes.cu, one run, 2026-12-01): 64 x 1k
// / 16 x 4k / 4 x 16k / mixed lengths 162.0 / 238.5 / 273.6 / 207.0 TFLOP/s (161.5 / 237.9 / 273.1
// / 207.1 in a second run), against 160.1 / 220.4 / 249.0 / 194.3 with 64-query tiles and 2 stages
// (the shape above), 160.2 / 221.9 / 250.5 / 194.7 with 3 stages and 158.9 / 219.8 / 247.1 / 192.6
// with 4. 76-80 bytes of spills (64-query tiles: 48).
// Ping-pong (the dK/dV pass of the two-pass backward, d64's deterministic mode) at d64, where it
// measured no slower anywhere (d256's too, until SplitScores replaced it there, below); not at
// d128 and d96. Measured on the H200 (bf16,
// causal, 16 heads, tile_shapes with the variants interleaved, 2026-12-01 14:01 UTC), the whole
// two-pass backward with / without it, TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed / 3% / 25%
// padding: d64 184.2 / 279.5 / 320.8 / 234.3 / 265.3 / 248.0 against 183.2 / 276.7 / 317.1 /
// 231.9 / 262.3 / 245.4 (128-query tiles; 64-query tiles with it: 177.5 / 259.6 / 293.5 / 221.0 /
// 250.8 / 236.8); d256 239.1 / 324.3 / 349.3 / 292.2 / 310.9 / 296.0 against 240.0 / 320.0 / 328.8
// / 292.8 / 309.2 / 297.1; d128 (deterministic mode) 259.8 / 372.3 / 443.4 / 337.2 / 357.4 / 346.4
// against 262.1 / 378.7 / 436.1 / 341.6 / 366.1 / 349.1; d96 213.8 / 321.3 / 369.9 / 279.3 /
// 310.9 / 292.8 against 216.6 / 325.3 / 373.4 / 282.7 / 315.2 / 297.2. The products were not
// waiting on the P^T / dS^T arithmetic as much as the forward's on its softmax.
template <>
struct HopperBackwardConfig<64> : HopperBackwardTile<64, 128, 2, 64, false, true> {};
// Head dim 96 on d128's tiles (the deterministic mode's two passes), and head dim 256 on 64-key
// blocks with dK and dV split by columns (two passes in both modes: launch_hopper_backward).
template <>
struct HopperBackwardConfig<96> : HopperBackwardTile<128, 64, 2, 96> {};
// d256: S^T and dP^T split by queries (SplitScores), the next tile's issued ahead. Measured on the
// H200 (bf16, causal, 16 heads, tile_shapes, 2026-12-01 22:20 UTC), the whole two-pass backward,
// TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed: 260.2 / 347.7 / 385.0 / 320.4, against 255.4 /
// 336.6 / 371.8 / 315.1 without issuing ahead and 251.3 / 332.0 / 354.7 / 306.7 for the earlier
// shape (both warpgroups computing all of the scores, in ping-pong; 234.5 / 311.4 / 338.8 / 299.1
// before the mask hoist of the same call's branch).
template <>
struct HopperBackwardConfig<256>
    : HopperBackwardTile<256, 64, 2, 256, true, false, true, true, true> {};

// The atomic-dQ backward's shape (head dims 64 and 128; launch_hopper_backward). d128: the next
// tile's scores issued after this tile's dK (IssueAhead); measured on the H200 (bf16, causal, 16
// heads, tile_shapes with the variants interleaved, 2026-12-01 17:36 UTC), TFLOP/s at 64 x 1k / 16
// x 4k / 4 x 16k / mixed: 282.7 / 417.6 / 475.4 / 372.4 against 279.8 / 411.7 / 469.6 / 368.1
// without (+1.0-1.4%); at d96 (two passes, no atomic dQ) it measured 1.5-3% slower, so the two-pass
// shapes above keep the plain loop. d64: 128-query tiles (ping-pong does not apply with atomic dQ);
// since two warps add dQ it beats d64's two passes, the same call: 201.0 / 321.0 / 373.2 / 269.5
// against 182.5 / 278.4 / 317.2 / 233.0 (the 64-query shape with IssueAhead: 199.9 / 295.7 / 335.2
// / 253.6). Tried on 2026-12-02 01:50 UTC (two rounds, branch wip/skip-dead-keys), not kept: on the
// first query tile of a key block, whose queries see none of the second compute warpgroup's keys,
// that warpgroup skipping dV's and dK's products: d128 294.5 / 431.3 / 482.7 / 386.6 against 305.8
// / 456.8 / 515.1 / 406.5 (ptxas: 4 fences injected). Tried on 2026-12-02 08:20-09:00 UTC
// (tile_shapes, interleaved with this shape, bf16, causal, 16 heads), not kept: dV's product issued
// right after P^T, under the dS^T arithmetic (branch wip/early-dv; no ptxas serialization), three
// rounds, the third: d128 309.6 -> 298.3 / 454.5 -> 434.7 / 529.7 -> 499.2 / 425.5 -> 408.2 (-3 to
// -6% in all three), d96 -5 to -8%; an L2 prefetch of the K and V of the block 16-64 places later
// in launch order by the reducing warps (branch wip/l2-prefetch), d128 within +-0.5% (16 x 4k 457.8
// -> 456.7-459.7), d64 -2 to -8% (more spills); issued before the reducing warps released the dQ
// buffers it delayed the first hand-off, -6% at 64 x 1k. Tried on 2026-12-02 14:15 UTC
// (tile_shapes, two rounds), not kept: dK and dV stored by the TMA unit as the forward's output is
// (WarpRowsTmaOut, staged in K's and V's tiles), d128 and d96 -1.2 to +0.2%, d64 -3 to -4%. Tried
// on 2026-12-02 17:25-17:45 UTC (tile_shapes, interleaved with a block per work in one binary), not
// kept: a persistent atomic kernel (branch wip/persistent-backward: a block per multiprocessor
// taking works from a counter zeroed by the Delta pass, the producer's thread handing each work to
// the warps through shared memory, K and V by the TMA unit and every query tile through one ring,
// so that the next work's search and first tile ran under the current one; dK and dV staged in the
// dQ buffers, so that the next K and V loaded during the epilogue), TFLOP/s persistent / a block
// per work at 64 x 1k / 16 x 4k / 4 x 16k / mixed / 10% / 50% padding: d128 309.4 / 311.4, 449.4 /
// 456.1, 511.6 / 530.0, 414.1 / 423.4, 432.7 / 441.0, 403.4 / 412.2; d96 -0.4 to -2.3%; d64 +8.6%
// at 64 x 1k, -0.3 to -3.7% elsewhere. Its tile loop read the work's bounds from shared memory and
// reloaded 5 spilled registers per tile (the block per work: none). Without the spills (one running
// iteration number in the loop, the dS^T store addresses made per tile: 757 instructions a tile
// against the block per work's 725; 18:10 UTC, two rounds): d128 +2.1 / +3.8% at 64 x 1k, +0.7 /
// -0.3% at 16 x 4k, -1.8 / -2.1% at 4 x 16k, -0.5 to -0.9% at mixed lengths and 10% / 50% padding;
// d96 -0.8 to -2.5%; d64 -7 to -10% from 4k (its loop then spilled). Tried on 2026-12-02 19:55 UTC
// (tile_shapes, two rounds, interleaved), not kept: the first query tile peeled off the loop, and
// where it sees none of the second warpgroup's keys (every causal block's diagonal tile) that
// warpgroup skipping it while the first computes the tile's whole dQ from its own keys (branch
// wip/skip-dead-first; no spills in the loop, 745 instructions): d128 +1.3% at 64 x 1k (309.4 /
// 311.4 against 305.3 / 307.1 TFLOP/s), -0.6% at 16 x 4k, -1.5% at 4 x 16k, -0.5% at mixed lengths
// and 10% padding; d96 +1.1 / +1.5% at 64 x 1k, -1 to -3% from 4k.
template <int D>
struct HopperAtomicBackwardConfig;
// SplitDqEmpty at d128 and d96: measured on the H200 (bf16, causal, 16 heads, tile_shapes,
// interleaved with the shared dQ-empty barrier, 2026-12-05 03:00 UTC), TFLOP/s at 64 x 1k / 16 x
// 4k / 4 x 16k / mixed: d128 340.3 / 492.6 / 557.5 / 441.1 against 333.2 / 476.9 / 535.7 / 429.0,
// with softcap +3.0 to +5.7%, d96 +0.9 to +2.0%.
template <>
struct HopperAtomicBackwardConfig<128>
    : HopperBackwardTile<128, 64, 2, 128, false, false, true, false, true, true, true, true> {};
// d64: dS^T by 32-bit stores (StmatrixDs off; measured at the store).
template <>
struct HopperAtomicBackwardConfig<64>
    : HopperBackwardTile<64, 128, 2, 64, false, false, false, false, false, false, false> {};
// d96: d128's atomic shape; the dQ products run on d128's columns (K's columns past 96 are zeros)
// and the reducing warps add 96 floats of each row. Measured on the H200 (bf16, causal, 16 heads,
// tile_shapes, 2026-12-02 00:50 UTC), TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed: 257.8 /
// 394.3 / 458.3 / 360.2 against 228.1 / 342.8 / 391.2 / 311.7 for d96's two passes and 253.2 /
// 382.7 / 440.6 / 350.3 without issuing the next tile's scores ahead. DqOwnKeysFirst at d96 only:
// measured on the H100 (bf16, causal, 16 heads, tile_shapes, interleaved, two rounds, 2026-12-05
// 12:10 UTC), TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed, the first round: d96 268.3 / 422.3 /
// 489.2 / 380.0 against 268.2 / 415.2 / 482.6 / 376.3 (+0.0 / +1.6 to +1.7 / +1.0 to +1.4 / +0.8
// to +1.0% in both rounds; in a second call +0.0 / +0.8 to +1.1 / +1.8 to +2.6 / +0.0 to +0.9%,
// with softcap within 0.3%); d128 +0.2 to +1.1% but -0.8 / -1.6% at 4 x 16k, softcap -1.1 to +0.5%.
template <>
struct HopperAtomicBackwardConfig<96>
    : HopperBackwardTile<128, 64, 2, 96, false, false, true, false, true, true, true, true,
                         true> {};

// The backward's timeline (experiments/backward_timeline.cu, built with
// -DVARPACK_BACKWARD_TIMELINE; everywhere else the stamps compile to nothing, and the library's
// SASS is the same with or without them): each BackwardEvent adds
// clock64() (or a count) to its multiprocessor's row of sums, from one thread per role: a compute
// warpgroup's first, the producer's thread 0, the first reducing warp's lane 0. The timeline
// subtracts an event's sum from the next one's, per tile or per block.
enum BackwardEvent : int {
  kComputeStart, kKvLanded, kLoopDone, kComputeEnd, kComputeBlocks,
  kScoresStart, kStageLanded, kScoresIssued, kPreviousDkDone, kSLanded, kPDone, kDpLanded,
  kScoresDone, kScoreTiles,
  kProductsStart, kDvIssued, kDsReadyPassed, kDqDkIssued, kDvDqLanded, kDqEmptyPassed,
  kProductsDone,
  kReduceStart, kReduceFull, kReduceIssued, kReduceRead, kReduceTiles,
  kRefillStart, kStageEmptied, kRefills, kBackwardEvents
};
#if defined(VARPACK_BACKWARD_TIMELINE)
__device__ unsigned long long g_backward_timeline[256][kBackwardEvents];
__device__ __forceinline__ void backward_event(int event, unsigned long long value) {
  if (threadIdx.x % 128 == 0 || threadIdx.x == 64)
    add_to_multiprocessor_row(g_backward_timeline, event, value);
}
#define VARPACK_BACKWARD_STAMP(event) backward_event(event, clock64())
#define VARPACK_BACKWARD_COUNT(event) backward_event(event, 1)
#else
#define VARPACK_BACKWARD_STAMP(event) ((void)0)
#define VARPACK_BACKWARD_COUNT(event) ((void)0)
#endif

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
  // the reducing warps, not for the other warpgroup too (the 2026-12-05 timelines: a buffer
  // returned ~1,000 clocks sooner by the reducing warps left the compute warps' ~300-clock wait
  // for it unchanged, so the other warpgroup may be what they waited for); the dS^T rows the
  // other warpgroup's dQ product reads are then guarded by kDsFree.
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
  TileWalk walk = tile.walk;
  if constexpr (Cfg::kProbe == BackwardProbe::kOddBlocksStartEarly) {
    if (slot.block % 2 == 1 && walk.count > 0) {
      const int early = static_cast<int>(walk.first / kBM < 2 ? walk.first / kBM : 2);
      walk.first -= early * kBM;
      walk.count += early;
    }
  }
  const int64_t m_first = walk.first;
  const int m_tiles = walk.count;
  const int iters = m_tiles * group;
  // Iteration it: q head hk * group + it / m_tiles, query tile starting at m_first + (it %
  // m_tiles) * kBM. Every role visits the iterations in order, so each steps a TileCursor
  // instead of dividing (an integer division is ~20 instructions of the compute loop: d128's
  // atomic loop 772 -> 747). Measured on the H200 (bf16, causal, 16 heads, tile_shapes against
  // the previous library, two rounds each, 2026-12-01 22:41 UTC), TFLOP/s at 64 x 1k / 16 x 4k /
  // 4 x 16k / mixed: d128 atomic 311.6 / 459.8 / 525.2 / 424.8 against 305.4 / 454.4 / 515.5 /
  // 417.8 (+1.2-2.0%), d64 atomic 230.9 / 384.1 / 440.7 / 318.7 against 220.2 / 364.9 / 421.9 /
  // 305.1 (+4.4-5.2%), d256 -0.2 to +0.6%, d128 deterministic -0.2 to -0.7%.
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
  const uint32_t sV = sK + KvTile::kBytes;
  const uint32_t sQ = sK + Cfg::kQOffset;  // per stage
  const uint32_t sdO = sK + Cfg::kDoOffset;
  const uint32_t sDs = sK + Cfg::kDsOffset;
  const uint32_t sDq = sK + Cfg::kDqOffset;
  const uint32_t sStat = sK + Cfg::kStatOffset;
  auto stage_full = [&](int s) { return sK + Cfg::kBarrierOffset + 8 * s; };
  auto stage_empty = [&](int s) { return sK + Cfg::kBarrierOffset + 8 * (kStages + s); };
  const uint32_t kv_full = sK + Cfg::kBarrierOffset + 8 * (2 * kStages);
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
          VARPACK_BACKWARD_STAMP(kRefillStart);
          mbarrier_wait(stage_empty(s), (it / kStages + 1) & 1);
          VARPACK_BACKWARD_STAMP(kStageEmptied);
          VARPACK_BACKWARD_COUNT(kRefills);
        }
        const int64_t m0 = tile_start(cursor);
        if (m0 + kBM <= seq.q_len) {
          const int h = hk * group + cursor.head;
          const bool skip =
              Cfg::kProbe == BackwardProbe::kHalfQdoLoads && it >= kStages && it % 2 == 1;
          if (threadIdx.x == 0 && !skip) {
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
      // compute warpgroups' next use of it waits for) as soon as its reductions have read it.
      // Measured on the H200 (bf16, d128, causal, 16 heads, tile_shapes, 2026-12-01 16:52 UTC),
      // TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed: two warps 279.5 / 409.5 / 462.1 / 365.5;
      // one 272.7 / 397.9 / 449.9 / 357.9; one that released a buffer only after the next tile's
      // reductions were issued 272.1 / 393.9 / 441.6 / 353.1 (two such warps: as fast as these).
      // The compute warpgroups had waited for the buffer (ncu, 16 x 4k): the issue of 64 reductions
      // per tile, one lane after the other, was the limit, not L2. Fewer, longer reductions need
      // a head's rows contiguous: an accumulator laid out [heads][rows][D] (16-byte chunks
      // permuted by row, for conflict-free staging) measured 1.5-6% slower at d128 and d64 with
      // 1, 8 or 16 rows or a whole tile per reduction (equal only at d64 64 x 1k), against this
      // layout in the same call (2026-12-01 18:10 UTC; branch wip/dq-accum-layout, cuda.md).
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
      // are issued: these warps are what the compute warpgroups wait for (above), and a read of L2
      // at each tile's start, with the tile's dQ already waiting, measured 0.3-1.6% slower at
      // d128, 2-6% at d96 (H200, 2026-12-03, two calls whose base measured alike;
      // bench/results/cuda.md).
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
        VARPACK_BACKWARD_STAMP(kReduceStart);
        named_barrier_sync(kDqFull + b, kDqHandoff);
        VARPACK_BACKWARD_STAMP(kReduceFull);
        bool first = false;
        if constexpr (Cfg::kClaimDqRows) {
          first = first_to_dq_rows(state, seen, lane);
          // One loop per operation, not the choice inside one loop: the reducing warps have 24
          // registers, and ptxas spilled inside the loop that chose.
          float* dst = dq_accum + ((seq.q_begin + m0 + first_row) * p.heads + h) * kDataD;
          const int64_t dst_step = static_cast<int64_t>(kRowStep) * p.heads * kDataD;
          uint32_t src = sDq + b * Cfg::kDqBytes + first_row * Cfg::kDqRowBytes;
          constexpr uint32_t kSrcStep = kRowStep * Cfg::kDqRowBytes;
          if constexpr (Cfg::kProbe != BackwardProbe::kNoDqWrites) {
            if (first) {
              for (int r = first_row; r < rows; r += kRowStep, dst += dst_step, src += kSrcStep)
                bulk_store(dst, src, kDataD * 4);
            } else {
              for (int r = first_row; r < rows; r += kRowStep, dst += dst_step, src += kSrcStep)
                bulk_reduce_add_f32(dst, src, kDataD * 4);
            }
          }
        } else if constexpr (Cfg::kProbe != BackwardProbe::kNoDqWrites) {
          for (int r = first_row; r < rows; r += kRowStep)
            bulk_reduce_add_f32(dq_accum + ((seq.q_begin + m0 + r) * p.heads + h) * kDataD,
                                sDq + b * Cfg::kDqBytes + r * Cfg::kDqRowBytes, kDataD * 4);
        }
        bulk_commit();
        VARPACK_BACKWARD_STAMP(kReduceIssued);
        if constexpr (Cfg::kClaimDqRows) {
          TileCursor next = cursor;
          next.step(m_tiles);
          seen = it + 1 < iters && has_rows(next) ? peek_dq_rows(state_of(next)) : kDqRowsStored;
        }
        bulk_wait_read<0>();
        VARPACK_BACKWARD_STAMP(kReduceRead);
        VARPACK_BACKWARD_COUNT(kReduceTiles);
        if (it + kBuffers < iters) release_dq_buffer(b);
        if (first) publish_dq_rows(state, lane);
      }
      bulk_wait_read<0>();
    }
    return;
  }

  warpgroup_registers_up<Cfg::kComputeRegisters>();
  VARPACK_BACKWARD_STAMP(kComputeStart);
  VARPACK_BACKWARD_COUNT(kComputeBlocks);
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
    VARPACK_BACKWARD_STAMP(kScoresStart);
    VARPACK_BACKWARD_COUNT(kScoreTiles);
    const int64_t m0 = tile_start(cursor);
    cursor.step(m_tiles);
    if (kTmaPrologue || it > 0) {
      mbarrier_wait(stage_full(s), ((kTmaPrologue ? it : it - 1) / kStages) & 1);
      fence_proxy_async();  // the producer's cp.async writes, before wgmma reads them
    }
    VARPACK_BACKWARD_STAMP(kStageLanded);
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
    VARPACK_BACKWARD_STAMP(kScoresIssued);
    if constexpr (kIssueAhead) {
      if (it > 0) {
        wgmma_wait<2>();  // the previous tile's dK, so its stage is read
        mbarrier_arrive(stage_empty((it - 1) % kStages));
      }
    }
    VARPACK_BACKWARD_STAMP(kPreviousDkDone);
    // With softcap, dS^T needs each score's slope next to P^T: wait for both products.
    if constexpr (kSoftcap) wgmma_wait<0>();
    else wgmma_wait<1>();
    pin_registers(st);
    VARPACK_BACKWARD_STAMP(kSLanded);

    // P^T, and with softcap dS^T; accumulator (row, column) = (key warp_key + g + 8 * (c / 2),
    // query q0 + 8i + 2qd + c % 2).
    const bool full = tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                                         p.window_right);
    // Query m0 + col sees key j iff vis.begin + col <= j < vis.end + col, col < queries, j < k_len.
    const RowVisibility vis =
        row_visibility(seq, m0, p.causal, p.window_left, p.window_right, kBM);
    const int queries = seq.q_len - m0 < kBM ? static_cast<int>(seq.q_len - m0) : kBM;
    if constexpr (!kSoftcap) {
      // The exponentials, then the mask only where the tile is not wholly visible (one branch a
      // tile; in one loop ptxas branched around each score's test: d128's atomic loop 921 -> 767
      // instructions). Measured on the H200 (bf16, causal, 16 heads, tile_shapes against the
      // previous library, 2026-12-01 22:15 UTC), TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed:
      // d128 atomic 302.6 / 455.1 / 518.4 / 411.4 against 285.0 / 419.3 / 468.4 / 373.4, its
      // deterministic mode 280.0 / 402.8 / 450.0 / 363.3 against 268.2 / 383.7 / 429.9 / 340.4,
      // d96 236.0 / 344.4 / 395.0 / 317.4 against 219.4 / 330.2 / 368.3 / 284.6, d256 251.3 /
      // 332.0 / 354.7 / 306.7 against 236.2 / 311.6 / 338.3 / 295.1, d64 (with its per-tile
      // descriptors advanced, below) 220.0 / 362.6 / 422.2 / 307.4 against 200.3 / 318.9 / 376.0 /
      // 269.4 (the previous library's second run within 1.5% of its first).
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
      // (visible_columns: two compares a score). Measured on the H200 (bf16, causal, 16 heads,
      // tile_shapes, two rounds, 2026-12-04 20:25 UTC), TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k
      // with a window of 2048 / mixed, the first round: d128 278.1 / 365.2 / 359.4 / 338.3 against
      // the per-score tests' 266.4 / 353.2 / 345.8 / 325.7 (+3.4 to +4.4% in both rounds), d64
      // 188.9 / 275.0 / 268.6 / 234.9 against 179.9 / 256.2 / 250.7 / 220.2 (+4.9 to +7.4%).
      // ptxas: d128's softcap kernel spills 44 / 60 bytes (the variant timed, with the bounds in
      // both paths: 56 / 72) against 60 / 84. Without softcap the mask runs after the
      // exponentials in a branch of its own, and there the bounds gained nothing (d128 -1.0 to
      // +0.5%, d64 -0.3 to -1.1%): the per-score tests stay there.
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
    VARPACK_BACKWARD_STAMP(kPDone);
    if constexpr (!kSoftcap) {
      wgmma_wait<0>();
      pin_registers(dpt);
      VARPACK_BACKWARD_STAMP(kDpLanded);
#pragma unroll
      for (int i = 0; i < kScoreQueries / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          dpt[4 * i + c] = st[4 * i + c] * (dpt[4 * i + c] - dlt[i * 8 + 2 * qd + (c & 1)]);
    } else {
      pin_registers(dpt);
      VARPACK_BACKWARD_STAMP(kDpLanded);
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
        // 2k + j / 2, in stmatrix's layout; lanes 8j .. 8j + 7 address block j's rows. 4 stores a
        // tile at 64 queries, where one 32-bit store per register takes 16 (ncu, 16 x 4k,
        // 2026-12-03 06:53 UTC: 27.7 k of the compute warps' 390 k stall samples on dS^T and its
        // stores). Measured on the H200 (bf16, causal, 16 heads, tile_shapes, two rounds,
        // 2026-12-04 18:50 UTC), TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed, the first round:
        // d128 337.4 / 489.6 / 551.4 / 437.6 against 334.8 / 483.5 / 549.1 / 432.5 (+0.4 to +1.3%
        // in both rounds); together with the paired dQ columns below (not kept), d96 +0.3 to
        // +1.5% and softcap +1.7 to +6.4%; d64 (128-query tiles) -0.5 to +0.6%, but its softcap
        // kernel then spills 192 / 196 bytes against 140 / 144, and with the column-bound mask it
        // measured 200.2 / 303.0 / 258.3 against 213.5 / 327.6 / 278.0 at 64 x 1k / 16 x 4k / mixed
        // (-6 to -8%, two rounds, 2026-12-04 21:25 UTC), so d64 keeps the 32-bit stores. Tried
        // with it, not kept (bfa3872 holds the code): dQ staged by 16-byte stores, the
        // accumulator's columns paired in the threads' order (the tile conversion reading them
        // so) and its shared-memory rows padded by 16 floats: +0.1 to +0.3% over stmatrix alone,
        // and alone 331.8 / 476.9 / 522.9 / 427.5 (-1 to -5%).
        const int block = lane / 8;
#pragma unroll
        for (int k = 0; k < kBM / 16; ++k)
          stmatrix_x4(sDs + DsTile::offset(warp * 16 + lane % 8 + 8 * (block % 2),
                                           2 * k + block / 2),
                      dsf[k]);
      }
      if constexpr (kAtomicDq) fence_proxy_async();
    }
    VARPACK_BACKWARD_STAMP(kScoresDone);
  };
  auto products = [&](int it) {
    const int s = it % kStages;
    // dO and Q read MN-major, from this warpgroup's own columns.
    const uint32_t stage = s * QTile::kBytes + own_cols;
    const GmmaOperand<true> do_cols(sdO + stage, QTile::kBlockBytes),
        q_cols(sQ + stage, QTile::kBlockBytes);
    // dV += P^T dO and dK += dS^T Q: B = dO, Q read MN-major (rows = queries). With atomic dQ, dV's
    // product, then dQ's, then dK's, so that dQ goes to the reducing warps while dK's product is
    // still on the tensor cores (FlashAttention 3's order). Measured on the H200 (bf16, d128,
    // causal, 16 heads, tile_shapes, 2026-12-01 16:36 UTC), TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k
    // / mixed / 25% padding: 272.5 / 404.0 / 462.1 / 356.8 / 373.0, against 269.8 / 400.3 / 450.9 /
    // 353.5 / 370.0 with dV's and dK's products first and dQ's after, all three waited for before
    // the hand-off. Issuing the next tile's S^T product before waiting for dK's (so that the tensor
    // cores go on from tile to tile) held its accumulators over the loop's end: ptxas serialized
    // the products (C7512, C7515) and it ran 10-14% slower.
    pin_registers(dv);
    pin_registers(dk);
    VARPACK_BACKWARD_STAMP(kProductsStart);
    begin_turn();
    wgmma_fence();
    if constexpr (kAtomicDq) {
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk)
        Wgmma<T, kOwnCols>::template rs<1>(
            dv, pf[kk], do_cols.at(kk * 2048), 1);
      wgmma_commit();
      VARPACK_BACKWARD_STAMP(kDvIssued);
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
        VARPACK_BACKWARD_STAMP(kDsReadyPassed);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          Wgmma<T, kDqCols>::template ss<1, 1>(dq, ds_rows.at(other + kk * 2048),
                                               k_cols.at(other + kk * 2048), 1);
      } else {
        // Every warp's dS^T rows are in shared memory. (The previous tile's were free to
        // overwrite: both warpgroups passed its dQ hand-off, kDqEmpty, after their dQ product
        // completed.)
        named_barrier_sync(kDsReady, Cfg::kComputeThreads);
        VARPACK_BACKWARD_STAMP(kDsReadyPassed);
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
      VARPACK_BACKWARD_STAMP(kDqDkIssued);
      wgmma_wait<1>();  // dV's and dQ's products
      pin_registers(dq);
      VARPACK_BACKWARD_STAMP(kDvDqLanded);

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
      VARPACK_BACKWARD_STAMP(kDqEmptyPassed);
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
    VARPACK_BACKWARD_STAMP(kProductsDone);
  };
  auto finish = [&](int it) {
    wgmma_wait<0>();
    mbarrier_arrive(stage_empty(it % kStages));  // Q, dO and the row statistics are read
  };
  if (kTmaPrologue && iters > 0) {
    mbarrier_wait(kv_full, 0);
    fence_proxy_async();  // K and V by cp.async (a partial tile), before wgmma reads them
  }
  VARPACK_BACKWARD_STAMP(kKvLanded);
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
  VARPACK_BACKWARD_STAMP(kLoopDone);
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
  VARPACK_BACKWARD_STAMP(kComputeEnd);
#endif
}

// The Hopper kernel over (key slot, kv head): dK and dV, and with kAtomicDq dQ into dq_accum
// (with its state words dq_states: hopper_dq_accumulator.cuh).
template <class T, class Cfg, bool kAtomicDq>
void launch_hopper_dkdv(const AttentionBackwardParams& p, const float* delta, float* dq_accum,
                        uint32_t* dq_states, cudaStream_t stream) {
  constexpr int D = Cfg::kDataD;  // the tensor maps' boxes fill the columns past it with zeros
  const int64_t key_slots = slot_count(p.total_k, p.batch, Cfg::kKeysPerBlock);
  if (key_slots <= 0 || p.kv_heads <= 0) return;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const CUtensorMap q_map = head_tile_map(p.q, kBf16, p.total_q, p.heads, D, p.q_row_stride,
                                          p.q_head_stride, Cfg::kQueryStep);
  const CUtensorMap dout_map = head_tile_map(p.dout, kBf16, p.total_q, p.heads, D,
                                             p.dout_row_stride, p.dout_head_stride,
                                             Cfg::kQueryStep);
  // K and V's maps, read by the kernel only with TmaPrologue (encoding one costs host time per
  // call, so the others pass empty ones).
  const CUtensorMap k_map = Cfg::kTmaPrologue
                                ? head_tile_map(p.k, kBf16, p.total_k, p.kv_heads, D,
                                                p.k_row_stride, p.k_head_stride, Cfg::kKeysPerBlock)
                                : CUtensorMap{};
  const CUtensorMap v_map = Cfg::kTmaPrologue
                                ? head_tile_map(p.v, kBf16, p.total_k, p.kv_heads, D,
                                                p.v_row_stride, p.v_head_stride, Cfg::kKeysPerBlock)
                                : CUtensorMap{};
  launch_backward_pass(p.softcap > 0.f ? hopper_backward_kernel<T, Cfg, true, kAtomicDq>
                                       : hopper_backward_kernel<T, Cfg, false, kAtomicDq>,
                       Cfg::kThreads, Cfg::kSmemBytes, key_slots, p.kv_heads,
                       "the Hopper backward kernel", stream, p, q_map, dout_map, k_map, v_map,
                       delta, dq_accum, dq_states);
}

// The atomic-dQ backward on Hopper with an explicit shape (the experiments time several). With
// Cfg::kClaimDqRows: Delta (and the accumulator's state words set to untouched), the kernel, then
// dQ's conversion by query tiles (workspace: Delta, the accumulator, its state words:
// dq_accum_workspace_bytes); without: Delta clearing the accumulator, the kernel, the conversion
// by rows (run_atomic_backward). The conversion stays a pass of its own: done inside this kernel
// (the block that completes a query tile's dQ converts it, after its dK and dV; branch
// wip/dq-fold) it measured slower on the H200, d128 64 x 1k / 16 x 4k / 4 x 16k / mixed 253.8 /
// 400.2 / 447.8 / 333.2 TFLOP/s against 268.8 / 399.4 / 453.7 / 351.7, d64 152.5 / 232.2 / 268.6 /
// 196.4 against 161.5 / 237.9 / 273.1 / 207.1 (bench/results/cuda.md, 2026-12-01). Nor by blocks
// of this kernel's own grid taking tickets between the key blocks (ConvertBlocks, 7b0ee2b and
// b38c5ed; H100, 2026-12-05): 0.98-0.99x at 64 x 1k and 16 x 4k, 0.94x mixed,
// with the conversion staged through shared memory; the key blocks' path lost nothing (without
// conversions 1.10x at 64 x 1k), so the conversion's memory traffic costs as much in the grid.
template <class T, class Cfg>
void launch_hopper_backward_atomic_with(const AttentionBackwardParams& p, void* workspace,
                                        cudaStream_t stream) {
  if constexpr (!Cfg::kClaimDqRows) {
    run_atomic_backward<T, Cfg::kDataD>(
        p, workspace, stream, [&](const float* delta, float* dq_accum, cudaStream_t s) {
          launch_hopper_dkdv<T, Cfg, true>(p, delta, dq_accum, nullptr, s);
        });
  } else {
    if (p.batch <= 0) return;  // no sequence, no row to write (cu_seqlens may then be null)
    unsigned char* bytes = static_cast<unsigned char*>(workspace);
    float* delta = reinterpret_cast<float*>(bytes);
    float* dq_accum = reinterpret_cast<float*>(bytes + delta_workspace_bytes(p));
    uint32_t* dq_states =
        reinterpret_cast<uint32_t*>(bytes + delta_workspace_bytes(p) + dq_accum_bytes(p));
    launch_delta<T, Cfg::kDataD>(p, delta, nullptr, dq_states, stream);
    launch_hopper_dkdv<T, Cfg, true>(p, delta, dq_accum, dq_states, stream);
    const int64_t query_slots = slot_count(p.total_q, p.batch, Cfg::kQueryStep);
    if (query_slots > 0 && p.heads > 0) {
      const dim3 grid(static_cast<unsigned>(query_slots), static_cast<unsigned>(p.heads));
      dq_convert_tiles_kernel<T, Cfg::kDataD, Cfg::kQueryStep>
          <<<grid, RowPass<Cfg::kDataD>::kThreads, 0, stream>>>(p, dq_accum, dq_states,
                                                                 query_slots);
      check_launch("the backward dQ conversion kernel");
    }
  }
}

// The two-pass backward on Hopper with an explicit dK/dV shape (the experiments time several):
// Delta, dK and dV without atomics, then the wgmma dQ pass.
template <class T, class Cfg>
void launch_hopper_two_passes_with(const AttentionBackwardParams& p, void* workspace,
                                   cudaStream_t stream) {
  float* delta = static_cast<float*>(workspace);
  launch_delta<T, Cfg::kDataD>(p, delta, nullptr, nullptr, stream);
  launch_hopper_dkdv<T, Cfg, false>(p, delta, nullptr, nullptr, stream);
  launch_hopper_dq_pass<T, HopperDqConfig<Cfg::kDataD>>(p, delta, stream);
}

// The backward on Hopper: atomic dQ in the one kernel, or dK and dV there and dQ by the wgmma dQ
// pass (no atomics, bit-identical run to run): that one in the deterministic mode, and at d96 and
// d256 in both. Measured on the H200 (bf16, causal, 16 heads; tile_shapes, 2026-12-01), TFLOP/s
// at 64 x 1k / 16 x 4k / 4 x 16k / mixed (then, with one warp adding dQ; with two, the atomic
// kernel leads at d64 too: HopperAtomicBackwardConfig):
// - d128 (10:53 UTC): the two passes 270.6 / 401.3 / 413.2 / 345.6, with the mma.sync dQ pass
//   (backward_kernels.cuh's dq_kernel) 221.4 / 295.6 / 311.7 / 264.4, atomic 271.7 / 404.2 /
//   451.3 / 354.9;
// - d64 (11:12 UTC, two rounds, the faster median): the two passes 182.4 / 275.8 / 315.2 / 233.6,
//   atomic 162.3 / 239.6 / 273.7 / 207.5.
// - d96 (12:20 UTC): the two passes 216.9 / 316.1 / 361.0 / 286.7, the mma.sync atomic backward
//   143.0 / 182.4 / 199.6 / 166.0 (the Hopper atomic kernel on d128's tiles leads since
//   2026-12-02: HopperAtomicBackwardConfig<96>);
// - d256 (12:20 UTC): the two passes 230.9 / 299.2 / 329.4 / 294.3, the mma.sync atomic backward
//   113.4 / 138.9 / 148.4 / 129.9.
// d256 runs the two passes only (hopper_backward_two_passes_only).
template <class T, int D>
void launch_hopper_backward(const AttentionBackwardParams& p, void* workspace,
                            cudaStream_t stream) {
  constexpr bool kTwoPassesOnly = hopper_backward_two_passes_only(D);
  if (kTwoPassesOnly || p.deterministic) {
    launch_hopper_two_passes_with<T, HopperBackwardConfig<D>>(p, workspace, stream);
    return;
  }
  if constexpr (!kTwoPassesOnly)
    launch_hopper_backward_atomic_with<T, HopperAtomicBackwardConfig<D>>(p, workspace, stream);
}

}  // namespace varpack::cuda
