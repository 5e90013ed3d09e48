// `varpack stats`: the length histogram of an input and, side by side, the padding rate and the
// predicted compute of fixed padding to L, padding to the longest sample, dynamic padding and
// packing, under the cost model alpha*n + beta*n^2 per sample (cost_model.h).
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

#include "commands.h"
#include "cost_model_file.h"
#include "input.h"
#include "report.h"
#include "varpack/cost_model.h"
#include "varpack/error.h"
#include "varpack/pack.h"

namespace varpack::cli {
namespace {

constexpr int64_t kHistogramBins = 16;
constexpr int kBarWidth = 40;

// Bin edges for sorted lengths: about kHistogramBins bins of a round width (1, 2 or 5 times a
// power of ten), or, when the longest is far beyond the median (a long tail would fill one
// linear bin), bins doubling in width.
std::vector<int64_t> histogram_edges(const std::vector<int64_t>& sorted) {
  const int64_t max_length = sorted.back();
  const int64_t median = std::max<int64_t>(sorted[sorted.size() / 2], 1);
  std::vector<int64_t> edges{0};
  if (max_length > 16 * median) {
    int64_t edge = 1;
    while (edge * 2 <= std::max<int64_t>(sorted.front(), 1)) edge *= 2;
    for (; edges.back() <= max_length; edge *= 2) edges.push_back(edge);
    return edges;
  }
  const int64_t wanted = std::max<int64_t>(1, (max_length + kHistogramBins) / kHistogramBins);
  int64_t width = 1;
  for (int64_t decade = 1; width < wanted; decade *= 10) {
    for (const int64_t step : {1, 2, 5}) {
      width = step * decade;
      if (width >= wanted) break;
    }
  }
  while (edges.back() <= max_length) edges.push_back(edges.back() + width);
  return edges;
}

void print_histogram(const std::vector<int64_t>& sorted) {
  const std::vector<int64_t> edges = histogram_edges(sorted);
  std::vector<int64_t> counts(edges.size() - 1, 0);
  for (size_t b = 0; b < counts.size(); ++b) {
    counts[b] = std::lower_bound(sorted.begin(), sorted.end(), edges[b + 1]) -
                std::lower_bound(sorted.begin(), sorted.end(), edges[b]);
  }
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  std::printf("length histogram (lengths in [from, to)):\n");
  for (size_t b = 0; b < counts.size(); ++b) {
    const auto bar = static_cast<size_t>(counts[b] * kBarWidth / std::max<int64_t>(most, 1));
    std::printf("  [%7lld, %7lld)  %-*s %lld\n", static_cast<long long>(edges[b]),
                static_cast<long long>(edges[b + 1]), kBarWidth, std::string(bar, '#').c_str(),
                static_cast<long long>(counts[b]));
  }
}

}  // namespace

void print_strategy_table(const StrategyComparison& comparison) {
  const CostModel& model = comparison.model;
  std::printf("%-10s %10s %12s %10s %18s %16s\n", "strategy", "rows", "slots", "padding",
              "compute (model s)", "saving vs fixed");
  for (const StrategyCost& s : comparison.strategies) {
    std::printf("%-10s %10lld %12lld %9.2f%% %18.4g %15.2f%%   %s\n",
                std::string(s.name).c_str(), static_cast<long long>(s.rows),
                static_cast<long long>(s.slots), 100 * s.padding_rate, s.compute,
                100 * s.saving_vs_fixed, std::string(s.description).c_str());
  }
  std::printf("\nslots: tokens plus padding. cost model: a sample (or padded row) of n tokens "
              "costs alpha*n + beta*n^2 seconds with alpha %.4g, beta %.4g, plus %.4g per row "
              "(--alpha, --beta, --cost-model); packed rows use varlen attention, so each sample "
              "pays its own n^2.\n",
              model.alpha, model.beta, model.overhead);
}

namespace {

Json histogram_json(const std::vector<int64_t>& sorted) {
  const std::vector<int64_t> edges = histogram_edges(sorted);
  Json bins = Json::array();
  for (size_t b = 0; b + 1 < edges.size(); ++b) {
    const auto count = std::lower_bound(sorted.begin(), sorted.end(), edges[b + 1]) -
                       std::lower_bound(sorted.begin(), sorted.end(), edges[b]);
    bins.push_back({{"from", edges[b]}, {"to", edges[b + 1]}, {"count", count}});
  }
  return bins;
}

void print_json(const StatsArgs& args, const std::vector<int64_t>& sorted,
                const StrategyComparison& comparison, int64_t over, int64_t empty) {
  Json json = report_header(args.argv);
  json["input"] = args.input;
  json["input_bytes"] = input_sizes(args.input);
  json["capacity"] = args.capacity;
  json["overlong"] = args.overlong;
  json["samples"] = sorted.size();
  json["tokens"] = std::accumulate(sorted.begin(), sorted.end(), int64_t{0});
  json["zero_length_samples"] = empty;
  json["samples_over_capacity"] = over;
  json["lengths"] = length_summary(sorted);
  json["histogram"] = histogram_json(sorted);
  json["cost_model"] = {{"alpha", comparison.model.alpha},
                        {"beta", comparison.model.beta},
                        {"overhead", comparison.model.overhead}};
  Json strategies = Json::array();
  for (const StrategyCost& s : comparison.strategies) {
    strategies.push_back({{"name", s.name},
                          {"rows", s.rows},
                          {"slots", s.slots},
                          {"padding_rate", s.padding_rate},
                          {"compute", s.compute},
                          {"saving_vs_fixed", s.saving_vs_fixed}});
  }
  json["strategies"] = std::move(strategies);
  std::fputs(to_text(json).c_str(), stdout);
}

}  // namespace

int run_stats(const StatsArgs& args) {
  if (args.cost_model.empty() && args.alpha + args.beta <= 0) {
    throw UsageError("--alpha and --beta must not both be 0 (the cost of a sample of n tokens is "
                     "alpha*n + beta*n^2)");
  }
  PackOptions options;
  options.capacity = args.capacity;
  options.algorithm = parse_algorithm(args.algorithm);
  options.overlong = parse_overlong_policy(args.overlong);
  options.batch_size = args.batch_size;
  CostModel model;
  model.alpha = args.alpha;
  model.beta = args.beta;
  if (!args.cost_model.empty()) model = read_cost_model(args.cost_model);

  const std::vector<int64_t> lengths =
      load_lengths(args.input, options.overlong == OverlongPolicy::error ? options.capacity : 0,
                   ImageOptions{options.capacity, -1}, args.column);
  StrategyComparison comparison;
  try {
    comparison = compare_strategies(lengths, options, model);
  } catch (const Error& e) {
    throw Error(args.input + ": " + e.what());  // the planner names the sample; add the file
  }

  std::vector<int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  const int64_t total = std::accumulate(sorted.begin(), sorted.end(), int64_t{0});
  const auto over = std::count_if(sorted.begin(), sorted.end(),
                                  [&](int64_t n) { return n > args.capacity; });
  const auto empty = std::count(sorted.begin(), sorted.end(), int64_t{0});
  if (args.json) {
    print_json(args, sorted, comparison, over, empty);
    return 0;
  }
  std::printf("%s: %zu samples, %lld tokens; length min %lld, median %lld, mean %.1f, max %lld; "
              "%lld zero-length, %lld over the capacity %lld%s\n\n",
              args.input.c_str(), sorted.size(), static_cast<long long>(total),
              static_cast<long long>(sorted.front()),
              static_cast<long long>(sorted[sorted.size() / 2]),
              static_cast<double>(total) / static_cast<double>(sorted.size()),
              static_cast<long long>(sorted.back()), static_cast<long long>(empty),
              static_cast<long long>(over), static_cast<long long>(args.capacity),
              over > 0 ? (" (packed line: --overlong " + args.overlong + ")").c_str() : "");
  print_histogram(sorted);

  std::printf("\n");
  print_strategy_table(comparison);
  return 0;
}

}  // namespace varpack::cli
