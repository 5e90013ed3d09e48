// balance_rows on hand-made and adversarial inputs, its errors, its determinism, and on plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "balance_checks.h"
#include "varpack/balance.h"
#include "varpack/error.h"
#include "varpack/pack.h"
#include "varpack/profiles.h"

namespace varpack {
namespace {

using testing::check_assignment;
using testing::step_max;

BalanceOptions options(int64_t ranks, int64_t k, bool drop_last = true,
                       BalanceMethod method = BalanceMethod::lpt, int64_t window_steps = 1) {
  BalanceOptions o;
  o.window_steps = window_steps;
  o.ranks = ranks;
  o.rows_per_rank = k;
  o.drop_last = drop_last;
  o.method = method;
  return o;
}

// The message of the varpack::Error `f` throws ("" if none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Balance, ErrorsNameTheParameter) {
  const std::vector<double> costs = {1, 2, 3, 4};
  EXPECT_NE(error_of([&] { balance_rows(costs, options(0, 1)); }).find("ranks must be >= 1"), std::string::npos);
  EXPECT_NE(error_of([&] { balance_rows(costs, options(2, 0)); }).find("rows_per_rank must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { balance_rows(costs, options(int64_t{1} << 40, int64_t{1} << 40)); }).find("overflows"),
            std::string::npos);
  EXPECT_NE(error_of([&] { balance_rows(costs, options(2, 1, true, BalanceMethod::lpt, 0)); }).find("window_steps"),
            std::string::npos);
  EXPECT_NE(error_of([&] { balance_rows(costs, options(int64_t{1} << 30, 2, true, BalanceMethod::lpt, int64_t{1} << 40)); })
                .find("overflows"),
            std::string::npos);
  for (const double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    std::vector<double> c = costs;
    c[2] = bad;
    EXPECT_NE(error_of([&] { balance_rows(c, options(2, 1)); }).find("cost of row 2"), std::string::npos) << bad;
  }
  EXPECT_NE(error_of([] { parse_balance_method("greedy"); }).find("\"lpt\" or \"round_robin\""), std::string::npos);
  const PackPlan plan = plan_packing(std::vector<int64_t>{3, 4}, PackOptions{});
  EXPECT_NE(error_of([&] { row_costs(plan, CostModel{-1.0, 0.0}); }).find("alpha"), std::string::npos);
  EXPECT_NE(error_of([&] { row_costs(plan, CostModel{0.0, std::nan("")}); }).find("beta"), std::string::npos);
  EXPECT_NE(error_of([&] { row_costs(plan, CostModel{1.0, 0.0, -1.0}); }).find("overhead"), std::string::npos);
}

TEST(Balance, MethodNames) {
  for (const BalanceMethod m : {BalanceMethod::lpt, BalanceMethod::round_robin})
    EXPECT_EQ(parse_balance_method(to_string(m)), m);
}

TEST(Balance, HandCaseNeedsTheSwap) {
  // Greedy alone: {3, 2, 2} = 7 against {3, 2, 0} = 5, and round robin in this order is the same
  // 7; swapping a 2 for the 3 in the light rank... gives {3, 3, 0} and {2, 2, 2}: 6 = optimal.
  const std::vector<double> costs = {3, 3, 2, 2, 2, 0};
  const BalanceOptions o = options(2, 3);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  EXPECT_DOUBLE_EQ(step_max(a, 0), 6.0);
  EXPECT_EQ(a.stats.round_robin_steps, 0);
  const RankAssignment rr = balance_rows(costs, options(2, 3, true, BalanceMethod::round_robin));
  EXPECT_DOUBLE_EQ(step_max(rr, 0), 7.0);
  EXPECT_DOUBLE_EQ(a.stats.mean_imbalance, 1.0);
}

TEST(Balance, HandCaseExactSplit) {
  // Two steps of 2 ranks x 2 rows; each step splits exactly: {9, 1} + {5, 5} = 10 each,
  // {4, 4} + {6, 2} = 8 each.
  const std::vector<double> costs = {9, 5, 5, 1, 4, 6, 4, 2};
  const BalanceOptions o = options(2, 2);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  EXPECT_EQ(a.stats.steps, 2);
  for (int64_t s = 0; s < 2; ++s) EXPECT_DOUBLE_EQ(a.step_imbalance[s], 1.0);
  EXPECT_EQ(std::vector<int64_t>(a.rows_of(0, 0).begin(), a.rows_of(0, 0).end()), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(std::vector<int64_t>(a.rows_of(0, 1).begin(), a.rows_of(0, 1).end()), (std::vector<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(a.stats.step_time, 18.0);
  EXPECT_DOUBLE_EQ(a.stats.ideal_step_time, 18.0);
}

TEST(Balance, RoundRobinIsRowModRanks) {
  std::vector<double> costs(23);
  for (size_t i = 0; i < costs.size(); ++i) costs[i] = static_cast<double>((i * 7) % 5);
  const BalanceOptions o = options(3, 2, false, BalanceMethod::round_robin);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  for (int64_t s = 0; s < a.steps(); ++s)
    for (int64_t r = 0; r < 3; ++r)
      for (const int64_t row : a.rows_of(s, r)) EXPECT_EQ((row - s * 6) % 3, r) << row;
}

TEST(Balance, AllEqualCosts) {
  const std::vector<double> costs(64, 2.5);
  for (const int64_t k : {1, 2, 4}) {
    const BalanceOptions o = options(4, k);
    const RankAssignment a = balance_rows(costs, o);
    check_assignment(a, costs, o);
    EXPECT_DOUBLE_EQ(a.stats.max_imbalance, 1.0);
    EXPECT_DOUBLE_EQ(a.stats.step_time, a.stats.ideal_step_time);
  }
}

TEST(Balance, ZeroCosts) {
  const std::vector<double> costs(12, 0.0);
  const BalanceOptions o = options(3, 2, false);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  EXPECT_DOUBLE_EQ(a.stats.mean_imbalance, 1.0);  // 0 / 0 reported as even, never NaN
  EXPECT_DOUBLE_EQ(a.stats.total_cost, 0.0);
}

TEST(Balance, OneHugeRowGetsTheLightestCompany) {
  // The huge row sets the step time whatever happens; its rank should get the k - 1 cheapest rows.
  std::vector<double> costs = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  costs[7] = 1000;
  const BalanceOptions o = options(3, 4);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  EXPECT_DOUBLE_EQ(step_max(a, 0), 1000 + 1 + 1 + 2);
}

TEST(Balance, OneRank) {
  const std::vector<double> costs = {5, 1, 2, 7, 3};
  const BalanceOptions o = options(1, 2, false);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  EXPECT_EQ(a.steps(), 3);
  EXPECT_EQ(a.stats.partial_step_rows, 1);
  EXPECT_DOUBLE_EQ(a.stats.max_imbalance, 1.0);
}

TEST(Balance, OneRowPerRank) {
  const std::vector<double> costs = {5, 1, 2, 7, 3, 4, 4, 0, 8};
  const BalanceOptions o = options(4, 1, false);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  // One row per rank: every assignment has the step's largest row as its time (the last step is
  // the partial {8}).
  EXPECT_DOUBLE_EQ(a.stats.step_time, 7 + 4 + 8);
}

TEST(Balance, MoreRanksThanRows) {
  const std::vector<double> costs = {3, 1, 2};
  const RankAssignment dropped = balance_rows(costs, options(8, 1));
  check_assignment(dropped, costs, options(8, 1));
  EXPECT_EQ(dropped.steps(), 0);
  EXPECT_EQ(dropped.stats.dropped_rows, 3);
  EXPECT_DOUBLE_EQ(dropped.stats.mean_imbalance, 1.0);

  const BalanceOptions o = options(8, 2, false);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);  // ranks 0..2 get a row each, 3..7 none
  EXPECT_EQ(a.steps(), 1);
  EXPECT_EQ(a.stats.partial_step_rows, 3);
  EXPECT_DOUBLE_EQ(step_max(a, 0), 3.0);
}

TEST(Balance, EmptyInput) {
  const std::vector<double> costs;
  for (const bool drop : {true, false}) {
    const RankAssignment a = balance_rows(costs, options(4, 2, drop));
    check_assignment(a, costs, options(4, 2, drop));
    EXPECT_EQ(a.steps(), 0);
  }
}

TEST(Balance, PartialStepIsBalancedToo) {
  // 2 full steps of 3 x 2 and 5 rows left: ranks 0, 1 take 2 rows, rank 2 takes 1.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(0.0, 10.0);
  std::vector<double> costs(17);
  for (double& c : costs) c = dist(rng);
  const BalanceOptions o = options(3, 2, false);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  EXPECT_EQ(a.stats.partial_step_rows, 5);
  const RankAssignment rr = balance_rows(costs, options(3, 2, false, BalanceMethod::round_robin));
  EXPECT_LE(step_max(a, 2), step_max(rr, 2));
}

TEST(Balance, Deterministic) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> dist(0, 6);  // many ties
  std::vector<double> costs(1001);
  for (double& c : costs) c = dist(rng);
  const BalanceOptions o = options(8, 4, false);
  const RankAssignment a = balance_rows(costs, o);
  const RankAssignment b = balance_rows(costs, o);
  check_assignment(a, costs, o);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.rank_begin, b.rank_begin);
  EXPECT_EQ(a.rank_cost, b.rank_cost);
}

TEST(Balance, NeverSlowerThanRoundRobinOnRandomSteps) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(0.0, 1.0);
  for (const int64_t ranks : {2, 3, 8}) {
    for (const int64_t k : {1, 2, 3, 5}) {
      std::vector<double> costs(static_cast<size_t>(ranks * k * 40 + 3));
      for (double& c : costs) c = dist(rng);
      const BalanceOptions o = options(ranks, k, false);
      const RankAssignment a = balance_rows(costs, o);
      const RankAssignment rr = balance_rows(costs, options(ranks, k, false, BalanceMethod::round_robin));
      check_assignment(a, costs, o);
      for (int64_t s = 0; s < a.steps(); ++s) EXPECT_LE(step_max(a, s), step_max(rr, s)) << "step " << s;
      if (k > 1) {
        EXPECT_LT(a.stats.step_time, rr.stats.step_time) << ranks << " x " << k;
      }
    }
  }
}

TEST(Balance, WindowsGroupRowsOfSimilarCost) {
  // 3 windows of 4 steps x 2 ranks x 1 row, a short last window of one step, and one row left
  // for a partial step that no window touches. Within a window, step j holds the window's (2j+1)-th and (2j+2)-th costliest rows.
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> dist(0, 20);
  std::vector<double> costs(27);
  for (double& c : costs) c = dist(rng);
  const BalanceOptions o = options(2, 1, false, BalanceMethod::lpt, 4);
  const RankAssignment a = balance_rows(costs, o);
  check_assignment(a, costs, o);
  for (int64_t w = 0; w < 3; ++w) {
    std::vector<double> sorted(costs.begin() + w * 8, costs.begin() + (w + 1) * 8);
    std::sort(sorted.rbegin(), sorted.rend());
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t s = w * 4 + j;
      EXPECT_DOUBLE_EQ(a.rank_cost[s * 2] + a.rank_cost[s * 2 + 1], sorted[2 * j] + sorted[2 * j + 1]) << s;
      EXPECT_DOUBLE_EQ(step_max(a, s), sorted[2 * j]) << s;
    }
  }
  // Step 12 is a short last window of its own (rows 24, 25); step 13 the partial step (row 26).
  ASSERT_EQ(a.steps(), 14);
  EXPECT_EQ(a.rows_of(12, 0).size() + a.rows_of(12, 1).size(), 2u);
  ASSERT_EQ(a.rows_of(13, 0).size(), 1u);
  EXPECT_EQ(a.rows_of(13, 0)[0], 26);
  EXPECT_TRUE(a.rows_of(13, 1).empty());
}

TEST(Balance, WindowsHelpOneRowPerRank) {
  PackOptions po;
  po.capacity = 16384;
  po.shuffle_rows = true;
  const PackPlan plan = plan_packing(generate_lengths("long", 2000, 2), po);
  const std::vector<double> costs = row_costs(plan, CostModel{});
  const RankAssignment plain = balance_rows(costs, options(8, 1));
  const BalanceOptions o = options(8, 1, true, BalanceMethod::lpt, 8);
  const RankAssignment windowed = balance_rows(costs, o);
  check_assignment(windowed, costs, o);
  EXPECT_LT(windowed.stats.mean_imbalance, plain.stats.mean_imbalance);
  EXPECT_LT(windowed.stats.step_time, plain.stats.step_time);
}

TEST(Balance, RowCostsOfAPlan) {
  PackOptions po;
  po.capacity = 10;
  const PackPlan plan = plan_packing(std::vector<int64_t>{6, 4, 3, 10, 2}, po);
  const CostModel m{2.0, 0.5};
  const std::vector<double> costs = row_costs(plan, m);
  ASSERT_EQ(costs.size(), static_cast<size_t>(plan.rows()));
  double total = 0;
  for (int64_t r = 0; r < plan.rows(); ++r) {
    double want = 0;
    for (const Piece& p : plan.row(r)) want += m.cost(p.length);
    EXPECT_DOUBLE_EQ(costs[r], want) << "row " << r;
    total += costs[r];
  }
  EXPECT_DOUBLE_EQ(total, varlen_compute(plan, m));
  // The per-row constant c is paid once per row, whatever the row holds.
  const CostModel with_c{2.0, 0.5, 7.0};
  const std::vector<double> costs_c = row_costs(plan, with_c);
  for (int64_t r = 0; r < plan.rows(); ++r) EXPECT_DOUBLE_EQ(costs_c[r], costs[r] + 7.0) << "row " << r;
  EXPECT_DOUBLE_EQ(varlen_compute(plan, with_c), varlen_compute(plan, m) + 7.0 * static_cast<double>(plan.rows()));
}

TEST(Balance, PlanOfTheLongProfileBalancesBetterThanRoundRobin) {
  PackOptions po;
  po.capacity = 16384;
  po.shuffle_rows = true;
  po.seed = 5;
  const PackPlan plan = plan_packing(generate_lengths("long", 2000, 1), po);
  const CostModel m;
  const BalanceOptions o = options(8, 2);
  const RankAssignment a = balance_rows(plan, m, o);
  const RankAssignment same = balance_rows(row_costs(plan, m), o);
  EXPECT_EQ(a.rows, same.rows);
  check_assignment(a, row_costs(plan, m), o);
  const RankAssignment rr = balance_rows(plan, m, options(8, 2, true, BalanceMethod::round_robin));
  EXPECT_LT(a.stats.step_time, rr.stats.step_time);
  EXPECT_LT(a.stats.mean_imbalance, rr.stats.mean_imbalance);
}

}  // namespace
}  // namespace varpack
