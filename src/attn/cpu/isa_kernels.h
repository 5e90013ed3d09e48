// The body of every kernels_*.cpp: the entry points of one instruction-set level, compiled for it
// (VARPACK_ISA_TARGET) with its native vector width (VARPACK_VECTOR_BYTES), collected in the table
// VARPACK_ISA_TABLE that cpu_kernels() picks from. Only the entry points carry the target: the
// always-inline tile code takes it from them, and library code they call (std::vector, exp) stays
// compiled for the baseline, so no instruction of a higher level leaks to a CPU without it.
#pragma once

#include "backward_tile.h"
#include "forward_tile.h"

namespace varpack::cpu {
namespace {

VARPACK_ISA_TARGET void forward_f32(const AttentionParams& p, const Task& t) { forward_task<float, float>(p, t); }
VARPACK_ISA_TARGET void forward_f64(const AttentionParams& p, const Task& t) { forward_task<double, double>(p, t); }
VARPACK_ISA_TARGET void dq_f32(const AttentionBackwardParams& p, const Task& t, RowStats<float> s) {
  dq_task<float, float>(p, t, s);
}
VARPACK_ISA_TARGET void dq_f64(const AttentionBackwardParams& p, const Task& t, RowStats<double> s) {
  dq_task<double, double>(p, t, s);
}
VARPACK_ISA_TARGET void dkv_f32(const AttentionBackwardParams& p, const Task& t, RowStats<const float> s) {
  dkv_task<float, float>(p, t, s);
}
VARPACK_ISA_TARGET void dkv_f64(const AttentionBackwardParams& p, const Task& t, RowStats<const double> s) {
  dkv_task<double, double>(p, t, s);
}
VARPACK_ISA_TARGET void forward_rows_f32(const ForwardRows<float>& a) { forward_rows<float, float>(a); }
VARPACK_ISA_TARGET void forward_bf16(const AttentionParams& p, const Task& t) { forward_task<float, Bf16>(p, t); }
VARPACK_ISA_TARGET void dq_bf16(const AttentionBackwardParams& p, const Task& t, RowStats<float> s) {
  dq_task<float, Bf16>(p, t, s);
}
VARPACK_ISA_TARGET void dkv_bf16(const AttentionBackwardParams& p, const Task& t, RowStats<const float> s) {
  dkv_task<float, Bf16>(p, t, s);
}

}  // namespace

// Constant-initialised (function addresses only): no code of this level runs before the dispatch.
extern const CpuKernels VARPACK_ISA_TABLE;
constinit const CpuKernels VARPACK_ISA_TABLE = {VARPACK_ISA_NAME, &forward_f32,      &forward_f64, &dq_f32,
                                                &dq_f64,          &dkv_f32,          &dkv_f64,     &forward_rows_f32,
                                                &forward_bf16,    &dq_bf16,          &dkv_bf16};

}  // namespace varpack::cpu
