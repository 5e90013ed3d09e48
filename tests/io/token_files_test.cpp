// The token-file readers: flat .npy + offsets (files written by a tiny NPY writer) and Megatron
// .bin/.idx (bytes laid out per Megatron-LM's index writer). Every sample must come back exactly,
// for every accepted dtype, with empty samples and single samples; every malformed file must be
// rejected with a message naming the file and what is wrong.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "token_file_writers.h"
#include "varpack/batch.h"
#include "varpack/error.h"
#include "varpack/pack.h"
#include "varpack/token_files.h"

namespace varpack {
namespace {

using testing::bytes_of;
using testing::megatron_index;
using testing::npy_dict;
using testing::TempDir;
using testing::write_file;
using testing::write_npy;
using testing::write_npy_raw;
using Samples = std::vector<std::vector<int32_t>>;

// Random samples with ids below `vocab`, including empty ones.
Samples random_samples(int n, int max_length, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  Samples samples(static_cast<size_t>(n));
  for (auto& s : samples) {
    s.resize(rng() % 4 == 0 ? 0 : rng() % static_cast<uint32_t>(max_length + 1));
    for (auto& t : s) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  }
  return samples;
}

void expect_samples(const TokenFile& file, const Samples& samples) {
  ASSERT_EQ(file.num_samples(), static_cast<int64_t>(samples.size()));
  int64_t tokens = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto ids = file.input_ids(static_cast<int64_t>(i));
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()), samples[i]) << "sample " << i;
    EXPECT_EQ(file.lengths()[i], static_cast<int64_t>(samples[i].size()));
    EXPECT_TRUE(file.labels(static_cast<int64_t>(i)).empty());
    tokens += static_cast<int64_t>(samples[i].size());
  }
  EXPECT_EQ(file.num_tokens(), tokens);
}

// `read` must throw varpack::Error whose message holds every one of `parts`.
void expect_error(const std::function<void()>& read, std::initializer_list<std::string> parts) {
  try {
    read();
    ADD_FAILURE() << "no error; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

template <typename T>
void check_npy_round_trip(const Samples& samples, bool zero_copy) {
  TempDir dir;
  const std::string data = dir.file("data.npy"), offsets = dir.file("data.offsets.npy");
  testing::write_npy_samples<T>(data, offsets, samples);
  const TokenFile file = read_npy_tokens(data, offsets);
  expect_samples(file, samples);
  EXPECT_EQ(file.zero_copy(), zero_copy);
  expect_samples(open_token_file(data), samples);  // offsets found beside it by convention
}

TEST(NpyTokens, RoundTripsEveryAcceptedDtype) {
  const Samples samples = random_samples(200, 50, 60000, 1);
  check_npy_round_trip<int32_t>(samples, true);
  check_npy_round_trip<int64_t>(samples, false);
  check_npy_round_trip<uint16_t>(samples, false);
  check_npy_round_trip<uint32_t>(samples, false);
}

TEST(NpyTokens, EdgeCases) {
  check_npy_round_trip<int32_t>({{2147483647, 0, 5}}, true);  // one sample, the largest id
  check_npy_round_trip<int64_t>({{}, {2147483647}, {}}, false);
  check_npy_round_trip<uint16_t>({{65535}}, false);
  check_npy_round_trip<int32_t>({}, true);  // no samples at all
  check_npy_round_trip<uint32_t>({{}, {}}, false);
}

TEST(NpyTokens, ReadsVersion2And3Headers) {
  for (const int major : {2, 3}) {
    TempDir dir;
    write_npy(dir.file("t.npy"), std::vector<int32_t>{4, 5, 6}, major);
    write_npy(dir.file("o.npy"), std::vector<int64_t>{0, 1, 3}, major);
    expect_samples(read_npy_tokens(dir.file("t.npy"), dir.file("o.npy")), {{4}, {5, 6}});
  }
}

TEST(NpyTokens, RejectsMalformedTokenFiles) {
  TempDir dir;
  const std::string t = dir.file("t.npy"), o = dir.file("o.npy");
  write_npy(o, std::vector<int64_t>{0, 2});
  const auto read = [&] { read_npy_tokens(t, o); };
  const std::string two = bytes_of(std::vector<int32_t>{1, 2});
  const struct {
    std::string dict, data, message;
  } cases[] = {
      {npy_dict(">i4", 2), two, "big-endian"},
      {npy_dict("<i4", 2, true), two, "Fortran order"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), }", two, "1-D array, got 2-D"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (), }", two, "1-D array, got 0-D"},
      {npy_dict("<f4", 2), two, "floating point"},
      {npy_dict("<i2", 2), two, "dtype '<i2'"},
      {npy_dict("|u1", 2), two, "accepted: <i4, <i8, <u2, <u4"},
      {npy_dict("<i4", 3), two, "truncated data"},
      {npy_dict("<i4", 1), two, "bytes after the 1 values"},
      {"{'descr': '<i4', 'shape': (2,), }", two, "lacks 'fortran_order'"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", two, "unexpected key 'extra'"},
      {"{'descr': '<i4', 'fortran_order': Maybe, 'shape': (2,), }", two, "not True or False"},
      {"['descr']", two, "expected '{'"},
  };
  for (const auto& c : cases) {
    write_npy_raw(t, c.dict, c.data);
    expect_error(read, {t, c.message});
  }
  write_file(t, "not numpy at all");
  expect_error(read, {t, "not an NPY file"});
  write_file(t, std::string("\x93NUMPY\x04\x00", 8) + "xxxxxxxx");
  expect_error(read, {t, "version 4.0"});
  write_file(t, std::string("\x93NUMPY\x01\x00\xff\x00", 10) + "{}");
  expect_error(read, {t, "truncated NPY header"});
  std::remove(t.c_str());
  expect_error(read, {t, "cannot open"});
}

TEST(NpyTokens, RejectsBadOffsets) {
  TempDir dir;
  const std::string t = dir.file("t.npy"), o = dir.file("o.npy");
  write_npy(t, std::vector<int32_t>{1, 2, 3, 4});
  const auto read = [&] { read_npy_tokens(t, o); };
  const struct {
    std::vector<int64_t> offsets;
    std::string message;
  } cases[] = {
      {{}, "offsets are empty"},
      {{1, 4}, "offsets[0] is 1"},
      {{0, 3, 2, 4}, "not monotone: offsets[2] = 2 < offsets[1] = 3"},
      {{0, 2, 5}, "offsets[2] = 5 is past the end of the 4 tokens"},
      {{0, 2, 3}, "the last offset is 3"},
  };
  for (const auto& c : cases) {
    write_npy(o, c.offsets);
    expect_error(read, {o, c.message});
  }
  write_npy(o, std::vector<int32_t>{0, 4});
  expect_error(read, {o, "offsets have dtype '<i4'"});
  expect_error([&] { read_npy_tokens(t, dir.file("missing.npy")); }, {dir.file("missing.npy"), "cannot open"});
  expect_error([&] { open_token_file(t); }, {dir.file("t.offsets.npy"), "cannot open"});
}

TEST(NpyTokens, RejectsTokenIdsOutOfRange) {
  TempDir dir;
  const std::string t = dir.file("t.npy"), o = dir.file("o.npy");
  write_npy(o, std::vector<int64_t>{0, 1, 3});
  write_npy(t, std::vector<int64_t>{5, 7, int64_t{1} << 31});
  expect_error([&] { read_npy_tokens(t, o); }, {t, "sample 1, token 1: value 2147483648"});
  write_npy(t, std::vector<int64_t>{5, -3, 0});
  expect_error([&] { read_npy_tokens(t, o); }, {t, "sample 1, token 0: value -3"});
  write_npy(t, std::vector<int32_t>{-1, 0, 0});
  expect_error([&] { read_npy_tokens(t, o); }, {t, "sample 0, token 0: value -1"});
  write_npy(t, std::vector<uint32_t>{1, 4000000000u, 0});
  expect_error([&] { read_npy_tokens(t, o); }, {t, "sample 1, token 0: value 4000000000"});
}

template <typename T>
void check_megatron_round_trip(uint8_t code, const Samples& samples) {
  TempDir dir;
  const std::string prefix = dir.file("corpus_text_document");
  testing::write_megatron<T>(prefix, code, samples);
  const TokenFile file = read_megatron(prefix);
  expect_samples(file, samples);
  EXPECT_EQ(file.zero_copy(), code == 4);
  expect_samples(open_token_file("megatron:" + prefix), samples);
  expect_samples(open_token_file(prefix + ".bin"), samples);
}

TEST(MegatronTokens, RoundTripsEveryIntegerDtype) {
  check_megatron_round_trip<uint8_t>(1, random_samples(100, 40, 256, 2));
  check_megatron_round_trip<int8_t>(2, random_samples(100, 40, 128, 3));
  check_megatron_round_trip<int16_t>(3, random_samples(100, 40, 32768, 4));
  check_megatron_round_trip<int32_t>(4, random_samples(100, 40, 1 << 30, 5));
  check_megatron_round_trip<int64_t>(5, random_samples(100, 40, 1 << 30, 6));
  check_megatron_round_trip<uint16_t>(8, random_samples(100, 40, 65536, 7));
}

TEST(MegatronTokens, EdgeCases) {
  check_megatron_round_trip<uint16_t>(8, {{1, 2, 3}});  // one sample
  check_megatron_round_trip<int32_t>(4, {{}, {}, {7}, {}});
  check_megatron_round_trip<int32_t>(4, {});
  check_megatron_round_trip<uint16_t>(8, {{}});  // an empty .bin
}

TEST(MegatronTokens, ReadsSequencesOutOfOrderAndMultimodalModes) {
  TempDir dir;
  const std::string prefix = dir.file("d");
  write_file(prefix + ".bin", bytes_of(std::vector<uint16_t>{10, 11, 12, 13, 14}));
  // Sequence 0 is the tail of the .bin, sequence 1 its head; two documents; modes after the table.
  write_file(prefix + ".idx", megatron_index(8, {2, 3}, {6, 0}, {0, 1, 2}, 1, std::string("\0\1", 2)));
  expect_samples(read_megatron(prefix), {{13, 14}, {10, 11, 12}});
}

TEST(MegatronTokens, RejectsMalformedIndexes) {
  TempDir dir;
  const std::string prefix = dir.file("d"), idx = prefix + ".idx", bin = prefix + ".bin";
  write_file(bin, bytes_of(std::vector<int32_t>{1, 2, 3, 4}));
  const auto read = [&] { read_megatron(prefix); };
  const std::string good = megatron_index(4, {1, 3}, {0, 4}, {0, 2});
  const struct {
    std::string bytes, file, message;
  } cases[] = {
      {"MMIDIDY" + good.substr(7), idx, "no MMIDIDX magic"},
      {good.substr(0, 20), idx, "no MMIDIDX magic"},  // shorter than the header
      {megatron_index(4, {1, 3}, {0, 4}, {0, 2}, 2), idx, "index version 2"},
      {megatron_index(6, {1, 3}, {0, 4}, {0, 2}), idx, "float64) is floating point"},
      {megatron_index(7, {1, 3}, {0, 4}, {0, 2}), idx, "float32) is floating point"},
      {megatron_index(9, {1, 3}, {0, 4}, {0, 2}), idx, "unknown dtype code 9"},
      {good.substr(0, good.size() - 1), idx, "truncated: 2 sequences and 2 documents"},
      {good + "xyz", idx, "3 unexpected bytes"},
      {megatron_index(4, {1, 4}, {0, 4}, {0, 2}), idx, "sequence 1 (byte 4, 4 tokens) lies outside the 4 tokens"},
      {megatron_index(4, {1, 3}, {0, 2}, {0, 2}), idx, "sequence 1 (byte 2, 3 tokens)"},  // not aligned
      {megatron_index(4, {1, -1}, {0, 4}, {0, 2}), idx, "sequence 1"},
      {megatron_index(4, {1, 3}, {0, 4}, {0, 3}), idx, "corrupt document index 1 (3)"},
      {megatron_index(4, {1, 3}, {0, 4}, {1, 2}), idx, "corrupt document index 0 (1)"},
  };
  for (const auto& c : cases) {
    write_file(idx, c.bytes);
    expect_error(read, {c.file, c.message});
  }
  write_file(idx, good);
  write_file(bin, bytes_of(std::vector<int32_t>{1, 2, 3, 4}) + "x");
  expect_error(read, {bin, "not a whole number of 4-byte tokens"});
  write_file(bin, bytes_of(std::vector<int32_t>{1, 2, -3, 4}));
  expect_error(read, {bin, "sample 1, token 1: value -3"});
  write_file(idx, megatron_index(5, {1, 1}, {0, 8}, {0, 2}));
  write_file(bin, bytes_of(std::vector<int64_t>{1, int64_t{1} << 40}));
  expect_error(read, {bin, "sample 1, token 0: value 1099511627776"});
  std::remove(bin.c_str());
  expect_error(read, {bin, "cannot open"});
  expect_error([&] { read_megatron(dir.file("absent")); }, {dir.file("absent.idx"), "cannot open"});
}

TEST(TokenFileInput, RecognisesTheNamedForms) {
  EXPECT_TRUE(is_token_file("megatron:/data/corpus_text_document"));
  EXPECT_TRUE(is_token_file("corpus.bin"));
  EXPECT_TRUE(is_token_file("tokens.npy"));
  EXPECT_FALSE(is_token_file("data.jsonl"));
  EXPECT_FALSE(is_token_file("profile:report"));
  EXPECT_EQ(default_offsets_path("dir/tokens.npy"), "dir/tokens.offsets.npy");
  expect_error([] { open_token_file("data.jsonl"); }, {"data.jsonl", "not a token file"});
}

// token_file_lengths: the lengths open_token_file gives, without reading the tokens (so an
// out-of-range id passes) but with the same checks of the layout.
TEST(TokenFileInput, LengthsAloneFromTheOffsetsOrIndex) {
  TempDir dir;
  const Samples samples = random_samples(120, 60, 60000, 9);
  std::vector<int64_t> expected;
  for (const auto& s : samples) expected.push_back(static_cast<int64_t>(s.size()));
  testing::write_npy_samples<uint16_t>(dir.file("d.npy"), dir.file("d.offsets.npy"), samples);
  testing::write_megatron<uint16_t>(dir.file("m"), 8, samples);
  for (const std::string& input : {dir.file("d.npy"), "megatron:" + dir.file("m"), dir.file("m.bin")}) {
    EXPECT_EQ(token_file_lengths(input), expected) << input;
    const TokenFile file = open_token_file(input);
    EXPECT_EQ(std::vector<int64_t>(file.lengths().begin(), file.lengths().end()), expected) << input;
  }

  const std::string t = dir.file("t.npy"), o = dir.file("t.offsets.npy");
  write_npy(o, std::vector<int64_t>{0, 1, 3});
  write_npy(t, std::vector<int64_t>{5, 7, int64_t{1} << 31});
  EXPECT_EQ(token_file_lengths(t), (std::vector<int64_t>{1, 2}));
  expect_error([&] { open_token_file(t); }, {t, "value 2147483648"});
  write_npy(o, std::vector<int64_t>{0, 1, 4});
  expect_error([&] { token_file_lengths(t); }, {o, "past the end"});
  expect_error([] { token_file_lengths("data.jsonl"); }, {"data.jsonl", "not a token file"});
}

TEST(TokenFileInput, BuildsTheSameBatchAsVectors) {
  TempDir dir;
  const Samples samples = random_samples(300, 90, 50000, 8);
  testing::write_megatron<uint16_t>(dir.file("m"), 8, samples);
  const TokenFile file = read_megatron(dir.file("m"));
  PackOptions options;
  options.capacity = 256;
  const PackPlan plan = plan_packing(file.lengths(), options);
  const PackedBatch a = build_packed_batch(plan, 0, plan.rows(), file);
  const PackedBatch b = build_packed_batch(plan, 0, plan.rows(), VectorTokenSource(samples));
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.cu_seqlens, b.cu_seqlens);
}

}  // namespace
}  // namespace varpack
