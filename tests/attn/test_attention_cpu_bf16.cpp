// The CPU attention on bf16 tensors (bf16 in and out, float accumulation). The inputs are random
// values rounded to bf16; the reference (f32/f64 only) and the float kernels get the same values as
// float32. Checks: the bf16 kernels equal the float kernels' results rounded to bf16, bit for bit
// (same tile code, widened loads, rounded stores); closeness to the double reference within bf16's
// rounding; nothing past the last sequence written; no leakage between samples; thread-independence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention_checks.h"
#include "attention_problem.h"
#include "varpack/attention.h"

namespace varpack::test {
namespace {

constexpr uint16_t kBf16NaN = 0x7fc0;

float from_bf16(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// float -> bf16, round to nearest, ties to even; NaN -> quiet NaN. Written apart from the kernels'
// bit trick: the two neighbouring bf16 values (truncation and one step away from zero), the nearer
// one, on a tie the one with an even last bit.
uint16_t to_bf16(float x) {
  if (std::isnan(x)) return kBf16NaN;
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint16_t down = static_cast<uint16_t>(u >> 16), up = static_cast<uint16_t>(down + 1);
  if (static_cast<uint32_t>(down) << 16 == u || std::isinf(x)) return down;
  // One step past the largest finite bf16 is +-inf, which stands for 2^128 when rounding.
  const double up_value = std::isinf(from_bf16(up)) ? std::copysign(std::ldexp(1.0, 128), x) : from_bf16(up);
  const double to_down = std::abs(x - static_cast<double>(from_bf16(down))), to_up = std::abs(x - up_value);
  if (to_down != to_up) return to_down < to_up ? down : up;
  return (down & 1) == 0 ? down : up;
}

std::vector<uint16_t> bf16_bits(const Tensor<float>& x) {
  std::vector<uint16_t> bits(x.data.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = to_bf16(x.data[i]);
  return bits;
}

Tensor<float> widened(const std::vector<uint16_t>& bits, Tensor<float> like) {
  for (size_t i = 0; i < bits.size(); ++i) like.data[i] = from_bf16(bits[i]);
  return like;
}

// The values of x rounded to bf16 (NaN poison stays NaN).
void round_to_bf16(Tensor<float>& x) {
  for (float& e : x.data) e = from_bf16(to_bf16(e));
}

// A problem whose inputs are bf16 values (held as float32 for the reference and float kernels).
Problem<float> bf16_problem(const Shape& shape, uint32_t seed) {
  Problem<float> prob(shape, seed);
  for (Tensor<float>* x : {&prob.q, &prob.k, &prob.v, &prob.dout}) round_to_bf16(*x);
  return prob;
}

// Forward then backward of the bf16 kernels on the problem's inputs as bf16 tensors, outputs
// poisoned with NaN; returned widened to float (exact), so the float checks apply.
Outputs<float> run_bf16(const Problem<float>& prob, int threads) {
  Outputs<float> o = prob.poisoned_outputs();
  std::vector<uint16_t> q = bf16_bits(prob.q), k = bf16_bits(prob.k), v = bf16_bits(prob.v),
                        dout = bf16_bits(prob.dout);
  std::vector<uint16_t> out(o.out.data.size(), kBf16NaN), dq(o.dq.data.size(), kBf16NaN),
      dk(o.dk.data.size(), kBf16NaN), dv(o.dv.data.size(), kBf16NaN);
  AttentionBackwardParams p = prob.backward_params(o);  // float layout = bf16 layout, in elements
  p.dtype = DType::bf16;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.out = out.data();
  p.dout = dout.data();
  p.dq = dq.data();
  p.dk = dk.data();
  p.dv = dv.data();
  attention_forward_cpu(p, threads);
  attention_backward_cpu(p, threads);
  o.out = widened(out, o.out);
  o.dq = widened(dq, o.dq);
  o.dk = widened(dk, o.dk);
  o.dv = widened(dv, o.dv);
  return o;
}

// The bf16 kernels run the float tile code on exactly widened inputs, so their outputs are the
// float kernels' rounded to bf16, bit for bit, and lse is the same. The backward reads the
// forward's out, which is bf16 here: the float backward gets the same (widened) values.
void expect_rounded_float_kernels(const Problem<float>& prob, const std::string& ctx) {
  const Outputs<float> b = run_bf16(prob, 2);
  Outputs<float> f = prob.poisoned_outputs();
  attention_forward_cpu(prob.forward_params(f), 2);
  const Tensor<float> float_out = f.out;
  f.out = b.out;
  attention_backward_cpu(prob.backward_params(f), 2);
  f.out = float_out;
  for (Tensor<float>* x : {&f.out, &f.dq, &f.dk, &f.dv}) round_to_bf16(*x);
  EXPECT_TRUE(same_bits(b.out.data, f.out.data)) << "out\n  " << ctx;
  EXPECT_TRUE(same_bits(b.lse, f.lse)) << "lse\n  " << ctx;
  EXPECT_TRUE(same_bits(b.dq.data, f.dq.data)) << "dq\n  " << ctx;
  EXPECT_TRUE(same_bits(b.dk.data, f.dk.data)) << "dk\n  " << ctx;
  EXPECT_TRUE(same_bits(b.dv.data, f.dv.data)) << "dv\n  " << ctx;
}

// Against the double reference on the same (bf16-valued) inputs. Rounding to bf16 costs up to half
// an ulp, at most 2^-8 relative (8 significant bits), on top of float32 accumulation (the f32 tests'
// 2e-5 for out, 1e-4 for gradients); out and dv are rounded once. dq and dk also carry the error of
// D = rowsum(dout * out), which reads the bf16-rounded out (as every bf16 FlashAttention does)
// and reaches them through dS = P (dP - D): measured up to 0.5% of the tensor's largest magnitude,
// so they get one ulp, 0.8%, of it (see expect_close's scaling).
void expect_close_to_reference(const Problem<float>& prob, const Outputs<float>& got, const std::string& ctx) {
  Outputs<float> ref = prob.poisoned_outputs();
  attention_forward_reference(prob.forward_params(ref));
  attention_backward_reference(prob.backward_params(ref));
  constexpr double ulp = 1.0 / 128;  // bf16's largest relative ulp (at a power of two)
  expect_close(got.out, ref.out, prob.valid_q, 2e-5, ulp / 2 + 2e-5, "out", ctx);
  expect_lse_close(got.lse, ref.lse, prob.shape.heads, prob.total_q, prob.valid_q, 1e-5, ctx);
  expect_close(got.dv, ref.dv, prob.valid_k, 1e-4, ulp / 2 + 1e-4, "dv", ctx);
  expect_close(got.dq, ref.dq, prob.valid_q, ulp, ulp / 2, "dq", ctx);
  expect_close(got.dk, ref.dk, prob.valid_k, ulp, ulp / 2, "dk", ctx);
}

void expect_bf16_written_exactly(const Problem<float>& prob, const Outputs<float>& o, const std::string& ctx) {
  expect_written_exactly(o.out, prob.valid_q, "bf16 out", ctx);
  expect_written_exactly(o.dq, prob.valid_q, "bf16 dq", ctx);
  expect_written_exactly(o.dk, prob.valid_k, "bf16 dk", ctx);
  expect_written_exactly(o.dv, prob.valid_k, "bf16 dv", ctx);
  expect_lse_written_exactly(o.lse, prob.shape.heads, prob.total_q, prob.valid_q, "bf16 " + ctx);
}

struct Config {
  const char* name;
  std::vector<int32_t> q_lens, k_lens;
  int heads, kv_heads, head_dim;
  bool causal;
  int64_t left, right;
  float softcap;
  int64_t stride_gap;
};

const Config kConfigs[] = {
    {"odd head dim", {0, 1, 37, 66, 5}, {}, 3, 1, 59, false, -1, -1, 0, 0},
    {"odd head dim causal", {63, 1, 65}, {}, 2, 2, 111, true, -1, -1, 0, 0},
    {"gqa 9:1 causal", {3, 0, 40, 1}, {}, 9, 1, 24, true, -1, -1, 0, 0},
    {"gqa 6:2 window softcap", {17, 70, 1}, {}, 6, 2, 64, false, 7, 3, 2, 0},
    {"q != k, causal window", {5, 70, 3, 0, 9}, {9, 40, 3, 4, 130}, 3, 3, 12, true, 20, -1, 0, 0},
    {"strided, head dim 128", {129, 2}, {}, 4, 2, 128, true, -1, -1, 0, 5},
};

Shape shape_of(const Config& c) {
  Shape s;
  s.q_lens = c.q_lens;
  s.k_lens = c.k_lens;
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.causal = c.causal;
  s.window_left = c.left;
  s.window_right = c.right;
  s.softcap = c.softcap;
  s.stride_gap = c.stride_gap;
  return s;
}

TEST(AttentionCpuBf16, MatchesReferenceAndRoundedFloatKernels) {
  uint32_t seed = 300;
  for (const Config& c : kConfigs) {
    const Problem<float> prob = bf16_problem(shape_of(c), ++seed);
    const std::string ctx = std::string(c.name) + ": " + prob.shape.describe() + " seed=" + std::to_string(seed);
    const Outputs<float> got = run_bf16(prob, 2);
    expect_close_to_reference(prob, got, ctx);
    expect_bf16_written_exactly(prob, got, ctx);
    expect_rounded_float_kernels(prob, ctx);
  }
}

// Every instruction-set level compiles its own bf16 entry points.
TEST(AttentionCpuBf16, EveryInstructionSetLevel) {
  for (const char* isa : {"x86-64-v4", "x86-64-v3", "baseline"}) {
    setenv("VARPACK_CPU_ISA", isa, 1);
    for (const int config : {1, 3}) {
      const Problem<float> prob = bf16_problem(shape_of(kConfigs[config]), 400 + config);
      const std::string ctx = std::string(isa) + " " + kConfigs[config].name;
      expect_close_to_reference(prob, run_bf16(prob, 2), ctx);
      expect_rounded_float_kernels(prob, ctx);
    }
  }
  unsetenv("VARPACK_CPU_ISA");
}

// Changing sample 1's keys and values changes nothing of samples 0 and 2, bit for bit.
TEST(AttentionCpuBf16, NoLeakageBetweenSamples) {
  for (const bool causal : {false, true}) {
    Shape s;
    s.q_lens = {30, 70, 20};
    s.k_lens = {30, 65, 25};
    s.heads = 4;
    s.kv_heads = 2;
    s.head_dim = 33;
    s.causal = causal;
    const Problem<float> a = bf16_problem(s, 31);
    Problem<float> b = a;
    b.refill_keys(a.cu_k[1], s.k_lens[1], 99);
    round_to_bf16(b.k);
    round_to_bf16(b.v);
    const Outputs<float> oa = run_bf16(a, 2), ob = run_bf16(b, 2);
    auto rows_equal = [](const Tensor<float>& x, const Tensor<float>& y, int64_t first, int64_t n) {
      return std::memcmp(&x.data[first * x.row_stride], &y.data[first * y.row_stride],
                         n * x.row_stride * sizeof(float)) == 0;
    };
    for (const int sample : {0, 2}) {
      const int64_t q0 = a.cu_q[sample], qn = s.q_lens[sample], k0 = a.cu_k[sample], kn = s.k_lens[sample];
      EXPECT_TRUE(rows_equal(oa.out, ob.out, q0, qn)) << "causal=" << causal << " sample " << sample;
      EXPECT_TRUE(rows_equal(oa.dq, ob.dq, q0, qn)) << "causal=" << causal << " sample " << sample;
      EXPECT_TRUE(rows_equal(oa.dk, ob.dk, k0, kn)) << "causal=" << causal << " sample " << sample;
      EXPECT_TRUE(rows_equal(oa.dv, ob.dv, k0, kn)) << "causal=" << causal << " sample " << sample;
    }
    EXPECT_FALSE(rows_equal(oa.out, ob.out, a.cu_q[1], s.q_lens[1])) << "sample 1 did not change";
    expect_bf16_written_exactly(b, ob, "leakage, causal=" + std::to_string(causal));
  }
}

TEST(AttentionCpuBf16, DeterministicAcrossThreadCounts) {
  const Problem<float> prob = bf16_problem(shape_of(kConfigs[4]), 32);
  const Outputs<float> first = run_bf16(prob, 1);
  for (const int threads : {2, 3}) {
    const Outputs<float> o = run_bf16(prob, threads);
    EXPECT_TRUE(same_bits(o.out.data, first.out.data)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.lse, first.lse)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.dq.data, first.dq.data)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.dk.data, first.dk.data)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.dv.data, first.dv.data)) << threads << " threads";
  }
}

// The test's own rounding, on hand-picked values, so the bit-for-bit checks above rest on it.
TEST(AttentionCpuBf16, TestRoundingIsNearestEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(1.0f + 1.0f / 256), 0x3f80);                   // tie, 0x3f80 is even
  EXPECT_EQ(to_bf16(1.0f + 3.0f / 256), 0x3f82);                   // tie, 0x3f81 odd: up
  EXPECT_EQ(to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);    // above the tie
  EXPECT_EQ(to_bf16(-1.0f - 1.0f / 256 - 1.0f / 65536), 0xbf81);
  EXPECT_EQ(to_bf16(3.4e38f), 0x7f80);                             // past max + half ulp: inf
  EXPECT_EQ(to_bf16(std::nanf("")), kBf16NaN);
}

}  // namespace
}  // namespace varpack::test
