// The free-space index behind best-fit (see free_space_index.h).
#include "free_space_index.h"

namespace varpack::detail {

HierarchicalBitset::HierarchicalBitset(uint64_t size) {
  uint64_t words = (size + 63) / 64;
  levels_.emplace_back(words == 0 ? 1 : words, 0);
  while (levels_.back().size() > 1) {
    words = (levels_.back().size() + 63) / 64;
    levels_.emplace_back(words, 0);
  }
}

void HierarchicalBitset::set(uint64_t position) {
  for (auto& words : levels_) {
    uint64_t& word = words[position / 64];
    const bool was_empty = word == 0;
    word |= uint64_t{1} << (position % 64);
    if (!was_empty) return;  // the levels above already mark this word
    position /= 64;
  }
}

void HierarchicalBitset::clear(uint64_t position) {
  for (auto& words : levels_) {
    uint64_t& word = words[position / 64];
    word &= ~(uint64_t{1} << (position % 64));
    if (word != 0) return;  // still non-empty: the levels above stay set
    position /= 64;
  }
}

int64_t HierarchicalBitset::find(size_t level, uint64_t position) const {
  if (level == levels_.size()) return -1;
  const std::vector<uint64_t>& words = levels_[level];
  uint64_t w = position / 64;
  if (w >= words.size()) return -1;
  uint64_t bits = words[w] & (~uint64_t{0} << (position % 64));
  if (bits == 0) {
    // No bit left in this word: the level above names the next non-empty word.
    const int64_t next_word = find(level + 1, w + 1);
    if (next_word < 0) return -1;
    w = static_cast<uint64_t>(next_word);
    bits = words[w];
  }
  return static_cast<int64_t>(w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)));
}

FreeSpaceIndex::FreeSpaceIndex(int64_t capacity)
    : head_(static_cast<size_t>(capacity) + 1, -1), nonempty_(static_cast<uint64_t>(capacity) + 1) {}

void FreeSpaceIndex::insert(int64_t row, int64_t free) {
  if (static_cast<size_t>(row) >= next_.size()) next_.resize(static_cast<size_t>(row) + 1, -1);
  int64_t& head = head_[static_cast<size_t>(free)];
  if (head < 0) nonempty_.set(static_cast<uint64_t>(free));
  next_[static_cast<size_t>(row)] = head;
  head = row;
}

int64_t FreeSpaceIndex::take_best_fit(int64_t need, int64_t* free) {
  const int64_t f = nonempty_.first_at_or_after(static_cast<uint64_t>(need));
  if (f < 0) return -1;
  int64_t& head = head_[static_cast<size_t>(f)];
  const int64_t row = head;
  head = next_[static_cast<size_t>(row)];
  if (head < 0) nonempty_.clear(static_cast<uint64_t>(f));
  *free = f;
  return row;
}

}  // namespace varpack::detail
