// How one call of the CUDA forward is launched: the library's rules by default, each one
// overridable by an explicit argument (the standalone test runs every protocol the rules can pick
// on batches too small for the rules to pick them; the experiments time them).
#pragma once

#include "varpack/attention.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*: no CUDA header, so that host tests include this

namespace varpack::cuda {

enum class ForwardOrder { kAuto, kBySequence, kByChunks };

struct ForwardLaunch {
  // 0: forward_heads_per_block's rule; k > 0: the largest divisor of the head count up to k.
  int max_heads_per_block = 0;
  // kAuto: forward_launch_order's rule; otherwise that order where it applies (causal, no window).
  ForwardOrder order = ForwardOrder::kAuto;
  // The persistent kernel, given a workspace for its work counter; false: a block per work.
  bool persistent = true;
  // The persistent grid: 0 = a block per multiprocessor; n > 0: at most n blocks (each then takes
  // many works and reuses both work slots).
  int max_blocks = 0;
};

// attention_forward_cuda (varpack/attention_cuda.h) with an explicit launch; workspace: null or
// attention_forward_workspace_bytes_cuda bytes.
void attention_forward_cuda(const AttentionParams& params, void* workspace, CUstream_st* stream,
                            const ForwardLaunch& launch);

}  // namespace varpack::cuda
