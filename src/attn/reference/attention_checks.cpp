// Argument checks shared by every attention implementation: the parameter struct and, when they
// live on the host, the cu_seqlens arrays. Each message names the field (and index) at fault and
// what a valid value looks like, because these errors reach Python users as they are.
#include <cmath>
#include <sstream>
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

}  // namespace

void check_attention_params(const AttentionParams& p) {
  require_pointer(p.q, "q");
  require_pointer(p.k, "k");
  require_pointer(p.v, "v");
  require_pointer(p.out, "out");
  require_pointer(p.lse, "lse");
  require_pointer(p.cu_seqlens_q, "cu_seqlens_q");
  require_pointer(p.cu_seqlens_k, "cu_seqlens_k");
  std::ostringstream m;
  if (p.batch < 0) {
    m << "batch = " << p.batch << " is negative; it is the number of sequences (cu_seqlens has batch + 1 entries)";
  } else if (p.total_q < 0 || p.total_k < 0) {
    m << "total_q = " << p.total_q << ", total_k = " << p.total_k << ": row counts must be >= 0";
  } else if (p.heads <= 0) {
    m << "heads = " << p.heads << " must be > 0";
  } else if (p.kv_heads <= 0) {
    m << "kv_heads = " << p.kv_heads << " must be > 0";
  } else if (p.heads % p.kv_heads != 0) {
    m << "heads = " << p.heads << " is not a multiple of kv_heads = " << p.kv_heads
      << " (grouped-query attention shares each kv head among heads / kv_heads query heads)";
  } else if (p.head_dim <= 0) {
    m << "head_dim = " << p.head_dim << " must be > 0";
  } else if (!std::isfinite(p.softmax_scale)) {
    m << "softmax_scale = " << p.softmax_scale << " is not finite (usually 1/sqrt(head_dim))";
  } else if (!(p.softcap >= 0) || !std::isfinite(p.softcap)) {
    m << "softcap = " << p.softcap << " must be finite and >= 0 (0 turns it off)";
  } else if (p.window_left < -1 || p.window_right < -1) {
    m << "window = (" << p.window_left << ", " << p.window_right
      << ") is invalid: each side is -1 (unbounded) or >= 0";
  } else if (p.max_seqlen_q < 0 || p.max_seqlen_k < 0) {
    m << "max_seqlen_q = " << p.max_seqlen_q << ", max_seqlen_k = " << p.max_seqlen_k << " must be >= 0";
  } else if (p.lse_head_stride < 0) {
    m << "lse_head_stride = " << p.lse_head_stride << " must be >= 0 (usually total_q)";
  }
  if (!m.str().empty()) fail(m.str());
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
  std::ostringstream m;
  if (cu_seqlens[0] != 0) {
    m << name << "[0] = " << cu_seqlens[0] << " must be 0 (cu_seqlens are cumulative lengths starting at 0)";
  } else {
    for (int64_t b = 1; b <= batch; ++b) {
      if (cu_seqlens[b] < cu_seqlens[b - 1]) {
        m << name << " is not monotone at index " << b << ": " << name << "[" << b << "] = " << cu_seqlens[b]
          << " < " << name << "[" << b - 1 << "] = " << cu_seqlens[b - 1] << " (sequence " << b - 1
          << " would have a negative length)";
        break;
      }
    }
    if (m.str().empty() && cu_seqlens[batch] > total_rows) {
      m << name << "[" << batch << "] = " << cu_seqlens[batch] << " (the last entry) exceeds the " << total_rows
        << " rows of the tensor; the last entry is the total number of tokens";
    }
  }
  if (!m.str().empty()) fail(m.str());
}

void check_host_seqlens(const AttentionParams& p) {
  check_cu_seqlens(p.cu_seqlens_q, p.batch, p.total_q, "cu_seqlens_q");
  check_cu_seqlens(p.cu_seqlens_k, p.batch, p.total_k, "cu_seqlens_k");
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceBounds s = SequenceBounds::of(p.cu_seqlens_q, p.cu_seqlens_k, b);
    if (s.q_len > p.max_seqlen_q || s.k_len > p.max_seqlen_k) {
      std::ostringstream m;
      m << "sequence " << b << " has " << s.q_len << " query and " << s.k_len << " key rows, more than max_seqlen_q = "
        << p.max_seqlen_q << " / max_seqlen_k = " << p.max_seqlen_k << "; pass the longest sequence's length";
      fail(m.str());
    }
  }
}

}  // namespace varpack
