// All index arithmetic from cu_seqlens in one place, in int64, usable on host and device:
// where sequence b lives in q and k, and which keys query i of it may see.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VARPACK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define VARPACK_HOST_DEVICE inline
#endif

namespace varpack {

struct SequenceBounds {
  int64_t q_begin = 0, q_len = 0;  // rows [q_begin, q_begin + q_len) of q
  int64_t k_begin = 0, k_len = 0;  // rows [k_begin, k_begin + k_len) of k and v

  VARPACK_HOST_DEVICE static SequenceBounds of(const int32_t* cu_seqlens_q,
                                               const int32_t* cu_seqlens_k, int64_t b) {
    SequenceBounds s;
    s.q_begin = cu_seqlens_q[b];
    s.q_len = static_cast<int64_t>(cu_seqlens_q[b + 1]) - s.q_begin;
    s.k_begin = cu_seqlens_k[b];
    s.k_len = static_cast<int64_t>(cu_seqlens_k[b + 1]) - s.k_begin;
    return s;
  }

  // Query i (0-based in the sequence) sees keys j in [key_begin(i), key_end(i)). The diagonal is
  // aligned bottom-right: query i sits at key position i + k_len - q_len, as FlashAttention >= 2.1.
  // causal is a window with right = 0. The range can be empty (then out = 0, lse = +inf).
  VARPACK_HOST_DEVICE int64_t key_begin(int64_t i, int64_t window_left) const {
    if (window_left < 0) return 0;
    const int64_t j = i + k_len - q_len - window_left;
    return j < 0 ? 0 : j;
  }
  VARPACK_HOST_DEVICE int64_t key_end(int64_t i, bool causal, int64_t window_right) const {
    const int64_t right = causal ? 0 : window_right;
    if (right < 0) return k_len;
    const int64_t j = i + k_len - q_len + right + 1;
    return j < 0 ? 0 : (j > k_len ? k_len : j);
  }
};

}  // namespace varpack
