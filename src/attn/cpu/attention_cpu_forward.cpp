// The CPU forward: FlashAttention's tiled online softmax. A task is kBlockQ query rows of one
// (sequence, head); it walks the key tiles the rows can see, keeps a running max m, sum l and the
// unnormalised output O per row, and never holds more than kBlockK x kBlockQ scores.
#include "attention_cpu_forward.h"

#include <cmath>
#include <limits>
#include <vector>

#include "work_list.h"
#include "varpack/error.h"

namespace varpack {
namespace cpu {
namespace {

template <typename T>
VARPACK_ALWAYS_INLINE void forward_task(const AttentionParams& p, const Task& task) {
  const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, task.seq);
  const int kv_head = task.head / (p.heads / p.kv_heads);
  const int64_t first = sb.q_begin + task.begin;
  auto q = head_rows<const T>(p.q, p.q_row_stride, p.q_head_stride, task.head);
  auto k = head_rows<const T>(p.k, p.k_row_stride, p.k_head_stride, kv_head);
  auto v = head_rows<const T>(p.v, p.v_row_stride, p.v_head_stride, kv_head);
  auto out = head_rows<T>(p.out, p.out_row_stride, p.out_head_stride, task.head);
  q.data += first * q.row_stride;
  out.data += first * out.row_stride;
  k.data += sb.k_begin * k.row_stride;
  v.data += sb.k_begin * v.row_stride;
  const QueryTileKeys keys(sb, p, task.begin, task.end - task.begin);
  forward_rows<T>(q, k, v, out, p.lse + task.head * p.lse_head_stride + first, keys, sb.k_len, keys.hi(), p.head_dim,
                  static_cast<T>(p.softmax_scale), static_cast<T>(p.softcap));
}

// One non-template entry per dtype, so target_clones can compile it per instruction-set level.
VARPACK_CPU_CLONES void forward_task_f32(const AttentionParams& p, const Task& task) { forward_task<float>(p, task); }
VARPACK_CPU_CLONES void forward_task_f64(const AttentionParams& p, const Task& task) { forward_task<double>(p, task); }

// Tasks of kBlockQ query rows for every (sequence, head); cost = rows x keys the tile walks.
std::vector<Task> forward_tasks(const AttentionParams& p) {
  std::vector<Task> tasks;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, b);
    for (int64_t begin = 0; begin < sb.q_len; begin += kBlockQ) {
      const int64_t end = std::min<int64_t>(begin + kBlockQ, sb.q_len);
      const QueryTileKeys keys(sb, p, begin, end - begin);
      const int64_t walked = std::max<int64_t>(keys.hi() - keys.first_tile(), 0);
      for (int h = 0; h < p.heads; ++h) tasks.push_back({b, h, begin, end, (end - begin) * (walked + kBlockK)});
    }
  }
  sort_longest_first(tasks);
  return tasks;
}

}  // namespace
}  // namespace cpu

void attention_forward_cpu(const AttentionParams& params, int num_threads) {
  check_attention_params(params);
  check_host_seqlens(params);
  const std::vector<cpu::Task> tasks = cpu::forward_tasks(params);
  switch (params.dtype) {
    case DType::f32:
      return cpu::run_tasks(tasks, num_threads, [&](const cpu::Task& t) { cpu::forward_task_f32(params, t); });
    case DType::f64:
      return cpu::run_tasks(tasks, num_threads, [&](const cpu::Task& t) { cpu::forward_task_f64(params, t); });
    default:
      throw Error("attention: attention_forward_cpu supports dtype f32 and f64 only; convert the inputs");
  }
}

}  // namespace varpack
