// The planner's common first step: apply the over-length policy to every sample and produce the
// pieces the algorithms place, either in input order (the baselines) or grouped by length class in
// decreasing length (the decreasing-fit packers), together with the statistics they imply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "varpack/pack.h"

namespace varpack::detail {

// Counters filled while the policy is applied; the planner copies them into PlanStats.
struct PieceTotals {
  int64_t samples = 0;
  int64_t pieces = 0;
  int64_t tokens = 0;
  int64_t truncated_tokens = 0;
  int64_t skipped_samples = 0;
  int64_t split_samples = 0;
  int64_t context_parallel_samples = 0;
};

// Validates capacity > 0 and every length (>= 0; <= capacity under OverlongPolicy::error), naming
// the sample at fault, and fills the totals. Every entry point below calls it first. With
// `length_counts` (capacity <= kDenseCapacityLimit) it also counts the pieces of each length,
// in the same pass: (*length_counts)[l] for l in [0, capacity].
PieceTotals check_and_count(std::span<const int64_t> lengths, const PackOptions& options,
                            std::vector<int64_t>* length_counts = nullptr);

// Pieces in input order (sample by sample, a split sample's pieces by offset), into `out`.
void pieces_in_input_order(std::span<const int64_t> lengths, const PackOptions& options,
                           int64_t total_pieces, std::vector<Piece>& out);

// Pieces by decreasing length, compactly: the sample of each piece (8 bytes instead of a whole
// Piece: the decreasing-fit packers' largest temporary) and the runs of equal length. Equal
// lengths keep input order (sample, then offset), so the order is a pure function of the input.
// Offsets are implied; PieceOffsets recovers them.
struct SortedPieces {
  std::vector<int64_t> sample;                    // one entry per piece
  std::vector<std::pair<int64_t, int64_t>> runs;  // (length, pieces of that length), longest first
};

// A counting sort with `length_counts` from check_and_count (capacity <= kDenseCapacityLimit),
// a stable comparison sort when they are empty.
SortedPieces pieces_by_decreasing_length(std::span<const int64_t> lengths,
                                         const PackOptions& options, const PieceTotals& totals,
                                         const std::vector<int64_t>& length_counts);

// Recovers the offsets of pieces met in SortedPieces order (or any order in which each length's
// pieces keep their sorted order). A piece's offset is 0 unless its sample was split; then a
// piece shorter than the capacity is the remainder at the sample's end, and the full pieces of a
// sample come one after another among the capacity-length pieces, at offsets 0, capacity, ...
class PieceOffsets {
 public:
  PieceOffsets(std::span<const int64_t> lengths, int64_t capacity, bool any_split)
      : lengths_(lengths), capacity_(capacity), any_split_(any_split) {}

  int64_t next(int64_t sample, int64_t length) {
    if (!any_split_ || lengths_[static_cast<size_t>(sample)] <= capacity_) return 0;
    if (length < capacity_) return lengths_[static_cast<size_t>(sample)] - length;
    last_full_offset_ = sample == last_full_sample_ ? last_full_offset_ + capacity_ : 0;
    last_full_sample_ = sample;
    return last_full_offset_;
  }

 private:
  std::span<const int64_t> lengths_;
  int64_t capacity_;
  bool any_split_;
  int64_t last_full_sample_ = -1;
  int64_t last_full_offset_ = 0;
};

// Largest capacity for which the planner keeps tables indexed by length or free space (8 bytes
// per entry: 32 MiB at this limit).
inline constexpr int64_t kDenseCapacityLimit = int64_t{1} << 22;

// Calls emit(offset, length) for each piece of a sample of length `length` under `policy` (none for
// a zero-length sample). The policy has been checked already: `error` never sees an overlong one.
template <typename Emit>
inline void for_each_piece(int64_t length, int64_t capacity, OverlongPolicy policy, Emit&& emit) {
  if (length <= capacity) {
    if (length > 0) emit(int64_t{0}, length);
  } else if (policy == OverlongPolicy::split) {
    for (int64_t offset = 0; offset < length; offset += capacity)
      emit(offset, length - offset < capacity ? length - offset : capacity);
  } else if (policy == OverlongPolicy::truncate) {
    emit(int64_t{0}, capacity);
  }
}

}  // namespace varpack::detail
