// The padded dense peer for the CPU attention benchmark: attention over a [batch, L, heads, d]
// batch in which row b holds lengths[b] real tokens and L - lengths[b] padding, computed as a dense
// kernel does it (every query row, every key tile up to L, padding keys masked out). Same tile
// primitives as varpack's CPU kernel, so the measured saving is the padding, not the code.
#pragma once

#include <cstdint>
#include <vector>

namespace varpack::bench {

struct PaddedBatch {
  const float* q;  // [batch, L, heads, d], contiguous
  const float* k;  // [batch, L, kv_heads, d]
  const float* v;
  float* out;      // [batch, L, heads, d]
  std::vector<int32_t> lengths;
  int64_t seq_len = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
};

void padded_attention_forward(const PaddedBatch& batch, int num_threads);

}  // namespace varpack::bench
