// The cost model's compute estimates and the four-strategy comparison (see cost_model.h).
#include "varpack/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "varpack/error.h"

namespace varpack {

void check_cost_model(const CostModel& model) {
  const auto ok = [](double x) { return x >= 0 && std::isfinite(x); };
  if (!ok(model.alpha) || !ok(model.beta) || !ok(model.overhead) ||
      model.alpha + model.beta + model.overhead <= 0)
    throw Error("the cost model needs finite alpha >= 0, beta >= 0 and overhead >= 0, not all 0 "
                "(got alpha " + std::to_string(model.alpha) + ", beta " + std::to_string(model.beta) +
                ", overhead " + std::to_string(model.overhead) + ")");
}

double padded_compute(const PackPlan& plan, const CostModel& model) {
  double total = 0;
  for (const int64_t width : plan.row_width) total += model.overhead + model.cost(width);
  return total;
}

double varlen_compute(const PackPlan& plan, const CostModel& model) {
  double total = model.overhead * static_cast<double>(plan.rows());
  for (const Piece& p : plan.pieces) total += model.cost(p.length);
  return total;
}

namespace {

StrategyCost strategy(std::string_view name, std::string_view description, const PackPlan& plan,
                      int64_t slots, double compute) {
  StrategyCost s;
  s.name = name;
  s.description = description;
  s.rows = plan.rows();
  s.tokens = plan.stats.tokens;
  s.slots = slots;
  s.padding_rate = slots > 0 ? static_cast<double>(slots - s.tokens) / static_cast<double>(slots) : 0;
  s.compute = compute;
  return s;
}

int64_t width_sum(const PackPlan& plan) {
  int64_t total = 0;
  for (const int64_t w : plan.row_width) total += w;
  return total;
}

}  // namespace

StrategyComparison compare_strategies(std::span<const int64_t> lengths, const PackOptions& options,
                                      const CostModel& model) {
  check_cost_model(model);
  if (options.algorithm == Algorithm::none || options.algorithm == Algorithm::dynamic)
    throw Error("compare_strategies packs with options.algorithm, which must be a packer (ffd, bfd "
                "or histogram), not '" + std::string(to_string(options.algorithm)) + "'");
  StrategyComparison out;
  out.model = model;

  PackOptions o = options;
  o.shuffle_rows = false;
  o.algorithm = Algorithm::none;
  PackPlan fixed = plan_packing(lengths, o);

  o.algorithm = Algorithm::dynamic;
  const PackPlan dynamic = plan_packing(lengths, o);

  o.algorithm = options.algorithm;
  const PackPlan packed = plan_packing(lengths, o);
  out.packed_stats = packed.stats;

  out.strategies.push_back(strategy("fixed", "every sample padded to the capacity", fixed,
                                    width_sum(fixed), padded_compute(fixed, model)));

  // Padding to the longest sample: the fixed plan's rows with the longest piece as width.
  int64_t longest = 0;
  for (const Piece& p : fixed.pieces) longest = std::max(longest, p.length);
  std::fill(fixed.row_width.begin(), fixed.row_width.end(), longest);
  out.strategies.push_back(strategy("longest", "every sample padded to the longest sample", fixed,
                                    width_sum(fixed), padded_compute(fixed, model)));

  out.strategies.push_back(strategy("dynamic", "batches padded to their own longest sample",
                                    dynamic, width_sum(dynamic), padded_compute(dynamic, model)));
  out.strategies.push_back(strategy("packed", "packed rows, varlen attention", packed,
                                    width_sum(packed), varlen_compute(packed, model)));

  const double base = out.strategies.front().compute;
  for (StrategyCost& s : out.strategies) s.saving_vs_fixed = base > 0 ? 1.0 - s.compute / base : 0;
  return out;
}

double time_saving_from_speedup(double speedup) {
  if (!(speedup > 0)) throw Error("a speedup must be > 0 (got " + std::to_string(speedup) + ")");
  return 1.0 - 1.0 / speedup;
}

}  // namespace varpack
