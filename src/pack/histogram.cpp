// Histogram packing: placeholder until the class-level best-fit lands (next commit).
#include "algorithms.h"

namespace varpack::detail {

PackPlan pack_histogram(std::span<const int64_t> lengths, const PackOptions& options,
                        const PieceTotals& totals) {
  return pack_best_fit_decreasing(pieces_by_decreasing_length(lengths, options, totals.pieces),
                                  options.capacity);
}

}  // namespace varpack::detail
