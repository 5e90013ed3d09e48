// The layout of the packed binary format (docs/FORMAT.md), shared by its writer and its reader:
// a 192-byte header, then eight little-endian arrays, each starting at a multiple of 64 bytes.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

namespace varpack::binary_format {

static_assert(std::endian::native == std::endian::little,
              "the packed binary format is little-endian and is written by memcpy");

inline constexpr char kMagic[8] = {'V', 'A', 'R', 'P', 'A', 'C', 'K', 'B'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kHeaderBytes = 192;
inline constexpr uint64_t kAlignment = 64;

// The arrays in file order; each entry's element size in bytes and element count.
enum Section : int { input_ids, labels, position_ids, cu_seqlens, row_offsets, row_pieces,
                     pieces, row_width, kSections };
inline constexpr std::array<uint64_t, kSections> kElementBytes = {4, 4, 4, 8, 8, 8, 8, 8};

struct Header {
  int64_t capacity = 0;
  int64_t num_samples = 0;
  int64_t num_rows = 0;
  int64_t num_pieces = 0;
  int64_t num_tokens = 0;
  int64_t max_seqlen = 0;
  uint64_t file_bytes = 0;
  std::array<uint64_t, kSections> offset{};

  std::array<uint64_t, kSections> counts() const {
    const auto t = static_cast<uint64_t>(num_tokens), p = static_cast<uint64_t>(num_pieces),
               r = static_cast<uint64_t>(num_rows);
    return {t, t, t, p + 1, r + 1, r + 1, 3 * p, r};
  }
};

// Byte offsets of the header fields (docs/FORMAT.md has the same table).
inline constexpr size_t kVersionAt = 8, kHeaderBytesAt = 12, kCapacityAt = 16,
                        kNumSamplesAt = 24, kNumRowsAt = 32, kNumPiecesAt = 40,
                        kNumTokensAt = 48, kMaxSeqlenAt = 56, kFileBytesAt = 64,
                        kOffsetsAt = 72;  // 8 x uint64, one per section, in Section order

inline uint64_t align_up(uint64_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; }

// Fills `header.offset` and `header.file_bytes` from the counts: sections follow each other in
// Section order, each at the next multiple of 64 bytes; the file ends where the last one ends.
inline void lay_out(Header& header) {
  const auto counts = header.counts();
  uint64_t at = kHeaderBytes;
  for (int s = 0; s < kSections; ++s) {
    header.offset[s] = align_up(at);
    at = header.offset[s] + counts[s] * kElementBytes[s];
  }
  header.file_bytes = at;
}

template <typename T>
void put(unsigned char* bytes, size_t at, T value) { std::memcpy(bytes + at, &value, sizeof(T)); }
template <typename T>
T get(const unsigned char* bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes + at, sizeof(T));
  return value;
}

inline std::array<unsigned char, kHeaderBytes> encode(const Header& h) {
  std::array<unsigned char, kHeaderBytes> b{};  // reserved bytes stay zero
  std::memcpy(b.data(), kMagic, sizeof(kMagic));
  put<uint32_t>(b.data(), kVersionAt, kVersion);
  put<uint32_t>(b.data(), kHeaderBytesAt, static_cast<uint32_t>(kHeaderBytes));
  put<int64_t>(b.data(), kCapacityAt, h.capacity);
  put<int64_t>(b.data(), kNumSamplesAt, h.num_samples);
  put<int64_t>(b.data(), kNumRowsAt, h.num_rows);
  put<int64_t>(b.data(), kNumPiecesAt, h.num_pieces);
  put<int64_t>(b.data(), kNumTokensAt, h.num_tokens);
  put<int64_t>(b.data(), kMaxSeqlenAt, h.max_seqlen);
  put<uint64_t>(b.data(), kFileBytesAt, h.file_bytes);
  for (int s = 0; s < kSections; ++s) put<uint64_t>(b.data(), kOffsetsAt + 8 * s, h.offset[s]);
  return b;
}

}  // namespace varpack::binary_format
