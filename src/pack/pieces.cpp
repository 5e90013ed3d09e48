// Applies the over-length policy and orders pieces for the packers (see pieces.h).
#include "pieces.h"

#include <algorithm>
#include <string>

#include "varpack/error.h"

namespace varpack::detail {

PieceTotals check_and_count(std::span<const int64_t> lengths, const PackOptions& options,
                            std::vector<int64_t>* length_counts) {
  const int64_t capacity = options.capacity;
  if (capacity <= 0 || capacity > kMaxCapacity)
    throw Error("capacity must be in [1, " + std::to_string(kMaxCapacity) +
                "] tokens per row (cu_seqlens are int32), got " + std::to_string(capacity));
  // Counting into a scratch slot when no counts are wanted keeps one branch-free loop.
  std::vector<int64_t> no_counts(1);
  if (length_counts != nullptr) length_counts->assign(static_cast<size_t>(capacity) + 1, 0);
  int64_t* const count = length_counts != nullptr ? length_counts->data() : no_counts.data();
  const int64_t count_mask = length_counts != nullptr ? -1 : 0;
  PieceTotals totals;
  totals.samples = static_cast<int64_t>(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t length = lengths[i];
    if (length < 0)
      throw Error("sample " + std::to_string(i) + " has length " + std::to_string(length) +
                  "; lengths must be >= 0");
    if (length == 0) {
      ++totals.skipped_samples;
    } else if (length <= capacity) {
      ++totals.pieces;
      totals.tokens += length;
      ++count[length & count_mask];
    } else if (options.overlong == OverlongPolicy::error) {
      throw Error("sample " + std::to_string(i) + " has length " + std::to_string(length) +
                  ", longer than the capacity " + std::to_string(capacity) +
                  "; choose the over-length policy 'truncate' (keep its first " +
                  std::to_string(capacity) + " tokens), 'split' (cut it into pieces of at most " +
                  std::to_string(capacity) + " tokens) or 'cp' (leave it out, to run it over "
                  "context-parallel ranks): overlong='split' in Python, --overlong split on the "
                  "command line; or raise the capacity");
    } else if (options.overlong == OverlongPolicy::context_parallel) {
      ++totals.context_parallel_samples;
    } else if (options.overlong == OverlongPolicy::truncate) {
      ++totals.pieces;
      totals.tokens += capacity;
      totals.truncated_tokens += length - capacity;
      ++count[capacity & count_mask];
    } else {
      ++totals.split_samples;
      totals.pieces += (length + capacity - 1) / capacity;
      totals.tokens += length;
      count[capacity & count_mask] += length / capacity;
      if (length % capacity != 0) ++count[(length % capacity) & count_mask];
    }
  }
  return totals;
}

void pieces_in_input_order(std::span<const int64_t> lengths, const PackOptions& options,
                           int64_t total_pieces, std::vector<Piece>& out) {
  out.clear();
  out.reserve(static_cast<size_t>(total_pieces));
  for (size_t i = 0; i < lengths.size(); ++i) {
    for_each_piece(lengths[i], options.capacity, options.overlong, [&](int64_t offset, int64_t n) {
      out.push_back({static_cast<int64_t>(i), offset, n});
    });
  }
}

SortedPieces pieces_by_decreasing_length(std::span<const int64_t> lengths,
                                         const PackOptions& options, const PieceTotals& totals,
                                         const std::vector<int64_t>& length_counts) {
  SortedPieces sorted;
  if (length_counts.empty()) {
    std::vector<Piece> pieces;
    pieces_in_input_order(lengths, options, totals.pieces, pieces);
    std::stable_sort(pieces.begin(), pieces.end(),
                     [](const Piece& a, const Piece& b) { return a.length > b.length; });
    sorted.sample.reserve(pieces.size());
    for (const Piece& p : pieces) {
      sorted.sample.push_back(p.sample);
      if (sorted.runs.empty() || sorted.runs.back().first != p.length)
        sorted.runs.push_back({p.length, 0});
      ++sorted.runs.back().second;
    }
    return sorted;
  }
  // Counting sort: next[l] is where the next piece of length l goes; lengths laid out from the
  // capacity down to 1, each in input order (stable).
  const int64_t capacity = options.capacity;
  std::vector<int64_t> next(static_cast<size_t>(capacity) + 1, 0);
  int64_t position = 0;
  for (int64_t l = capacity; l >= 1; --l) {
    const int64_t count = length_counts[static_cast<size_t>(l)];
    if (count == 0) continue;
    next[static_cast<size_t>(l)] = position;
    position += count;
    sorted.runs.push_back({l, count});
  }
  sorted.sample.resize(static_cast<size_t>(totals.pieces));
  for (size_t i = 0; i < lengths.size(); ++i) {
    for_each_piece(lengths[i], capacity, options.overlong, [&](int64_t, int64_t n) {
      sorted.sample[static_cast<size_t>(next[static_cast<size_t>(n)]++)] = static_cast<int64_t>(i);
    });
  }
  return sorted;
}

}  // namespace varpack::detail
