// Argument checks: each bad input is rejected with a message naming the field (and index).
#include <gtest/gtest.h>

#include <string>

#include "attention_problem.h"
#include "varpack/attention.h"
#include "varpack/error.h"

namespace varpack::test {
namespace {

// Runs fn, expects varpack::Error whose message contains `needle`.
template <typename Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

class AttentionChecks : public ::testing::Test {
 protected:
  Shape shape = [] {
    Shape s;
    s.q_lens = {3, 4};
    s.heads = 4;
    s.kv_heads = 2;
    return s;
  }();
  Problem<float> prob{shape, 1};
  Outputs<float> out = prob.poisoned_outputs();
  AttentionParams params = prob.forward_params(out);
  AttentionBackwardParams backward = prob.backward_params(out);
};

TEST_F(AttentionChecks, AcceptsValidParams) {
  EXPECT_NO_THROW(check_attention_params(params));
  EXPECT_NO_THROW(check_attention_backward_params(backward));
  EXPECT_NO_THROW(check_host_seqlens(params));
}

TEST_F(AttentionChecks, NamesTheBadField) {
  params.q = nullptr;
  expect_error([&] { check_attention_params(params); }, "q is null");
  params = prob.forward_params(out);
  params.heads = 3;
  expect_error([&] { check_attention_params(params); }, "heads = 3 is not a multiple of kv_heads = 2");
  params = prob.forward_params(out);
  params.head_dim = 0;
  expect_error([&] { check_attention_params(params); }, "head_dim = 0");
  params = prob.forward_params(out);
  params.window_left = -2;
  expect_error([&] { check_attention_params(params); }, "window = (-2, -1)");
  params = prob.forward_params(out);
  params.softcap = -1;
  expect_error([&] { check_attention_params(params); }, "softcap");
  params = prob.forward_params(out);
  params.batch = -1;
  expect_error([&] { check_attention_params(params); }, "batch = -1");
  backward.dk = nullptr;
  expect_error([&] { check_attention_backward_params(backward); }, "dk is null");
}

TEST_F(AttentionChecks, CuSeqlens) {
  const int32_t not_zero[] = {1, 3, 7};
  expect_error([&] { check_cu_seqlens(not_zero, 2, 10, "cu_seqlens_q"); }, "cu_seqlens_q[0] = 1 must be 0");
  const int32_t not_monotone[] = {0, 5, 3, 7};
  expect_error([&] { check_cu_seqlens(not_monotone, 3, 10, "cu_seqlens_k"); },
               "cu_seqlens_k is not monotone at index 2");
  const int32_t too_long[] = {0, 5, 11};
  expect_error([&] { check_cu_seqlens(too_long, 2, 10, "cu_seqlens_q"); },
               "cu_seqlens_q[2] = 11 (the last entry) exceeds the 10 rows");
  EXPECT_NO_THROW(check_cu_seqlens(too_long, 2, 11, "cu_seqlens_q"));
  params.max_seqlen_q = 3;  // sequence 1 has 4 rows
  expect_error([&] { check_host_seqlens(params); }, "sequence 1 has 4 query and 4 key rows");
  expect_error([&] { attention_forward_cpu(params); }, "max_seqlen_q = 3");
}

}  // namespace
}  // namespace varpack::test
