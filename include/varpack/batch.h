// The batch builder: plan rows + token data -> PackedBatch, the flat ("THD") layout a varlen
// attention kernel consumes. It never re-plans; it only copies tokens where the plan says.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "varpack/pack.h"

namespace varpack {

inline constexpr int32_t kIgnoreLabel = -100;  // the label PyTorch's cross-entropy ignores

// Where the tokens come from. labels() returns an empty span when the sample has no labels of its
// own (then labels are the input_ids); otherwise it has the same length as input_ids.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual std::span<const int32_t> input_ids(int64_t sample) const = 0;
  virtual std::span<const int32_t> labels(int64_t sample) const = 0;
};

// A TokenSource over vectors held in memory, for tests and small inputs. `labels` is empty (no
// sample has labels of its own) or has one entry per sample, each empty or as long as its ids.
class VectorTokenSource final : public TokenSource {
 public:
  explicit VectorTokenSource(std::vector<std::vector<int32_t>> input_ids,
                             std::vector<std::vector<int32_t>> labels = {})
      : input_ids_(std::move(input_ids)), labels_(std::move(labels)) {}
  int64_t num_samples() const override { return static_cast<int64_t>(input_ids_.size()); }
  std::span<const int32_t> input_ids(int64_t sample) const override {
    return input_ids_[static_cast<size_t>(sample)];
  }
  std::span<const int32_t> labels(int64_t sample) const override {
    if (labels_.empty()) return {};
    return labels_[static_cast<size_t>(sample)];
  }

 private:
  std::vector<std::vector<int32_t>> input_ids_;
  std::vector<std::vector<int32_t>> labels_;
};

struct BatchOptions {
  int64_t pad_to_multiple = 1;  // pad every row's token count up to a multiple of this
  int32_t pad_token_id = 0;
  // Positions of a split sample's later pieces: restart at 0 (default: each piece is its own
  // sample) or continue from the piece's offset in the source sample.
  bool restart_positions_per_piece = true;
};

// Labels follow Hugging Face's DataCollatorWithFlattening: aligned with input_ids (the model shifts
// them), kIgnoreLabel at the first position of every segment so no target crosses a boundary, and
// a sample's own labels kept where given (prompt tokens already kIgnoreLabel stay so).
//
// Padding added by pad_to_multiple forms its own segment at the end of its row (so the kernel
// never mixes it with a sample), with segment_sample -1, label kIgnoreLabel and loss weight 0.
struct PackedBatch {
  std::vector<int32_t> input_ids;      // [T]
  std::vector<int32_t> labels;         // [T]
  std::vector<int32_t> position_ids;   // [T], restart at 0 per segment
  std::vector<int32_t> cu_seqlens;     // [segments + 1]
  std::vector<int64_t> segment_sample; // [segments], source sample index, -1 for padding
  std::vector<int64_t> segment_offset; // [segments], offset of the piece in its source sample
  std::vector<int64_t> row_offsets;    // [rows + 1], token offset where each row starts
  // Loss weights on label positions; each vector sums to 1 over the batch (0 where the label is
  // kIgnoreLabel). Per-token: every labelled token weighs the same. Per-sample: every segment
  // with labels weighs the same, split evenly among its labelled tokens.
  std::vector<float> loss_weight_per_token;   // [T]
  std::vector<float> loss_weight_per_sample;  // [T]
  int32_t max_seqlen = 0;  // longest segment, a host int known before any device work
  int64_t num_samples = 0; // segments that hold sample tokens (padding segments excluded)
};

// Builds the batch of plan rows [row_first, row_last). Throws varpack::Error if the source has
// fewer samples than the plan refers to or a sample is shorter than its pieces (naming it), or if
// the batch would pass 2^31 - 1 tokens (cu_seqlens is int32).
PackedBatch build_packed_batch(const PackPlan& plan, int64_t row_first, int64_t row_last,
                               const TokenSource& source, const BatchOptions& options = {});

}  // namespace varpack
