// Which works the Hopper forward's blocks run, and in what order: the launch's heads per block and
// launch order (host rules), and the persistent kernel's work queue, whose blocks take the works
// of the launch order from a global counter. All of it compiles on the host too, where
// tests/attn/test_forward_scheduler checks it against brute force.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attn/cuda/forward_launch.h"
#include "attn/cuda/tile_bounds.cuh"
#include "varpack/attention.h"
#include "varpack/attention_bounds.h"

namespace varpack::cuda {

// A work of the forward (block_work's) with its sequence's bounds: what a persistent block's
// producer hands to its warps, so that they read no cu_seqlens on their way into the next work.
struct ForwardWork {
  BlockWork work;  // work.valid false: no more works
  SequenceBounds seq;
};

// The works of one launch order: work `index` is the index-th block of the order, and a
// persistent block claims its next index from a counter (claim()) past every empty one.
template <int kBlockM>
struct ForwardScheduler {
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  LaunchOrder order;

  // Work `index` with its sequence's bounds (none past the launch order's last).
  VARPACK_HOST_DEVICE ForwardWork at(int64_t index) const {
    ForwardWork fw;
    if (index >= order.blocks()) return fw;
    fw.work = block_work<kBlockM>(cu_seqlens_q, order, index);
    if (fw.work.valid) fw.seq = SequenceBounds::of(cu_seqlens_q, cu_seqlens_k, fw.work.b);
    return fw;
  }

  // The first work with rows from `index` on, claiming each next index by claim(); an invalid
  // work once the claims pass the order's last block.
  template <class Claim>
  VARPACK_HOST_DEVICE ForwardWork first_valid(int64_t index, Claim claim) const {
    ForwardWork fw = at(index);
    while (!fw.work.valid && index < order.blocks()) {
      index = claim();
      fw = at(index);
    }
    return fw;
  }
};

// How many consecutive heads one block runs its query tile for: k heads hide a head's start and
// end behind the previous head's, while the longest block (k x the longest sequence's key tiles)
// stays within an eighth of one multiprocessor's least share of the work (a quarter past 4096 keys
// per query tile, where the shape gains: past_long_keys). Not with a sliding window (not
// measured). sms: the device's multiprocessors. decisions.md: forward-heads-per-block.
inline int forward_heads_per_block(const AttentionParams& p, int block_m, int block_n, int sms,
                                   bool past_long_keys, int max_heads_per_block = 0) {
  if (max_heads_per_block > 0) {
    int k = max_heads_per_block;
    while (k > 1 && p.heads % k != 0) --k;
    return k;
  }
  const bool window = p.window_left >= 0 || (!p.causal && p.window_right >= 0);
  if (window || p.batch <= 0) return 1;
  const double q_tiles = static_cast<double>(p.total_q) / block_m;
  const double k_tiles = static_cast<double>(p.total_k) / block_n;
  const double per_query_tile = p.causal ? (k_tiles / p.batch + 1) / 2 : k_tiles / p.batch;
  const bool long_keys = per_query_tile * block_n > 4096;
  if (long_keys && (!p.causal || !past_long_keys)) return 1;
  const double shares = long_keys ? 4.0 : 8.0;  // the longest block within 1 / shares of the share
  const double least_work = q_tiles * per_query_tile * p.heads;
  const double longest = std::ceil(static_cast<double>(p.max_seqlen_k) / block_n);
  for (int k : {4, 2})
    if (p.heads % k == 0 && shares * k * longest <= least_work / sms) return k;
  return 1;
}

// The forward's launch order (LaunchOrder): by chunks of sequences whose K and V for a block's
// heads take about 32 MB of L2, under causal masking without a window, where max_seqlen_q leaves
// few blocks empty; kAuto takes chunks for launches of at most 32 waves of blocks (where the tail
// weighs) and by sequence past that. sms: the device's multiprocessors. decisions.md:
// forward-launch-order.
inline LaunchOrder forward_launch_order(const AttentionParams& p, int block_m, int heads_per_block,
                                        ForwardOrder choice, int sms) {
  LaunchOrder order;
  order.batch = p.batch;
  order.slots = slot_count(p.total_q, p.batch, block_m);
  order.head_groups = p.heads / heads_per_block;
  if (choice == ForwardOrder::kAuto)
    choice = order.blocks() <= int64_t{32} * sms ? ForwardOrder::kByChunks
                                                  : ForwardOrder::kBySequence;
  const int64_t ranks = (p.max_seqlen_q + block_m - 1) / block_m;
  const bool window = p.window_left >= 0 || (!p.causal && p.window_right >= 0);
  if (choice != ForwardOrder::kByChunks || !p.causal || window || ranks <= 0 || p.batch <= 0 ||
      4 * ranks * p.batch > 5 * order.slots)
    return order;
  order.ranks = static_cast<int>(ranks);
  const int group = p.heads / p.kv_heads;
  const int64_t kv_heads = (heads_per_block + group - 1) / group;
  const int64_t bytes = 2 * p.max_seqlen_k * kv_heads * p.head_dim * 2;  // K and V, 2-byte
  order.chunk = bytes > 0 ? std::max<int64_t>(1, (int64_t{32} << 20) / bytes) : p.batch;
  return order;
}

// The persistent forward's grid: a block per multiprocessor, at most max_blocks where given.
inline int64_t forward_persistent_blocks(int sms, int max_blocks) {
  return max_blocks > 0 ? std::min<int64_t>(max_blocks, sms) : sms;
}

}  // namespace varpack::cuda
