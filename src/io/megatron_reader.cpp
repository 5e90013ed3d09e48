// read_megatron: Megatron-LM's indexed dataset, PREFIX.idx + PREFIX.bin, both mapped read-only.
// The index (Megatron-LM megatron/core/datasets/indexed_dataset.py, _IndexWriter), little-endian:
//   9 bytes magic "MMIDIDX\0\0", u64 version (1), u8 dtype code, u64 sequence count S,
//   u64 document count D, int32 lengths[S] (tokens), int64 pointers[S] (byte offsets into .bin),
//   int64 document indices[D] (sequence index ranges of the documents, 0 .. S),
//   and in multimodal datasets int8 modes[S]. Samples are the sequences.
#include <cstring>
#include <string>

#include "mapped_file.h"
#include "token_file_raw.h"
#include "varpack/error.h"
#include "varpack/token_files.h"

namespace varpack {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

template <typename T>
T get(const unsigned char* b, size_t at) {
  T v;
  std::memcpy(&v, b + at, sizeof(T));
  return v;
}

struct DtypeInfo {
  TokenFile::Dtype dtype;
  int64_t bytes;
};

// Megatron's DType codes; 6 (float64) and 7 (float32) cannot hold token ids.
DtypeInfo dtype_of(const std::string& idx_path, uint8_t code) {
  using D = TokenFile::Dtype;
  switch (code) {
    case 1: return {D::u8, 1};
    case 2: return {D::i8, 1};
    case 3: return {D::i16, 2};
    case 4: return {D::i32, 4};
    case 5: return {D::i64, 8};
    case 8: return {D::u16, 2};
    case 6:
    case 7:
      throw Error(idx_path + ": dtype code " + std::to_string(code) + " (" + (code == 6 ? "float64" : "float32") +
                  ") is floating point; token ids must be integers (codes 1-5, 8)");
    default:
      throw Error(idx_path + ": unknown dtype code " + std::to_string(code) + " (Megatron uses 1-8)");
  }
}

}  // namespace

TokenFile::Raw read_megatron_raw(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  const MappedFile idx(idx_path);
  auto bin = std::make_unique<MappedFile>(bin_path);
  const unsigned char* b = idx.data();
  if (idx.size() < kHeaderBytes || std::memcmp(b, kMagic, sizeof(kMagic)) != 0) {
    throw Error(idx_path + ": not a Megatron index (no MMIDIDX magic at its start)");
  }
  const auto version = get<uint64_t>(b, 9);
  if (version != 1) throw Error(idx_path + ": index version " + std::to_string(version) + "; only version 1 is known");
  const DtypeInfo dtype = dtype_of(idx_path, b[17]);
  const auto count = get<uint64_t>(b, 18), docs = get<uint64_t>(b, 26);
  constexpr uint64_t kLimit = uint64_t{1} << 48;  // keeps the size arithmetic below from overflowing
  const uint64_t tables = count * 4 + count * 8 + docs * 8;
  if (count > kLimit || docs > kLimit || idx.size() < kHeaderBytes + tables) {
    throw Error(idx_path + ": truncated: " + std::to_string(count) + " sequences and " + std::to_string(docs) +
                " documents need " + std::to_string(kHeaderBytes + tables) + " bytes, the file has " +
                std::to_string(idx.size()));
  }
  const uint64_t extra = idx.size() - kHeaderBytes - tables;
  if (extra != 0 && extra != count) {  // `count` bytes: the modes of a multimodal dataset
    throw Error(idx_path + ": " + std::to_string(extra) + " unexpected bytes after the document indices");
  }
  const size_t lengths_at = kHeaderBytes, pointers_at = lengths_at + 4 * count, docs_at = pointers_at + 8 * count;

  // Document indices are not needed for samples, but a broken table means a broken index.
  for (uint64_t d = 0; d < docs; ++d) {
    const auto v = get<int64_t>(b, docs_at + 8 * d);
    const int64_t prev = d == 0 ? 0 : get<int64_t>(b, docs_at + 8 * (d - 1));
    if (v < prev || v > static_cast<int64_t>(count) || (d == 0 && v != 0)) {
      throw Error(idx_path + ": corrupt document index " + std::to_string(d) + " (" + std::to_string(v) +
                  "); document indices must run from 0 up to the sequence count " + std::to_string(count));
    }
  }

  TokenFile::Raw raw;
  raw.name = bin_path;
  raw.dtype = dtype.dtype;
  raw.data = bin->data();
  raw.size = static_cast<int64_t>(bin->size()) / dtype.bytes;
  if (static_cast<int64_t>(bin->size()) % dtype.bytes != 0) {
    throw Error(bin_path + ": " + std::to_string(bin->size()) + " bytes is not a whole number of " +
                std::to_string(dtype.bytes) + "-byte tokens");
  }
  raw.begin.resize(count);
  raw.lengths.resize(count);
  for (uint64_t s = 0; s < count; ++s) {
    const auto length = get<int32_t>(b, lengths_at + 4 * s);
    const auto pointer = get<int64_t>(b, pointers_at + 8 * s);
    if (length < 0 || pointer < 0 || pointer % dtype.bytes != 0 || length > raw.size ||
        pointer / dtype.bytes > raw.size - length) {
      throw Error(idx_path + ": sequence " + std::to_string(s) + " (byte " + std::to_string(pointer) + ", " +
                  std::to_string(length) + " tokens) lies outside the " + std::to_string(raw.size) +
                  " tokens of " + bin_path + " or is not aligned to its tokens");
    }
    raw.begin[s] = pointer / dtype.bytes;
    raw.lengths[s] = length;
  }
  raw.maps.push_back(std::move(bin));
  return raw;
}

TokenFile read_megatron(const std::string& prefix) { return TokenFile(read_megatron_raw(prefix)); }

}  // namespace varpack
