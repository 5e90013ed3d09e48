// One warp's 16 accumulator rows (the wgmma and mma.sync C layout: lane (g = lane / 4,
// qd = lane % 4) holds columns 8n + 2qd and 8n + 2qd + 1 of rows g and g + 8 in acc[4n + 2r] and
// acc[4n + 2r + 1], r = 0, 1) stored to global memory as T, through shared memory. Stored straight
// from registers, each instruction writes 4 bytes per thread and row, half of a 32-byte sector;
// through the scratch, each writes 16-byte chunks, two whole rows of D = 128 (measured on the
// H200 in the Hopper forward: 5-7% faster at 1k-4k sequences, 2026-12-01).
#pragma once

#include <cstdint>

#include "attn/cuda/kernel_common.cuh"

namespace varpack::cuda {

// kCols: the columns staged at a time (a divisor of D): the scratch holds 16 rows of kCols, and
// the rows go out in D / kCols passes (for room in the Hopper forward at head dim 256). Only the
// first kDataCols columns are stored (a head dim held in a wider tile: 96 in 128).
template <class T, int D, int kCols = D, int kDataCols = D>
struct WarpRowsOut {
  static_assert(D % kCols == 0 && kCols % 8 == 0, "whole passes of whole 16-byte chunks");
  // Rows padded by 16 bytes, so that the accumulator layout's stores (8 rows x 4 column pairs at
  // a time) hit 32 different banks.
  static constexpr int kRowBytes = kCols * 2 + 16;
  static constexpr int kScratchBytes = 16 * kRowBytes;

  // dst rows [0, valid) (row_stride elements apart) = acc * scale[r] for rows g + 8r; `scratch`:
  // kScratchBytes of shared memory that only this warp uses meanwhile.
  __device__ __forceinline__ static void store(const float (&acc)[D / 2], const float (&scale)[2],
                                               uint32_t scratch, T* dst, int64_t row_stride,
                                               int64_t valid, int lane) {
    const int g = lane / 4, qd = lane % 4;
#pragma unroll
    for (int pass = 0; pass < D / kCols; ++pass) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t row = scratch + (g + 8 * r) * kRowBytes + 4 * qd;
#pragma unroll
        for (int n = 0; n < kCols / 8; ++n) {
          const int a = 4 * (pass * kCols / 8 + n) + 2 * r;
          st_shared_b32(row + n * 16, Mma<T>::pack(acc[a] * scale[r], acc[a + 1] * scale[r]));
        }
      }
      __syncwarp();
      constexpr int kChunks = kCols / 8;  // 16-byte chunks per staged row
      // Not unrolled: unrolled, ptxas keeps the addresses live across the kernels' main loops and
      // spills there.
#pragma unroll 1
      for (int c = lane; c < 16 * kChunks; c += 32) {
        const int row = c / kChunks, chunk = c % kChunks;
        if (row < valid && (kDataCols == D || pass * kCols + chunk * 8 < kDataCols))
          *reinterpret_cast<uint4*>(dst + row * row_stride + pass * kCols + chunk * 8) =
              ld_shared_v4(scratch + row * kRowBytes + chunk * 16);
      }
      __syncwarp();  // the scratch may be written again
    }
  }
};

}  // namespace varpack::cuda
