// The planner's algorithms, each a function from pieces (see pieces.h) to rows. plan.cpp picks
// one, then adds the statistics and the optional row shuffle; none of these fill PlanStats.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pieces.h"
#include "varpack/pack.h"

namespace varpack::detail {

// First-fit-decreasing: `sorted` by decreasing length (pieces_by_decreasing_length).
PackPlan pack_first_fit_decreasing(const std::vector<Piece>& sorted, int64_t capacity);

// Best-fit-decreasing: `sorted` by decreasing length (pieces_by_decreasing_length).
PackPlan pack_best_fit_decreasing(const std::vector<Piece>& sorted, int64_t capacity);

// Best-fit-decreasing on the histogram of lengths, rows handled in groups of identical content;
// the same row count as pack_best_fit_decreasing without sorting samples.
PackPlan pack_histogram(std::span<const int64_t> lengths, const PackOptions& options,
                        const PieceTotals& totals);

// Baselines: every piece its own row, padded to the capacity (fixed padding) or to the longest
// piece among each batch of `batch_size` consecutive pieces (dynamic padding).
PackPlan one_piece_per_row(std::vector<Piece> pieces, int64_t capacity);
PackPlan dynamic_batches(std::vector<Piece> pieces, int64_t batch_size);

// Turns a placement (row_of[i] is the row of placed[i]) into compressed rows of width `capacity`;
// pieces keep their placement order within a row.
PackPlan group_into_rows(std::span<const Piece> placed, std::span<const int64_t> row_of,
                         int64_t rows, int64_t capacity);

}  // namespace varpack::detail
