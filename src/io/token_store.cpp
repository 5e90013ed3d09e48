// TokenStore: samples' tokens (and labels, where a sample has them) in flat buffers with offsets.
#include <string>

#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

[[noreturn]] void refuse(int64_t sample, const char* field, size_t index, int32_t value, bool labels) {
  throw Error("sample " + std::to_string(sample) + ": " + field + "[" + std::to_string(index) + "] is " +
              std::to_string(value) + "; " + field + " must be integers in [0, 2147483647]" +
              (labels ? " or -100 (ignored)" : ""));
}

}  // namespace

void TokenStore::add(std::span<const int32_t> input_ids, std::span<const int32_t> labels) {
  if (!labels.empty() && labels.size() != input_ids.size()) {
    throw Error("sample " + std::to_string(num_samples()) + ": labels has " +
                std::to_string(labels.size()) + " values but input_ids has " +
                std::to_string(input_ids.size()) + "; labels must align one to one with input_ids");
  }
  // int32 holds nothing above 2^31 - 1: only negative values can be out of range.
  for (size_t i = 0; i < input_ids.size(); ++i) {
    if (input_ids[i] < 0) refuse(num_samples(), "input_ids", i, input_ids[i], false);
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 && labels[i] != kIgnoreLabel) refuse(num_samples(), "labels", i, labels[i], true);
  }
  tokens_.insert(tokens_.end(), input_ids.begin(), input_ids.end());
  token_begin_.push_back(static_cast<int64_t>(tokens_.size()));
  if (labels.empty()) {
    label_begin_.push_back(-1);
  } else {
    label_begin_.push_back(static_cast<int64_t>(labels_.size()));
    labels_.insert(labels_.end(), labels.begin(), labels.end());
  }
}

std::span<const int32_t> TokenStore::input_ids(int64_t sample) const {
  return {tokens_.data() + token_begin_[sample], static_cast<size_t>(length(sample))};
}

std::span<const int32_t> TokenStore::labels(int64_t sample) const {
  const int64_t begin = label_begin_[sample];
  if (begin < 0) return {};
  return {labels_.data() + begin, static_cast<size_t>(length(sample))};
}

std::vector<int64_t> TokenStore::lengths() const {
  std::vector<int64_t> out(static_cast<size_t>(num_samples()));
  for (int64_t i = 0; i < num_samples(); ++i) out[static_cast<size_t>(i)] = length(i);
  return out;
}

}  // namespace varpack
