// Rows indexed by their free space, for best-fit: "a row with the least free space >= need" in
// O(log64 capacity). Free space is an integer in [0, capacity], so instead of an ordered tree the
// index keeps one list of rows per free-space value and a hierarchical bitset of the non-empty
// lists (a set bit per non-empty list, a set bit per non-zero word above): a lookup is a few
// word scans and count-trailing-zeros, all in cache for capacities up to ~1M.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace varpack::detail {

// Bits over [0, size); finds the first set bit at or after a position.
class HierarchicalBitset {
 public:
  explicit HierarchicalBitset(uint64_t size);
  void set(uint64_t position);
  void clear(uint64_t position);
  // The first set position >= `position`, or -1.
  int64_t first_at_or_after(uint64_t position) const { return find(0, position); }

 private:
  int64_t find(size_t level, uint64_t position) const;
  std::vector<std::vector<uint64_t>> levels_;  // levels_[0]: one bit per position
};

// A row leaves the index when it is taken and re-enters with its new free space (if any).
class FreeSpaceIndex {
 public:
  explicit FreeSpaceIndex(int64_t capacity);
  void insert(int64_t row, int64_t free);
  // Removes and returns a row with the least free space >= need (ties: the row inserted last),
  // writing that free space to *free; -1 if no row has room.
  int64_t take_best_fit(int64_t need, int64_t* free);

 private:
  std::vector<int64_t> head_;  // head_[f]: a row with free space f, or -1
  std::vector<int64_t> next_;  // next_[row]: the next row in its list, or -1
  HierarchicalBitset nonempty_;
};

}  // namespace varpack::detail
