// Device building blocks shared by the attention kernels: the 16-bit element types, the tensor-core
// instruction (mma.sync m16n8k16, fp32 accumulate), ldmatrix, cp.async with zero fill, and the
// swizzled shared-memory tile layout. Everything here is sm_80+, used by the sm_80 and sm_90a
// builds.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace varpack::cuda {

// One 16-bit input type and its tensor-core instruction.
template <class T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&c)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ __forceinline__ static float2 unpack(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  }
};

template <>
struct Mma<__half> {
  __device__ __forceinline__ static void run(float (&c)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ __forceinline__ static float2 unpack(uint32_t v) {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four 8 x 8 16-bit matrices into shared memory (sm_90): register j of lane l holds row l / 4,
// elements 2 (l % 4) and 2 (l % 4) + 1 of matrix j (ldmatrix's layout); lanes 8j .. 8j + 7 give
// the addresses of matrix j's 16-byte rows.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// 4-byte store to a shared-memory address (32 bits, where a generic pointer would hold 64).
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}
// 16-byte load from a shared-memory address.
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
// 8-byte store of two floats to a shared-memory address.
__device__ __forceinline__ void st_shared_f32x2(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// addr[0] += a, addr[1] += b in global memory as fire-and-forget reductions (no value returned, so
// the warp does not wait for them); one 8-byte vector reduction on sm_90, two 4-byte ones before.
__device__ __forceinline__ void red_add_f32x2(float* addr, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr), "f"(a) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr + 1), "f"(b) : "memory");
#endif
}

// 16-byte global->shared copy that bypasses L1; when `valid` is false the 16 bytes are zero-filled
// and global memory is not touched (rows past a sequence's end).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
// 4-byte variant (per-row fp32 statistics); zero-filled when `valid` is false.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Hardware tanh (sm_75+), max relative error about 2^-11: below the bf16/fp16 rounding of the
// inputs, and a handful of instructions instead of tanhf's long accurate path.
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A tile of ROWS x D 16-bit elements in shared memory, rows of D/8 16-byte chunks. Chunk c of
// row r is stored at chunk c ^ (r & 7): the 8 rows an ldmatrix reads then hit 8 different bank
// groups, so neither the cp.async writes nor the ldmatrix reads conflict.
// The XOR keeps a chunk inside its block of 8, so a row takes a whole number of 128-byte blocks:
// at d96 (12 chunks) chunks 8..11 land anywhere in 8..15 and the row is padded to 256 bytes, as at
// d128. Padding is the simplest layout that stays conflict-free (a packed 192-byte row would need
// a second swizzle for its 32-column tail); it costs d96 a third more shared memory than its data
// (64 KB per forward block, the same as d128), and the padding is never written or read.
template <int D>
struct SwizzledTile {
  static_assert(D % 16 == 0, "rows must hold whole 16-column k-steps");
  static constexpr int kChunks = D / 8;
  static constexpr int kRowBytes = (D + 63) / 64 * 128;
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) * 16));
  }
};

// Per-thread ldmatrix addresses into a SwizzledTile<D> for k-steps kk = 0 .. D/16-1 (chunks
// 2*kk + half) at rows row + 8*rows8. The XOR only touches the low 3 chunk bits and row & 7 is
// fixed per thread, so four base offsets cover every step: the rest is an immediate the compiler
// folds into the instruction, instead of one live register per (row, step) address. For the same
// reason `tile` may be a column offset of a whole number of 64-column blocks into a tile.
template <int D>
struct FragAddress {
  uint32_t base[4];
  __device__ __forceinline__ FragAddress(uint32_t tile, int row, int half) {
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) base[kq] = tile + SwizzledTile<D>::offset(row, 2 * kq + half);
  }
  // kk and rows8 (rows in units of 8) must be compile-time constants after unrolling.
  __device__ __forceinline__ uint32_t at(int kk, int rows8) const {
    return base[kk & 3] +
           static_cast<uint32_t>((kk >> 2) * 128 + rows8 * 8 * SwizzledTile<D>::kRowBytes);
  }
};

// Copies rows [row0, row0 + ROWS) of one head of a [rows, heads, D] tensor into a swizzled tile;
// rows at or past `valid_rows` are zero-filled. All threads of the block take part; where the
// chunks do not divide evenly among them (d96: 16 rows of 12 chunks for 128 threads), the last
// round leaves some threads idle.
template <int ROWS, int D, int THREADS, class T>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const T* base, int64_t row_stride,
                                                int64_t row0, int64_t valid_rows) {
  constexpr int kChunks = D / 8;
  constexpr int kTotal = ROWS * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int idx = it * THREADS + static_cast<int>(threadIdx.x);
    if (kTotal % THREADS != 0 && idx >= kTotal) break;
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool valid = row0 + r < valid_rows;
    const T* src = base + (valid ? (row0 + r) * row_stride : 0) + c * 8;
    cp_async_16(tile + SwizzledTile<D>::offset(r, c), src, valid);
  }
}

}  // namespace varpack::cuda
