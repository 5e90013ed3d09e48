// The cost model's estimates on hand-made plans and the four-strategy comparison.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "varpack/cost_model.h"
#include "varpack/error.h"
#include "varpack/pack.h"
#include "varpack/profiles.h"

namespace varpack {
namespace {

TEST(CostModel, CostOfRowsAndPieces) {
  const CostModel m{2.0, 0.5};
  EXPECT_DOUBLE_EQ(m.cost(0), 0.0);
  EXPECT_DOUBLE_EQ(m.cost(10), 2.0 * 10 + 0.5 * 100);
  PackOptions o;
  o.capacity = 10;
  o.algorithm = Algorithm::bfd;
  const PackPlan plan = plan_packing(std::vector<int64_t>{6, 4, 3}, o);  // rows {6, 4}, {3}
  ASSERT_EQ(plan.rows(), 2);
  EXPECT_DOUBLE_EQ(padded_compute(plan, m), 2 * m.cost(10));
  EXPECT_DOUBLE_EQ(varlen_compute(plan, m), m.cost(6) + m.cost(4) + m.cost(3));
  // The overhead c is paid once per row (one call), padded or packed.
  const CostModel c{2.0, 0.5, 3.0};
  EXPECT_DOUBLE_EQ(padded_compute(plan, c), 2 * (3.0 + m.cost(10)));
  EXPECT_DOUBLE_EQ(varlen_compute(plan, c), 2 * 3.0 + m.cost(6) + m.cost(4) + m.cost(3));
  EXPECT_THROW(check_cost_model(CostModel{1.0, 0.0, -1.0}), Error);
  EXPECT_THROW(check_cost_model(CostModel{0.0, 0.0, 0.0}), Error);
  EXPECT_NO_THROW(check_cost_model(CostModel{0.0, 0.0, 1.0}));  // only a per-row cost: counts rows
  EXPECT_NO_THROW(check_cost_model(c));
}

TEST(CostModel, ComparisonOfTheFourStrategies) {
  // lengths 8, 2, 5, 1 into capacity 10, batches of 2: fixed 4 x 10, longest 4 x 8,
  // dynamic 8, 8, 5, 5, packed rows {8, 2} {5, 1} with varlen attention.
  const std::vector<int64_t> lengths = {8, 2, 5, 1};
  PackOptions o;
  o.capacity = 10;
  o.batch_size = 2;
  o.algorithm = Algorithm::ffd;
  const CostModel m{1.0, 0.1};
  const StrategyComparison c = compare_strategies(lengths, o, m);
  ASSERT_EQ(c.strategies.size(), 4u);
  const std::vector<std::string> names = {"fixed", "longest", "dynamic", "packed"};
  const std::vector<int64_t> slots = {40, 32, 26, 20};
  const std::vector<double> compute = {4 * m.cost(10), 4 * m.cost(8),
                                       2 * m.cost(8) + 2 * m.cost(5),
                                       m.cost(8) + m.cost(2) + m.cost(5) + m.cost(1)};
  for (size_t i = 0; i < 4; ++i) {
    const StrategyCost& s = c.strategies[i];
    EXPECT_EQ(s.name, names[i]);
    EXPECT_EQ(s.tokens, 16);
    EXPECT_EQ(s.slots, slots[i]) << s.name;
    EXPECT_DOUBLE_EQ(s.padding_rate, 1.0 - 16.0 / static_cast<double>(slots[i])) << s.name;
    EXPECT_DOUBLE_EQ(s.compute, compute[i]) << s.name;
    EXPECT_DOUBLE_EQ(s.saving_vs_fixed, 1.0 - compute[i] / compute[0]) << s.name;
  }
  EXPECT_EQ(c.strategies[3].rows, 2);
  EXPECT_EQ(c.packed_stats.rows, 2);
}

TEST(CostModel, PackingSavesMostOnTheReportProfile) {
  const auto lengths = generate_lengths("report");
  PackOptions o;
  o.capacity = 4096;
  const StrategyComparison c = compare_strategies(lengths, o);
  for (size_t i = 1; i < c.strategies.size(); ++i)
    EXPECT_LT(c.strategies[i].compute, c.strategies[i - 1].compute) << c.strategies[i].name;
  EXPECT_GT(c.strategies.back().saving_vs_fixed, 0.85);
}

TEST(CostModel, BadInputsAreErrors) {
  PackOptions o;
  o.algorithm = Algorithm::none;
  EXPECT_THROW(compare_strategies(std::vector<int64_t>{5}, o), Error);
  o.algorithm = Algorithm::bfd;
  EXPECT_THROW(compare_strategies(std::vector<int64_t>{5}, o, CostModel{-1.0, 0.0}), Error);
  EXPECT_THROW(compare_strategies(std::vector<int64_t>{5}, o, CostModel{0.0, 0.0}), Error);
  EXPECT_THROW(time_saving_from_speedup(0.0), Error);
}

}  // namespace
}  // namespace varpack
