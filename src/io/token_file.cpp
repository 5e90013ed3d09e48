// TokenFile: the samples of a memory-mapped token file. Checks that every sample lies inside the
// token array and every token is an id in [0, 2^31), and converts tokens that are not int32.
#include <bit>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "mapped_file.h"
#include "varpack/error.h"
#include "varpack/token_files.h"

namespace varpack {
namespace {

// The readers view file bytes as little-endian integers in place.
static_assert(std::endian::native == std::endian::little, "token files are read on little-endian hosts only");

template <typename T>
[[noreturn]] void bad_token(const std::string& name, int64_t sample, int64_t token, T value) {
  throw Error(name + ": sample " + std::to_string(sample) + ", token " + std::to_string(token) +
              ": value " + std::to_string(value) + " is not a token id in [0, 2^31)");
}

// Checks each sample's tokens and, unless they are int32 already, writes them into `out` (`total`
// int32 values), sample after sample, and rewrites `begin` to the samples' positions there.
// `progress` hears of the tokens done now and then (reading a file of many GB takes seconds).
template <typename T>
void check_and_convert(const std::string& name, const void* raw, std::span<const int64_t> lengths,
                       std::vector<int64_t>& begin, std::vector<int32_t>& out, int64_t total,
                       const ProgressFn& progress) {
  constexpr int64_t kProgressEvery = int64_t{1} << 22;  // tokens
  int64_t done = 0, reported = 0;
  const T* data = static_cast<const T*>(raw);
  constexpr bool kIsInt32 = std::is_same_v<T, int32_t>;
  constexpr bool kCanBeNegative = std::is_signed_v<T>;
  constexpr bool kCanBeTooLarge = sizeof(T) >= 4 && !kIsInt32;
  if constexpr (!kIsInt32) out.resize(static_cast<size_t>(total));
  int64_t next = 0;
  for (size_t s = 0; s < begin.size(); ++s) {
    const T* tokens = data + begin[s];
    const int64_t length = lengths[s];
    if constexpr (kCanBeNegative || kCanBeTooLarge) {
      for (int64_t j = 0; j < length; ++j) {
        const T v = tokens[j];
        if ((kCanBeNegative && v < 0) ||
            (kCanBeTooLarge && static_cast<uint64_t>(v) > std::numeric_limits<int32_t>::max())) {
          bad_token(name, static_cast<int64_t>(s), j, v);
        }
      }
    }
    if constexpr (!kIsInt32) {
      int32_t* dst = out.data() + next;
      for (int64_t j = 0; j < length; ++j) dst[j] = static_cast<int32_t>(tokens[j]);
      begin[s] = next;
      next += length;
    }
    done += length;
    if (progress && done - reported >= kProgressEvery) {
      progress(static_cast<uint64_t>(done), static_cast<uint64_t>(total));
      reported = done;
    }
  }
}

}  // namespace

TokenFile::TokenFile(Raw raw, const ProgressFn& progress)
    : name_(std::move(raw.name)), maps_(std::move(raw.maps)), begin_(std::move(raw.begin)),
      lengths_(std::move(raw.lengths)) {
  for (size_t s = 0; s < lengths_.size(); ++s) {
    const int64_t b = begin_[s], n = lengths_[s];
    if (b < 0 || n < 0 || b > raw.size || n > raw.size - b) {
      throw Error(name_ + ": sample " + std::to_string(s) + " (tokens " + std::to_string(b) + " + " +
                  std::to_string(n) + ") lies outside the " + std::to_string(raw.size) + " tokens of the data");
    }
    num_tokens_ += n;
  }
  switch (raw.dtype) {
    case Dtype::u8: check_and_convert<uint8_t>(name_, raw.data, lengths_, begin_, converted_, num_tokens_, progress); break;
    case Dtype::i8: check_and_convert<int8_t>(name_, raw.data, lengths_, begin_, converted_, num_tokens_, progress); break;
    case Dtype::i16: check_and_convert<int16_t>(name_, raw.data, lengths_, begin_, converted_, num_tokens_, progress); break;
    case Dtype::u16: check_and_convert<uint16_t>(name_, raw.data, lengths_, begin_, converted_, num_tokens_, progress); break;
    case Dtype::i32: check_and_convert<int32_t>(name_, raw.data, lengths_, begin_, converted_, num_tokens_, progress); break;
    case Dtype::u32: check_and_convert<uint32_t>(name_, raw.data, lengths_, begin_, converted_, num_tokens_, progress); break;
    case Dtype::i64: check_and_convert<int64_t>(name_, raw.data, lengths_, begin_, converted_, num_tokens_, progress); break;
  }
  zero_copy_ = raw.dtype == Dtype::i32;
  if (zero_copy_) {
    tokens_ = {static_cast<const int32_t*>(raw.data), static_cast<size_t>(raw.size)};
  } else {
    tokens_ = converted_;
    maps_.clear();  // the tokens now live in converted_; the files are no longer needed
  }
}

TokenFile::TokenFile(TokenFile&&) noexcept = default;
TokenFile& TokenFile::operator=(TokenFile&&) noexcept = default;
TokenFile::~TokenFile() = default;

}  // namespace varpack
