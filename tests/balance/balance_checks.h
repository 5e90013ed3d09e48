// Checks every RankAssignment must pass, whatever the method: each assigned row exactly once, in
// its own step (or window of steps), k rows per rank in full steps (the round-robin counts in a partial one), rows
// increasing within a rank, and costs and statistics that match the rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "varpack/balance.h"

namespace varpack::testing {

inline void check_assignment(const RankAssignment& a, const std::vector<double>& costs, const BalanceOptions& o) {
  const auto rows = static_cast<int64_t>(costs.size());
  const int64_t step_rows = o.ranks * o.rows_per_rank;
  const int64_t full = rows / step_rows;
  const int64_t left = rows % step_rows;
  const bool partial = !o.drop_last && left > 0;
  ASSERT_EQ(a.ranks, o.ranks);
  ASSERT_EQ(a.rows_per_rank, o.rows_per_rank);
  ASSERT_EQ(a.steps(), full + (partial ? 1 : 0));
  ASSERT_EQ(a.rank_begin.size(), static_cast<size_t>(a.steps() * o.ranks + 1));
  ASSERT_EQ(a.rank_cost.size(), static_cast<size_t>(a.steps() * o.ranks));
  EXPECT_EQ(a.stats.rows, rows);
  EXPECT_EQ(a.stats.steps, a.steps());
  EXPECT_EQ(a.stats.assigned_rows, static_cast<int64_t>(a.rows.size()));
  EXPECT_EQ(a.stats.assigned_rows + a.stats.dropped_rows, rows);
  EXPECT_EQ(a.stats.dropped_rows, partial ? 0 : left);
  EXPECT_EQ(a.stats.partial_step_rows, partial ? left : 0);

  std::vector<int> seen(static_cast<size_t>(rows), 0);
  double total = 0, step_time = 0, ideal = 0, worst_imbalance = 1, imbalance_sum = 0;
  for (int64_t s = 0; s < a.steps(); ++s) {
    const int64_t n = std::min(step_rows, rows - s * step_rows);
    double step_total = 0, step_max = 0;
    for (int64_t r = 0; r < o.ranks; ++r) {
      const auto mine = a.rows_of(s, r);
      const int64_t want = n / o.ranks + (r < n % o.ranks ? 1 : 0);
      EXPECT_EQ(static_cast<int64_t>(mine.size()), want) << "step " << s << " rank " << r;
      EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end())) << "step " << s << " rank " << r;
      double load = 0;
      // A step's rows come from its own range: the step, or its window of steps.
      const int64_t window_rows = step_rows * o.window_steps;
      const int64_t lo = s < full ? s / o.window_steps * window_rows : s * step_rows;
      const int64_t hi = s < full ? std::min(lo + window_rows, full * step_rows) : rows;
      for (const int64_t row : mine) {
        EXPECT_GE(row, lo) << "row in another step or window";
        EXPECT_LT(row, hi) << "row in another step or window";
        if (row < 0 || row >= rows) continue;
        ++seen[row];
        load += costs[row];
      }
      EXPECT_DOUBLE_EQ(a.rank_cost[s * o.ranks + r], load) << "step " << s << " rank " << r;
      step_total += load;
      step_max = std::max(step_max, load);
    }
    const double mean = step_total / static_cast<double>(o.ranks);
    const double imbalance = mean > 0 ? step_max / mean : 1.0;
    EXPECT_NEAR(a.step_imbalance[s], imbalance, 1e-12 * imbalance) << "step " << s;
    total += step_total;
    step_time += step_max;
    ideal += mean;
    imbalance_sum += imbalance;
    worst_imbalance = std::max(worst_imbalance, imbalance);
  }
  for (int64_t row = 0; row < rows; ++row)
    EXPECT_EQ(seen[row], row < a.stats.assigned_rows ? 1 : 0) << "row " << row;
  const double tol = 1e-12 * std::max(1.0, total);
  EXPECT_NEAR(a.stats.total_cost, total, tol);
  EXPECT_NEAR(a.stats.step_time, step_time, tol);
  EXPECT_NEAR(a.stats.ideal_step_time, ideal, tol);
  EXPECT_NEAR(a.stats.max_imbalance, worst_imbalance, 1e-12 * worst_imbalance);
  EXPECT_NEAR(a.stats.mean_imbalance, a.steps() > 0 ? imbalance_sum / static_cast<double>(a.steps()) : 1.0, 1e-12);
}

// The largest rank cost of step s.
inline double step_max(const RankAssignment& a, int64_t s) {
  const auto first = a.rank_cost.begin() + s * a.ranks;
  return *std::max_element(first, first + a.ranks);
}

}  // namespace varpack::testing
