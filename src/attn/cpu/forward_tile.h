// The forward of one query tile (FlashAttention's online softmax over the key tiles the rows may
// see), and of one task of the varlen forward. The benchmark's padded dense peer calls the same
// tile code with its own mask (ForwardRows in tiling.h). Included by the ISA translation units.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_tiles.h"

namespace varpack::cpu {
namespace {

// See ForwardRows (tiling.h).
template <typename T, typename S>
VARPACK_ALWAYS_INLINE void forward_rows(const ForwardRows<T, S>& a) {
  const QueryTileKeys& keys = *a.keys;
  const HeadRows<const S> q = a.q, k = a.k, v = a.v;
  const int64_t d = a.head_dim;
  const T softcap = a.softcap;
  const int64_t dp = padded_dim<T>(d), rows = keys.n;
  // Buffers kept per thread across tasks: short sequences make many small tasks.
  thread_local std::vector<T> qt, o, st, tanh_st, k_scratch, v_scratch;
  qt.resize(d * kBlockQ);
  o.assign(rows * dp, T(0));
  st.resize(kBlockK * kBlockQ);
  tanh_st.resize(softcap > 0 ? kBlockK * kBlockQ : 0);
  load_rows_transposed<T>(qt.data(), q, 0, rows, d, a.scale);
  OnlineSoftmax<T> softmax;
  for (int64_t j0 = keys.first_tile(); j0 < a.walk_end; j0 += kBlockK) {
    const int64_t kn = std::min<int64_t>(kBlockK, a.k_len - j0);
    const TileMask<T> mask(keys, j0, kn);
    tile_scores<T>(st.data(), tanh_st.data(), rows_a_operand<T>(k, j0, kn, d, k_scratch), qt.data(), d, mask, kn,
                   softcap);
    softmax.step(st.data(), kn, mask.query_vectors);
    for (int64_t r = 0; r < rows; ++r) {
      if (softmax.alpha[r] == T(1)) continue;
      T* orow = o.data() + r * dp;
      for (int64_t c = 0; c < dp; ++c) orow[c] *= softmax.alpha[r];
    }
    const RowsOperand<T> vt = rows_operand<T>(v, j0, kn, d, v_scratch);
    // O[r][c] += sum_j P[j][r] V[j][c]: A is the probability tile read transposed.
    gemm<T>(o.data(), dp, st.data(), 1, kBlockQ, vt.data, vt.ld, rows, dp, kn, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    S* dst = a.out.row(r);
    const T l = softmax.sum_of(r);
    if (l == T(0)) {  // the row sees no key: out = 0, lse = +inf
      for (int64_t c = 0; c < d; ++c) dst[c] = narrow<S>(T(0));
      if (a.lse != nullptr) a.lse[r] = std::numeric_limits<float>::infinity();
      continue;
    }
    const T* orow = o.data() + r * dp;
    for (int64_t c = 0; c < d; ++c) dst[c] = narrow<S>(orow[c] / l);
    if (a.lse != nullptr) a.lse[r] = static_cast<float>(softmax.max_of(r) + std::log(l));
  }
}

// A task of the varlen forward: kBlockQ query rows [task.begin, task.end) of one (sequence, head).
template <typename T, typename S>
VARPACK_ALWAYS_INLINE void forward_task(const AttentionParams& p, const Task& task) {
  const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, task.seq);
  const int kv_head = task.head / (p.heads / p.kv_heads);
  const int64_t first = sb.q_begin + task.begin;
  auto q = head_rows<const S>(p.q, p.q_row_stride, p.q_head_stride, task.head);
  auto k = head_rows<const S>(p.k, p.k_row_stride, p.k_head_stride, kv_head);
  auto v = head_rows<const S>(p.v, p.v_row_stride, p.v_head_stride, kv_head);
  auto out = head_rows<S>(p.out, p.out_row_stride, p.out_head_stride, task.head);
  q.data += first * q.row_stride;
  out.data += first * out.row_stride;
  k.data += sb.k_begin * k.row_stride;
  v.data += sb.k_begin * v.row_stride;
  const QueryTileKeys keys(sb, p, task.begin, task.end - task.begin);
  forward_rows<T, S>({q, k, v, out, p.lse + task.head * p.lse_head_stride + first, &keys, sb.k_len, keys.hi(),
                   p.head_dim, p.scale_as<T>(), static_cast<T>(p.softcap)});
}

}  // namespace
}  // namespace varpack::cpu
