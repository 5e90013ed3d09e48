// The CPU backward: FlashAttention-2's, recomputing the probabilities P = exp(s - lse) from the
// saved log-sum-exp instead of storing them. To stay deterministic without atomics it runs two
// passes with disjoint outputs: pass 1 (tasks over query tiles) writes dq and D = rowsum(dout * out);
// pass 2 (tasks over key tiles of one kv head) writes dk and dv, summing over the group's query
// heads and query tiles in a fixed order. The second pass recomputes the scores once more: 7 tile
// products instead of 5, the price of a fixed summation order.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention_tiles.h"
#include "work_list.h"
#include "varpack/error.h"

namespace varpack {
namespace cpu {
namespace {

// Per-row values pass 1 computes for pass 2, [heads, total_q]: D = rowsum(dout * out) and, in f64
// only, the log-sum-exp recomputed in double (the saved one is float32, too coarse for gradcheck).
template <typename T>
struct RowStats {
  T* dsum;
  T* lse;  // null: use the forward's
};

// The query side of a (query tile, key tile) step: q times softmax_scale, dout, lse and D.
template <typename T>
struct QueryTile {
  std::vector<T> qs, dos, lse, dsum;
  explicit QueryTile(int64_t dp) : qs(kBlockQ * dp), dos(kBlockQ * dp), lse(kBlockQ), dsum(kBlockQ) {}

  void load(const AttentionBackwardParams& p, const SequenceBounds& sb, int head, int64_t first, int64_t rows,
            RowStats<const T> stats) {
    const int64_t d = p.head_dim, dp = padded_dim<T>(d);
    const auto q = head_rows<const T>(p.q, p.q_row_stride, p.q_head_stride, head);
    const auto dout = head_rows<const T>(p.dout, p.dout_row_stride, p.dout_head_stride, head);
    load_rows<T>(qs.data(), dp, q, sb.q_begin + first, rows, d, static_cast<T>(p.softmax_scale));
    load_rows<T>(dos.data(), dp, dout, sb.q_begin + first, rows, d, T(1));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = sb.q_begin + first + r;
      lse[r] = stats.lse != nullptr ? stats.lse[head * p.total_q + t]
                                    : static_cast<T>(p.lse[head * p.lse_head_stride + t]);
      dsum[r] = stats.dsum[head * p.total_q + t];
    }
  }
};

// The key side: K^T and V^T for the scores and dP, K itself for dq.
template <typename T>
struct KeyTile {
  std::vector<T> kt, vt, ks;
  KeyTile(int64_t d, int64_t dp, bool with_k) : kt(d * kBlockK), vt(d * kBlockK), ks(with_k ? kBlockK * dp : 0) {}

  void load(const AttentionBackwardParams& p, const SequenceBounds& sb, int kv_head, int64_t j0, int64_t kn) {
    const int64_t d = p.head_dim, dp = padded_dim<T>(d);
    const auto k = head_rows<const T>(p.k, p.k_row_stride, p.k_head_stride, kv_head);
    const auto v = head_rows<const T>(p.v, p.v_row_stride, p.v_head_stride, kv_head);
    load_transposed<T>(kt.data(), k, sb.k_begin + j0, kn, d);
    load_transposed<T>(vt.data(), v, sb.k_begin + j0, kn, d);
    if (!ks.empty()) load_rows<T>(ks.data(), dp, k, sb.k_begin + j0, kn, d, T(1));
  }
};

// Per (query tile, key tile): s becomes P = exp(s - lse) and dpb becomes dS = P (dP - D), times
// softcap's derivative 1 - tanh^2; dS is the gradient with respect to q.k times softmax_scale.
template <typename T>
VARPACK_ALWAYS_INLINE void probs_and_dscores(const AttentionBackwardParams& p, const QueryTile<T>& qt,
                                             const KeyTile<T>& kt, const QueryTileKeys& keys, int64_t j0,
                                             int64_t kn, T* s, T* tanh_s, T* dpb) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::width;
  const int64_t d = p.head_dim, dp = padded_dim<T>(d);
  tile_scores<T>(s, tanh_s, qt.qs.data(), dp, kt.kt.data(), d, keys, j0, kn, static_cast<T>(p.softcap));
  gemm<T>(dpb, kBlockK, qt.dos.data(), dp, kt.vt.data(), kBlockK, keys.n, kBlockK, d, false);
  for (int64_t r = 0; r < keys.n; ++r) {
    // lse = +inf (no visible key) gives s - lse = -inf and P = 0.
    const T lse = qt.lse[r], dsum = qt.dsum[r];
    for (int j = 0; j < kBlockK; j += W) {
      const int64_t i = r * kBlockK + j;
      V x, dpv;
      load<T>(x, s + i);
      load<T>(dpv, dpb + i);
      V prob = x - lse;
      exp_in_place(prob);
      V ds = prob * (dpv - dsum);
      if (p.softcap > 0) {
        V t;
        load<T>(t, tanh_s + i);
        ds *= 1 - t * t;
      }
      store<T>(s + i, prob);
      store<T>(dpb + i, ds);
    }
  }
}

// dst[j][r] = src[r][j] for r < rows, j < kn.
template <typename T>
VARPACK_ALWAYS_INLINE void transpose_tile(T* dst, const T* src, int64_t rows, int64_t kn) {
  for (int64_t j = 0; j < kn; ++j)
    for (int64_t r = 0; r < rows; ++r) dst[j * kBlockQ + r] = src[r * kBlockK + j];
}

// The log-sum-exp of each row of a query tile, recomputed in T from the scores (f64 only).
template <typename T>
VARPACK_ALWAYS_INLINE void recompute_lse(const AttentionBackwardParams& p, const SequenceBounds& sb, int kv_head,
                                         const QueryTile<T>& qt, const QueryTileKeys& keys, T* lse_out) {
  const int64_t d = p.head_dim, rows = keys.n;
  std::vector<T> kt(d * kBlockK), s(rows * kBlockK), tanh_s(p.softcap > 0 ? rows * kBlockK : 0);
  std::vector<T> m(rows, -std::numeric_limits<T>::infinity()), l(rows, T(0));
  const auto k = head_rows<const T>(p.k, p.k_row_stride, p.k_head_stride, kv_head);
  for (int64_t j0 = keys.lo() / kBlockK * kBlockK; j0 < keys.hi(); j0 += kBlockK) {
    const int64_t kn = std::min<int64_t>(kBlockK, sb.k_len - j0);
    load_transposed<T>(kt.data(), k, sb.k_begin + j0, kn, d);
    tile_scores<T>(s.data(), tanh_s.data(), qt.qs.data(), padded_dim<T>(d), kt.data(), d, keys, j0, kn,
                   static_cast<T>(p.softcap));
    for (int64_t r = 0; r < rows; ++r) {
      const T* sr = s.data() + r * kBlockK;
      const T m_new = std::max(m[r], row_max<T>(sr));
      if (m_new == -std::numeric_limits<T>::infinity()) continue;
      l[r] *= std::exp(m[r] - m_new);
      for (int j = 0; j < kBlockK; ++j) l[r] += std::exp(sr[j] - m_new);
      m[r] = m_new;
    }
  }
  for (int64_t r = 0; r < rows; ++r) lse_out[r] = l[r] > 0 ? m[r] + std::log(l[r]) : std::numeric_limits<T>::infinity();
}

// Pass 1: dq for kBlockQ query rows of one head, and the row stats of the same rows.
template <typename T>
VARPACK_ALWAYS_INLINE void dq_task(const AttentionBackwardParams& p, const Task& task, RowStats<T> stats) {
  const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, task.seq);
  const int kv_head = task.head / (p.heads / p.kv_heads);
  const int64_t d = p.head_dim, dp = padded_dim<T>(d), rows = task.end - task.begin;
  const auto out = head_rows<const T>(p.out, p.out_row_stride, p.out_head_stride, task.head);
  const auto dout = head_rows<const T>(p.dout, p.dout_row_stride, p.dout_head_stride, task.head);
  const auto dq = head_rows<T>(p.dq, p.dq_row_stride, p.dq_head_stride, task.head);
  for (int64_t r = 0; r < rows; ++r) {
    // D in double: it is a difference of nearly equal terms in dP - D.
    const int64_t t = sb.q_begin + task.begin + r;
    const T* o = out.row(t);
    const T* g = dout.row(t);
    double sum = 0;
    for (int64_t c = 0; c < d; ++c) sum += static_cast<double>(o[c]) * static_cast<double>(g[c]);
    stats.dsum[task.head * p.total_q + t] = static_cast<T>(sum);
  }
  const QueryTileKeys keys(sb, p, task.begin, rows);
  QueryTile<T> qt(dp);
  if (stats.lse != nullptr) {
    qt.load(p, sb, task.head, task.begin, rows, {stats.dsum, nullptr});
    recompute_lse<T>(p, sb, kv_head, qt, keys, stats.lse + task.head * p.total_q + sb.q_begin + task.begin);
  }
  qt.load(p, sb, task.head, task.begin, rows, {stats.dsum, stats.lse});
  KeyTile<T> ktile(d, dp, true);
  std::vector<T> dq_acc(rows * dp, T(0)), s(rows * kBlockK), tanh_s(p.softcap > 0 ? rows * kBlockK : 0),
      dpb(rows * kBlockK);
  for (int64_t j0 = keys.lo() / kBlockK * kBlockK; j0 < keys.hi(); j0 += kBlockK) {
    const int64_t kn = std::min<int64_t>(kBlockK, sb.k_len - j0);
    ktile.load(p, sb, kv_head, j0, kn);
    probs_and_dscores<T>(p, qt, ktile, keys, j0, kn, s.data(), tanh_s.data(), dpb.data());
    gemm<T>(dq_acc.data(), dp, dpb.data(), kBlockK, ktile.ks.data(), dp, rows, dp, kn, true);
  }
  const T scale = static_cast<T>(p.softmax_scale);
  for (int64_t r = 0; r < rows; ++r) {
    T* dst = dq.row(sb.q_begin + task.begin + r);
    for (int64_t c = 0; c < d; ++c) dst[c] = scale * dq_acc[r * dp + c];
  }
}

// Pass 2: dk and dv for kBlockK keys of one kv head, over every query head of its group and every
// query tile that sees the keys, in increasing order.
template <typename T>
VARPACK_ALWAYS_INLINE void dkv_task(const AttentionBackwardParams& p, const Task& task, RowStats<const T> stats) {
  const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, task.seq);
  const int group = p.heads / p.kv_heads;
  const int64_t d = p.head_dim, dp = padded_dim<T>(d), j0 = task.begin, kn = task.end - task.begin;
  KeyTile<T> ktile(d, dp, false);
  ktile.load(p, sb, task.head, j0, kn);
  QueryTile<T> qt(dp);
  std::vector<T> dk_acc(kBlockK * dp, T(0)), dv_acc(kBlockK * dp, T(0)), s(kBlockQ * kBlockK),
      tanh_s(p.softcap > 0 ? kBlockQ * kBlockK : 0), dpb(kBlockQ * kBlockK), transposed(kBlockK * kBlockQ);
  for (int h = task.head * group; h < (task.head + 1) * group; ++h) {
    for (int64_t first = 0; first < sb.q_len; first += kBlockQ) {
      const int64_t rows = std::min<int64_t>(kBlockQ, sb.q_len - first);
      const QueryTileKeys keys(sb, p, first, rows);
      if (!keys.sees_any(j0, j0 + kn)) continue;
      qt.load(p, sb, h, first, rows, stats);
      probs_and_dscores<T>(p, qt, ktile, keys, j0, kn, s.data(), tanh_s.data(), dpb.data());
      transpose_tile<T>(transposed.data(), s.data(), rows, kn);
      gemm<T>(dv_acc.data(), dp, transposed.data(), kBlockQ, qt.dos.data(), dp, kn, dp, rows, true);
      transpose_tile<T>(transposed.data(), dpb.data(), rows, kn);
      gemm<T>(dk_acc.data(), dp, transposed.data(), kBlockQ, qt.qs.data(), dp, kn, dp, rows, true);
    }
  }
  const auto dk = head_rows<T>(p.dk, p.dk_row_stride, p.dk_head_stride, task.head);
  const auto dv = head_rows<T>(p.dv, p.dv_row_stride, p.dv_head_stride, task.head);
  for (int64_t j = 0; j < kn; ++j) {
    T* dkj = dk.row(sb.k_begin + j0 + j);
    T* dvj = dv.row(sb.k_begin + j0 + j);
    for (int64_t c = 0; c < d; ++c) {
      dkj[c] = dk_acc[j * dp + c];
      dvj[c] = dv_acc[j * dp + c];
    }
  }
}

VARPACK_CPU_CLONES void dq_task_f32(const AttentionBackwardParams& p, const Task& t, RowStats<float> stats) {
  dq_task<float>(p, t, stats);
}
VARPACK_CPU_CLONES void dq_task_f64(const AttentionBackwardParams& p, const Task& t, RowStats<double> stats) {
  dq_task<double>(p, t, stats);
}
VARPACK_CPU_CLONES void dkv_task_f32(const AttentionBackwardParams& p, const Task& t, RowStats<const float> stats) {
  dkv_task<float>(p, t, stats);
}
VARPACK_CPU_CLONES void dkv_task_f64(const AttentionBackwardParams& p, const Task& t, RowStats<const double> stats) {
  dkv_task<double>(p, t, stats);
}

std::vector<Task> dq_tasks(const AttentionParams& p) {
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
void backward(const AttentionBackwardParams& p, int num_threads, DqTask dq_task_fn, DkvTask dkv_task_fn) {
  const size_t rows = static_cast<size_t>(p.heads) * p.total_q;
  std::vector<T> dsum(rows), lse(std::is_same_v<T, double> ? rows : 0);
  const RowStats<T> stats{dsum.data(), lse.empty() ? nullptr : lse.data()};
  run_tasks(dq_tasks(p), num_threads, [&](const Task& t) { dq_task_fn(p, t, stats); });
  const RowStats<const T> read{stats.dsum, stats.lse};
  run_tasks(dkv_tasks(p), num_threads, [&](const Task& t) { dkv_task_fn(p, t, read); });
}

}  // namespace
}  // namespace cpu

void attention_backward_cpu(const AttentionBackwardParams& params, int num_threads) {
  check_attention_backward_params(params);
  check_host_seqlens(params);
  switch (params.dtype) {
    case DType::f32: return cpu::backward<float>(params, num_threads, cpu::dq_task_f32, cpu::dkv_task_f32);
    case DType::f64: return cpu::backward<double>(params, num_threads, cpu::dq_task_f64, cpu::dkv_task_f64);
    default:
      throw Error("attention: attention_backward_cpu supports dtype f32 and f64 only; convert the inputs");
  }
}

}  // namespace varpack
