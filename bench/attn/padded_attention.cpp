// Dense masked attention over a padded batch (see padded_attention.h): every query row of L, every
// key tile up to L (causal: up to the diagonal, as dense causal kernels skip the upper tiles), the
// padding keys masked out. It runs varpack's own forward tile code with a dense mask, so the
// measured saving is the padding, not a difference in code quality.
#include "padded_attention.h"

#include <algorithm>
#include <cmath>

#include "attn/cpu/tiling.h"

namespace varpack::bench {
namespace {

void padded_task(const PaddedBatch& pb, const cpu::Task& task) {
  const int64_t d = pb.head_dim, L = pb.seq_len, len = pb.lengths[task.seq];
  const int kv_head = task.head / (pb.heads / pb.kv_heads);
  const int64_t q_stride = pb.heads * d, kv_stride = pb.kv_heads * d;
  const int64_t first = task.seq * L + task.begin;
  cpu::QueryTileKeys keys;  // key-padding mask, and top-left causal (tokens start at position 0)
  keys.n = task.end - task.begin;
  for (int64_t r = 0; r < keys.n; ++r) keys.key_end[r] = std::min(len, pb.causal ? task.begin + r + 1 : L);
  cpu::cpu_kernels().forward_rows_f32({{pb.q + first * q_stride + task.head * d, q_stride},
                                       {pb.k + task.seq * L * kv_stride + kv_head * d, kv_stride},
                                       {pb.v + task.seq * L * kv_stride + kv_head * d, kv_stride},
                                       {pb.out + first * q_stride + task.head * d, q_stride},
                                       nullptr,
                                       &keys,
                                       L,
                                       pb.causal ? task.end : L,
                                       d,
                                       1.0f / std::sqrt(static_cast<float>(d)),
                                       0.0f});
}

}  // namespace

void padded_attention_forward(const PaddedBatch& pb, int num_threads) {
  std::vector<cpu::Task> tasks;
  for (int64_t b = 0; b < static_cast<int64_t>(pb.lengths.size()); ++b)
    for (int64_t begin = 0; begin < pb.seq_len; begin += cpu::kBlockQ)
      for (int h = 0; h < pb.heads; ++h) {
        const int64_t end = std::min<int64_t>(begin + cpu::kBlockQ, pb.seq_len);
        tasks.push_back({b, h, begin, end, (end - begin) * (pb.causal ? end : pb.seq_len)});
      }
  cpu::sort_longest_first(tasks);
  cpu::run_tasks(tasks, num_threads, [&](const cpu::Task& t) { padded_task(pb, t); });
}

}  // namespace varpack::bench
