// The length profiles: deterministic per seed, within their stated bounds, shaped as their
// sources say (means and medians within sampling tolerance), and unknown names are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "../../src/pack/random.h"
#include "varpack/error.h"
#include "varpack/profiles.h"

namespace varpack {
namespace {

TEST(SplitMix64, MatchesThePublishedReferenceOutput) {
  // First outputs of the reference splitmix64.c (Vigna) for seed 0.
  detail::SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.next(), 0x06C45D188009454Full);
}

TEST(SplitMix64, BelowIsInRangeAndCoversIt) {
  detail::SplitMix64 rng(3);
  std::vector<int> hits(7, 0);
  for (int i = 0; i < 7000; ++i) ++hits[rng.below(7)];
  for (const int h : hits) EXPECT_NEAR(h, 1000, 150);  // ~4.5 standard deviations
}

double median_of(std::vector<int64_t> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return static_cast<double>(v[v.size() / 2]);
}

double mean_of(const std::vector<int64_t>& v) {
  return static_cast<double>(std::accumulate(v.begin(), v.end(), int64_t{0})) /
         static_cast<double>(v.size());
}

TEST(LengthProfiles, ListStartsWithTheReportProfile) {
  const auto profiles = length_profiles();
  ASSERT_GE(profiles.size(), 3u);
  EXPECT_EQ(profiles.front().name, kDefaultProfile);
  const LengthProfile& report = find_length_profile("report");
  EXPECT_EQ(report.capacity, 4096);
  EXPECT_EQ(report.default_samples, 2000);
  for (const LengthProfile& p : profiles) {
    EXPECT_FALSE(p.description.empty()) << p.name;
    EXPECT_GT(p.capacity, 0) << p.name;
    EXPECT_GT(p.default_samples, 0) << p.name;
  }
}

TEST(LengthProfiles, DeterministicPerSeedAndWithinBounds) {
  for (const LengthProfile& p : length_profiles()) {
    SCOPED_TRACE(std::string(p.name));
    const auto a = generate_lengths(p.name, 5000, 11);
    EXPECT_EQ(a, generate_lengths(p.name, 5000, 11));
    EXPECT_NE(a, generate_lengths(p.name, 5000, 12));
    EXPECT_EQ(generate_lengths(p.name).size(), static_cast<size_t>(p.default_samples));
    EXPECT_TRUE(generate_lengths(p.name, 0).empty());
    for (const int64_t l : a) {
      ASSERT_GE(l, 1);
      ASSERT_LE(l, p.capacity);
    }
  }
}

TEST(LengthProfiles, ShapesMatchTheirSources) {
  // Sampling tolerances for 200k draws are far below the margins used here.
  const auto report = generate_lengths("report", 200000, 1);
  EXPECT_EQ(*std::min_element(report.begin(), report.end()), 50);
  EXPECT_EQ(*std::max_element(report.begin(), report.end()), 799);
  EXPECT_NEAR(mean_of(report), 424.5, 2.0);

  const auto long_docs = generate_lengths("long", 200000, 1);
  EXPECT_EQ(*std::min_element(long_docs.begin(), long_docs.end()), 1000);
  EXPECT_EQ(*std::max_element(long_docs.begin(), long_docs.end()), 8000);

  const auto tail = generate_lengths("longtail", 200000, 1);
  EXPECT_NEAR(median_of(tail), 1100, 1100 * 0.02);
  EXPECT_NEAR(mean_of(tail), 1100 * 1.6487, 1100 * 1.6487 * 0.03);  // e^(sigma^2 / 2)

  // The SFT source reports median 393 and mean 528.1; the clip at 4096 removes a little of the
  // tail's mean.
  const auto sft = generate_lengths("sft", 200000, 1);
  EXPECT_NEAR(median_of(sft), 393, 393 * 0.02);
  EXPECT_NEAR(mean_of(sft), 528.1, 528.1 * 0.03);
  EXPECT_GE(*std::min_element(sft.begin(), sft.end()), 14);
}

TEST(LengthProfiles, UnknownNameListsTheValidOnes) {
  for (auto call : {+[] { find_length_profile("nope"); },
                    +[] { generate_lengths("nope", 3, 0); }}) {
    try {
      call();
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("nope"), std::string::npos) << m;
      for (const LengthProfile& p : length_profiles())
        EXPECT_NE(m.find(std::string(p.name)), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace varpack
