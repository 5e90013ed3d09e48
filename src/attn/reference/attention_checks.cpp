// Argument checks shared by every attention implementation: the parameter struct and, when they
// live on the host, the cu_seqlens arrays. Each message names the field (and index) at fault and
// what a valid value looks like, because these errors reach Python users as they are.
//
// The messages are joined from std::to_string / std::to_chars, not std::ostream: an extension
// linked with a static copy of libstdc++ (as the GPU machine's image's compiler wrapper links it)
// crashed inserting a number into an ostream (2026-12-02, attention_params.cpp's shape message),
// and an error message must not crash.
#include <charconv>
#include <cmath>
#include <concepts>
#include <string>

#include "varpack/attention.h"
#include "varpack/attention_bounds.h"
#include "varpack/error.h"

namespace varpack {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("attention: " + what); }

void require_pointer(const void* p, const char* field) {
  if (p == nullptr) fail(std::string(field) + " is null; pass the tensor's data pointer");
}

// The shortest text that reads back as x ("-1", "0.125", "inf", "nan").
std::string number(double x) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), x);
  return std::string(text, result.ptr);
}

std::string number(std::integral auto x) { return std::to_string(x); }

}  // namespace

void check_attention_params(const AttentionParams& p) {
  require_pointer(p.q, "q");
  require_pointer(p.k, "k");
  require_pointer(p.v, "v");
  require_pointer(p.out, "out");
  require_pointer(p.lse, "lse");
  require_pointer(p.cu_seqlens_q, "cu_seqlens_q");
  require_pointer(p.cu_seqlens_k, "cu_seqlens_k");
  std::string m;
  if (p.batch < 0) {
    m = "batch = " + number(p.batch) + " is negative; it is the number of sequences (cu_seqlens has batch + 1 entries)";
  } else if (p.total_q < 0 || p.total_k < 0) {
    m = "total_q = " + number(p.total_q) + ", total_k = " + number(p.total_k) + ": row counts must be >= 0";
  } else if (p.heads <= 0) {
    m = "heads = " + number(p.heads) + " must be > 0";
  } else if (p.kv_heads <= 0) {
    m = "kv_heads = " + number(p.kv_heads) + " must be > 0";
  } else if (p.heads % p.kv_heads != 0) {
    m = "heads = " + number(p.heads) + " is not a multiple of kv_heads = " + number(p.kv_heads) +
        " (grouped-query attention shares each kv head among heads / kv_heads query heads)";
  } else if (p.head_dim <= 0) {
    m = "head_dim = " + number(p.head_dim) + " must be > 0";
  } else if (!std::isfinite(p.softmax_scale) || !std::isfinite(p.softmax_scale_f64)) {
    m = "softmax_scale = " + number(p.softmax_scale) + " is not finite (usually 1/sqrt(head_dim))";
  } else if (!(p.softcap >= 0) || !std::isfinite(p.softcap)) {
    m = "softcap = " + number(p.softcap) + " must be finite and >= 0 (0 turns it off)";
  } else if (p.window_left < -1 || p.window_right < -1) {
    m = "window = (" + number(p.window_left) + ", " + number(p.window_right) +
        ") is invalid: each side is -1 (unbounded) or >= 0";
  } else if (p.max_seqlen_q < 0 || p.max_seqlen_k < 0) {
    m = "max_seqlen_q = " + number(p.max_seqlen_q) + ", max_seqlen_k = " + number(p.max_seqlen_k) + " must be >= 0";
  } else if (p.lse_head_stride < 0) {
    m = "lse_head_stride = " + number(p.lse_head_stride) + " must be >= 0 (usually total_q)";
  }
  if (!m.empty()) fail(m);
}

void check_attention_backward_params(const AttentionBackwardParams& p) {
  check_attention_params(p);
  require_pointer(p.dout, "dout");
  require_pointer(p.dq, "dq");
  require_pointer(p.dk, "dk");
  require_pointer(p.dv, "dv");
}

void check_cu_seqlens(const int32_t* cu_seqlens, int64_t batch, int64_t total_rows, const char* name) {
  require_pointer(cu_seqlens, name);
  const std::string n = name;
  std::string m;
  if (cu_seqlens[0] != 0) {
    m = n + "[0] = " + number(cu_seqlens[0]) + " must be 0 (cu_seqlens are cumulative lengths starting at 0)";
  } else {
    for (int64_t b = 1; b <= batch; ++b) {
      if (cu_seqlens[b] < cu_seqlens[b - 1]) {
        m = n + " is not monotone at index " + number(b) + ": " + n + "[" + number(b) + "] = " +
            number(cu_seqlens[b]) + " < " + n + "[" + number(b - 1) + "] = " + number(cu_seqlens[b - 1]) +
            " (sequence " + number(b - 1) + " would have a negative length)";
        break;
      }
    }
    if (m.empty() && cu_seqlens[batch] > total_rows) {
      m = n + "[" + number(batch) + "] = " + number(cu_seqlens[batch]) + " (the last entry) exceeds the " +
          number(total_rows) + " rows of the tensor; the last entry is the total number of tokens";
    }
  }
  if (!m.empty()) fail(m);
}

void check_host_seqlens(const AttentionParams& p) {
  check_cu_seqlens(p.cu_seqlens_q, p.batch, p.total_q, "cu_seqlens_q");
  check_cu_seqlens(p.cu_seqlens_k, p.batch, p.total_k, "cu_seqlens_k");
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceBounds s = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, b);
    if (s.q_len > p.max_seqlen_q || s.k_len > p.max_seqlen_k) {
      fail("sequence " + number(b) + " has " + number(s.q_len) + " query and " + number(s.k_len) +
           " key rows, more than max_seqlen_q = " + number(p.max_seqlen_q) + " / max_seqlen_k = " +
           number(p.max_seqlen_k) + "; pass the longest sequence's length");
    }
  }
}

}  // namespace varpack
