// The CPU backward: FlashAttention-2's, recomputing the probabilities P = exp(s - lse) from the
// saved log-sum-exp instead of storing them. To stay deterministic without atomics it runs two
// passes with disjoint outputs: pass 1 (tasks over query tiles) writes dq and D = rowsum(dout * out);
// pass 2 (tasks over key tiles of one kv head) writes dk and dv, summing over the group's query
// heads and query tiles in a fixed order. The second pass recomputes the scores once more: 7 tile
// products instead of 5, the price of a fixed summation order; pass 1 leaves the transposed query
// tiles for pass 2, so they are built once. The tile code is in backward_tile.h.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "tiling.h"
#include "varpack/error.h"

namespace varpack {
namespace cpu {
namespace {

// One task per (sequence, kv head, key tile), every key row of every sequence included (dk and dv
// are written, as zero where no query looks); cost = keys x query rows of the tiles that see them.
std::vector<Task> dkv_tasks(const AttentionParams& p) {
  std::vector<Task> tasks;
  const int group = p.heads / p.kv_heads;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, b);
    for (int64_t j0 = 0; j0 < sb.k_len; j0 += kBlockK) {
      const int64_t j1 = std::min<int64_t>(j0 + kBlockK, sb.k_len);
      int64_t query_rows = 0;
      for (int64_t first = 0; first < sb.q_len; first += kBlockQ) {
        const int64_t rows = std::min<int64_t>(kBlockQ, sb.q_len - first);
        if (QueryTileKeys(sb, p, first, rows).sees_any(j0, j1)) query_rows += rows;
      }
      for (int g = 0; g < p.kv_heads; ++g) tasks.push_back({b, g, j0, j1, (j1 - j0) * (query_rows * group + kBlockQ)});
    }
  }
  sort_longest_first(tasks);
  return tasks;
}

template <typename T, typename DqTask, typename DkvTask>
void backward(const AttentionBackwardParams& p, int num_threads, DqTask* dq_task_fn, DkvTask* dkv_task_fn) {
  const size_t rows = static_cast<size_t>(p.heads) * p.total_q;
  std::vector<int64_t> first_query_tile(p.batch + 1, 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q_len = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, b).q_len;
    first_query_tile[b + 1] = first_query_tile[b] + (q_len + kBlockQ - 1) / kBlockQ;
  }
  const int64_t tiles = first_query_tile[p.batch];
  std::vector<T> dsum(rows), lse(std::is_same_v<T, double> ? rows : 0),
      query_tiles(static_cast<size_t>(p.heads) * tiles * 2 * p.head_dim * kBlockQ);
  const RowStats<T> stats{dsum.data(), lse.empty() ? nullptr : lse.data(), query_tiles.data(),
                          first_query_tile.data(), tiles};
  run_tasks(query_tile_tasks(p), num_threads, [&](const Task& t) { dq_task_fn(p, t, stats); });
  const RowStats<const T> read{stats.dsum, stats.lse, stats.query_tiles, stats.first_query_tile, tiles};
  run_tasks(dkv_tasks(p), num_threads, [&](const Task& t) { dkv_task_fn(p, t, read); });
}

}  // namespace
}  // namespace cpu

void attention_backward_cpu(const AttentionBackwardParams& params, int num_threads) {
  check_attention_backward_params(params);
  check_host_seqlens(params);
  switch (params.dtype) {
    case DType::f32: {
      const cpu::CpuKernels& k = cpu::cpu_kernels();
      return cpu::backward<float>(params, num_threads, k.dq_f32, k.dkv_f32);
    }
    case DType::f64: {
      const cpu::CpuKernels& k = cpu::cpu_kernels();
      return cpu::backward<double>(params, num_threads, k.dq_f64, k.dkv_f64);
    }
    case DType::bf16: {  // bf16 storage, float compute: the row stats and tiles are float
      const cpu::CpuKernels& k = cpu::cpu_kernels();
      return cpu::backward<float>(params, num_threads, k.dq_bf16, k.dkv_bf16);
    }
    default:
      throw Error("attention: attention_backward_cpu supports dtype f32, f64 and bf16 only; convert the inputs");
  }
}

}  // namespace varpack
