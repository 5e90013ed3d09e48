// Varlen attention backward on Hopper's wgmma (sm_90a), the atomic-dQ mode (FlashAttention's
// default; the deterministic mode stays on the mma.sync passes of backward_kernels.cuh). One block =
// 128 keys of one kv head, two warpgroups of 64 keys each; it walks every query tile of 64 (of every
// q head of its group) that can see its keys. Per tile, each warpgroup computes S^T = K Q^T and
// dP^T = V dO^T from shared memory, turns them into P^T and dS^T in registers, and accumulates
// dV += P^T dO and dK += dS^T Q with P^T and dS^T as register operands. dS^T also goes to shared
// memory, where after one barrier each warpgroup computes its share of the head columns of
// dQ = dS K over all the block's keys and adds them to the fp32 accumulator with vector reductions.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// Two warpgroups x 64 keys per block; each computes half of dQ's columns over both warpgroups'
// keys. Measured on the H200 (bf16, d128, causal, 16 heads; experiments/tile_shapes.cu,
// 2026-11-30), against this shape at 183 / 271 / 309 TFLOP/s (64 x 1k / 16 x 4k / 4 x 16k): one
// warpgroup per block, two blocks per multiprocessor, 159 / 201 / 212; waiting for S^T and dP^T
// together 180 / 268 / 304; warpgroup ping-pong 176 / 255 / 287; dV/dK deferred to the next
// iteration (three stages) 168 / 242 / 267. dQ's reductions take about a third of the time (left
// out, 231 / 381 / 457), but staging them for bulk reductions (175 / 256 / 288), 16-byte vector
// reductions (178 / 258 / 292) or a per-block rotation of the query tiles (179 / 265 / 300) did
// not help.
template <int D>
struct HopperBackwardConfig {
  static constexpr int kD = D;
  static constexpr int kThreads = 256;
  static constexpr int kKeysPerBlock = 128;
  static constexpr int kQueryStep = 64;
  static constexpr int kDqCols = D / 2;  // each warpgroup's share of dQ's columns
  using KvTile = GmmaTile<kKeysPerBlock, D>;
  using QTile = GmmaTile<kQueryStep, D>;
  using DsTile = GmmaTile<kKeysPerBlock, kQueryStep>;  // dS^T: rows = keys
  // K, V; Q and dO in two stages; dS^T; then [stage][lse | delta][query] floats.
  static constexpr int kStatOffset = 2 * KvTile::kBytes + 4 * QTile::kBytes + DsTile::kBytes;
  static constexpr int kSmemBytes = 1024 + kStatOffset + 4 * kQueryStep * 4;
};

template <class T, class Cfg, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_backward_kernel(const AttentionBackwardParams p, const float* delta, float* dq_accum,
                           int64_t slots) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kD;
  constexpr int kBN = Cfg::kKeysPerBlock;
  constexpr int kBM = Cfg::kQueryStep;
  constexpr int kDqCols = Cfg::kDqCols;
  using KvTile = typename Cfg::KvTile;
  using QTile = typename Cfg::QTile;
  using DsTile = typename Cfg::DsTile;
  extern __shared__ unsigned char smem_raw[];

  const TileSlot slot = find_slot<kBN>(p.cu_seqlens_k, p.batch, slots);
  if (!slot.valid) return;
  const int hk = static_cast<int>(blockIdx.y);
  const int group = p.heads / p.kv_heads;
  const SequenceBounds seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b);
  const int64_t n0 = slot.block * kBN;
  const int64_t n1 = n0 + kBN < seq.k_len ? n0 + kBN : seq.k_len;
  const TileWalk walk =
      tiles_over(queries_for_keys(seq, n0, n1, p.causal, p.window_left, p.window_right), kBM);
  const int64_t m_first = walk.first;
  const int m_tiles = walk.count;
  const int iters = m_tiles * group;

  const T* k = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride + hk * p.v_head_stride;

  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t sK = (raw_addr + 1023) & ~1023u;
  const uint32_t sV = sK + KvTile::kBytes;
  const uint32_t sQ = sV + KvTile::kBytes;       // two stages
  const uint32_t sdO = sQ + 2 * QTile::kBytes;   // two stages
  const uint32_t sDs = sdO + 2 * QTile::kBytes;
  const uint32_t sStat = sK + Cfg::kStatOffset;
  const float* stat = reinterpret_cast<const float*>(smem_raw + (sStat - raw_addr));

  // Queues the loads of iteration `it` (q head and query tile) into stage it & 1.
  auto tile_start = [&](int it) { return m_first + static_cast<int64_t>(it % m_tiles) * kBM; };
  auto load_queries = [&](int it) {
    const int h = hk * group + it / m_tiles;
    const int64_t m0 = tile_start(it);
    const uint32_t stage = (it & 1) * QTile::kBytes;
    const T* q = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride + h * p.q_head_stride;
    const T* dout =
        static_cast<const T*>(p.dout) + seq.q_begin * p.dout_row_stride + h * p.dout_head_stride;
    load_gmma_tile_async<kBM, D, Cfg::kThreads>(sQ + stage, q, p.q_row_stride, m0, seq.q_len);
    load_gmma_tile_async<kBM, D, Cfg::kThreads>(sdO + stage, dout, p.dout_row_stride, m0, seq.q_len);
    load_row_stats_async<kBM>(sStat, it & 1, p, delta, seq, h, m0);
  };

  load_gmma_tile_async<kBN, D, Cfg::kThreads>(sK, k, p.k_row_stride, n0, seq.k_len);
  load_gmma_tile_async<kBN, D, Cfg::kThreads>(sV, v, p.v_row_stride, n0, seq.k_len);
  if (iters > 0) load_queries(0);
  cp_async_commit();

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int wg = warp / 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const int qd = lane % 4;
  const float c_log2 = kSoftcap ? kLog2e : p.softmax_scale * kLog2e;
  const uint32_t k_rows = sK + wg * 64 * 128;  // this warpgroup's 64 keys in each column block
  const uint32_t v_rows = sV + wg * 64 * 128;
  // dQ = dS K for columns [wg * kDqCols, +kDqCols): K read MN-major from that column offset.
  const uint32_t k_cols = sK + (wg * kDqCols / 64) * KvTile::kBlockBytes + (wg * kDqCols % 64) * 2;

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  for (int it = 0; it < iters; ++it) {
    const int h = hk * group + it / m_tiles;
    const int64_t m0 = tile_start(it);
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // tile it is in; every warpgroup is done with the stage it + 1 refills and dS^T
    if (it + 1 < iters) load_queries(it + 1);
    cp_async_commit();
    const uint32_t qb = sQ + (it & 1) * QTile::kBytes;
    const uint32_t dob = sdO + (it & 1) * QTile::kBytes;
    const float* lse = stat + (it & 1) * 2 * kBM;
    const float* dlt = lse + kBM;

    // S^T = K Q^T and dP^T = V dO^T: this warpgroup's 64 keys x 64 queries, both K-major, in two
    // groups, so that P^T = exp(S^T - lse) is computed while dP^T is still on the tensor cores.
    float st[kBM / 2], dpt[kBM / 2];
    pin_registers(st);
    pin_registers(dpt);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;  // 16 columns = 32 bytes inside a 128-byte row
      Wgmma<T, kBM>::template ss<0, 0>(
          st, gmma_desc(k_rows + (kk / 4) * KvTile::kBlockBytes + col, 0, 1024),
          gmma_desc(qb + (kk / 4) * QTile::kBlockBytes + col, 0, 1024), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;
      Wgmma<T, kBM>::template ss<0, 0>(
          dpt, gmma_desc(v_rows + (kk / 4) * KvTile::kBlockBytes + col, 0, 1024),
          gmma_desc(dob + (kk / 4) * QTile::kBlockBytes + col, 0, 1024), kk > 0);
    }
    wgmma_commit();
    // With softcap, dS^T needs each score's slope next to P^T: wait for both products.
    if constexpr (kSoftcap) wgmma_wait<0>();
    else wgmma_wait<1>();
    pin_registers(st);

    // P^T, and with softcap dS^T; accumulator (row, column) = (key warp * 16 + g + 8 * (c / 2),
    // query 8i + 2qd + c % 2).
    const bool full = tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                                         p.window_right);
#pragma unroll
    for (int i = 0; i < kBM / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = i * 8 + 2 * qd + (c & 1);
        float raw, slope;
        raw_and_slope<kSoftcap>(st[4 * i + c], p.softmax_scale, p.softcap, raw, slope);
        float pr = fast_exp2(fmaf(raw, c_log2, -lse[col] * kLog2e));
        if (!full) {
          const int64_t qi = m0 + col;
          const int64_t kj = n0 + warp * 16 + g + 8 * (c / 2);
          const bool visible = qi < seq.q_len && kj >= seq.key_begin(qi, p.window_left) &&
                               kj < seq.key_end(qi, p.causal, p.window_right);
          if (!visible) pr = 0.f;
        }
        st[4 * i + c] = pr;
        if constexpr (kSoftcap) dpt[4 * i + c] = pr * (dpt[4 * i + c] - dlt[col]) * slope;
      }
    if constexpr (!kSoftcap) {
      wgmma_wait<0>();
      pin_registers(dpt);
#pragma unroll
      for (int i = 0; i < kBM / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) dpt[4 * i + c] = st[4 * i + c] * (dpt[4 * i + c] - dlt[i * 8 + 2 * qd + (c & 1)]);
    } else {
      pin_registers(dpt);
    }
    // As register A operands over the query dimension (k-step kk = query octets 2kk, 2kk + 1),
    // and dS^T into shared memory for the dQ product.
    uint32_t pf[kBM / 16][4], dsf[kBM / 16][4];
#pragma unroll
    for (int i = 0; i < kBM / 8; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        pf[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(st[4 * i + 2 * r], st[4 * i + 2 * r + 1]);
        dsf[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(dpt[4 * i + 2 * r], dpt[4 * i + 2 * r + 1]);
        st_shared_b32(sDs + DsTile::offset(warp * 16 + g + 8 * r, i) + 4 * qd,
                      dsf[i / 2][(i & 1) * 2 + r]);
      }
    fence_proxy_async();

    // dV += P^T dO and dK += dS^T Q: B = dO, Q read MN-major (rows = queries).
    auto issue_dkdv = [&] {
      pin_registers(dv);
      pin_registers(dk);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk) {
        Wgmma<T, D>::template rs<1>(dv, pf[kk], gmma_desc(dob + kk * 2048, QTile::kBlockBytes, 1024), 1);
        Wgmma<T, D>::template rs<1>(dk, dsf[kk], gmma_desc(qb + kk * 2048, QTile::kBlockBytes, 1024), 1);
      }
      wgmma_commit();
    };
    issue_dkdv();
    __syncthreads();  // every warp's dS^T rows are in shared memory

    // dQ[:, this warpgroup's columns] = dS K over the block's keys: A = dS^T read MN-major,
    // B = K read MN-major (rows = keys).
    float dq[kDqCols / 2];
    pin_registers(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      Wgmma<T, kDqCols>::template ss<1, 1>(
          dq, gmma_desc(sDs + kk * 2048, DsTile::kBlockBytes, 1024),
          gmma_desc(k_cols + kk * 2048, KvTile::kBlockBytes, 1024), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(dq);
    // Accumulator rows are queries (warp % 4) * 16 + g + 8r of the tile.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = m0 + (warp % 4) * 16 + g + 8 * r;
      if (i >= seq.q_len) continue;
      float* row = dq_accum + ((seq.q_begin + i) * p.heads + h) * D + wg * kDqCols + 2 * qd;
#pragma unroll
      for (int n = 0; n < kDqCols / 8; ++n)
        red_add_f32x2(row + n * 8, dq[4 * n + 2 * r], dq[4 * n + 2 * r + 1]);
    }
  }
  wgmma_wait<0>();
  pin_registers(dv);
  pin_registers(dk);
  cp_async_wait<0>();

  T* dkp = static_cast<T*>(p.dk) + seq.k_begin * p.dk_row_stride + hk * p.dk_head_stride;
  T* dvp = static_cast<T*>(p.dv) + seq.k_begin * p.dv_row_stride + hk * p.dv_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = n0 + warp * 16 + g + 8 * r;
    if (j >= seq.k_len) continue;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dkp + j * p.dk_row_stride + dn * 8 + 2 * qd) = Mma<T>::pack(
          dk[4 * dn + 2 * r] * p.softmax_scale, dk[4 * dn + 2 * r + 1] * p.softmax_scale);
      *reinterpret_cast<uint32_t*>(dvp + j * p.dv_row_stride + dn * 8 + 2 * qd) =
          Mma<T>::pack(dv[4 * dn + 2 * r], dv[4 * dn + 2 * r + 1]);
    }
  }
#endif
}

// The atomic-dQ backward with the Hopper dK/dV/dQ kernel.
template <class T, int D>
void launch_hopper_backward(const AttentionBackwardParams& p, void* workspace, cudaStream_t stream) {
  using Cfg = HopperBackwardConfig<D>;
  run_atomic_backward<T, D>(p, workspace, stream, [&](const float* delta, float* dq_accum,
                                                      cudaStream_t s) {
    const int64_t key_slots = slot_count(p.total_k, p.batch, Cfg::kKeysPerBlock);
    if (key_slots > 0 && p.kv_heads > 0)
      launch_backward_pass(p.softcap > 0.f ? hopper_backward_kernel<T, Cfg, true>
                                           : hopper_backward_kernel<T, Cfg, false>,
                           Cfg::kThreads, Cfg::kSmemBytes, key_slots, p.kv_heads,
                           "the Hopper backward kernel", s, p, delta, dq_accum);
  });
}

}  // namespace varpack::cuda
