// K and V tiles handed from a producer warpgroup to consumer warpgroups through two rings of
// shared-memory stages, one for K and one for V, each stage with a full and an empty mbarrier (the
// warp-specialized Hopper kernels: hopper_forward.cuh, hopper_dq.cuh). Separate rings let a K stage
// be refilled as soon as the products that read K are done, and a V stage once those reading V are.
// The block's g-th tile goes through stage g % kStages as fill number g / kStages of that stage.
// - Full barriers: the producer warpgroup's 128 threads arrive, each once its cp.async copies (if
//   any) have landed, and the TMA copies count in bytes. A tile wholly inside its sequence goes
//   through the TMA unit, issued by thread 0; a sequence's partial last tile by cp.async from all
//   128 threads, which zero-fills the keys past its end (nothing past the sequence is read).
// - Empty barriers: one arrival per consumer warp, once its wgmma reads of the stage are done.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attn/cuda/async_pipeline.cuh"
#include "attn/cuda/wgmma.cuh"
#include "varpack/attention_bounds.h"

namespace varpack::cuda {

// Producer warpgroup, all 128 threads: rows [row0, row0 + ROWS) of one head of a sequence (whose
// first row is the tensor's row first_row, and which has `rows` rows; src: its first row of that
// head) into the GmmaTile at dst, arriving on the mbarrier `full`: by the TMA unit (thread 0,
// `map`'s boxes of ROWS rows, counted in bytes) where all of them lie inside the sequence, else by
// cp.async from the 128 threads, zero-filling the rows past its end (nothing past it is read; a
// box would bring the next sequence's rows). DataD: the head dim in memory (the map's boxes past
// it are zero-filled by the TMA unit).
template <int ROWS, int D, int DataD, class T>
__device__ __forceinline__ void load_rows_tma_or_async(uint32_t dst, const CUtensorMap& map,
                                                       int head, int64_t first_row, const T* src,
                                                       int64_t row_stride, int64_t row0,
                                                       int64_t rows, uint32_t full) {
  using Tile = GmmaTile<ROWS, D>;
  if (row0 + ROWS <= rows) {
    if (threadIdx.x == 0) {
      mbarrier_expect_tx(full, Tile::kBytes);
      tma_load_gmma_tile<Tile, D>(dst, map, head, static_cast<int>(first_row + row0), full);
    }
  } else {
    load_gmma_tile_async<ROWS, D, 128, 1, DataD>(dst, src, row_stride, row0, rows);
  }
  cp_async_arrive(full);
}

template <class KvTile, int kStages>
struct KvRings {
  static constexpr int kBarriers = 4 * kStages;
  uint32_t k_tiles, v_tiles;  // stage s of K at k_tiles + s * KvTile::kBytes; V likewise
  uint32_t bars;              // kBarriers mbarriers: K full, K empty, V full, V empty, per stage

  __device__ __forceinline__ uint32_t k_stage(int g) const {
    return k_tiles + (g % kStages) * KvTile::kBytes;
  }
  __device__ __forceinline__ uint32_t v_stage(int g) const {
    return v_tiles + (g % kStages) * KvTile::kBytes;
  }
  __device__ __forceinline__ uint32_t k_full(int g) const { return bars + 8 * (g % kStages); }
  __device__ __forceinline__ uint32_t k_empty(int g) const {
    return bars + 8 * (kStages + g % kStages);
  }
  __device__ __forceinline__ uint32_t v_full(int g) const {
    return bars + 8 * (2 * kStages + g % kStages);
  }
  __device__ __forceinline__ uint32_t v_empty(int g) const {
    return bars + 8 * (3 * kStages + g % kStages);
  }

  // By one thread, before the block-wide barrier that publishes the barriers.
  __device__ __forceinline__ void init(int consumer_warps) const {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(k_full(s), 128);
      mbarrier_init(v_full(s), 128);
      mbarrier_init(k_empty(s), consumer_warps);
      mbarrier_init(v_empty(s), consumer_warps);
    }
  }

  // Producer warpgroup, all 128 threads: the block's tile g = keys [n0, n0 + kBN) of kv head hk
  // (k and v: the sequence's first row of that head), once the consumers are done with the
  // stage's previous tile. DataD: the head dim in memory (its columns up to D are zeros; the
  // tensor maps' boxes past it are filled with zeros by the TMA unit).
  template <int D, int DataD = D, class T>
  __device__ __forceinline__ void produce(int g, int64_t n0, int hk, const SequenceBounds& seq,
                                          const CUtensorMap& k_map, const T* k, int64_t k_stride,
                                          const CUtensorMap& v_map, const T* v,
                                          int64_t v_stride) const {
    constexpr int kBN = KvTile::kBytes / (2 * D);
    if (g >= kStages) mbarrier_wait(k_empty(g), ((g / kStages) & 1) ^ 1);
    load_rows_tma_or_async<kBN, D, DataD>(k_stage(g), k_map, hk, seq.k_begin, k, k_stride, n0,
                                          seq.k_len, k_full(g));
    if (g >= kStages) mbarrier_wait(v_empty(g), ((g / kStages) & 1) ^ 1);
    load_rows_tma_or_async<kBN, D, DataD>(v_stage(g), v_map, hk, seq.k_begin, v, v_stride, n0,
                                          seq.k_len, v_full(g));
  }

  // Consumers: wait for tile g's K or V (then order its cp.async bytes, if any, before wgmma reads
  // them), and hand a stage back.
  __device__ __forceinline__ void wait_k(int g) const { wait_full(k_full(g), g); }
  __device__ __forceinline__ void wait_v(int g) const { wait_full(v_full(g), g); }
  __device__ __forceinline__ void release_k(int g, int lane) const {
    if (lane == 0) mbarrier_arrive(k_empty(g));
  }
  __device__ __forceinline__ void release_v(int g, int lane) const {
    if (lane == 0) mbarrier_arrive(v_empty(g));
  }

 private:
  __device__ __forceinline__ static void wait_full(uint32_t bar, int g) {
    mbarrier_wait(bar, (g / kStages) & 1);
    fence_proxy_async();
  }
};

}  // namespace varpack::cuda
