// Token data past 4 GiB without writing 4 GiB: sparse files (holes read as zeros and take no disk)
// with a few real tokens at offsets beyond 2^32 bytes or 2^32 tokens, to check that no reader or
// writer keeps an offset in 32 bits. A Megatron .bin of 4.5 GiB, packed and read back; a .npy of
// more than 2^32 tokens (16 GiB sparse), whose lengths are read from the offsets alone; and a
// packed binary file of more than 2^32 tokens (48 GiB sparse), opened and read at its end.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "token_file_writers.h"
#include "varpack/error.h"
#include "varpack/io.h"
#include "varpack/pack.h"
#include "varpack/token_files.h"

namespace varpack {
namespace {

using testing::bytes_of;
using testing::TempDir;
using testing::write_file;

constexpr int64_t k4GiB = int64_t{1} << 32;

// Makes `path` `size` bytes long without writing (a hole), then writes `bytes` at `offset`.
void sparse_write(const std::string& path, int64_t size, int64_t offset, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::ftruncate(fd, size), 0) << path << ": cannot make a sparse file of " << size << " bytes";
  if (!bytes.empty()) {
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), offset), static_cast<ssize_t>(bytes.size()));
  }
  ::close(fd);
}

TEST(LargeOffsets, MegatronSequencesPast4GiBArePackedFromTheRightBytes) {
  TempDir dir;
  const std::string prefix = dir.file("corpus");
  const std::vector<int32_t> far{11, 12, 13, 14, 15}, last{21, 22, 23};
  const int64_t far_at = k4GiB + 4096, last_at = k4GiB + k4GiB / 8 - 12;  // bytes, int32 aligned
  sparse_write(prefix + ".bin", last_at + 12, far_at, bytes_of(far));
  sparse_write(prefix + ".bin", last_at + 12, last_at, bytes_of(last));
  sparse_write(prefix + ".bin", last_at + 12, 0, bytes_of(std::vector<int32_t>{1, 2}));
  write_file(prefix + ".idx", testing::megatron_index(4, {2, 5, 3}, {0, far_at, last_at}, {0, 1, 2, 3}));

  const TokenFile file = open_token_file("megatron:" + prefix);
  ASSERT_EQ(file.num_samples(), 3);
  EXPECT_TRUE(file.zero_copy());
  EXPECT_EQ(std::vector<int32_t>(file.input_ids(1).begin(), file.input_ids(1).end()), far);
  EXPECT_EQ(std::vector<int32_t>(file.input_ids(2).begin(), file.input_ids(2).end()), last);

  PackOptions options;
  options.capacity = 8;
  const PackPlan plan = plan_packing(file.lengths(), options);
  const std::string out = dir.file("packed.bin");
  write_packed(out, OutputFormat::binary, plan, file);
  check_packed_file(out, out, OutputFormat::binary, plan, file);  // every token against the source
  const PackedFile packed(out);
  EXPECT_EQ(packed.num_tokens(), 10);
}

TEST(LargeOffsets, NpyLengthsPast2To32TokensComeFromTheOffsets) {
  TempDir dir;
  const int64_t tokens = k4GiB + 16;
  const std::string path = dir.file("tokens.npy");
  testing::write_npy_raw(path, testing::npy_dict("<i4", static_cast<size_t>(tokens)), "");
  const int64_t header = static_cast<int64_t>(testing::read_file(path).size());
  sparse_write(path, header + 4 * tokens, header + 4 * (tokens - 1), bytes_of(std::vector<int32_t>{7}));
  testing::write_npy(dir.file("tokens.offsets.npy"), std::vector<int64_t>{0, k4GiB + 8, tokens});

  EXPECT_EQ(token_file_lengths(path), (std::vector<int64_t>{k4GiB + 8, 8}));
  // A wrong last offset is still caught at that size.
  testing::write_npy(dir.file("tokens.offsets.npy"), std::vector<int64_t>{0, k4GiB + 8, tokens + 1});
  EXPECT_THROW(token_file_lengths(path), Error);
}

// Little-endian integer `v` written into `file` at `at`.
template <typename T>
void put(std::string& file, size_t at, T v) {
  std::memcpy(file.data() + at, &v, sizeof(T));
}

TEST(LargeOffsets, PackedBinaryPast2To32TokensIsReadAtItsEnd) {
  // R rows of one piece of L tokens each: R * L = 2^32 + 2^20 tokens, tables of a few KiB.
  constexpr int64_t L = int64_t{1} << 20, R = 4097, T = R * L;
  auto align = [](int64_t x) { return (x + 63) / 64 * 64; };
  const int64_t sizes[8] = {4 * T, 4 * T, 4 * T, 8 * (R + 1), 8 * (R + 1), 8 * (R + 1), 8 * 3 * R, 8 * R};
  int64_t offsets[8], end = 192;
  for (int s = 0; s < 8; ++s) {
    offsets[s] = align(end);
    end = offsets[s] + sizes[s];
  }
  std::string header(192, '\0');
  std::memcpy(header.data(), "VARPACKB", 8);
  put<uint32_t>(header, 8, 1);
  put<uint32_t>(header, 12, 192);
  for (const auto& [at, v] : std::vector<std::pair<size_t, int64_t>>{{16, L}, {24, R}, {32, R}, {40, R}, {48, T}, {56, L}, {64, end}}) {
    put<int64_t>(header, at, v);
  }
  for (int s = 0; s < 8; ++s) put<uint64_t>(header, 72 + 8 * static_cast<size_t>(s), static_cast<uint64_t>(offsets[s]));
  std::vector<int64_t> cu(R + 1), rows(R + 1), pieces, widths(R, L);
  for (int64_t r = 0; r <= R; ++r) {
    cu[r] = rows[r] = r * L;
    if (r < R) pieces.insert(pieces.end(), {r, 0, L});
  }
  std::vector<int64_t> row_pieces(R + 1);
  for (int64_t r = 0; r <= R; ++r) row_pieces[r] = r;

  TempDir dir;
  const std::string path = dir.file("big.bin");
  sparse_write(path, end, 0, header);
  const std::vector<int32_t> tail{5, 6, 7};  // the last three tokens, 2^34 bytes into the file
  sparse_write(path, end, offsets[0] + 4 * (T - 3), bytes_of(tail));
  sparse_write(path, end, offsets[3], bytes_of(cu));
  sparse_write(path, end, offsets[4], bytes_of(rows));
  sparse_write(path, end, offsets[5], bytes_of(row_pieces));
  sparse_write(path, end, offsets[6], bytes_of(pieces));
  sparse_write(path, end, offsets[7], bytes_of(widths));

  const PackedFile file(path);
  EXPECT_EQ(file.num_tokens(), T);
  const PackedFile::Row row = file.row(R - 1);
  ASSERT_EQ(static_cast<int64_t>(row.input_ids.size()), L);
  EXPECT_EQ(row.input_ids[L - 3], 5);
  EXPECT_EQ(row.input_ids[L - 1], 7);
  EXPECT_EQ(row.cu_seqlens, (std::vector<int32_t>{0, static_cast<int32_t>(L)}));
  EXPECT_EQ(row.pieces[0], R - 1);
}

}  // namespace
}  // namespace varpack
