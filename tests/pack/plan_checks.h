// Checks every plan invariant against the input lengths, independently of how the plan was made:
// each token lands exactly once or is counted as truncated, no row passes its width or the
// capacity, pieces are well-formed, and the statistics agree with the rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "varpack/pack.h"

namespace varpack::testing {

inline void expect_valid_plan(std::span<const int64_t> lengths, const PackOptions& options,
                              const PackPlan& plan) {
  const int64_t capacity = options.capacity;
  ASSERT_EQ(plan.row_begin.size(), plan.row_width.size() + 1);
  ASSERT_EQ(plan.row_begin.front(), 0);
  ASSERT_EQ(plan.row_begin.back(), static_cast<int64_t>(plan.pieces.size()));

  // covered[s]: how many tokens of sample s the plan holds; pieces of one sample must tile a
  // prefix [0, covered) without overlap, so collect them and check after.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(lengths.size());
  int64_t width_sum = 0;
  int64_t tokens = 0;
  for (int64_t r = 0; r < plan.rows(); ++r) {
    ASSERT_LE(plan.row_begin[r], plan.row_begin[r + 1]) << "row " << r;
    const auto row = plan.row(r);
    EXPECT_FALSE(row.empty()) << "row " << r << " is empty";
    int64_t used = 0;
    for (const Piece& p : row) {
      ASSERT_GE(p.sample, 0);
      ASSERT_LT(p.sample, static_cast<int64_t>(lengths.size()));
      EXPECT_GE(p.length, 1) << "row " << r;
      EXPECT_LE(p.length, capacity) << "row " << r;
      EXPECT_GE(p.offset, 0);
      spans[p.sample].push_back({p.offset, p.length});
      used += p.length;
    }
    EXPECT_LE(used, plan.row_width[r]) << "row " << r << " passes its width";
    EXPECT_LE(plan.row_width[r], capacity) << "row " << r << " passes the capacity";
    width_sum += plan.row_width[r];
    tokens += used;
  }

  int64_t truncated = 0;
  int64_t skipped = 0;
  int64_t context_parallel = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    auto& pieces = spans[s];
    std::sort(pieces.begin(), pieces.end());
    int64_t covered = 0;
    for (const auto& [offset, length] : pieces) {
      EXPECT_EQ(offset, covered) << "sample " << s << ": gap or overlap at offset " << offset;
      covered = offset + length;
    }
    if (lengths[s] == 0) ++skipped;
    if (lengths[s] > capacity && options.overlong == OverlongPolicy::truncate) {
      EXPECT_EQ(covered, capacity) << "sample " << s;
      EXPECT_EQ(pieces.size(), 1u) << "sample " << s;
      truncated += lengths[s] - capacity;
    } else if (lengths[s] > capacity && options.overlong == OverlongPolicy::context_parallel) {
      EXPECT_TRUE(pieces.empty()) << "sample " << s << " is for context parallelism, not a row";
      ++context_parallel;
    } else {
      EXPECT_EQ(covered, lengths[s]) << "sample " << s << " not placed exactly once";
    }
    if (options.overlong == OverlongPolicy::split && lengths[s] > capacity) {
      // Pieces of at most the capacity, all full but the last.
      EXPECT_EQ(static_cast<int64_t>(pieces.size()), (lengths[s] + capacity - 1) / capacity);
    }
  }

  const PlanStats& st = plan.stats;
  EXPECT_EQ(st.samples, static_cast<int64_t>(lengths.size()));
  EXPECT_EQ(st.tokens, tokens);
  EXPECT_EQ(st.rows, plan.rows());
  EXPECT_EQ(st.capacity, capacity);
  EXPECT_EQ(st.lower_bound_rows, (tokens + capacity - 1) / capacity);
  EXPECT_EQ(st.padded_tokens, width_sum - tokens);
  EXPECT_EQ(st.truncated_tokens, truncated);
  EXPECT_EQ(st.skipped_samples, skipped);
  EXPECT_EQ(st.context_parallel_samples, context_parallel);
  if (width_sum > 0) {
    EXPECT_DOUBLE_EQ(st.padding_rate_packed, static_cast<double>(width_sum - tokens) / width_sum);
  }
  if (options.algorithm != Algorithm::none && options.algorithm != Algorithm::dynamic) {
    EXPECT_GE(st.rows, st.lower_bound_rows);
  }
}

}  // namespace varpack::testing
