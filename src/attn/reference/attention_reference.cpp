// The attention oracle: varlen attention forward and backward written as the formulas read, one
// query row at a time, every sum in double. Slow on purpose (it materialises each row's scores);
// every other implementation in the project is tested against it.
#include <cmath>
#include <limits>
#include <vector>

#include "varpack/attention.h"
#include "varpack/attention_bounds.h"
#include "varpack/error.h"

namespace varpack {
namespace {

// Row t, head h of a [rows, heads, head_dim] tensor with element strides.
template <typename T>
struct Rows {
  T* data;
  int64_t row_stride, head_stride;
  T* at(int64_t t, int64_t h) const { return data + t * row_stride + h * head_stride; }
};

template <typename T>
Rows<const T> rows(const void* p, int64_t row_stride, int64_t head_stride) {
  return {static_cast<const T*>(p), row_stride, head_stride};
}
template <typename T>
Rows<T> rows(void* p, int64_t row_stride, int64_t head_stride) {
  return {static_cast<T*>(p), row_stride, head_stride};
}

// The scores of one query row against keys [key_begin, key_end), after scale and softcap, with
// tanh(x / softcap) kept for the backward (softcap's derivative is 1 - tanh^2).
struct RowScores {
  std::vector<double> s, tanh_of;
  double lse = 0;
};

template <typename T>
void score_row(const AttentionParams& p, const T* q, Rows<const T> k, int64_t k_begin, int64_t key_begin,
               int64_t key_end, int64_t kv_head, RowScores& r) {
  const int64_t n = key_end - key_begin;
  r.s.assign(n, 0);
  r.tanh_of.assign(n, 0);
  double max_s = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const T* kj = k.at(k_begin + key_begin + j, kv_head);
    double dot = 0;
    for (int c = 0; c < p.head_dim; ++c) dot += static_cast<double>(q[c]) * static_cast<double>(kj[c]);
    double x = p.scale_as<double>() * dot;
    if (p.softcap > 0) {
      r.tanh_of[j] = std::tanh(x / p.softcap);
      x = p.softcap * r.tanh_of[j];
    }
    r.s[j] = x;
    if (x > max_s) max_s = x;
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(r.s[j] - max_s);
  r.lse = max_s + std::log(sum);
}

template <typename T>
void forward(const AttentionParams& p) {
  const auto q = rows<T>(p.q, p.q_row_stride, p.q_head_stride);
  const auto k = rows<T>(p.k, p.k_row_stride, p.k_head_stride);
  const auto v = rows<T>(p.v, p.v_row_stride, p.v_head_stride);
  const auto out = rows<T>(p.out, p.out_row_stride, p.out_head_stride);
  const int group = p.heads / p.kv_heads;
  RowScores r;
  std::vector<double> acc(p.head_dim);
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, b);
    for (int h = 0; h < p.heads; ++h) {
      const int kv_head = h / group;
      for (int64_t i = 0; i < sb.q_len; ++i) {
        const int64_t t = sb.q_begin + i;
        const int64_t jb = sb.key_begin(i, p.window_left);
        const int64_t je = sb.key_end(i, p.causal, p.window_right);
        T* o = out.at(t, h);
        float& lse = p.lse[h * p.lse_head_stride + t];
        if (jb >= je) {  // no visible key: out = 0, lse = +inf (exp(s - lse) = 0 in the backward)
          for (int c = 0; c < p.head_dim; ++c) o[c] = T(0);
          lse = std::numeric_limits<float>::infinity();
          continue;
        }
        score_row(p, q.at(t, h), k, sb.k_begin, jb, je, kv_head, r);
        acc.assign(p.head_dim, 0);
        for (int64_t j = jb; j < je; ++j) {
          const double prob = std::exp(r.s[j - jb] - r.lse);
          const T* vj = v.at(sb.k_begin + j, kv_head);
          for (int c = 0; c < p.head_dim; ++c) acc[c] += prob * static_cast<double>(vj[c]);
        }
        for (int c = 0; c < p.head_dim; ++c) o[c] = static_cast<T>(acc[c]);
        lse = static_cast<float>(r.lse);
      }
    }
  }
}

// The exact gradient of the forward above. It recomputes the softmax from q, k, v in double rather
// than reading the saved out and lse, so it stays an independent oracle for the backward kernels;
// D = sum_j P_j dP_j is the same quantity as FlashAttention's rowsum(dout * out).
template <typename T>
void backward(const AttentionBackwardParams& p) {
  const auto q = rows<T>(p.q, p.q_row_stride, p.q_head_stride);
  const auto k = rows<T>(p.k, p.k_row_stride, p.k_head_stride);
  const auto v = rows<T>(p.v, p.v_row_stride, p.v_head_stride);
  const auto dout = rows<T>(p.dout, p.dout_row_stride, p.dout_head_stride);
  const auto dq = rows<T>(p.dq, p.dq_row_stride, p.dq_head_stride);
  const auto dk = rows<T>(p.dk, p.dk_row_stride, p.dk_head_stride);
  const auto dv = rows<T>(p.dv, p.dv_row_stride, p.dv_head_stride);
  const int group = p.heads / p.kv_heads;
  const int64_t d = p.head_dim;
  const double scale = p.scale_as<double>();
  RowScores r;
  std::vector<double> dq_acc(d), prob, dprob, dk_acc, dv_acc;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceBounds sb = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, b);
    // dk, dv of the whole sequence, [k_len, kv_heads, d]: every kv row of the sequence is written,
    // zero where no query sees it.
    dk_acc.assign(sb.k_len * p.kv_heads * d, 0);
    dv_acc.assign(sb.k_len * p.kv_heads * d, 0);
    for (int h = 0; h < p.heads; ++h) {
      const int kv_head = h / group;
      for (int64_t i = 0; i < sb.q_len; ++i) {
        const int64_t t = sb.q_begin + i;
        const int64_t jb = sb.key_begin(i, p.window_left);
        const int64_t je = sb.key_end(i, p.causal, p.window_right);
        dq_acc.assign(d, 0);
        if (jb < je) {
          const T* qi = q.at(t, h);
          const T* doi = dout.at(t, h);
          score_row(p, qi, k, sb.k_begin, jb, je, kv_head, r);
          const int64_t n = je - jb;
          prob.assign(n, 0);
          dprob.assign(n, 0);
          double big_d = 0;
          for (int64_t j = 0; j < n; ++j) {
            prob[j] = std::exp(r.s[j] - r.lse);
            const T* vj = v.at(sb.k_begin + jb + j, kv_head);
            for (int c = 0; c < d; ++c) dprob[j] += static_cast<double>(doi[c]) * static_cast<double>(vj[c]);
            big_d += prob[j] * dprob[j];
          }
          for (int64_t j = 0; j < n; ++j) {
            double ds = prob[j] * (dprob[j] - big_d);  // d loss / d score
            if (p.softcap > 0) ds *= 1 - r.tanh_of[j] * r.tanh_of[j];
            const double dx = scale * ds;  // d loss / d (q . k)
            const int64_t kr = jb + j;
            const T* kj = k.at(sb.k_begin + kr, kv_head);
            double* dkj = &dk_acc[(kr * p.kv_heads + kv_head) * d];
            double* dvj = &dv_acc[(kr * p.kv_heads + kv_head) * d];
            for (int c = 0; c < d; ++c) {
              dq_acc[c] += dx * static_cast<double>(kj[c]);
              dkj[c] += dx * static_cast<double>(qi[c]);
              dvj[c] += prob[j] * static_cast<double>(doi[c]);
            }
          }
        }
        T* dqi = dq.at(t, h);
        for (int c = 0; c < d; ++c) dqi[c] = static_cast<T>(dq_acc[c]);
      }
    }
    for (int64_t j = 0; j < sb.k_len; ++j) {
      for (int g = 0; g < p.kv_heads; ++g) {
        T* dkj = dk.at(sb.k_begin + j, g);
        T* dvj = dv.at(sb.k_begin + j, g);
        for (int c = 0; c < d; ++c) {
          dkj[c] = static_cast<T>(dk_acc[(j * p.kv_heads + g) * d + c]);
          dvj[c] = static_cast<T>(dv_acc[(j * p.kv_heads + g) * d + c]);
        }
      }
    }
  }
}

[[noreturn]] void unsupported_dtype(const char* who) {
  throw Error(std::string("attention: ") + who + " supports dtype f32 and f64 only; convert the inputs");
}

}  // namespace

void attention_forward_reference(const AttentionParams& params) {
  check_attention_params(params);
  check_host_seqlens(params);
  switch (params.dtype) {
    case DType::f32: return forward<float>(params);
    case DType::f64: return forward<double>(params);
    default: unsupported_dtype("attention_forward_reference");
  }
}

void attention_backward_reference(const AttentionBackwardParams& params) {
  check_attention_backward_params(params);
  check_host_seqlens(params);
  switch (params.dtype) {
    case DType::f32: return backward<float>(params);
    case DType::f64: return backward<double>(params);
    default: unsupported_dtype("attention_backward_reference");
  }
}

}  // namespace varpack
