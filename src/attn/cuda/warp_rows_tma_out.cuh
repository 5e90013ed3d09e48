// One warp's 16 accumulator rows (the wgmma C layout, as in WarpRowsOut) stored to global memory as
// T through a shared-memory staging area in the layout of a head_tile_map box of 16 rows x 64
// columns (128-byte swizzled), one box per 64 columns. Where all 16 rows belong to the sequence,
// the TMA unit copies the boxes out while the warp goes on (no load, store or address arithmetic
// per chunk in the warp); a sequence's partial last rows go out as WarpRowsOut's do, by 16-byte
// copies of the rows inside it, since a box past the sequence's end would write the next one's rows.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/wgmma.cuh"

namespace varpack::cuda {

// D: the accumulator's columns; DataD: those in memory (a head dim held in a wider tile: 96 in 128;
// the tensor map's extent, so the last box's columns past it are not written).
template <class T, int D, int DataD = D>
struct WarpRowsTmaOut {
  static_assert(DataD <= D && DataD % 8 == 0, "whole 16-byte chunks");
  // The staging area: 16 rows in the 128-byte-swizzled layout that head_tile_map's boxes load into
  // and store from, one 2 KB column block per box (so the accumulator layout's stores, 8 rows x 4
  // column pairs at a time, hit 32 different banks).
  using Staging = GmmaTile<16, D>;
  static constexpr int kBoxes = D / 64;
  static constexpr int kScratchBytes = Staging::kBytes;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row

  // Rows [0, valid) at dst (row_stride elements apart; in `map`, a head_tile_map of 16-row boxes,
  // rows row0 .. row0 + 15 of head `head`) = acc * scale[r] for rows g + 8r. `scratch`:
  // kScratchBytes of shared memory, 1024-byte aligned, that only this warp uses. Lane 0's bulk
  // group may still be reading it on return: drain() before the block exits.
  __device__ __forceinline__ static void store(const float (&acc)[D / 2], const float (&scale)[2],
                                               uint32_t scratch, const CUtensorMap& map, int head,
                                               int row0, T* dst, int64_t row_stride,
                                               int64_t valid, int lane) {
    const int g = lane / 4, qd = lane % 4;
    if (lane == 0) bulk_wait_read<0>();  // the previous store's boxes have left the scratch
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int n = 0; n < kChunks; ++n)
        st_shared_b32(scratch + Staging::offset(g + 8 * r, n) + 4 * qd,
                      Mma<T>::pack(acc[4 * n + 2 * r] * scale[r], acc[4 * n + 2 * r + 1] * scale[r]));
    // The stores above, before the TMA unit reads them; on both paths, since with the fence and the
    // barrier inside the branch ptxas took the forward's wgmma descriptors out of uniform
    // registers (scripts/sass_loop.py, d128: the loop's 736 instructions became 767, 32 of them
    // R2UR; -1 to -6% on the H200, 2026-12-02).
    fence_proxy_async();
    __syncwarp();
    if (valid >= 16) {
      if (lane == 0) {
#pragma unroll
        for (int c = 0; c < kBoxes; ++c)
          tma_store_3d(map, c * 64, head, row0, scratch + c * Staging::kBlockBytes);
        bulk_commit();
      }
      return;
    }
    // Not unrolled, as in WarpRowsOut (unrolled, the addresses stay live across the main loop).
#pragma unroll 1
    for (int c = lane; c < 16 * kChunks; c += 32) {
      const int row = c / kChunks, chunk = c % kChunks;
      if (row < valid && (DataD == D || chunk * 8 < DataD))
        *reinterpret_cast<uint4*>(dst + row * row_stride + chunk * 8) =
            ld_shared_v4(scratch + Staging::offset(row, chunk));
    }
    // The next store's __syncwarp orders these reads before its writes.
  }

  // The last boxes have been read out of shared memory (before the block exits and frees it).
  __device__ __forceinline__ static void drain(int lane) {
    if (lane == 0) bulk_wait_read<0>();
  }
};

}  // namespace varpack::cuda
