// A varlen attention problem for the tests: random q, k, v, dout for given sequence lengths, with
// rows past cu_seqlens[batch] and the gaps of padded strides filled with NaN (an implementation that
// reads them spreads NaN into the checked outputs), outputs poisoned with NaN before each call so
// the tests see exactly which elements were written.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "varpack/attention.h"

namespace varpack::test {

struct Shape {
  std::vector<int32_t> q_lens;
  std::vector<int32_t> k_lens;  // empty: same as q_lens
  int heads = 2, kv_heads = 1, head_dim = 8;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0;
  int64_t pad_rows = 3;    // rows past cu_seqlens[batch] in every tensor
  int64_t stride_gap = 0;  // extra elements between rows (strided, non-contiguous layouts)

  std::string describe() const;
};

// A [rows, heads, head_dim] tensor with row stride heads * head_dim + gap.
template <typename T>
struct Tensor {
  std::vector<T> data;
  int64_t rows = 0, heads = 0, dim = 0, row_stride = 0;
  Tensor() = default;
  Tensor(int64_t rows_, int64_t heads_, int64_t dim_, int64_t gap)
      : rows(rows_), heads(heads_), dim(dim_), row_stride(heads_ * dim_ + gap) {
    data.assign(rows * row_stride, std::numeric_limits<T>::quiet_NaN());
  }
  T& at(int64_t t, int64_t h, int64_t c) { return data[t * row_stride + h * dim + c]; }
  const T& at(int64_t t, int64_t h, int64_t c) const { return data[t * row_stride + h * dim + c]; }
};

template <typename T>
struct Outputs {
  Tensor<T> out, dq, dk, dv;
  std::vector<float> lse;  // [heads, total_q]
};

template <typename T>
struct Problem {
  Shape shape;
  std::vector<int32_t> cu_q, cu_k;
  int64_t valid_q = 0, valid_k = 0, total_q = 0, total_k = 0, max_q = 0, max_k = 0;
  Tensor<T> q, k, v, dout;

  Problem(const Shape& s, uint32_t seed) : shape(s) {
    if (shape.k_lens.empty()) shape.k_lens = shape.q_lens;
    cu_q = {0};
    cu_k = {0};
    for (size_t b = 0; b < shape.q_lens.size(); ++b) {
      cu_q.push_back(cu_q.back() + shape.q_lens[b]);
      cu_k.push_back(cu_k.back() + shape.k_lens[b]);
      max_q = std::max<int64_t>(max_q, shape.q_lens[b]);
      max_k = std::max<int64_t>(max_k, shape.k_lens[b]);
    }
    valid_q = cu_q.back();
    valid_k = cu_k.back();
    total_q = valid_q + shape.pad_rows;
    total_k = valid_k + shape.pad_rows;
    q = Tensor<T>(total_q, shape.heads, shape.head_dim, shape.stride_gap);
    k = Tensor<T>(total_k, shape.kv_heads, shape.head_dim, shape.stride_gap);
    v = Tensor<T>(total_k, shape.kv_heads, shape.head_dim, shape.stride_gap);
    dout = Tensor<T>(total_q, shape.heads, shape.head_dim, shape.stride_gap);
    std::mt19937 rng(seed);
    fill(q, valid_q, rng);
    fill(k, valid_k, rng);
    fill(v, valid_k, rng);
    fill(dout, valid_q, rng);
  }

  // New random values for rows [first, first + n) of k and v (the leakage tests).
  void refill_keys(int64_t first, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    for (int64_t t = first; t < first + n; ++t)
      for (int64_t h = 0; h < k.heads; ++h)
        for (int64_t c = 0; c < k.dim; ++c) {
          k.at(t, h, c) = static_cast<T>(normal(rng));
          v.at(t, h, c) = static_cast<T>(normal(rng));
        }
  }

  Outputs<T> poisoned_outputs() const {
    Outputs<T> o;
    o.out = Tensor<T>(total_q, shape.heads, shape.head_dim, shape.stride_gap);
    o.dq = Tensor<T>(total_q, shape.heads, shape.head_dim, shape.stride_gap);
    o.dk = Tensor<T>(total_k, shape.kv_heads, shape.head_dim, shape.stride_gap);
    o.dv = Tensor<T>(total_k, shape.kv_heads, shape.head_dim, shape.stride_gap);
    o.lse.assign(shape.heads * total_q, std::numeric_limits<float>::quiet_NaN());
    return o;
  }

  AttentionParams forward_params(Outputs<T>& o) const {
    AttentionParams p;
    p.dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
    p.q = q.data.data();
    p.k = k.data.data();
    p.v = v.data.data();
    p.out = o.out.data.data();
    p.lse = o.lse.data();
    p.q_row_stride = q.row_stride;
    p.k_row_stride = k.row_stride;
    p.v_row_stride = v.row_stride;
    p.out_row_stride = o.out.row_stride;
    p.q_head_stride = p.out_head_stride = p.k_head_stride = p.v_head_stride = shape.head_dim;
    p.lse_head_stride = total_q;
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_k = cu_k.data();
    p.batch = static_cast<int64_t>(shape.q_lens.size());
    p.total_q = total_q;
    p.total_k = total_k;
    p.max_seqlen_q = max_q;
    p.max_seqlen_k = max_k;
    p.heads = shape.heads;
    p.kv_heads = shape.kv_heads;
    p.head_dim = shape.head_dim;
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
    if (sizeof(T) == 8) p.softmax_scale_f64 = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
    p.causal = shape.causal;
    p.window_left = shape.window_left;
    p.window_right = shape.window_right;
    p.softcap = shape.softcap;
    return p;
  }

  // The backward reads out and lse from `o` (the forward's) and writes dq, dk, dv into it.
  AttentionBackwardParams backward_params(Outputs<T>& o) const {
    AttentionBackwardParams p;
    static_cast<AttentionParams&>(p) = forward_params(o);
    p.dout = dout.data.data();
    p.dq = o.dq.data.data();
    p.dk = o.dk.data.data();
    p.dv = o.dv.data.data();
    p.dout_row_stride = dout.row_stride;
    p.dq_row_stride = o.dq.row_stride;
    p.dk_row_stride = o.dk.row_stride;
    p.dv_row_stride = o.dv.row_stride;
    p.dout_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = shape.head_dim;
    return p;
  }

 private:
  static void fill(Tensor<T>& x, int64_t valid_rows, std::mt19937& rng) {
    std::normal_distribution<double> normal;
    for (int64_t t = 0; t < valid_rows; ++t)
      for (int64_t h = 0; h < x.heads; ++h)
        for (int64_t c = 0; c < x.dim; ++c) x.at(t, h, c) = static_cast<T>(normal(rng));
  }
};

inline std::string Shape::describe() const {
  std::string s = "q_lens={";
  for (int32_t l : q_lens) s += std::to_string(l) + ",";
  s += "} k_lens={";
  for (int32_t l : k_lens) s += std::to_string(l) + ",";
  s += "} heads=" + std::to_string(heads) + " kv_heads=" + std::to_string(kv_heads) +
       " head_dim=" + std::to_string(head_dim) + " causal=" + std::to_string(causal) + " window=(" +
       std::to_string(window_left) + "," + std::to_string(window_right) + ") softcap=" + std::to_string(softcap);
  return s;
}

}  // namespace varpack::test
