// The CUDA implementation of varlen attention (sm_80 and sm_90a; bf16 or fp16 in, fp32 accumulation;
// head dims 64, 96, 128 and 256). Pointers in the params are device pointers, cu_seqlens included; the
// max_seqlen fields are not needed. Nothing here synchronises the device or reads device memory
// on the host: every call only queues work on `stream`. Errors in the arguments throw
// varpack::Error naming the field; a failed launch throws with CUDA's message.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "varpack/attention.h"

namespace varpack {

// Throws varpack::Error unless the CUDA kernels support these params: dtype bf16 or f16,
// head_dim 64, 96, 128 or 256, unit stride along head_dim, and rows and heads 16-byte aligned.
void check_attention_params_cuda(const AttentionParams& params);

// Bytes of device workspace attention_forward_cuda can use (a work counter: with it, the Hopper
// kernel runs as one block per multiprocessor, each taking the next query tile as it finishes
// one, at every head dim; the sm_80 kernels ignore it).
size_t attention_forward_workspace_bytes_cuda(const AttentionParams& params);

// out and lse (when non-null) for every query row in a sequence; rows past cu_seqlens_q[batch]
// are not written. `workspace`: null (every query tile its own block), or
// attention_forward_workspace_bytes_cuda(params) bytes of device memory, 16-byte aligned, not
// used by other work on the device until this call's kernels are done.
void attention_forward_cuda(const AttentionParams& params, void* workspace, cudaStream_t stream);
void attention_forward_cuda(const AttentionParams& params, cudaStream_t stream);

// Bytes of device workspace attention_backward_cuda needs for these params on the current device:
// fp32 per query row and head, plus with deterministic == false an fp32 dQ accumulator
// (4 * total_q * heads * head_dim) and a 4-byte word per query row and head, except on Hopper at
// head dim 256 (its backward computes dQ in a pass of its own there, without atomics, in both
// modes).
size_t attention_backward_workspace_bytes_cuda(const AttentionBackwardParams& params);

// dq, dk, dv for every row in a sequence; rows past cu_seqlens[batch] are not written.
// deterministic == true: no atomics, bit-identical results run to run (7 matrix products per tile
// pair). deterministic == false (FlashAttention-2's default): dQ is summed over key tiles with fp32
// atomics (5 products per tile pair, faster; not at the head dims above on Hopper); dq may then
// differ in its last bits between runs, dk and dv do not. `workspace` must hold
// attention_backward_workspace_bytes_cuda(params) bytes, 16-byte aligned, computed with the same
// `deterministic` on the same device.
void attention_backward_cuda(const AttentionBackwardParams& params, void* workspace,
                             cudaStream_t stream);

// One region past the end of the sequences (rows that belong to none): in each of `planes`
// planes plane_stride bytes apart, rows [cu_seqlens[batch], total_rows) of row_bytes each, set to
// zero (outputs, gradients; rows, planes and data 16-byte aligned) or, with `infinity`, to fp32
// +inf (lse: those rows see no key; 4-byte aligned). cu_seqlens[batch] is read on the device.
struct PastEndFill {
  void* data = nullptr;
  int64_t row_bytes = 0;
  int64_t total_rows = 0;
  int64_t planes = 1;
  int64_t plane_stride = 0;
  const int32_t* cu_seqlens = nullptr;
  int64_t batch = 0;
  bool infinity = false;
};

// Fills up to kMaxPastEndFills regions in one launch: a training step's forward has two (out,
// lse), its backward three (dq, dk, dv), and each launch costs more than the usual few rows.
inline constexpr int kMaxPastEndFills = 3;
void fill_past_end_cuda(const PastEndFill* fills, int count, cudaStream_t stream);

// One partial attention result (o, l) merged into a running one (out, lse) by their log-sum-exp,
// per row and head: lse' = log(e^lse + e^l), out' = out e^(lse - lse') + o e^(l - lse'). l = +inf
// means the part saw no key (weight 0) and lse = -inf that nothing was merged yet (out is then
// overwritten, not read). Context parallelism's ring merges one part per K/V block this way.
struct PartialMerge {
  float* out = nullptr;         // [rows, heads, head_dim], rows out_row_stride floats apart
  float* lse = nullptr;         // [heads, rows], heads lse_head_stride floats apart
  const void* o = nullptr;      // [rows, heads, head_dim] in `dtype`, contiguous
  const float* l = nullptr;     // [heads, rows], contiguous
  DType dtype = DType::bf16;    // bf16, f16 or f32
  int64_t rows = 0;
  int64_t out_row_stride = 0;
  int64_t lse_head_stride = 0;
  int heads = 0;
  int head_dim = 0;             // a multiple of 4; out rows and o 16-byte aligned
};
void merge_partial_cuda(const PartialMerge& merge, cudaStream_t stream);

}  // namespace varpack
