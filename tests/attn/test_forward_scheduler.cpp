// The Hopper forward's scheduler (src/attn/cuda/forward_scheduler.cuh), compiled for the host and
// checked against brute force: under every launch order and heads-per-block choice, the works that
// blocks take (a block per work, or persistent blocks claiming from one counter in any
// interleaving, one block to more blocks than works) cover every (head group, query tile) of every
// sequence exactly once, each with its sequence's bounds, and a persistent block stops only once
// the claims pass the order's last block. Also the launch rules' answers that the kernels rely on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "attn/cuda/forward_scheduler.cuh"

namespace varpack::cuda {
namespace {

constexpr int kBlockM = 128;

std::vector<int32_t> cumulative(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

AttentionParams params_for(const std::vector<int32_t>& cu, int heads, int64_t max_seqlen) {
  AttentionParams p;
  p.batch = static_cast<int64_t>(cu.size()) - 1;
  p.total_q = p.total_k = cu.back() + 5;  // rows past the end, as the operator's buffers have
  p.heads = heads;
  p.kv_heads = heads;
  p.head_dim = 128;
  p.causal = true;
  p.max_seqlen_q = p.max_seqlen_k = max_seqlen;
  p.cu_seqlens_q = cu.data();
  p.cu_seqlens_k = cu.data();
  return p;
}

using TileKey = std::tuple<int64_t, int, int64_t>;  // sequence, head group, query tile

// Each (head group, query tile) of the works, counted; fails on a work whose bounds are wrong.
void count_tiles(const ForwardWork& fw, const std::vector<int32_t>& cu,
                 std::map<TileKey, int>& seen) {
  ASSERT_TRUE(fw.work.valid);
  const SequenceBounds want = SequenceBounds::of(cu.data(), cu.data(), fw.work.b);
  EXPECT_EQ(fw.seq.q_begin, want.q_begin);
  EXPECT_EQ(fw.seq.q_len, want.q_len);
  EXPECT_EQ(fw.seq.k_begin, want.k_begin);
  EXPECT_EQ(fw.seq.k_len, want.k_len);
  for (int64_t t = fw.work.first; t < fw.work.end; ++t)
    ++seen[{fw.work.b, fw.work.head_group, t}];
}

// Every query tile of every sequence and head group exactly once.
void expect_each_tile_once(const std::map<TileKey, int>& seen, const std::vector<int32_t>& cu,
                           int head_groups) {
  size_t want = 0;
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const int64_t tiles = (cu[b + 1] - cu[b] + kBlockM - 1) / kBlockM;
    for (int g = 0; g < head_groups; ++g)
      for (int64_t t = 0; t < tiles; ++t, ++want) {
        const auto it = seen.find({static_cast<int64_t>(b), g, t});
        ASSERT_NE(it, seen.end()) << "sequence " << b << " group " << g << " tile " << t;
        EXPECT_EQ(it->second, 1) << "sequence " << b << " group " << g << " tile " << t;
      }
  }
  EXPECT_EQ(seen.size(), want);
}

// Persistent blocks in a random interleaving: each takes its own index first, then claims.
std::map<TileKey, int> persistent_run(const ForwardScheduler<kBlockM>& works, int64_t grid,
                                      std::mt19937& rng, const std::vector<int32_t>& cu) {
  std::map<TileKey, int> seen;
  int64_t counter = 0;
  auto claim = [&] { return counter++ + grid; };
  std::vector<int64_t> running(static_cast<size_t>(grid));
  for (int64_t b = 0; b < grid; ++b) running[b] = b;
  std::vector<bool> started(static_cast<size_t>(grid), false);
  while (!running.empty()) {
    const size_t pick = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
    const int64_t block = running[pick];
    const ForwardWork fw =
        works.first_valid(started[block] ? claim() : block, claim);
    started[block] = true;
    if (!fw.work.valid) {
      EXPECT_GE(counter + grid, works.order.blocks());  // stops only past the last block
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(pick));
      continue;
    }
    count_tiles(fw, cu, seen);
  }
  return seen;
}

TEST(ForwardScheduler, EveryTileOnceInEveryOrderAndInterleaving) {
  std::mt19937 rng(7);
  const std::vector<std::vector<int32_t>> batches = {
      {0},
      {1},
      {700, 3, 0, 517, 129, 256},
      {128, 128, 128, 128},
      {4200, 3, 0, 191, 192, 193, 1},
      {0, 0, 65, 0},
  };
  for (const auto& lens : batches) {
    const std::vector<int32_t> cu = cumulative(lens);
    const int64_t longest = *std::max_element(lens.begin(), lens.end());
    for (int64_t max_seqlen : {longest, int64_t{0}, longest / 3})  // true, unknown, understated
      for (int heads : {1, 4, 6})
        for (int per_block : {1, 2, 4}) {
          if (heads % per_block != 0) continue;
          const AttentionParams p = params_for(cu, heads, max_seqlen);
          for (ForwardOrder choice : {ForwardOrder::kBySequence, ForwardOrder::kByChunks}) {
            const LaunchOrder order = forward_launch_order(p, kBlockM, per_block, choice, 132);
            const ForwardScheduler<kBlockM> works{cu.data(), cu.data(), order};
            SCOPED_TRACE(testing::Message() << "batch of " << lens.size() << " max_seqlen "
                                            << max_seqlen << " heads " << heads << "/"
                                            << per_block << " chunks " << order.ranks);
            std::map<TileKey, int> by_work;
            for (int64_t i = 0; i < order.blocks(); ++i) {
              const ForwardWork fw = works.at(i);
              if (fw.work.valid) count_tiles(fw, cu, by_work);
            }
            EXPECT_FALSE(works.at(order.blocks()).work.valid);
            expect_each_tile_once(by_work, cu, order.head_groups);
            for (int64_t grid : {int64_t{1}, int64_t{2}, int64_t{3}, order.blocks() + 2})
              expect_each_tile_once(persistent_run(works, grid, rng, cu), cu, order.head_groups);
          }
        }
  }
}

TEST(ForwardScheduler, LaunchRules) {
  const std::vector<int32_t> cu = cumulative({1024, 1024, 1024, 1024});
  AttentionParams p = params_for(cu, 12, 1024);
  // An explicit most heads per block: the largest divisor of the head count up to it.
  EXPECT_EQ(forward_heads_per_block(p, 128, 128, 132, true, 5), 4);
  EXPECT_EQ(forward_heads_per_block(p, 128, 128, 132, true, 12), 12);
  EXPECT_EQ(forward_heads_per_block(p, 128, 128, 132, true, 1), 1);
  // The rule's choice divides the head count, and a window keeps one head per block.
  for (int sms : {1, 8, 132}) {
    const int k = forward_heads_per_block(p, 128, 128, sms, true);
    EXPECT_EQ(p.heads % k, 0);
  }
  EXPECT_EQ(forward_heads_per_block(p, 128, 128, 1, true), 4);  // a long share: the most
  p.window_left = 100;
  EXPECT_EQ(forward_heads_per_block(p, 128, 128, 1, true), 1);
  EXPECT_EQ(forward_launch_order(p, 128, 1, ForwardOrder::kByChunks, 132).ranks, 0);
  p.window_left = -1;
  EXPECT_GT(forward_launch_order(p, 128, 1, ForwardOrder::kByChunks, 132).ranks, 0);
  EXPECT_EQ(forward_launch_order(p, 128, 1, ForwardOrder::kBySequence, 132).ranks, 0);
  // The persistent grid: a block per multiprocessor, at most max_blocks where given.
  EXPECT_EQ(forward_persistent_blocks(132, 0), 132);
  EXPECT_EQ(forward_persistent_blocks(132, 2), 2);
  EXPECT_EQ(forward_persistent_blocks(8, 20), 8);
}

}  // namespace
}  // namespace varpack::cuda
