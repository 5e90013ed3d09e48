// select_rows: the chosen rows of a plan, in the given order, with the statistics of those rows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "varpack/balance.h"
#include "varpack/error.h"
#include "varpack/pack.h"
#include "varpack/profiles.h"

namespace varpack {
namespace {

PackPlan report_plan() {
  PackOptions o;
  o.capacity = 4096;
  o.shuffle_rows = true;
  o.seed = 9;
  return plan_packing(generate_lengths("report", 500, 4), o);
}

TEST(SelectRows, AllRowsInOrderGiveThePlanBack) {
  const PackPlan plan = report_plan();
  std::vector<int64_t> all(static_cast<size_t>(plan.rows()));
  for (int64_t r = 0; r < plan.rows(); ++r) all[r] = r;
  const PackPlan same = select_rows(plan, all);
  EXPECT_EQ(same, plan);
  const PlanStats &a = same.stats, &b = plan.stats;
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.capacity, b.capacity);
  EXPECT_EQ(a.lower_bound_rows, b.lower_bound_rows);
  EXPECT_EQ(a.padded_tokens, b.padded_tokens);
  EXPECT_DOUBLE_EQ(a.padding_rate_packed, b.padding_rate_packed);
  EXPECT_DOUBLE_EQ(a.padding_rate_unpacked, b.padding_rate_unpacked);
}

TEST(SelectRows, ChosenRowsInTheGivenOrder) {
  const PackPlan plan = report_plan();
  const std::vector<int64_t> rows = {7, 2, 7, 0};
  const PackPlan sub = select_rows(plan, rows);
  ASSERT_EQ(sub.rows(), 4);
  int64_t tokens = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto got = sub.row(static_cast<int64_t>(i));
    const auto want = plan.row(rows[i]);
    EXPECT_EQ(std::vector<Piece>(got.begin(), got.end()), std::vector<Piece>(want.begin(), want.end())) << i;
    EXPECT_EQ(sub.row_width[i], plan.row_width[rows[i]]);
    for (const Piece& p : got) tokens += p.length;
  }
  EXPECT_EQ(sub.stats.tokens, tokens);
  EXPECT_EQ(sub.stats.padded_tokens, 4 * 4096 - tokens);
  EXPECT_EQ(sub.stats.samples, plan.stats.samples);
  EXPECT_EQ(select_rows(plan, {}).rows(), 0);
}

TEST(SelectRows, RowOutOfRangeIsNamed) {
  const PackPlan plan = report_plan();
  for (const int64_t bad : {int64_t{-1}, plan.rows()}) {
    const std::vector<int64_t> rows = {0, bad};
    try {
      select_rows(plan, rows);
      ADD_FAILURE() << "no error for row " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("row index " + std::to_string(bad) + " (position 1)"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace varpack
