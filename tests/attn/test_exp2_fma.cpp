// exp2_on_fma (src/attn/cuda/exp2_fma.cuh), the softmax's exponential on the FP32 pipe, compiled
// for the host with the same float operations as on the device: its relative error against
// std::exp2 over the range the softmax hands it (a dense sweep of [-125, 8]: 8 is a lazy
// rescale's bound, and floats of every exponent near 0), and the exact values the
// kernels rely on: 1 at 0 (a row's maximum), 0 below -125 and at -inf (masked scores).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attn/cuda/exp2_fma.cuh"

namespace varpack::cuda {
namespace {

TEST(Exp2OnFma, RelativeErrorBelowBf16AndFp16Rounding) {
  double worst = 0.0;
  float worst_x = 0.f;
  // Steps of 2^-12 from -125 to 8 (544,769 points), then floats of every exponent near 0.
  for (int i = 0; i <= 133 * 4096; ++i) {
    const float x = -125.f + static_cast<float>(i) / 4096.f;
    const double exact = std::exp2(static_cast<double>(x));
    const double err = std::fabs(exp2_on_fma(x) - exact) / exact;
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  for (int e = -149; e <= -12; ++e)
    for (float m : {1.f, 1.25f, 1.5f, 1.999f})
      for (float sign : {-1.f, 1.f}) {
        const float x = sign * std::ldexp(m, e);
        const double exact = std::exp2(static_cast<double>(x));
        const double err = std::fabs(exp2_on_fma(x) - exact) / exact;
        if (err > worst) {
          worst = err;
          worst_x = x;
        }
      }
  EXPECT_LT(worst, 1.1e-4) << "at x = " << worst_x;  // fp16 rounds to 2^-11 = 4.9e-4
}

TEST(Exp2OnFma, ExactWhereTheKernelsNeedIt) {
  EXPECT_EQ(exp2_on_fma(0.f), 1.f);
  EXPECT_EQ(exp2_on_fma(-0.f), 1.f);
  EXPECT_EQ(exp2_on_fma(1.f), 2.f);
  EXPECT_EQ(exp2_on_fma(-3.f), 0.125f);
  EXPECT_EQ(exp2_on_fma(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(exp2_on_fma(-125.5f), 0.f);
  EXPECT_EQ(exp2_on_fma(-1e30f), 0.f);
  EXPECT_GT(exp2_on_fma(-125.f), 0.f);
  EXPECT_TRUE(std::isnormal(exp2_on_fma(-125.f)));
}

TEST(Exp2OnFma, NonDecreasingAlongTheSweep) {
  // The softmax's row maximum is its largest P only if exp2 keeps the scores' order.
  float previous = 0.f;
  for (int i = 0; i <= 133 * 4096; ++i) {
    const float x = -125.f + static_cast<float>(i) / 4096.f;
    const float y = exp2_on_fma(x);
    ASSERT_GE(y, previous) << "at x = " << x;
    previous = y;
  }
}

}  // namespace
}  // namespace varpack::cuda
