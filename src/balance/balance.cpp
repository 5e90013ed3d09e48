// Rows -> steps -> ranks (see balance.h): validation, grouping rows into steps (in their order, or
// by cost within windows of steps), one assignment per step (step_assignment.h), the result's
// layout and its statistics.
#include "varpack/balance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "step_assignment.h"
#include "varpack/error.h"

namespace varpack {

namespace {

void check_options(const BalanceOptions& o) {
  if (o.ranks < 1)
    throw Error("balance: ranks must be >= 1 (the data-parallel world size), got " + std::to_string(o.ranks));
  if (o.rows_per_rank < 1)
    throw Error("balance: rows_per_rank must be >= 1 (rows each rank runs per step), got " +
                std::to_string(o.rows_per_rank));
  if (o.window_steps < 1)
    throw Error("balance: window_steps must be >= 1 (1 keeps the rows' order), got " +
                std::to_string(o.window_steps));
  if (o.ranks > std::numeric_limits<int64_t>::max() / o.rows_per_rank ||
      o.ranks * o.rows_per_rank > std::numeric_limits<int64_t>::max() / o.window_steps)
    throw Error("balance: ranks (" + std::to_string(o.ranks) + ") x rows_per_rank (" +
                std::to_string(o.rows_per_rank) + ") x window_steps (" + std::to_string(o.window_steps) +
                ") overflows 64 bits; use smaller values");
}

// The rows in step order: the given order, each window of `window_steps` full steps sorted by
// cost (descending, ties by row index) when it is > 1.
std::vector<int64_t> step_order(std::span<const double> costs, int64_t full_rows, int64_t assigned,
                                int64_t window_rows, bool windows) {
  std::vector<int64_t> order(static_cast<size_t>(assigned));
  for (int64_t i = 0; i < assigned; ++i) order[i] = i;
  if (!windows) return order;
  for (int64_t first = 0; first < full_rows; first += window_rows) {
    const auto begin = order.begin() + first;
    std::sort(begin, begin + std::min(window_rows, full_rows - first), [&](int64_t a, int64_t b) {
      return costs[a] > costs[b] || (costs[a] == costs[b] && a < b);
    });
  }
  return order;
}

void check_costs(std::span<const double> costs) {
  for (size_t i = 0; i < costs.size(); ++i) {
    if (!(costs[i] >= 0) || !std::isfinite(costs[i]))
      throw Error("balance: the cost of row " + std::to_string(i) + " is " + std::to_string(costs[i]) +
                  "; row costs must be finite and >= 0");
  }
}

double max_of(std::span<const double> v) { return *std::max_element(v.begin(), v.end()); }

// Buffers of assign_lpt_or_round_robin, reused from step to step.
struct LptBuffers {
  balance_detail::StepScratch scratch;
  std::vector<int64_t> fallback;
  std::vector<double> load, fallback_load;
};

// The greedy's assignment of one step into rank_of, or round robin's where that has the lower
// largest rank cost: the greedy has no guarantee against a lucky input order, and keeping round
// robin then means balancing never makes a step slower than not balancing. Returns whether it did.
bool assign_lpt_or_round_robin(std::span<const double> c, std::span<const int64_t> caps, LptBuffers& b,
                               std::vector<int64_t>& rank_of) {
  const size_t ranks = caps.size();
  b.load.resize(ranks);
  b.fallback_load.resize(ranks);
  b.fallback.resize(c.size());
  balance_detail::assign_lpt(c, caps, b.scratch, rank_of);
  balance_detail::rank_loads(c, rank_of, b.load);
  balance_detail::assign_round_robin(static_cast<int64_t>(ranks), b.fallback);
  balance_detail::rank_loads(c, b.fallback, b.fallback_load);
  if (!(max_of(b.fallback_load) < max_of(b.load))) return false;
  rank_of.swap(b.fallback);
  return true;
}

}  // namespace

std::vector<double> row_costs(const PackPlan& plan, const CostModel& model) {
  // alpha = beta = 0 is allowed here (only the overhead, or nothing, to balance), unlike in
  // check_cost_model, which guards a strategy comparison against a model that predicts nothing.
  const auto ok = [](double x) { return x >= 0 && std::isfinite(x); };
  if (!ok(model.alpha) || !ok(model.beta) || !ok(model.overhead))
    throw Error("balance: the cost model needs finite alpha, beta and overhead >= 0 (got alpha " +
                std::to_string(model.alpha) + ", beta " + std::to_string(model.beta) + ", overhead " +
                std::to_string(model.overhead) + ")");
  const int64_t rows = plan.rows();
  if (static_cast<int64_t>(plan.row_begin.size()) != rows + 1 ||
      plan.row_begin.back() != static_cast<int64_t>(plan.pieces.size()))
    throw Error("balance: the plan is inconsistent (row_begin has " + std::to_string(plan.row_begin.size()) +
                " entries for " + std::to_string(rows) + " rows and " + std::to_string(plan.pieces.size()) +
                " pieces); pass a plan made by plan_packing");
  std::vector<double> costs(static_cast<size_t>(rows), model.overhead);
  for (int64_t r = 0; r < rows; ++r)
    for (const Piece& p : plan.row(r)) costs[r] += model.cost(p.length);
  return costs;
}

RankAssignment balance_rows(std::span<const double> costs, const BalanceOptions& options) {
  check_options(options);
  check_costs(costs);
  const int64_t ranks = options.ranks;
  const int64_t step_rows = ranks * options.rows_per_rank;
  const auto rows = static_cast<int64_t>(costs.size());
  const int64_t full_steps = rows / step_rows;
  const int64_t left = rows - full_steps * step_rows;
  const bool partial = left > 0 && !options.drop_last;
  const int64_t steps = full_steps + (partial ? 1 : 0);
  const int64_t assigned = full_steps * step_rows + (partial ? left : 0);

  RankAssignment out;
  out.ranks = ranks;
  out.rows_per_rank = options.rows_per_rank;
  out.rows.resize(static_cast<size_t>(assigned));
  out.rank_begin.assign(static_cast<size_t>(steps * ranks + 1), 0);
  out.rank_cost.resize(static_cast<size_t>(steps * ranks));
  out.step_imbalance.resize(static_cast<size_t>(steps));
  BalanceStats& st = out.stats;
  st.rows = rows;
  st.assigned_rows = assigned;
  st.dropped_rows = rows - assigned;
  st.steps = steps;
  st.partial_step_rows = partial ? left : 0;

  const std::vector<int64_t> order =
      step_order(costs, full_steps * step_rows, assigned, step_rows * options.window_steps, options.window_steps > 1);
  LptBuffers lpt;
  std::vector<int64_t> caps(static_cast<size_t>(ranks));
  std::vector<int64_t> rank_of, next(static_cast<size_t>(ranks));
  std::vector<double> c, loads(static_cast<size_t>(ranks));
  double imbalance_sum = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t first = s * step_rows;
    const int64_t n = std::min(step_rows, rows - first);
    c.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) c[i] = costs[order[first + i]];
    // The counts round robin gives, for the partial step too: floor(n / ranks), +1 for r < n % ranks.
    for (int64_t r = 0; r < ranks; ++r) caps[r] = n / ranks + (r < n % ranks ? 1 : 0);
    rank_of.resize(static_cast<size_t>(n));
    if (options.method == BalanceMethod::lpt) {
      st.round_robin_steps += assign_lpt_or_round_robin(c, caps, lpt, rank_of);
    } else {
      balance_detail::assign_round_robin(ranks, rank_of);
    }

    // Each rank's rows in increasing index (bucketed, then sorted: a window's order is by cost),
    // and its cost summed in that order, so it can be reproduced from the result bit for bit.
    const int64_t base = s * ranks;
    for (int64_t r = 0; r < ranks; ++r) {
      out.rank_begin[base + r + 1] = out.rank_begin[base + r] + caps[r];
      next[r] = out.rank_begin[base + r];
    }
    for (int64_t i = 0; i < n; ++i) out.rows[next[rank_of[i]]++] = order[first + i];
    for (int64_t r = 0; r < ranks; ++r) {
      const auto mine = out.rows.begin() + out.rank_begin[base + r];
      std::sort(mine, mine + caps[r]);
      loads[r] = 0;
      for (int64_t i = 0; i < caps[r]; ++i) loads[r] += costs[mine[i]];
      out.rank_cost[base + r] = loads[r];
    }

    double total = 0;
    for (const double l : loads) total += l;
    const double mean = total / static_cast<double>(ranks);
    const double worst = max_of(loads);
    const double imbalance = mean > 0 ? worst / mean : 1.0;
    out.step_imbalance[s] = imbalance;
    imbalance_sum += imbalance;
    st.total_cost += total;
    st.step_time += worst;
    st.ideal_step_time += mean;
    st.max_imbalance = std::max(st.max_imbalance, imbalance);
  }
  if (steps > 0) st.mean_imbalance = imbalance_sum / static_cast<double>(steps);
  return out;
}

RankAssignment balance_rows(const PackPlan& plan, const CostModel& model, const BalanceOptions& options) {
  check_options(options);  // before costing a large plan for nothing
  const std::vector<double> costs = row_costs(plan, model);
  return balance_rows(costs, options);
}

BalanceMethod parse_balance_method(std::string_view name) {
  if (name == "lpt") return BalanceMethod::lpt;
  if (name == "round_robin") return BalanceMethod::round_robin;
  throw Error("balance: unknown method '" + std::string(name) + "'; use \"lpt\" or \"round_robin\"");
}

std::string_view to_string(BalanceMethod method) {
  switch (method) {
    case BalanceMethod::lpt: return "lpt";
    case BalanceMethod::round_robin: return "round_robin";
  }
  return "unknown";
}

}  // namespace varpack
