// What the CPU attention shares across instruction-set levels: tile sizes, row views of the
// [rows, heads, head_dim] tensors, which keys each query of a tile may see, and the table of
// kernel entry points that each ISA translation unit (kernels_*.cpp) fills in. Nothing here uses
// vector types, so every translation unit may include it.
#pragma once

#include <cstdint>
#include <vector>

#include "varpack/attention.h"
#include "varpack/attention_bounds.h"
#include "work_list.h"

namespace varpack::cpu {

// kBlockQ query rows per task, kBlockK keys per inner tile. 64 x 64 keeps a task's working set
// (Q^T, O and the scores; K and V are read in place) within L2 up to head_dim 256.
inline constexpr int kBlockQ = 64;
inline constexpr int kBlockK = 64;

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

// Which keys rows [first, first + n) see: row r sees [key_begin[r], key_end[r]). Both bounds grow
// with the row, so the tile as a whole sees [key_begin[0], key_end[n - 1]).
struct QueryTileKeys {
  int64_t key_begin[kBlockQ] = {};
  int64_t key_end[kBlockQ] = {};
  int64_t n = 0;

  QueryTileKeys() = default;
  QueryTileKeys(const SequenceBounds& sb, const AttentionParams& p, int64_t first, int64_t rows) : n(rows) {
    for (int64_t r = 0; r < n; ++r) {
      key_begin[r] = sb.key_begin(first + r, p.window_left);
      key_end[r] = sb.key_end(first + r, p.causal, p.window_right);
    }
  }
  int64_t lo() const { return key_begin[0]; }
  int64_t hi() const { return key_end[n - 1]; }
  bool sees_any(int64_t j0, int64_t j1) const { return lo() < j1 && hi() > j0 && lo() < hi(); }
  int64_t first_tile() const { return lo() / kBlockK * kBlockK; }  // key tiles start at multiples of kBlockK
};

// One task per (sequence, query head, kBlockQ query rows), longest first: the forward's work and
// the backward's dq pass; cost = rows x keys the tile walks. Defined in attention_cpu_forward.cpp.
std::vector<Task> query_tile_tasks(const AttentionParams& p);

// What the backward's first pass computes for its second. Per row, [heads, total_q]: D =
// rowsum(dout * out) and, in f64 only, the log-sum-exp recomputed in double (the saved one is
// float32, too coarse for gradcheck). Per (head, query tile): (scale * q)^T and dout^T, 2 *
// head_dim * kBlockQ values, built once instead of once per key tile; sequence b's tiles start at
// tile first_query_tile[b] of query_tile_count per head.
template <typename T>
struct RowStats {
  T* dsum;
  T* lse;  // null: use the forward's
  T* query_tiles;
  const int64_t* first_query_tile;
  int64_t query_tile_count;
};

// The forward of one query tile with an explicit mask: rows q.row(0..keys.n) against keys
// k.row(j), v.row(j), j < k_len, query r seeing [keys.key_begin[r], keys.key_end[r]); key tiles
// walked up to walk_end (varlen: the last visible key; a dense kernel: the padded length). Writes
// out.row(r) and lse[r] (when lse is not null). T computes, S is stored (T, or bf16 for float).
template <typename T, typename S = T>
struct ForwardRows {
  HeadRows<const S> q, k, v;
  HeadRows<S> out;
  float* lse;
  const QueryTileKeys* keys;
  int64_t k_len, walk_end, head_dim;
  T scale, softcap;
};

// The kernels of one instruction-set level.
struct CpuKernels {
  const char* isa;
  void (*forward_f32)(const AttentionParams&, const Task&);
  void (*forward_f64)(const AttentionParams&, const Task&);
  void (*dq_f32)(const AttentionBackwardParams&, const Task&, RowStats<float>);
  void (*dq_f64)(const AttentionBackwardParams&, const Task&, RowStats<double>);
  void (*dkv_f32)(const AttentionBackwardParams&, const Task&, RowStats<const float>);
  void (*dkv_f64)(const AttentionBackwardParams&, const Task&, RowStats<const double>);
  void (*forward_rows_f32)(const ForwardRows<float>&);
  // bf16 storage, float compute: the f32 tile code with widening loads and rounding stores.
  void (*forward_bf16)(const AttentionParams&, const Task&);
  void (*dq_bf16)(const AttentionBackwardParams&, const Task&, RowStats<float>);
  void (*dkv_bf16)(const AttentionBackwardParams&, const Task&, RowStats<const float>);
};

// The best level this CPU runs: x86-64-v4 (AVX-512, 64-byte vectors), x86-64-v3 (AVX2 + FMA,
// 32-byte) or baseline (16-byte vectors: SSE2, or NEON elsewhere). The environment variable
// VARPACK_CPU_ISA=x86-64-v3|baseline picks a lower level (the tests run every level this way).
const CpuKernels& cpu_kernels();

}  // namespace varpack::cpu
