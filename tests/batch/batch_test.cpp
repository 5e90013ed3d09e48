// Tests of build_packed_batch: tokens copied where the plan says and only there, labels ignored at
// every segment start (none crosses a boundary), positions restart, cu_seqlens matches the pieces,
// padding forms its own segment, both loss normalisations sum to 1, and bad sources are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "varpack/batch.h"
#include "varpack/error.h"
#include "varpack/pack.h"

namespace varpack {
namespace {

struct Dataset {
  std::vector<int64_t> lengths;
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<int32_t>> labels;  // empty, or per sample: empty or a prompt mask
};

// Random samples with distinct ids (sample * 1000 + position) so a misplaced token is visible;
// with `with_labels`, about half the samples carry labels whose first third is ignored (a prompt).
Dataset random_dataset(std::mt19937_64& rng, int n, int64_t max_length, bool with_labels) {
  Dataset d;
  for (int s = 0; s < n; ++s) {
    const auto length = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_length + 1));
    d.lengths.push_back(length);
    std::vector<int32_t> ids(static_cast<size_t>(length));
    for (int64_t j = 0; j < length; ++j) ids[static_cast<size_t>(j)] = s * 1000 + static_cast<int32_t>(j);
    if (with_labels) {
      std::vector<int32_t> labels;
      if (rng() % 2 == 0) {
        labels = ids;
        for (int64_t j = 0; j < length / 3; ++j) labels[static_cast<size_t>(j)] = kIgnoreLabel;
      }
      d.labels.push_back(std::move(labels));
    }
    d.ids.push_back(std::move(ids));
  }
  return d;
}

// Checks a batch of rows [first, last) of `plan` against the source, token by token.
void expect_batch_matches(const PackPlan& plan, int64_t first, int64_t last, const Dataset& d,
                          const BatchOptions& options, const PackedBatch& b) {
  const auto total = static_cast<int64_t>(b.input_ids.size());
  ASSERT_EQ(b.labels.size(), b.input_ids.size());
  ASSERT_EQ(b.position_ids.size(), b.input_ids.size());
  ASSERT_EQ(b.loss_weight_per_token.size(), b.input_ids.size());
  ASSERT_EQ(b.loss_weight_per_sample.size(), b.input_ids.size());
  ASSERT_EQ(b.cu_seqlens.front(), 0);
  ASSERT_EQ(b.cu_seqlens.back(), total);
  ASSERT_EQ(b.segment_sample.size() + 1, b.cu_seqlens.size());
  ASSERT_EQ(b.segment_offset.size(), b.segment_sample.size());
  ASSERT_EQ(static_cast<int64_t>(b.row_offsets.size()), last - first + 1);

  size_t seg = 0;
  int64_t samples = 0;
  int32_t longest = 0;
  for (int64_t r = first; r < last; ++r) {
    ASSERT_EQ(b.row_offsets[static_cast<size_t>(r - first)], b.cu_seqlens[seg]) << "row " << r;
    for (const Piece& p : plan.row(r)) {
      ASSERT_LT(seg, b.segment_sample.size());
      EXPECT_EQ(b.segment_sample[seg], p.sample);
      EXPECT_EQ(b.segment_offset[seg], p.offset);
      const int32_t begin = b.cu_seqlens[seg];
      ASSERT_EQ(b.cu_seqlens[seg + 1] - begin, p.length) << "segment " << seg;
      const auto& ids = d.ids[static_cast<size_t>(p.sample)];
      const bool has_labels = !d.labels.empty() && !d.labels[static_cast<size_t>(p.sample)].empty();
      for (int64_t j = 0; j < p.length; ++j) {
        const auto t = static_cast<size_t>(begin + j);
        const auto src = static_cast<size_t>(p.offset + j);
        EXPECT_EQ(b.input_ids[t], ids[src]);
        const int32_t want =
            j == 0 ? kIgnoreLabel : (has_labels ? d.labels[static_cast<size_t>(p.sample)][src] : ids[src]);
        EXPECT_EQ(b.labels[t], want) << "segment " << seg << " position " << j;
        EXPECT_EQ(b.position_ids[t], options.restart_positions_per_piece ? j : p.offset + j);
      }
      longest = std::max(longest, static_cast<int32_t>(p.length));
      ++seg;
      ++samples;
    }
    const int64_t row_end = b.row_offsets[static_cast<size_t>(r - first + 1)];
    EXPECT_EQ(row_end % options.pad_to_multiple, 0) << "row " << r;
    if (seg < b.segment_sample.size() && b.cu_seqlens[seg] < row_end) {
      // The padding segment: no sample, pad ids, ignored labels, zero weight, own positions.
      EXPECT_EQ(b.segment_sample[seg], -1);
      EXPECT_EQ(b.cu_seqlens[seg + 1], row_end);
      EXPECT_LT(row_end - b.cu_seqlens[seg], options.pad_to_multiple);
      for (int32_t t = b.cu_seqlens[seg]; t < row_end; ++t) {
        EXPECT_EQ(b.input_ids[static_cast<size_t>(t)], options.pad_token_id);
        EXPECT_EQ(b.labels[static_cast<size_t>(t)], kIgnoreLabel);
        EXPECT_EQ(b.position_ids[static_cast<size_t>(t)], t - b.cu_seqlens[seg]);
        EXPECT_EQ(b.loss_weight_per_token[static_cast<size_t>(t)], 0.0f);
        EXPECT_EQ(b.loss_weight_per_sample[static_cast<size_t>(t)], 0.0f);
      }
      longest = std::max(longest, static_cast<int32_t>(row_end - b.cu_seqlens[seg]));
      ++seg;
    }
    EXPECT_EQ(b.cu_seqlens[seg], row_end) << "row " << r << " has segments past its end";
  }
  EXPECT_EQ(seg, b.segment_sample.size());
  EXPECT_EQ(b.num_samples, samples);
  EXPECT_EQ(b.max_seqlen, longest);

  // Weights: zero exactly where the label is ignored, each normalisation sums to 1 (float sums of
  // up to ~10^4 terms: 1e-4), and per sample every labelled segment gets the same share.
  double sum_token = 0;
  double sum_sample = 0;
  bool any_label = false;
  for (size_t t = 0; t < b.labels.size(); ++t) {
    const bool ignored = b.labels[t] == kIgnoreLabel;
    any_label |= !ignored;
    EXPECT_EQ(b.loss_weight_per_token[t] == 0.0f, ignored) << "token " << t;
    EXPECT_EQ(b.loss_weight_per_sample[t] == 0.0f, ignored) << "token " << t;
    sum_token += b.loss_weight_per_token[t];
    sum_sample += b.loss_weight_per_sample[t];
  }
  if (any_label) {
    EXPECT_NEAR(sum_token, 1.0, 1e-4);
    EXPECT_NEAR(sum_sample, 1.0, 1e-4);
  }
  std::vector<double> share;
  for (size_t s = 0; s < b.segment_sample.size(); ++s) {
    double w = 0;
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t)
      w += b.loss_weight_per_sample[static_cast<size_t>(t)];
    if (w > 0) share.push_back(w);
  }
  for (const double w : share) EXPECT_NEAR(w, 1.0 / static_cast<double>(share.size()), 1e-5);
}

TEST(PackedBatch, RandomPlansMatchTheSourceTokenByToken) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 40; ++trial) {
    const Dataset d = random_dataset(rng, 1 + static_cast<int>(rng() % 60), 150, trial % 2 == 1);
    PackOptions o;
    o.capacity = 64 + static_cast<int64_t>(rng() % 100);
    o.overlong = OverlongPolicy::split;
    o.algorithm = trial % 3 == 0 ? Algorithm::ffd : Algorithm::bfd;
    const PackPlan plan = plan_packing(d.lengths, o);
    const VectorTokenSource source(d.ids, d.labels);
    BatchOptions bo;
    bo.pad_to_multiple = trial % 4 == 0 ? 1 : 1 + static_cast<int64_t>(rng() % 16);
    bo.pad_token_id = 7;
    bo.restart_positions_per_piece = trial % 5 != 0;
    const int64_t first = plan.rows() > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(plan.rows())) : 0;
    const int64_t last = plan.rows();
    SCOPED_TRACE("trial " + std::to_string(trial));
    const PackedBatch b = build_packed_batch(plan, first, last, source, bo);
    expect_batch_matches(plan, first, last, d, bo, b);
    const PackedBatch again = build_packed_batch(plan, first, last, source, bo);
    EXPECT_EQ(again.input_ids, b.input_ids);
    EXPECT_EQ(again.labels, b.labels);
    EXPECT_EQ(again.loss_weight_per_sample, b.loss_weight_per_sample);
  }
}

TEST(PackedBatch, EveryTokenOfEverySampleLandsOnceOverAllRows) {
  std::mt19937_64 rng(5);
  const Dataset d = random_dataset(rng, 200, 300, false);
  PackOptions o;
  o.capacity = 128;
  o.overlong = OverlongPolicy::split;
  const PackPlan plan = plan_packing(d.lengths, o);
  const PackedBatch b = build_packed_batch(plan, 0, plan.rows(), VectorTokenSource(d.ids));
  // ids encode (sample, position): each must appear exactly once.
  std::vector<int32_t> seen = b.input_ids;
  std::vector<int32_t> want;
  for (const auto& ids : d.ids) want.insert(want.end(), ids.begin(), ids.end());
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(seen, want);
}

TEST(PackedBatch, PerTokenAndPerSampleWeightsDifferOnlyForUnequalSegments) {
  // Two samples of 3 and 9 tokens in one row: 2 and 8 labelled positions (first ones ignored).
  const VectorTokenSource source({{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10, 11, 12}});
  PackOptions o;
  o.capacity = 16;
  const PackPlan plan = plan_packing(std::vector<int64_t>{3, 9}, o);
  ASSERT_EQ(plan.rows(), 1);
  const PackedBatch b = build_packed_batch(plan, 0, 1, source);
  // bfd places the longer sample first.
  ASSERT_EQ(b.segment_sample, (std::vector<int64_t>{1, 0}));
  EXPECT_FLOAT_EQ(b.loss_weight_per_token[1], 1.0f / 10);
  EXPECT_FLOAT_EQ(b.loss_weight_per_token[10], 1.0f / 10);
  EXPECT_FLOAT_EQ(b.loss_weight_per_sample[1], 0.5f / 8);   // long sample: half over 8 tokens
  EXPECT_FLOAT_EQ(b.loss_weight_per_sample[10], 0.5f / 2);  // short sample: half over 2 tokens

  // Equal segments: the two normalisations coincide.
  const VectorTokenSource equal({{1, 2, 3, 4}, {5, 6, 7, 8}});
  const PackPlan p2 = plan_packing(std::vector<int64_t>{4, 4}, o);
  const PackedBatch b2 = build_packed_batch(p2, 0, 1, equal);
  EXPECT_EQ(b2.loss_weight_per_token, b2.loss_weight_per_sample);
}

TEST(PackedBatch, GivenLabelsAreKeptAndPromptTokensStayIgnored) {
  const VectorTokenSource source({{10, 11, 12, 13}}, {{kIgnoreLabel, kIgnoreLabel, 12, 13}});
  PackOptions o;
  o.capacity = 8;
  const PackPlan plan = plan_packing(std::vector<int64_t>{4}, o);
  const PackedBatch b = build_packed_batch(plan, 0, 1, source);
  EXPECT_EQ(b.labels, (std::vector<int32_t>{kIgnoreLabel, kIgnoreLabel, 12, 13}));
  EXPECT_FLOAT_EQ(b.loss_weight_per_token[2], 0.5f);
}

TEST(PackedBatch, PaddingToAMultipleIsItsOwnSegment) {
  const VectorTokenSource source({{1, 2, 3, 4, 5}});
  PackOptions o;
  o.capacity = 8;
  const PackPlan plan = plan_packing(std::vector<int64_t>{5}, o);
  BatchOptions bo;
  bo.pad_to_multiple = 8;
  bo.pad_token_id = 99;
  const PackedBatch b = build_packed_batch(plan, 0, 1, source, bo);
  EXPECT_EQ(b.cu_seqlens, (std::vector<int32_t>{0, 5, 8}));
  EXPECT_EQ(b.segment_sample, (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(b.position_ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2}));
  EXPECT_EQ(b.input_ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 99, 99, 99}));
  EXPECT_EQ(b.num_samples, 1);
  EXPECT_EQ(b.row_offsets, (std::vector<int64_t>{0, 8}));
}

TEST(PackedBatch, EmptyRangeGivesAnEmptyBatch) {
  const VectorTokenSource source({{1, 2}});
  const PackPlan plan = plan_packing(std::vector<int64_t>{2}, PackOptions{});
  const PackedBatch b = build_packed_batch(plan, 1, 1, source);
  EXPECT_TRUE(b.input_ids.empty());
  EXPECT_EQ(b.cu_seqlens, (std::vector<int32_t>{0}));
  EXPECT_EQ(b.row_offsets, (std::vector<int64_t>{0}));
  EXPECT_EQ(b.max_seqlen, 0);
}

std::string error_of(const PackPlan& plan, const TokenSource& source, BatchOptions bo = {},
                     int64_t first = 0, int64_t last = -1) {
  try {
    build_packed_batch(plan, first, last < 0 ? plan.rows() : last, source, bo);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PackedBatch, ShortOrInconsistentSourcesAreErrorsNamingTheSample) {
  PackOptions o;
  o.capacity = 16;
  const PackPlan plan = plan_packing(std::vector<int64_t>{3, 4, 5}, o);

  const std::string fewer = error_of(plan, VectorTokenSource({{1, 2, 3}, {1, 2, 3, 4}}));
  EXPECT_NE(fewer.find("sample 2"), std::string::npos) << fewer;
  EXPECT_NE(fewer.find("2 samples"), std::string::npos) << fewer;

  const std::string shorter = error_of(plan, VectorTokenSource({{1, 2, 3}, {1, 2}, {1, 2, 3, 4, 5}}));
  EXPECT_NE(shorter.find("sample 1 has 2 tokens"), std::string::npos) << shorter;

  // Longer than planned was cut silently to the planned prefix.
  const std::string longer = error_of(plan, VectorTokenSource({{1, 2, 3}, {1, 2, 3, 4, 9}, {1, 2, 3, 4, 5}}));
  EXPECT_NE(longer.find("sample 1 has 5 tokens but was planned with 4"), std::string::npos) << longer;
  // A truncated or split sample is longer than its piece, which is then as long as the capacity.
  o.capacity = 4;
  o.overlong = OverlongPolicy::truncate;
  EXPECT_EQ(error_of(plan_packing(std::vector<int64_t>{3, 4, 5}, o),
                     VectorTokenSource({{1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}})), "");
  o.overlong = OverlongPolicy::split;
  EXPECT_EQ(error_of(plan_packing(std::vector<int64_t>{3, 4, 9}, o),
                     VectorTokenSource({{1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9}})), "");

  const std::string labels =
      error_of(plan, VectorTokenSource({{1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}}, {{}, {1}, {}}));
  EXPECT_NE(labels.find("sample 1"), std::string::npos) << labels;
  EXPECT_NE(labels.find("1 labels"), std::string::npos) << labels;

  const VectorTokenSource good({{1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}});
  BatchOptions zero;
  zero.pad_to_multiple = 0;
  EXPECT_NE(error_of(plan, good, zero).find("pad_to_multiple"), std::string::npos);
  BatchOptions negative_pad;
  negative_pad.pad_token_id = -1;
  EXPECT_NE(error_of(plan, good, negative_pad).find("pad_token_id must be a token id"), std::string::npos);
  EXPECT_NE(error_of(plan, good, {}, 0, 2).find("row range"), std::string::npos);
  EXPECT_NE(error_of(plan, good, {}, -1, 1).find("row range"), std::string::npos);
  EXPECT_EQ(error_of(plan, good), "");
}

}  // namespace
}  // namespace varpack
