// The report's own figures, recomputed: with its length profile packing takes padding from over
// 50% to under 5% in fewer than samples/4 rows; 1.88x throughput is the stated 46.87% time
// reduction; under the cost model the saving tracks the padding rate when the linear term
// dominates (the report: 2.28% at 3%, 89.73% at 90%) and exceeds it when attention dominates.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "varpack/cost_model.h"
#include "varpack/pack.h"
#include "varpack/profiles.h"

namespace varpack {
namespace {

TEST(ReportFigures, PackingTheReportProfileRemovesAlmostAllPadding) {
  const LengthProfile& profile = find_length_profile("report");
  for (const uint64_t seed : {0u, 1u, 2u, 3u, 4u}) {
    const auto lengths = generate_lengths(profile.name, profile.default_samples, seed);
    for (const Algorithm a : {Algorithm::ffd, Algorithm::bfd, Algorithm::histogram}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(to_string(a)));
      PackOptions o;
      o.capacity = profile.capacity;
      o.algorithm = a;
      const PlanStats s = plan_packing(lengths, o).stats;
      EXPECT_GT(s.padding_rate_unpacked, 0.50);
      EXPECT_LT(s.padding_rate_packed, 0.05);
      EXPECT_LT(s.rows, s.samples / 4);
    }
  }
}

TEST(ReportFigures, ThroughputGainToTimeReduction) {
  // 1 - 1/1.88 = 46.81%; the report prints 46.87%, which is 1 - 1/1.8822. Its 1.88x is rounded to
  // two decimals, so it stands for a gain in [1.875, 1.885), i.e. a reduction in [46.67%, 46.95%):
  // the stated 46.87% must lie in that interval (it does not follow from exactly 1.88).
  EXPECT_NEAR(time_saving_from_speedup(1.88), 0.4681, 0.0001);
  EXPECT_GE(0.4687, time_saving_from_speedup(1.875));
  EXPECT_LT(0.4687, time_saving_from_speedup(1.885));
  EXPECT_DOUBLE_EQ(time_saving_from_speedup(2.0), 0.5);
}

// Every sample of length (1 - padding) * L; fixed padding to L against packing with varlen
// attention, whose compute is independent of how the samples are grouped.
double packing_saving(double padding, const CostModel& model, double* padding_rate = nullptr) {
  const int64_t L = 4096;
  const auto n = static_cast<int64_t>(static_cast<double>(L) * (1.0 - padding) + 0.5);
  const std::vector<int64_t> lengths(64, n);
  PackOptions o;
  o.capacity = L;
  const StrategyComparison c = compare_strategies(lengths, o, model);
  if (padding_rate != nullptr) *padding_rate = c.strategies.front().padding_rate;
  return c.strategies.back().saving_vs_fixed;
}

TEST(ReportFigures, SavingsTrackPaddingWhenTheLinearTermDominates) {
  const CostModel linear{1.0, 0.0};
  for (const double p : {0.03, 0.25, 0.5, 0.9}) {
    double rate = 0;
    const double saving = packing_saving(p, linear, &rate);
    EXPECT_NEAR(saving, rate, 1e-12) << "padding " << p;  // exactly the padding rate
  }
  // The report measured 2.28% at 3% and 89.73% at 90% on its own model: within 1 percentage
  // point of the linear prediction (its remaining gap is per-step overhead the model leaves out).
  EXPECT_NEAR(packing_saving(0.03, linear), 0.0228, 0.01);
  EXPECT_NEAR(packing_saving(0.90, linear), 0.8973, 0.01);
  // The default model (the anchor fit) at rows of 4096 is linear-dominated: alpha * 4096 is 5x
  // beta * 4096^2, so its savings stay within a few points of the padding rate.
  EXPECT_NEAR(packing_saving(0.03, CostModel{}), 0.03, 0.01);
  EXPECT_NEAR(packing_saving(0.90, CostModel{}), 0.90, 0.02);
}

TEST(ReportFigures, SavingsExceedPaddingWhenAttentionDominates) {
  const CostModel quadratic{0.0, 1.0};
  for (const double p : {0.03, 0.25, 0.5, 0.9}) {
    double rate = 0;
    const double saving = packing_saving(p, quadratic, &rate);
    // Pure attention: saving = 1 - (1 - p)^2 > p.
    EXPECT_GT(saving, rate + 0.5 * p * (1 - p)) << "padding " << p;
    EXPECT_NEAR(saving, 1.0 - (1.0 - rate) * (1.0 - rate), 1e-12);
  }
}

}  // namespace
}  // namespace varpack
