// Balancing packed rows over data-parallel ranks by cost. Every rank runs the same number of rows
// per step and the step waits for the slowest rank; rows all hold about `capacity` tokens, but a row
// of one long sample costs more than a row of many short ones (the attention term of the cost
// model). per-row costs (or a PackPlan + CostModel) x ranks x rows per rank -> for each step, one
// list of rows per rank with near-equal cost. No randomness: the order of the rows (the plan's,
// shuffled by its seed; plan with a seed derived from (seed, epoch) for a new order per epoch)
// decides the steps, so the same input gives the same assignment on every rank and platform.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "varpack/cost_model.h"
#include "varpack/pack.h"

namespace varpack {

enum class BalanceMethod {
  lpt,          // longest-processing-time greedy with k rows per rank, pairwise swaps between the
                // most and the least loaded rank, and never worse than round_robin on any step
  round_robin,  // the baseline: row i of a step goes to rank i % ranks (what a DistributedSampler
                // over the rows does)
};

struct BalanceOptions {
  int64_t ranks = 1;          // data-parallel ranks (world size)
  int64_t rows_per_rank = 1;  // rows each rank runs per step (its micro-batch, in rows)
  // Rows are grouped into steps of ranks * rows_per_rank in their given order. The rows left over
  // (fewer than a step) are dropped when drop_last is true, like PyTorch's DistributedSampler;
  // otherwise they form a last, partial step where rank r gets floor(m / ranks) rows plus one for
  // r < m % ranks (m rows left), so some ranks get one row fewer, or none when m < ranks.
  bool drop_last = true;
  BalanceMethod method = BalanceMethod::lpt;
  // Full steps whose rows are pooled before balancing. With W > 1, the rows of each run of W full
  // steps are sorted by cost (descending, ties by row index) and cut into steps in that order, so
  // a step holds rows of similar cost and runs cheaper: this is what helps when rows_per_rank is 1,
  // where no assignment within a step can change its slowest row. The steps of a window then run
  // from the most to the least costly. 1 keeps the rows' order (the default).
  int64_t window_steps = 1;
};

struct BalanceStats {
  int64_t rows = 0;               // rows given
  int64_t assigned_rows = 0;      // rows placed in some step
  int64_t dropped_rows = 0;       // the left-over rows drop_last removed
  int64_t steps = 0;              // steps, a partial last one included
  int64_t partial_step_rows = 0;  // rows of the partial last step (0: there is none)
  int64_t round_robin_steps = 0;  // lpt steps where round robin was strictly better and was kept
  double total_cost = 0;          // cost of the assigned rows
  double step_time = 0;           // sum over steps of the largest rank cost: what the ranks wait for
  double ideal_step_time = 0;     // sum over steps of the mean rank cost (total_cost / ranks)
  double mean_imbalance = 1;      // mean over steps of max / mean rank cost (1 = perfectly even)
  double max_imbalance = 1;       // the worst step's max / mean rank cost
};

// The rows of step s for rank r are rows[rank_begin[s * ranks + r] .. rank_begin[s * ranks + r + 1]),
// in increasing row index. Step s holds rows s * ranks * rows_per_rank onwards in the given order,
// or, with window_steps W > 1, rows of its window of W steps.
struct RankAssignment {
  int64_t ranks = 0;
  int64_t rows_per_rank = 0;
  std::vector<int64_t> rows;            // row indices into the costs / the plan's rows
  std::vector<int64_t> rank_begin;      // steps * ranks + 1 entries, rank_begin[0] == 0
  std::vector<double> rank_cost;        // steps * ranks: the summed cost of each rank's rows
  std::vector<double> step_imbalance;   // steps: max / mean rank cost (1 when the step costs 0)
  BalanceStats stats;

  int64_t steps() const { return static_cast<int64_t>(step_imbalance.size()); }
  std::span<const int64_t> rows_of(int64_t step, int64_t rank) const {
    const int64_t i = step * ranks + rank;
    return {rows.data() + rank_begin[i], static_cast<size_t>(rank_begin[i + 1] - rank_begin[i])};
  }
};

// The cost of each row of `plan` under varlen attention: model.overhead (c, once per row) plus the
// sum of model.cost(piece length) over its pieces. Throws varpack::Error for a negative or
// non-finite alpha, beta or overhead.
std::vector<double> row_costs(const PackPlan& plan, const CostModel& model);

// Assigns rows with the given costs to ranks, step by step (see BalanceOptions). Throws
// varpack::Error naming the parameter for ranks < 1, rows_per_rank < 1, window_steps < 1, a
// ranks * rows_per_rank (* window_steps) that overflows, or a negative or non-finite cost (naming
// the row).
RankAssignment balance_rows(std::span<const double> costs, const BalanceOptions& options);

// The same on the rows of a plan, costed with row_costs(plan, model).
RankAssignment balance_rows(const PackPlan& plan, const CostModel& model, const BalanceOptions& options);

// The rows `rows` of `plan` (indices, in the order given) as a plan of their own, so that a rank
// can build one batch of its rows of a step: build_packed_batch(select_rows(plan, a.rows_of(s, r)),
// 0, k, ...). Pieces keep their sample indices into the planned input. Statistics of the whole
// input (samples, truncated_tokens, skipped_samples, split_samples) are copied; tokens, rows,
// lower_bound_rows, padded_tokens and the padding rates are those of the selected rows. Throws
// varpack::Error naming a row index out of range.
PackPlan select_rows(const PackPlan& plan, std::span<const int64_t> rows);

// Names used by Python ("lpt", "round_robin"); the parser throws varpack::Error listing them.
BalanceMethod parse_balance_method(std::string_view name);
std::string_view to_string(BalanceMethod method);

}  // namespace varpack
