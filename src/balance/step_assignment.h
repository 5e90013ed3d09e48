// Assignment of one step's rows to ranks (internal to src/balance): the longest-processing-time
// greedy with a fixed number of rows per rank, its pairwise-swap refinement, and the round-robin
// baseline. Items are the step's rows, numbered 0..n-1 in input order.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace varpack::balance_detail {

// Buffers reused from step to step, so balancing a million rows allocates once.
struct StepScratch {
  std::vector<int64_t> order;                         // items by cost, descending
  std::vector<std::pair<double, int64_t>> heap;       // (load, rank) of ranks with room
  std::vector<int64_t> slot_begin;                    // ranks + 1: a rank's slots in `members`
  std::vector<int64_t> members;                       // items of each rank
  std::vector<int64_t> filled;                        // items given to each rank so far
  std::vector<double> load;                           // cost of each rank so far
};

// Rank r may take caps[r] items; the caps sum to costs.size(). Writes each item's rank to rank_of.
// Greedy: items by cost descending (ties: lower index first), each to the least-loaded rank that
// still has room (ties: lower rank). Then, while it helps, swaps one item of the most loaded rank
// with one of the least loaded so that the larger of their two loads drops the most.
void assign_lpt(std::span<const double> costs, std::span<const int64_t> caps, StepScratch& scratch,
                std::span<int64_t> rank_of);

// Item i to rank i % ranks: gives rank r exactly the caps balance.cpp uses (floor(n / ranks), plus
// one for r < n % ranks).
void assign_round_robin(int64_t ranks, std::span<int64_t> rank_of);

// Each rank's summed cost, adding its items in increasing index order (the order the result
// lists them in, so the reported cost is reproducible from it bit for bit).
void rank_loads(std::span<const double> costs, std::span<const int64_t> rank_of, std::span<double> loads);

}  // namespace varpack::balance_detail
