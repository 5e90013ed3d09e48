// One warp's 16 accumulator rows (the wgmma C layout, as in warp_rows_out.cuh) stored to global
// memory as T by the TMA unit: the warp writes them into shared memory in the 128-byte-swizzled
// layout of a (16 rows x 64 columns) box per 64 columns, and one lane hands each box to the copy
// engine, which writes it out while the warp goes on. The stores are 16-byte sectors' worth of
// whole rows, and the warp issues two instructions per box instead of a loop of shared-memory
// loads and global stores with their 64-bit addresses (about a tenth of the Hopper forward's
// consumer stall samples at 64 x 1k, ncu 2026-12-01). A box may only cover rows of its own
// sequence (TMA clips at the tensor's end, not at a sequence's), so a warp whose 16 rows run past
// its sequence's end copies the valid rows itself from the same layout.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/wgmma.cuh"

namespace varpack::cuda {

// The rows [row0, row0 + 16) of head `head` of the tensor behind `map` (a head_tile_map with 16
// rows per box) = the box at `src` (shared memory, written by the generic proxy and fenced).
__device__ __forceinline__ void tma_store_3d(const CUtensorMap& map, uint32_t src, int c0, int c1,
                                             int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
      ::"l"(reinterpret_cast<uint64_t>(&map)), "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// kCols: the columns staged at a time (whole 64-column boxes; fewer than D where shared memory is
// short, then the passes wait for the previous one's box to be read). Only the first kDataCols
// columns reach global memory (the map's width clips the boxes; the copy loop skips the rest).
template <class T, int D, int kCols = D, int kDataCols = D>
struct WarpRowsTmaOut {
  static_assert(D % kCols == 0 && kCols % 64 == 0, "whole 64-column boxes");
  static constexpr int kBoxBytes = 16 * 128;
  static constexpr int kScratchBytes = kCols / 64 * kBoxBytes;  // 1024-byte aligned per warp

  // The box's 16-byte chunk `chunk` (0-7) of row `row`: the 128-byte swizzle XORs the chunk index
  // with the row's index inside its 1024-byte group (the box starts 1024-byte aligned).
  __device__ __forceinline__ static uint32_t chunk_addr(uint32_t box, int row, int chunk) {
    return box + row * 128 + ((chunk ^ (row % 8)) * 16);
  }

  // Rows [0, valid) of the warp's 16 (head `head`, first row `row0` of the tensor behind `map`;
  // dst = that row in global memory, row_stride elements apart) = acc * scale[r] for rows g + 8r.
  // `scratch`: kScratchBytes of shared memory, 1024-byte aligned, that only this warp uses; before
  // it is written again, lane 0 waits until the copy engine has read the previous boxes (the
  // caller's lane 0 must also call drain() before the block exits).
  __device__ __forceinline__ static void store(const float (&acc)[D / 2], const float (&scale)[2],
                                               uint32_t scratch, const CUtensorMap& map,
                                               int head, int64_t row0, T* dst, int64_t row_stride,
                                               int64_t valid, int lane) {
    const int g = lane / 4, qd = lane % 4;
    const bool whole = valid >= 16;
#pragma unroll
    for (int pass = 0; pass < D / kCols; ++pass) {
      if (lane == 0) bulk_wait_read<0>();
      __syncwarp();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = g + 8 * r;
#pragma unroll
        for (int n = 0; n < kCols / 8; ++n) {
          const int a = 4 * (pass * kCols / 8 + n) + 2 * r;
          st_shared_b32(chunk_addr(scratch + (n / 8) * kBoxBytes, row, n % 8) + 4 * qd,
                        Mma<T>::pack(acc[a] * scale[r], acc[a + 1] * scale[r]));
        }
      }
      if (whole) {
        fence_proxy_async();  // the generic-proxy writes, before the copy engine reads them
        __syncwarp();
        if (lane == 0) {
#pragma unroll
          for (int b = 0; b < kCols / 64; ++b)
            if (pass * kCols + b * 64 < kDataCols)
              tma_store_3d(map, scratch + b * kBoxBytes, pass * kCols + b * 64, head,
                           static_cast<int>(row0));
          bulk_commit();
        }
      } else {
        __syncwarp();
        constexpr int kChunks = kCols / 8;  // 16-byte chunks per staged row
#pragma unroll 1
        for (int c = lane; c < 16 * kChunks; c += 32) {
          const int row = c / kChunks, chunk = c % kChunks;
          if (row < valid && pass * kCols + chunk * 8 < kDataCols)
            *reinterpret_cast<uint4*>(dst + row * row_stride + pass * kCols + chunk * 8) =
                ld_shared_v4(chunk_addr(scratch + (chunk / 8) * kBoxBytes, row, chunk % 8));
        }
        __syncwarp();  // the scratch may be written again
      }
    }
  }

  // Lane 0: waits until the copy engine has read every box (shared memory must outlive the reads).
  __device__ __forceinline__ static void drain(int lane) {
    if (lane == 0) bulk_wait_read<0>();
  }
};

}  // namespace varpack::cuda
