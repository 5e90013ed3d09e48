// Turns a placement of pieces into the compressed row form of PackPlan, and the two baselines
// whose rows need no search (fixed and dynamic padding).
#include <algorithm>

#include "algorithms.h"

namespace varpack::detail {

void group_into_rows(std::span<const int64_t> lengths, const PackOptions& options,
                     const PieceTotals& totals, const SortedPieces& sorted,
                     std::span<const int64_t> row_of, int64_t rows, PackPlan& plan) {
  plan.row_begin.assign(static_cast<size_t>(rows) + 1, 0);
  for (const int64_t r : row_of) ++plan.row_begin[static_cast<size_t>(r) + 1];
  for (int64_t r = 0; r < rows; ++r)
    plan.row_begin[static_cast<size_t>(r) + 1] += plan.row_begin[static_cast<size_t>(r)];
  // A scatter in placement order keeps each row's pieces in the order they were placed.
  std::vector<int64_t> cursor(plan.row_begin.begin(), plan.row_begin.end() - 1);
  plan.pieces.resize(sorted.sample.size());
  PieceOffsets offsets(lengths, options.capacity, totals.split_samples > 0);
  size_t i = 0;
  for (const auto& [length, count] : sorted.runs) {
    for (int64_t k = 0; k < count; ++k, ++i) {
      const int64_t sample = sorted.sample[i];
      plan.pieces[static_cast<size_t>(cursor[static_cast<size_t>(row_of[i])]++)] = {
          sample, offsets.next(sample, length), length};
    }
  }
  plan.row_width.assign(static_cast<size_t>(rows), options.capacity);
}

void one_piece_per_row(std::span<const int64_t> lengths, const PackOptions& options,
                       const PieceTotals& totals, PackPlan& plan) {
  pieces_in_input_order(lengths, options, totals.pieces, plan.pieces);
  const size_t rows = plan.pieces.size();
  plan.row_begin.resize(rows + 1);
  for (size_t r = 0; r <= rows; ++r) plan.row_begin[r] = static_cast<int64_t>(r);
  plan.row_width.assign(rows, options.capacity);
}

void dynamic_batches(std::span<const int64_t> lengths, const PackOptions& options,
                     const PieceTotals& totals, PackPlan& plan) {
  one_piece_per_row(lengths, options, totals, plan);
  const size_t rows = plan.pieces.size();
  const auto batch = static_cast<size_t>(options.batch_size);
  for (size_t first = 0; first < rows; first += batch) {
    const size_t last = std::min(rows, first + batch);
    int64_t widest = 0;
    for (size_t r = first; r < last; ++r) widest = std::max(widest, plan.pieces[r].length);
    std::fill(plan.row_width.begin() + static_cast<std::ptrdiff_t>(first),
              plan.row_width.begin() + static_cast<std::ptrdiff_t>(last), widest);
  }
}

}  // namespace varpack::detail
