// The CUDA kernels' tile arithmetic (src/attn/cuda/tile_bounds.cuh), compiled for the host and
// checked against brute force over every query and key, so that CI (no GPU) guards what keeps the
// kernels inside their sequences: the grid's slots and the launch orders' blocks cover every tile
// of every sequence exactly once (by chunks, heaviest first, also with max_seqlen understated),
// a tile's walk covers every (query, key) pair it must see and starts no tile past its sequence,
// a thread's two-register visibility bounds agree with SequenceBounds, and the unmasked fast path
// is taken only when every pair is visible. Lengths include 0, 1, tile edges and q != k; windows,
// causal masking, and both together.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "attn/cuda/tile_bounds.cuh"

namespace varpack::cuda {
namespace {

struct Mask {
  bool causal;
  int64_t window_left, window_right;
};

// The masks the kernels take: none, causal, one-sided and two-sided windows, causal + window.
std::vector<Mask> masks() {
  return {{false, -1, -1}, {true, -1, -1}, {false, 3, 5},  {false, 40, -1},
          {false, -1, 7},  {true, 20, -1}, {false, 0, 0}, {true, 0, -1}};
}

std::vector<int32_t> cumulative(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

bool visible(const SequenceBounds& s, const Mask& m, int64_t i, int64_t j) {
  return j >= s.key_begin(i, m.window_left) && j < s.key_end(i, m.causal, m.window_right);
}

SequenceBounds bounds(int64_t q_len, int64_t k_len) {
  SequenceBounds s;
  s.q_len = q_len;
  s.k_len = k_len;
  return s;
}

// Lengths around the tile edges and a few long ones, q and k alike or not.
std::vector<std::pair<int64_t, int64_t>> length_pairs() {
  const std::vector<int64_t> lens{0, 1, 2, 63, 64, 65, 127, 128, 129, 200, 300};
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t q : lens)
    for (int64_t k : lens) pairs.push_back({q, k});
  return pairs;
}

template <int BLOCK, TileOrder kOrder>
void check_slots(const std::vector<int32_t>& lens) {
  const std::vector<int32_t> cu = cumulative(lens);
  const auto batch = static_cast<int64_t>(lens.size());
  const int64_t slots = slot_count(cu.back(), batch, BLOCK);
  std::set<std::pair<int64_t, int64_t>> seen;
  // Blocks run in blockIdx order, which visits slots last-first (find_slot).
  std::vector<int64_t> previous(lens.size(), -1);
  for (int64_t x = 0; x < slots; ++x) {
    const TileSlot t = slot_tile<BLOCK, kOrder>(cu.data(), batch, slots - 1 - x);
    if (!t.valid) continue;
    ASSERT_GE(t.b, 0);
    ASSERT_LT(t.b, batch);
    const int64_t tiles = (lens[t.b] + BLOCK - 1) / BLOCK;
    ASSERT_GE(t.block, 0) << "sequence " << t.b;
    ASSERT_LT(t.block, tiles) << "sequence " << t.b;
    EXPECT_TRUE(seen.insert({t.b, t.block}).second) << "tile " << t.block << " of sequence " << t.b
                                                    << " twice";
    // Inside a sequence the heavy end comes first: the last tile (kLastFirst) or the first.
    if (previous[t.b] >= 0) {
      if (kOrder == TileOrder::kLastFirst) {
        EXPECT_LT(t.block, previous[t.b]);
      } else {
        EXPECT_GT(t.block, previous[t.b]);
      }
    }
    previous[t.b] = t.block;
  }
  size_t expected = 0;
  for (int32_t l : lens) expected += static_cast<size_t>((l + BLOCK - 1) / BLOCK);
  EXPECT_EQ(seen.size(), expected) << "slot_count leaves tiles without a block";
}

TEST(TileBounds, SlotsCoverEveryTileOnce) {
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> batches{
      {}, {0}, {1}, {64}, {65}, {0, 0, 0}, {127, 128, 129, 0, 1, 64, 63, 65}, {5000, 1, 0, 3}};
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<int32_t> lens(1 + rng() % 20);
    for (int32_t& l : lens) l = static_cast<int32_t>(rng() % 3 == 0 ? rng() % 3 : rng() % 700);
    batches.push_back(lens);
  }
  for (const auto& lens : batches) {
    check_slots<64, TileOrder::kLastFirst>(lens);
    check_slots<128, TileOrder::kLastFirst>(lens);
    check_slots<128, TileOrder::kFirstFirst>(lens);
    check_slots<192, TileOrder::kFirstFirst>(lens);
  }
}

// find_slot's search by 32 lanes (SlotSearch), its lanes emulated one after the other: the lanes
// that pass form a prefix, and it finds the binary search's tile at every slot, also past 32 and
// 1024 sequences (two and three rounds) and with many empty sequences.
TEST(TileBounds, LaneSearchFindsTheBinarySearchsSlot) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> batches{{0}, {1}, {0, 0, 0}, {127, 128, 129, 0, 1, 64, 63, 65}};
  for (size_t batch : {31, 32, 33, 64, 100, 1023, 1024, 1025, 5000}) {
    std::vector<int32_t> lens(batch);
    for (int32_t& l : lens) l = static_cast<int32_t>(rng() % 4 == 0 ? 0 : rng() % 300);
    batches.push_back(lens);
    batches.push_back(std::vector<int32_t>(batch, 0));
  }
  for (const auto& lens : batches) {
    const std::vector<int32_t> cu = cumulative(lens);
    const auto batch = static_cast<int64_t>(lens.size());
    constexpr int BLOCK = 128;
    const int64_t slots = slot_count(cu.back(), batch, BLOCK);
    for (int64_t s = 0; s < slots; ++s) {
      SlotSearch search{0, batch};
      int rounds = 0;
      while (!search.done()) {
        int passed = 0;
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t c = search.candidate(lane);
          const bool passes = c >= 0 && cu[c] / BLOCK + c <= s;
          ASSERT_TRUE(!passes || passed == lane) << "lane " << lane << " passes after a failure";
          passed += passes;
        }
        ASSERT_GE(passed, 1) << "slot " << s;
        search.narrow(passed);
        ASSERT_LE(++rounds, 4) << "batch " << batch;
      }
      const TileSlot lanes = slot_in_sequence<BLOCK, TileOrder::kFirstFirst>(cu.data(), search.lo, s);
      const TileSlot binary = slot_tile<BLOCK, TileOrder::kFirstFirst>(cu.data(), batch, s);
      ASSERT_EQ(lanes.valid, binary.valid) << "batch " << batch << " slot " << s;
      if (binary.valid) {
        ASSERT_EQ(lanes.b, binary.b) << "batch " << batch << " slot " << s;
        ASSERT_EQ(lanes.block, binary.block) << "batch " << batch << " slot " << s;
      }
    }
  }
}

// Every block index of a launch order: each (sequence, tile, head group) is some block's work
// exactly once, and none outside the sequence. By chunks with the true count of ranks, a chunk's
// blocks start heaviest first (query tile index non-increasing); with fewer ranks (max_seqlen
// understated) the rank-0 blocks take the extra tiles, so nothing is left out either.
template <int BLOCK>
void check_order(const std::vector<int32_t>& lens, int head_groups, int ranks, int64_t chunk) {
  SCOPED_TRACE(testing::Message() << "block " << BLOCK << " heads groups " << head_groups
                                  << " ranks " << ranks << " chunk " << chunk << " batch "
                                  << lens.size());
  const std::vector<int32_t> cu = cumulative(lens);
  LaunchOrder order;
  order.batch = static_cast<int64_t>(lens.size());
  order.slots = slot_count(cu.back(), order.batch, BLOCK);
  order.head_groups = head_groups;
  order.ranks = ranks;
  order.chunk = chunk;
  int64_t longest = 0;
  for (int32_t l : lens) longest = std::max<int64_t>(longest, (l + BLOCK - 1) / BLOCK);
  std::set<std::tuple<int64_t, int64_t, int>> seen;
  int64_t last_weight = INT64_MAX, last_chunk = -1;
  for (int64_t index = 0; index < order.blocks(); ++index) {
    const BlockWork w = block_work<BLOCK>(cu.data(), order, index);
    if (!w.valid) continue;
    ASSERT_GE(w.b, 0);
    ASSERT_LT(w.b, order.batch);
    ASSERT_GE(w.head_group, 0);
    ASSERT_LT(w.head_group, head_groups);
    const int64_t tiles = (lens[w.b] + BLOCK - 1) / BLOCK;
    ASSERT_GE(w.first, 0);
    ASSERT_LT(w.first, w.end);
    ASSERT_LE(w.end, tiles) << "sequence " << w.b;
    if (ranks == 0 || ranks >= longest) {
      EXPECT_EQ(w.end - w.first, 1) << "one tile per block";
    }
    for (int64_t t = w.first; t < w.end; ++t) {
      EXPECT_TRUE(seen.insert({w.b, t, w.head_group}).second)
          << "tile " << t << " of sequence " << w.b << " twice";
    }
    if (ranks == longest) {
      const int64_t weight = w.first;
      const int64_t this_chunk = w.head_group * order.batch + w.b / chunk;
      if (this_chunk != last_chunk) last_weight = INT64_MAX;
      EXPECT_LE(weight, last_weight) << "a lighter block before block " << index;
      last_weight = weight;
      last_chunk = this_chunk;
    }
  }
  size_t expected = 0;
  for (int32_t l : lens) expected += static_cast<size_t>((l + BLOCK - 1) / BLOCK);
  EXPECT_EQ(seen.size(), expected * head_groups) << "tiles without a block";
}

TEST(TileBounds, LaunchOrdersCoverEveryTileOnce) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> batches{
      {}, {0}, {1}, {128}, {129}, {0, 0, 0}, {127, 128, 129, 0, 1, 64, 63, 65}, {5000, 1, 0, 3},
      std::vector<int32_t>(16, 4096)};
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<int32_t> lens(1 + rng() % 20);
    for (int32_t& l : lens) l = static_cast<int32_t>(rng() % 3 == 0 ? rng() % 3 : rng() % 1500);
    batches.push_back(lens);
  }
  for (const auto& lens : batches) {
    int longest = 0;
    for (int32_t l : lens) longest = std::max(longest, (l + 127) / 128);
    // By sequence; by chunks with the true count of ranks, understated (1, half) and overstated,
    // in chunks of one sequence, three and all of them.
    for (int ranks : {0, longest, 1, longest / 2, longest + 3})
      for (int64_t chunk : {int64_t{1}, int64_t{3}, static_cast<int64_t>(lens.size()) + 1})
        for (int head_groups : {1, 3}) check_order<128>(lens, head_groups, ranks, chunk);
  }
}

// For each tile of `block` rows out of `rows`: the tiles of `step` that it walks over the other
// side (of `others`) hold every one that a row of the tile must see, and none starts at or past
// the sequence's end (the kernels read a partial last tile with zero fill, but never a tile wholly
// past the end). range_of(r0, r1): the walk's range; sees(row, other): brute force.
template <class RangeOf, class Sees>
void check_walks(int64_t rows, int64_t others, int block, int step, RangeOf range_of, Sees sees) {
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t r1 = std::min(r0 + block, rows);
    const TileWalk w = tiles_over(range_of(r0, r1), step);
    ASSERT_GE(w.first, 0);
    if (w.count > 0) {
      ASSERT_LT(w.first + static_cast<int64_t>(w.count - 1) * step, others);
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t o = 0; o < others; ++o)
        if (sees(r, o)) {
          ASSERT_TRUE(o >= w.first && o < w.first + static_cast<int64_t>(w.count) * step)
              << "row " << r << " sees " << o << " outside its walk";
        }
  }
}

// Query tiles over keys (the forward and the dQ passes) and key tiles over queries (dK/dV), in
// the kernels' shapes.
TEST(TileBounds, WalksCoverWhatTheirTilesSee) {
  const std::vector<std::pair<int, int>> kTileShapes{{128, 128}, {128, 64}, {64, 32}, {64, 64}};
  for (const auto& [q_len, k_len] : length_pairs())
    for (const Mask& m : masks())
      for (const auto& [rows, step] : kTileShapes) {
        SCOPED_TRACE(testing::Message() << "q " << q_len << " k " << k_len << " causal "
                                        << m.causal << " window " << m.window_left << ","
                                        << m.window_right << " tiles " << rows << "x" << step);
        const SequenceBounds s = bounds(q_len, k_len);
        check_walks(
            q_len, k_len, rows, step,
            [&](int64_t q0, int64_t q1) {
              return keys_for_queries(s, q0, q1, m.causal, m.window_left, m.window_right);
            },
            [&](int64_t i, int64_t j) { return visible(s, m, i, j); });
        check_walks(
            k_len, q_len, rows, step,
            [&](int64_t k0, int64_t k1) {
              return queries_for_keys(s, k0, k1, m.causal, m.window_left, m.window_right);
            },
            [&](int64_t j, int64_t i) { return visible(s, m, i, j); });
      }
}

// query_tile / key_tile: a block's rows and walk, as the kernels take them from a slot.
TEST(TileBounds, BlockTilesOfASlot) {
  struct Params {
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_k;
    bool causal;
    int64_t window_left, window_right;
  };
  const std::vector<int32_t> q_lens{300, 0, 129, 1}, k_lens{337, 5, 129, 40};
  const std::vector<int32_t> cu_q = cumulative(q_lens), cu_k = cumulative(k_lens);
  const Params p{cu_q.data(), cu_k.data(), true, -1, -1};
  TileSlot slot;
  slot.b = 0;
  slot.block = 2;  // queries 256 .. 299 of sequence 0
  const BlockTile q = query_tile<128, 64>(p, slot);
  EXPECT_EQ(q.seq.q_begin, 0);
  EXPECT_EQ(q.r0, 256);
  EXPECT_EQ(q.r1, 300);
  EXPECT_EQ(q.walk.first, 0);
  EXPECT_EQ(q.walk.count, 6);  // keys 0 .. 336 (query 299 sits at key 336)
  slot.b = 2;
  slot.block = 1;  // keys 128 of sequence 2, seen by query 128 only
  const BlockTile k = key_tile<128, 64>(p, slot);
  EXPECT_EQ(k.seq.k_begin, 342);
  EXPECT_EQ(k.r0, 128);
  EXPECT_EQ(k.r1, 129);
  EXPECT_EQ(k.walk.first, 128);
  EXPECT_EQ(k.walk.count, 1);
}

// row_visibility's two bounds for rows row .. row + slack agree with key_begin / key_end.
TEST(TileBounds, RowVisibilityMatchesSequenceBounds) {
  for (const auto& [q_len, k_len] : length_pairs())
    for (const Mask& m : masks()) {
      const SequenceBounds s = bounds(q_len, k_len);
      for (int64_t row = 0; row < q_len; row += 8) {
        const int slack = 32;
        const RowVisibility v =
            row_visibility(s, row, m.causal, m.window_left, m.window_right, slack);
        for (int delta = 0; delta <= slack && row + delta < q_len; ++delta)
          for (int64_t j = 0; j < k_len; ++j)
            ASSERT_EQ(j >= v.begin + delta && j < v.end + delta, visible(s, m, row + delta, j))
                << "q " << q_len << " k " << k_len << " row " << row + delta << " key " << j;
      }
    }
}

// visible_columns' two bounds per key agree with the pairs' visibility over a transposed tile of
// 64 queries: every key (and keys past the end), every thread's first column (SplitScores' second
// half from 32), columns past the sequence's end.
TEST(TileBounds, VisibleColumnsMatchSequenceBounds) {
  for (const auto& [q_len, k_len] : length_pairs())
    for (const Mask& m : masks()) {
      const SequenceBounds s = bounds(q_len, k_len);
      for (int64_t m0 = 0; m0 < q_len; m0 += 64) {
        const RowVisibility v = row_visibility(s, m0, m.causal, m.window_left, m.window_right, 64);
        const int queries = static_cast<int>(std::min<int64_t>(q_len - m0, 64));
        for (int64_t j = 0; j < k_len + 9; ++j)
          for (const int first : {0, 32})
            for (int base = first; base < first + 8; base += 2) {
              const int count = 64 - first;
              const ColumnLimits c =
                  visible_columns(v, static_cast<int>(j), j < k_len, base, queries, count);
              for (int k = 0; base + k < 64; ++k)
                ASSERT_EQ(k >= c.lo && k < c.hi,
                          j < k_len && base + k < queries && visible(s, m, m0 + base + k, j))
                    << "q " << q_len << " k " << k_len << " m0 " << m0 << " key " << j
                    << " column " << base + k;
            }
      }
    }
  // Keys near INT32_MAX, where a missing window side's bound would overflow 32 bits.
  const int64_t huge = INT32_MAX - 200;
  const SequenceBounds s = bounds(huge, huge);
  for (const Mask& m : masks())
    for (const int64_t m0 : {huge - 64, huge - 64 * 1000}) {
      const RowVisibility v = row_visibility(s, m0, m.causal, m.window_left, m.window_right, 64);
      for (int64_t j = m0 - 70; j < m0 + 70; ++j) {
        const ColumnLimits c = visible_columns(v, static_cast<int>(j), j < huge, 0, 64, 64);
        for (int k = 0; k < 64; ++k)
          ASSERT_EQ(k >= c.lo && k < c.hi, j < huge && visible(s, m, m0 + k, j))
              << "m0 " << m0 << " key " << j << " column " << k;
      }
    }
}

// The unmasked path: taken exactly when every pair of the tile is visible.
TEST(TileBounds, FullyVisibleTilesNeedNoMask) {
  for (const auto& [q_len, k_len] : length_pairs())
    for (const Mask& m : masks()) {
      const SequenceBounds s = bounds(q_len, k_len);
      for (int64_t q0 = 0; q0 < q_len; q0 += 64)
        for (int64_t k0 = 0; k0 < k_len; k0 += 64) {
          const int64_t q1 = q0 + 64, k1 = k0 + 64;  // whole tiles, past the end where partial
          bool all = q1 <= q_len && k1 <= k_len;
          for (int64_t i = q0; all && i < q1; ++i)
            for (int64_t j = k0; all && j < k1; ++j) all = visible(s, m, i, j);
          ASSERT_EQ(tile_fully_visible(s, q0, q1, k0, k1, m.causal, m.window_left,
                                       m.window_right),
                    all)
              << "q " << q_len << " k " << k_len << " tile " << q0 << "," << k0;
        }
    }
}

}  // namespace
}  // namespace varpack::cuda
