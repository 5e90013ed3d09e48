// The compute cost model behind `varpack stats`, the strategy comparison and the rank balancer: a
// row (one forward + backward call) costs c + the sum over its sequences of alpha * n + beta * n^2
// (c: the fixed cost of a call; the linear part: projections and MLP; the quadratic part:
// attention). With varlen attention a packed row's sequences are its samples, since attention
// never crosses them; a padded row of width W is one sequence of W tokens. The same three numbers
// are fitted on the user's model and GPU by `python -m varpack calibrate` (varpack/calibrate.py),
// saved as JSON and read back by `varpack stats --cost-model` (src/cli/cost_model_file.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "varpack/pack.h"

namespace varpack {

struct CostModel {
  // Defaults: the fit of bench/results/distributed.md, forward + backward of a 542M-parameter
  // Llama-style decoder on an H200: t = 3.4 ms + 7.26 us per token +
  // 351 ps per token^2. The default leaves the 3.4 ms out (overhead 0): that fit was made on one
  // row per step, so it cannot say what a row costs when a step runs several. Units are seconds
  // on that model; only ratios between strategies carry over to others.
  double alpha = 7.26e-6;   // seconds per token
  double beta = 351e-12;    // seconds per token^2
  double overhead = 0;      // c: seconds per row (per forward + backward call), whatever it holds

  // One sequence's share, without the row's overhead.
  double cost(int64_t tokens) const {
    const auto n = static_cast<double>(tokens);
    return alpha * n + beta * n * n;
  }
};

// Throws varpack::Error unless alpha, beta and overhead are finite, >= 0 and not all 0.
void check_cost_model(const CostModel& model);

// Compute of a plan whose rows are padded rectangles (fixed or dynamic padding): the sum over
// rows of overhead + cost(row width).
double padded_compute(const PackPlan& plan, const CostModel& model);

// Compute of a plan run with varlen attention: overhead per row plus the sum over pieces of
// cost(piece length).
double varlen_compute(const PackPlan& plan, const CostModel& model);

struct StrategyCost {
  std::string_view name;      // "fixed", "longest", "dynamic" or "packed"
  std::string_view description;
  int64_t rows = 0;
  int64_t tokens = 0;         // real tokens (after the over-length policy)
  int64_t slots = 0;          // tokens plus padding: the sum of row widths
  double padding_rate = 0;    // (slots - tokens) / slots
  double compute = 0;         // predicted, in the model's units
  double saving_vs_fixed = 0; // 1 - compute / (compute of fixed padding)
};

// The four strategies side by side, all planned by plan_packing with `options` (capacity,
// over-length policy, batch_size; `options.algorithm` is the packer used for "packed"):
//   fixed   every sample its own row padded to the capacity (Algorithm::none)
//   longest every sample its own row padded to the longest sample of the input
//   dynamic batches of batch_size samples, each padded to its longest (Algorithm::dynamic)
//   packed  rows of the chosen packer, run with varlen attention
struct StrategyComparison {
  CostModel model;
  PlanStats packed_stats;
  std::vector<StrategyCost> strategies;  // in the order above
};

StrategyComparison compare_strategies(std::span<const int64_t> lengths, const PackOptions& options,
                                      const CostModel& model = {});

// The fraction of time saved by a throughput gain: 1 - 1 / speedup (1.88x -> 46.8%).
double time_saving_from_speedup(double speedup);

}  // namespace varpack
