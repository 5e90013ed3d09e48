// The Hopper atomic backward's fp32 dQ accumulator at d128 and d96 (HopperBackwardTile's
// ClaimDqRows), which nothing clears. Clearing it (dQ's size in fp32: 512 MB at 64k tokens x 16
// heads x 128) took half of the Delta pass's time. Instead, for each group of a query tile's rows
// that one reducing warp adds (see dq_row_group), the first block to get there stores its dQ rows
// with bulk copies, and every later block adds to them with bulk reductions once they are in
// memory. A state word per group, in the workspace at the group's first row + its reducing warp
// (rows m0 and m0 + 1 of a tile of at least 33 rows, so two groups never share one), set to
// untouched by the Delta pass, says where it stands. Groups that no block reaches (no key visible
// to their tile) stay untouched, and the conversion writes their dQ as zeros without reading the
// accumulator.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/tile_bounds.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// The states: DqRowsState (instances.h, beside the workspace's layout). With ConvertDq (an
// experiment, tile_shapes, 2026-12-05: HopperBackwardTile) the bits above the two of the state
// count the blocks still to add to the group (kDqRowsAdder each): delta_tiles_kernel sets them to
// key_tiles_walking, each block takes one off once its rows are in memory (take_dq_rows_adder), and
// the block that takes the last converts the group's dQ, so no conversion pass runs.
constexpr uint32_t kDqRowsClaimBits = 3;
constexpr uint32_t kDqRowsAdder = 4;
// The reducing warps of the atomic backward: warp w adds rows r of a tile with r / 32 % 2 == w.
constexpr int kDqReducerWarps = 2;
constexpr VARPACK_HOST_DEVICE int dq_row_group(int row_in_tile) {
  return row_in_tile / 32 % kDqReducerWarps;
}
// The state word of group `group` of the tile whose first row is `tile_row` (a row of the whole
// batch), for q head h.
VARPACK_HOST_DEVICE int64_t dq_state_index(int64_t tile_row, int group, int heads, int h) {
  return (tile_row + group) * heads + h;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The group's state as this lane sees it now, read a tile ahead (the reducing loop) so that the
// round trip to L2 overlaps the previous tile's reductions. A stale value is still good to act on:
// the state only moves forward (untouched, storing, stored). Relaxed, not acquire: ld.acquire.gpu
// compiles to a load and CCTL.IVALL, an invalidation of the multiprocessor's whole L1 (the spilled
// registers of every warp), once a tile. What it orders: the warp's bulk reductions, which this
// value selects and which therefore issue after it returns, act in L2, where the first block's
// copies completed before its st.release (publish_dq_rows).
__device__ __forceinline__ uint32_t peek_dq_rows(const uint32_t* state) {
  uint32_t seen;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(state) : "memory");
  return seen;
}

// Whole warp, once the tile's dQ is in shared memory (`seen`: peek_dq_rows, kDqRowsStored where
// the warp has no rows in the tile): true when this warp claims the group and stores its rows
// (then publish_dq_rows); false once the first block's rows are in memory (or the warp has none),
// after which the warp's bulk reductions may add to them. The claim is made only now, not at the
// peek, so that a group stays "storing" only for its copies' flight and not while its first block
// computes the tile (at head dim 64, where the next key block's block walks the same query tiles
// one tile later, claims at the peek measured 12-14% slower).
// kCounted (ConvertDq): the state also holds the count of adders, which stays as the Delta pass set
// it until the rows are stored, so `seen`'s count is the one to compare and swap against.
template <bool kCounted = false>
__device__ __forceinline__ bool first_to_dq_rows(uint32_t* state, uint32_t seen, int lane) {
  constexpr uint32_t kClaim = kCounted ? kDqRowsClaimBits : ~0u;
  seen = __shfl_sync(0xffffffffu, seen, 0);          // one value for the whole warp
  if ((seen & kClaim) == kDqRowsStored) return false;  // the common case: no more traffic to L2
  if (lane == 0) {
    if ((seen & kClaim) == kDqRowsUntouched)
      asm volatile("atom.relaxed.gpu.global.cas.b32 %0, [%1], %2, %3;\n"
                   : "=r"(seen)
                   : "l"(state), "r"((seen & ~kClaim) | kDqRowsUntouched),
                     "r"((seen & ~kClaim) | kDqRowsStoring)
                   : "memory");
    while ((seen & kClaim) == kDqRowsStoring) {
      __nanosleep(32);
      seen = peek_dq_rows(state);
    }
  }
  return (__shfl_sync(0xffffffffu, seen, 0) & kClaim) == kDqRowsUntouched;
}

// Whole warp, after the first block's bulk copies of the group were committed: waits until they
// are written, then lets the later blocks add.
// kCounted: storing -> stored by an add, which keeps the count.
template <bool kCounted = false>
__device__ __forceinline__ void publish_dq_rows(uint32_t* state, int lane) {
  bulk_wait<0>();
  fence_proxy_async_global();
  __syncwarp();  // every lane's copies, before lane 0's release
  if (lane != 0) return;
  if constexpr (kCounted) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(state),
                 "r"(static_cast<uint32_t>(kDqRowsStored - kDqRowsStoring))
                 : "memory");
  } else {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(state),
                 "r"(static_cast<uint32_t>(kDqRowsStored))
                 : "memory");
  }
}

// ConvertDq, whole warp, once its bulk operations on the group's rows have completed (bulk_wait):
// takes this block off the group's count of adders. Returns the state before, in lane 0 (the
// caller reads it later, so that the round trip to L2 overlaps other work; the block was the last
// adder iff its count was one, last_dq_rows_adder). Release: the last adder's conversion reads
// these rows (it acquires them: convert_dq_rows). Not acq_rel, which compiles to an invalidation of
// the multiprocessor's whole L1 (CCTL.IVALL; peek_dq_rows) at every tile.
__device__ __forceinline__ uint32_t take_dq_rows_adder(uint32_t* state, int lane) {
  fence_proxy_async_global();
  __syncwarp();  // every lane's operations, before lane 0's release
  uint32_t before = 0;
  if (lane == 0)
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;\n"
                 : "=r"(before)
                 : "l"(state), "r"(0u - kDqRowsAdder)
                 : "memory");
  return before;
}

__device__ __forceinline__ bool last_dq_rows_adder(uint32_t before) {
  return __shfl_sync(0xffffffffu, before, 0) / kDqRowsAdder == 1;
}

// ConvertDq, whole warp, for a group's last adder (after last_dq_rows_adder): the group's rows
// [row0, row0 + rows) of head h (rows <= 32), complete in the accumulator, read back by the TMA
// unit (`map`: accumulator_rows_map with 32-row boxes) into shared memory at `staging` (32 rows of
// D floats, unswizzled), and written to dq (rows of `row_stride` elements) scaled by `scale`, in
// the output type. `bar`: an mbarrier of count 1 whose phase of parity `parity` this completes.
// Not inlined: it runs for one tile in several, and inlined, the registers it needs (the producer
// warpgroup has 24) spilled the reducing loop's.
template <class T, int D>
__device__ __noinline__ void convert_dq_rows(const CUtensorMap& map, uint32_t staging, uint32_t bar,
                                             uint32_t parity, int64_t row0, int rows, int h,
                                             T* dq, int64_t row_stride, float scale, int lane) {
  if (lane == 0) {
    // With take_dq_rows_adder's atomic, an acquire of the other adders' rows; then the TMA unit's
    // reads are ordered after it.
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    fence_proxy_async_global();
    mbarrier_expect_tx(bar, 32 * D * 4);
    tma_load_3d(staging, map, 0, h, static_cast<int>(row0), bar);
    mbarrier_arrive(bar);
  }
  mbarrier_wait(bar, parity);
  // RowPass's layout: a row's 8-float parts on kLanes lanes, 32 / kLanes rows a round.
  using Parts = RowPass<D>;
  const int part = lane % Parts::kLanes;
  if (part >= Parts::kParts) return;
  for (int r = lane / Parts::kLanes; r < rows; r += 32 / Parts::kLanes) {
    const uint32_t at = staging + (r * D + part * 8) * 4;
    const uint4 x = ld_shared_v4(at), y = ld_shared_v4(at + 16);
    *reinterpret_cast<uint4*>(dq + (row0 + r) * row_stride + part * 8) = scaled_8<T>(
        scale,
        make_float4(__uint_as_float(x.x), __uint_as_float(x.y), __uint_as_float(x.z),
                    __uint_as_float(x.w)),
        make_float4(__uint_as_float(y.x), __uint_as_float(y.y), __uint_as_float(y.z),
                    __uint_as_float(y.w)));
  }
}
#endif

// dq[i, h, :] = scale * accumulator in the output type for every row of every sequence, by query
// tiles of kTileRows rows (the backward's query step, whose row groups the states follow). Row
// groups still untouched are written as zeros.
// Grid: (slot_count(total_q, batch, kTileRows), heads).
template <class T, int D, int kTileRows>
__global__ void __launch_bounds__(RowPass<D>::kThreads)
    dq_convert_tiles_kernel(const AttentionBackwardParams p, const float* dq_accum,
                            const uint32_t* states, int64_t slots) {
  const TileSlot slot = find_slot<kTileRows, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const int h = static_cast<int>(blockIdx.y);
  const int64_t q_begin = p.cu_seqlens_q[slot.b];
  const int64_t tile_row = q_begin + slot.block * kTileRows;
  const int64_t left = p.cu_seqlens_q[slot.b + 1] - tile_row;
  const int rows = left < kTileRows ? static_cast<int>(left) : kTileRows;
  const int part = RowPass<D>::part();
  if (part >= RowPass<D>::kParts) return;
  for (int r = static_cast<int>(threadIdx.x) / RowPass<D>::kLanes; r < rows;
       r += RowPass<D>::kRows) {
    const int64_t row = tile_row + r;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
    if (states[dq_state_index(tile_row, dq_row_group(r), p.heads, h)] != kDqRowsUntouched) {
      const float4* src =
          reinterpret_cast<const float4*>(dq_accum + (row * p.heads + h) * D + part * 8);
      x = src[0];
      y = src[1];
    }
    store_dq_part<T>(p, row, h, part, x, y);
  }
}

// ConvertDq's Delta pass, by query tiles of kTileRows rows (the backward's query step) over
// kKeyTile-key blocks: Delta for the tile's rows as delta_kernel computes it; each of the tile's
// row groups' state words set to untouched with its count of adders (key_tiles_walking); and where
// no block adds (no key visible to the tile), its dQ written as zeros, since no block converts it.
// Grid: (slot_count(total_q, batch, kTileRows), heads).
template <class T, int D, int kTileRows, int kKeyTile>
__global__ void __launch_bounds__(RowPass<D>::kThreads)
    delta_tiles_kernel(const AttentionBackwardParams p, float* delta, uint32_t* states,
                       int64_t slots) {
  const TileSlot slot = find_slot<kTileRows, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const int h = static_cast<int>(blockIdx.y);
  const SequenceBounds seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b);
  const int64_t m0 = slot.block * kTileRows;
  const int64_t tile_row = seq.q_begin + m0;
  const int64_t left = seq.q_len - m0;
  const int rows = left < kTileRows ? static_cast<int>(left) : kTileRows;
  const int t = static_cast<int>(threadIdx.x);
  // One thread counts (two dependent binary searches), while the others' loads are in flight.
  __shared__ int adders;
  if (t == 0) {
    adders = key_tiles_walking<kKeyTile, kTileRows>(seq, m0, p.causal, p.window_left,
                                                    p.window_right);
    for (int g = 0; g < kDqReducerWarps && g * 32 < rows; ++g)  // the groups with rows
      states[dq_state_index(tile_row, g, p.heads, h)] =
          kDqRowsUntouched + static_cast<uint32_t>(adders) * kDqRowsAdder;
  }
  const int part = RowPass<D>::part();
  static_assert(kTileRows % RowPass<D>::kRows == 0, "whole rounds of rows");
  // Every thread takes every round, so that a row's lanes all reach the shuffles.
  for (int r = t / RowPass<D>::kLanes; r < kTileRows; r += RowPass<D>::kRows) {
    const bool valid = r < rows && part < RowPass<D>::kParts;
    float acc = valid ? dot_dout_out_part<T>(p, tile_row + r, h, part) : 0.f;
#pragma unroll
    for (int off = RowPass<D>::kLanes / 2; off > 0; off /= 2)
      acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (valid && part == 0) delta[h * p.total_q + tile_row + r] = acc;
  }
  __syncthreads();
  if (adders != 0 || part >= RowPass<D>::kParts) return;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int r = t / RowPass<D>::kLanes; r < rows; r += RowPass<D>::kRows)
    store_dq_part<T>(p, tile_row + r, h, part, zero, zero);
}

}  // namespace varpack::cuda
