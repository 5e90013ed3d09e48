// The planner's common first step: apply the over-length policy to every sample and produce the
// pieces the algorithms place, either in input order (the baselines) or grouped by length class in
// decreasing length (the decreasing-fit packers), together with the statistics they imply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
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

// Pieces by decreasing length; equal lengths keep input order (sample, then offset), so the order
// is a pure function of the input. A counting sort when the capacity is small enough for a table
// of one counter per length, a stable comparison sort otherwise.
std::vector<Piece> pieces_by_decreasing_length(std::span<const int64_t> lengths,
                                               const PackOptions& options, int64_t total_pieces);

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
  } else {
    emit(int64_t{0}, capacity);
  }
}

}  // namespace varpack::detail
