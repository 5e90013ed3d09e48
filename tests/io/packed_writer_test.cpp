// Round trips: samples -> TokenStore -> plan -> packed JSONL and binary -> read back. Every source
// token lands exactly once (or is counted as truncated), rows match the plan, labels and
// positions follow batch.h, the binary file agrees with the JSONL one, and outputs are
// byte-identical from run to run. A failing write leaves no file.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "packed_rows.h"
#include "temp_dir.h"
#include "varpack/batch.h"
#include "varpack/error.h"
#include "varpack/io.h"
#include "varpack/pack.h"

namespace varpack {
namespace {

using testing::PackedRow;
using testing::read_file;
using testing::read_packed_jsonl;
using testing::TempDir;

// Random samples: lengths in [0, max_length], about half with labels (some of them -100).
TokenStore random_store(uint32_t seed, int n, int max_length) {
  std::mt19937 rng(seed);
  TokenStore store;
  std::vector<int32_t> ids, labels;
  for (int i = 0; i < n; ++i) {
    const int length = static_cast<int>(rng() % static_cast<uint32_t>(max_length + 1));
    ids.resize(static_cast<size_t>(length));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 50000);
    labels.clear();
    if (rng() % 2 == 0) {
      for (int j = 0; j < length; ++j) labels.push_back(rng() % 4 == 0 ? kIgnoreLabel : ids[static_cast<size_t>(j)] + 1);
    }
    store.add(ids, labels);
  }
  return store;
}

// Checks rows read back from a file against the plan and the source, token by token.
void check_rows(const std::vector<PackedRow>& rows, const PackPlan& plan, const TokenStore& store,
                int64_t capacity) {
  ASSERT_EQ(static_cast<int64_t>(rows.size()), plan.rows());
  std::vector<std::vector<int>> seen(static_cast<size_t>(store.num_samples()));
  for (int64_t s = 0; s < store.num_samples(); ++s) seen[static_cast<size_t>(s)].assign(static_cast<size_t>(store.length(s)), 0);
  int64_t placed = 0;
  for (int64_t r = 0; r < plan.rows(); ++r) {
    const PackedRow& row = rows[static_cast<size_t>(r)];
    const auto pieces = plan.row(r);
    const size_t size = row.input_ids.size();
    ASSERT_LE(static_cast<int64_t>(size), capacity);
    ASSERT_EQ(row.labels.size(), size);
    ASSERT_EQ(row.position_ids.size(), size);
    ASSERT_EQ(row.samples.size(), pieces.size());
    ASSERT_EQ(row.cu_seqlens.size(), pieces.size() + 1);
    ASSERT_EQ(row.cu_seqlens.front(), 0);
    ASSERT_EQ(static_cast<size_t>(row.cu_seqlens.back()), size);
    for (size_t p = 0; p < pieces.size(); ++p) {
      const Piece& piece = pieces[p];
      ASSERT_EQ(row.samples[p], (std::array<int64_t, 3>{piece.sample, piece.offset, piece.length}));
      ASSERT_EQ(row.cu_seqlens[p + 1] - row.cu_seqlens[p], piece.length);
      const auto ids = store.input_ids(piece.sample);
      const auto own_labels = store.labels(piece.sample);
      for (int64_t i = 0; i < piece.length; ++i) {
        const auto at = static_cast<size_t>(row.cu_seqlens[p] + i);
        const auto src = static_cast<size_t>(piece.offset + i);
        ASSERT_LT(src, ids.size());
        EXPECT_EQ(row.input_ids[at], ids[src]);
        EXPECT_EQ(row.position_ids[at], i);
        const int32_t label = own_labels.empty() ? ids[src] : own_labels[src];
        EXPECT_EQ(row.labels[at], i == 0 ? kIgnoreLabel : label) << "row " << r << " piece " << p;
        ++seen[static_cast<size_t>(piece.sample)][src];
      }
      placed += piece.length;
    }
  }
  // Every token exactly once, except those the plan counts as truncated (never seen at all).
  int64_t unseen = 0;
  for (const auto& marks : seen) {
    for (const int m : marks) {
      ASSERT_LE(m, 1);
      unseen += (m == 0);
    }
  }
  EXPECT_EQ(unseen, plan.stats.truncated_tokens);
  EXPECT_EQ(placed, plan.stats.tokens);
}

// The binary file must hold exactly what the JSONL rows hold.
void check_binary(const std::string& path, const std::vector<PackedRow>& rows,
                  const PackPlan& plan, const TokenStore& store) {
  const PackedFile file(path);
  ASSERT_EQ(file.num_rows(), static_cast<int64_t>(rows.size()));
  EXPECT_EQ(file.capacity(), plan.stats.capacity);
  EXPECT_EQ(file.num_samples(), store.num_samples());
  EXPECT_EQ(file.num_pieces(), static_cast<int64_t>(plan.pieces.size()));
  EXPECT_EQ(file.num_tokens(), plan.stats.tokens);
  EXPECT_EQ(std::vector<int64_t>(file.row_width().begin(), file.row_width().end()), plan.row_width);
  EXPECT_EQ(std::vector<int64_t>(file.row_pieces().begin(), file.row_pieces().end()), plan.row_begin);
  int64_t max_seqlen = 0;
  for (const Piece& p : plan.pieces) max_seqlen = std::max(max_seqlen, p.length);
  EXPECT_EQ(file.max_seqlen(), max_seqlen);
  for (int64_t r = 0; r < file.num_rows(); ++r) {
    const PackedRow& want = rows[static_cast<size_t>(r)];
    const PackedFile::Row got = file.row(r);
    ASSERT_EQ(std::vector<int32_t>(got.input_ids.begin(), got.input_ids.end()), want.input_ids);
    ASSERT_EQ(std::vector<int32_t>(got.labels.begin(), got.labels.end()), want.labels);
    ASSERT_EQ(std::vector<int32_t>(got.position_ids.begin(), got.position_ids.end()), want.position_ids);
    ASSERT_EQ(got.cu_seqlens, want.cu_seqlens);
    ASSERT_EQ(got.pieces.size(), 3 * want.samples.size());
    for (size_t p = 0; p < want.samples.size(); ++p) {
      for (size_t k = 0; k < 3; ++k) ASSERT_EQ(got.pieces[3 * p + k], want.samples[p][k]);
    }
  }
}

struct Case {
  const char* name;
  Algorithm algorithm;
  OverlongPolicy overlong;
  int max_length;
  int64_t capacity;
  bool shuffle;
};

class PackedRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(PackedRoundTrip, EveryTokenOnceAndFilesAgree) {
  const Case& c = GetParam();
  TempDir dir;
  for (const uint32_t seed : {1u, 2u, 3u}) {
    const TokenStore store = random_store(seed, 300, c.max_length);
    PackOptions options;
    options.capacity = c.capacity;
    options.algorithm = c.algorithm;
    options.overlong = c.overlong;
    options.shuffle_rows = c.shuffle;
    options.seed = seed;
    const PackPlan plan = plan_packing(store.lengths(), options);
    const std::string jsonl = dir.file("out.jsonl"), bin = dir.file("out.bin");
    write_packed(jsonl, OutputFormat::jsonl, plan, store);
    write_packed(bin, OutputFormat::binary, plan, store);
    const auto rows = read_packed_jsonl(jsonl);
    check_rows(rows, plan, store, c.capacity);
    check_binary(bin, rows, plan, store);
    check_packed_file(jsonl, jsonl, OutputFormat::jsonl, plan, store);
    check_packed_file(bin, bin, OutputFormat::binary, plan, store);

    // Same input, options and seed: byte-identical files.
    const std::string jsonl2 = dir.file("again.jsonl"), bin2 = dir.file("again.bin");
    const PackPlan again = plan_packing(store.lengths(), options);
    write_packed(jsonl2, OutputFormat::jsonl, again, store);
    write_packed(bin2, OutputFormat::binary, again, store);
    EXPECT_EQ(read_file(jsonl), read_file(jsonl2));
    EXPECT_EQ(read_file(bin), read_file(bin2));
    EXPECT_EQ(dir.listing(), (std::vector<std::string>{"again.bin", "again.jsonl", "out.bin", "out.jsonl"}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, PackedRoundTrip,
    ::testing::Values(
        Case{"bfd", Algorithm::bfd, OverlongPolicy::error, 200, 256, false},
        Case{"ffd_shuffled", Algorithm::ffd, OverlongPolicy::error, 200, 256, true},
        Case{"histogram", Algorithm::histogram, OverlongPolicy::error, 200, 256, false},
        Case{"fixed_padding", Algorithm::none, OverlongPolicy::error, 100, 128, false},
        Case{"dynamic_padding", Algorithm::dynamic, OverlongPolicy::error, 100, 128, false},
        Case{"truncate", Algorithm::bfd, OverlongPolicy::truncate, 300, 64, false},
        Case{"split", Algorithm::bfd, OverlongPolicy::split, 300, 64, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PackedFiles, ZeroLengthSamplesOnlyGiveEmptyFiles) {
  TempDir dir;
  TokenStore store;
  store.add({});
  store.add({});
  PackOptions options;
  options.capacity = 16;
  const PackPlan plan = plan_packing(store.lengths(), options);
  ASSERT_EQ(plan.rows(), 0);
  write_packed(dir.file("e.jsonl"), OutputFormat::jsonl, plan, store);
  write_packed(dir.file("e.bin"), OutputFormat::binary, plan, store);
  EXPECT_EQ(read_file(dir.file("e.jsonl")), "");
  const PackedFile file(dir.file("e.bin"));
  EXPECT_EQ(file.num_rows(), 0);
  EXPECT_EQ(file.num_tokens(), 0);
  EXPECT_EQ(file.num_samples(), 2);
}

// A source with fewer samples than the plan refers to: the batch builder throws while writing.
TEST(PackedFiles, AnErrorWhileWritingLeavesNoFile) {
  TempDir dir;
  const TokenStore store = random_store(5, 50, 30);
  PackOptions options;
  options.capacity = 64;
  const PackPlan plan = plan_packing(store.lengths(), options);
  TokenStore fewer;
  fewer.add(store.input_ids(0));
  for (const auto format : {OutputFormat::jsonl, OutputFormat::binary}) {
    EXPECT_THROW(write_packed(dir.file("out"), format, plan, fewer), Error);
  }
  EXPECT_TRUE(dir.listing().empty());
}

TEST(PackedFile, RejectsCorruptFiles) {
  TempDir dir;
  const TokenStore store = random_store(9, 40, 30);
  PackOptions options;
  options.capacity = 64;
  const PackPlan plan = plan_packing(store.lengths(), options);
  const std::string good = dir.file("good.bin");
  write_packed(good, OutputFormat::binary, plan, store);
  const std::string bytes = read_file(good);
  auto expect_rejected = [&](const std::string& content, const std::string& phrase) {
    testing::write_file(dir.file("bad.bin"), content);
    try {
      PackedFile file(dir.file("bad.bin"));
      FAIL() << phrase;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  expect_rejected(bytes.substr(0, 100), "shorter than the header");
  expect_rejected(bytes.substr(0, bytes.size() - 8), "truncated");
  expect_rejected("XARPACKB" + bytes.substr(8), "bad magic");
  std::string version = bytes;
  version[8] = 9;
  expect_rejected(version, "version 9");
  // The last piece's length no longer matches cu_seqlens. The pieces section's offset is the
  // seventh of the section offsets at byte 72 (docs/FORMAT.md).
  std::string piece = bytes;
  uint64_t pieces_at = 0;
  std::memcpy(&pieces_at, bytes.data() + 72 + 8 * 6, 8);
  piece[pieces_at + 8 * (3 * plan.pieces.size() - 1)] ^= 1;
  expect_rejected(piece, "disagrees with cu_seqlens");
}

// A piece table crafted so that cu_seqlens steps by the piece lengths only modulo 2^64: 256 of
// the 300 pieces claim 2^56 tokens (within the header's limits), which adds up to 2^64, i.e. 0,
// and the last piece makes up the rest. Summed in int64 that overflowed; wrapped, it passed every
// check and rows came out with sizes near 2^63.
TEST(PackedFile, RejectsPieceLengthsThatWrapAround) {
  TempDir dir;
  TokenStore store;
  for (int32_t i = 0; i < 300; ++i) store.add(std::vector<int32_t>{i});
  PackOptions options;
  options.capacity = 64;
  const PackPlan plan = plan_packing(store.lengths(), options);
  const std::string path = dir.file("wrapped.bin");
  write_packed(path, OutputFormat::binary, plan, store);
  std::string bytes = read_file(path);
  // Element `index` of int64 section `section`, whose offset is at byte 72 + 8 * section.
  auto at = [&](int section, int64_t index) {
    uint64_t offset = 0;
    std::memcpy(&offset, bytes.data() + 72 + 8 * section, 8);
    return bytes.data() + offset + 8 * static_cast<uint64_t>(index);
  };
  constexpr int cu_seqlens = 3, row_offsets = 4, row_pieces = 5, pieces = 6;
  const auto num_pieces = static_cast<int64_t>(plan.pieces.size());
  ASSERT_EQ(num_pieces, 300);
  constexpr int64_t kHuge = int64_t{1} << 56;
  std::vector<int64_t> cu{0};
  for (int64_t p = 0; p < num_pieces; ++p) {
    // 256 * 2^56 wraps to 0; 43 pieces of 1 token and one of 257 make up the 300 tokens.
    const int64_t length = p < 256 ? kHuge : p < 299 ? 1 : 257;
    std::memcpy(at(pieces, 3 * p + 2), &length, 8);
    cu.push_back(static_cast<int64_t>(static_cast<uint64_t>(cu.back()) + static_cast<uint64_t>(length)));
    std::memcpy(at(cu_seqlens, p + 1), &cu.back(), 8);
  }
  ASSERT_EQ(cu.back(), 300);
  for (int64_t r = 1; r <= plan.rows(); ++r) {
    int64_t start = 0;  // row r starts at piece row_pieces[r], so at token cu_seqlens[that]
    std::memcpy(&start, at(row_pieces, r), 8);
    std::memcpy(at(row_offsets, r), &cu[static_cast<size_t>(start)], 8);
  }
  std::memcpy(bytes.data() + 56, &kHuge, 8);  // max_seqlen: the longest piece
  testing::write_file(path, bytes);
  try {
    const PackedFile file(path);
    FAIL() << "accepted, with row 0 of " << file.row(0).input_ids.size() << " tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("piece 0 disagrees with cu_seqlens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace varpack

namespace varpack {
namespace {

// check_packed_file must catch a wrong token, label, position or piece, in both formats.
TEST(CheckPackedFile, CatchesTamperedFiles) {
  TempDir dir;
  const TokenStore store = random_store(11, 60, 40);
  PackOptions options;
  options.capacity = 64;
  options.overlong = OverlongPolicy::split;
  const PackPlan plan = plan_packing(store.lengths(), options);
  const std::string jsonl = dir.file("p.jsonl"), bin = dir.file("p.bin");
  write_packed(jsonl, OutputFormat::jsonl, plan, store);
  write_packed(bin, OutputFormat::binary, plan, store);
  auto expect_caught = [&](const std::string& path, OutputFormat format, const std::string& content,
                           const std::string& phrase) {
    testing::write_file(path, content);
    try {
      check_packed_file(path, "the file", format, plan, store);
      FAIL() << phrase;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  const std::string text = read_file(jsonl);
  // The first row's first label must be -100, its first position 0.
  std::string label = text;
  label.replace(label.find("\"labels\":[-100"), 14, "\"labels\":[-101");
  expect_caught(dir.file("t1.jsonl"), OutputFormat::jsonl, label, "row 0: token 0 of piece 0");
  std::string position = text;
  position.replace(position.find("\"position_ids\":[0"), 17, "\"position_ids\":[5");
  expect_caught(dir.file("t2.jsonl"), OutputFormat::jsonl, position, "row 0: token 0 of piece 0");
  // A missing last row.
  const std::string cut = text.substr(0, text.rfind('\n', text.size() - 2) + 1);
  expect_caught(dir.file("t3.jsonl"), OutputFormat::jsonl, cut, "rows, the plan has");
  // A token id changed in the binary file: the first token of the input_ids section (byte 192).
  std::string bytes = read_file(bin);
  bytes[192] ^= 1;
  expect_caught(dir.file("t.bin"), OutputFormat::binary, bytes, "row 0: token 0 of piece 0");
  // A plan that does not match the file.
  PackPlan other = plan;
  std::swap(other.pieces.front(), other.pieces.back());
  EXPECT_THROW(check_packed_file(bin, bin, OutputFormat::binary, other, store), Error);
}

}  // namespace
}  // namespace varpack
