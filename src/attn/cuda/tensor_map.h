// TMA descriptors (CUtensorMap) for the Hopper kernels: a [rows, heads, D] tensor of 2-byte
// elements seen as tiles of (box_rows rows x 64 columns) of one head, landing in shared memory in
// the 128-byte-swizzled layout of a GmmaTile column block (or stored from that layout: the
// forward's output, WarpRowsTmaOut). Built on the host for each call (the pointers change); the
// driver's encoder is looked up through the runtime, so nothing links libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace varpack::cuda {

// Throws varpack::Error when the driver has no encoder or rejects the layout (it needs a 16-byte
// aligned base and strides that are multiples of 16 bytes, which the attention's checks ensure).
CUtensorMap head_tile_map(const void* base, bool bf16, int64_t rows, int heads, int d,
                          int64_t row_stride, int64_t head_stride, int box_rows);

}  // namespace varpack::cuda
