// build_packed_batch: copies each piece's tokens into the flat layout, writes labels (ignored at
// every segment start), positions (restarting per segment), cu_seqlens, the pad segments and the
// two loss-weight normalisations (see batch.h).
#include <algorithm>
#include <limits>
#include <string>

#include "varpack/batch.h"
#include "varpack/error.h"

namespace varpack {
namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Checks everything the copy relies on, so the copy itself cannot fail half-way.
int64_t checked_total_tokens(const PackPlan& plan, int64_t row_first, int64_t row_last,
                             const TokenSource& source, const BatchOptions& options) {
  if (options.pad_to_multiple < 1)
    throw Error("pad_to_multiple must be >= 1 (got " + std::to_string(options.pad_to_multiple) +
                ")");
  if (options.pad_token_id < 0)
    throw Error("pad_token_id must be a token id in [0, 2147483647] (got " +
                std::to_string(options.pad_token_id) + ")");
  if (row_first < 0 || row_first > row_last || row_last > plan.rows())
    throw Error("row range [" + std::to_string(row_first) + ", " + std::to_string(row_last) +
                ") is not within the plan's " + std::to_string(plan.rows()) + " rows");
  int64_t total = 0;
  for (int64_t r = row_first; r < row_last; ++r) {
    int64_t row_tokens = 0;
    for (const Piece& p : plan.row(r)) {
      if (p.sample < 0 || p.sample >= source.num_samples())
        throw Error("the plan refers to sample " + std::to_string(p.sample) +
                    " but the token source has " + std::to_string(source.num_samples()) +
                    " samples; plan the lengths of this source");
      const auto ids = source.input_ids(p.sample);
      const auto size = static_cast<int64_t>(ids.size());
      if (p.offset < 0 || p.length < 0 || p.offset + p.length > size)
        throw Error("sample " + std::to_string(p.sample) + " has " + std::to_string(size) +
                    " tokens but the plan takes tokens [" + std::to_string(p.offset) + ", " +
                    std::to_string(p.offset + p.length) +
                    "); plan the lengths of this source");
      // Only a piece as long as the capacity (truncated, or not the last of a split sample) may
      // end before its sample does; a shorter one means the sample grew since it was planned.
      if (plan.stats.capacity > 0 && p.offset + p.length < size && p.length < plan.stats.capacity)
        throw Error("sample " + std::to_string(p.sample) + " has " + std::to_string(size) +
                    " tokens but was planned with " + std::to_string(p.offset + p.length) +
                    " (its piece [" + std::to_string(p.offset) + ", " +
                    std::to_string(p.offset + p.length) + ") ends before it, shorter than the " +
                    "capacity " + std::to_string(plan.stats.capacity) +
                    "); plan the lengths of this source");
      const auto labels = source.labels(p.sample);
      if (!labels.empty() && labels.size() != ids.size())
        throw Error("sample " + std::to_string(p.sample) + " has " + std::to_string(size) +
                    " input_ids but " + std::to_string(labels.size()) +
                    " labels; give one label per token or none");
      row_tokens += p.length;
    }
    total += round_up(row_tokens, options.pad_to_multiple);
  }
  if (total > std::numeric_limits<int32_t>::max())
    throw Error("rows [" + std::to_string(row_first) + ", " + std::to_string(row_last) + ") hold " +
                std::to_string(total) +
                " tokens, more than cu_seqlens (int32) can address; build fewer rows per batch");
  return total;
}

}  // namespace

PackedBatch build_packed_batch(const PackPlan& plan, int64_t row_first, int64_t row_last,
                               const TokenSource& source, const BatchOptions& options) {
  const int64_t total = checked_total_tokens(plan, row_first, row_last, source, options);
  PackedBatch b;
  const auto t = static_cast<size_t>(total);
  b.input_ids.reserve(t);
  b.labels.reserve(t);
  b.position_ids.reserve(t);
  b.cu_seqlens.push_back(0);
  b.row_offsets.push_back(0);

  // Appends one segment; positions start at `first_position` (0 unless a split sample's
  // positions continue across pieces).
  auto append_segment = [&](std::span<const int32_t> ids, std::span<const int32_t> labels,
                            int64_t sample, int64_t offset, int64_t first_position) {
    for (size_t j = 0; j < ids.size(); ++j) {
      b.input_ids.push_back(ids[j]);
      // The first position's label would be predicted from the previous segment's last token
      // after the model's shift: ignore it so no target crosses a boundary.
      b.labels.push_back(j == 0 ? kIgnoreLabel : (labels.empty() ? ids[j] : labels[j]));
      b.position_ids.push_back(static_cast<int32_t>(first_position + static_cast<int64_t>(j)));
    }
    b.cu_seqlens.push_back(static_cast<int32_t>(b.input_ids.size()));
    b.segment_sample.push_back(sample);
    b.segment_offset.push_back(offset);
    b.max_seqlen = std::max(b.max_seqlen, static_cast<int32_t>(ids.size()));
  };

  for (int64_t r = row_first; r < row_last; ++r) {
    const size_t row_start = b.input_ids.size();
    for (const Piece& p : plan.row(r)) {
      const auto ids = source.input_ids(p.sample).subspan(static_cast<size_t>(p.offset),
                                                          static_cast<size_t>(p.length));
      auto labels = source.labels(p.sample);
      if (!labels.empty())
        labels = labels.subspan(static_cast<size_t>(p.offset), static_cast<size_t>(p.length));
      append_segment(ids, labels, p.sample, p.offset,
                     options.restart_positions_per_piece ? 0 : p.offset);
      ++b.num_samples;
    }
    const auto row_tokens = static_cast<int64_t>(b.input_ids.size() - row_start);
    const int64_t pad = round_up(row_tokens, options.pad_to_multiple) - row_tokens;
    if (pad > 0) {
      // Padding is a segment of its own: the kernel attends within it only, and its labels are
      // all ignored (the first by the segment rule, the rest below).
      const std::vector<int32_t> pad_ids(static_cast<size_t>(pad), options.pad_token_id);
      append_segment(pad_ids, {}, -1, 0, 0);
      std::fill(b.labels.end() - pad, b.labels.end(), kIgnoreLabel);
    }
    b.row_offsets.push_back(static_cast<int64_t>(b.input_ids.size()));
  }

  // Loss weights: per token, every labelled position weighs 1 / (labelled positions); per
  // sample, each segment with any labelled position weighs 1 / (such segments), spread evenly
  // over its labelled positions.
  b.loss_weight_per_token.assign(t, 0.0f);
  b.loss_weight_per_sample.assign(t, 0.0f);
  const size_t segments = b.segment_sample.size();
  std::vector<int64_t> labelled_in(segments, 0);
  int64_t labelled = 0;
  int64_t labelled_segments = 0;
  for (size_t s = 0; s < segments; ++s) {
    for (int32_t i = b.cu_seqlens[s]; i < b.cu_seqlens[s + 1]; ++i)
      labelled_in[s] += b.labels[static_cast<size_t>(i)] != kIgnoreLabel;
    labelled += labelled_in[s];
    labelled_segments += labelled_in[s] > 0;
  }
  for (size_t s = 0; s < segments; ++s) {
    for (int32_t i = b.cu_seqlens[s]; i < b.cu_seqlens[s + 1]; ++i) {
      if (b.labels[static_cast<size_t>(i)] == kIgnoreLabel) continue;
      b.loss_weight_per_token[static_cast<size_t>(i)] = static_cast<float>(1.0 / labelled);
      b.loss_weight_per_sample[static_cast<size_t>(i)] =
          static_cast<float>(1.0 / (static_cast<double>(labelled_segments) * labelled_in[s]));
    }
  }
  return b;
}

}  // namespace varpack
