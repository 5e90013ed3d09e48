// read_npy_tokens: a flat .npy of token ids plus a .npy of int64 sample offsets, both mapped
// read-only. The NPY header is parsed only as far as the format needs (numpy's NEP 1 /
// "format.py" description): the magic "\x93NUMPY", version 1.0 (2-byte header length) or 2.0 / 3.0
// (4-byte), and a Python dict literal with exactly the keys 'descr', 'fortran_order' and 'shape'.
// Anything else is rejected with a message naming the file.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "mapped_file.h"
#include "token_file_raw.h"
#include "varpack/error.h"
#include "varpack/token_files.h"

namespace varpack {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

struct NpyArray {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;  // the array's bytes, after the header
  size_t data_bytes = 0;                // bytes in the file after the header
};

// A recursive-descent reader of the header dict: string keys; values a quoted string, True /
// False, or a tuple of non-negative integers. That is all numpy writes.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), text_(text) {}

  void parse(NpyArray& out) {
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        out.descr = quoted();
        has_descr = true;
      } else if (key == "fortran_order") {
        out.fortran_order = boolean();
        has_order = true;
      } else if (key == "shape") {
        out.shape = tuple();
        has_shape = true;
      } else {
        fail("unexpected key '" + key + "' (an NPY header has only 'descr', 'fortran_order', 'shape')");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != text_.size()) fail("text after the header dict");
    if (!has_descr || !has_order || !has_shape) {
      fail("the header dict lacks '" + std::string(!has_descr ? "descr" : !has_order ? "fortran_order" : "shape") + "'");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ": not a valid NPY header: " + what);
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "' at byte " + std::to_string(pos_) + " of the header");
    ++pos_;
  }
  std::string quoted() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a quoted string");
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair<std::string_view, bool>{"True", true}, {"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("'fortran_order' is not True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (!peek(')')) {
      int64_t v = 0;
      size_t digits = 0;
      for (; pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; ++pos_, ++digits) {
        if (v > (int64_t{1} << 56)) fail("a dimension in 'shape' is too large");
        v = v * 10 + (text_[pos_] - '0');
      }
      if (digits == 0) fail("'shape' is not a tuple of non-negative integers");
      dims.push_back(v);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }

  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0;
};

NpyArray parse_npy(const MappedFile& file) {
  const std::string& path = file.path();
  const unsigned char* b = file.data();
  const size_t size = file.size();
  if (size < 10 || std::memcmp(b, kMagic.data(), kMagic.size()) != 0) {
    throw Error(path + ": not an NPY file (no \\x93NUMPY magic at its start)");
  }
  const int major = b[6], minor = b[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    throw Error(path + ": NPY format version " + std::to_string(major) + "." + std::to_string(minor) +
                " is not supported (1.0, 2.0 and 3.0 are)");
  }
  // Version 1.0 stores the header length in 2 bytes; 2.0 and 3.0 in 4 (little-endian).
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (size < 8 + length_bytes) throw Error(path + ": truncated NPY header");
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= static_cast<size_t>(b[8 + i]) << (8 * i);
  const size_t data_at = 8 + length_bytes + header_len;
  if (data_at > size) {
    throw Error(path + ": truncated NPY header (" + std::to_string(header_len) + " bytes announced, " +
                std::to_string(size - 8 - length_bytes) + " in the file)");
  }
  NpyArray a;
  HeaderParser(path, {reinterpret_cast<const char*>(b) + 8 + length_bytes, header_len}).parse(a);
  a.data = b + data_at;
  a.data_bytes = size - data_at;
  return a;
}

// The element type of a 1-D little-endian C-order array of one of `accepted` descrs; throws naming
// the file (and `role`) otherwise. Also checks the file holds exactly the array's bytes.
TokenFile::Dtype check_array(const MappedFile& file, const NpyArray& a, const char* role,
                             std::initializer_list<std::string_view> accepted) {
  const std::string& path = file.path();
  std::string names;
  for (const auto d : accepted) names += (names.empty() ? "" : ", ") + std::string(d);
  if (a.descr.size() >= 2 && a.descr[0] == '>') {
    throw Error(path + ": " + role + " are big-endian ('" + a.descr + "'); save them little-endian (" +
                "array.astype(array.dtype.newbyteorder('<')))");
  }
  bool ok = false;
  for (const auto d : accepted) ok = ok || a.descr == d;
  if (!ok) {
    const bool is_float = a.descr.size() >= 2 && (a.descr[1] == 'f' || a.descr[1] == 'c');
    throw Error(path + ": " + role + " have dtype '" + a.descr + "'" +
                (is_float ? " (floating point, not token ids)" : "") + "; accepted: " + names);
  }
  if (a.fortran_order) {
    throw Error(path + ": " + role + " are stored in Fortran order; save a C-order array (numpy.ascontiguousarray)");
  }
  if (a.shape.size() != 1) {
    throw Error(path + ": " + role + " must be a 1-D array, got " + std::to_string(a.shape.size()) +
                "-D; flatten it (array.reshape(-1)) and describe the samples with offsets");
  }
  const size_t item = static_cast<size_t>(a.descr[2] - '0');
  const size_t need = static_cast<size_t>(a.shape[0]) * item;
  if (a.data_bytes < need) {
    throw Error(path + ": truncated data: the header says " + std::to_string(a.shape[0]) + " values (" +
                std::to_string(need) + " bytes), the file has " + std::to_string(a.data_bytes) + " bytes after it");
  }
  if (a.data_bytes > need) {
    throw Error(path + ": " + std::to_string(a.data_bytes - need) + " bytes after the " +
                std::to_string(a.shape[0]) + " values the header announces");
  }
  if (reinterpret_cast<uintptr_t>(a.data) % item != 0) {
    throw Error(path + ": the data is not aligned to its " + std::to_string(item) + "-byte elements");
  }
  using D = TokenFile::Dtype;
  if (a.descr == "<i4") return D::i32;
  if (a.descr == "<i8") return D::i64;
  if (a.descr == "<u2") return D::u16;
  return D::u32;
}

}  // namespace

std::string default_offsets_path(std::string_view tokens_path) {
  std::string_view stem = tokens_path;
  if (stem.ends_with(".npy")) stem.remove_suffix(4);
  return std::string(stem) + ".offsets.npy";
}

TokenFile::Raw read_npy_raw(const std::string& tokens_path, const std::string& offsets_path) {
  TokenFile::Raw raw;
  raw.name = tokens_path;
  auto tokens_file = std::make_unique<MappedFile>(tokens_path);
  auto offsets_file = std::make_unique<MappedFile>(offsets_path);
  const NpyArray tokens = parse_npy(*tokens_file);
  const NpyArray offsets = parse_npy(*offsets_file);
  raw.dtype = check_array(*tokens_file, tokens, "token ids", {"<i4", "<i8", "<u2", "<u4"});
  check_array(*offsets_file, offsets, "offsets", {"<i8"});
  raw.data = tokens.data;
  raw.size = tokens.shape[0];

  const auto* off = reinterpret_cast<const int64_t*>(offsets.data);
  const int64_t n = offsets.shape[0] - 1;
  if (n < 0) throw Error(offsets_path + ": offsets are empty; they need n + 1 entries for n samples, from 0");
  if (off[0] != 0) throw Error(offsets_path + ": offsets[0] is " + std::to_string(off[0]) + ", must be 0");
  raw.begin.resize(static_cast<size_t>(n));
  raw.lengths.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (off[i + 1] < off[i]) {
      throw Error(offsets_path + ": offsets are not monotone: offsets[" + std::to_string(i + 1) + "] = " +
                  std::to_string(off[i + 1]) + " < offsets[" + std::to_string(i) + "] = " + std::to_string(off[i]));
    }
    if (off[i + 1] > raw.size) {
      throw Error(offsets_path + ": offsets[" + std::to_string(i + 1) + "] = " + std::to_string(off[i + 1]) +
                  " is past the end of the " + std::to_string(raw.size) + " tokens in " + tokens_path);
    }
    raw.begin[static_cast<size_t>(i)] = off[i];
    raw.lengths[static_cast<size_t>(i)] = off[i + 1] - off[i];
  }
  if (off[n] != raw.size) {
    throw Error(offsets_path + ": the last offset is " + std::to_string(off[n]) + " but " + tokens_path +
                " holds " + std::to_string(raw.size) + " tokens; they must match");
  }
  raw.maps.push_back(std::move(tokens_file));  // the offsets were copied; only the tokens stay mapped
  return raw;
}

TokenFile read_npy_tokens(const std::string& tokens_path, const std::string& offsets_path) {
  return TokenFile(read_npy_raw(tokens_path, offsets_path));
}

}  // namespace varpack
