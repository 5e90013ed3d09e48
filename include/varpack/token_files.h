// Token data that ML pipelines already keep on disk, read as a TokenSource without a JSONL step:
// a flat .npy array of token ids with a second .npy of sample offsets, and Megatron-LM's indexed
// dataset (PREFIX.bin + PREFIX.idx). The files are memory-mapped read-only; their samples have no
// labels of their own (the batch builder then uses the input_ids as labels, as for JSONL records
// without "labels").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "varpack/batch.h"
#include "varpack/io.h"  // ProgressFn

namespace varpack {

class MappedFile;  // src/io/mapped_file.h: a read-only mapping of a whole file

// The samples of a token file. int32 tokens are served straight from the mapping; any other width
// is checked and converted once into an int32 buffer (4 bytes a token, as a TokenStore), because
// a TokenSource hands out int32 spans. Spans stay valid while the TokenFile lives.
class TokenFile final : public TokenSource {
 public:
  TokenFile(TokenFile&&) noexcept;
  TokenFile& operator=(TokenFile&&) noexcept;
  ~TokenFile() override;

  int64_t num_samples() const override { return static_cast<int64_t>(lengths_.size()); }
  std::span<const int32_t> input_ids(int64_t sample) const override {
    return tokens_.subspan(static_cast<size_t>(begin_[static_cast<size_t>(sample)]),
                           static_cast<size_t>(lengths_[static_cast<size_t>(sample)]));
  }
  std::span<const int32_t> labels(int64_t) const override { return {}; }

  std::span<const int64_t> lengths() const { return lengths_; }  // what plan_packing takes
  int64_t num_tokens() const { return num_tokens_; }              // sum of the lengths
  bool zero_copy() const { return zero_copy_; }  // tokens read in place from the mapping
  const std::string& name() const { return name_; }      // the input, as messages name it

  // What the readers hand over (see token_file.cpp): the mappings to keep alive, the samples'
  // token ranges in elements of the raw array, and that array with its element type.
  enum class Dtype { u8, i8, i16, u16, i32, u32, i64 };
  struct Raw {
    std::string name;
    std::vector<std::unique_ptr<MappedFile>> maps;
    const void* data = nullptr;  // little-endian elements of `dtype`, aligned to their size
    int64_t size = 0;            // elements
    Dtype dtype = Dtype::i32;
    std::vector<int64_t> begin;    // per sample: first element
    std::vector<int64_t> lengths;  // per sample: elements; begin + length <= size (checked)
  };
  // Checks every token is an id in [0, 2^31) (throws varpack::Error naming the sample, the token
  // and its value) and converts non-int32 tokens; `progress` hears of the tokens done.
  explicit TokenFile(Raw raw, const ProgressFn& progress = {});

 private:
  std::string name_;
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::vector<int32_t> converted_;
  std::span<const int32_t> tokens_;
  std::vector<int64_t> begin_;
  std::vector<int64_t> lengths_;
  int64_t num_tokens_ = 0;
  bool zero_copy_ = false;
};

// A flat .npy of token ids (1-D, C order, little-endian int32, int64, uint16 or uint32) holding
// the samples back to back, and a .npy of int64 offsets, n + 1 of them, from 0, non-decreasing,
// ending at the token count: sample i is tokens[offsets[i]:offsets[i+1]]. Throws varpack::Error
// naming the file and what is wrong (not an NPY file, big-endian, Fortran order, not 1-D, a dtype
// that is not accepted, truncated data, offsets not monotone or past the end, a token id out of
// range).
TokenFile read_npy_tokens(const std::string& tokens_path, const std::string& offsets_path);

// Where the offsets of DATA.npy are found when no path is given: DATA.offsets.npy beside it.
std::string default_offsets_path(std::string_view tokens_path);

// Megatron-LM's indexed dataset PREFIX.bin + PREFIX.idx ("MMIDIDX" index, version 1). Samples are
// its sequences. Integer dtypes only; a float dtype, a bad magic or version, a truncated index,
// or a sequence outside the .bin throws varpack::Error naming the file.
TokenFile read_megatron(const std::string& prefix);

// The token-file inputs the command and Python take by name: "megatron:PREFIX" or "PREFIX.bin"
// (Megatron), "DATA.npy" (offsets from default_offsets_path). Anything else is not a token file.
bool is_token_file(std::string_view input);
// The files a token-file input reads: DATA.npy and its offsets, or PREFIX.bin and PREFIX.idx.
std::vector<std::string> token_file_paths(std::string_view input);
// Throws varpack::Error if !is_token_file; `progress` hears of the tokens checked (of all).
TokenFile open_token_file(const std::string& input, const ProgressFn& progress = {});

// The sample lengths of a token-file input, from its offsets or index alone: the layout is checked
// as open_token_file checks it, but no token is read (so none is range-checked), and nothing is
// converted: what `varpack stats` needs, at the cost of the index, on inputs of any size.
std::vector<int64_t> token_file_lengths(const std::string& input);

}  // namespace varpack
