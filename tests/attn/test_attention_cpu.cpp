// The fast CPU attention against the double reference, forward and backward, over head dims, GQA
// ratios, masks, softcap and awkward length sets; plus the exact promises: nothing past the last
// sequence is written, no sample leaks into another, and results do not depend on threads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "attention_checks.h"
#include "attention_problem.h"
#include "varpack/attention.h"
#include "varpack/error.h"

namespace varpack::test {
namespace {

// Tolerances relative to float32 (see expect_close): the outputs are convex combinations of V,
// whose float32 rounding stays near a few ulps of max|V|; gradients sum a few hundred products with
// cancellation, so they get a looser bound. f64 runs the same algorithm and must agree to ~1e-12.
template <typename T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double out = 2e-5, grad = 1e-4, lse = 1e-5;
};
template <>
struct Tolerance<double> {
  static constexpr double out = 1e-12, grad = 1e-11, lse = 1e-6;  // lse is float32 in both
};

// Runs reference and fast forward and backward on one problem and checks everything.
template <typename T>
void check_against_reference(const Shape& shape, uint32_t seed, int threads = 2) {
  const Problem<T> prob(shape, seed);
  const std::string ctx = shape.describe() + " seed=" + std::to_string(seed);
  Outputs<T> ref = prob.poisoned_outputs(), fast = prob.poisoned_outputs();
  attention_forward_reference(prob.forward_params(ref));
  attention_backward_reference(prob.backward_params(ref));
  attention_forward_cpu(prob.forward_params(fast), threads);
  attention_backward_cpu(prob.backward_params(fast), threads);

  expect_close(fast.out, ref.out, prob.valid_q, Tolerance<T>::out, Tolerance<T>::out, "out", ctx);
  expect_lse_close(fast.lse, ref.lse, shape.heads, prob.total_q, prob.valid_q, Tolerance<T>::lse, ctx);
  expect_close(fast.dq, ref.dq, prob.valid_q, Tolerance<T>::grad, Tolerance<T>::grad, "dq", ctx);
  expect_close(fast.dk, ref.dk, prob.valid_k, Tolerance<T>::grad, Tolerance<T>::grad, "dk", ctx);
  expect_close(fast.dv, ref.dv, prob.valid_k, Tolerance<T>::grad, Tolerance<T>::grad, "dv", ctx);
  for (const Outputs<T>* o : {&ref, &fast}) {
    const std::string who = o == &ref ? "reference: " : "cpu: ";
    expect_written_exactly(o->out, prob.valid_q, who + "out", ctx);
    expect_written_exactly(o->dq, prob.valid_q, who + "dq", ctx);
    expect_written_exactly(o->dk, prob.valid_k, who + "dk", ctx);
    expect_written_exactly(o->dv, prob.valid_k, who + "dv", ctx);
    expect_lse_written_exactly(o->lse, shape.heads, prob.total_q, prob.valid_q, who + ctx);
  }
}

struct Mask {
  const char* name;
  bool causal;
  int64_t left, right;
  float softcap;
};
const Mask kMasks[] = {
    {"full", false, -1, -1, 0},  {"causal", true, -1, -1, 0},    {"window_7_3", false, 7, 3, 0},
    {"causal_window_20", true, 20, -1, 0}, {"softcap_5", false, -1, -1, 5}, {"causal_softcap", true, -1, -1, 2},
};

// Lengths with 0 and 1, one around a tile edge, odd ones.
const std::vector<int32_t> kLengths = {0, 1, 37, 66, 5};

class HeadDimSweep : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(HeadDimSweep, MatchesReference) {
  const auto [head_dim, mask_index] = GetParam();
  const Mask& m = kMasks[mask_index];
  Shape s;
  s.q_lens = kLengths;
  s.heads = 3;
  s.kv_heads = 1;
  s.head_dim = head_dim;
  s.causal = m.causal;
  s.window_left = m.left;
  s.window_right = m.right;
  s.softcap = m.softcap;
  check_against_reference<float>(s, 100 + head_dim);
}

INSTANTIATE_TEST_SUITE_P(Attention, HeadDimSweep,
                         ::testing::Combine(::testing::Values(1, 8, 59, 64, 111, 128), ::testing::Range(0, 6)));

class GroupSweep : public ::testing::TestWithParam<std::tuple<std::pair<int, int>, int>> {};

TEST_P(GroupSweep, MatchesReference) {
  const auto [heads, mask_index] = GetParam();
  const Mask& m = kMasks[mask_index];
  Shape s;
  s.q_lens = {3, 0, 40, 1};
  s.heads = heads.first;
  s.kv_heads = heads.second;
  s.head_dim = 24;
  s.causal = m.causal;
  s.window_left = m.left;
  s.window_right = m.right;
  s.softcap = m.softcap;
  check_against_reference<float>(s, 7);
}

INSTANTIATE_TEST_SUITE_P(Attention, GroupSweep,
                         ::testing::Combine(::testing::Values(std::pair{2, 2}, std::pair{3, 1}, std::pair{9, 1},
                                                              std::pair{6, 2}),
                                            ::testing::Range(0, 6)));

TEST(AttentionCpu, TileEdges) {
  for (const bool causal : {false, true}) {
    Shape s;
    s.q_lens = {63, 64, 65, 127, 128, 129};
    s.heads = 2;
    s.kv_heads = 1;
    s.head_dim = 4;
    s.causal = causal;
    check_against_reference<float>(s, 11);
  }
}

// Head dims past the 4-vector gemm blocks, whole (256) and ragged (300).
TEST(AttentionCpu, LargeHeadDims) {
  for (const int head_dim : {256, 300}) {
    Shape s;
    s.q_lens = {9, 70};
    s.heads = 2;
    s.kv_heads = 1;
    s.head_dim = head_dim;
    s.causal = true;
    check_against_reference<float>(s, 24);
  }
}

TEST(AttentionCpu, OneLongAmongManyShort) {
  Shape s;
  s.q_lens = {1, 2, 3, 300, 0, 4, 1, 7, 2, 9, 1, 1};
  s.heads = 2;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.causal = true;
  check_against_reference<float>(s, 12);
}

TEST(AttentionCpu, QueryAndKeyLengthsDiffer) {
  for (const Mask& m : kMasks) {
    Shape s;
    s.q_lens = {5, 70, 3, 0, 9, 2};
    s.k_lens = {9, 40, 3, 4, 0, 130};  // q longer than k: with causal, the first rows see no key
    s.heads = 3;
    s.kv_heads = 3;
    s.head_dim = 12;
    s.causal = m.causal;
    s.window_left = m.left;
    s.window_right = m.right;
    s.softcap = m.softcap;
    check_against_reference<float>(s, 13);
  }
}

TEST(AttentionCpu, StridedLayoutAndDouble) {
  Shape s;
  s.q_lens = {17, 0, 70, 1};
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 10;
  s.causal = true;
  s.window_left = 30;
  s.stride_gap = 5;
  check_against_reference<float>(s, 14);
  s.softcap = 3;
  check_against_reference<double>(s, 15);
}

TEST(AttentionCpu, EmptyBatchesWriteNothing) {
  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{}, std::vector<int32_t>{0, 0, 0}}) {
    Shape s;
    s.q_lens = lens;
    check_against_reference<float>(s, 16);
  }
}

// Rows of a query with no visible key: out 0, lse +inf, and zero gradients.
TEST(AttentionCpu, RowsWithoutKeys) {
  Shape s;
  s.q_lens = {6};
  s.k_lens = {2};
  s.causal = true;
  const Problem<float> prob(s, 17);
  Outputs<float> o = prob.poisoned_outputs();
  attention_forward_cpu(prob.forward_params(o));
  attention_backward_cpu(prob.backward_params(o));
  for (int64_t t = 0; t < 4; ++t)  // queries 0..3 sit left of key 0 (bottom-right alignment)
    for (int h = 0; h < s.heads; ++h) {
      EXPECT_TRUE(std::isinf(o.lse[h * prob.total_q + t]) && o.lse[h * prob.total_q + t] > 0) << t;
      for (int c = 0; c < s.head_dim; ++c) {
        EXPECT_EQ(o.out.at(t, h, c), 0.0f);
        EXPECT_EQ(o.dq.at(t, h, c), 0.0f);
      }
    }
}

// Changing sample 1's keys and values changes nothing of samples 0 and 2, bit for bit (and does
// change sample 1, so the test can fail).
TEST(AttentionCpu, NoLeakageBetweenSamples) {
  for (const Mask& m : kMasks) {
    Shape s;
    s.q_lens = {30, 70, 20};
    s.k_lens = {30, 65, 25};
    s.heads = 3;
    s.kv_heads = 1;
    s.head_dim = 16;
    s.causal = m.causal;
    s.window_left = m.left;
    s.window_right = m.right;
    s.softcap = m.softcap;
    Problem<float> a(s, 18);
    Problem<float> b = a;
    b.refill_keys(a.cu_k[1], s.k_lens[1], 99);
    Outputs<float> oa = a.poisoned_outputs(), ob = b.poisoned_outputs();
    for (auto [prob, out] : {std::pair{&a, &oa}, std::pair{&b, &ob}}) {
      attention_forward_cpu(prob->forward_params(*out));
      attention_backward_cpu(prob->backward_params(*out));
    }
    auto rows_equal = [](const Tensor<float>& x, const Tensor<float>& y, int64_t first, int64_t n) {
      return std::memcmp(&x.data[first * x.row_stride], &y.data[first * y.row_stride],
                         n * x.row_stride * sizeof(float)) == 0;
    };
    for (const int sample : {0, 2}) {
      const int64_t q0 = a.cu_q[sample], qn = s.q_lens[sample], k0 = a.cu_k[sample], kn = s.k_lens[sample];
      EXPECT_TRUE(rows_equal(oa.out, ob.out, q0, qn)) << m.name << " sample " << sample;
      EXPECT_TRUE(rows_equal(oa.dq, ob.dq, q0, qn)) << m.name << " sample " << sample;
      EXPECT_TRUE(rows_equal(oa.dk, ob.dk, k0, kn)) << m.name << " sample " << sample;
      EXPECT_TRUE(rows_equal(oa.dv, ob.dv, k0, kn)) << m.name << " sample " << sample;
      for (int h = 0; h < s.heads; ++h)
        EXPECT_EQ(std::memcmp(&oa.lse[h * a.total_q + q0], &ob.lse[h * a.total_q + q0], qn * sizeof(float)), 0);
    }
    EXPECT_FALSE(rows_equal(oa.out, ob.out, a.cu_q[1], s.q_lens[1])) << m.name << ": sample 1 did not change";
  }
}

// Each output element is computed by one task in a fixed order: any thread count, same bits.
TEST(AttentionCpu, DeterministicAcrossRunsAndThreadCounts) {
  Shape s;
  s.q_lens = {200, 3, 90, 0, 64, 1};
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 20;
  s.causal = true;
  const Problem<float> prob(s, 19);
  Outputs<float> first = prob.poisoned_outputs();
  attention_forward_cpu(prob.forward_params(first), 1);
  attention_backward_cpu(prob.backward_params(first), 1);
  for (const int threads : {1, 2, 3, 7}) {
    Outputs<float> o = prob.poisoned_outputs();
    attention_forward_cpu(prob.forward_params(o), threads);
    attention_backward_cpu(prob.backward_params(o), threads);
    // NaN != NaN, so compare bits: the poisoned slots must match too.
    EXPECT_TRUE(same_bits(o.out.data, first.out.data)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.lse, first.lse)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.dq.data, first.dq.data)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.dk.data, first.dk.data)) << threads << " threads";
    EXPECT_TRUE(same_bits(o.dv.data, first.dv.data)) << threads << " threads";
  }
}

// Random shapes, lengths and masks: VARPACK_ATTN_FUZZ=N runs N cases (default 12, for CI time).
TEST(AttentionCpu, RandomConfigurations) {
  const char* env = std::getenv("VARPACK_ATTN_FUZZ");
  const int cases = env != nullptr ? std::atoi(env) : 12;
  std::mt19937 rng(2024);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int c = 0; c < cases; ++c) {
    Shape s;
    const int batch = pick(1, 6);
    for (int b = 0; b < batch; ++b) {
      s.q_lens.push_back(pick(0, 3) == 0 ? pick(0, 2) : pick(0, 150));
      s.k_lens.push_back(pick(0, 2) == 0 ? s.q_lens.back() : pick(0, 150));
    }
    s.kv_heads = pick(1, 3);
    s.heads = s.kv_heads * pick(1, 4);
    s.head_dim = pick(1, 80);
    s.causal = pick(0, 1) == 1;
    s.window_left = pick(0, 2) == 0 ? pick(0, 40) : -1;
    s.window_right = pick(0, 2) == 0 ? pick(0, 40) : -1;
    s.softcap = pick(0, 3) == 0 ? 0.5f * pick(1, 20) : 0;
    s.stride_gap = pick(0, 1) * pick(1, 7);
    check_against_reference<float>(s, 1000 + c, pick(1, 3));
  }
}

// Every instruction-set level the CPU runs (the kernels are compiled once per level with its own
// vector width), selected through VARPACK_CPU_ISA; levels the CPU lacks fall back to the next one.
TEST(AttentionCpu, EveryInstructionSetLevel) {
  for (const char* isa : {"x86-64-v4", "x86-64-v3", "baseline"}) {
    setenv("VARPACK_CPU_ISA", isa, 1);
    for (const Mask& m : {kMasks[1], kMasks[2], kMasks[5]}) {
      Shape s;
      s.q_lens = {1, 70, 0, 33};
      s.k_lens = {5, 70, 2, 20};
      s.heads = 6;
      s.kv_heads = 2;
      s.head_dim = 37;
      s.causal = m.causal;
      s.window_left = m.left;
      s.window_right = m.right;
      s.softcap = m.softcap;
      SCOPED_TRACE(std::string(isa) + " " + m.name);
      check_against_reference<float>(s, 21);
      check_against_reference<double>(s, 22);
    }
  }
  unsetenv("VARPACK_CPU_ISA");
  setenv("VARPACK_CPU_ISA", "avx9", 1);
  Shape s;
  s.q_lens = {4};
  const Problem<float> prob(s, 23);
  Outputs<float> o = prob.poisoned_outputs();
  EXPECT_THROW(attention_forward_cpu(prob.forward_params(o)), Error);
  unsetenv("VARPACK_CPU_ISA");
}

TEST(AttentionCpu, RejectsUnsupportedDtype) {
  Shape s;
  s.q_lens = {4};
  const Problem<float> prob(s, 20);
  Outputs<float> o = prob.poisoned_outputs();
  AttentionParams p = prob.forward_params(o);
  p.dtype = DType::f16;
  EXPECT_THROW(attention_forward_cpu(p), Error);
}

}  // namespace
}  // namespace varpack::test
