// The tile steps shared by the CPU forward and backward: copying rows of q, k, v into padded local
// tiles, which keys each query row of a tile may see (from SequenceBounds), and the scores of one
// (query tile, key tile) pair with softcap and masking applied.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "tile_math.h"
#include "varpack/attention.h"
#include "varpack/attention_bounds.h"

namespace varpack::cpu {

// One head of a [rows, heads, head_dim] tensor.
template <typename T>
struct HeadRows {
  T* data;
  int64_t row_stride;
  T* row(int64_t t) const { return data + t * row_stride; }
};

template <typename T, typename P>
HeadRows<T> head_rows(P* data, int64_t row_stride, int64_t head_stride, int64_t head) {
  return {static_cast<T*>(data) + head * head_stride, row_stride};
}

// dst[r][0..ld) = scale * src row (first + r), zero past head_dim; r < n.
template <typename T>
VARPACK_ALWAYS_INLINE void load_rows(T* dst, int64_t ld, HeadRows<const T> src, int64_t first, int64_t n, int64_t d,
                                     T scale) {
  for (int64_t r = 0; r < n; ++r) {
    const T* s = src.row(first + r);
    T* o = dst + r * ld;
    for (int64_t c = 0; c < d; ++c) o[c] = scale * s[c];
    for (int64_t c = d; c < ld; ++c) o[c] = T(0);
  }
}

// dst[c][j] = src row (first + j), column c, for j < n and zero for n <= j < kBlockK: the key tile
// transposed, so a score row is a sum of whole vectors over c.
template <typename T>
VARPACK_ALWAYS_INLINE void load_transposed(T* dst, HeadRows<const T> src, int64_t first, int64_t n, int64_t d) {
  for (int64_t j = 0; j < n; ++j) {
    const T* s = src.row(first + j);
    for (int64_t c = 0; c < d; ++c) dst[c * kBlockK + j] = s[c];
  }
  for (int64_t c = 0; c < d; ++c)
    for (int64_t j = n; j < kBlockK; ++j) dst[c * kBlockK + j] = T(0);
}

// Which keys rows [first, first + n) of a sequence see: row r sees [key_begin[r], key_end[r]).
// Both bounds grow with the row, so the tile as a whole sees [key_begin[0], key_end[n - 1]).
struct QueryTileKeys {
  int64_t key_begin[kBlockQ] = {};
  int64_t key_end[kBlockQ] = {};
  int64_t n = 0;

  QueryTileKeys(const SequenceBounds& sb, const AttentionParams& p, int64_t first, int64_t rows) : n(rows) {
    for (int64_t r = 0; r < n; ++r) {
      key_begin[r] = sb.key_begin(first + r, p.window_left);
      key_end[r] = sb.key_end(first + r, p.causal, p.window_right);
    }
  }
  int64_t lo() const { return key_begin[0]; }
  int64_t hi() const { return key_end[n - 1]; }
  bool sees_any(int64_t j0, int64_t j1) const { return lo() < j1 && hi() > j0 && lo() < hi(); }
};

// Scores s[r][j] of the tile's query rows against keys [j0, j0 + kBlockK) of the sequence:
// q (already times softmax_scale) . k, then softcap, then -inf where row r may not look (outside
// its window, or past the key tile's kn valid keys). With softcap, tanh_out[r][j] keeps
// tanh(x / softcap) for the backward.
template <typename T>
VARPACK_ALWAYS_INLINE void tile_scores(T* s, T* tanh_out, const T* qs, int64_t ldq, const T* kt, int64_t d,
                                       const QueryTileKeys& keys, int64_t j0, int64_t kn, T softcap) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::width;
  gemm<T>(s, kBlockK, qs, ldq, kt, kBlockK, keys.n, kBlockK, d, false);
  if (softcap > 0) {
    const T inv_cap = T(1) / softcap;
    for (int64_t i = 0; i < keys.n * kBlockK; i += W) {
      V x;
      load<T>(x, s + i);
      V t = x * inv_cap;
      tanh_in_place(t);
      store<T>(tanh_out + i, t);
      store<T>(s + i, softcap * t);
    }
  }
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < keys.n; ++r) {
    const int64_t a = std::clamp<int64_t>(keys.key_begin[r] - j0, 0, kn);
    const int64_t e = std::clamp<int64_t>(keys.key_end[r] - j0, a, kn);
    T* row = s + r * kBlockK;
    for (int64_t j = 0; j < a; ++j) row[j] = minus_inf;
    for (int64_t j = e; j < kBlockK; ++j) row[j] = minus_inf;
  }
}

}  // namespace varpack::cpu
