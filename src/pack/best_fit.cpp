// Best-fit-decreasing in O(n log n): each piece, longest first, goes to the row with the least
// free space that still holds it; a new row opens only when none does.
#include <set>
#include <utility>

#include "algorithms.h"
#include "free_space_index.h"

namespace varpack::detail {
namespace {

// For capacities too large for a table per free-space value: the same interface as
// FreeSpaceIndex over an ordered set of (free, row); ties go to the lowest row.
class OrderedFreeSpaceIndex {
 public:
  void insert(int64_t row, int64_t free) { rows_by_free_.insert({free, row}); }
  int64_t take_best_fit(int64_t need, int64_t* free) {
    const auto it = rows_by_free_.lower_bound({need, -1});
    if (it == rows_by_free_.end()) return -1;
    *free = it->first;
    const int64_t row = it->second;
    rows_by_free_.erase(it);
    return row;
  }

 private:
  std::set<std::pair<int64_t, int64_t>> rows_by_free_;
};

// Places every piece; returns the number of rows. row_of[i] is the row of the i-th piece.
template <typename RowIndex>
int64_t best_fit(const SortedPieces& sorted, int64_t capacity, RowIndex& index,
                 std::vector<int64_t>& row_of) {
  int64_t rows = 0;
  size_t i = 0;
  for (const auto& [need, count] : sorted.runs) {
    for (int64_t k = 0; k < count; ++k, ++i) {
      int64_t free = 0;
      int64_t row = index.take_best_fit(need, &free);
      if (row < 0) {
        row = rows++;
        free = capacity;
      }
      // A full row never fits anything again (every piece has length >= 1): leave it out.
      if (free > need) index.insert(row, free - need);
      row_of[i] = row;
    }
  }
  return rows;
}

}  // namespace

void pack_best_fit_decreasing(std::span<const int64_t> lengths, const PackOptions& options,
                              const PieceTotals& totals, const SortedPieces& sorted,
                              PackPlan& plan) {
  const int64_t capacity = options.capacity;
  std::vector<int64_t> row_of(sorted.sample.size());
  int64_t rows = 0;
  if (capacity <= kDenseCapacityLimit) {
    FreeSpaceIndex index(capacity);
    rows = best_fit(sorted, capacity, index, row_of);
  } else {
    OrderedFreeSpaceIndex index;
    rows = best_fit(sorted, capacity, index, row_of);
  }
  group_into_rows(lengths, options, totals, sorted, row_of, rows, plan);
}

}  // namespace varpack::detail
