// The atomic-dQ mode's fp32 dQ accumulator, shared by the kernels that clear it (delta_kernel), add
// to it (the mma.sync dkdv_kernel, element by element; the Hopper backward, by bulk reductions from
// shared memory) and convert it (dq_convert_kernel).
//
// Layout: [heads][total_q + kDqAccumSlackRows][D] floats, so that the rows of a query tile of one
// head (rows q_begin + m0 .. + kBM) are one contiguous range, which the Hopper backward may add in
// reductions of several rows each. Those may run past the sequence's last row: the tile's rows
// there hold zeros, so the next sequence's rows (or the slack rows after the last one, never read)
// receive + 0. Inside a row the 16-byte chunks are permuted, chunk c stored at c ^ (row % 8): the
// shared-memory copy of a tile has the same layout, and with it the compute threads' stores of
// their accumulator fragments (8 rows x 32 bytes per instruction) fall in distinct banks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "varpack/attention.h"

namespace varpack::cuda {

// Rows after total_q (per head) that a last query tile may cover: the largest query tile.
inline constexpr int kDqAccumSlackRows = 128;

__host__ __device__ inline int64_t dq_accum_rows(const AttentionBackwardParams& p) {
  return p.total_q + kDqAccumSlackRows;
}

inline size_t dq_accum_workspace_bytes(const AttentionBackwardParams& p) {
  return static_cast<size_t>(p.heads) * static_cast<size_t>(dq_accum_rows(p)) *
         static_cast<size_t>(p.head_dim) * sizeof(float);
}

// Row `row` (a query row of the whole batch, as in cu_seqlens_q) of head h.
template <int D>
__device__ __forceinline__ float* dq_accum_row(float* accum, const AttentionBackwardParams& p,
                                               int h, int64_t row) {
  return accum + (h * dq_accum_rows(p) + row) * D;
}
template <int D>
__device__ __forceinline__ const float* dq_accum_row(const float* accum,
                                                     const AttentionBackwardParams& p, int h,
                                                     int64_t row) {
  return accum + (h * dq_accum_rows(p) + row) * D;
}

// Where column `col` of row `row` sits inside the row (D a multiple of 32: whole 8-chunk groups).
__host__ __device__ constexpr int dq_accum_col(int64_t row, int col) {
  return (((col >> 2) ^ static_cast<int>(row & 7)) << 2) | (col & 3);
}

}  // namespace varpack::cuda
