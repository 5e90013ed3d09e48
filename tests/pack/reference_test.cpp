// The fast packers against plain O(n x rows) references written here: first-fit-decreasing must
// give the very same plan; best-fit-decreasing and the histogram packer the same row count and the
// same multiset of row fills (best-fit's choice among rows of equal free space is arbitrary and
// does not change either), on random and adversarial inputs, including capacities above the
// dense-table limit where the planner switches to a comparison sort and an ordered set.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "plan_checks.h"
#include "varpack/error.h"
#include "varpack/pack.h"

namespace varpack {
namespace {

// Pieces after the policy, longest first, ties in input order.
std::vector<Piece> reference_sorted_pieces(const std::vector<int64_t>& lengths, int64_t capacity,
                                           OverlongPolicy policy) {
  std::vector<Piece> pieces;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t n = lengths[s];
    if (n <= capacity) {
      if (n > 0) pieces.push_back({static_cast<int64_t>(s), 0, n});
    } else if (policy == OverlongPolicy::truncate) {
      pieces.push_back({static_cast<int64_t>(s), 0, capacity});
    } else {
      for (int64_t off = 0; off < n; off += capacity)
        pieces.push_back({static_cast<int64_t>(s), off, std::min(capacity, n - off)});
    }
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Piece& a, const Piece& b) { return a.length > b.length; });
  return pieces;
}

// rows[r] holds the pieces of row r in placement order.
using Rows = std::vector<std::vector<Piece>>;

Rows reference_pack(const std::vector<int64_t>& lengths, int64_t capacity, OverlongPolicy policy,
                    bool best_fit) {
  Rows rows;
  std::vector<int64_t> free;
  for (const Piece& p : reference_sorted_pieces(lengths, capacity, policy)) {
    size_t chosen = rows.size();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (free[r] < p.length) continue;
      if (!best_fit) {
        chosen = r;
        break;
      }
      if (chosen == rows.size() || free[r] < free[chosen]) chosen = r;
    }
    if (chosen == rows.size()) {
      rows.emplace_back();
      free.push_back(capacity);
    }
    rows[chosen].push_back(p);
    free[chosen] -= p.length;
  }
  return rows;
}

Rows rows_of(const PackPlan& plan) {
  Rows rows;
  for (int64_t r = 0; r < plan.rows(); ++r) rows.emplace_back(plan.row(r).begin(), plan.row(r).end());
  return rows;
}

std::vector<int64_t> sorted_fills(const Rows& rows) {
  std::vector<int64_t> fills;
  for (const auto& row : rows) {
    int64_t used = 0;
    for (const Piece& p : row) used += p.length;
    fills.push_back(used);
  }
  std::sort(fills.begin(), fills.end());
  return fills;
}

void compare_with_references(const std::vector<int64_t>& lengths, int64_t capacity,
                             OverlongPolicy policy) {
  PackOptions o;
  o.capacity = capacity;
  o.overlong = policy;

  o.algorithm = Algorithm::ffd;
  const PackPlan ffd = plan_packing(lengths, o);
  testing::expect_valid_plan(lengths, o, ffd);
  EXPECT_TRUE(rows_of(ffd) == reference_pack(lengths, capacity, policy, false))
      << "first-fit-decreasing differs from the reference";

  const Rows bfd_ref = reference_pack(lengths, capacity, policy, true);
  std::vector<Algorithm> best_fits = {Algorithm::bfd};
  if (capacity <= (int64_t{1} << 22)) best_fits.push_back(Algorithm::histogram);
  for (const Algorithm a : best_fits) {
    o.algorithm = a;
    const PackPlan plan = plan_packing(lengths, o);
    testing::expect_valid_plan(lengths, o, plan);
    EXPECT_EQ(plan.rows(), static_cast<int64_t>(bfd_ref.size())) << to_string(a);
    EXPECT_EQ(sorted_fills(rows_of(plan)), sorted_fills(bfd_ref)) << to_string(a);
  }
}

TEST(PackingReference, RandomLengthSets) {
  std::mt19937_64 rng(31337);
  for (int trial = 0; trial < 150; ++trial) {
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 200);
    const auto n = static_cast<size_t>(rng() % 300);
    // Mix of regimes: lengths up to the capacity, small ones, and over-length ones.
    const uint64_t spread = static_cast<uint64_t>(trial % 3 == 0 ? capacity / 4 + 1
                                                  : trial % 3 == 1 ? capacity
                                                                   : 2 * capacity);
    std::vector<int64_t> lengths(n);
    for (auto& l : lengths) l = static_cast<int64_t>(rng() % (spread + 1));
    SCOPED_TRACE("trial " + std::to_string(trial) + " capacity " + std::to_string(capacity));
    compare_with_references(lengths, capacity, OverlongPolicy::split);
    compare_with_references(lengths, capacity, OverlongPolicy::truncate);
  }
}

TEST(PackingReference, AdversarialLengthSets) {
  const int64_t L = 100;
  const std::vector<std::vector<int64_t>> cases = {
      {},
      {1},
      {L},
      {0, 0},
      std::vector<int64_t>(50, L),
      std::vector<int64_t>(50, L / 2 + 1),
      std::vector<int64_t>(50, L / 3 + 1),
      {L * 7 + 3},
      {51, 50, 49, 26, 25, 24, 1, 1, 99, 2, 98, 3, 97},
      // The classic first-fit-decreasing worst case shape: 2/9 of an optimum of 6 bins wasted.
      {51, 51, 51, 51, 51, 51, 27, 27, 27, 27, 27, 27, 26, 26, 26, 26, 26, 26,
       23, 23, 23, 23, 23, 23, 23, 23, 23, 23, 23, 23},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    compare_with_references(cases[c], L, OverlongPolicy::split);
  }
}

TEST(PackingReference, BaselinesAreOnePiecePerRowInInputOrder) {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 100);
    std::vector<int64_t> lengths(rng() % 200);
    for (auto& l : lengths) l = static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * capacity + 1));
    PackOptions o;
    o.capacity = capacity;
    o.overlong = OverlongPolicy::split;
    o.batch_size = 1 + static_cast<int64_t>(rng() % 7);
    // Reference: the pieces in input order, one per row; fixed padding pads to the capacity,
    // dynamic padding to the longest piece of each batch of batch_size consecutive pieces.
    std::vector<Piece> pieces;
    for (size_t s = 0; s < lengths.size(); ++s)
      for (int64_t off = 0; off < lengths[s]; off += capacity)
        pieces.push_back({static_cast<int64_t>(s), off, std::min(capacity, lengths[s] - off)});
    std::vector<int64_t> dynamic_widths(pieces.size());
    for (size_t first = 0; first < pieces.size(); first += static_cast<size_t>(o.batch_size)) {
      const size_t last = std::min(pieces.size(), first + static_cast<size_t>(o.batch_size));
      int64_t widest = 0;
      for (size_t i = first; i < last; ++i) widest = std::max(widest, pieces[i].length);
      for (size_t i = first; i < last; ++i) dynamic_widths[i] = widest;
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    o.algorithm = Algorithm::none;
    const PackPlan fixed = plan_packing(lengths, o);
    EXPECT_EQ(fixed.pieces, pieces);
    EXPECT_EQ(fixed.row_width, std::vector<int64_t>(pieces.size(), capacity));
    o.algorithm = Algorithm::dynamic;
    const PackPlan dynamic = plan_packing(lengths, o);
    EXPECT_EQ(dynamic.pieces, pieces);
    EXPECT_EQ(dynamic.row_width, dynamic_widths);
    for (int64_t r = 0; r <= dynamic.rows(); ++r) EXPECT_EQ(dynamic.row_begin[r], r);
  }
}

TEST(PackingReference, CapacitiesAboveTheDenseTableLimit) {
  std::mt19937_64 rng(4);
  const int64_t capacity = (int64_t{1} << 22) + 12345;
  std::vector<int64_t> lengths(200);
  for (auto& l : lengths) l = static_cast<int64_t>(rng() % static_cast<uint64_t>(capacity * 2));
  compare_with_references(lengths, capacity, OverlongPolicy::split);
  PackOptions o;
  o.capacity = capacity;
  o.algorithm = Algorithm::histogram;
  try {
    plan_packing(std::vector<int64_t>{5}, o);
    FAIL() << "histogram accepted a capacity above its table limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bfd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace varpack
