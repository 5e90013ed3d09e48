// How a CUDA block finds its work from cu_seqlens, without any host round trip: the grid's x index
// is a "slot" in a list where sequence b owns slots [cu[b]/BLOCK + b, cu[b+1]/BLOCK + b + 1), which
// is at least ceil(len_b/BLOCK) slots, so the grid size needs only host-known numbers
// (total rows / BLOCK + batch) and at most one block per sequence finds nothing to do. Also the
// ranges of key (or query) tiles that a query (or key) tile can see, from SequenceBounds. All of it
// but find_slot (which reads blockIdx) compiles on the host too, where tests/attn/test_tile_bounds
// checks it against brute force.
#pragma once

#include <cstdint>

#include "varpack/attention_bounds.h"

namespace varpack::cuda {

inline int64_t slot_count(int64_t total_rows, int64_t batch, int block) {
  return total_rows / block + batch;
}

struct TileSlot {
  int64_t b = 0;      // sequence
  int64_t block = 0;  // tile index inside the sequence
  bool valid = false;
};

// Slots are visited last-first (blockIdx.x 0 takes the last slot), so sequences come last-first.
// Inside a sequence, kOrder picks which end comes first: under causal masking the last query
// tiles see the most key tiles (the forward and the dQ pass want the last tile first) and the
// first key tiles are seen by the most query tiles (the dK/dV passes want the first tile first);
// the heavy blocks then start early and the light ones fill the tail of the launch.
enum class TileOrder { kLastFirst, kFirstFirst };

// The tile in slot s, given b: the last sequence whose first slot (cu[b] / BLOCK + b) is at or
// before s, the only one that can own it.
template <int BLOCK, TileOrder kOrder>
VARPACK_HOST_DEVICE TileSlot slot_in_sequence(const int32_t* cu_seqlens, int64_t b, int64_t s) {
  TileSlot t;
  const int64_t begin = cu_seqlens[b];
  const int64_t len = static_cast<int64_t>(cu_seqlens[b + 1]) - begin;
  const int64_t tiles = (len + BLOCK - 1) / BLOCK;
  const int64_t local = s - (begin / BLOCK + b);
  if (local < 0 || local >= tiles) return t;
  t.b = b;
  // The first valid slot visited in a sequence has local = tiles - 1.
  t.block = kOrder == TileOrder::kLastFirst ? local : tiles - 1 - local;
  t.valid = true;
  return t;
}

// Slot s of the list (find_slot: s = slots - 1 - blockIdx.x), by a binary search over the
// sequences: the reference that find_slot's search by 32 lanes is tested against.
template <int BLOCK, TileOrder kOrder>
VARPACK_HOST_DEVICE TileSlot slot_tile(const int32_t* cu_seqlens, int64_t batch, int64_t s) {
  if (batch <= 0) return TileSlot{};
  // Largest b in [0, batch) with first_slot(b) <= s; first_slot is strictly increasing in b.
  int64_t lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu_seqlens[mid] / BLOCK + mid <= s) lo = mid; else hi = mid - 1;
  }
  return slot_in_sequence<BLOCK, kOrder>(cu_seqlens, lo, s);
}

// find_slot's search for the largest b in [0, batch) with first_slot(b) = cu[b] / BLOCK + b <= s:
// the answer lies in [lo, lo + n), and first_slot(lo) <= s. Each round, lane l (of 32) tests
// candidate lo + l * step (where that is below lo + n); as first_slot increases, the lanes that
// pass are 0 .. passed - 1, and the answer lies in the passing last one's step. So a round is one
// dependent load where the binary search takes log2(batch): two rounds up to 1024 sequences
// (measured on the H200: bench/results/cuda.md, 2026-12-03).
struct SlotSearch {
  int64_t lo = 0, n = 0;

  VARPACK_HOST_DEVICE bool done() const { return n <= 1; }
  VARPACK_HOST_DEVICE int64_t step() const { return (n + 31) / 32; }
  // Lane l's candidate, or -1 where it lies past the range.
  VARPACK_HOST_DEVICE int64_t candidate(int lane) const {
    const int64_t offset = lane * step();
    return offset < n ? lo + offset : -1;
  }
  // passed >= 1: lane 0's candidate, lo, always passes.
  VARPACK_HOST_DEVICE void narrow(int passed) {
    const int64_t offset = (passed - 1) * step();
    const int64_t width = step();
    lo += offset;
    n = n - offset < width ? n - offset : width;
  }
};

#if defined(__CUDACC__)
// The block's slot, s = slots - 1 - blockIdx.x, by SlotSearch. Every lane of the calling warp
// must take part (the kernels call it first, with whole warps).
template <int BLOCK, TileOrder kOrder>
__device__ __forceinline__ TileSlot find_slot(const int32_t* cu_seqlens, int64_t batch,
                                              int64_t slots) {
  const int64_t s = slots - 1 - static_cast<int64_t>(blockIdx.x);
  if (batch <= 0) return TileSlot{};
  const int lane = static_cast<int>(threadIdx.x % 32);
  SlotSearch search{0, batch};
  while (!search.done()) {
    const int64_t c = search.candidate(lane);
    const bool passes = c >= 0 && cu_seqlens[c] / BLOCK + c <= s;
    search.narrow(__popc(__ballot_sync(0xffffffffu, passes)));
  }
  return slot_in_sequence<BLOCK, kOrder>(cu_seqlens, search.lo, s);
}
#endif

// The order a query-tile launch's blocks (the Hopper forward's) take their work in, as a function
// of the block's linear index, so that the hardware, which starts blocks in index order as
// multiprocessors free up, schedules them. A block's work is a range of consecutive query tiles of
// one sequence for one group of heads; head groups come one after the other (index = head_group *
// blocks per group + i).
// - By sequence (ranks == 0): i = x, slot slots - 1 - x (find_slot's order): sequences last-first,
//   inside a sequence the heavy end first. The launch's last blocks can then be a sequence's
//   heaviest, which leaves a tail where few multiprocessors work.
// - By chunks (ranks > 0, the tiles of the longest sequence as the host knows it): the sequences
//   in chunks of `chunk` consecutive ones, chunk after chunk, and inside a chunk rank after rank,
//   every sequence of the chunk at each: rank r holds the r-th heaviest tile position (under
//   causal masking the work of query tile k grows with k: tile ranks - 1 - r). A chunk's
//   heavy tiles then start together, early in the chunk, while the blocks running at once stay
//   within a few sequences' K/V (one rank over all sequences, measured on the H200, read too many
//   sequences' K/V at once for L2 and was slower: bench/results/cuda.md). Blocks whose sequence
//   has no tile at their rank find nothing to do. The count of ranks only steers the order: a
//   sequence with more tiles than that (max_seqlen understated) has its extra heavy tiles done by
//   its rank-0 block, one after the other, so no tile is left out.
struct LaunchOrder {
  int64_t batch = 0;
  int64_t slots = 0;  // slot_count(...): blocks per head group by sequence
  int head_groups = 1;
  int ranks = 0;      // > 0: by chunks
  int64_t chunk = 1;  // sequences per chunk (> 0)

  VARPACK_HOST_DEVICE int64_t blocks_per_group() const {
    return ranks > 0 ? static_cast<int64_t>(ranks) * batch : slots;
  }
  VARPACK_HOST_DEVICE int64_t blocks() const { return blocks_per_group() * head_groups; }
};

// Tiles [first, end) of sequence b for head group head_group (valid: there is work).
struct BlockWork {
  int64_t b = 0;
  int64_t first = 0, end = 0;
  int head_group = 0;
  bool valid = false;
};

template <int BLOCK>
VARPACK_HOST_DEVICE BlockWork block_work(const int32_t* cu_seqlens, const LaunchOrder& order,
                                         int64_t index) {
  BlockWork w;
  const int64_t per_group = order.blocks_per_group();
  w.head_group = static_cast<int>(index / per_group);
  const int64_t i = index % per_group;
  if (order.ranks <= 0) {
    const TileSlot t =
        slot_tile<BLOCK, TileOrder::kLastFirst>(cu_seqlens, order.batch, order.slots - 1 - i);
    w.b = t.b;
    w.first = t.block;
    w.end = t.block + 1;
    w.valid = t.valid;
    return w;
  }
  const int64_t ranks = order.ranks;
  const int64_t start = i / (ranks * order.chunk) * order.chunk;  // the chunk's first sequence
  const int64_t size = order.batch - start < order.chunk ? order.batch - start : order.chunk;
  const int64_t within = i - start * ranks;
  const int64_t rank = within / size;
  w.b = start + within % size;
  const int64_t tiles =
      (static_cast<int64_t>(cu_seqlens[w.b + 1]) - cu_seqlens[w.b] + BLOCK - 1) / BLOCK;
  w.first = ranks - 1 - rank;
  w.end = rank == 0 && tiles > ranks ? tiles : w.first + 1;
  w.valid = w.first < tiles;
  return w;
}

// Keys [begin, end) that some query in [q0, q1) may see (q1 > q0, both inside the sequence):
// key_begin and key_end are non-decreasing in the query index.
struct Range {
  int64_t begin = 0, end = 0;
};

VARPACK_HOST_DEVICE Range keys_for_queries(const SequenceBounds& s, int64_t q0, int64_t q1,
                                           bool causal, int64_t window_left, int64_t window_right) {
  return {s.key_begin(q0, window_left), s.key_end(q1 - 1, causal, window_right)};
}

// Queries [begin, end) that may see some key in [k0, k1): the inverse of key_begin/key_end.
VARPACK_HOST_DEVICE Range queries_for_keys(const SequenceBounds& s, int64_t k0, int64_t k1,
                                           bool causal, int64_t window_left, int64_t window_right) {
  const int64_t offset = s.k_len - s.q_len;  // query i sits at key position i + offset
  const int64_t right = causal ? 0 : window_right;
  Range r{0, s.q_len};
  // key_end(i) > k0  <=>  i + offset + right + 1 > k0
  if (right >= 0) r.begin = k0 - offset - right > 0 ? k0 - offset - right : 0;
  // key_begin(i) <= k1 - 1  <=>  i + offset - window_left <= k1 - 1
  if (window_left >= 0) {
    const int64_t e = k1 - offset + window_left;
    r.end = e < r.end ? e : r.end;
  }
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

// The tiles of `step` rows a block walks to cover [r.begin, r.end): the first starts at r.begin
// rounded down to a tile edge; `count` tiles reach r.end (none for an empty range).
struct TileWalk {
  int64_t first = 0;
  int count = 0;
};

VARPACK_HOST_DEVICE TileWalk tiles_over(Range r, int step) {
  TileWalk w;
  w.first = r.begin / step * step;
  w.count = r.end > w.first ? static_cast<int>((r.end - w.first + step - 1) / step) : 0;
  return w;
}

// A block's tile and what it walks: rows [r0, r1) of sequence `seq` (queries in the forward and
// the dQ passes, keys in the dK/dV passes), and the tiles of the other side that those rows see.
struct BlockTile {
  SequenceBounds seq;
  int64_t r0 = 0, r1 = 0;
  TileWalk walk;
};

// The query tile `block` (of kBM rows) of a sequence with bounds `seq`, and the kBN-key tiles it
// sees. Params: AttentionParams or AttentionBackwardParams.
template <int kBM, int kBN, class Params>
VARPACK_HOST_DEVICE BlockTile query_tile_in(const Params& p, const SequenceBounds& seq,
                                            int64_t block) {
  BlockTile t;
  t.seq = seq;
  t.r0 = block * kBM;
  t.r1 = t.r0 + kBM < t.seq.q_len ? t.r0 + kBM : t.seq.q_len;
  t.walk = tiles_over(keys_for_queries(t.seq, t.r0, t.r1, p.causal, p.window_left, p.window_right),
                      kBN);
  return t;
}

// The same for the query tile in `slot` (find_slot over cu_seqlens_q).
template <int kBM, int kBN, class Params>
VARPACK_HOST_DEVICE BlockTile query_tile(const Params& p, const TileSlot& slot) {
  return query_tile_in<kBM, kBN>(p, SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b),
                                 slot.block);
}

// The key tile of kBN rows in `slot` (find_slot over cu_seqlens_k) and the kBM-query tiles that
// see it.
template <int kBN, int kBM, class Params>
VARPACK_HOST_DEVICE BlockTile key_tile(const Params& p, const TileSlot& slot) {
  BlockTile t;
  t.seq = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, slot.b);
  t.r0 = slot.block * kBN;
  t.r1 = t.r0 + kBN < t.seq.k_len ? t.r0 + kBN : t.seq.k_len;
  t.walk = tiles_over(queries_for_keys(t.seq, t.r0, t.r1, p.causal, p.window_left, p.window_right),
                      kBM);
  return t;
}

// Key j is visible from query `row` + delta (0 <= delta <= slack) iff begin + delta <= j <
// end + delta and j < k_len: SequenceBounds' key_begin / key_end without their clamps (j >= 0
// makes them redundant), so two int32 registers stand for the bounds of all of a thread's rows. A
// missing window side is a bound no key reaches (cu_seqlens are int32, so keys lie below
// INT32_MAX - slack).
struct RowVisibility {
  int begin = 0, end = 0;
};

VARPACK_HOST_DEVICE RowVisibility row_visibility(const SequenceBounds& s, int64_t row, bool causal,
                                                 int64_t window_left, int64_t window_right,
                                                 int slack) {
  const int64_t diagonal = row + s.k_len - s.q_len;  // the row's own key position
  const int64_t right = causal ? 0 : window_right;
  const int64_t far = INT32_MAX - slack;
  const int64_t b = window_left < 0 ? -far : diagonal - window_left;
  const int64_t e = right < 0 ? far : diagonal + right + 1;
  return {static_cast<int>(b < -far ? -far : (b > far ? far : b)),
          static_cast<int>(e < -far ? -far : (e > far ? far : e))};
}

// A transposed tile's mask (the backward's S^T: rows are keys, columns are the queries m0 + col):
// key `key` is visible from column base + k (0 <= k < count) iff lo <= k < hi. vis is
// row_visibility(s, m0, ..., slack >= the tile's queries), queries the tile's queries inside the
// sequence, key_in whether the key is. So a masked score costs two compares against registers
// instead of four tests of its column. Computed in 64 bits and clamped to [0, count]: a missing
// window side's far bound would overflow 32.
struct ColumnLimits {
  int lo = 0, hi = 0;
};

VARPACK_HOST_DEVICE ColumnLimits visible_columns(const RowVisibility& vis, int key, bool key_in,
                                                 int base, int queries, int count) {
  // Column col sees the key iff vis.begin + col <= key < vis.end + col and col < queries.
  const int64_t lo = static_cast<int64_t>(key) - vis.end + 1 - base;
  int64_t hi = static_cast<int64_t>(key) - vis.begin + 1 - base;
  if (hi > static_cast<int64_t>(queries) - base) hi = static_cast<int64_t>(queries) - base;
  if (!key_in) hi = 0;
  const auto clamp = [count](int64_t v) {
    return static_cast<int>(v < 0 ? 0 : (v > count ? count : v));
  };
  return {clamp(lo), clamp(hi)};
}

// True when every (query, key) pair of the tile is visible, so the kernels skip the mask.
VARPACK_HOST_DEVICE bool tile_fully_visible(const SequenceBounds& s, int64_t q0, int64_t q1,
                                            int64_t k0, int64_t k1, bool causal,
                                            int64_t window_left, int64_t window_right) {
  return q1 <= s.q_len && k1 <= s.k_len && s.key_begin(q1 - 1, window_left) <= k0 &&
         s.key_end(q0, causal, window_right) >= k1;
}

}  // namespace varpack::cuda
