// Varlen attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a); the same
// algorithm, masks and outputs as forward_kernel.cuh (the sm_80 path), on larger tiles. One block =
// one query tile of one head; each warpgroup owns 64 query rows. K/V tiles of kBlockN keys stream
// through a ring of shared-memory stages, one block-wide barrier per tile: thread 0 has the TMA
// unit copy a tile wholly inside the sequence; a sequence's partial last tile goes by cp.async from
// every thread (which zero-fills the keys past its end); either completes on the stage's mbarrier.
// S = Q K^T reads both operands from shared memory, and O += P V takes P from registers, so P never
// leaves the multiprocessor's registers. The warpgroups run independently between barriers, so
// one's softmax overlaps another's matrix products; at d128 each warpgroup issues tile t's
// S = Q K^T together with tile t - 1's O += P V and runs tile t's softmax while the latter does.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// kPingPong: warpgroup w > 0 starts its S = Q K^T only when warpgroup w - 1 has issued its
// products, so the warpgroups' softmax phases interleave with each other's matrix products.
// kOverlap: inside a warpgroup, tile t's S = Q K^T and tile t - 1's O += P V are issued together
// and tile t's softmax runs while O += P V does (a stage then stays in use one tile longer, so it
// takes three stages for the same one-tile prefetch).
template <int D, int Warpgroups, int BlockN, bool PingPong = false, int Stages = 2,
          bool Overlap = false>
struct HopperForwardTile {
  static constexpr int kD = D;
  static constexpr int kWarpgroups = Warpgroups;
  static constexpr bool kPingPong = PingPong && Warpgroups > 1;
  static constexpr int kThreads = Warpgroups * 128;
  static constexpr int kBlockM = Warpgroups * 64;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr bool kOverlap = Overlap;
  static_assert(Stages >= (Overlap ? 3 : 2), "a stage is in use for 1 (2 with Overlap) tiles");
  using QTile = GmmaTile<kBlockM, D>;
  using KvTile = GmmaTile<kBlockN, D>;
  // Q, then K and V per stage, from a 1024-byte boundary (the swizzle's period); then each
  // stage's mbarrier.
  static constexpr int kBarrierOffset = QTile::kBytes + 2 * Stages * KvTile::kBytes;
  static constexpr int kSmemBytes = 1024 + kBarrierOffset + Stages * 8;
};

// d64: 3 warpgroups x 64 rows (registers allow it: S 64 + O 32 fp32 per thread); d128: 2. Measured
// on the H200 (bf16, d128, causal, 16 heads; 64 x 1k / 16 x 4k / 4 x 16k, 2026-11-30): with TMA
// loads 307 / 447 / 494 TFLOP/s (standalone benchmark); with three stages 308 / 445 / 462; with
// every thread issuing cp.async 282 / 404 / 444; without the block-wide barrier per tile (a full
// and an empty mbarrier per stage, the copies issued by the trailing warpgroup; branch
// wip/fwd-no-barrier) 317 / 459 / 494 against 309 / 462 / 471 in the same call, inside the
// call-to-call spread and with spills at d64, so not kept. Before TMA (experiments/tile_shapes.cu),
// ping-pong 284 / 409 / 445 against 268 / 393 / 434 without, and one warpgroup with 64-key tiles
// (two blocks per multiprocessor) 273 / 356 / 365.
// d128 overlaps softmax with O += P V inside each warpgroup (three stages), without ping-pong.
// experiments/tile_shapes.cu, one call (2026-12-01 04:00 UTC; 64 x 1k / 16 x 4k / 4 x 16k / mixed
// lengths, TFLOP/s): overlap 308 / 492 / 538 / 412; overlap + ping-pong 315 / 480 / 521 / 404;
// without overlap, ping-pong (the previous library shape) 313 / 462 / 517 / 392 and no ping-pong
// 309 / 486 / 531 / 406. d64 does not overlap: with 3 warpgroups (168 registers per thread) it
// spills 44-192 bytes.
template <int D>
struct HopperForwardConfig
    : std::conditional_t<D == 64, HopperForwardTile<64, 3, 128, true, 2, false>,
                         HopperForwardTile<D, 2, 128, false, 3, true>> {};

template <class T, class Cfg, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_forward_kernel(const AttentionParams p, const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap v_map, int64_t slots) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kD;
  constexpr int kBM = Cfg::kBlockM;
  constexpr int kBN = Cfg::kBlockN;
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;
  extern __shared__ unsigned char smem_raw[];

  const TileSlot slot = find_slot<kBM, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (p.heads / p.kv_heads);
  const SequenceBounds seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b);
  const int64_t m0 = slot.block * kBM;
  const int64_t m1 = m0 + kBM < seq.q_len ? m0 + kBM : seq.q_len;
  const TileWalk walk =
      tiles_over(keys_for_queries(seq, m0, m1, p.causal, p.window_left, p.window_right), kBN);
  const int64_t n_first = walk.first;
  const int num_tiles = walk.count;

  const T* q = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride + hk * p.v_head_stride;

  const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t sK = sQ + QTile::kBytes;
  constexpr int kStages = Cfg::kStages;
  const uint32_t sV = sK + kStages * KvTile::kBytes;
  auto stage_full = [&](int t) { return sQ + Cfg::kBarrierOffset + 8 * (t % kStages); };
  // Queues K/V tile t into stage t % kStages; every thread arrives on the stage's barrier once its
  // cp.async copies (if any) have landed, and the TMA copies count in bytes.
  auto load_kv = [&](int t) {
    const int64_t n0 = n_first + static_cast<int64_t>(t) * kBN;
    const uint32_t stage = (t % kStages) * KvTile::kBytes;
    if (n0 + kBN <= seq.k_len) {
      if (threadIdx.x == 0) {
        mbarrier_expect_tx(stage_full(t), 2 * KvTile::kBytes);
        const int row = static_cast<int>(seq.k_begin + n0);
        tma_load_gmma_tile<KvTile, D>(sK + stage, k_map, hk, row, stage_full(t));
        tma_load_gmma_tile<KvTile, D>(sV + stage, v_map, hk, row, stage_full(t));
      }
    } else {
      load_gmma_tile_async<kBN, D, Cfg::kThreads>(sK + stage, k, p.k_row_stride, n0, seq.k_len);
      load_gmma_tile_async<kBN, D, Cfg::kThreads>(sV + stage, v, p.v_row_stride, n0, seq.k_len);
    }
    cp_async_arrive(stage_full(t));
  };

  if (threadIdx.x == 0) {
    for (int t = 0; t < kStages; ++t) mbarrier_init(stage_full(t), Cfg::kThreads);
  }
  load_gmma_tile_async<kBM, D, Cfg::kThreads>(sQ, q, p.q_row_stride, m0, seq.q_len);
  cp_async_commit();
  __syncthreads();  // the barriers are initialized
  // A stage is in use for kLag iterations from its wait: the next tile's refill targets the stage
  // of tile t - kLag. Tiles 0 .. kStages - kLag - 1 go ahead; tile 0's arrivals wait for Q's too.
  constexpr int kLag = Cfg::kOverlap ? 2 : 1;
  for (int t = 0; t < kStages - kLag && t < num_tiles; ++t) load_kv(t);

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int wg = warp / 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;   // accumulator row (and row + 8) inside the warp's 16
  const int qd = lane % 4;  // accumulator column pair
  const int warp_row = warp * 16;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  const float c_log2 = kSoftcap ? kLog2e : p.softmax_scale * kLog2e;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};  // per thread; reduced over the quad at the end
  // Visibility of keys from this thread's rows warp_row + g + 8 * r.
  const RowVisibility vis =
      row_visibility(seq, m0 + warp_row + g, p.causal, p.window_left, p.window_right, 32);
  const uint32_t q_rows = sQ + wg * 64 * 128;  // this warpgroup's 64 rows in each column block
  // P of the last tile softmax went through, as the A operand of O += P V.
  uint32_t pf[kBN / 16][4];

  // Waits for tile t's stage, refills the stage of tile t - kLag (every warpgroup is done with it
  // once all have passed the block-wide barrier), and waits for this warpgroup's turn to issue.
  auto begin_tile = [&](int t) {
    mbarrier_wait(stage_full(t), (t / kStages) & 1);
    fence_proxy_async();  // cp.async writes (Q, a partial tile) before wgmma reads them
    __syncthreads();
    if (t + kStages - kLag < num_tiles) load_kv(t + kStages - kLag);
    if constexpr (Cfg::kPingPong) {
      if (wg > 0) named_barrier_sync(wg, 256);
    }
  };
  auto end_turn = [&] {
    if constexpr (Cfg::kPingPong) {
      if (wg + 1 < Cfg::kWarpgroups) named_barrier_arrive(wg + 1, 256);
    }
  };
  // Issues S = Q K^T for tile t as one wgmma group (after a fence covering o and pf too).
  auto issue_s = [&](int t, float (&s)[kBN / 2]) {
    const uint32_t stage = (t % kStages) * KvTile::kBytes;
    pin_registers(s);
    pin_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk % 4) * 32;  // 16 columns = 32 bytes inside a 128-byte row
      const uint64_t dq = gmma_desc(q_rows + (kk / 4) * QTile::kBlockBytes + col, 0, 1024);
      const uint64_t dk = gmma_desc(sK + stage + (kk / 4) * KvTile::kBlockBytes + col, 0, 1024);
      Wgmma<T, kBN>::template ss<0, 0>(s, dq, dk, kk > 0);
    }
    wgmma_commit();
  };
  // Issues O += P V for tile t (P in pf, fenced by the caller) as one wgmma group.
  auto issue_pv = [&](int t) {
    const uint32_t stage = (t % kStages) * KvTile::kBytes;
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint64_t dv = gmma_desc(sV + stage + kk * 16 * 128, KvTile::kBlockBytes, 1024);
      Wgmma<T, D>::template rs<1>(o, pf[kk], dv, 1);
    }
    wgmma_commit();
  };
  // P of key octet i, row half r into pf: the accumulator layout of key octets 2kk and 2kk + 1 is
  // the A layout of k-step kk.
  auto pack_pair = [&](const float (&s)[kBN / 2], int i, int r) {
    pf[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]);
  };
  // Masks S of tile t and turns it into P in place (fp32) by the online softmax; alpha is what
  // O must be scaled by. Without kOverlap it also scales O and fills pf.
  auto softmax = [&](int t, float (&s)[kBN / 2], float (&alpha)[2]) {
    const int64_t n0 = n_first + static_cast<int64_t>(t) * kBN;
    if constexpr (kSoftcap) {
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) s[i] = raw_score<kSoftcap>(s[i], p.softmax_scale, p.softcap);
    }
    if (!tile_fully_visible(seq, m0, m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                            p.window_right)) {
      const int j0 = static_cast<int>(n0) + 2 * qd;
      const int k_len = static_cast<int>(seq.k_len);
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int delta = 8 * (c / 2);
          const int j = j0 + i * 8 + (c & 1);
          if (j < vis.begin + delta || j >= vis.end + delta || j >= k_len) s[4 * i + c] = -INFINITY;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[r], mx);
      // A row with no visible key so far keeps max -inf; subtract 0 so exp2 gives 0, not NaN.
      const float m_use = (m_new == -INFINITY ? 0.f : m_new) * c_log2;
      alpha[r] = fast_exp2(row_max[r] * c_log2 - m_use);
      row_max[r] = m_new;
      row_sum[r] *= alpha[r];
      if constexpr (!Cfg::kOverlap) {  // no product into O in flight (fewer live registers)
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          o[4 * i + 2 * r] *= alpha[r];
          o[4 * i + 2 * r + 1] *= alpha[r];
        }
      }
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        s[4 * i + 2 * r] = fast_exp2(fmaf(s[4 * i + 2 * r], c_log2, -m_use));
        s[4 * i + 2 * r + 1] = fast_exp2(fmaf(s[4 * i + 2 * r + 1], c_log2, -m_use));
        row_sum[r] += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
        if constexpr (!Cfg::kOverlap) pack_pair(s, i, r);
      }
    }
  };
  // With kOverlap, once O's pending product has landed: O *= alpha and P into pf (without it,
  // softmax does both as it goes, with fewer registers live).
  auto rescale_and_pack = [&](const float (&s)[kBN / 2], const float (&alpha)[2]) {
    pin_registers(o);
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[4 * i + c] *= alpha[c / 2];
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) pack_pair(s, i, r);
  };

  if constexpr (Cfg::kOverlap) {
    // Tile t's S = Q K^T and tile t - 1's O += P V go out together; tile t's softmax runs while
    // the latter does. Tile 0 has no product before it, so it is peeled off: a wgmma issued on a
    // divergent path makes ptxas serialize them all.
    if (num_tiles > 0) {
      float s[kBN / 2], alpha[2];
      begin_tile(0);
      issue_s(0, s);
      end_turn();
      wgmma_wait<0>();
      pin_registers(s);
      softmax(0, s, alpha);
      rescale_and_pack(s, alpha);
    }
    for (int t = 1; t < num_tiles; ++t) {
      float s[kBN / 2], alpha[2];
      begin_tile(t);
      issue_s(t, s);
      issue_pv(t - 1);
      end_turn();
      wgmma_wait<1>();
      pin_registers(s);
      softmax(t, s, alpha);
      wgmma_wait<0>();
      rescale_and_pack(s, alpha);
    }
    if (num_tiles > 0) {
      pin_registers(o);
      wgmma_fence();
      issue_pv(num_tiles - 1);
      wgmma_wait<0>();
      pin_registers(o);
    }
  } else {
    for (int t = 0; t < num_tiles; ++t) {
      float s[kBN / 2], alpha[2];
      begin_tile(t);
      issue_s(t, s);
      wgmma_wait<0>();
      end_turn();
      pin_registers(s);
      softmax(t, s, alpha);
      pin_registers(o);
      wgmma_fence();
      issue_pv(t);
      wgmma_wait<0>();
      pin_registers(o);
    }
  }
  cp_async_wait<0>();

  T* out = static_cast<T*>(p.out) + seq.q_begin * p.out_row_stride + h * p.out_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t i = m0 + warp_row + g + 8 * r;
    if (i >= seq.q_len) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T* row = out + i * p.out_row_stride;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(row + dn * 8 + 2 * qd) =
          Mma<T>::pack(o[4 * dn + 2 * r] * inv, o[4 * dn + 2 * r + 1] * inv);
    if (qd == 0 && p.lse != nullptr)
      p.lse[h * p.lse_head_stride + seq.q_begin + i] =
          sum > 0.f ? (row_max[r] * c_log2 + log2f(sum)) * kLn2 : INFINITY;
  }
#endif
}

template <class T, class Cfg>
void launch_hopper_forward_with(const AttentionParams& p, cudaStream_t stream) {
  const int64_t slots = slot_count(p.total_q, p.batch, Cfg::kBlockM);
  if (slots <= 0 || p.heads <= 0) return;
  const auto kernel = p.softcap > 0.f ? hopper_forward_kernel<T, Cfg, true>
                                      : hopper_forward_kernel<T, Cfg, false>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: cannot reserve shared memory: ") +
                cudaGetErrorString(attr));
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const CUtensorMap k_map = head_tile_map(p.k, kBf16, p.total_k, p.kv_heads, Cfg::kD,
                                          p.k_row_stride, p.k_head_stride, Cfg::kBlockN);
  const CUtensorMap v_map = head_tile_map(p.v, kBf16, p.total_k, p.kv_heads, Cfg::kD,
                                          p.v_row_stride, p.v_head_stride, Cfg::kBlockN);
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, k_map, v_map, slots);
  check_launch("the Hopper forward kernel");
}

template <class T, int D>
void launch_hopper_forward(const AttentionParams& p, cudaStream_t stream) {
  launch_hopper_forward_with<T, HopperForwardConfig<D>>(p, stream);
}

}  // namespace varpack::cuda
