// Hopper (sm_90a) building blocks: warpgroup matrix products (wgmma) with shared-memory operand
// descriptors, the 128-byte-swizzled tile layout they read, and the fences that order them. Only
// the Hopper kernels include this, and their bodies compile only under __CUDA_ARCH_FEAT_SM90_ALL
// (the sm_90a target); the sm_80 build of the same files leaves them empty and the host never
// picks them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attn/cuda/kernel_common.cuh"

namespace varpack::cuda {

// A tile of ROWS x D 16-bit elements as wgmma reads it with 128-byte swizzling: D / 64 column
// blocks, each ROWS rows of 128 bytes (64 elements); 16-byte chunk c of row r of a block sits at
// chunk c ^ (r & 7), which is what the hardware's swizzle computes from the address bits when the
// block starts on a 1024-byte boundary. A K-major operand (rows = M or N, columns = the reduction
// dimension) and an MN-major one (rows = the reduction dimension) use the same bytes.
template <int ROWS, int D>
struct GmmaTile {
  static_assert(D % 64 == 0 && ROWS % 8 == 0, "whole 64-column blocks of whole 8-row groups");
  static constexpr int kBlockBytes = ROWS * 128;
  static constexpr int kBytes = ROWS * D * 2;
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>((chunk >> 3) * kBlockBytes + row * 128 +
                                 (((chunk & 7) ^ (row & 7)) << 4));
  }
};

// Copies rows [row0, row0 + ROWS) of one head of a [rows, heads, DATA_COLS] tensor into a
// GmmaTile of D columns; rows at or past `valid_rows`, and columns at or past DATA_COLS (a head
// dim that is not a multiple of 64, held in a tile of whole 64-column blocks), are zero-filled.
// Threads 0 .. THREADS - 1 of the block take part. UNROLL = 1 keeps the loop rolled, for a producer
// warp with few registers.
template <int ROWS, int D, int THREADS, int UNROLL = (ROWS * D / 8 + THREADS - 1) / THREADS,
          int DATA_COLS = D, class T>
__device__ __forceinline__ void load_gmma_tile_async(uint32_t tile, const T* base,
                                                     int64_t row_stride, int64_t row0,
                                                     int64_t valid_rows) {
  constexpr int kChunks = D / 8;
  constexpr int kTotal = ROWS * kChunks;
#pragma unroll UNROLL
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int idx = it * THREADS + static_cast<int>(threadIdx.x);
    if (kTotal % THREADS != 0 && idx >= kTotal) break;  // 3 warpgroups: the last round is partial
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool valid = row0 + r < valid_rows && (DATA_COLS == D || c * 8 < DATA_COLS);
    const T* src = base + (valid ? (row0 + r) * row_stride : 0) + c * 8;
    cp_async_16(tile + GmmaTile<ROWS, D>::offset(r, c), src, valid);
  }
}

// Shared-memory matrix descriptor with 128-byte swizzling. For a K-major operand, `stride` is the
// distance between 8-row groups (1024 for a GmmaTile) and `leading` is unused; for an MN-major one,
// `leading` is the distance between 64-element column blocks along M or N (a GmmaTile's
// kBlockBytes) and `stride` the distance between 8-row groups along the reduction dimension (1024).
__host__ __device__ constexpr uint64_t gmma_desc(uint32_t addr, uint32_t leading, uint32_t stride) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(leading >> 4) << 16) | (static_cast<uint64_t>(stride >> 4) << 32) |
         (1ull << 62);
}

// desc with its start address moved by `bytes` (a multiple of 16). Only the low word changes: the
// address field (bits 0-13, the address / 16) stays below 2^14 for any shared-memory address, so
// the add never carries into the leading offset above it. One 32-bit add per product instead of
// rebuilding the whole descriptor (mask, shift, or, and the constant upper word) from an address.
__host__ __device__ constexpr uint64_t gmma_desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}
// It agrees with rebuilding the descriptor: up to the top of shared memory (227 KB), across the
// address field's bits, with and without a leading offset.
static_assert(gmma_desc_advance(gmma_desc(0x38c00, 2048, 1024), 0x3f0) ==
              gmma_desc(0x38ff0, 2048, 1024));
static_assert(gmma_desc_advance(gmma_desc(0xfff0, 0, 1024), 0x10) == gmma_desc(0x10000, 0, 1024));
static_assert(gmma_desc_advance(gmma_desc(0x1230, 16384, 1024), 0x26dd0) ==
              gmma_desc(0x28000, 16384, 1024));

// A shared-memory operand of the products (128-byte swizzle, 8-row groups 1024 bytes apart): its
// descriptor `offset` bytes in. kAdvance: the descriptor is built once and advanced by a 32-bit add
// per use (gmma_desc_advance); otherwise it is rebuilt from the address at every use, holding only
// the address (for kernels short of registers).
template <bool kAdvance>
struct GmmaOperand {
  uint32_t addr, leading;
  uint64_t desc;
  __device__ __forceinline__ GmmaOperand(uint32_t address, uint32_t leading_bytes)
      : addr(address), leading(leading_bytes),
        desc(kAdvance ? gmma_desc(address, leading_bytes, 1024) : 0) {}
  __device__ __forceinline__ uint64_t at(uint32_t offset) const {
    if constexpr (kAdvance) return gmma_desc_advance(desc, offset);
    else return gmma_desc(addr + offset, leading, 1024);
  }
};

// x as the compiler can see it is equal across the warp (lane 0's), so that values derived from it
// (shared-memory descriptors) live in uniform registers instead of each thread's.
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// Orders this warpgroup's register writes before the wgmma that reads them (accumulators, A).
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's ordinary shared-memory writes (stores, completed cp.async) visible to the
// async proxy that wgmma reads through; a barrier after it publishes them to the other threads.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Named barriers (0 is __syncthreads'): sync waits until `threads` threads have arrived or synced
// at barrier `id`; arrive counts this thread without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across the asynchronous wgmma window.
template <int N>
__device__ __forceinline__ void pin_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x N] (+)= A[64 x 16] B[16 x N] for one warpgroup, fp32 accumulators in the m16n8 layout of
// each warp's 16 rows (d[4i .. 4i+3] = columns 8i + 2 * (lane % 4) + {0, 1} of rows lane / 4 and
// lane / 4 + 8). ss: A and B from descriptors, each transposed (MN-major) when its flag is 1.
// rs: A from registers in the mma.sync m16n8k16 A-fragment layout of each warp's 16 rows.
// accumulate = 0 overwrites D.
template <class T, int N>
struct Wgmma;

#define VARPACK_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define VARPACK_F16(i) VARPACK_F4(i), VARPACK_F4(i + 4), VARPACK_F4(i + 8), VARPACK_F4(i + 12)
#define VARPACK_F32(i) VARPACK_F16(i), VARPACK_F16(i + 16)
#define VARPACK_F48(i) VARPACK_F32(i), VARPACK_F16(i + 32)
#define VARPACK_F64(i) VARPACK_F32(i), VARPACK_F32(i + 32)
#define VARPACK_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define VARPACK_D32                                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define VARPACK_D48                                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define VARPACK_D64                                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

// SS_ARGS / RS_ARGS: the operand numbers after the R accumulators (a, b, accumulate, flags).
#define VARPACK_DEFINE_WGMMA(CTYPE, PTXTYPE, N, R, DREGS, DOPS, SS_P, SS_ARGS, RS_P, RS_ARGS)   \
  template <>                                                                                  \
  struct Wgmma<CTYPE, N> {                                                                     \
    template <int kTransA, int kTransB>                                                        \
    __device__ __forceinline__ static void ss(float (&d)[R], uint64_t a, uint64_t b,           \
                                              int accumulate) {                                \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SS_P ", 0;\n"                           \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32" PTXTYPE PTXTYPE " " DREGS  \
                   ", " SS_ARGS ";\n}\n"                                                       \
                   : DOPS                                                                      \
                   : "l"(a), "l"(b), "r"(accumulate), "n"(kTransA), "n"(kTransB));             \
    }                                                                                          \
    template <int kTransB>                                                                     \
    __device__ __forceinline__ static void rs(float (&d)[R], const uint32_t (&a)[4], uint64_t b, \
                                              int accumulate) {                                \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RS_P ", 0;\n"                           \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32" PTXTYPE PTXTYPE " " DREGS  \
                   ", " RS_ARGS ";\n}\n"                                                       \
                   : DOPS                                                                      \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate),      \
                     "n"(kTransB));                                                            \
    }                                                                                          \
  };

#define VARPACK_DEFINE_WGMMA_TYPE(CTYPE, PTXTYPE)                                   \
  VARPACK_DEFINE_WGMMA(CTYPE, PTXTYPE, 32, 16, VARPACK_D16, VARPACK_F16(0), "%18",  \
                       "%16, %17, p, 1, 1, %19, %20", "%21",                        \
                       "{%16, %17, %18, %19}, %20, p, 1, 1, %22")                   \
  VARPACK_DEFINE_WGMMA(CTYPE, PTXTYPE, 64, 32, VARPACK_D32, VARPACK_F32(0), "%34",  \
                       "%32, %33, p, 1, 1, %35, %36", "%37",                        \
                       "{%32, %33, %34, %35}, %36, p, 1, 1, %38")                   \
  VARPACK_DEFINE_WGMMA(CTYPE, PTXTYPE, 96, 48, VARPACK_D48, VARPACK_F48(0), "%50",  \
                       "%48, %49, p, 1, 1, %51, %52", "%53",                        \
                       "{%48, %49, %50, %51}, %52, p, 1, 1, %54")                   \
  VARPACK_DEFINE_WGMMA(CTYPE, PTXTYPE, 128, 64, VARPACK_D64, VARPACK_F64(0), "%66", \
                       "%64, %65, p, 1, 1, %67, %68", "%69",                        \
                       "{%64, %65, %66, %67}, %68, p, 1, 1, %70")

VARPACK_DEFINE_WGMMA_TYPE(__nv_bfloat16, ".bf16")
VARPACK_DEFINE_WGMMA_TYPE(__half, ".f16")

#undef VARPACK_DEFINE_WGMMA_TYPE
#undef VARPACK_DEFINE_WGMMA
#undef VARPACK_D64
#undef VARPACK_D48
#undef VARPACK_D32
#undef VARPACK_D16
#undef VARPACK_F64
#undef VARPACK_F48
#undef VARPACK_F32
#undef VARPACK_F16
#undef VARPACK_F4

// acc[:, 0 .. kCols) += A B for one warpgroup, issued (not committed): A from registers, one
// fragment per k-step of 16 rows of B; B MN-major in a GmmaTile at `tile` whose rows are the
// reduction dimension (V in O += P V, K in dQ += dS K). Above 128 columns, one product per 128
// (the widest the instructions here are built for). acc may hold more columns than kCols (a head
// dim held in a wider tile): those are left alone.
// kAdvance: B's descriptors as in GmmaOperand.
template <class T, int kCols, class Tile, bool kAdvance = true, int kSteps, int N>
__device__ __forceinline__ void wgmma_rs_mn_major(float (&acc)[N], const uint32_t (&a)[kSteps][4],
                                                  uint32_t tile) {
  constexpr int kPart = kCols < 128 ? kCols : 128;
  static_assert(kCols % kPart == 0 && N >= kCols / 2, "whole products inside the accumulator");
  const GmmaOperand<kAdvance> b(tile, Tile::kBlockBytes);
#pragma unroll
  for (int part = 0; part < kCols / kPart; ++part) {
    float(&acc_part)[kPart / 2] = *reinterpret_cast<float(*)[kPart / 2]>(&acc[part * kPart / 2]);
    // Columns [part * kPart, ...) start kPart / 64 column blocks in.
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
      Wgmma<T, kPart>::template rs<1>(
          acc_part, a[kk], b.at(part * (kPart / 64) * Tile::kBlockBytes + kk * 16 * 128), 1);
  }
}

}  // namespace varpack::cuda
