// One step's assignment of rows to ranks: LPT greedy with per-rank caps, swap refinement, round
// robin (see step_assignment.h).
#include "step_assignment.h"

#include <algorithm>
#include <functional>

namespace varpack::balance_detail {

namespace {

// Best single swap between ranks hi and lo (load[hi] > load[lo]): moves d = c[a] - c[b] from hi
// to lo, which lowers the larger of the two loads by min(d, gap - d) when 0 < d < gap. Returns the
// member slots (in `members`) of the best pair, or {-1, -1} when no swap lowers it.
std::pair<int64_t, int64_t> best_swap(std::span<const double> costs, const StepScratch& s, int64_t hi,
                                      int64_t lo) {
  const double gap = s.load[hi] - s.load[lo];
  double best_gain = 0;
  std::pair<int64_t, int64_t> best{-1, -1};
  for (int64_t i = s.slot_begin[hi]; i < s.slot_begin[hi + 1]; ++i) {
    for (int64_t j = s.slot_begin[lo]; j < s.slot_begin[lo + 1]; ++j) {
      const double d = costs[s.members[i]] - costs[s.members[j]];
      if (!(d > 0 && d < gap)) continue;
      const double gain = std::min(d, gap - d);
      if (gain > best_gain) {
        best_gain = gain;
        best = {i, j};
      }
    }
  }
  // A gain lost in rounding (load[hi] - d == load[hi]) would make the loop below swap forever.
  if (best.first >= 0 && !(s.load[hi] - best_gain < s.load[hi])) return {-1, -1};
  return best;
}

// Swaps between the most and the least loaded rank with slots (lowest index among equals) while a swap
// lowers the larger of the two. Each swap lowers the sorted vector of loads lexicographically, so
// this ends; the cap on rounds bounds the time on adversarial inputs.
void refine_by_swaps(std::span<const double> costs, StepScratch& s, int64_t ranks) {
  const int64_t max_rounds = static_cast<int64_t>(costs.size());
  for (int64_t round = 0; round < max_rounds; ++round) {
    // Ranks without slots (a partial step with fewer rows than ranks) have nothing to swap.
    int64_t hi = -1, lo = -1;
    for (int64_t r = 0; r < ranks; ++r) {
      if (s.slot_begin[r + 1] == s.slot_begin[r]) continue;
      if (hi < 0 || s.load[r] > s.load[hi]) hi = r;
      if (lo < 0 || s.load[r] < s.load[lo]) lo = r;
    }
    if (hi < 0 || !(s.load[hi] > s.load[lo])) return;
    const auto [i, j] = best_swap(costs, s, hi, lo);
    if (i < 0) return;
    const double d = costs[s.members[i]] - costs[s.members[j]];
    std::swap(s.members[i], s.members[j]);
    s.load[hi] -= d;
    s.load[lo] += d;
  }
}

}  // namespace

void assign_lpt(std::span<const double> costs, std::span<const int64_t> caps, StepScratch& s,
                std::span<int64_t> rank_of) {
  const auto n = static_cast<int64_t>(costs.size());
  const auto ranks = static_cast<int64_t>(caps.size());
  s.order.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) s.order[i] = i;
  std::sort(s.order.begin(), s.order.end(), [&](int64_t a, int64_t b) {
    return costs[a] > costs[b] || (costs[a] == costs[b] && a < b);
  });

  s.slot_begin.assign(static_cast<size_t>(ranks) + 1, 0);
  for (int64_t r = 0; r < ranks; ++r) s.slot_begin[r + 1] = s.slot_begin[r] + caps[r];
  s.members.resize(static_cast<size_t>(n));
  s.filled.assign(static_cast<size_t>(ranks), 0);
  s.load.assign(static_cast<size_t>(ranks), 0.0);

  // A min-heap on (load, rank): the pair order breaks equal loads by the lower rank.
  const auto cmp = std::greater<std::pair<double, int64_t>>();
  s.heap.clear();
  for (int64_t r = 0; r < ranks; ++r)
    if (caps[r] > 0) s.heap.emplace_back(0.0, r);
  std::make_heap(s.heap.begin(), s.heap.end(), cmp);
  for (const int64_t item : s.order) {
    std::pop_heap(s.heap.begin(), s.heap.end(), cmp);
    const int64_t r = s.heap.back().second;
    s.heap.pop_back();
    s.members[s.slot_begin[r] + s.filled[r]++] = item;
    s.load[r] += costs[item];
    if (s.filled[r] < caps[r]) {
      s.heap.emplace_back(s.load[r], r);
      std::push_heap(s.heap.begin(), s.heap.end(), cmp);
    }
  }

  refine_by_swaps(costs, s, ranks);
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t i = s.slot_begin[r]; i < s.slot_begin[r + 1]; ++i) rank_of[s.members[i]] = r;
}

void assign_round_robin(int64_t ranks, std::span<int64_t> rank_of) {
  for (size_t i = 0; i < rank_of.size(); ++i) rank_of[i] = static_cast<int64_t>(i) % ranks;
}

void rank_loads(std::span<const double> costs, std::span<const int64_t> rank_of, std::span<double> loads) {
  std::fill(loads.begin(), loads.end(), 0.0);
  for (size_t i = 0; i < costs.size(); ++i) loads[rank_of[i]] += costs[i];
}

}  // namespace varpack::balance_detail
