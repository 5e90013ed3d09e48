// Histogram packing: best-fit-decreasing run on the histogram of lengths instead of on samples.
// Lengths are bounded by the capacity, so they are counted (no sort); rows with the same content
// are handled as one group ("these k rows each hold pattern P and have f free"), so the search
// costs O(groups x log capacity), independent of the number of samples; samples are dealt into
// the groups' rows at the end, in input order within each length. Graphcore's SPFHP (Krell et
// al., "Efficient sequence packing without cross-contamination", 2021) packs histograms the same
// way; here the rule is exactly best-fit, so the row count equals pack_best_fit_decreasing's.
#include <algorithm>
#include <string>

#include "algorithms.h"
#include "free_space_index.h"
#include "varpack/error.h"

namespace varpack::detail {
namespace {

// A pattern is a path in a tree: each node adds `copies` pieces of `length` to its parent's.
struct PatternNode {
  int64_t parent;  // -1 for the root (an empty row)
  int64_t length;
  int64_t copies;
};

struct Group {
  int64_t rows;
  int64_t pattern;  // a PatternNode index
};

class GroupPacker {
 public:
  explicit GroupPacker(int64_t capacity) : capacity_(capacity), index_(capacity) {}

  // Best-fit for `count` pieces of `length`, longest lengths first. Item by item, best-fit puts a
  // piece into the row with the least room f >= length; that row then has f - length, still the
  // least room >= length if it fits another piece, so it takes floor(f / length) pieces in a row
  // before the search moves on. All rows of a group have the same f, so the group is served
  // whole: t rows take m = floor(f / length) pieces each, at most one more row takes the rest.
  void place(int64_t length, int64_t count) {
    while (count > 0) {
      int64_t free = 0;
      const int64_t g = index_.take_best_fit(length, &free);
      if (g < 0) {
        // No row has room: new rows, each filled with q pieces before the next one opens.
        const int64_t q = capacity_ / length;
        if (count / q > 0) add_group(count / q, -1, length, q, capacity_ - q * length);
        if (count % q > 0) add_group(1, -1, length, count % q, capacity_ - (count % q) * length);
        return;
      }
      const int64_t m = free / length;
      Group& group = groups_[static_cast<size_t>(g)];
      const int64_t pattern = group.pattern;
      const int64_t t = std::min(group.rows, count / m);
      group.rows -= t;
      count -= t * m;
      if (t > 0) add_group(t, pattern, length, m, free - m * length);
      if (count > 0 && groups_[static_cast<size_t>(g)].rows > 0) {
        // Fewer than m pieces left: one more row of this group takes them all.
        groups_[static_cast<size_t>(g)].rows -= 1;
        add_group(1, pattern, length, count, free - count * length);
        count = 0;
      }
      if (groups_[static_cast<size_t>(g)].rows > 0) index_.insert(g, free);
    }
  }

  const std::vector<Group>& groups() const { return groups_; }
  const std::vector<PatternNode>& patterns() const { return patterns_; }

 private:
  void add_group(int64_t rows, int64_t parent, int64_t length, int64_t copies, int64_t free) {
    patterns_.push_back({parent, length, copies});
    groups_.push_back({rows, static_cast<int64_t>(patterns_.size()) - 1});
    // A row with no room left for a piece of length >= 1 never enters the index again.
    if (free > 0) index_.insert(static_cast<int64_t>(groups_.size()) - 1, free);
  }

  int64_t capacity_;
  FreeSpaceIndex index_;
  std::vector<Group> groups_;
  std::vector<PatternNode> patterns_;
};

// The pieces of each length in input order: entries [begin[l], begin[l + 1]) are length l's.
struct PiecesByLength {
  std::vector<int64_t> begin;
  std::vector<int64_t> sample;
  std::vector<int64_t> offset;  // empty when no sample was split (then every offset is 0)
};

PiecesByLength sort_by_length(std::span<const int64_t> lengths, const PackOptions& options,
                              const std::vector<int64_t>& count, const PieceTotals& totals) {
  PiecesByLength by;
  const auto classes = static_cast<size_t>(options.capacity) + 1;
  by.begin.assign(classes + 1, 0);
  for (size_t l = 0; l < classes; ++l) by.begin[l + 1] = by.begin[l] + count[l];
  std::vector<int64_t> next(by.begin.begin(), by.begin.end() - 1);
  by.sample.resize(static_cast<size_t>(totals.pieces));
  if (totals.split_samples > 0) by.offset.resize(static_cast<size_t>(totals.pieces));
  for (size_t i = 0; i < lengths.size(); ++i) {
    for_each_piece(lengths[i], options.capacity, options.overlong, [&](int64_t off, int64_t n) {
      const auto at = static_cast<size_t>(next[static_cast<size_t>(n)]++);
      by.sample[at] = static_cast<int64_t>(i);
      if (!by.offset.empty()) by.offset[at] = off;
    });
  }
  return by;
}

}  // namespace

PackPlan pack_histogram(std::span<const int64_t> lengths, const PackOptions& options,
                        const PieceTotals& totals) {
  const int64_t capacity = options.capacity;
  if (capacity > kDenseCapacityLimit)
    throw Error("the histogram packer keeps one counter per length and supports capacities up to " +
                std::to_string(kDenseCapacityLimit) + " (got " + std::to_string(capacity) +
                "); use the 'bfd' algorithm for larger capacities");
  std::vector<int64_t> count(static_cast<size_t>(capacity) + 1, 0);
  for (const int64_t length : lengths) {
    for_each_piece(length, capacity, options.overlong,
                   [&](int64_t, int64_t n) { ++count[static_cast<size_t>(n)]; });
  }

  GroupPacker packer(capacity);
  for (int64_t l = capacity; l >= 1; --l)
    if (count[static_cast<size_t>(l)] > 0) packer.place(l, count[static_cast<size_t>(l)]);

  const PiecesByLength by = sort_by_length(lengths, options, count, totals);
  std::vector<int64_t> cursor(by.begin.begin(), by.begin.end() - 1);

  // Deal the pieces: groups in creation order, each row of a group in turn, its pattern from the
  // first (longest) length down; each length hands out its pieces in input order.
  PackPlan plan;
  plan.pieces.reserve(static_cast<size_t>(totals.pieces));
  plan.row_begin.push_back(0);
  std::vector<const PatternNode*> path;
  for (const Group& group : packer.groups()) {
    if (group.rows == 0) continue;
    path.clear();
    for (int64_t node = group.pattern; node >= 0;
         node = packer.patterns()[static_cast<size_t>(node)].parent)
      path.push_back(&packer.patterns()[static_cast<size_t>(node)]);
    for (int64_t r = 0; r < group.rows; ++r) {
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        const auto l = static_cast<size_t>((*it)->length);
        for (int64_t c = 0; c < (*it)->copies; ++c) {
          const auto at = static_cast<size_t>(cursor[l]++);
          plan.pieces.push_back(
              {by.sample[at], by.offset.empty() ? 0 : by.offset[at], (*it)->length});
        }
      }
      plan.row_begin.push_back(static_cast<int64_t>(plan.pieces.size()));
    }
  }
  plan.row_width.assign(plan.row_begin.size() - 1, capacity);
  return plan;
}

}  // namespace varpack::detail
