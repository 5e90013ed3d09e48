#include "attn/cuda/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include "varpack/error.h"

namespace varpack::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                             cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || f == nullptr)
      throw Error(
          std::string("varpack CUDA attention: the driver has no cuTensorMapEncodeTiled (") +
          cudaGetErrorString(err) + "); set VARPACK_CUDA_KERNELS=mma to run without TMA");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

CUtensorMap head_tile_map(const void* base, bool bf16, int64_t rows, int heads, int d,
                          int64_t row_stride, int64_t head_stride, int box_rows) {
  CUtensorMap map;
  // Dimensions innermost first: columns, heads, rows; strides (in bytes) of the outer two.
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_stride) * 2,
                                 static_cast<cuuint64_t>(row_stride) * 2};
  // 64 columns = 128 bytes: the widest box that 128-byte swizzling allows.
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult res = encoder()(
      &map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS)
    throw Error("varpack CUDA attention: cuTensorMapEncodeTiled failed (CUresult " +
                std::to_string(static_cast<int>(res)) + ") for a [" + std::to_string(rows) +
                ", " + std::to_string(heads) + ", " + std::to_string(d) +
                "] tensor with row stride " + std::to_string(row_stride) + " and head stride " +
                std::to_string(head_stride));
  return map;
}

}  // namespace varpack::cuda
