// PackedFile: maps a packed binary file (docs/FORMAT.md) read-only and checks it before handing
// out spans: header fields, section bounds and alignment, and that the row and piece tables agree
// with each other (O(rows + pieces); the token arrays themselves are not scanned).
#include <algorithm>
#include <cstring>
#include <string>

#include "binary_format.h"
#include "mapped_file.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

namespace bf = binary_format;

template <typename T>
std::span<const T> section(const unsigned char* base, const bf::Header& h, int s) {
  return {reinterpret_cast<const T*>(base + h.offset[s]), static_cast<size_t>(h.counts()[s])};
}

}  // namespace

PackedFile::PackedFile(const std::string& path)
    : path_(path), map_(std::make_unique<MappedFile>(path)) {
  auto fail = [&](const std::string& what) -> Error { return Error(path_ + ": " + what); };
  const size_t map_size = map_->size();
  if (map_size < bf::kHeaderBytes) {
    throw fail("not a varpack packed binary file (" + std::to_string(map_size) +
               " bytes, shorter than the header)");
  }
  const unsigned char* b = map_->data();
  if (std::memcmp(b, bf::kMagic, sizeof(bf::kMagic)) != 0) {
    throw fail("not a varpack packed binary file (bad magic)");
  }
  const auto version = bf::get<uint32_t>(b, bf::kVersionAt);
  if (version != bf::kVersion) {
    throw fail("format version " + std::to_string(version) + "; this varpack reads version " +
               std::to_string(bf::kVersion));
  }
  const auto header_bytes = bf::get<uint32_t>(b, bf::kHeaderBytesAt);
  if (header_bytes != bf::kHeaderBytes) {
    throw fail("corrupt header: it says it is " + std::to_string(header_bytes) + " bytes long; version " +
               std::to_string(bf::kVersion) + " headers are " + std::to_string(bf::kHeaderBytes));
  }
  bf::Header h;
  h.capacity = bf::get<int64_t>(b, bf::kCapacityAt);
  h.num_samples = bf::get<int64_t>(b, bf::kNumSamplesAt);
  h.num_rows = bf::get<int64_t>(b, bf::kNumRowsAt);
  h.num_pieces = bf::get<int64_t>(b, bf::kNumPiecesAt);
  h.num_tokens = bf::get<int64_t>(b, bf::kNumTokensAt);
  h.max_seqlen = bf::get<int64_t>(b, bf::kMaxSeqlenAt);
  h.file_bytes = bf::get<uint64_t>(b, bf::kFileBytesAt);
  constexpr int64_t kLimit = int64_t{1} << 56;  // keeps every size computation below overflow
  for (int64_t v : {h.num_samples, h.num_rows, h.num_pieces, h.num_tokens, h.max_seqlen}) {
    if (v < 0 || v > kLimit) throw fail("corrupt header (a count is out of range)");
  }
  if (h.file_bytes != map_size) {
    throw fail("truncated or corrupt: the header says " + std::to_string(h.file_bytes) +
               " bytes, the file has " + std::to_string(map_size));
  }
  // The offsets must be exactly those the layout rule gives for these counts.
  bf::Header expected = h;
  bf::lay_out(expected);
  for (int s = 0; s < bf::kSections; ++s) {
    h.offset[s] = bf::get<uint64_t>(b, bf::kOffsetsAt + 8 * static_cast<size_t>(s));
    if (h.offset[s] != expected.offset[s] || expected.file_bytes != h.file_bytes) {
      throw fail("corrupt header (section " + std::to_string(s) + " is not where the counts put it)");
    }
  }
  capacity_ = h.capacity;
  num_samples_ = h.num_samples;
  max_seqlen_ = h.max_seqlen;
  input_ids_ = section<int32_t>(b, h, bf::input_ids);
  labels_ = section<int32_t>(b, h, bf::labels);
  position_ids_ = section<int32_t>(b, h, bf::position_ids);
  cu_seqlens_ = section<int64_t>(b, h, bf::cu_seqlens);
  row_offsets_ = section<int64_t>(b, h, bf::row_offsets);
  row_pieces_ = section<int64_t>(b, h, bf::row_pieces);
  pieces_ = section<int64_t>(b, h, bf::pieces);
  row_width_ = section<int64_t>(b, h, bf::row_width);

  // Tables: cu_seqlens runs 0..T by the piece lengths; rows cover the pieces in order and
  // start where their first piece starts; every piece names a sample of the input.
  if (cu_seqlens_[0] != 0) throw fail("corrupt: cu_seqlens[0] is not 0");
  int64_t longest = 0;
  for (int64_t p = 0; p < h.num_pieces; ++p) {
    const int64_t sample = pieces_[3 * p], length = pieces_[3 * p + 2];
    // cu_seqlens_[p] is in [0, T] here, so the length is held against what is left of T before
    // the sum is formed: a crafted table of lengths up to 2^56 could otherwise overflow it and
    // wrap around to pass (rows then had sizes near 2^63).
    if (sample < 0 || sample >= h.num_samples || pieces_[3 * p + 1] < 0 || length < 0 ||
        length > h.max_seqlen || length > h.num_tokens - cu_seqlens_[p] ||
        cu_seqlens_[p + 1] != cu_seqlens_[p] + length) {
      throw fail("corrupt: piece " + std::to_string(p) + " disagrees with cu_seqlens");
    }
    longest = std::max(longest, length);
  }
  if (longest != h.max_seqlen) {
    throw fail("corrupt header: max_seqlen is " + std::to_string(h.max_seqlen) + ", the longest piece has " +
               std::to_string(longest) + " tokens");
  }
  if (cu_seqlens_[h.num_pieces] != h.num_tokens) throw fail("corrupt: cu_seqlens does not end at the token count");
  if (row_pieces_[0] != 0 || row_offsets_[0] != 0 || row_pieces_[h.num_rows] != h.num_pieces) {
    throw fail("corrupt: the row tables do not cover the pieces");
  }
  for (int64_t r = 0; r < h.num_rows; ++r) {
    if (row_pieces_[r + 1] < row_pieces_[r] || row_pieces_[r + 1] > h.num_pieces ||
        row_offsets_[r + 1] != cu_seqlens_[row_pieces_[r + 1]]) {
      throw fail("corrupt: row " + std::to_string(r) + " disagrees with its pieces");
    }
  }
}

PackedFile::~PackedFile() = default;

PackedFile::Row PackedFile::row(int64_t r) const {
  if (r < 0 || r >= num_rows()) {
    throw Error(path_ + ": row " + std::to_string(r) + " out of range [0, " +
                std::to_string(num_rows()) + ")");
  }
  const auto begin = static_cast<size_t>(row_offsets_[r]);
  const auto size = static_cast<size_t>(row_offsets_[r + 1] - row_offsets_[r]);
  Row row{input_ids_.subspan(begin, size), labels_.subspan(begin, size),
          position_ids_.subspan(begin, size), {}, {}};
  const int64_t p0 = row_pieces_[r], p1 = row_pieces_[r + 1];
  for (int64_t p = p0; p <= p1; ++p) {
    row.cu_seqlens.push_back(static_cast<int32_t>(cu_seqlens_[p] - row_offsets_[r]));
  }
  row.pieces = pieces_.subspan(static_cast<size_t>(3 * p0), static_cast<size_t>(3 * (p1 - p0)));
  return row;
}

}  // namespace varpack
