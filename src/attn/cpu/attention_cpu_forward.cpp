// The CPU forward: FlashAttention's tiled online softmax (forward_tile.h), as tasks of kBlockQ query
// rows of one (sequence, head) over a cost-sorted work list.
#include <algorithm>
#include <vector>

#include "tiling.h"
#include "varpack/error.h"

namespace varpack {
namespace cpu {

std::vector<Task> query_tile_tasks(const AttentionParams& p) {
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

}  // namespace cpu

void attention_forward_cpu(const AttentionParams& params, int num_threads) {
  check_attention_params(params);
  check_host_seqlens(params);
  const std::vector<cpu::Task> tasks = cpu::query_tile_tasks(params);
  const cpu::CpuKernels& kernels = cpu::cpu_kernels();
  switch (params.dtype) {
    case DType::f32:
      return cpu::run_tasks(tasks, num_threads, [&](const cpu::Task& t) { kernels.forward_f32(params, t); });
    case DType::f64:
      return cpu::run_tasks(tasks, num_threads, [&](const cpu::Task& t) { kernels.forward_f64(params, t); });
    case DType::bf16:
      return cpu::run_tasks(tasks, num_threads, [&](const cpu::Task& t) { kernels.forward_bf16(params, t); });
    default:
      throw Error("attention: attention_forward_cpu supports dtype f32, f64 and bf16 only; convert the inputs");
  }
}

}  // namespace varpack
