// The tile steps shared by the CPU forward and backward. Score tiles are stored transposed,
// [key][query], and computed as K * Q^T: K and V rows are then read in place (no copy or
// transpose per key tile; Q^T is built once per task), and the softmax runs vertically, one vector
// holding kBlockQ / width queries. Also the online-softmax step the forward and the f64 backward
// share. Tiles hold the compute type T (float or double); inputs stored as S (T, or bf16 for float)
// are widened as they are loaded into them (bf16 K and V are then copied, not read in place).
// Included by the ISA translation units only (see tile_math.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "tile_math.h"

namespace varpack::cpu {
namespace {

// dst[r][0..ld) = scale * src.row(first + r), zero past head_dim; r < n. Storage type S is
// widened to the compute type T here (bf16 inputs become float tiles).
template <typename T, typename S>
VARPACK_ALWAYS_INLINE void load_rows(T* dst, int64_t ld, HeadRows<const S> src, int64_t first, int64_t n, int64_t d,
                                     T scale) {
  for (int64_t r = 0; r < n; ++r) {
    const S* s = src.row(first + r);
    T* o = dst + r * ld;
    for (int64_t c = 0; c < d; ++c) o[c] = scale * widen<T>(s[c]);
    for (int64_t c = d; c < ld; ++c) o[c] = T(0);
  }
}

// dst[c][r] = scale * src.row(first + r)[c] for r < n, zero up to the next whole vector (the tile
// code reads no further: see TileMask::query_vectors).
template <typename T, typename S>
VARPACK_ALWAYS_INLINE void load_rows_transposed(T* dst, HeadRows<const S> src, int64_t first, int64_t n, int64_t d,
                                                T scale) {
  constexpr int W = Simd<T>::width;
  for (int64_t r = 0; r < n; ++r) {
    const S* s = src.row(first + r);
    for (int64_t c = 0; c < d; ++c) dst[c * kBlockQ + r] = scale * widen<T>(s[c]);
  }
  const int64_t lanes = (n + W - 1) / W * W;
  for (int64_t c = 0; c < d; ++c)
    for (int64_t r = n; r < lanes; ++r) dst[c * kBlockQ + r] = T(0);
}

// n rows of a head as an operand of gemm in the compute type T.
template <typename T>
struct RowsOperand {
  const T* data;
  int64_t ld;
};

// As the B operand (whole vectors per row): in place when the storage is T and head_dim is a
// multiple of the vector width, else widened / copied into `scratch` with zero padding.
template <typename T, typename S>
VARPACK_ALWAYS_INLINE RowsOperand<T> rows_operand(HeadRows<const S> src, int64_t first, int64_t n, int64_t d,
                                                  std::vector<T>& scratch) {
  if constexpr (std::is_same_v<T, S>) {
    if (d % Simd<T>::width == 0) return {src.row(first), src.row_stride};
  }
  const int64_t dp = padded_dim<T>(d);
  scratch.resize(n * dp);
  load_rows<T>(scratch.data(), dp, src, first, n, d, T(1));
  return {scratch.data(), dp};
}

// As the A operand (read a scalar at a time, any head_dim): in place when the storage is T, else
// widened into `scratch`.
template <typename T, typename S>
VARPACK_ALWAYS_INLINE RowsOperand<T> rows_a_operand(HeadRows<const S> src, int64_t first, int64_t n, int64_t d,
                                                    std::vector<T>& scratch) {
  if constexpr (std::is_same_v<T, S>) {
    return {src.row(first), src.row_stride};
  } else {
    scratch.resize(n * d);
    load_rows<T>(scratch.data(), d, src, first, n, d, T(1));
    return {scratch.data(), d};
  }
}

// The visible keys of each query of a tile, relative to the key tile [j0, j0 + kn), as lane
// vectors: query i sees local key j iff lo_i <= j < hi_i. Queries past the tile's rows see none.
// Only the first query_vectors vectors hold real queries: a short sequence's tile computes no more.
template <typename T>
struct TileMask {
  static constexpr int W = Simd<T>::width;
  using I = typename Simd<T>::I;
  I lo[kBlockQ / W], hi[kBlockQ / W];
  bool all_visible = true;
  int query_vectors;

  VARPACK_ALWAYS_INLINE TileMask(const QueryTileKeys& keys, int64_t j0, int64_t kn)
      : query_vectors(static_cast<int>((keys.n + W - 1) / W)) {
    for (int64_t i = 0; i < kBlockQ; ++i) {
      int64_t a = kBlockK, e = 0;
      if (i < keys.n) {
        a = std::clamp<int64_t>(keys.key_begin[i] - j0, 0, kBlockK);
        e = std::clamp<int64_t>(keys.key_end[i] - j0, 0, kBlockK);
        all_visible = all_visible && a == 0 && e >= kn;
      }
      lo[i / W][i % W] = a;
      hi[i / W][i % W] = e;
    }
  }
};

// Score tile st[j][i] (j < kn keys, the rows of k; i < kBlockQ queries of qt = (scale * Q)^T):
// q.k, then softcap (tanh(x / softcap) kept in tanh_out for the backward), then -inf where query i
// may not see key j.
template <typename T>
VARPACK_ALWAYS_INLINE void tile_scores(T* st, T* tanh_out, RowsOperand<T> k, const T* qt, int64_t d,
                                       const TileMask<T>& mask, int64_t kn, T softcap) {
  using V = typename Simd<T>::V;
  using I = typename Simd<T>::I;
  constexpr int W = Simd<T>::width;
  gemm<T>(st, kBlockQ, k.data, k.ld, 1, qt, kBlockQ, kn, mask.query_vectors * W, d, false);
  if (softcap > 0) {
    const T inv_cap = T(1) / softcap;
    for (int64_t j = 0; j < kn; ++j)
      for (int64_t e = j * kBlockQ; e < j * kBlockQ + mask.query_vectors * W; e += W) {
        V x;
        load<T>(x, st + e);
        x *= inv_cap;
        tanh_in_place(x);
        store<T>(tanh_out + e, x);
        store<T>(st + e, softcap * x);
      }
  }
  if (mask.all_visible) return;
  const V minus_inf = V{} - std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < kn; ++j) {
    const I jv = I{} + static_cast<typename Simd<T>::Lane>(j);
    for (int v = 0; v < mask.query_vectors; ++v) {
      V x;
      load<T>(x, st + j * kBlockQ + v * W);
      x = (mask.lo[v] <= jv) & (jv < mask.hi[v]) ? x : minus_inf;
      store<T>(st + j * kBlockQ + v * W, x);
    }
  }
}

// Running max m and sum l of each query (kBlockQ / W vectors) over the key tiles seen so far.
// One step: folds in score tile st (kn keys), turns st into exp(s - m_new) and leaves in alpha the
// factor exp(m_old - m_new) by which earlier sums (and outputs) must be scaled.
template <typename T>
struct OnlineSoftmax {
  static constexpr int W = Simd<T>::width;
  using V = typename Simd<T>::V;
  V m[kBlockQ / W], l[kBlockQ / W];
  T alpha[kBlockQ];

  VARPACK_ALWAYS_INLINE OnlineSoftmax() {
    for (int v = 0; v < kBlockQ / W; ++v) {
      m[v] = V{} - std::numeric_limits<T>::infinity();
      l[v] = V{};
    }
  }

  VARPACK_ALWAYS_INLINE void step(T* st, int64_t kn, int query_vectors) {
    const V minus_inf = V{} - std::numeric_limits<T>::infinity();
    for (int v = 0; v < query_vectors; ++v) {
      V tile_max = minus_inf;
      for (int64_t j = 0; j < kn; ++j) {
        V x;
        load<T>(x, st + j * kBlockQ + v * W);
        tile_max = x > tile_max ? x : tile_max;
      }
      const V m_new = tile_max > m[v] ? tile_max : m[v];
      // A query with no visible key so far keeps m = -inf; subtracting 0 keeps its terms exp(-inf) = 0.
      const V m_safe = m_new == minus_inf ? V{} : m_new;
      V a = m[v] - m_safe;
      exp_in_place(a);
      V sum{};
      for (int64_t j = 0; j < kn; ++j) {
        V x;
        load<T>(x, st + j * kBlockQ + v * W);
        x -= m_safe;
        exp_in_place(x);
        store<T>(st + j * kBlockQ + v * W, x);
        sum += x;
      }
      l[v] = l[v] * a + sum;
      m[v] = m_new;
      store<T>(alpha + v * W, a);
    }
  }
  VARPACK_ALWAYS_INLINE T max_of(int64_t i) const { return m[i / W][i % W]; }
  VARPACK_ALWAYS_INLINE T sum_of(int64_t i) const { return l[i / W][i % W]; }
};

}  // namespace
}  // namespace varpack::cpu
