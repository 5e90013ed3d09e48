// The backward's tile steps and its two kinds of task (see attention_cpu_backward.cpp for the
// passes): recomputing P = exp(s - lse) and dS for a (query tile, key tile) pair, dq over the key
// tiles of a query tile, dk and dv over the query tiles of a key tile. Tiles are [key][query] as in
// the forward (attention_tiles.h), so K and V are read in place (widened copies when stored as
// bf16). T computes, S is stored; gradients are narrowed to S as they are written. Included by the
// ISA translation units.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_tiles.h"

namespace varpack::cpu {
namespace {

// The query side of a step: (scale * q)^T and dout^T for the score and dP tiles, built once per
// (head, query tile) by pass 1 into its slot of the shared buffer and read from there by pass 2;
// q and dout row-major for dk and dv (pass 2 only; in place when head_dim is whole vectors); lse
// and D as lane vectors (+inf and 0 past the rows, so those lanes get P = 0).
template <typename T>
struct QueryTile {
  const T* qt = nullptr;
  const T* dot = nullptr;
  RowsOperand<T> q_rows{}, dout_rows{};
  std::vector<T> q_scratch, dout_scratch;
  alignas(kVectorBytes) T lse[kBlockQ];
  alignas(kVectorBytes) T dsum[kBlockQ];

  // Pass 1: builds the transposed tiles into `slot` (2 * head_dim * kBlockQ, this task's own) from
  // q and dout stored as S.
  template <typename S>
  VARPACK_ALWAYS_INLINE void build(const AttentionBackwardParams& p, int head, int64_t t0, int64_t n, T* slot) {
    const int64_t d = p.head_dim;
    load_rows_transposed<T>(slot, head_rows<const S>(p.q, p.q_row_stride, p.q_head_stride, head), t0, n, d,
                            p.scale_as<T>());
    load_rows_transposed<T>(slot + d * kBlockQ, head_rows<const S>(p.dout, p.dout_row_stride, p.dout_head_stride, head),
                            t0, n, d, T(1));
    qt = slot;
    dot = slot + d * kBlockQ;
  }

  // Pass 2: the tiles pass 1 built, and the rows themselves.
  template <typename S>
  VARPACK_ALWAYS_INLINE void attach(const AttentionBackwardParams& p, int head, int64_t t0, int64_t n, const T* slot) {
    const int64_t d = p.head_dim;
    qt = slot;
    dot = slot + d * kBlockQ;
    q_rows = rows_operand<T>(head_rows<const S>(p.q, p.q_row_stride, p.q_head_stride, head), t0, n, d, q_scratch);
    dout_rows = rows_operand<T>(head_rows<const S>(p.dout, p.dout_row_stride, p.dout_head_stride, head), t0, n, d,
                                dout_scratch);
  }

  VARPACK_ALWAYS_INLINE void load_stats(const AttentionBackwardParams& p, int head, int64_t t0, int64_t n,
                                        const T* dsum_all, const T* lse_all) {
    for (int64_t r = 0; r < kBlockQ; ++r) {
      lse[r] = std::numeric_limits<T>::infinity();
      dsum[r] = T(0);
      if (r >= n) continue;
      const int64_t t = t0 + r;
      lse[r] = lse_all != nullptr ? lse_all[head * p.total_q + t] : static_cast<T>(p.lse[head * p.lse_head_stride + t]);
      dsum[r] = dsum_all[head * p.total_q + t];
    }
  }
};

// The slot of (head, query tile `tile` of sequence b) in the shared buffer of transposed tiles.
template <typename T, typename S>
VARPACK_ALWAYS_INLINE T* query_tile_slot(const AttentionBackwardParams& p, S stats, int head, int64_t b,
                                         int64_t first) {
  const int64_t tile = head * stats.query_tile_count + stats.first_query_tile[b] + first / kBlockQ;
  return stats.query_tiles + tile * 2 * p.head_dim * kBlockQ;
}

// Per (query tile, key tile): st becomes P^T = exp(s - lse) and dst becomes dS^T = P (dP - D),
// times softcap's derivative 1 - tanh^2: the gradient with respect to scale * q.k. k and v: the
// key tile's rows as A operands.
template <typename T>
VARPACK_ALWAYS_INLINE void probs_and_dscores(const AttentionBackwardParams& p, const QueryTile<T>& qt,
                                             RowsOperand<T> k, RowsOperand<T> v, const TileMask<T>& mask,
                                             int64_t kn, T* st, T* tanh_st, T* dst) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::width;
  const int64_t d = p.head_dim;
  tile_scores<T>(st, tanh_st, k, qt.qt, d, mask, kn, static_cast<T>(p.softcap));
  gemm<T>(dst, kBlockQ, v.data, v.ld, 1, qt.dot, kBlockQ, kn, mask.query_vectors * W, d,
          false);  // dP^T
  for (int v_i = 0; v_i < mask.query_vectors; ++v_i) {
    V lse, dsum;
    load<T>(lse, qt.lse + v_i * W);
    load<T>(dsum, qt.dsum + v_i * W);
    for (int64_t j = 0; j < kn; ++j) {
      const int64_t e = j * kBlockQ + v_i * W;
      V x, dpv;
      load<T>(x, st + e);
      load<T>(dpv, dst + e);
      V prob = x - lse;  // lse = +inf (no visible key) gives -inf and P = 0
      exp_in_place(prob);
      V ds = prob * (dpv - dsum);
      if (p.softcap > 0) {
        V t;
        load<T>(t, tanh_st + e);
        ds *= 1 - t * t;
      }
      store<T>(st + e, prob);
      store<T>(dst + e, ds);
    }
  }
}

template <typename S>
VARPACK_ALWAYS_INLINE HeadRows<const S> sequence_rows(const void* data, int64_t row_stride, int64_t head_stride, int head,
                                                      int64_t first) {
  HeadRows<const S> h = head_rows<const S>(data, row_stride, head_stride, head);
  h.data += first * row_stride;
  return h;
}

// The log-sum-exp of each row of a query tile, recomputed in T from the scores (f64 only).
template <typename T, typename S>
VARPACK_ALWAYS_INLINE void recompute_lse(const AttentionBackwardParams& p, HeadRows<const S> k, int64_t k_len,
                                         const QueryTile<T>& qt, const QueryTileKeys& keys, T* lse_out) {
  std::vector<T> st(kBlockK * kBlockQ), tanh_st(p.softcap > 0 ? kBlockK * kBlockQ : 0), k_scratch;
  OnlineSoftmax<T> softmax;
  for (int64_t j0 = keys.first_tile(); j0 < keys.hi(); j0 += kBlockK) {
    const int64_t kn = std::min<int64_t>(kBlockK, k_len - j0);
    const TileMask<T> mask(keys, j0, kn);
    tile_scores<T>(st.data(), tanh_st.data(), rows_a_operand<T>(k, j0, kn, p.head_dim, k_scratch), qt.qt, p.head_dim,
                   mask, kn, static_cast<T>(p.softcap));
    softmax.step(st.data(), kn, mask.query_vectors);
  }
  for (int64_t r = 0; r < keys.n; ++r) {
    const T l = softmax.sum_of(r);
    lse_out[r] = l > 0 ? softmax.max_of(r) + std::log(l) : std::numeric_limits<T>::infinity();
  }
}

// Pass 1: dq for kBlockQ query rows of one head, and the row stats of the same rows.
template <typename T, typename S>
VARPACK_ALWAYS_INLINE void dq_task(const AttentionBackwardParams& p, const Task& task, RowStats<T> stats) {
  const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, task.seq);
  const int kv_head = task.head / (p.heads / p.kv_heads);
  const int64_t d = p.head_dim, dp = padded_dim<T>(d), rows = task.end - task.begin;
  const auto out = head_rows<const S>(p.out, p.out_row_stride, p.out_head_stride, task.head);
  const auto dout = head_rows<const S>(p.dout, p.dout_row_stride, p.dout_head_stride, task.head);
  const auto dq = head_rows<S>(p.dq, p.dq_row_stride, p.dq_head_stride, task.head);
  const auto k = sequence_rows<S>(p.k, p.k_row_stride, p.k_head_stride, kv_head, sb.k_begin);
  const auto v = sequence_rows<S>(p.v, p.v_row_stride, p.v_head_stride, kv_head, sb.k_begin);
  for (int64_t r = 0; r < rows; ++r) {
    // D in double: it is a difference of nearly equal terms in dP - D.
    const int64_t t = sb.q_begin + task.begin + r;
    const S* o = out.row(t);
    const S* g = dout.row(t);
    double sum = 0;
    for (int64_t c = 0; c < d; ++c) sum += widen<double>(o[c]) * widen<double>(g[c]);
    stats.dsum[task.head * p.total_q + t] = static_cast<T>(sum);
  }
  const QueryTileKeys keys(sb, p, task.begin, rows);
  const int64_t t0 = sb.q_begin + task.begin;
  QueryTile<T> qt;
  qt.template build<S>(p, task.head, t0, rows, query_tile_slot<T>(p, stats, task.head, task.seq, task.begin));
  if (stats.lse != nullptr) {
    qt.load_stats(p, task.head, t0, rows, stats.dsum, nullptr);
    recompute_lse<T>(p, k, sb.k_len, qt, keys, stats.lse + task.head * p.total_q + t0);
  }
  qt.load_stats(p, task.head, t0, rows, stats.dsum, stats.lse);
  std::vector<T> dq_acc(rows * dp, T(0)), st(kBlockK * kBlockQ), tanh_st(p.softcap > 0 ? kBlockK * kBlockQ : 0),
      dst(kBlockK * kBlockQ), k_scratch, ka_scratch, va_scratch;
  for (int64_t j0 = keys.first_tile(); j0 < keys.hi(); j0 += kBlockK) {
    const int64_t kn = std::min<int64_t>(kBlockK, sb.k_len - j0);
    probs_and_dscores<T>(p, qt, rows_a_operand<T>(k, j0, kn, d, ka_scratch), rows_a_operand<T>(v, j0, kn, d, va_scratch),
                         TileMask<T>(keys, j0, kn), kn, st.data(), tanh_st.data(), dst.data());
    const RowsOperand<T> kr = rows_operand<T>(k, j0, kn, d, k_scratch);
    // dQ[r][c] += sum_j dS[j][r] K[j][c]: A is dS^T read transposed.
    gemm<T>(dq_acc.data(), dp, dst.data(), 1, kBlockQ, kr.data, kr.ld, rows, dp, kn, true);
  }
  const T scale = p.scale_as<T>();
  for (int64_t r = 0; r < rows; ++r) {
    S* g = dq.row(sb.q_begin + task.begin + r);
    for (int64_t c = 0; c < d; ++c) g[c] = narrow<S>(scale * dq_acc[r * dp + c]);
  }
}

// Pass 2: dk and dv for kBlockK keys of one kv head, over every query head of its group and every
// query tile that sees the keys, in increasing order.
template <typename T, typename S>
VARPACK_ALWAYS_INLINE void dkv_task(const AttentionBackwardParams& p, const Task& task, RowStats<const T> stats) {
  const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, task.seq);
  const int group = p.heads / p.kv_heads;
  const int64_t d = p.head_dim, dp = padded_dim<T>(d), j0 = task.begin, kn = task.end - task.begin;
  QueryTile<T> qt;
  std::vector<T> dk_acc(kn * dp, T(0)), dv_acc(kn * dp, T(0)), st(kBlockK * kBlockQ),
      tanh_st(p.softcap > 0 ? kBlockK * kBlockQ : 0), dst(kBlockK * kBlockQ), k_scratch, v_scratch;
  // The task's keys and values, widened once for all the query tiles (in place when stored as T).
  const RowsOperand<T> k = rows_a_operand<T>(
      sequence_rows<S>(p.k, p.k_row_stride, p.k_head_stride, task.head, sb.k_begin + j0), 0, kn, d, k_scratch);
  const RowsOperand<T> v = rows_a_operand<T>(
      sequence_rows<S>(p.v, p.v_row_stride, p.v_head_stride, task.head, sb.k_begin + j0), 0, kn, d, v_scratch);
  for (int h = task.head * group; h < (task.head + 1) * group; ++h) {
    for (int64_t first = 0; first < sb.q_len; first += kBlockQ) {
      const int64_t rows = std::min<int64_t>(kBlockQ, sb.q_len - first);
      const QueryTileKeys keys(sb, p, first, rows);
      if (!keys.sees_any(j0, j0 + kn)) continue;
      qt.template attach<S>(p, h, sb.q_begin + first, rows, query_tile_slot<const T>(p, stats, h, task.seq, first));
      qt.load_stats(p, h, sb.q_begin + first, rows, stats.dsum, stats.lse);
      probs_and_dscores<T>(p, qt, k, v, TileMask<T>(keys, j0, kn), kn, st.data(), tanh_st.data(), dst.data());
      // dV[j][c] += sum_r P[j][r] dout[r][c] and dK[j][c] += sum_r dS[j][r] q[r][c] (times scale below).
      gemm<T>(dv_acc.data(), dp, st.data(), kBlockQ, 1, qt.dout_rows.data, qt.dout_rows.ld, kn, dp, rows, true);
      gemm<T>(dk_acc.data(), dp, dst.data(), kBlockQ, 1, qt.q_rows.data, qt.q_rows.ld, kn, dp, rows, true);
    }
  }
  const T scale = p.scale_as<T>();
  const auto dk = head_rows<S>(p.dk, p.dk_row_stride, p.dk_head_stride, task.head);
  const auto dv = head_rows<S>(p.dv, p.dv_row_stride, p.dv_head_stride, task.head);
  for (int64_t j = 0; j < kn; ++j) {
    S* dkj = dk.row(sb.k_begin + j0 + j);
    S* dvj = dv.row(sb.k_begin + j0 + j);
    for (int64_t c = 0; c < d; ++c) {
      dkj[c] = narrow<S>(scale * dk_acc[j * dp + c]);
      dvj[c] = narrow<S>(dv_acc[j * dp + c]);
    }
  }
}

}  // namespace
}  // namespace varpack::cpu
