// The oracle itself: SequenceBounds' masks against hand-worked cases, the forward against values
// computed by hand, and the backward against central finite differences of the forward (double).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention_problem.h"
#include "varpack/attention.h"
#include "varpack/attention_bounds.h"

namespace varpack::test {
namespace {

SequenceBounds bounds(int32_t q_len, int32_t k_len) {
  static int32_t cu_q[2], cu_k[2];
  cu_q[0] = cu_k[0] = 0;
  cu_q[1] = q_len;
  cu_k[1] = k_len;
  return SequenceBounds::of(cu_q, cu_k, 0);
}

TEST(SequenceBounds, CausalIsBottomRightAligned) {
  const SequenceBounds more_keys = bounds(3, 5);  // query i sits at key i + 2
  EXPECT_EQ(more_keys.key_end(0, true, -1), 3);
  EXPECT_EQ(more_keys.key_end(2, true, -1), 5);
  EXPECT_EQ(more_keys.key_begin(0, -1), 0);
  const SequenceBounds more_queries = bounds(5, 3);  // query i sits at key i - 2
  EXPECT_EQ(more_queries.key_end(0, true, -1), 0);  // sees nothing
  EXPECT_EQ(more_queries.key_end(1, true, -1), 0);
  EXPECT_EQ(more_queries.key_end(2, true, -1), 1);
  EXPECT_EQ(more_queries.key_end(4, true, -1), 3);
  EXPECT_EQ(more_queries.key_end(0, false, -1), 3);  // not causal: all keys
}

TEST(SequenceBounds, Windows) {
  const SequenceBounds s = bounds(10, 10);
  EXPECT_EQ(s.key_begin(5, 2), 3);  // keys 3..7 for window (2, 2)
  EXPECT_EQ(s.key_end(5, false, 2), 8);
  EXPECT_EQ(s.key_begin(1, 2), 0);
  EXPECT_EQ(s.key_end(9, false, 2), 10);
  EXPECT_EQ(s.key_end(5, true, 2), 6);  // causal overrides the right side
  EXPECT_EQ(s.key_begin(5, 0), 5);      // window (0, 0): only the diagonal
  EXPECT_EQ(s.key_end(5, false, 0), 6);
}

// One query, two keys, head_dim 1, scale 1: out = (v0 + e^a v1) / (1 + e^a) with a = q k1.
TEST(AttentionReference, ForwardByHand) {
  Shape s;
  s.q_lens = {1};
  s.k_lens = {2};
  s.heads = s.kv_heads = s.head_dim = 1;
  Problem<double> prob(s, 1);
  prob.q.at(0, 0, 0) = 0.5;
  prob.k.at(0, 0, 0) = 0;
  prob.k.at(1, 0, 0) = 2;
  prob.v.at(0, 0, 0) = 3;
  prob.v.at(1, 0, 0) = -1;
  Outputs<double> o = prob.poisoned_outputs();
  AttentionParams p = prob.forward_params(o);
  p.softmax_scale = 1;
  attention_forward_reference(p);
  const double e = std::exp(1.0);
  EXPECT_NEAR(o.out.at(0, 0, 0), (3 - e) / (1 + e), 1e-15);
  EXPECT_NEAR(o.lse[0], std::log(1 + e), 1e-6);
  p.softcap = 0.5;  // score 1 becomes 0.5 tanh(2)
  attention_forward_reference(p);
  const double ec = std::exp(0.5 * std::tanh(2.0));
  EXPECT_NEAR(o.out.at(0, 0, 0), (3 - ec) / (1 + ec), 1e-15);
}

// d(sum(out * dout)) / dx by central differences, against the backward, for a few entries of each
// of q, k and v, with GQA, causal, a window and softcap all on.
TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  Shape s;
  s.q_lens = {4, 0, 6};
  s.k_lens = {5, 2, 6};
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 3;
  s.causal = true;
  s.window_left = 3;
  s.softcap = 1.5;
  Problem<double> prob(s, 2);
  Outputs<double> o = prob.poisoned_outputs();
  attention_forward_reference(prob.forward_params(o));
  attention_backward_reference(prob.backward_params(o));
  auto loss = [&] {
    Outputs<double> x = prob.poisoned_outputs();
    attention_forward_reference(prob.forward_params(x));
    double sum = 0;
    for (int64_t t = 0; t < prob.valid_q; ++t)
      for (int h = 0; h < s.heads; ++h)
        for (int c = 0; c < s.head_dim; ++c) sum += x.out.at(t, h, c) * prob.dout.at(t, h, c);
    return sum;
  };
  const double eps = 1e-6;
  auto check = [&](Tensor<double>& x, const Tensor<double>& grad, int64_t rows, const char* name) {
    for (int64_t t = 0; t < rows; t += 2)
      for (int64_t h = 0; h < x.heads; ++h) {
        const double saved = x.at(t, h, 1);
        x.at(t, h, 1) = saved + eps;
        const double up = loss();
        x.at(t, h, 1) = saved - eps;
        const double down = loss();
        x.at(t, h, 1) = saved;
        EXPECT_NEAR(grad.at(t, h, 1), (up - down) / (2 * eps), 1e-7) << name << " row " << t << " head " << h;
      }
  };
  check(prob.q, o.dq, prob.valid_q, "dq");
  check(prob.k, o.dk, prob.valid_k, "dk");
  check(prob.v, o.dv, prob.valid_k, "dv");
  // Keys 0..1 of sequence 1 have no query: their gradient is written, and zero.
  EXPECT_EQ(o.dk.at(5, 0, 0), 0.0);
  EXPECT_EQ(o.dv.at(6, 1, 2), 0.0);
}

}  // namespace
}  // namespace varpack::test
