// Varlen attention backward on mma.sync tensor cores, sm_80+. Two modes, chosen by
// AttentionBackwardParams::deterministic:
//  deterministic (three launches, no atomics, bit-identical run to run):
//   1. delta_kernel:  Delta[h, i] = sum_d dO[i, h, d] * O[i, h, d] (fp32, into the workspace).
//   2. dkdv_kernel:   one block per (kv head, key tile); each warp owns 16 keys and walks every
//                     query tile of every q head of its group that can see them, recomputing
//                     P^T = exp(S^T - lse) and accumulating dV += P^T dO and dK += dS^T Q in
//                     registers.
//   3. dq_kernel:     one block per (q head, query tile); each warp owns 16 queries and walks the
//                     key tiles they can see, accumulating dQ += dS K in registers.
//   The price is recomputing S and dP in the dQ pass (7 matrix products per tile pair instead
//   of 5).
//  non-deterministic (FlashAttention-2's default): delta_kernel, then dkdv_kernel<kAtomicDq = true>
//   also stages each tile's dS in shared memory and adds dQ += dS K for its keys into an fp32
//   workspace with atomics (5 products per tile pair), then dq_convert_kernel scales dQ and rounds
//   it to the output type. The order of the fp32 additions varies run to run, so dQ may differ in
//   its last bits; dK and dV are still accumulated in registers and are bit-identical run to run.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/instances.h"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/tile_bounds.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// dK/dV pass: kWarps warps, kColSplit of them per 16 keys (kKeysPerBlock keys per block), query
// tiles of kQueryStep. The warps that share keys each compute their S^T and dP^T in full and their
// own kDkdvCols columns of dK and dV. Why: with ColSplit = 1 a thread holds dK and dV for 16 keys x
// D columns / 32 lanes, D fp32 accumulators in all, more than its 255 registers at d256. The split
// computes S^T and dP^T once per sharing warp (d256, split 2: 6 products' work per tile pair
// instead of 4); FlashAttention-2's way, P and dS shared through shared memory, would need another
// layout of the whole pass.
template <int D, int Warps, int QueryStep, int ColSplit = 1>
struct DkdvTile {
  static constexpr int kD = D;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kColSplit = ColSplit;
  static constexpr int kKeysPerBlock = Warps / ColSplit * 16;
  static constexpr int kDkdvCols = D / ColSplit;
  static constexpr int kQueryStep = QueryStep;
  static constexpr int kKeyTileBytes = kKeysPerBlock * SwizzledTile<D>::kRowBytes;
  static constexpr int kQueryTileBytes = kQueryStep * SwizzledTile<D>::kRowBytes;
  static constexpr int kSmemBytes =
      2 * kKeyTileBytes + 4 * kQueryTileBytes + 4 * kQueryStep * 4;  // K, V, Q x2, dO x2, stats
  // The atomic-dQ mode adds dS^T, [keys][queries] with rows padded by 8 elements (16 bytes): the 8
  // rows an ldmatrix reads then start 80 bytes apart and fall in 8 different bank groups.
  static constexpr int kDsStride = kQueryStep + 8;
  static constexpr int kSmemBytesAtomic = kSmemBytes + kKeysPerBlock * kDsStride * 2;
  // In the dQ product the warps split dQ's kQueryStep x D tile into kDqRowGroups groups of query
  // rows times kWarps / kDqRowGroups groups of kDqCols columns. Columns go in whole 16-column
  // steps (one ldmatrix.x4 of K), so where D / kWarps is not a number of steps (d96: 24) the
  // warps split the rows in two as well (d96: 2 x 48 columns).
  static constexpr int kDqRowGroups = (D / Warps) % 16 == 0 ? 1 : 2;
  static constexpr int kDqCols = D / (Warps / kDqRowGroups);
  static_assert(Warps % ColSplit == 0 && (ColSplit == 1 || kDkdvCols % 64 == 0),
                "split columns start on a 64-column block of the swizzled tiles");
  static_assert(Warps % kDqRowGroups == 0 && (QueryStep / 16) % kDqRowGroups == 0 &&
                    kDqCols % 16 == 0,
                "the dQ product's warp grid must cover the tile in whole 16 x 16 steps");
};

// dQ pass: kWarps warps x 16 queries per block, key tiles of kKeyStep. With QdoInRegisters the
// Q and dO fragments of a warp's 16 queries stay in registers (D / 2 of them per thread); without,
// they are re-read from shared memory every key step, where they would not fit beside dQ (d256).
template <int D, int Warps, int KeyStep, bool QdoInRegisters = true>
struct DqTile {
  static constexpr int kD = D;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kQueriesPerBlock = Warps * 16;
  static constexpr int kKeyStep = KeyStep;
  static constexpr bool kQdoInRegisters = QdoInRegisters;
  static constexpr int kQBlockBytes = kQueriesPerBlock * SwizzledTile<D>::kRowBytes;
  static constexpr int kKeyStepBytes = kKeyStep * SwizzledTile<D>::kRowBytes;
  static constexpr int kSmemBytes = 2 * kQBlockBytes + 4 * kKeyStepBytes;  // Q, dO, K x2, V x2
};

// The shapes each head dim is compiled with: dK/dV with 4 warps and query steps of 32, dQ with key
// steps of 16, the fastest at every length (decisions.md: mma-backward-shapes). d64 and d96 take
// the same shapes.
template <int D>
struct DkdvConfig : DkdvTile<D, 4, 32> {};
template <int D>
struct DqConfig : DqTile<D, 4, 16> {};
// d256: dK/dV split in two column halves (128 accumulators per thread, as at d128) over 8 warps,
// so a block still covers 64 keys (134 KB of shared memory; sm_80 allows 163 KB); dQ with its 128
// accumulators and Q and dO re-read from shared memory.
template <>
struct DkdvConfig<256> : DkdvTile<256, 8, 32, 2> {};
template <>
struct DqConfig<256> : DqTile<256, 4, 16, false> {};

// As in the forward (raw_score), P = exp2(raw * c - lse * log2(e)) with raw = q.k and c = scale *
// log2(e), or raw = tanh(scale * q.k / softcap) and c = softcap * log2(e). slope = d(score) /
// d(q.k) / scale: 1, or 1 - tanh^2 with softcap; the common factor `scale` is applied once to dK
// and dQ at the end.
template <bool kSoftcap>
__device__ __forceinline__ void raw_and_slope(float s, float scale, float softcap, float& raw,
                                              float& slope) {
  if constexpr (kSoftcap) {
    raw = fast_tanh(s * (scale / softcap));
    slope = 1.f - raw * raw;
  } else {
    raw = s;
    slope = 1.f;
  }
}

constexpr int power_of_two_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// The delta and dQ-conversion passes over (row, head) pairs: D / 8 threads per pair with 8 elements
// (16 bytes of input) each, on a (row groups, heads) grid, so no 64-bit division. A pair takes
// kLanes threads, D / 8 rounded up to a power of two so that the shuffle reduction stays inside
// the pair's lanes (d96: 12 of 16 threads work).
template <int D>
struct RowPass {
  static constexpr int kThreads = 256;
  static constexpr int kParts = D / 8;  // threads with 8 elements each per (row, head)
  static constexpr int kLanes = power_of_two_at_least(kParts);
  static constexpr int kRows = kThreads / kLanes;
  static_assert(32 % kLanes == 0, "a row's threads sit in one warp");
  __device__ __forceinline__ static int64_t row() {
    return static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / kLanes;
  }
  __device__ __forceinline__ static int part() { return static_cast<int>(threadIdx.x) % kLanes; }
};

// Delta[h, i] = sum_d dO[i, h, d] * O[i, h, d] for rows [0, total_q), and with dq_accum, that
// row's fp32 dQ accumulator cleared (the atomic mode's zeroing, in the same pass), or with
// dq_states (the Hopper atomic kernel's claimed dQ rows, hopper_dq_accumulator.cuh) its state word
// set to untouched. Blocks by head (grid y), then rows: ordering them heads first (whole rows of
// dO, O and the accumulator streamed by the blocks running at once) measured mixed on the H200
// (2026-12-02, with dQ's conversion ordered alike; the backward at 64 x 1k / 16 x 4k, d128 -2% /
// +1%, d96 +3% / -5%): not kept.
template <class T, int D>
__global__ void __launch_bounds__(RowPass<D>::kThreads)
    delta_kernel(const AttentionBackwardParams p, float* delta, float* dq_accum,
                 uint32_t* dq_states) {
  const int h = static_cast<int>(blockIdx.y);
  const int64_t row = RowPass<D>::row();
  const int part = RowPass<D>::part();
  const bool valid = row < p.total_q && part < RowPass<D>::kParts;
  float acc = 0.f;
  if (valid) {
    const uint4 a = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) +
                                                    row * p.dout_row_stride +
                                                    h * p.dout_head_stride + part * 8);
    const uint4 b = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.out) +
                                                    row * p.out_row_stride +
                                                    h * p.out_head_stride + part * 8);
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = Mma<T>::unpack(aw[i]), y = Mma<T>::unpack(bw[i]);
      acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));
    }
    if (dq_accum != nullptr) {
      float4* zero = reinterpret_cast<float4*>(dq_accum + (row * p.heads + h) * D + part * 8);
      zero[0] = zero[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int off = RowPass<D>::kLanes / 2; off > 0; off /= 2)
    acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (valid && part == 0) {
    delta[h * p.total_q + row] = acc;
    if (dq_states != nullptr) dq_states[row * p.heads + h] = kDqRowsUntouched;
  }
}

// Atomic-dQ mode, one tile pair: dQ[m0 .. m0 + kQueryStep) += dS K over the block's keys, with dS^T
// ([keys][queries], 16-bit) in shared memory at sDs and K in its swizzled tile at sK. Warp w
// computes the columns [c * kDqCols, (c + 1) * kDqCols) of row group r's kQueryStep / kDqRowGroups
// rows, with (r, c) = (w % kDqRowGroups, w / kDqRowGroups) (one fp32 atomic per element and key
// tile), and adds them to dq_accum[q_begin + i, h, :]; rows past the sequence are skipped.
template <class T, class Cfg>
__device__ __forceinline__ void add_dq_tile(const AttentionBackwardParams& p, float* dq_accum,
                                            const SequenceBounds& seq, int h, int64_t m0,
                                            uint32_t sK, uint32_t sDs, int warp, int lane) {
  constexpr int D = Cfg::kD;
  constexpr int kBM = Cfg::kQueryStep;
  constexpr int kBN = Cfg::kKeysPerBlock;
  constexpr int kCols = Cfg::kDqCols;
  constexpr int kTiles = kBM / 16 / Cfg::kDqRowGroups;  // this warp's query row tiles
  const int g = lane / 4;
  const int qd = lane % 4;
  const int mq0 = warp % Cfg::kDqRowGroups * kTiles;
  const int col_group = warp / Cfg::kDqRowGroups;
  // A = dS (queries x keys), read transposed from dS^T: lanes 0-7 / 8-15 / 16-23 / 24-31 address
  // keys 0-7 / 0-7 / 8-15 / 8-15 at queries +0 / +8 / +0 / +8, the a0..a3 order of m16n8k16.
  const uint32_t ds_base = sDs + (((lane & 7) + ((lane >> 4) << 3)) * Cfg::kDsStride +
                                  ((lane >> 3) & 1) * 8 + mq0 * 16) * 2;
  // B = K (keys x d), read transposed from the swizzled tile as in dq_kernel, at this warp's
  // columns.
  const int krow = (lane & 7) + (((lane >> 3) & 1) << 3);
  uint32_t k_base[kCols / 16];
#pragma unroll
  for (int j = 0; j < kCols / 16; ++j)
    k_base[j] =
        sK + SwizzledTile<D>::offset(krow, 2 * (col_group * (kCols / 16) + j) + (lane >> 4));

  float acc[kTiles][kCols / 8][4];
#pragma unroll
  for (int mq = 0; mq < kTiles; ++mq)
#pragma unroll
    for (int n = 0; n < kCols / 8; ++n)
      acc[mq][n][0] = acc[mq][n][1] = acc[mq][n][2] = acc[mq][n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    uint32_t b[kCols / 16][4];
#pragma unroll
    for (int j = 0; j < kCols / 16; ++j)
      ldmatrix_x4_trans(b[j],
                        k_base[j] + static_cast<uint32_t>(kk * 16 * SwizzledTile<D>::kRowBytes));
#pragma unroll
    for (int mq = 0; mq < kTiles; ++mq) {
      uint32_t a[4];
      ldmatrix_x4_trans(a,
                        ds_base + static_cast<uint32_t>((kk * 16 * Cfg::kDsStride + mq * 16) * 2));
#pragma unroll
      for (int j = 0; j < kCols / 16; ++j) {
        Mma<T>::run(acc[mq][2 * j], a, b[j][0], b[j][1]);
        Mma<T>::run(acc[mq][2 * j + 1], a, b[j][2], b[j][3]);
      }
    }
  }
#pragma unroll
  for (int mq = 0; mq < kTiles; ++mq)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = m0 + (mq0 + mq) * 16 + g + 8 * r;
      if (i >= seq.q_len) continue;
      float* row = dq_accum + ((seq.q_begin + i) * p.heads + h) * D + col_group * kCols + 2 * qd;
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n)
        red_add_f32x2(row + n * 8, acc[mq][n][2 * r], acc[mq][n][2 * r + 1]);
    }
}

// dq[row, h, part * 8 .. + 8) = scale * (x, y) in the output type (the atomic mode's conversion,
// by rows here and by query tiles in hopper_dq_accumulator.cuh).
template <class T>
__device__ __forceinline__ void store_dq_part(const AttentionBackwardParams& p, int64_t row, int h,
                                              int part, float4 x, float4 y) {
  const float c = p.softmax_scale;
  const uint4 packed = make_uint4(Mma<T>::pack(x.x * c, x.y * c), Mma<T>::pack(x.z * c, x.w * c),
                                  Mma<T>::pack(y.x * c, y.y * c), Mma<T>::pack(y.z * c, y.w * c));
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dq) + row * p.dq_row_stride + h * p.dq_head_stride +
                            part * 8) = packed;
}

// Atomic-dQ mode, last step: dq[i, h, :] = scale * dq_accum[i, h, :] in the output type, for the
// rows of every sequence (cu_seqlens_q[batch] read on the device; rows past it are not written).
template <class T, int D>
__global__ void __launch_bounds__(RowPass<D>::kThreads)
    dq_convert_kernel(const AttentionBackwardParams p, const float* dq_accum) {
  const int h = static_cast<int>(blockIdx.y);
  const int64_t row = RowPass<D>::row();
  const int part = RowPass<D>::part();
  if (row >= p.total_q || part >= RowPass<D>::kParts || row >= p.cu_seqlens_q[p.batch]) return;
  const float4* src =
      reinterpret_cast<const float4*>(dq_accum + (row * p.heads + h) * D + part * 8);
  store_dq_part<T>(p, row, h, part, src[0], src[1]);
}

// Queues the lse and Delta of query rows [m0, m0 + kRows) of head h into stage `stage` of the
// [stage][lse | delta][kRows] floats at `stats`; rows past the sequence read as 0. Threads
// 0 .. kThreads - 1 take part (all 2 * kRows values are covered for any kThreads).
template <int kRows, int kThreads = 2 * kRows>
__device__ __forceinline__ void load_row_stats_async(uint32_t stats, int stage,
                                                     const AttentionBackwardParams& p,
                                                     const float* delta, const SequenceBounds& seq,
                                                     int h, int64_t m0) {
#pragma unroll
  for (int idx = static_cast<int>(threadIdx.x); idx < 2 * kRows; idx += kThreads) {
    const int which = idx / kRows;  // 0: lse, 1: delta
    const int r = idx % kRows;
    const bool valid = m0 + r < seq.q_len;
    const int64_t i = seq.q_begin + (valid ? m0 + r : 0);
    const float* src = which == 0 ? p.lse + h * p.lse_head_stride + i : delta + h * p.total_q + i;
    cp_async_4(stats + (stage * 2 * kRows + which * kRows + r) * 4, src, valid);
  }
}

// dq_accum ([total_q, heads, D] fp32, zeroed) is used only when kAtomicDq.
template <class T, class Cfg, bool kSoftcap, bool kAtomicDq>
__global__ void __launch_bounds__(Cfg::kThreads)
    dkdv_kernel(const AttentionBackwardParams p, const float* delta, float* dq_accum,
                int64_t slots) {
  constexpr int D = Cfg::kD;
  constexpr int kBN = Cfg::kKeysPerBlock;
  constexpr int kBM = Cfg::kQueryStep;
  extern __shared__ __align__(128) unsigned char smem[];

  const TileSlot slot = find_slot<kBN, TileOrder::kFirstFirst>(p.cu_seqlens_k, p.batch, slots);
  if (!slot.valid) return;
  const BlockTile tile = key_tile<kBN, kBM>(p, slot);
  const int hk = static_cast<int>(blockIdx.y);
  const int group = p.heads / p.kv_heads;
  const SequenceBounds seq = tile.seq;
  const int64_t n0 = tile.r0;
  const int64_t m_first = tile.walk.first;
  const int m_tiles = tile.walk.count;
  const int iters = m_tiles * group;

  const T* k = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride + hk * p.v_head_stride;

  const uint32_t sK = smem_addr(smem);
  const uint32_t sV = sK + Cfg::kKeyTileBytes;
  const uint32_t sQ = sV + Cfg::kKeyTileBytes;
  const uint32_t sdO = sQ + 2 * Cfg::kQueryTileBytes;
  const uint32_t sStat = sdO + 2 * Cfg::kQueryTileBytes;  // [buffer][lse | delta][kBM] floats
  const uint32_t sDs = sStat + 4 * kBM * 4;                // kAtomicDq: dS^T, [kBN][kDsStride]
  const float* stat = reinterpret_cast<const float*>(smem + 2 * Cfg::kKeyTileBytes +
                                                     4 * Cfg::kQueryTileBytes);

  // Queues the loads of iteration `it` (q head and query tile) into buffer it & 1.
  auto load_queries = [&](int it) {
    const int h = hk * group + it / m_tiles;
    const int64_t m0 = m_first + static_cast<int64_t>(it % m_tiles) * kBM;
    const int buf = it & 1;
    const T* q = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride + h * p.q_head_stride;
    const T* dout =
        static_cast<const T*>(p.dout) + seq.q_begin * p.dout_row_stride + h * p.dout_head_stride;
    load_tile_async<kBM, D, Cfg::kThreads>(sQ + buf * Cfg::kQueryTileBytes, q, p.q_row_stride, m0,
                                           seq.q_len);
    load_tile_async<kBM, D, Cfg::kThreads>(sdO + buf * Cfg::kQueryTileBytes, dout,
                                           p.dout_row_stride, m0, seq.q_len);
    load_row_stats_async<kBM>(sStat, buf, p, delta, seq, h, m0);
  };

  load_tile_async<kBN, D, Cfg::kThreads>(sK, k, p.k_row_stride, n0, seq.k_len);
  load_tile_async<kBN, D, Cfg::kThreads>(sV, v, p.v_row_stride, n0, seq.k_len);
  if (iters > 0) load_queries(0);
  cp_async_commit();

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const float c_log2 = raw_to_log2<kSoftcap>(p);
  // This warp's 16 keys, and its part of their dK and dV columns.
  const int key_warp = warp / Cfg::kColSplit;
  const int col0 = warp % Cfg::kColSplit * Cfg::kDkdvCols;

  // K and V rows are this warp's A operands; Q and dO tiles are B operands, plain for S^T and dP^T
  // and transposed (from column col0 on) for dK and dV.
  const FragAddress<D> ka(sK, key_warp * 16 + (lane & 15), lane >> 4);
  const FragAddress<D> va(sV, key_warp * 16 + (lane & 15), lane >> 4);
  const FragAddress<D> qa(sQ, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const FragAddress<D> doa(sdO, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const FragAddress<D> qta(sQ + col0 * 2, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
  const FragAddress<D> dota(sdO + col0 * 2, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  float dk[Cfg::kDkdvCols / 8][4], dv[Cfg::kDkdvCols / 8][4];
#pragma unroll
  for (int i = 0; i < Cfg::kDkdvCols / 8; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[i][c] = dv[i][c] = 0.f;

  for (int it = 0; it < iters; ++it) {
    const int64_t m0 = m_first + static_cast<int64_t>(it % m_tiles) * kBM;
    if (it + 1 < iters) load_queries(it + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int buf = it & 1;
    const uint32_t boff = buf * Cfg::kQueryTileBytes;
    const float* lse = stat + buf * 2 * kBM;
    const float* dlt = lse + kBM;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x kBM queries.
    float st[kBM / 8][4], dpt[kBM / 8][4];
#pragma unroll
    for (int i = 0; i < kBM / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) st[i][c] = dpt[i][c] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[4], av[4];
      ldmatrix_x4(ak, ka.at(kk, 0));
      ldmatrix_x4(av, va.at(kk, 0));
#pragma unroll
      for (int np = 0; np < kBM / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, qa.at(kk, 2 * np) + boff);
        Mma<T>::run(st[2 * np], ak, b[0], b[1]);
        Mma<T>::run(st[2 * np + 1], ak, b[2], b[3]);
        ldmatrix_x4(b, doa.at(kk, 2 * np) + boff);
        Mma<T>::run(dpt[2 * np], av, b[0], b[1]);
        Mma<T>::run(dpt[2 * np + 1], av, b[2], b[3]);
      }
    }

    const bool full = tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                                         p.window_right);
    // This thread's query columns: their lse (log2 domain) and delta, read once per tile.
    float lse2[kBM / 8][2], dl[kBM / 8][2];
#pragma unroll
    for (int i = 0; i < kBM / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        lse2[i][e] = lse[i * 8 + 2 * qd + e] * kLog2e;
        dl[i][e] = dlt[i * 8 + 2 * qd + e];
      }
#pragma unroll
    for (int i = 0; i < kBM / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = i * 8 + 2 * qd + (c & 1);  // query inside the tile
        float raw, slope;
        raw_and_slope<kSoftcap>(st[i][c], p.softmax_scale, p.softcap, raw, slope);
        float pr = fast_exp2(fmaf(raw, c_log2, -lse2[i][c & 1]));
        if (!full) {
          const int64_t qi = m0 + col;
          const int64_t kj = n0 + key_warp * 16 + g + 8 * (c / 2);
          const bool visible = qi < seq.q_len && kj >= seq.key_begin(qi, p.window_left) &&
                               kj < seq.key_end(qi, p.causal, p.window_right);
          if (!visible) pr = 0.f;
        }
        st[i][c] = pr;
        dpt[i][c] = kSoftcap ? pr * (dpt[i][c] - dl[i][c & 1]) * slope
                             : pr * (dpt[i][c] - dl[i][c & 1]);
      }

    // dV += P^T dO and dK += dS^T Q: the accumulators are A fragments over the query dimension.
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) {
      const uint32_t ap[4] = {Mma<T>::pack(st[2 * kk][0], st[2 * kk][1]),
                              Mma<T>::pack(st[2 * kk][2], st[2 * kk][3]),
                              Mma<T>::pack(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                              Mma<T>::pack(st[2 * kk + 1][2], st[2 * kk + 1][3])};
      const uint32_t ads[4] = {Mma<T>::pack(dpt[2 * kk][0], dpt[2 * kk][1]),
                               Mma<T>::pack(dpt[2 * kk][2], dpt[2 * kk][3]),
                               Mma<T>::pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                               Mma<T>::pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
      // ads[e] holds keys g + 8 * (e & 1) at queries 16 * kk + 8 * (e >> 1) + 2 * qd, + 1; of the
      // warps that share keys (and so dS), the first stores it.
      if (kAtomicDq && col0 == 0) {
        const uint32_t row = sDs + ((key_warp * 16 + g) * Cfg::kDsStride + 16 * kk + 2 * qd) * 2;
#pragma unroll
        for (int e = 0; e < 4; ++e)
          st_shared_b32(row + ((e & 1) * 8 * Cfg::kDsStride + (e >> 1) * 8) * 2, ads[e]);
      }
#pragma unroll
      for (int dp = 0; dp < Cfg::kDkdvCols / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, dota.at(dp, 2 * kk) + boff);
        Mma<T>::run(dv[2 * dp], ap, b[0], b[1]);
        Mma<T>::run(dv[2 * dp + 1], ap, b[2], b[3]);
        ldmatrix_x4_trans(b, qta.at(dp, 2 * kk) + boff);
        Mma<T>::run(dk[2 * dp], ads, b[0], b[1]);
        Mma<T>::run(dk[2 * dp + 1], ads, b[2], b[3]);
      }
    }
    if constexpr (kAtomicDq) {
      __syncthreads();  // every warp's dS^T rows are in shared memory
      const int h = hk * group + it / m_tiles;
      add_dq_tile<T, Cfg>(p, dq_accum, seq, h, m0, sK, sDs, warp, lane);
    }
    __syncthreads();  // buffer it & 1 (and dS^T) are refilled in iteration it + 1
  }
  cp_async_wait<0>();

  T* dkp = static_cast<T*>(p.dk) + seq.k_begin * p.dk_row_stride + hk * p.dk_head_stride;
  T* dvp = static_cast<T*>(p.dv) + seq.k_begin * p.dv_row_stride + hk * p.dv_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = n0 + key_warp * 16 + g + 8 * r;
    if (j >= seq.k_len) continue;
#pragma unroll
    for (int dn = 0; dn < Cfg::kDkdvCols / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dkp + j * p.dk_row_stride + col0 + dn * 8 + 2 * qd) =
          Mma<T>::pack(dk[dn][2 * r] * p.softmax_scale, dk[dn][2 * r + 1] * p.softmax_scale);
      *reinterpret_cast<uint32_t*>(dvp + j * p.dv_row_stride + col0 + dn * 8 + 2 * qd) =
          Mma<T>::pack(dv[dn][2 * r], dv[dn][2 * r + 1]);
    }
  }
}

template <class T, class Cfg, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads)
    dq_kernel(const AttentionBackwardParams p, const float* delta, int64_t slots) {
  constexpr int D = Cfg::kD;
  constexpr int kBM = Cfg::kQueriesPerBlock;
  constexpr int kBN = Cfg::kKeyStep;
  extern __shared__ __align__(128) unsigned char smem[];

  const TileSlot slot = find_slot<kBM, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const BlockTile tile = query_tile<kBM, kBN>(p, slot);
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (p.heads / p.kv_heads);
  const SequenceBounds seq = tile.seq;
  const int64_t m0 = tile.r0;
  const int64_t n_first = tile.walk.first;
  const int num_tiles = tile.walk.count;

  const T* q = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride + h * p.q_head_stride;
  const T* dout =
      static_cast<const T*>(p.dout) + seq.q_begin * p.dout_row_stride + h * p.dout_head_stride;
  const T* k = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride + hk * p.v_head_stride;

  const uint32_t sQ = smem_addr(smem);
  const uint32_t sdO = sQ + Cfg::kQBlockBytes;
  const uint32_t sK = sdO + Cfg::kQBlockBytes;
  const uint32_t sV = sK + 2 * Cfg::kKeyStepBytes;

  load_tile_async<kBM, D, Cfg::kThreads>(sQ, q, p.q_row_stride, m0, seq.q_len);
  load_tile_async<kBM, D, Cfg::kThreads>(sdO, dout, p.dout_row_stride, m0, seq.q_len);
  cp_async_commit();
  if (num_tiles > 0) {
    load_tile_async<kBN, D, Cfg::kThreads>(sK, k, p.k_row_stride, n_first, seq.k_len);
    load_tile_async<kBN, D, Cfg::kThreads>(sV, v, p.v_row_stride, n_first, seq.k_len);
  }
  cp_async_commit();

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const float c_log2 = raw_to_log2<kSoftcap>(p);

  // This thread's two query rows: their lse, delta and visible key ranges.
  float lse_log2[2], dlt[2];
  int kb[2], ke[2];  // positions inside one sequence fit in int32, as cu_seqlens do
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = m0 + warp * 16 + g + 8 * r;
    const bool valid = i < seq.q_len;
    lse_log2[r] = valid ? p.lse[h * p.lse_head_stride + seq.q_begin + i] * kLog2e : 0.f;
    dlt[r] = valid ? delta[h * p.total_q + seq.q_begin + i] : 0.f;
    kb[r] = static_cast<int>(seq.key_begin(i, p.window_left));
    ke[r] = valid ? static_cast<int>(seq.key_end(i, p.causal, p.window_right)) : 0;
  }

  cp_async_wait<1>();
  __syncthreads();
  // This warp's 16 rows of Q and dO as A operands: loaded here once with kQdoInRegisters, else
  // re-read at every key step.
  const FragAddress<D> qa(sQ, warp * 16 + (lane & 15), lane >> 4);
  const FragAddress<D> doa(sdO, warp * 16 + (lane & 15), lane >> 4);
  constexpr int kKept = Cfg::kQdoInRegisters ? D / 16 : 1;
  uint32_t qf[kKept][4], dof[kKept][4];
  if constexpr (Cfg::kQdoInRegisters) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      ldmatrix_x4(qf[kk], qa.at(kk, 0));
      ldmatrix_x4(dof[kk], doa.at(kk, 0));
    }
  }
  // K and V tiles as B operands of Q K^T and dO V^T; K transposed for dS K.
  const FragAddress<D> ka(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const FragAddress<D> va(sV, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const FragAddress<D> kta(sK, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  float dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;

  for (int t = 0; t < num_tiles; ++t) {
    const int64_t n0 = n_first + static_cast<int64_t>(t) * kBN;
    if (t + 1 < num_tiles) {
      const int nb = (t + 1) & 1;
      load_tile_async<kBN, D, Cfg::kThreads>(sK + nb * Cfg::kKeyStepBytes, k, p.k_row_stride,
                                             n0 + kBN, seq.k_len);
      load_tile_async<kBN, D, Cfg::kThreads>(sV + nb * Cfg::kKeyStepBytes, v, p.v_row_stride,
                                             n0 + kBN, seq.k_len);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint32_t boff = (t & 1) * Cfg::kKeyStepBytes;

    float s[kBN / 8][4], dp[kBN / 8][4];
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][c] = dp[i][c] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t aq[4], ado[4];
      if constexpr (Cfg::kQdoInRegisters) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          aq[c] = qf[kk][c];
          ado[c] = dof[kk][c];
        }
      } else {
        ldmatrix_x4(aq, qa.at(kk, 0));
        ldmatrix_x4(ado, doa.at(kk, 0));
      }
#pragma unroll
      for (int np = 0; np < kBN / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ka.at(kk, 2 * np) + boff);
        Mma<T>::run(s[2 * np], aq, b[0], b[1]);
        Mma<T>::run(s[2 * np + 1], aq, b[2], b[3]);
        ldmatrix_x4(b, va.at(kk, 2 * np) + boff);
        Mma<T>::run(dp[2 * np], ado, b[0], b[1]);
        Mma<T>::run(dp[2 * np + 1], ado, b[2], b[3]);
      }
    }

    const bool full = tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                                         p.window_right);
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2;
        float raw, slope;
        raw_and_slope<kSoftcap>(s[i][c], p.softmax_scale, p.softcap, raw, slope);
        float pr = fast_exp2(fmaf(raw, c_log2, -lse_log2[r]));
        if (!full) {
          const int j = static_cast<int>(n0) + i * 8 + 2 * qd + (c & 1);
          if (j < kb[r] || j >= ke[r]) pr = 0.f;
        }
        dp[i][c] = kSoftcap ? pr * (dp[i][c] - dlt[r]) * slope : pr * (dp[i][c] - dlt[r]);
      }

    // dQ += dS K, with K read transposed (B[key][d]).
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint32_t a[4] = {Mma<T>::pack(dp[2 * kk][0], dp[2 * kk][1]),
                             Mma<T>::pack(dp[2 * kk][2], dp[2 * kk][3]),
                             Mma<T>::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                             Mma<T>::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, kta.at(dn, 2 * kk) + boff);
        Mma<T>::run(dq[2 * dn], a, b[0], b[1]);
        Mma<T>::run(dq[2 * dn + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  T* dqp = static_cast<T*>(p.dq) + seq.q_begin * p.dq_row_stride + h * p.dq_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = m0 + warp * 16 + g + 8 * r;
    if (i >= seq.q_len) continue;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(dqp + i * p.dq_row_stride + dn * 8 + 2 * qd) =
          Mma<T>::pack(dq[dn][2 * r] * p.softmax_scale, dq[dn][2 * r + 1] * p.softmax_scale);
  }
}

// Launches one backward pass over (slot, head) with `smem` bytes of dynamic shared memory; args
// follow the params.
template <class Kernel, class... Args>
void launch_backward_pass(Kernel kernel, int threads, int smem, int64_t slots, int heads,
                          const char* what, cudaStream_t stream, const AttentionBackwardParams& p,
                          Args... args) {
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: cannot reserve shared memory: ") +
                cudaGetErrorString(attr));
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(heads));
  kernel<<<grid, threads, smem, stream>>>(p, args..., slots);
  check_launch(what);
}

// The grid of delta_kernel and dq_convert_kernel: (row groups, heads).
template <int D>
dim3 row_pass_grid(const AttentionBackwardParams& p) {
  const int64_t groups = (p.total_q + RowPass<D>::kRows - 1) / RowPass<D>::kRows;
  return dim3(static_cast<unsigned>(groups), static_cast<unsigned>(p.heads));
}

// Delta, with dq_accum the accumulator cleared, with dq_states the state words (delta_kernel).
template <class T, int D>
void launch_delta(const AttentionBackwardParams& p, float* delta, float* dq_accum,
                  uint32_t* dq_states, cudaStream_t stream) {
  if (p.total_q <= 0 || p.heads <= 0) return;
  delta_kernel<T, D><<<row_pass_grid<D>(p), RowPass<D>::kThreads, 0, stream>>>(
      p, delta, dq_accum, dq_states);
  check_launch("the backward delta kernel");
}

// The deterministic mode's dQ pass: dQ per query tile, no atomics.
template <class T, class Dq>
void launch_dq_pass(const AttentionBackwardParams& p, const float* delta, cudaStream_t stream) {
  const int64_t query_slots = slot_count(p.total_q, p.batch, Dq::kQueriesPerBlock);
  if (query_slots > 0 && p.heads > 0)
    launch_backward_pass(p.softcap > 0.f ? dq_kernel<T, Dq, true> : dq_kernel<T, Dq, false>,
                         Dq::kThreads, Dq::kSmemBytes, query_slots, p.heads,
                         "the backward dQ kernel", stream, p, delta);
}

// Deterministic backward with explicit tile shapes (the experiments build several; the library
// one). workspace: Delta (delta_workspace_bytes).
template <class T, class Dkdv, class Dq>
void launch_backward_with(const AttentionBackwardParams& p, void* workspace, cudaStream_t stream) {
  static_assert(Dkdv::kD == Dq::kD, "both passes use one head dim");
  constexpr int D = Dkdv::kD;
  float* delta = static_cast<float*>(workspace);
  launch_delta<T, D>(p, delta, nullptr, nullptr, stream);
  const int64_t key_slots = slot_count(p.total_k, p.batch, Dkdv::kKeysPerBlock);
  const bool softcap = p.softcap > 0.f;
  float* const no_accum = nullptr;
  if (key_slots > 0 && p.kv_heads > 0)
    launch_backward_pass(
        softcap ? dkdv_kernel<T, Dkdv, true, false> : dkdv_kernel<T, Dkdv, false, false>,
        Dkdv::kThreads, Dkdv::kSmemBytes, key_slots, p.kv_heads, "the backward dK/dV kernel",
        stream, p, static_cast<const float*>(delta), no_accum);
  launch_dq_pass<T, Dq>(p, delta, stream);
}

// Non-deterministic (atomic dQ) backward around a dK/dV/dQ launch: computes Delta and clears the
// fp32 dQ accumulator, calls launch_dkdv(delta, dq_accum, stream), then scales and rounds dQ.
// workspace: Delta (delta_workspace_bytes), then the accumulator [total_q, heads, D].
template <class T, int D, class LaunchDkdv>
void run_atomic_backward(const AttentionBackwardParams& p, void* workspace, cudaStream_t stream,
                         LaunchDkdv launch_dkdv) {
  float* delta = static_cast<float*>(workspace);
  float* dq_accum =
      reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + delta_workspace_bytes(p));
  if (p.batch <= 0) return;  // no sequence, no row to write (cu_seqlens may then be null)
  launch_delta<T, D>(p, delta, dq_accum, nullptr, stream);
  launch_dkdv(static_cast<const float*>(delta), dq_accum, stream);
  // Rows past cu_seqlens_q[batch] are skipped inside, so the grid covers all total_q rows.
  if (p.total_q > 0 && p.heads > 0) {
    dq_convert_kernel<T, D>
        <<<row_pass_grid<D>(p), RowPass<D>::kThreads, 0, stream>>>(p, dq_accum);
    check_launch("the backward dQ conversion kernel");
  }
}

// The atomic-dQ backward on mma.sync with an explicit dK/dV tile shape.
template <class T, class Dkdv>
void launch_backward_atomic_with(const AttentionBackwardParams& p, void* workspace,
                                 cudaStream_t stream) {
  run_atomic_backward<T, Dkdv::kD>(p, workspace, stream, [&](const float* delta, float* dq_accum,
                                                            cudaStream_t s) {
    const int64_t key_slots = slot_count(p.total_k, p.batch, Dkdv::kKeysPerBlock);
    if (key_slots > 0 && p.kv_heads > 0)
      launch_backward_pass(p.softcap > 0.f ? dkdv_kernel<T, Dkdv, true, true>
                                           : dkdv_kernel<T, Dkdv, false, true>,
                           Dkdv::kThreads, Dkdv::kSmemBytesAtomic, key_slots, p.kv_heads,
                           "the backward dK/dV/dQ kernel", s, p, delta, dq_accum);
  });
}

// The (dtype, head dim) instance's backward: p.deterministic picks the mode.
template <class T, int D>
void launch_backward(const AttentionBackwardParams& p, void* workspace, cudaStream_t stream) {
  if (p.deterministic) launch_backward_with<T, DkdvConfig<D>, DqConfig<D>>(p, workspace, stream);
  else launch_backward_atomic_with<T, DkdvConfig<D>>(p, workspace, stream);
}

}  // namespace varpack::cuda
