// Property tests of plan_packing: every algorithm on random and adversarial length sets keeps the
// plan invariants (plan_checks.h), is deterministic, and the shuffle permutes rows only.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "plan_checks.h"
#include "varpack/error.h"
#include "varpack/pack.h"

namespace varpack {
namespace {

constexpr Algorithm kAll[] = {Algorithm::ffd, Algorithm::bfd, Algorithm::histogram,
                              Algorithm::none, Algorithm::dynamic};

PackOptions options_for(Algorithm a, int64_t capacity,
                        OverlongPolicy policy = OverlongPolicy::error) {
  PackOptions o;
  o.algorithm = a;
  o.capacity = capacity;
  o.overlong = policy;
  o.batch_size = 5;
  return o;
}

// Random length sets from a fixed std::mt19937_64 stream (its output is fixed by the standard;
// only the distributions are not, so draw with modulo).
std::vector<int64_t> random_lengths(std::mt19937_64& rng, int64_t n, int64_t max_length,
                                    int zero_percent) {
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (auto& l : lengths) {
    l = (rng() % 100 < static_cast<uint64_t>(zero_percent))
            ? 0
            : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_length));
  }
  return lengths;
}

TEST(PlanPacking, RandomSetsKeepInvariantsForEveryAlgorithmAndPolicy) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t n = static_cast<int64_t>(rng() % 400);
    // Up to 2.5x the capacity so the policies see over-length samples.
    const auto lengths = random_lengths(rng, n, capacity * 5 / 2 + 1, trial % 4 == 0 ? 20 : 2);
    for (const Algorithm a : kAll) {
      for (const OverlongPolicy policy : {OverlongPolicy::truncate, OverlongPolicy::split}) {
        SCOPED_TRACE("trial " + std::to_string(trial) + " " + std::string(to_string(a)) + " " +
                     std::string(to_string(policy)));
        const PackOptions o = options_for(a, capacity, policy);
        testing::expect_valid_plan(lengths, o, plan_packing(lengths, o));
      }
    }
  }
}

TEST(PlanPacking, AdversarialSets) {
  const int64_t L = 64;
  const std::map<std::string, std::vector<int64_t>> cases = {
      {"empty", {}},
      {"one", {17}},
      {"one zero", {0}},
      {"all zero", {0, 0, 0}},
      {"all equal to L", std::vector<int64_t>(40, L)},
      {"all L/2+1", std::vector<int64_t>(40, L / 2 + 1)},
      {"all L/2", std::vector<int64_t>(41, L / 2)},
      {"all 1", std::vector<int64_t>(300, 1)},
      {"zeros between", {0, 5, 0, 64, 0, 0, 33, 31, 0}},
  };
  for (const auto& [name, lengths] : cases) {
    for (const Algorithm a : kAll) {
      SCOPED_TRACE(name + " " + std::string(to_string(a)));
      const PackOptions o = options_for(a, L);
      const PackPlan plan = plan_packing(lengths, o);
      testing::expect_valid_plan(lengths, o, plan);
    }
  }
}

TEST(PlanPacking, AdversarialRowCountsAreTheOptimum) {
  const int64_t L = 64;
  for (const Algorithm a : {Algorithm::ffd, Algorithm::bfd, Algorithm::histogram}) {
    SCOPED_TRACE(std::string(to_string(a)));
    EXPECT_EQ(plan_packing(std::vector<int64_t>(40, L), options_for(a, L)).rows(), 40);
    // No two of L/2+1 fit in a row.
    EXPECT_EQ(plan_packing(std::vector<int64_t>(40, L / 2 + 1), options_for(a, L)).rows(), 40);
    EXPECT_EQ(plan_packing(std::vector<int64_t>(41, L / 2), options_for(a, L)).rows(), 21);
    EXPECT_EQ(plan_packing(std::vector<int64_t>(300, 1), options_for(a, L)).rows(), 5);
    EXPECT_EQ(plan_packing(std::vector<int64_t>{}, options_for(a, L)).rows(), 0);
  }
}

TEST(PlanPacking, OneHugeSampleSplitsIntoFullPiecesAndARemainder) {
  const std::vector<int64_t> lengths = {10, 4096 * 3 + 5, 7};
  for (const Algorithm a : kAll) {
    SCOPED_TRACE(std::string(to_string(a)));
    const PackOptions o = options_for(a, 4096, OverlongPolicy::split);
    const PackPlan plan = plan_packing(lengths, o);
    testing::expect_valid_plan(lengths, o, plan);
    EXPECT_EQ(plan.stats.split_samples, 1);
    EXPECT_EQ(plan.stats.truncated_tokens, 0);
    int64_t pieces_of_huge = 0;
    for (const Piece& p : plan.pieces) pieces_of_huge += p.sample == 1;
    EXPECT_EQ(pieces_of_huge, 4);
  }
}

TEST(PlanPacking, ContextParallelSamplesAreLeftOutAndCounted) {
  const std::vector<int64_t> lengths = {10, 4096 * 3 + 5, 7, 4097, 0, 4096};
  for (const Algorithm a : kAll) {
    SCOPED_TRACE(std::string(to_string(a)));
    const PackOptions o = options_for(a, 4096, OverlongPolicy::context_parallel);
    const PackPlan plan = plan_packing(lengths, o);
    testing::expect_valid_plan(lengths, o, plan);
    EXPECT_EQ(plan.stats.context_parallel_samples, 2);
    EXPECT_EQ(plan.stats.tokens, 10 + 7 + 4096);
  }
  EXPECT_EQ(parse_overlong_policy("cp"), OverlongPolicy::context_parallel);
}

TEST(PlanPacking, SplitSamplesOfExactMultiplesKeepTheirOffsetsApart) {
  // Consecutive samples made only of full pieces, and a full piece next to a remainder: offsets
  // are recovered per sample (0, L, 2L, ...), never carried over from the previous sample.
  const int64_t L = 16;
  const std::vector<int64_t> lengths = {2 * L, 2 * L, L, 3 * L + 1, 0, 3 * L, L + 1};
  for (const Algorithm a : kAll) {
    SCOPED_TRACE(std::string(to_string(a)));
    const PackOptions o = options_for(a, L, OverlongPolicy::split);
    const PackPlan plan = plan_packing(lengths, o);
    testing::expect_valid_plan(lengths, o, plan);
    EXPECT_EQ(plan.stats.split_samples, 5);
    for (const Piece& p : plan.pieces) {
      EXPECT_EQ(p.offset % L, 0) << "sample " << p.sample;
      if (p.length < L) {
        EXPECT_EQ(p.offset + p.length, lengths[p.sample]);
      }
    }
  }
}

TEST(PlanPacking, TruncateCountsLostTokens) {
  const std::vector<int64_t> lengths = {100, 250, 99};
  const PackOptions o = options_for(Algorithm::bfd, 100, OverlongPolicy::truncate);
  const PackPlan plan = plan_packing(lengths, o);
  EXPECT_EQ(plan.stats.truncated_tokens, 150);
  EXPECT_EQ(plan.stats.tokens, 299);
  testing::expect_valid_plan(lengths, o, plan);
}

TEST(PlanPacking, OverlongErrorNamesSampleLengthCapacityAndPolicies) {
  const std::vector<int64_t> lengths = {5, 9, 4097, 3};
  for (const Algorithm a : kAll) {
    try {
      plan_packing(lengths, options_for(a, 4096));
      FAIL() << "no error for " << to_string(a);
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("sample 2"), std::string::npos) << m;
      EXPECT_NE(m.find("4097"), std::string::npos) << m;
      EXPECT_NE(m.find("4096"), std::string::npos) << m;
      EXPECT_NE(m.find("truncate"), std::string::npos) << m;
      EXPECT_NE(m.find("split"), std::string::npos) << m;
    }
  }
}

TEST(PlanPacking, BadParametersAreErrors) {
  const std::vector<int64_t> lengths = {5, -1};
  EXPECT_THROW(plan_packing(std::vector<int64_t>{1}, options_for(Algorithm::bfd, 0)), Error);
  EXPECT_THROW(plan_packing(std::vector<int64_t>{1}, options_for(Algorithm::ffd, -3)), Error);
  try {
    plan_packing(lengths, options_for(Algorithm::ffd, 10));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 1"), std::string::npos) << e.what();
  }
  PackOptions o = options_for(Algorithm::dynamic, 10);
  o.batch_size = 0;
  EXPECT_THROW(plan_packing(std::vector<int64_t>{1}, o), Error);
}

TEST(PlanPacking, DeterministicAndShuffleOnlyPermutesRows) {
  std::mt19937_64 rng(7);
  const auto lengths = random_lengths(rng, 3000, 800, 1);
  for (const Algorithm a : kAll) {
    SCOPED_TRACE(std::string(to_string(a)));
    PackOptions o = options_for(a, 4096);
    const PackPlan first = plan_packing(lengths, o);
    const PackPlan again = plan_packing(lengths, o);
    EXPECT_TRUE(first == again);
    o.shuffle_rows = true;
    o.seed = 99;
    const PackPlan shuffled = plan_packing(lengths, o);
    EXPECT_TRUE(shuffled == plan_packing(lengths, o)) << "same seed, different order";
    EXPECT_FALSE(shuffled == first) << "the shuffle left every row in place";
    o.seed = 100;
    EXPECT_FALSE(shuffled == plan_packing(lengths, o)) << "two seeds gave one order";
    testing::expect_valid_plan(lengths, o, shuffled);
    // Same rows as a multiset.
    auto rows_of = [](const PackPlan& p) {
      std::vector<std::pair<int64_t, std::vector<Piece>>> rows;
      for (int64_t r = 0; r < p.rows(); ++r)
        rows.push_back({p.row_width[r], {p.row(r).begin(), p.row(r).end()}});
      std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
        return x.second.front().sample < y.second.front().sample;
      });
      return rows;
    };
    EXPECT_TRUE(rows_of(shuffled) == rows_of(first));
    EXPECT_EQ(shuffled.stats.rows, first.stats.rows);
  }
}

TEST(PlanPacking, PlanningIntoAUsedPlanGivesTheSamePlan) {
  std::mt19937_64 rng(8);
  const auto big = random_lengths(rng, 2000, 900, 3);
  const auto small = random_lengths(rng, 300, 900, 3);
  for (const Algorithm a : kAll) {
    SCOPED_TRACE(std::string(to_string(a)));
    PackOptions o = options_for(a, 512, OverlongPolicy::split);
    PackPlan reused;
    plan_packing_into(big, o, reused);
    EXPECT_TRUE(reused == plan_packing(big, o));
    plan_packing_into(small, o, reused);
    const PackPlan fresh = plan_packing(small, o);
    EXPECT_TRUE(reused == fresh);
    EXPECT_EQ(reused.stats.rows, fresh.stats.rows);
    EXPECT_EQ(reused.stats.tokens, fresh.stats.tokens);
    EXPECT_EQ(reused.stats.split_samples, fresh.stats.split_samples);
  }
}

TEST(PlanPacking, NamesRoundTripAndUnknownNamesListTheValidOnes) {
  for (const Algorithm a : kAll) EXPECT_EQ(parse_algorithm(to_string(a)), a);
  for (const OverlongPolicy p :
       {OverlongPolicy::error, OverlongPolicy::truncate, OverlongPolicy::split})
    EXPECT_EQ(parse_overlong_policy(to_string(p)), p);
  try {
    parse_algorithm("fastest");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fastest"), std::string::npos);
    EXPECT_NE(m.find("ffd, bfd, histogram, none, dynamic"), std::string::npos) << m;
  }
  EXPECT_THROW(parse_overlong_policy("drop"), Error);
}

}  // namespace
}  // namespace varpack
