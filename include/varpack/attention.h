// The one parameter struct every varlen attention implementation takes (reference, CPU, CUDA),
// FlashAttention-2's interface in plain C++. Layout ("THD"): q [total_q, heads, head_dim],
// k and v [total_k, kv_heads, head_dim], out like q, lse [heads, total_q] in fp32. Strides are in
// elements and int64, so offsets never overflow past 2^31 elements.
#pragma once

#include <cstdint>
#include <type_traits>

namespace varpack {

enum class DType { f32, f64, bf16, f16 };

struct AttentionParams {
  DType dtype = DType::f32;  // of q, k, v, out (and dout, dq, dk, dv in the backward)

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // [heads, total_q], row stride lse_head_stride; +inf for a query with no key

  int64_t q_row_stride = 0, q_head_stride = 0;  // q[t, h, d] = q[t*q_row_stride + h*q_head_stride + d]
  int64_t k_row_stride = 0, k_head_stride = 0;
  int64_t v_row_stride = 0, v_head_stride = 0;
  int64_t out_row_stride = 0, out_head_stride = 0;
  int64_t lse_head_stride = 0;  // usually total_q

  const int32_t* cu_seqlens_q = nullptr;  // [batch + 1], host or device memory as the impl needs
  const int32_t* cu_seqlens_k = nullptr;
  int64_t batch = 0;
  int64_t total_q = 0, total_k = 0;       // rows of q and k; rows past cu_seqlens[batch] are unused
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // host ints: no implementation reads them back

  int heads = 0, kv_heads = 0, head_dim = 0;  // heads % kv_heads == 0; q head h reads kv head
                                              // h / (heads / kv_heads)
  float softmax_scale = 0;  // usually 1/sqrt(head_dim); what float32/bf16/fp16 compute takes
  // The same scale unrounded, for float64 compute (0: softmax_scale): 1/sqrt(head_dim) rounded to
  // float32 is off by up to 3e-8 relative, which float64 results would carry.
  double softmax_scale_f64 = 0;
  bool causal = false;      // bottom-right aligned per sequence (FlashAttention >= 2.1)
  int64_t window_left = -1, window_right = -1;  // sliding window; -1 = unbounded on that side
  float softcap = 0;        // > 0: score = softcap * tanh(scale * q.k / softcap)

  // The scale in compute type T: float64 takes softmax_scale_f64 when given.
  template <typename T>
  T scale_as() const {
    if constexpr (std::is_same_v<T, double>) {
      if (softmax_scale_f64 != 0) return static_cast<T>(softmax_scale_f64);
    }
    return static_cast<T>(softmax_scale);
  }
};

struct AttentionBackwardParams : AttentionParams {
  const void* dout = nullptr;  // like out; `out` and `lse` are the forward's, read only here
  void* dq = nullptr;          // like q
  void* dk = nullptr;          // like k
  void* dv = nullptr;          // like v
  int64_t dout_row_stride = 0, dout_head_stride = 0;
  int64_t dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_row_stride = 0, dv_head_stride = 0;
  bool deterministic = false;  // the CPU paths are always deterministic; CUDA honours this
};

// Throws varpack::Error naming the field at fault (null pointer, heads % kv_heads, head_dim <= 0,
// batch < 0, ...). cu_seqlens contents are checked by check_cu_seqlens when they are on the host.
void check_attention_params(const AttentionParams& params);
void check_cu_seqlens(const int32_t* cu_seqlens, int64_t batch, int64_t total_rows, const char* name);
// check_attention_params plus the backward's own pointers (dout, dq, dk, dv).
void check_attention_backward_params(const AttentionBackwardParams& params);
// Both cu_seqlens (host memory) with check_cu_seqlens, and every sequence's length against
// max_seqlen_q / max_seqlen_k. The reference and CPU paths call it; cu_seqlens[batch] may be below
// total rows (the rows past it belong to no sequence and are never read or written).
void check_host_seqlens(const AttentionParams& params);

// Plain C++, double accumulation, obviously correct: the oracle for every attention test.
// Supports f32 and f64.
void attention_forward_reference(const AttentionParams& params);
void attention_backward_reference(const AttentionBackwardParams& params);

// Tiled online-softmax (FlashAttention's algorithm) on the CPU, threaded and vectorised.
// Supports f32, f64 (for gradient checks) and bf16: bf16 q, k, v, dout are widened to float as they
// are loaded into the tiles, everything accumulates in float, and out, dq, dk, dv are rounded to
// bf16 (nearest, ties to even) as they are written; lse stays float32. No f16 on the CPU.
// num_threads 0 = all hardware threads. Results are
// bit-identical for any num_threads; the kernels of the best instruction-set level the CPU has run
// (environment VARPACK_CPU_ISA=x86-64-v3|baseline forces a lower one).
void attention_forward_cpu(const AttentionParams& params, int num_threads = 0);
void attention_backward_cpu(const AttentionBackwardParams& params, int num_threads = 0);

}  // namespace varpack
