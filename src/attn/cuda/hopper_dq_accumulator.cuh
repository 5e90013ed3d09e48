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

// The states: DqRowsState (instances.h, beside the workspace's layout).
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
__device__ __forceinline__ bool first_to_dq_rows(uint32_t* state, uint32_t seen, int lane) {
  seen = __shfl_sync(0xffffffffu, seen, 0);  // one value for the whole warp
  if (seen == kDqRowsStored) return false;   // the common case: no more traffic to L2
  if (lane == 0) {
    if (seen == kDqRowsUntouched)
      asm volatile("atom.relaxed.gpu.global.cas.b32 %0, [%1], %2, %3;\n"
                   : "=r"(seen)
                   : "l"(state), "r"(static_cast<uint32_t>(kDqRowsUntouched)),
                     "r"(static_cast<uint32_t>(kDqRowsStoring))
                   : "memory");
    while (seen == kDqRowsStoring) {
      __nanosleep(32);
      seen = peek_dq_rows(state);
    }
  }
  return __shfl_sync(0xffffffffu, seen, 0) == kDqRowsUntouched;
}

// Whole warp, after the first block's bulk copies of the group were committed: waits until they
// are written, then lets the later blocks add.
__device__ __forceinline__ void publish_dq_rows(uint32_t* state, int lane) {
  bulk_wait<0>();
  fence_proxy_async_global();
  __syncwarp();  // every lane's copies, before lane 0's release
  if (lane == 0)
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(state),
                 "r"(static_cast<uint32_t>(kDqRowsStored))
                 : "memory");
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

}  // namespace varpack::cuda
