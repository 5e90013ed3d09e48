// The plain reference for balancing: the optimal (smallest largest rank cost) assignment of a few
// items to ranks with fixed per-rank counts, by exhaustive search. Exponential: for <= 8 items.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace varpack::testing {

// The least possible max over ranks of the summed cost, rank r taking exactly caps[r] items.
inline double optimal_max_load(const std::vector<double>& costs, const std::vector<int64_t>& caps) {
  const size_t ranks = caps.size();
  std::vector<double> load(ranks, 0.0);
  std::vector<int64_t> room = caps;
  double best = std::numeric_limits<double>::infinity();
  // Items in order; each to every rank with room. No pruning beyond "already worse than the best":
  // the reference stays obviously correct.
  auto place = [&](auto&& self, size_t item, double worst) -> void {
    if (worst >= best) return;
    if (item == costs.size()) {
      best = worst;
      return;
    }
    for (size_t r = 0; r < ranks; ++r) {
      if (room[r] == 0) continue;
      --room[r];
      load[r] += costs[item];
      self(self, item + 1, std::max(worst, load[r]));
      load[r] -= costs[item];
      ++room[r];
    }
  };
  place(place, 0, 0.0);
  return best;
}

}  // namespace varpack::testing
