// plan_packing: applies the over-length policy, runs the chosen algorithm, fills PlanStats and
// shuffles rows on request; plus the names of algorithms and policies.
#include <array>
#include <string>

#include "algorithms.h"
#include "random.h"
#include "varpack/error.h"
#include "varpack/pack.h"

namespace varpack {
namespace {

constexpr std::array<std::pair<Algorithm, std::string_view>, 5> kAlgorithmNames{{
    {Algorithm::ffd, "ffd"},
    {Algorithm::bfd, "bfd"},
    {Algorithm::histogram, "histogram"},
    {Algorithm::none, "none"},
    {Algorithm::dynamic, "dynamic"},
}};

constexpr std::array<std::pair<OverlongPolicy, std::string_view>, 4> kPolicyNames{{
    {OverlongPolicy::error, "error"},
    {OverlongPolicy::truncate, "truncate"},
    {OverlongPolicy::split, "split"},
    {OverlongPolicy::context_parallel, "cp"},
}};

template <typename Names>
std::vector<std::string> names_of(const Names& names) {
  std::vector<std::string> out;
  for (const auto& entry : names) out.emplace_back(entry.second);
  return out;
}

template <typename Names>
std::string joined(const Names& names) {
  std::string out;
  for (const auto& [value, name] : names) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

void fill_stats(PackPlan& plan, const detail::PieceTotals& totals, int64_t capacity) {
  PlanStats& s = plan.stats;
  s.samples = totals.samples;
  s.tokens = totals.tokens;
  s.rows = plan.rows();
  s.capacity = capacity;
  s.lower_bound_rows = (totals.tokens + capacity - 1) / capacity;
  int64_t width = 0;
  for (const int64_t w : plan.row_width) width += w;
  s.padded_tokens = width - totals.tokens;
  s.padding_rate_packed = width > 0 ? static_cast<double>(s.padded_tokens) / width : 0.0;
  const int64_t unpacked_width = totals.pieces * capacity;
  s.padding_rate_unpacked =
      unpacked_width > 0 ? 1.0 - static_cast<double>(totals.tokens) / unpacked_width : 0.0;
  s.truncated_tokens = totals.truncated_tokens;
  s.skipped_samples = totals.skipped_samples;
  s.split_samples = totals.split_samples;
  s.context_parallel_samples = totals.context_parallel_samples;
}

// Fisher-Yates with the project's own generator, so a seed gives the same order everywhere.
void shuffle_rows(PackPlan& plan, uint64_t seed) {
  const auto rows = static_cast<size_t>(plan.rows());
  std::vector<size_t> order(rows);
  for (size_t r = 0; r < rows; ++r) order[r] = r;
  detail::SplitMix64 rng(seed);
  for (size_t r = rows; r > 1; --r) std::swap(order[r - 1], order[rng.below(r)]);

  PackPlan shuffled;
  shuffled.pieces.reserve(plan.pieces.size());
  shuffled.row_begin.reserve(rows + 1);
  shuffled.row_width.reserve(rows);
  shuffled.row_begin.push_back(0);
  for (const size_t r : order) {
    const auto row = plan.row(static_cast<int64_t>(r));
    shuffled.pieces.insert(shuffled.pieces.end(), row.begin(), row.end());
    shuffled.row_begin.push_back(static_cast<int64_t>(shuffled.pieces.size()));
    shuffled.row_width.push_back(plan.row_width[r]);
  }
  shuffled.stats = plan.stats;
  plan = std::move(shuffled);
}

}  // namespace

void plan_packing_into(std::span<const int64_t> lengths, const PackOptions& options,
                       PackPlan& plan) {
  if (options.algorithm == Algorithm::dynamic && options.batch_size < 1)
    throw Error("batch_size must be >= 1 for the dynamic algorithm (got " +
                std::to_string(options.batch_size) + ")");
  const bool histogram = options.algorithm == Algorithm::histogram;
  if (histogram && options.capacity > detail::kDenseCapacityLimit)
    throw Error("the histogram packer keeps one counter per length and supports capacities up to " +
                std::to_string(detail::kDenseCapacityLimit) + " (got " +
                std::to_string(options.capacity) +
                "); use the 'bfd' algorithm for larger capacities");
  // The packers that order pieces by length get the lengths counted in the validation pass.
  const bool by_length = options.algorithm == Algorithm::ffd ||
                         options.algorithm == Algorithm::bfd || histogram;
  std::vector<int64_t> length_counts;
  const detail::PieceTotals totals = detail::check_and_count(
      lengths, options,
      by_length && options.capacity <= detail::kDenseCapacityLimit ? &length_counts : nullptr);
  switch (options.algorithm) {
    case Algorithm::ffd:
      detail::pack_first_fit_decreasing(
          lengths, options, totals,
          detail::pieces_by_decreasing_length(lengths, options, totals, length_counts), plan);
      break;
    case Algorithm::bfd:
      detail::pack_best_fit_decreasing(
          lengths, options, totals,
          detail::pieces_by_decreasing_length(lengths, options, totals, length_counts), plan);
      break;
    case Algorithm::histogram:
      detail::pack_histogram(lengths, options, totals, length_counts, plan);
      break;
    case Algorithm::none:
      detail::one_piece_per_row(lengths, options, totals, plan);
      break;
    case Algorithm::dynamic:
      detail::dynamic_batches(lengths, options, totals, plan);
      break;
  }
  plan.stats = {};
  fill_stats(plan, totals, options.capacity);
  if (options.shuffle_rows) shuffle_rows(plan, options.seed);
}

PackPlan plan_packing(std::span<const int64_t> lengths, const PackOptions& options) {
  PackPlan plan;
  plan_packing_into(lengths, options, plan);
  return plan;
}

Algorithm parse_algorithm(std::string_view name) {
  for (const auto& [value, known] : kAlgorithmNames)
    if (name == known) return value;
  throw Error("unknown packing algorithm '" + std::string(name) + "'; use one of " +
              joined(kAlgorithmNames));
}

OverlongPolicy parse_overlong_policy(std::string_view name) {
  for (const auto& [value, known] : kPolicyNames)
    if (name == known) return value;
  throw Error("unknown over-length policy '" + std::string(name) + "'; use one of " +
              joined(kPolicyNames));
}

std::vector<std::string> algorithm_names() { return names_of(kAlgorithmNames); }
std::vector<std::string> overlong_policy_names() { return names_of(kPolicyNames); }

std::string_view to_string(Algorithm algorithm) {
  for (const auto& [value, name] : kAlgorithmNames)
    if (value == algorithm) return name;
  return "unknown";
}

std::string_view to_string(OverlongPolicy policy) {
  for (const auto& [value, name] : kPolicyNames)
    if (value == policy) return name;
  return "unknown";
}

}  // namespace varpack
