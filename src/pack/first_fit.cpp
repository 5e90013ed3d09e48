// First-fit-decreasing in O(n log n): a max-tree over the rows' free space finds the first
// (lowest-index) row a piece fits in by one walk from the root, instead of scanning every row.
#include <algorithm>

#include "algorithms.h"

namespace varpack::detail {
namespace {

// Complete binary tree over row slots; a node holds the largest free space below it. Slots not
// yet opened hold 0, which no piece (length >= 1) fits in, so the walk only finds open rows.
class FreeSpaceMaxTree {
 public:
  explicit FreeSpaceMaxTree(size_t expected_rows) {
    while (leaves_ < expected_rows) leaves_ *= 2;
    tree_.assign(2 * leaves_, 0);
  }

  // The lowest-index open row >= `start` with at least `need` free, or -1: climb from the leaf
  // of `start` to the first right sibling that holds a fit, then walk down to its leftmost fit.
  // The cost is logarithmic in the distance to the answer, not in the number of rows.
  int64_t first_fit_from(size_t start, int64_t need) const {
    if (start >= leaves_) return -1;
    size_t node = leaves_ + start;
    if (tree_[node] < need) {
      while (true) {
        if (node == 1) return -1;  // at the root: nothing to the right of `start` fits
        if (node % 2 == 0 && tree_[node + 1] >= need) {
          ++node;
          break;
        }
        node /= 2;
      }
      while (node < leaves_) {
        node *= 2;
        if (tree_[node] < need) ++node;  // the left subtree has no fit: the right one must
      }
    }
    return static_cast<int64_t>(node - leaves_);
  }

  int64_t open_row(int64_t free) {
    if (rows_ == leaves_) grow();
    set(rows_, free);
    return static_cast<int64_t>(rows_++);
  }

  int64_t free(int64_t row) const { return tree_[leaves_ + static_cast<size_t>(row)]; }

  void set(size_t row, int64_t free) {
    size_t node = leaves_ + row;
    tree_[node] = free;
    for (node /= 2; node >= 1; node /= 2) {
      const int64_t best = std::max(tree_[2 * node], tree_[2 * node + 1]);
      if (tree_[node] == best) break;  // nothing above changes either
      tree_[node] = best;
    }
  }

  size_t rows() const { return rows_; }

 private:
  void grow() {
    std::vector<int64_t> bigger(4 * leaves_, 0);
    std::copy(tree_.begin() + static_cast<std::ptrdiff_t>(leaves_), tree_.end(),
              bigger.begin() + static_cast<std::ptrdiff_t>(2 * leaves_));
    leaves_ *= 2;
    tree_ = std::move(bigger);
    for (size_t node = leaves_ - 1; node >= 1; --node)
      tree_[node] = std::max(tree_[2 * node], tree_[2 * node + 1]);
  }

  size_t leaves_ = 1;
  size_t rows_ = 0;
  std::vector<int64_t> tree_;
};

}  // namespace

void pack_first_fit_decreasing(std::span<const Piece> sorted, int64_t capacity, PackPlan& plan) {
  int64_t tokens = 0;
  for (const Piece& p : sorted) tokens += p.length;
  // The lower bound on rows sizes the tree; it grows by doubling if first-fit needs more.
  FreeSpaceMaxTree tree(static_cast<size_t>(tokens / capacity + 1));
  std::vector<int64_t> row_of(sorted.size());
  // Within a run of equal lengths the first fit never moves left: every row before the last one
  // found had too little room for this length, and rooms only shrink. So the search for the next
  // piece of the same length starts at the last row found; a new length starts from row 0.
  int64_t previous_need = -1;
  int64_t start = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int64_t need = sorted[i].length;
    if (need != previous_need) start = 0;
    previous_need = need;
    int64_t row = tree.first_fit_from(static_cast<size_t>(start), need);
    if (row < 0) {
      row = tree.open_row(capacity - need);
    } else {
      tree.set(static_cast<size_t>(row), tree.free(row) - need);
    }
    row_of[i] = row;
    start = row;
  }
  group_into_rows(sorted, row_of, static_cast<int64_t>(tree.rows()), capacity, plan);
}

}  // namespace varpack::detail
