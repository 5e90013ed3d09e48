// The log-sum-exp merge of a partial attention result into a running one (PartialMerge in
// varpack/attention_cuda.h), in one pass: the ring of context parallelism merges one part per K/V
// block, and as separate elementwise ops that pass moved about 5x the bytes of this one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "varpack/attention_cuda.h"
#include "varpack/error.h"

namespace varpack {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__device__ float4 load4(const T* p);

template <>
__device__ float4 load4<float>(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

template <>
__device__ float4 load4<__nv_bfloat16>(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

template <>
__device__ float4 load4<__half>(const __half* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// One warp per (row, head): every lane reads the two lse values before lane 0 writes the new one,
// so no other thread ever reads a half-updated pair.
template <typename T>
__global__ void merge_partial_kernel(const PartialMerge m) {
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (pair >= m.rows * m.heads) return;
  const int64_t row = pair / m.heads;
  const int head = static_cast<int>(pair - row * m.heads);
  float* const lse_at = m.lse + head * m.lse_head_stride + row;
  const float old_lse = *lse_at;
  const float part_lse = m.l[head * m.rows + row];
  if (isinf(part_lse)) return;  // the part saw no key of this row: nothing changes
  const float top = fmaxf(old_lse, part_lse);
  const float merged = old_lse == -INFINITY ? part_lse : top + log1pf(expf(fminf(old_lse, part_lse) - top));
  const float w_old = old_lse == -INFINITY ? 0.0f : expf(old_lse - merged);
  const float w_new = expf(part_lse - merged);
  float* const out = m.out + row * m.out_row_stride + static_cast<int64_t>(head) * m.head_dim;
  const T* const o = static_cast<const T*>(m.o) + (row * m.heads + head) * m.head_dim;
  for (int c = lane * 4; c < m.head_dim; c += 32 * 4) {
    const float4 p = load4(o + c);
    float4 r = make_float4(p.x * w_new, p.y * w_new, p.z * w_new, p.w * w_new);
    if (w_old != 0.0f) {  // unread when nothing was merged yet: the accumulator may hold anything
      const float4 a = load4(out + c);
      r = make_float4(a.x * w_old + r.x, a.y * w_old + r.y, a.z * w_old + r.z, a.w * w_old + r.w);
    }
    *reinterpret_cast<float4*>(out + c) = r;
  }
  __syncwarp();
  if (lane == 0) *lse_at = merged;
}

}  // namespace

void merge_partial_cuda(const PartialMerge& m, cudaStream_t stream) {
  const bool aligned = m.head_dim % 4 == 0 && m.out_row_stride % 4 == 0 &&
                       reinterpret_cast<uintptr_t>(m.out) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(m.o) % (m.dtype == DType::f32 ? 16 : 8) == 0;
  if (!aligned)
    throw Error("merge_partial_cuda: head_dim (" + std::to_string(m.head_dim) + ") and out's row stride (" +
                std::to_string(m.out_row_stride) + ") must be multiples of 4 and out and o vector-aligned");
  const int64_t pairs = m.rows * m.heads;
  if (pairs == 0 || m.head_dim == 0) return;
  const dim3 grid(static_cast<unsigned>((pairs + kWarpsPerBlock - 1) / kWarpsPerBlock));
  switch (m.dtype) {
    case DType::bf16: merge_partial_kernel<__nv_bfloat16><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(m); break;
    case DType::f16: merge_partial_kernel<__half><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(m); break;
    case DType::f32: merge_partial_kernel<float><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(m); break;
    default: throw Error("merge_partial_cuda: o must be bf16, f16 or f32");
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: launching the partial merge failed: ") +
                cudaGetErrorString(err));
}

}  // namespace varpack
