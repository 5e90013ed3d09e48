// The Hopper backward's launches: the kernel of hopper_backward.cuh over (key block, kv head),
// and the passes around it in each mode (Delta, the dQ conversion or the wgmma dQ pass).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attn/cuda/backward_kernels.cuh"
#include "attn/cuda/hopper_backward.cuh"
#include "attn/cuda/hopper_dq.cuh"
#include "attn/cuda/hopper_path.h"
#include "attn/cuda/instances.h"
#include "attn/cuda/tensor_map.h"
#include "attn/cuda/tile_bounds.cuh"
#include "varpack/attention.h"

namespace varpack::cuda {

// The Hopper kernel over (key slot, kv head): dK and dV, and with kAtomicDq dQ into dq_accum
// (with its state words dq_states: hopper_dq_accumulator.cuh).
template <class T, class Cfg, bool kAtomicDq>
void launch_hopper_dkdv(const AttentionBackwardParams& p, const float* delta, float* dq_accum,
                        uint32_t* dq_states, cudaStream_t stream) {
  constexpr int D = Cfg::kDataD;  // the tensor maps' boxes fill the columns past it with zeros
  const int64_t key_slots = slot_count(p.total_k, p.batch, Cfg::kKeysPerBlock);
  if (key_slots <= 0 || p.kv_heads <= 0) return;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const CUtensorMap q_map = head_tile_map(p.q, kBf16, p.total_q, p.heads, D, p.q_row_stride,
                                          p.q_head_stride, Cfg::kQueryStep);
  const CUtensorMap dout_map = head_tile_map(p.dout, kBf16, p.total_q, p.heads, D,
                                             p.dout_row_stride, p.dout_head_stride,
                                             Cfg::kQueryStep);
  // K and V's maps, read by the kernel only with TmaPrologue (encoding one costs host time per
  // call, so the others pass empty ones).
  const CUtensorMap k_map = Cfg::kTmaPrologue
                                ? head_tile_map(p.k, kBf16, p.total_k, p.kv_heads, D,
                                                p.k_row_stride, p.k_head_stride, Cfg::kKeysPerBlock)
                                : CUtensorMap{};
  const CUtensorMap v_map = Cfg::kTmaPrologue
                                ? head_tile_map(p.v, kBf16, p.total_k, p.kv_heads, D,
                                                p.v_row_stride, p.v_head_stride, Cfg::kKeysPerBlock)
                                : CUtensorMap{};
  launch_backward_pass(p.softcap > 0.f ? hopper_backward_kernel<T, Cfg, true, kAtomicDq>
                                       : hopper_backward_kernel<T, Cfg, false, kAtomicDq>,
                       Cfg::kThreads, Cfg::kSmemBytes, key_slots, p.kv_heads,
                       "the Hopper backward kernel", stream, p, q_map, dout_map, k_map, v_map,
                       delta, dq_accum, dq_states);
}

// The atomic-dQ backward on Hopper with shape Cfg. With Cfg::kClaimDqRows: Delta (and the
// accumulator's state words set to untouched), the kernel, then dQ's conversion by query tiles
// (workspace: Delta, the accumulator, its state words: dq_accum_workspace_bytes); without: Delta
// clearing the accumulator, the kernel, the conversion by rows (run_atomic_backward). The
// conversion stays a pass of its own: inside this kernel it cost as much (decisions.md:
// backward-dq-conversion-pass).
template <class T, class Cfg>
void launch_hopper_backward_atomic_with(const AttentionBackwardParams& p, void* workspace,
                                        cudaStream_t stream) {
  if constexpr (!Cfg::kClaimDqRows) {
    run_atomic_backward<T, Cfg::kDataD>(
        p, workspace, stream, [&](const float* delta, float* dq_accum, cudaStream_t s) {
          launch_hopper_dkdv<T, Cfg, true>(p, delta, dq_accum, nullptr, s);
        });
  } else {
    if (p.batch <= 0) return;  // no sequence, no row to write (cu_seqlens may then be null)
    unsigned char* bytes = static_cast<unsigned char*>(workspace);
    float* delta = reinterpret_cast<float*>(bytes);
    float* dq_accum = reinterpret_cast<float*>(bytes + delta_workspace_bytes(p));
    uint32_t* dq_states =
        reinterpret_cast<uint32_t*>(bytes + delta_workspace_bytes(p) + dq_accum_bytes(p));
    launch_delta<T, Cfg::kDataD>(p, delta, nullptr, dq_states, stream);
    launch_hopper_dkdv<T, Cfg, true>(p, delta, dq_accum, dq_states, stream);
    const int64_t query_slots = slot_count(p.total_q, p.batch, Cfg::kQueryStep);
    if (query_slots > 0 && p.heads > 0) {
      const dim3 grid(static_cast<unsigned>(query_slots), static_cast<unsigned>(p.heads));
      dq_convert_tiles_kernel<T, Cfg::kDataD, Cfg::kQueryStep>
          <<<grid, RowPass<Cfg::kDataD>::kThreads, 0, stream>>>(p, dq_accum, dq_states,
                                                                 query_slots);
      check_launch("the backward dQ conversion kernel");
    }
  }
}

// The two-pass backward on Hopper with dK/dV shape Cfg: Delta, dK and dV without atomics, then the
// wgmma dQ pass.
template <class T, class Cfg>
void launch_hopper_two_passes_with(const AttentionBackwardParams& p, void* workspace,
                                   cudaStream_t stream) {
  float* delta = static_cast<float*>(workspace);
  launch_delta<T, Cfg::kDataD>(p, delta, nullptr, nullptr, stream);
  launch_hopper_dkdv<T, Cfg, false>(p, delta, nullptr, nullptr, stream);
  launch_hopper_dq_pass<T, HopperDqConfig<Cfg::kDataD>>(p, delta, stream);
}

// The backward on Hopper: atomic dQ in the one kernel, or dK and dV there and dQ by the wgmma dQ
// pass (no atomics, bit-identical run to run): that one in the deterministic mode, and at d256
// (hopper_backward_two_passes_only) in both (decisions.md: backward-modes).
template <class T, int D>
void launch_hopper_backward(const AttentionBackwardParams& p, void* workspace,
                            cudaStream_t stream) {
  constexpr bool kTwoPassesOnly = hopper_backward_two_passes_only(D);
  if (kTwoPassesOnly || p.deterministic) {
    launch_hopper_two_passes_with<T, HopperBackwardConfig<D>>(p, workspace, stream);
    return;
  }
  if constexpr (!kTwoPassesOnly)
    launch_hopper_backward_atomic_with<T, HopperAtomicBackwardConfig<D>>(p, workspace, stream);
}

}  // namespace varpack::cuda
