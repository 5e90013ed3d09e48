// Best-fit-decreasing in O(n log n): each piece, longest first, goes to the row with the least
// free space that still holds it; a new row opens only when none does.
#include <set>
#include <utility>

#include "algorithms.h"
#include "free_space_index.h"

namespace varpack::detail {
namespace {

// Capacities too large for a table per free-space value: an ordered set of (free, row).
int64_t place_with_ordered_set(std::span<const Piece> sorted, int64_t capacity,
                               std::vector<int64_t>& row_of) {
  std::set<std::pair<int64_t, int64_t>> rows_by_free;
  int64_t rows = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int64_t need = sorted[i].length;
    auto it = rows_by_free.lower_bound({need, -1});
    int64_t row = 0;
    int64_t free = 0;
    if (it == rows_by_free.end()) {
      row = rows++;
      free = capacity;
    } else {
      free = it->first;
      row = it->second;
      rows_by_free.erase(it);
    }
    if (free > need) rows_by_free.insert({free - need, row});
    row_of[i] = row;
  }
  return rows;
}

int64_t place_with_free_space_index(std::span<const Piece> sorted, int64_t capacity,
                                    std::vector<int64_t>& row_of) {
  FreeSpaceIndex index(capacity);
  int64_t rows = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int64_t need = sorted[i].length;
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
  return rows;
}

}  // namespace

void pack_best_fit_decreasing(std::span<const Piece> sorted, int64_t capacity, PackPlan& plan) {
  std::vector<int64_t> row_of(sorted.size());
  const int64_t rows = capacity <= kDenseCapacityLimit
                           ? place_with_free_space_index(sorted, capacity, row_of)
                           : place_with_ordered_set(sorted, capacity, row_of);
  group_into_rows(sorted, row_of, rows, capacity, plan);
}

}  // namespace varpack::detail
