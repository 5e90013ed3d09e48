// Chunked batch building for the writers (see batch_chunks.h).
#include "batch_chunks.h"

#include <string>

#include "varpack/error.h"

namespace varpack::detail {
namespace {
constexpr int64_t kChunkTokens = int64_t{1} << 20;
}

int64_t row_tokens(const PackPlan& plan, int64_t r) {
  int64_t n = 0;
  for (const Piece& piece : plan.row(r)) n += piece.length;
  return n;
}

void for_each_batch_chunk(
    const PackPlan& plan, const TokenSource& source, const BatchOptions& options,
    const ProgressFn& progress,
    const std::function<void(int64_t, int64_t, const PackedBatch&)>& fn) {
  BatchOptions unpadded = options;
  unpadded.pad_to_multiple = 1;
  const int64_t rows = plan.rows();
  int64_t first = 0;
  while (first < rows) {
    int64_t last = first, tokens = 0;
    // At least one row per chunk, however long: the planner bounds a row by the capacity.
    while (last < rows && (last == first || tokens + row_tokens(plan, last) <= kChunkTokens)) {
      tokens += row_tokens(plan, last);
      ++last;
    }
    const PackedBatch batch = build_packed_batch(plan, first, last, source, unpadded);
    const int64_t pieces = plan.row_begin[last] - plan.row_begin[first];
    if (static_cast<int64_t>(batch.input_ids.size()) != tokens ||
        static_cast<int64_t>(batch.segment_sample.size()) != pieces) {
      throw Error("internal error: the batch of rows " + std::to_string(first) + ".." +
                  std::to_string(last) + " has " + std::to_string(batch.input_ids.size()) +
                  " tokens in " + std::to_string(batch.segment_sample.size()) +
                  " segments; the plan has " + std::to_string(tokens) + " in " +
                  std::to_string(pieces) + " pieces");
    }
    fn(first, last, batch);
    first = last;
    if (progress) progress(static_cast<uint64_t>(first), static_cast<uint64_t>(rows));
  }
}

}  // namespace varpack::detail
