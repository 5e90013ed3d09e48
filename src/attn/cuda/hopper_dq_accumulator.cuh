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

// ConvertBlocks (hopper_backward.cuh): a key block's count of "my dQ is in memory", released at
// GPU scope after the block's reductions completed, and the conversion block's acquiring read.
__device__ __forceinline__ void release_add(uint32_t* counter, uint32_t value) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(counter), "r"(value)
               : "memory");
}
__device__ __forceinline__ uint32_t acquire_load(const uint32_t* counter) {
  uint32_t value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// ConvertBlocks' conversion block (all kThreads threads): dq[i, h, :] = scale * accumulator for
// the rows of sequence work.index and kv head work.hk's query heads, once all of the sequence's
// key blocks (ceil(k_len / kKeyBlock)) of that head have counted themselves in `done`. Rows whose
// group no block reached (state untouched) are written as zeros, as dq_convert_tiles_kernel does.
// Each thread keeps kBatch rows' loads in flight (8 floats of a row each, the state word with
// them), so that one multiprocessor moves ~100 KB at a time.
template <class T, int D, int kKeyBlock, int kTileRows, int kThreads, int kSmemBytes>
__device__ __forceinline__ void convert_sequence_dq(const AttentionBackwardParams& p,
                                                    const float* dq_accum,
                                                    const uint32_t* states, uint32_t* done,
                                                    const TicketWork& work, unsigned char* smem) {
  const int64_t b = work.index;
  const int64_t k_len = static_cast<int64_t>(p.cu_seqlens_k[b + 1]) - p.cu_seqlens_k[b];
  const uint32_t key_blocks = static_cast<uint32_t>((k_len + kKeyBlock - 1) / kKeyBlock);
  if (threadIdx.x == 0)
    while (acquire_load(done + b * p.kv_heads + work.hk) < key_blocks) __nanosleep(256);
  __syncthreads();  // thread 0's acquire, for every thread's loads below
  const int64_t q_begin = p.cu_seqlens_q[b];
  const int rows = static_cast<int>(p.cu_seqlens_q[b + 1] - q_begin);
  const int group = p.heads / p.kv_heads;
  constexpr int kParts = D / 8;
  constexpr int kLanes = power_of_two_at_least(kParts);
  constexpr int kStep = kThreads / kLanes;  // rows a pass
  // Each thread keeps kDepth rows' copies in flight through the key blocks' shared memory (its 32
  // bytes of a row and the row's state word a slot), ~kDepth x 12 KB a block at 384 threads.
  constexpr int kSlotBytes = 36;
  constexpr int kDepthFit = (kSmemBytes - 1024) / (kThreads * kSlotBytes);
  constexpr int kDepth = kDepthFit < 16 ? kDepthFit : 16;
  static_assert(kDepth >= 2, "room for two rows in flight a thread");
  const int t = static_cast<int>(threadIdx.x);
  const int part = t % kLanes;
  if (part >= kParts) return;
  float4* data = reinterpret_cast<float4*>(smem);  // [kDepth][kThreads][2]
  uint32_t* words = reinterpret_cast<uint32_t*>(smem + kDepth * kThreads * 32);
  const int64_t row_stride = static_cast<int64_t>(p.heads) * D;  // floats from row to row
  const int r0 = t / kLanes;
  const int n = r0 < rows ? (rows - r0 + kStep - 1) / kStep : 0;  // this thread's rows
  for (int g = 0; g < group; ++g) {
    const int h = work.hk * group + g;
    const float* acc = dq_accum + (q_begin * p.heads + h) * D + part * 8;
    const uint32_t* head_states = states + q_begin * p.heads + h;
    auto issue = [&](int k) {  // row k of this thread's into slot k % kDepth, one commit group
      if (k < n) {
        const int r = r0 + k * kStep;
        const int slot = k % kDepth;
        const int state_row = r / kTileRows * kTileRows + dq_row_group(r % kTileRows);
        const float* src = acc + r * row_stride;
        cp_async_16(smem_addr(data + (slot * kThreads + t) * 2), src, true);
        cp_async_16(smem_addr(data + (slot * kThreads + t) * 2 + 1), src + 4, true);
        cp_async_4(smem_addr(words + slot * kThreads + t),
                   head_states + static_cast<int64_t>(state_row) * p.heads, true);
      }
      cp_async_commit();
    };
    for (int k = 0; k < kDepth; ++k) issue(k);
    for (int k = 0; k < n; ++k) {
      cp_async_wait<kDepth - 1>();
      asm volatile("" ::: "memory");  // the slot's shared-memory reads after the wait
      const int slot = k % kDepth;
      const float4 x = data[(slot * kThreads + t) * 2];
      const float4 y = data[(slot * kThreads + t) * 2 + 1];
      const bool stored = words[slot * kThreads + t] != kDqRowsUntouched;
      const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
      store_dq_part<T>(p, q_begin + r0 + k * kStep, h, part, stored ? x : zero,
                       stored ? y : zero);
      asm volatile("" ::: "memory");  // the slot read before its next copy is issued
      issue(k + kDepth);
    }
    cp_async_wait<0>();
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

}  // namespace varpack::cuda
