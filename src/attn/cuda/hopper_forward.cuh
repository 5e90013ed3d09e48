// Varlen attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a); the same
// algorithm, masks and outputs as forward_kernel.cuh (the sm_80 path), on larger tiles. One block =
// one query tile of a few consecutive heads, one head after the other (the next head's first loads
// overlap the previous head's end); each warpgroup owns 64 query rows. K/V tiles of kBlockN keys stream
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
#include <cstdlib>
#include <type_traits>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/forward_kernel.cuh"
#include "attn/cuda/kernel_common.cuh"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "attn/cuda/warp_rows_out.cuh"
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
                          const __grid_constant__ CUtensorMap v_map, int64_t slots,
                          int heads_per_block) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kD;
  constexpr int kBM = Cfg::kBlockM;
  constexpr int kBN = Cfg::kBlockN;
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;
  extern __shared__ unsigned char smem_raw[];

  const TileSlot slot = find_slot<kBM, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots);
  if (!slot.valid) return;
  const int group = p.heads / p.kv_heads;
  const SequenceBounds seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b);
  const int64_t m0 = slot.block * kBM;
  const int64_t m1 = m0 + kBM < seq.q_len ? m0 + kBM : seq.q_len;
  // The same query rows of every head see the same keys, so all of the block's heads walk the same
  // tiles.
  const TileWalk walk =
      tiles_over(keys_for_queries(seq, m0, m1, p.causal, p.window_left, p.window_right), kBN);
  const int64_t n_first = walk.first;
  const int num_tiles = walk.count;

  const T* q_seq = static_cast<const T*>(p.q) + seq.q_begin * p.q_row_stride;
  const T* k_seq = static_cast<const T*>(p.k) + seq.k_begin * p.k_row_stride;
  const T* v_seq = static_cast<const T*>(p.v) + seq.k_begin * p.v_row_stride;

  const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t sK = sQ + QTile::kBytes;
  constexpr int kStages = Cfg::kStages;
  const uint32_t sV = sK + kStages * KvTile::kBytes;
  // The block streams num_tiles K/V tiles per head, head after head; its g-th tile in all goes
  // through stage g % kStages, and waits for phase (g / kStages) & 1 of that stage's barrier.
  auto stage_full = [&](int g) { return sQ + Cfg::kBarrierOffset + 8 * (g % kStages); };
  // Queues K/V tile t of kv head hk, the block's tile g, into its stage; every thread arrives on
  // the stage's barrier once its cp.async copies (if any, Q's included) have landed, and the TMA
  // copies count in bytes.
  auto load_kv = [&](int t, int g, int hk) {
    const int64_t n0 = n_first + static_cast<int64_t>(t) * kBN;
    const uint32_t stage = (g % kStages) * KvTile::kBytes;
    if (n0 + kBN <= seq.k_len) {
      if (threadIdx.x == 0) {
        mbarrier_expect_tx(stage_full(g), 2 * KvTile::kBytes);
        const int row = static_cast<int>(seq.k_begin + n0);
        tma_load_gmma_tile<KvTile, D>(sK + stage, k_map, hk, row, stage_full(g));
        tma_load_gmma_tile<KvTile, D>(sV + stage, v_map, hk, row, stage_full(g));
      }
    } else {
      load_gmma_tile_async<kBN, D, Cfg::kThreads>(sK + stage, k_seq + hk * p.k_head_stride,
                                                  p.k_row_stride, n0, seq.k_len);
      load_gmma_tile_async<kBN, D, Cfg::kThreads>(sV + stage, v_seq + hk * p.v_head_stride,
                                                  p.v_row_stride, n0, seq.k_len);
    }
    cp_async_arrive(stage_full(g));
  };
  // A stage is in use for kLag iterations from its wait: the next tile's refill targets the stage
  // of tile t - kLag. Tiles 0 .. kStages - kLag - 1 go ahead with Q; tile 0's arrivals wait for
  // Q's too.
  constexpr int kLag = Cfg::kOverlap ? 2 : 1;
  auto start_head = [&](int head, int g0) {
    load_gmma_tile_async<kBM, D, Cfg::kThreads>(sQ, q_seq + head * p.q_head_stride,
                                                p.q_row_stride, m0, seq.q_len);
    cp_async_commit();
    for (int t = 0; t < kStages - kLag && t < num_tiles; ++t) load_kv(t, g0 + t, head / group);
  };

  if (threadIdx.x == 0) {
    for (int t = 0; t < kStages; ++t) mbarrier_init(stage_full(t), Cfg::kThreads);
  }
  __syncthreads();  // the barriers are initialized
  const int h_first = static_cast<int>(blockIdx.y) * heads_per_block;
  if (num_tiles > 0) start_head(h_first, 0);

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int wg = warp / 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;   // accumulator row (and row + 8) inside the warp's 16
  const int qd = lane % 4;  // accumulator column pair
  const int warp_row = warp * 16;

  float o[D / 2];
  const float c_log2 = kSoftcap ? kLog2e : p.softmax_scale * kLog2e;
  float row_max[2], row_sum[2];  // row_sum per thread; reduced over the quad at the end
  // Visibility of keys from this thread's rows warp_row + g + 8 * r.
  const RowVisibility vis =
      row_visibility(seq, m0 + warp_row + g, p.causal, p.window_left, p.window_right, 32);
  const uint32_t q_rows = sQ + wg * 64 * 128;  // this warpgroup's 64 rows in each column block
  // P of the last tile softmax went through, as the A operand of O += P V.
  uint32_t pf[kBN / 16][4];
  // A warp's output scratch (WarpRowsOut): warps fill the K half of a stage, then its V half.
  using RowsOut = WarpRowsOut<T, D>;
  constexpr int kWarpsPerHalf = KvTile::kBytes / RowsOut::kScratchBytes;
  static_assert(2 * kWarpsPerHalf >= Cfg::kThreads / 32, "a stage holds every warp's output rows");
  auto output_scratch = [&](int stage, int w) {
    return (w < kWarpsPerHalf ? sK : sV) + stage * KvTile::kBytes +
           (w % kWarpsPerHalf) * RowsOut::kScratchBytes;
  };
  int h = h_first;
  int done = 0;  // K/V tiles the block streamed for its earlier heads: tile t is its tile done + t

  // Waits for tile t's stage, refills the stage of tile t - kLag (every warpgroup is done with it
  // once all have passed the block-wide barrier), and waits for this warpgroup's turn to issue.
  auto begin_tile = [&](int t) {
    mbarrier_wait(stage_full(done + t), ((done + t) / kStages) & 1);
    fence_proxy_async();  // cp.async writes (Q, a partial tile) before wgmma reads them
    __syncthreads();
    if (t + kStages - kLag < num_tiles)
      load_kv(t + kStages - kLag, done + t + kStages - kLag, h / group);
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
    const uint32_t stage = ((done + t) % kStages) * KvTile::kBytes;
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
    const uint32_t stage = ((done + t) % kStages) * KvTile::kBytes;
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

  for (; h < h_first + heads_per_block; ++h, done += num_tiles) {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
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
    // Every warpgroup is past its last S = Q K^T and done with every stage but the last tile's: the
    // next head's Q and first K/V tile load while this head's last O += P V and its output go.
    __syncthreads();
    if (h + 1 < h_first + heads_per_block && num_tiles > 0) start_head(h + 1, done + num_tiles);
    if constexpr (Cfg::kOverlap) {
      wgmma_wait<0>();
      pin_registers(o);
    }

    // The output goes out through shared memory (WarpRowsOut), in the stage of the block's tile
    // done + num_tiles + 1, which nothing uses until the next head's first refill, after its first
    // block-wide barrier.
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[r] = sum > 0.f ? 1.f / sum : 0.f;
      const int64_t i = m0 + warp_row + g + 8 * r;
      if (qd == 0 && p.lse != nullptr && i < seq.q_len)
        p.lse[h * p.lse_head_stride + seq.q_begin + i] =
            sum > 0.f ? (row_max[r] * c_log2 + log2f(sum)) * kLn2 : INFINITY;
    }
    RowsOut::store(
        o, inv, output_scratch((done + num_tiles + 1) % kStages, warp),
        static_cast<T*>(p.out) + (seq.q_begin + m0 + warp_row) * p.out_row_stride +
            h * p.out_head_stride,
        p.out_row_stride, seq.q_len - m0 - warp_row, lane);
    // The scratch stage is refilled by the TMA unit (the async proxy) after the next head's first
    // block-wide barrier: order this thread's accesses to it before that.
    fence_proxy_async();
  }
#endif
}

// The warp-specialized forward: a producer warpgroup (few registers, setmaxnreg) loads Q and the
// K/V tiles, C consumer warpgroups of 64 query rows each compute; no block-wide barrier after the
// start. K and V have rings of their own (a full and an empty mbarrier per stage), so a K stage
// is refilled as soon as every consumer's S = Q K^T on it is done, and a V stage once O += P V is.
// Each consumer issues tile t's S = Q K^T with tile t - 1's O += P V and runs tile t's softmax
// while the latter runs (as HopperForwardTile's Overlap); with kPingPong the consumers take turns
// to issue (named barriers), so one's softmax overlaps the others' products. The output goes out
// through a scratch of its own (WarpRowsOut), so the producer is never held up by it.
template <int D, int Consumers, int BlockN, int Stages, bool PingPong, int ProducerRegisters,
          int ConsumerRegisters>
struct HopperForwardWsTile {
  static constexpr int kD = D;
  static constexpr int kConsumers = Consumers;
  static constexpr int kThreads = 128 * (Consumers + 1);
  static constexpr int kBlockM = 64 * Consumers;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr bool kPingPong = PingPong && Consumers > 1;
  static constexpr int kProducerRegisters = ProducerRegisters;
  static constexpr int kConsumerRegisters = ConsumerRegisters;
  static_assert(ProducerRegisters * 128 + ConsumerRegisters * 128 * Consumers <= 65536,
                "the register file holds every warpgroup's budget");
  using QTile = GmmaTile<kBlockM, D>;
  using KvTile = GmmaTile<kBlockN, D>;
  static constexpr int kScratchBytes = 16 * (2 * D + 16);  // WarpRowsOut's, per consumer warp
  // Q, the K stages, the V stages (from a 1024-byte boundary), the output scratch, mbarriers.
  static constexpr int kKOffset = QTile::kBytes;
  static constexpr int kVOffset = kKOffset + Stages * KvTile::kBytes;
  static constexpr int kOutOffset = kVOffset + Stages * KvTile::kBytes;
  static constexpr int kBarrierOffset = kOutOffset + 4 * Consumers * kScratchBytes;
  static constexpr int kBarriers = 2 + 4 * Stages;  // Q full/empty; per stage K and V full/empty
  static constexpr int kSmemBytes = 1024 + kBarrierOffset + kBarriers * 8;
};

// One unit of a forward block's work: a query tile of one head. Work item w is head w % heads of
// slot w / heads (slots as find_slot numbers them), so the heaviest query tiles of every head come
// first. An item on one of the spare slots of find_slot is not valid and is skipped.
struct ForwardItem {
  bool valid = false;
  SequenceBounds seq;
  int64_t m0 = 0;       // first query row, in the sequence
  int head = 0;
  int64_t n_first = 0;  // first key of the first K/V tile
  int num_tiles = 0;    // K/V tiles the query tile sees
};

template <int kBM, int kBN>
__device__ __forceinline__ ForwardItem forward_item(const AttentionParams& p, int64_t slots,
                                                    int64_t w) {
  ForwardItem it;
  const TileSlot slot = find_slot<kBM, TileOrder::kLastFirst>(p.cu_seqlens_q, p.batch, slots,
                                                              w / p.heads);
  if (!slot.valid) return it;
  it.valid = true;
  it.seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b);
  it.m0 = slot.block * kBM;
  it.head = static_cast<int>(w % p.heads);
  const int64_t m1 = it.m0 + kBM < it.seq.q_len ? it.m0 + kBM : it.seq.q_len;
  const TileWalk walk = tiles_over(
      keys_for_queries(it.seq, it.m0, m1, p.causal, p.window_left, p.window_right), kBN);
  it.n_first = walk.first;
  it.num_tiles = walk.count;
  return it;
}

// heads_per_block > 0: block (x, y) runs items x * heads + y * heads_per_block + j, j <
// heads_per_block (one query tile, consecutive heads). heads_per_block == 0 (persistent): block b
// of a grid of G runs items b, b + G, b + 2G, ... Both the producer and the consumers walk the
// block's items in this order; the K/V tiles of all of them form one sequence, the block's tile g
// going through stage g % kStages as fill number g / kStages of that stage.
template <class T, class Cfg, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    hopper_forward_ws_kernel(const AttentionParams p, const __grid_constant__ CUtensorMap k_map,
                             const __grid_constant__ CUtensorMap v_map, int64_t slots,
                             int heads_per_block) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kD;
  constexpr int kBM = Cfg::kBlockM;
  constexpr int kBN = Cfg::kBlockN;
  constexpr int kStages = Cfg::kStages;
  constexpr int kConsumerWarps = 4 * Cfg::kConsumers;
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;
  extern __shared__ unsigned char smem_raw[];

  const int group = p.heads / p.kv_heads;
  const int64_t items = slots * p.heads;
  // The block's j-th item, or -1 past its last.
  auto item_index = [&](int j) -> int64_t {
    if (heads_per_block > 0)
      return j < heads_per_block ? static_cast<int64_t>(blockIdx.x) * p.heads +
                                       static_cast<int64_t>(blockIdx.y) * heads_per_block + j
                                 : -1;
    const int64_t w = blockIdx.x + static_cast<int64_t>(j) * gridDim.x;
    return w < items ? w : -1;
  };

  const uint32_t sQ = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t sK = sQ + Cfg::kKOffset;
  const uint32_t sV = sQ + Cfg::kVOffset;
  const uint32_t bars = sQ + Cfg::kBarrierOffset;
  const uint32_t q_full = bars, q_empty = bars + 8;
  auto k_full = [&](int g) { return bars + 16 + 8 * (g % kStages); };
  auto k_empty = [&](int g) { return bars + 16 + 8 * (kStages + g % kStages); };
  auto v_full = [&](int g) { return bars + 16 + 8 * (2 * kStages + g % kStages); };
  auto v_empty = [&](int g) { return bars + 16 + 8 * (3 * kStages + g % kStages); };

  // Full barriers: the producer warpgroup's 128 threads arrive (after their cp.async copies, if
  // any, have landed), plus the TMA bytes; empty ones: every consumer warp.
  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 128);
    mbarrier_init(q_empty, kConsumerWarps);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(k_full(s), 128);
      mbarrier_init(v_full(s), 128);
      mbarrier_init(k_empty(s), kConsumerWarps);
      mbarrier_init(v_empty(s), kConsumerWarps);
    }
  }
  __syncthreads();  // the barriers are initialized

  if (threadIdx.x < 128) {  // the producer warpgroup
    warpgroup_registers_down<Cfg::kProducerRegisters>();
    int g = 0;       // the block's K/V tiles so far
    int q_loads = 0;  // Q tiles so far (items with at least one K/V tile)
    for (int j = 0;; ++j) {
      const int64_t w = item_index(j);
      if (w < 0) break;
      const ForwardItem it = forward_item<kBM, kBN>(p, slots, w);
      if (!it.valid || it.num_tiles == 0) continue;
      const int hk = it.head / group;
      const T* q = static_cast<const T*>(p.q) + it.seq.q_begin * p.q_row_stride +
                   it.head * p.q_head_stride;
      const T* k = static_cast<const T*>(p.k) + it.seq.k_begin * p.k_row_stride +
                   hk * p.k_head_stride;
      const T* v = static_cast<const T*>(p.v) + it.seq.k_begin * p.v_row_stride +
                   hk * p.v_head_stride;
      // Key tile n0 into a stage: a whole tile by the TMA unit, issued by thread 0; a sequence's
      // partial last tile by cp.async from all 128 threads, zero-filling the keys past its end
      // (nothing past the sequence is read).
      auto load = [&](uint32_t dst, const CUtensorMap& map, const T* src, int64_t row_stride,
                      int64_t n0, uint32_t full) {
        if (n0 + kBN <= it.seq.k_len) {
          if (threadIdx.x == 0) {
            mbarrier_expect_tx(full, KvTile::kBytes);
            tma_load_gmma_tile<KvTile, D>(dst, map, hk, static_cast<int>(it.seq.k_begin + n0),
                                          full);
          }
        } else {
          load_gmma_tile_async<kBN, D, 128, 1>(dst, src, row_stride, n0, it.seq.k_len);
        }
        cp_async_arrive(full);
      };
      if (q_loads > 0) mbarrier_wait(q_empty, (q_loads - 1) & 1);
      load_gmma_tile_async<kBM, D, 128, 1>(sQ, q, p.q_row_stride, it.m0, it.seq.q_len);
      cp_async_arrive(q_full);
      ++q_loads;
      for (int t = 0; t < it.num_tiles; ++t, ++g) {
        const uint32_t stage = (g % kStages) * KvTile::kBytes;
        const int64_t n0 = it.n_first + static_cast<int64_t>(t) * kBN;
        if (g >= kStages) mbarrier_wait(k_empty(g), ((g / kStages) & 1) ^ 1);
        load(sK + stage, k_map, k, p.k_row_stride, n0, k_full(g));
        if (g >= kStages) mbarrier_wait(v_empty(g), ((g / kStages) & 1) ^ 1);
        load(sV + stage, v_map, v, p.v_row_stride, n0, v_full(g));
      }
    }
    return;
  }

  warpgroup_registers_up<Cfg::kConsumerRegisters>();
  const int warp = static_cast<int>(threadIdx.x) / 32 - 4;  // consumer warp
  const int wg = warp / 4;                                  // consumer warpgroup
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;   // accumulator row (and row + 8) inside the warp's 16
  const int qd = lane % 4;  // accumulator column pair
  const int warp_row = warp * 16;

  float o[D / 2];
  const float c_log2 = kSoftcap ? kLog2e : p.softmax_scale * kLog2e;
  float row_max[2], row_sum[2];  // row_sum per thread; reduced over the quad at the end
  const uint32_t q_rows = sQ + wg * 64 * 128;  // this warpgroup's 64 rows in each column block
  // P of the last tile softmax went through, as the A operand of O += P V.
  uint32_t pf[kBN / 16][4];
  using RowsOut = WarpRowsOut<T, D>;
  static_assert(RowsOut::kScratchBytes == Cfg::kScratchBytes, "one scratch per consumer warp");
  const uint32_t scratch = sQ + Cfg::kOutOffset + warp * Cfg::kScratchBytes;
  ForwardItem it;      // the item being computed
  RowVisibility vis;   // keys visible from this thread's rows warp_row + g + 8 * r of it

  // Turns (kPingPong): consumer c issues its products when named barrier 1 + c lets it, then lets
  // c + 1 (mod the consumers) go. The last consumer lets the first go once before anything, and
  // the first absorbs the last one's final hand-over at the exit, so no arrival is left pending.
  constexpr int kTurnThreads = 256;  // the consumer that waits + the one that lets it go
  if constexpr (Cfg::kPingPong) {
    if (wg == Cfg::kConsumers - 1) named_barrier_arrive(1, kTurnThreads);
  }
  auto begin_turn = [&] {
    if constexpr (Cfg::kPingPong) named_barrier_sync(1 + wg, kTurnThreads);
  };
  auto end_turn = [&] {
    if constexpr (Cfg::kPingPong)
      named_barrier_arrive(1 + (wg + 1) % Cfg::kConsumers, kTurnThreads);
  };
  // Waits for a full stage (then orders its cp.async bytes, if any, before wgmma reads them), and
  // hands an empty one back: one arrival per warp, once its wgmma reads of the stage are done.
  auto wait_full = [&](uint32_t bar, int g_all) {
    mbarrier_wait(bar, (g_all / kStages) & 1);
    fence_proxy_async();
  };
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbarrier_arrive(bar);
  };
  // Issues S = Q K^T for the block's tile g_all as one wgmma group (after a fence covering o and
  // pf too).
  auto issue_s = [&](int g_all, float (&s)[kBN / 2]) {
    const uint32_t stage = (g_all % kStages) * KvTile::kBytes;
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
  // Issues O += P V for the block's tile g_all (P in pf, fenced by the caller) as one wgmma group.
  auto issue_pv = [&](int g_all) {
    const uint32_t stage = (g_all % kStages) * KvTile::kBytes;
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint64_t dv = gmma_desc(sV + stage + kk * 16 * 128, KvTile::kBlockBytes, 1024);
      Wgmma<T, D>::template rs<1>(o, pf[kk], dv, 1);
    }
    wgmma_commit();
  };
  // Masks S of the item's tile t and turns it into P in place (fp32) by the online softmax; alpha
  // is what O must be scaled by (rescale_and_pack does, once O's pending product has landed).
  auto softmax = [&](int t, float (&s)[kBN / 2], float (&alpha)[2]) {
    const int64_t n0 = it.n_first + static_cast<int64_t>(t) * kBN;
    if constexpr (kSoftcap) {
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) s[i] = raw_score<kSoftcap>(s[i], p.softmax_scale, p.softcap);
    }
    if (!tile_fully_visible(it.seq, it.m0, it.m0 + kBM, n0, n0 + kBN, p.causal, p.window_left,
                            p.window_right)) {
      const int j0 = static_cast<int>(n0) + 2 * qd;
      const int k_len = static_cast<int>(it.seq.k_len);
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
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        s[4 * i + 2 * r] = fast_exp2(fmaf(s[4 * i + 2 * r], c_log2, -m_use));
        s[4 * i + 2 * r + 1] = fast_exp2(fmaf(s[4 * i + 2 * r + 1], c_log2, -m_use));
        row_sum[r] += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
      }
    }
  };
  // O *= alpha and P into pf: the accumulator layout of key octets 2kk and 2kk + 1 is the A
  // layout of k-step kk.
  auto rescale_and_pack = [&](const float (&s)[kBN / 2], const float (&alpha)[2]) {
    pin_registers(o);
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[4 * i + c] *= alpha[c / 2];
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        pf[i / 2][(i & 1) * 2 + r] = Mma<T>::pack(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]);
  };

  int g_next = 0;   // the block's K/V tiles so far
  int q_loads = 0;  // Q tiles so far
  for (int j = 0;; ++j) {
    const int64_t w = item_index(j);
    if (w < 0) break;
    it = forward_item<kBM, kBN>(p, slots, w);
    if (!it.valid) continue;
    vis = row_visibility(it.seq, it.m0 + warp_row + g, p.causal, p.window_left, p.window_right,
                         32);
    const int g0 = g_next;  // the block's index of the item's tile 0
    g_next += it.num_tiles;
#pragma unroll
    for (int k = 0; k < D / 2; ++k) o[k] = 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
    const int n = it.num_tiles;
    if (n > 0) {
      mbarrier_wait(q_full, q_loads & 1);
      ++q_loads;
      // Tile 0 has no product before it, so it is peeled off: a wgmma issued on a divergent path
      // makes ptxas serialize them all.
      {
        float s[kBN / 2], alpha[2];
        wait_full(k_full(g0), g0);
        begin_turn();
        issue_s(g0, s);
        end_turn();
        wgmma_wait<0>();
        release(k_empty(g0));
        if (n == 1) release(q_empty);
        pin_registers(s);
        softmax(0, s, alpha);
        rescale_and_pack(s, alpha);
      }
      for (int t = 1; t < n; ++t) {
        float s[kBN / 2], alpha[2];
        wait_full(k_full(g0 + t), g0 + t);
        wait_full(v_full(g0 + t - 1), g0 + t - 1);
        begin_turn();
        issue_s(g0 + t, s);
        issue_pv(g0 + t - 1);
        end_turn();
        wgmma_wait<1>();
        release(k_empty(g0 + t));
        if (t == n - 1) release(q_empty);
        pin_registers(s);
        softmax(t, s, alpha);
        wgmma_wait<0>();
        release(v_empty(g0 + t - 1));
        rescale_and_pack(s, alpha);
      }
      wait_full(v_full(g0 + n - 1), g0 + n - 1);
      pin_registers(o);
      wgmma_fence();
      issue_pv(g0 + n - 1);
      wgmma_wait<0>();
      pin_registers(o);
      release(v_empty(g0 + n - 1));
    }

    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[r] = sum > 0.f ? 1.f / sum : 0.f;
      const int64_t row = it.m0 + warp_row + g + 8 * r;
      if (qd == 0 && p.lse != nullptr && row < it.seq.q_len)
        p.lse[it.head * p.lse_head_stride + it.seq.q_begin + row] =
            sum > 0.f ? (row_max[r] * c_log2 + log2f(sum)) * kLn2 : INFINITY;
    }
    RowsOut::store(o, inv, scratch,
                   static_cast<T*>(p.out) + (it.seq.q_begin + it.m0 + warp_row) * p.out_row_stride +
                       it.head * p.out_head_stride,
                   p.out_row_stride, it.seq.q_len - it.m0 - warp_row, lane);
  }
  if constexpr (Cfg::kPingPong) {
    if (wg == 0) named_barrier_sync(1, kTurnThreads);
  }
#endif
}

// How many consecutive heads one block runs its query tile for. A block fills a multiprocessor
// (shared memory), so nothing hides its start (Q and the first K/V tiles) and end (the last
// O += P V, the output) unless the next head's loads overlap the previous head's end. But longer
// blocks can leave a tail: blocks start in order, longest-first only inside a sequence. So k heads
// per block only while the longest block (k x the longest sequence's key tiles) is within an
// eighth of one multiprocessor's share of the work, taken at its least: every sequence as long as
// the average (Cauchy-Schwarz), about half of it under causal masking. Not with a sliding window (not
// measured). Measured on the H200 (bf16, d128, causal, 16 heads, standalone benchmark, one call,
// 2026-12-01 06:17 UTC), TFLOP/s with 1 / 2 / 4 heads per block: 64 x 1k 293 / 317 / 325, 16 x 4k
// 444 / 448 / 464, 4 x 16k 504 / 504 / 504; 16 x 4096 at 3 / 25 / 50 / 75 / 90% padding 406 / 409
// / 400, 395 / 407 / 385, 368 / 364 / 344, 265 / 261 / 225, 138 / 132 / 110.
// VARPACK_HEADS_PER_BLOCK=k forces the largest divisor of the head count up to k (the tests use
// it: their batches are too small for the rule to pick more than one head).
inline int forward_heads_per_block(const AttentionParams& p, int block_m, int block_n) {
  if (const char* forced = std::getenv("VARPACK_HEADS_PER_BLOCK")) {
    int k = std::atoi(forced);
    while (k > 1 && p.heads % k != 0) --k;
    return k < 1 ? 0 : k;
  }
  const bool window = p.window_left >= 0 || (!p.causal && p.window_right >= 0);
  if (window || p.batch <= 0) return 1;
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess)
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const double q_tiles = static_cast<double>(p.total_q) / block_m;
  const double k_tiles = static_cast<double>(p.total_k) / block_n;
  const double per_query_tile = p.causal ? (k_tiles / p.batch + 1) / 2 : k_tiles / p.batch;
  const double least_work = q_tiles * per_query_tile * p.heads;
  const double longest = std::ceil(static_cast<double>(p.max_seqlen_k) / block_n);
  for (int k : {4, 2})
    if (p.heads % k == 0 && 8.0 * k * longest <= least_work / sms) return k;
  return 1;
}

// heads_per_block 0: forward_heads_per_block's choice; otherwise a divisor of p.heads.
template <class T, class Cfg>
void launch_hopper_forward_with(const AttentionParams& p, cudaStream_t stream,
                                int heads_per_block = 0) {
  const int64_t slots = slot_count(p.total_q, p.batch, Cfg::kBlockM);
  if (slots <= 0 || p.heads <= 0) return;
  if (heads_per_block <= 0)
    heads_per_block = forward_heads_per_block(p, Cfg::kBlockM, Cfg::kBlockN);
  if (p.heads % heads_per_block != 0)
    throw Error("varpack CUDA attention: heads_per_block must divide the number of heads");
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
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads / heads_per_block));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, k_map, v_map, slots,
                                                           heads_per_block);
  check_launch("the Hopper forward kernel");
}

// heads_per_block -1: forward_heads_per_block's choice; 0: persistent (one block per
// multiprocessor); otherwise a divisor of p.heads.
template <class T, class Cfg>
void launch_hopper_forward_ws_with(const AttentionParams& p, cudaStream_t stream,
                                   int heads_per_block = -1) {
  const int64_t slots = slot_count(p.total_q, p.batch, Cfg::kBlockM);
  if (slots <= 0 || p.heads <= 0) return;
  if (heads_per_block < 0)
    heads_per_block = forward_heads_per_block(p, Cfg::kBlockM, Cfg::kBlockN);
  if (heads_per_block > 0 && p.heads % heads_per_block != 0)
    throw Error("varpack CUDA attention: heads_per_block must divide the number of heads");
  const auto kernel = p.softcap > 0.f ? hopper_forward_ws_kernel<T, Cfg, true>
                                      : hopper_forward_ws_kernel<T, Cfg, false>;
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
  dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads / (heads_per_block > 0 ? heads_per_block : 1)));
  if (heads_per_block == 0) {
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) == cudaSuccess)
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (const char* forced = std::getenv("VARPACK_PERSISTENT_BLOCKS")) sms = std::atoi(forced);
    const int64_t items = slots * p.heads;
    grid = dim3(static_cast<unsigned>(items < sms ? items : sms));
  }
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, k_map, v_map, slots,
                                                           heads_per_block);
  check_launch("the Hopper forward kernel");
}

template <int D>
struct HopperForwardWsConfig
    : std::conditional_t<D == 64, HopperForwardWsTile<64, 2, 128, 3, true, 24, 240>,
                         HopperForwardWsTile<D, 2, 128, 2, true, 24, 240>> {};

template <class T, int D>
void launch_hopper_forward(const AttentionParams& p, cudaStream_t stream) {
  launch_hopper_forward_ws_with<T, HopperForwardWsConfig<D>>(p, stream);
}

}  // namespace varpack::cuda
