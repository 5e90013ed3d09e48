// The planner's algorithms, each from pieces (see pieces.h) to rows written into `plan`, whose
// buffers are reused (their capacity kept) so repeated planning allocates nothing once grown.
// plan.cpp picks one, then adds the statistics and the optional row shuffle.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pieces.h"
#include "varpack/pack.h"

namespace varpack::detail {

// First-fit-decreasing and best-fit-decreasing on the pieces of `lengths` in decreasing order.
void pack_first_fit_decreasing(std::span<const int64_t> lengths, const PackOptions& options,
                               const PieceTotals& totals, const SortedPieces& sorted,
                               PackPlan& plan);
void pack_best_fit_decreasing(std::span<const int64_t> lengths, const PackOptions& options,
                              const PieceTotals& totals, const SortedPieces& sorted,
                              PackPlan& plan);

// Best-fit-decreasing on the histogram of lengths (`length_counts` from check_and_count), rows
// handled in groups of identical content; the same row count as pack_best_fit_decreasing without
// sorting samples. Needs capacity <= kDenseCapacityLimit.
void pack_histogram(std::span<const int64_t> lengths, const PackOptions& options,
                    const PieceTotals& totals, const std::vector<int64_t>& length_counts,
                    PackPlan& plan);

// Baselines, on pieces in input order: every piece its own row, padded to the capacity (fixed
// padding) or to the longest piece among each batch of `batch_size` consecutive pieces (dynamic
// padding).
void one_piece_per_row(std::span<const int64_t> lengths, const PackOptions& options,
                       const PieceTotals& totals, PackPlan& plan);
void dynamic_batches(std::span<const int64_t> lengths, const PackOptions& options,
                     const PieceTotals& totals, PackPlan& plan);

// Turns a placement (row_of[i] is the row of the i-th piece of `sorted`) into compressed rows of
// width `capacity`; pieces keep their placement order within a row.
void group_into_rows(std::span<const int64_t> lengths, const PackOptions& options,
                     const PieceTotals& totals, const SortedPieces& sorted,
                     std::span<const int64_t> row_of, int64_t rows, PackPlan& plan);

}  // namespace varpack::detail
