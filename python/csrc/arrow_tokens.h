// ArrowTokens: Arrow data's samples as a TokenSource (arrow_tokens.cpp says how).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "varpack/batch.h"

class ArrowTokens final : public varpack::TokenSource {
 public:
  // `ids`: a list of 1-D int32 numpy arrays, chunk c holding the tokens of its `rows[c]` rows back
  // to back; `labels`: None or a list aligned with `ids`; `lengths`: every row's token count.
  // The arrays are kept (and with them the Arrow buffers they view).
  ArrowTokens(std::string name, pybind11::list ids, pybind11::object labels, std::vector<int64_t> rows,
              std::vector<int64_t> lengths, bool zero_copy);

  int64_t num_samples() const override { return static_cast<int64_t>(lengths_.size()); }
  std::span<const int32_t> input_ids(int64_t sample) const override {
    const auto s = static_cast<size_t>(sample);
    return {ids_[s], static_cast<size_t>(lengths_[s])};
  }
  // Empty without a labels column: the batch builder then uses the input_ids.
  std::span<const int32_t> labels(int64_t sample) const override {
    if (labels_.empty()) return {};
    const auto s = static_cast<size_t>(sample);
    return {labels_[s], static_cast<size_t>(lengths_[s])};
  }

  const std::vector<int64_t>& lengths() const { return lengths_; }
  int64_t num_tokens() const { return num_tokens_; }
  bool zero_copy() const { return zero_copy_; }  // every chunk a view of an Arrow buffer
  bool has_labels() const { return !labels_chunks_.is_none(); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  pybind11::list ids_chunks_;
  pybind11::object labels_chunks_;
  std::vector<int64_t> lengths_;
  std::vector<const int32_t*> ids_;
  std::vector<const int32_t*> labels_;
  int64_t num_tokens_ = 0;
  bool zero_copy_ = false;
};

void bind_arrow_tokens(pybind11::module_& m);
