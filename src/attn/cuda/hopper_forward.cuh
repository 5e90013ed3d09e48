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
//   with ping-pong the consumers take turns to issue (named barriers), so one's softmax overlaps
//   the other's products. The output goes out through a shared-memory scratch of its own: each
//   consumer warp's 16 rows stored by the TMA unit (WarpRowsTmaOut; a sequence's partial last
//   rows by the warp), or, at d256 and with d64's three consumers (HopperForwardLongD64), copied
//   out by the warp in 16-byte chunks (WarpRowsOut).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/kv_rings.cuh"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/warp_rows_out.cuh"
#include "attn/cuda/warp_rows_tma_out.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// A work of the forward (block_work's) with its sequence's bounds: what a persistent block's
// producer hands to its warps, so that they read no cu_seqlens on their way into the next work.
struct ForwardWork {
  BlockWork work;  // work.valid false: no more works
  SequenceBounds seq;
};

// OutCols: the output columns staged at a time (WarpRowsOut), fewer than D where shared memory is
// short. TmaOut: the output stored by the TMA unit (WarpRowsTmaOut; needs OutCols == D). DataD:
// the head dim in memory, where it is not a multiple of 64: D (the tiles' columns, whole 64-column
// blocks) is the next one up, and the columns past DataD are zeros in shared memory and left out
// of S = Q K^T's reduction and of the output. LazyRescale: a row keeps its running
// maximum until a tile's exceeds it by more than 2^8 (in exp2's units), so that O and the row sum
// are rescaled only then, not at every tile; P = exp2(s - max) is then at most 256, exact
// arithmetic either way (the sum and the output are taken against the same maximum).
// TreeReduce: a row's maximum and sum over a tile taken pairwise (depth log2 of the row's values
// per thread) instead of along one chain of dependent instructions. Measured on the H200 (bf16,
// causal, 16 heads; tile_shapes, two rounds, 2026-12-01 19:05 UTC), TFLOP/s at 64 x 1k / 16 x 4k /
// 4 x 16k / mixed, pairwise against one chain: d128 407 / 577 / 625 / 455 and 413 / 574 / 623 / 460
// against 403 / 565 / 606 / 446 and 408 / 561 / 603 / 447 (+1-3%); d64 (two consumers) 284 / 402 /
// 429 / 294 and 283 / 399 / 428 / 293 against 283 / 398 / 423 / 292 and 283 / 392 / 422 / 285. A
// second call (19:12 UTC, pairwise / chain): d128 404 / 559 / 621 against 400 / 545 / 596, d96 315
// / 467 / 506 against 311 / 445 / 480, d256 equal, d64 274 / 383 / 405 against 278 / 383 / 410 (a
// draw with the first call's); but with softcap (d128) 331 / 433 / 473 against 336 / 437 / 479, and
// d64's three consumers 203 / 382 / 465 against 206 / 388 / 472 (ptxas: 12 bytes of spills instead
// of 4). So pairwise, but along the chain with softcap (the kernel's kSoftcap) and in
// HopperForwardLongD64.
template <int D, int Consumers, int BlockN, int Stages, bool PingPong, int ProducerRegisters,
          int ConsumerRegisters, int OutCols = D, int DataD = D, bool LazyRescale = false,
          bool TreeReduce = true, bool TmaOut = false, int QBuffers = 1, bool RowLimitMask = false,
          bool QByTma = false>
struct HopperForwardTile {
  static_assert(DataD <= D && DataD % 16 == 0, "whole k-steps of S = Q K^T");
  static constexpr int kD = D;
  static constexpr int kDataD = DataD;
  static constexpr int kConsumers = Consumers;
  static constexpr int kThreads = 128 * (Consumers + 1);
  static constexpr int kBlockM = 64 * Consumers;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr bool kPingPong = PingPong && Consumers > 1;
  static constexpr int kProducerRegisters = ProducerRegisters;
  static constexpr int kConsumerRegisters = ConsumerRegisters;
  static constexpr bool kLazyRescale = LazyRescale;
  static constexpr bool kTreeReduce = TreeReduce;
  // The products' descriptors advanced per product (GmmaOperand; measured at issue_s), but at
  // d256, whose 128 output columns per thread leave no registers for them (ptxas: 0 -> 172 bytes of
  // spills; 552 TFLOP/s at 16 x 4k in the 19:40 UTC table against 651 the call before).
  static constexpr bool kAdvanceDescriptors = D != 256;
  // Several heads per block past 4096 keys per query tile (forward_heads_per_block): measured at
  // 4 x 16k on the H200 (bench_attention_cuda, forward TFLOP/s, two rounds, 1 head -> 4 heads,
  // 2026-12-02 04:30 UTC) d128 594 -> 603 and 588 -> 597, d96 (on d128's tiles) 502 -> 512 and 504
  // -> 517; but d64's three consumers 509 -> 481 and 510 -> 476, d256's 64-key tiles 626 -> 611.
  static constexpr bool kHeadsPastLongKeys = D == 128;
  static_assert(warpgroup_registers_fit(kThreads, ProducerRegisters, ConsumerRegisters),
                "the block's registers at launch hold every warpgroup's budget");
  using QTile = GmmaTile<kBlockM, D>;
  using KvTile = GmmaTile<kBlockN, D>;
  static constexpr int kOutCols = OutCols;
  static constexpr bool kTmaOut = TmaOut;
  static_assert(!TmaOut || OutCols == D, "the TMA unit stores whole rows of boxes");
  // Per consumer warp: WarpRowsTmaOut's (a multiple of 1024 bytes, as its swizzling needs) or
  // WarpRowsOut's.
  static constexpr int kScratchBytes =
      TmaOut ? WarpRowsTmaOut<uint16_t, D, DataD>::kScratchBytes : 16 * (2 * OutCols + 16);
  // Q, the K stages, the V stages (from a 1024-byte boundary), the output scratch, mbarriers.
  // Q tiles: with two, the next item's Q loads while this item runs.
  static constexpr int kQBuffers = QBuffers;
  // RowLimitMask: a partly visible tile's mask as two bounds per row, relative to the thread's
  // first key (one compare a score where no window's left edge falls in the tile).
  static constexpr bool kRowLimitMask = RowLimitMask;
  // QByTma: an item's Q tile loaded by the TMA unit, issued by one producer thread, where it lies
  // wholly inside the sequence (a partial one by cp.async, zero-filled past the sequence's end),
  // instead of by the producer's 128 threads' cp.async, whose address arithmetic and rolled loop
  // (16 copies a thread at d128) hold up the producer between an item's K/V tiles. Measured on the
  // H200 (bf16, causal, 16 heads; tile_shapes, three rounds in one call, 2026-12-03 17:15 UTC),
  // TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed, the first round's, against cp.async's: d128
  // 477.7 / 570.9 / 636.3 / 519.0 against 458.8 / 558.6 / 633.1 / 505.9 (the three rounds: +3.5
  // to +4.4% at 1k, +0.5 to +2.4% at 4k, 0 to +0.5% at 16k, +2.6% mixed), softcap 411.4 / 442.6
  // / 480.7 / 420.9 against 394.8 / 434.5 / 475.6 / 410.8, d64 +1.5 to +1.7% at 1k and 253.1
  // against 246.5 with three consumers, d96 366.4 / 465.3 / 502.8 / 435.1 against 353.7 / 453.3 /
  // 500.7 / 424.5, d256 +1.9 to +2.8% at 1k; none slower. So at every shape.
  static constexpr bool kQByTma = QByTma;
  static_assert(QBuffers == 1 || QBuffers == 2, "one or two Q tiles");
  static constexpr int kKOffset = QBuffers * QTile::kBytes;
  static constexpr int kVOffset = kKOffset + Stages * KvTile::kBytes;
  static constexpr int kOutOffset = kVOffset + Stages * KvTile::kBytes;
  static constexpr int kBarrierOffset = kOutOffset + 4 * Consumers * kScratchBytes;
  static_assert(!TmaOut || kOutOffset % 1024 == 0,
                "the swizzled boxes start on 1024-byte boundaries");
  // Per Q tile full/empty; per stage K and V full/empty; the persistent kernel's two work slots
  // full/empty.
  static constexpr int kBarriers = 2 * QBuffers + 4 * Stages + 4;
  static constexpr int kWorkOffset = kBarrierOffset + kBarriers * 8;  // two ForwardWork slots
  static_assert(kWorkOffset % alignof(ForwardWork) == 0, "aligned work slots");
  static constexpr int kSmemBytes = 1024 + kWorkOffset + 2 * sizeof(ForwardWork);
  static_assert(kSmemBytes <= 227 * 1024, "the shared memory of one Hopper multiprocessor");
};

// Measured on the H200 (bf16, causal, 16 heads, experiments/tile_shapes.cu, one call, 2026-12-01
// 10:00 UTC; TFLOP/s at 64 x 1k / 16 x 4k / 4 x 16k / mixed lengths 4096..17):
// - d128, two consumers, 128-key tiles, two stages: with ping-pong 372 / 553 / 589 / 466, without
//   350 / 542 / 641 / 440, both with two heads per block at 16k. With one head per block there (the
//   rule of forward_heads_per_block since 10:55 UTC) ping-pong measured 644 and 646 at 16k in two
//   calls (10:53 and 11:05 UTC) against 591 without; a third call that keeps each variant's faster
//   median of two rounds (11:12 UTC) had all four 16k variants (with and without ping-pong, one
//   head or the rule's) within 574-583, and with ping-pong 404 / 571 / 575 / 455 against 396 / 524
//   / 578 / 439 without. So ping-pong at every length, as at d64, d96 and d256. The
//   block-synchronous kernel it replaced (no producer, one __syncthreads per tile, three shared
//   K/V stages, the output through a K/V stage): 348 / 480 / 515 / 399.
// - d64: two consumers, three stages, ping-pong 238 / 361 / 433 / 295; without ping-pong 222 /
//   335 / 385 / 262; three consumers of 160 registers (two stages) 207 / 383 / 484 / 295, but they
//   spill (52-332 bytes): from 4096 queries the library takes them (HopperForwardLongD64, below).
//   The block-synchronous kernel: 182 / 294 / 350 / 236.
// - Persistent blocks (one per multiprocessor, taking (query tile, head) items round-robin,
//   heaviest first): d128 380 / 453 / 507 / 466: the static round-robin leaves blocks unevenly
//   loaded at 4k-16k, and a dynamic scheduler needs a global counter the forward has no workspace
//   for.
// - One tile stream across a block's heads (a head's first S = Q K^T issued with the previous
//   head's last O += P V; two Q buffers; the output staged 64 columns at a time for room), one
//   call (10:08 UTC): d128 377 / 530 / 547 / 434 with ping-pong: slower from 4k (cuda.md).
// - d256 (64-key tiles, the output staged 64 columns at a time, for room): with ping-pong 437 /
//   570 / 598 / 520, without 426 / 589 / 588 / 508 (10:53 UTC); two rounds (11:12 UTC) 448 / 588 /
//   603 / 523 against 435 / 524 / 597 / 511; the mma.sync forward it replaced 195 / 247 / 271
//   / 218.
// - d96 on d128's tiles, its columns past 96 zero: 327 / 475 / 546 / 369 (11:12 UTC, O += P V over
//   the 96 columns; over all 128, 11:05 UTC: 317 / 455 / 508 / 360) against the mma.sync forward's
//   212 / 270 / 290 / 219.
// - Lazy rescaling (LazyRescale), one call (2026-12-01 15:31 UTC), lazy against every tile at 64 x
//   1k / 16 x 4k / 4 x 16k / mixed / 3% / 25% padding: d256 451 / 638 / 714 / 541 / 612 / 576
//   against 442 / 593 / 654 / 519 / 564 / 547 (O's 128 columns per thread against 32 scores per
//   64-key tile: the rescale is most of the softmax's arithmetic); but d128 385 / 536 / 582 / 430
//   / 506 / 462 against 395 / 553 / 593 / 444 / 517 / 475, d64 and d96 2-4% slower too (32 or 64
//   of O's values per thread against 64 scores per tile: the branch and its compares cost more
//   than the multiplies saved), softcap at d128 equal. So at d256 only.
// - Tried on 2026-12-02 (tile_shapes, one call each, bf16, causal, 16 heads; TFLOP/s at 64 x 1k /
//   16 x 4k / 4 x 16k / mixed against the library's in the same call; branches in cuda.md), none
//   kept: d128 on 64-key tiles, four stages (the same shared memory) 331 / 414 / 432 / 385 against
//   387 / 537 / 565 / 456 (three stages: equal to four); d64 on 64-key tiles, six stages 238 / 318
//   / 349 / 250 against 279 / 402 / 416 / 285; the last key tile's products on its first 64 keys
//   where a consumer's rows see no more (the first consumer on the causal diagonal) 382 / 555 /
//   577 / 438 against 413 / 574 / 591 / 460 (ptxas: 52 bytes of spills at the item's end); the
//   output staged at an item's end and copied out under the next item's first S = Q K^T 384 / 548
//   / 613 / 455 against 407 / 559 / 618 / 457; an L2 prefetch of the first Q tile and K/V tiles of
//   the block 4-32 places later in launch order, by the consumers before their first wait (08:40
//   UTC, two rounds) 377-382 / 548-553 / 607-632 / 406-411 against 399-401 / 560-564 / 633-637 /
//   446-447 (its dependent loads of cu_seqlens delayed the consumers' start; the backward's, moved
//   off its critical path, gained nothing either: HopperAtomicBackwardConfig).
// - The output stored by the TMA unit (TmaOut; WarpRowsTmaOut) against the warps' 16-byte copies
//   (WarpRowsOut), tile_shapes interleaved, two rounds (2026-12-02 14:15 UTC), TFLOP/s at 64 x 1k /
//   16 x 4k / 4 x 16k / mixed: d128 413.9 / 572.8 / 622.8 / 465.7 and 412.1 / 570.3 / 622.1 / 447.2
//   against 408.3 / 567.8 / 627.9 / 460.4 and 405.8 / 567.2 / 626.5 / 444.2; d96 319.2 / 450.3 /
//   534.8 / 389.0 and 321.7 / 451.9 / 534.3 / 383.3 against 308.2 / 444.1 / 532.2 / 376.0 and 308.8
//   / 445.4 / 529.1 / 370.5; d64's two consumers (the library's below 4096 queries) 286.0 and 283.4
//   against 283.9 and 279.9 at 64 x 1k. So at every shape but two: d64's three consumers
//   (HopperForwardLongD64) 205-207 / 377-378 / 449 / 267-268 against 225-227 / 406 / 480 / 295-297
//   (ptxas: 88 bytes of spills in its 160-register consumers, against none), and d256, whose
//   output is staged 64 columns at a time. (The backward's dK and dV by the TMA
//   unit, the same call: d128 and d96 -1.2 to +0.2%, d64 -3 to -4%; not kept.)
// - Two Q buffers (QBuffers), the next item's Q loaded during this item instead of after its last
//   S = Q K^T, and the mask of a partly visible tile as two bounds per row (RowLimitMask), against
//   the library of the time (tile_shapes, interleaved, 2026-12-02 15:36 UTC; TFLOP/s at 64 x 1k /
//   16 x 4k / 4 x 16k / mixed / 10% padding): two Q buffers d128 391.4 / 541.2 / 599.3 / 443.0 /
//   491.8 against 379.2 / 536.9 / 597.2 / 442.6 / 487.8 (a second round: 409.5 / 544.7 / 601.1 /
//   461.5 against 404.6 / 540.9 / 597.3 / 461.2), d96 324.0 / 439.7 / 520.9 / 373.3 / 420.0
//   against 312.6 / 439.7 / 520.2 / 376.7 / 423.0, d64 293.2 / 395.2 / 410.9 / 286.1 / 359.4
//   against 285.2 / 393.3 / 408.5 / 284.9 / 360.5; the row-limit mask d64 289.6 / 396.6 / 418.3 /
//   292.9 / 364.6, d96 317.3 / 439.9 / 518.2 / 384.6 / 424.6, but d128 383.5 / 531.5 / 588.3 /
//   442.8 / 487.1 (and 407.3 / 534.8 / 589.2 / 463.4): 1-1.5% slower from 4k, where it has few
//   masked tiles (its loop: 837 instructions with both of the mask's paths, against 736). So two
//   Q buffers at d64, d96 and d128, the row-limit mask then at d64 and d96. On today's config
//   (Q by the TMA unit, persistent; tile_shapes, two rounds, 2026-12-04 21:25 UTC) it gains at
//   d128 too: 477.6 / 578.8 / 523.8 against 473.2 / 576.4 / 517.6 at 64 x 1k / 16 x 4k / mixed
//   (+0.4 to +1.4% in both rounds), softcap 414.3 / 450.6 / 428.3 against 405.7 / 447.5 / 418.1
//   (+0.6 to +2.6%; ptxas: that softcap kernel spills 128 / 156 bytes against 92 / 92). So at
//   every head dim but d256 (64-key tiles, one Q buffer).
// - Tried on 2026-12-03 (tile_shapes, persistent, d128, TFLOP/s and, over 2 s of calls back to
//   back, joules per call, at 64 x 1k / 16 x 4k / 4 x 16k / mixed; cuda.md), none kept: Q in
//   registers (S = Q K^T from registers and K's shared memory) 464.3 / 575.4 / 632.9 / 509.4
//   against 465.1 / 577.0 / 640.3 / 511.5, energy equal (0.4817 J against 0.4820 at 64 x 1k);
//   the key tiles last to first (the causal diagonal first) 412.7 / 573.1 / 638.0 / 501.8 against
//   417.9 / 575.5 / 625.9 / 509.7, and with the diagonal tile's products halved where a consumer's
//   rows see only its first 64 keys 416.7 / 566.1 / 622.0 / 499.4 (0.5117 J against 0.4919):
//   products 2.8-5.6% fewer at 64 x 1k saved neither time nor energy, and the half product's
//   branch made ptxas serialize the products elsewhere (C7511; softcap 15-21%, d96 14-25%
//   slower).
// - Tried on 2026-12-03 17:00 UTC (the same, median of 10 calls; 46e634d holds the first's code,
//   e69daab the other three's and the timeline's), none kept:
//   - a share of the exponentials on the FP32 pipe (2^round(x) times a cubic, nine instructions),
//     every 4th key octet: d128 431.8 / 552.9 / 606.4 / 486.1 against 452.8 / 581.6 / 635.5 /
//     508.4, softcap 363.7 / 441.2 / 471.2 / 404.0 against 362.8 / 450.1 / 476.4 / 411.4 (every
//     2nd: 344.4 / 394.1 / 418.8 / 366.5), d64 303.3 / 381.6 / 406.8 / 318.7 against 302.3 /
//     390.0 / 419.6 / 326.2, d96 5-12% slower: the MUFU pipe is not what limits. Measured again
//     at 22:48 UTC (two rounds; d661302 holds that code, with the library's softcap configs at
//     every 2nd octet), softcap at 64 x 1k / 16 x 4k / mixed: every 4th / 2nd / every octet
//     397.3 / 455.6 / 405.4, 365.0 / 415.3 / 372.6, 324.7 / 368.0 / 332.7 against 411.8 / 478.9
//     / 422.5; d96 -7%; d64 -1 to -3% (every 4th, 8th), with softcap +6% at 1k but -12% at 4k;
//   - the next work taken by the producer once the current one's first K/V tile is issued: the
//     producer's 24 registers then spill inside its K/V loop (ptxas: 100 -> 412 bytes), 10-15%
//     slower (397.6 / 490.5 / 548.9 / 463.8 against 466.8 / 550.4 / 601.8 / 511.8), so its issue
//     is on the consumers' way; the log-sum-exp stored after the output (its fence's
//     MEMBAR.ALL.CTA) 464.6 / 549.4 / 602.5 / 512.1, a draw; the K/V waits' fence only after
//     cp.async 465.8 / 543.9 / 593.5 / 507.9, 0.2-1.4% slower.
//   A clock64 timeline of the library's consumers (d128, one call; cuda.md) puts a 64 x 1k item
//   (4.5 key tiles) at about 19,300 clocks: 3.5 loop tiles of about 3,440 (products about 1,970 of
//   them, both consumers'), and some 6,400 at its start and end (Q and first K waits 620, first
//   S = Q K^T 750, first softmax 1,490, last O += P V 840, output 1,710-1,830).
// - Tried on 2026-12-03 20:20 UTC (the same, one round; 52cbbb2 holds the code), not kept: the
//   output's staging by stmatrix.x4 (8 a thread at d128 instead of 32 32-bit stores) 485.1 /
//   587.8 / 642.0 / 527.5 against 485.4 / 588.9 / 642.1 / 525.5, a draw; softcap 404.6 / 438.1 /
//   466.4 / 409.2 against 414.8 / 458.9 / 490.0 / 423.3 (2.5-5% slower, again in a second
//   partial round); d64 +0.3-1.2%; d96 472.1 against 486.3 at 16 x 4k. The output's 1,700-1,800
//   clocks are not its shared-memory stores.
// - Tried on 2026-12-03 22:25 UTC (tile_shapes, three rounds in one call; c0a7108 holds the
//   code), not kept: softcap's softmax without a row maximum (P = exp2(raw * softcap * log2 e),
//   in fp32's range for softcap <= 64 since raw is a tanh): softcap +0.6 to +3.2% in every round,
//   the first's 378.0 / 472.7 / 496.1 / 431.8 against 368.8 / 463.0 / 482.1 / 421.1, max|diff|
//   1.6e-2 against the library's output. A float64 model put its error on rows with a few
//   dominant keys at 2-4x the online softmax's (softcap 30: 4.8e-3 against 1.3e-3): too little
//   speed for that.
// Not possible at d128: three stages (the output scratch leaves no room).
template <int D>
struct HopperForwardConfig
    : std::conditional_t<
          D == 64,
          HopperForwardTile<64, 2, 128, 3, true, 24, 240, 64, 64, false, true, true, 2, true, true>,
          std::conditional_t<D == 256,
                             HopperForwardTile<256, 2, 64, 2, true, 24, 240, 64, 256, true, true,
                                               false, 1, false, true>,
                             HopperForwardTile<(D + 63) / 64 * 64, 2, 128, 2, true, 24, 240,
                                               (D + 63) / 64 * 64, D, false, true, true, 2,
                                               true, true>>> {};

// The forward's timeline (experiments/forward_timeline.cu, built with
// -DVARPACK_FORWARD_TIMELINE; everywhere else the stamps compile to nothing, and the library's
// SASS is the same with or without them): each ForwardEvent adds clock64() (or a count) to its
// multiprocessor's row of sums, from each consumer warpgroup's first thread. The timeline
// subtracts an event's sum from the next one's, per loop tile or per item.
enum ForwardEvent : int {
  kItemStart, kItemEnd, kItems,
  kTileStart, kTileLoaded, kTileTurn, kTileIssued, kTileScores, kTileSoftmax, kTileProducts,
  kTileDone, kLoopTiles, kForwardEvents
};
#if defined(VARPACK_FORWARD_TIMELINE)
__device__ unsigned long long g_forward_timeline[256][kForwardEvents];
__device__ __forceinline__ void forward_event(int event, unsigned long long value) {
  if (threadIdx.x % 128 == 0) add_to_multiprocessor_row(g_forward_timeline, event, value);
}
#define VARPACK_FORWARD_STAMP(event) forward_event(event, clock64())
#define VARPACK_FORWARD_COUNT(event) forward_event(event, 1)
#else
#define VARPACK_FORWARD_STAMP(event) ((void)0)
#define VARPACK_FORWARD_COUNT(event) ((void)0)
#endif

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
  constexpr int kStages = Cfg::kStages;
  constexpr int kQBuffers = Cfg::kQBuffers;
  constexpr int kConsumerWarps = 4 * Cfg::kConsumers;
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;
  extern __shared__ unsigned char smem_raw[];

  // Work `index` with its sequence's bounds (none past the launch order's last).
  auto work_at = [&](int64_t index) {
    ForwardWork fw;
    if (index >= order.blocks()) return fw;
    fw.work = block_work<kBM>(p.cu_seqlens_q, order, index);
    if (fw.work.valid) fw.seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, fw.work.b);
    return fw;
  };
  ForwardWork first;  // a block's only work (not persistent)
  if constexpr (!kPersistent) {
    first = work_at(blockIdx.x);
    if (!first.work.valid) return;
  }
  const int group = p.heads / p.kv_heads;
  // A work's items, one after the other: each of its query tiles (one, but for a rank-0 block
  // whose sequence is longer than the launch order assumed) for each of its heads. The same query
  // rows of every head see the same keys, so a tile's heads walk the same key tiles; the block's
  // g-th K/V tile in all sits in stage g % kStages, fill number g / kStages of that stage, and its
  // item-th item's Q in buffer item % kQBuffers.

  const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t sK = sQ + Cfg::kKOffset;
  const uint32_t sV = sQ + Cfg::kVOffset;
  const uint32_t bars = sQ + Cfg::kBarrierOffset;
  // Q's: the producer's 128 threads arrive once their cp.async copies (if any) have landed, and the
  // TMA unit's count in bytes; every consumer warp hands it back once its last S = Q K^T of the
  // head is done.
  auto q_full = [&](int item) { return bars + 8 * (item % kQBuffers); };
  auto q_empty = [&](int item) { return bars + 8 * (kQBuffers + item % kQBuffers); };
  const KvRings<KvTile, kStages> ring{sK, sV, bars + 16 * kQBuffers};
  // The persistent kernel's works: slot w % 2 holds the w-th.
  const uint32_t id_bars = bars + 16 * kQBuffers + 8 * ring.kBarriers;
  auto id_full = [&](int w) { return id_bars + 8 * (w % 2); };
  auto id_empty = [&](int w) { return id_bars + 16 + 8 * (w % 2); };
  ForwardWork* const slots = reinterpret_cast<ForwardWork*>(
      smem_raw + (sQ - smem_addr(smem_raw)) + Cfg::kWorkOffset);
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
      // Every thread arrives after its own read of the slot, so that each read comes before an
      // arrival in its own thread's order. (The first form, lane 0's arrival after a __syncwarp,
      // is ordered by the PTX memory model too, but compute-sanitizer's racecheck reported each
      // other lane's read against the producer's next write of the slot: tile_shapes' small
      // points, where a block takes a third work, 2026-12-05. Lane 0 alone reading it and
      // handing it on by shuffles held the work in registers: the persistent kernel's spills
      // 128 -> 256 bytes.) The __syncwarp stays for ptxas: without it, the same code spilled 232
      // bytes; with it the SASS is the first form's but for the arrival's predicate.
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
      int64_t index = w == 0 ? static_cast<int64_t>(blockIdx.x)
                             : atomicAdd(work_counter, 1) + static_cast<int64_t>(gridDim.x);
      ForwardWork fw = work_at(index);
      while (!fw.work.valid && index < order.blocks()) {
        index = atomicAdd(work_counter, 1) + static_cast<int64_t>(gridDim.x);
        fw = work_at(index);
      }
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
          if constexpr (Cfg::kQByTma) {
            load_rows_tma_or_async<kBM, D, kDataD>(q_tile, q_map, h, seq.q_begin, q_head,
                                                   p.q_row_stride, tile.r0, seq.q_len,
                                                   q_full(item));
          } else {
            load_gmma_tile_async<kBM, D, 128, 1, kDataD>(q_tile, q_head, p.q_row_stride, tile.r0,
                                                         seq.q_len);
            cp_async_arrive(q_full(item));
          }
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
  const uint32_t scratch = sQ + Cfg::kOutOffset + warp * Cfg::kScratchBytes;
  // The current query tile: its first row, its first key tile, and the visibility of keys from
  // this thread's rows warp_row + g + 8 * r.
  int64_t m0 = 0, n_first = 0;
  RowVisibility vis;
  SequenceBounds seq;  // the current work's sequence
  int item = 0, g0 = 0;  // as the producer counts: Q's hand-overs, the item's first K/V tile

  auto release_q = [&] {
    if (lane == 0) mbarrier_arrive(q_empty(item));
  };
  // Turns (kPingPong): consumer c issues its products when named barrier 1 + c lets it, then lets
  // c + 1 (mod the consumers) go. The last consumer lets the first go once before anything, and
  // the first absorbs the last one's final hand-over at the exit, so no arrival is left pending.
  constexpr int kTurnThreads = 256;  // the consumer that waits + the one that lets it go
  if constexpr (Cfg::kPingPong) {
    if (wg == Cfg::kConsumers - 1) named_barrier_arrive(1, kTurnThreads);
  }
  auto begin_turn = [&] {
    if constexpr (Cfg::kPingPong) named_barrier_sync(1 + wg, kTurnThreads);
  };
  auto end_turn = [&] {
    if constexpr (Cfg::kPingPong)
      named_barrier_arrive(1 + (wg + 1) % Cfg::kConsumers, kTurnThreads);
  };
  // Issues S = Q K^T for the block's tile g_all as one wgmma group (after a fence covering o and
  // pf too), reducing over the head dim's kDataD columns. The descriptors are built once per tile
  // and advanced per product (gmma_desc_advance; O += P V's too, in wgmma_rs_mn_major): 784 -> 734
  // instructions in d128's loop. Measured on the H200 (bf16, causal, 16 heads, tile_shapes against
  // the previous library, two rounds, 2026-12-01 19:30 UTC), TFLOP/s gain at 64 x 1k / 16 x 4k / 4
  // x 16k / mixed: d128 +3.1 / +0.8 / +1.7 / +1.6%, d64 +3.5 / +4.2 / +2.6 / +2.6%, d64's three
  // consumers +9.9 / +6.1 / +4.0 / +9.0% (ptxas: their spills 4 -> 0 bytes, with softcap 48 -> 20).
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
          VARPACK_FORWARD_STAMP(kItemStart);
          VARPACK_FORWARD_COUNT(kItems);
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
            VARPACK_FORWARD_STAMP(kTileStart);
            VARPACK_FORWARD_COUNT(kLoopTiles);
            ring.wait_k(g0 + t);
            ring.wait_v(g0 + t - 1);
            VARPACK_FORWARD_STAMP(kTileLoaded);
            begin_turn();
            VARPACK_FORWARD_STAMP(kTileTurn);
            issue_s(g0 + t, s);
            issue_pv(g0 + t - 1);
            end_turn();
            VARPACK_FORWARD_STAMP(kTileIssued);
            wgmma_wait<1>();
            VARPACK_FORWARD_STAMP(kTileScores);
            ring.release_k(g0 + t, lane);
            if (t == n - 1) release_q();
            pin_registers(s);
            softmax(t, s, alpha);
            VARPACK_FORWARD_STAMP(kTileSoftmax);
            wgmma_wait<0>();
            VARPACK_FORWARD_STAMP(kTileProducts);
            ring.release_v(g0 + t - 1, lane);
            rescale_and_pack(s, alpha);
            VARPACK_FORWARD_STAMP(kTileDone);
          }
          ring.wait_v(g0 + n - 1);
          pin_registers(o);
          wgmma_fence();
          issue_pv(g0 + n - 1);
          wgmma_wait<0>();
          pin_registers(o);
          ring.release_v(g0 + n - 1, lane);
          VARPACK_FORWARD_STAMP(kItemEnd);
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
  if constexpr (Cfg::kPingPong) {
    if (wg == 0) named_barrier_sync(1, kTurnThreads);
  }
  if constexpr (Cfg::kTmaOut) RowsOut::drain(lane);
#endif
}

// The current device's multiprocessors (132 on an H100 / H200 SXM, if the query fails).
inline int multiprocessor_count() {
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess)
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}

// How many consecutive heads one block runs its query tile for. A block fills a multiprocessor
// (shared memory), so nothing hides its start (Q and the first K/V tiles) and end (the last
// O += P V, the output) unless the next head's loads overlap the previous head's end. But longer
// blocks can leave a tail: blocks start in order, longest-first only inside a sequence. So k heads
// per block only while the longest block (k x the longest sequence's key tiles) is within an
// eighth of one multiprocessor's share of the work, taken at its least: every sequence as long as
// the average (Cauchy-Schwarz), about half of it under causal masking. Not with a sliding window
// (not measured). Measured on the H200 (bf16, d128, causal, 16 heads), TFLOP/s with 1 / 2 / 4 heads
// per block: with the block-synchronous kernel before this one (standalone benchmark, one call,
// 2026-12-01 06:17 UTC) 64 x 1k 293 / 317 / 325, 16 x 4k 444 / 448 / 464, 4 x 16k 504 / 504 / 504;
// 16 x 4096 at 3 / 25 / 50 / 75 / 90% padding 406 / 409 / 400, 395 / 407 / 385, 368 / 364 / 344,
// 265 / 261 / 225, 138 / 132 / 110. With this kernel (ping-pong; tile_shapes, 10:00 UTC), 1 head,
// 4 heads and the rule's choice: 64 x 1k 337 / 372 / 372 (4), 16 x 4k 557 / 553 / 553 (4), 4 x 16k
// 617 / 606 / 589 (2), mixed lengths 467 / 393 / 466 (1).
// Past 4096 keys per query tile on average a head's start and end are a small part of a block's
// work. Without causal masking the blocks are then all alike and long, so fewer of them only
// round the last wave up: 1 head. Under causal masking a sequence's blocks start heaviest first,
// so the tail is of its light blocks, and the bound is a quarter of a multiprocessor's share; but
// only where the tile shape gains (past_long_keys: HopperForwardTile::kHeadsPastLongKeys).
// Measured on the H200 at 4 x 16k (tile_shapes, TFLOP/s, 1 / 2 / 4 / 8 heads per block, - where
// not run): 2026-12-01 10:00 UTC 617 / 589 / 606 / -, 10:53 UTC 644 / 608 / 578 / - (1 head then
// became the rule past 4096 keys), 11:12 UTC 574 / - / 583 / -; 2026-12-02 two calls 584 / - / 603
// / 603 and 565 / - / 580 / 592, then one call of two rounds (04:08 UTC) 588 / 597 / 601 / 603 and
// 584 / 593 / 601 / 603, and at 2 x 32k 602 / 606 / 612 / 613 and 599 / 609 / 613 / 614. So the
// bound of a quarter (an eighth would pick 2 there), from 2026-12-02.
// sms: the device's multiprocessors. VARPACK_HEADS_PER_BLOCK=k forces the largest divisor of the
// head count up to k (the tests use it: their batches are too small for the rule to pick more
// than one head).
inline int forward_heads_per_block(const AttentionParams& p, int block_m, int block_n, int sms,
                                   bool past_long_keys) {
  if (const char* forced = std::getenv("VARPACK_HEADS_PER_BLOCK")) {
    int k = std::atoi(forced);
    while (k > 1 && p.heads % k != 0) --k;
    return k < 1 ? 1 : k;
  }
  const bool window = p.window_left >= 0 || (!p.causal && p.window_right >= 0);
  if (window || p.batch <= 0) return 1;
  const double q_tiles = static_cast<double>(p.total_q) / block_m;
  const double k_tiles = static_cast<double>(p.total_k) / block_n;
  const double per_query_tile = p.causal ? (k_tiles / p.batch + 1) / 2 : k_tiles / p.batch;
  const bool long_keys = per_query_tile * block_n > 4096;
  if (long_keys && (!p.causal || !past_long_keys)) return 1;
  const double shares = long_keys ? 4.0 : 8.0;  // the longest block within 1 / shares of the share
  const double least_work = q_tiles * per_query_tile * p.heads;
  const double longest = std::ceil(static_cast<double>(p.max_seqlen_k) / block_n);
  for (int k : {4, 2})
    if (p.heads % k == 0 && shares * k * longest <= least_work / sms) return k;
  return 1;
}

enum class ForwardOrder { kAuto, kBySequence, kByChunks };

// The forward's launch order (LaunchOrder). By chunks applies under causal masking without a
// window, where a query tile's work grows with its index, while max_seqlen_q leaves few blocks
// empty (at most a quarter more than by sequence). A chunk holds the sequences whose K and V for a
// block's heads take about 32 MB (L2 is 50 MB): at 4 heads per block 16 sequences of 1k or 4 of
// 4k, which a simulation of the block scheduler put at a 1.8% / 0.1% tail, against 6.8% by
// sequence (bench/cuda/simulate_launch_order.py); by rank over all sequences at once (one chunk)
// was slower on the H200. The library (kAuto) takes chunks where the launch is short, at most 32
// waves of blocks by sequence (a block per multiprocessor), where the tail weighs; longer
// launches keep the by-sequence order, whose blocks running at once share one sequence's K/V.
// Measured on the H200 (bf16, d128, causal, 16 heads, tile_shapes with the variants interleaved,
// 2026-12-01 13:38 UTC), TFLOP/s by sequence -> by chunks, heads per block by
// forward_heads_per_block: 64 x 1k (15.5 waves) 385 -> 410, 16 x 4k (15.5) 555 -> 585, 16 x 4096 at
// 3% padding 529 -> 550, at 25% 491 -> 497; 4 x 16k (62 waves) 611 -> 595, mixed lengths 4096..17
// (over 60 waves) 448 -> 451; d64 64 x 1k 256 -> 275, 16 x 4k 369 -> 393, 4 x 16k 420 -> 422.
// VARPACK_LAUNCH_ORDER=chunks or =sequence forces one where it applies (the tests run both). sms:
// the device's multiprocessors (multiprocessor_count, queried once per launch).
inline LaunchOrder forward_launch_order(const AttentionParams& p, int block_m, int heads_per_block,
                                        ForwardOrder choice, int sms) {
  LaunchOrder order;
  order.batch = p.batch;
  order.slots = slot_count(p.total_q, p.batch, block_m);
  order.head_groups = p.heads / heads_per_block;
  if (choice == ForwardOrder::kAuto) {
    const char* forced = std::getenv("VARPACK_LAUNCH_ORDER");
    if (forced != nullptr && std::strcmp(forced, "chunks") == 0)
      choice = ForwardOrder::kByChunks;
    else if (forced != nullptr && std::strcmp(forced, "sequence") == 0)
      choice = ForwardOrder::kBySequence;
    else
      choice = order.blocks() <= int64_t{32} * sms ? ForwardOrder::kByChunks
                                                    : ForwardOrder::kBySequence;
  }
  const int64_t ranks = (p.max_seqlen_q + block_m - 1) / block_m;
  const bool window = p.window_left >= 0 || (!p.causal && p.window_right >= 0);
  if (choice != ForwardOrder::kByChunks || !p.causal || window || ranks <= 0 || p.batch <= 0 ||
      4 * ranks * p.batch > 5 * order.slots)
    return order;
  order.ranks = static_cast<int>(ranks);
  const int group = p.heads / p.kv_heads;
  const int64_t kv_heads = (heads_per_block + group - 1) / group;
  const int64_t bytes = 2 * p.max_seqlen_k * kv_heads * p.head_dim * 2;  // K and V, 2-byte
  order.chunk = bytes > 0 ? std::max<int64_t>(1, (int64_t{32} << 20) / bytes) : p.batch;
  return order;
}

// The persistent forward's blocks: one per multiprocessor, or at most n with
// VARPACK_FORWARD_BLOCKS=n (n >= 1), so that on a test's small batch every block takes several
// works and reuses both work slots (the sanitizer steps of scripts/gpu_run.sh).
inline int64_t forward_persistent_blocks(int sms) {
  const char* forced = std::getenv("VARPACK_FORWARD_BLOCKS");
  if (forced == nullptr) return sms;
  char* end = nullptr;
  const long n = std::strtol(forced, &end, 10);
  if (end == forced || *end != '\0' || n < 1)
    throw Error(std::string("varpack CUDA attention: VARPACK_FORWARD_BLOCKS=") + forced +
                " is not a number of blocks >= 1; unset it for one block per multiprocessor");
  return std::min<int64_t>(n, sms);
}

// heads_per_block 0: forward_heads_per_block's choice; otherwise a divisor of p.heads.
// work_counter: null, or one int32 of device memory for the persistent kernel (zeroed here).
template <class T, class Cfg>
void launch_hopper_forward_with(const AttentionParams& p, cudaStream_t stream,
                                int heads_per_block = 0,
                                ForwardOrder order_choice = ForwardOrder::kAuto,
                                int* work_counter = nullptr) {
  if (slot_count(p.total_q, p.batch, Cfg::kBlockM) <= 0 || p.heads <= 0) return;
  const int sms = multiprocessor_count();
  if (heads_per_block <= 0)
    heads_per_block =
        forward_heads_per_block(p, Cfg::kBlockM, Cfg::kBlockN, sms, Cfg::kHeadsPastLongKeys);
  if (p.heads % heads_per_block != 0)
    throw Error("varpack CUDA attention: heads_per_block must divide the number of heads");
  const LaunchOrder order =
      forward_launch_order(p, Cfg::kBlockM, heads_per_block, order_choice, sms);
  if (order.blocks() > INT32_MAX)
    throw Error("varpack CUDA attention: too many query tiles x heads for one launch (" +
                std::to_string(order.blocks()) + " blocks of " + std::to_string(Cfg::kBlockM) +
                " queries); split the batch");
  const bool persistent = work_counter != nullptr;
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
  const CUtensorMap q_map =
      Cfg::kQByTma ? head_tile_map(p.q, kBf16, p.total_q, p.heads, Cfg::kDataD, p.q_row_stride,
                                   p.q_head_stride, Cfg::kBlockM)
                   : CUtensorMap{};
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
    grid = std::min<int64_t>(grid, forward_persistent_blocks(sms));
    const cudaError_t zeroed = cudaMemsetAsync(work_counter, 0, sizeof(int), stream);
    if (zeroed != cudaSuccess)
      throw Error(std::string("varpack CUDA attention: cannot zero the work counter: ") +
                  cudaGetErrorString(zeroed));
  }
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
      p, q_map, k_map, v_map, out_map, order, heads_per_block, work_counter);
  check_launch("the Hopper forward kernel");
}

// d64 from 4096 queries: three consumers (192-query tiles, 160 registers each, two stages; ptxas
// spills 4 bytes, 52 with softcap). Measured on the H200 (bf16, causal, 16 heads, tile_shapes with
// the variants interleaved, 2026-12-01 15:04 UTC), TFLOP/s two consumers -> three: 4 x 16k 410 ->
// 471, 16 x 4096 at 3% padding 358 -> 390, 16 x 4k 385 -> 392; but 64 x 1k 274 -> 205, mixed
// lengths 4096..17 283 -> 271 and 16 x 4096 at 25% padding 325 -> 319 (short sequences leave more
// of a 192-query tile empty, and there are fewer blocks). So by the longest sequence: from 4096
// queries (max_seqlen_q; unknown, 0, keeps two), where two of the three batches measured gained
// (until 2026-12-02 over 4096, which left 16 x 4k and 3% padding on two consumers).
struct HopperForwardLongD64
    : HopperForwardTile<64, 3, 128, 2, true, 32, 160, 64, 64, false, false, false, 1, false,
                        true> {};
inline constexpr int64_t kLongD64Queries = 4096;

// Whether the persistent kernel runs a batch, given a work counter (launch_hopper_forward): yes,
// but where VARPACK_FORWARD_PERSISTENT=0 (the tests run both). Measured on the H200 (bf16, causal,
// 16 heads, tile_shapes with the variants interleaved, 2026-12-02 16:18 UTC, two rounds at d128),
// TFLOP/s persistent / a block per work at 64 x 1k / 16 x 4k / 4 x 16k / mixed lengths 4096..17 /
// 16 x 4096 at 3% / 10% / 50% padding: d128 439.9 / 414.4, 548.6 / 536.0, 606.7 / 599.8, 506.6 /
// 464.9, 528.3 / 505.5, 536.2 / 510.5, 499.4 / 447.4 (second round 460.8 / 441.4, 546.5 / 528.7,
// 606.9 / 599.1, 511.5 / 468.1, 537.7 / 518.3, 525.4 / 498.9, 509.2 / 456.2); d96 355.1 / 339.8,
// 451.0 / 445.1, 528.7 / 532.6, 426.8 / 396.0, 460.9 / 445.1, 445.7 / 429.6, 406.4 / 367.3; d64's
// two consumers 305.1 / 288.2, 400.6 / 401.4, 428.9 / 427.7, 327.8 / 300.1, 387.5 / 375.6, 382.9
// / 368.5, 333.3 / 294.8. (Its first form, 15:50 UTC, lost 2-3% on sequences of one length at
// d128: its warps read each work's cu_seqlens themselves on their way into it, and its producer
// spilled in its per-tile loop; a work's bounds now come with it.) With one head per work it lost
// everywhere but at mixed lengths (one Q buffer, 15:36 UTC: 64 x 1k 323.0 against 379.2); with
// fdbb197's kernel (2026-12-02 17:45 UTC, d128, persistent, heads per work by
// forward_heads_per_block's rule / 1 / 2 / 4) 468.3 / 412.1 / 445.6 / 469.0 at 64 x 1k, 556.7 /
// 526.4 / 547.1 / 556.3 at 16 x 4k, 608.6 / 602.3 / 606.1 / 607.9 at 4 x 16k, 515.7 / 517.1 /
// 491.4 / 429.5 at mixed lengths, 526.6 / 502.2 / 524.6 / 514.8 at 10% padding: the rule stays.
// d64's three consumers and d256, the same call, persistent / a block per work: 249.3 / 223.8,
// 416.0 / 398.3, 485.0 / 470.7, 321.0 / 293.5, 414.4 / 395.7 (d64) and 448.9 / 447.1, 632.7 /
// 619.9, 679.0 / 681.4, 562.9 / 541.4, 593.4 / 582.7 (d256).
inline bool forward_persistent() {
  const char* forced = std::getenv("VARPACK_FORWARD_PERSISTENT");
  return forced == nullptr || std::strcmp(forced, "0") != 0;
}

// work_counter: null, or an int32 of device memory that the persistent kernel may use.
template <class T, int D>
void launch_hopper_forward(const AttentionParams& p, cudaStream_t stream,
                           int* work_counter = nullptr) {
  const bool persistent = work_counter != nullptr && forward_persistent();
  if constexpr (D == 64) {
    if (p.max_seqlen_q >= kLongD64Queries)
      return launch_hopper_forward_with<T, HopperForwardLongD64>(
          p, stream, 0, ForwardOrder::kAuto, persistent ? work_counter : nullptr);
  }
  launch_hopper_forward_with<T, HopperForwardConfig<D>>(p, stream, 0, ForwardOrder::kAuto,
                                                        persistent ? work_counter : nullptr);
}

}  // namespace varpack::cuda
