// The CPU forward: FlashAttention's tiled online softmax. A task is kBlockQ query rows of one
// (sequence, head); it walks the key tiles the rows can see, keeps a running max m, sum l and the
// unnormalised output O per row, and never holds more than kBlockQ x kBlockK scores.
#include <cmath>
#include <limits>
#include <vector>

#include "attention_tiles.h"
#include "work_list.h"
#include "varpack/error.h"

namespace varpack {
namespace cpu {
namespace {

template <typename T>
VARPACK_ALWAYS_INLINE void forward_task(const AttentionParams& p, const Task& task) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::width;
  const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, task.seq);
  const int kv_head = task.head / (p.heads / p.kv_heads);
  const int64_t d = p.head_dim, dp = padded_dim<T>(d), rows = task.end - task.begin;
  const auto q = head_rows<const T>(p.q, p.q_row_stride, p.q_head_stride, task.head);
  const auto k = head_rows<const T>(p.k, p.k_row_stride, p.k_head_stride, kv_head);
  const auto v = head_rows<const T>(p.v, p.v_row_stride, p.v_head_stride, kv_head);
  const auto out = head_rows<T>(p.out, p.out_row_stride, p.out_head_stride, task.head);
  const T minus_inf = -std::numeric_limits<T>::infinity();

  std::vector<T> qs(rows * dp), o(rows * dp, T(0)), s(rows * kBlockK), tanh_s(p.softcap > 0 ? rows * kBlockK : 0),
      kt(d * kBlockK), vs(kBlockK * dp);
  std::vector<T> m(rows, minus_inf), l(rows, T(0));
  load_rows<T>(qs.data(), dp, q, sb.q_begin + task.begin, rows, d, static_cast<T>(p.softmax_scale));
  const QueryTileKeys keys(sb, p, task.begin, rows);

  for (int64_t j0 = keys.lo() / kBlockK * kBlockK; j0 < keys.hi(); j0 += kBlockK) {
    const int64_t kn = std::min<int64_t>(kBlockK, sb.k_len - j0);
    load_transposed<T>(kt.data(), k, sb.k_begin + j0, kn, d);
    load_rows<T>(vs.data(), dp, v, sb.k_begin + j0, kn, d, T(1));
    tile_scores<T>(s.data(), tanh_s.data(), qs.data(), dp, kt.data(), d, keys, j0, kn, static_cast<T>(p.softcap));
    for (int64_t r = 0; r < rows; ++r) {
      T* sr = s.data() + r * kBlockK;
      const T tile_max = row_max<T>(sr);
      const T m_new = tile_max > m[r] ? tile_max : m[r];
      if (m_new == minus_inf) {  // no visible key yet: probabilities 0, O and l stay 0
        for (int j = 0; j < kBlockK; ++j) sr[j] = T(0);
        continue;
      }
      V sum{};
      for (int j = 0; j < kBlockK; j += W) {
        V x;
        load<T>(x, sr + j);
        x -= m_new;
        exp_in_place(x);
        store<T>(sr + j, x);
        sum += x;
      }
      T tile_sum = 0;
      for (int i = 0; i < W; ++i) tile_sum += sum[i];
      if (m_new != m[r]) {  // rescale what was accumulated under the old max
        const T alpha = std::exp(m[r] - m_new);
        l[r] *= alpha;
        T* orow = o.data() + r * dp;
        for (int64_t c = 0; c < dp; ++c) orow[c] *= alpha;
        m[r] = m_new;
      }
      l[r] += tile_sum;
    }
    gemm<T>(o.data(), dp, s.data(), kBlockK, vs.data(), dp, rows, dp, kn, true);
  }

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = sb.q_begin + task.begin + r;
    T* dst = out.row(t);
    float& lse = p.lse[task.head * p.lse_head_stride + t];
    if (l[r] == T(0)) {  // the row sees no key: out = 0, lse = +inf
      for (int64_t c = 0; c < d; ++c) dst[c] = T(0);
      lse = std::numeric_limits<float>::infinity();
      continue;
    }
    const T* orow = o.data() + r * dp;
    for (int64_t c = 0; c < d; ++c) dst[c] = orow[c] / l[r];
    lse = static_cast<float>(m[r] + std::log(l[r]));
  }
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
      const int64_t first_tile = keys.lo() / kBlockK * kBlockK;
      const int64_t walked = keys.hi() > first_tile ? keys.hi() - first_tile : 0;
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
