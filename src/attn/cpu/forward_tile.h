// The forward of one query tile, apart from where its rows come from, so the benchmark's padded
// dense peer runs the very same code with its own mask.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "attention_tiles.h"

namespace varpack::cpu {

// Rows q.row(0..n) (n = keys.n <= kBlockQ) against keys k.row(j), v.row(j), j < k_len, query r
// seeing [keys.key_begin[r], keys.key_end[r]). Walks the key tiles up to walk_end (varlen: the last
// visible key; a dense kernel: the padded length). Writes out.row(r) and lse[r] (if lse is not null).
template <typename T>
VARPACK_ALWAYS_INLINE void forward_rows(HeadRows<const T> q, HeadRows<const T> k, HeadRows<const T> v, HeadRows<T> out,
                                        float* lse, const QueryTileKeys& keys, int64_t k_len, int64_t walk_end,
                                        int64_t d, T scale, T softcap) {
  const int64_t dp = padded_dim<T>(d), rows = keys.n;
  std::vector<T> qt(d * kBlockQ), o(rows * dp, T(0)), st(kBlockK * kBlockQ),
      tanh_st(softcap > 0 ? kBlockK * kBlockQ : 0), v_scratch;
  load_rows_transposed<T>(qt.data(), q, 0, rows, d, scale);
  OnlineSoftmax<T> softmax;
  for (int64_t j0 = keys.first_tile(); j0 < walk_end; j0 += kBlockK) {
    const int64_t kn = std::min<int64_t>(kBlockK, k_len - j0);
    const TileMask<T> mask(keys, j0, kn);
    tile_scores<T>(st.data(), tanh_st.data(), {k.row(j0), k.row_stride}, qt.data(), d, mask, kn, softcap);
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
    T* dst = out.row(r);
    const T l = softmax.sum_of(r);
    if (l == T(0)) {  // the row sees no key: out = 0, lse = +inf
      for (int64_t c = 0; c < d; ++c) dst[c] = T(0);
      if (lse != nullptr) lse[r] = std::numeric_limits<float>::infinity();
      continue;
    }
    const T* orow = o.data() + r * dp;
    for (int64_t c = 0; c < d; ++c) dst[c] = orow[c] / l;
    if (lse != nullptr) lse[r] = static_cast<float>(softmax.max_of(r) + std::log(l));
  }
}

}  // namespace varpack::cpu
