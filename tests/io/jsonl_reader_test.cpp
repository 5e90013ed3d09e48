// The streaming JSONL reader: records, labels, blank lines and line endings; lines much longer
// than the read chunk; progress; and every bad input, with the file and line in the message.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

using testing::TempDir;
using testing::write_file;

std::vector<int32_t> ids_of(const TokenStore& store, int64_t sample) {
  const auto span = store.input_ids(sample);
  return {span.begin(), span.end()};
}

std::vector<int32_t> labels_of(const TokenStore& store, int64_t sample) {
  const auto span = store.labels(sample);
  return {span.begin(), span.end()};
}

TEST(JsonlReader, ReadsRecordsLabelsAndSkipsBlankLines) {
  TempDir dir;
  const std::string path = dir.file("in.jsonl");
  write_file(path,
             "{\"input_ids\": [1, 2, 3]}\n"
             "\n"
             "  \t \n"
             "{\"text\": \"ignored\", \"input_ids\": [], \"labels\": []}\r\n"
             "{\"input_ids\": [7, 2147483647], \"labels\": [-100, 5]}\n"
             "{\"labels\": null, \"input_ids\": [0]}");  // no newline at the end
  const TokenStore store = read_jsonl(path);
  ASSERT_EQ(store.num_samples(), 4);
  EXPECT_EQ(ids_of(store, 0), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(store.labels(0).empty());
  EXPECT_TRUE(ids_of(store, 1).empty());
  EXPECT_EQ(ids_of(store, 2), (std::vector<int32_t>{7, 2147483647}));
  EXPECT_EQ(labels_of(store, 2), (std::vector<int32_t>{-100, 5}));
  EXPECT_EQ(ids_of(store, 3), (std::vector<int32_t>{0}));
  EXPECT_TRUE(store.labels(3).empty());
  EXPECT_EQ(store.lengths(), (std::vector<int64_t>{3, 0, 2, 1}));
  EXPECT_EQ(store.num_tokens(), 6);
}

TEST(JsonlReader, ReportsRecordAndLineNumbers) {
  TempDir dir;
  const std::string path = dir.file("in.jsonl");
  write_file(path, "\n{\"input_ids\": [1]}\n\n\n{\"input_ids\": [2, 3]}\n");
  std::vector<std::pair<int64_t, int64_t>> seen;
  scan_jsonl(path, [&](int64_t record, int64_t line, auto, auto) { seen.emplace_back(record, line); });
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {1, 5}}));
}

// Lines of hundreds of thousands of tokens (several read chunks each) between short ones: the
// buffer must grow, keep line boundaries, and hand over every value.
TEST(JsonlReader, StreamsLinesLongerThanTheReadChunk) {
  TempDir dir;
  const std::string path = dir.file("long.jsonl");
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> expected;
  std::string text;
  for (const int64_t length : {3, 400000, 1, 0, 700000, 5, 250000}) {
    std::vector<int32_t> ids(static_cast<size_t>(length));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 2000000000u);
    text += "{\"input_ids\":[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) text += ',';
      text += std::to_string(ids[i]);
    }
    text += "]}\n";
    expected.push_back(std::move(ids));
  }
  ASSERT_GT(text.size(), size_t{6} << 20);  // several times the 1 MiB read chunk
  write_file(path, text);
  uint64_t last_done = 0, last_total = 0;
  const TokenStore store = read_jsonl(path, [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  });
  ASSERT_EQ(store.num_samples(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(ids_of(store, static_cast<int64_t>(i)), expected[i]) << i;
  EXPECT_EQ(last_done, text.size());
  EXPECT_EQ(last_total, text.size());
}

// Each bad input: the message must carry "<file>:<line>:" and the given phrase.
struct BadInput {
  const char* name;
  const char* text;
  int line;
  const char* phrase;
};

class JsonlReaderRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(JsonlReaderRejects, NamingFileAndLine) {
  TempDir dir;
  const std::string path = dir.file("bad.jsonl");
  write_file(path, std::string("{\"input_ids\": [1, 2]}\n\n") + GetParam().text + "\n");
  try {
    read_jsonl(path);
    FAIL() << "no error for " << GetParam().name;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path + ":" + std::to_string(GetParam().line) + ": "), std::string::npos) << message;
    EXPECT_NE(message.find(GetParam().phrase), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, JsonlReaderRejects,
    ::testing::Values(
        BadInput{"truncated_json", "{\"input_ids\": [1, 2", 3, "malformed JSON"},
        BadInput{"trailing_garbage", "{\"input_ids\": [1]} x", 3, "malformed JSON"},
        BadInput{"not_an_object", "[1, 2, 3]", 3, "expected a JSON object"},
        BadInput{"missing_input_ids", "{\"ids\": [1, 2]}", 3, "no \"input_ids\" field"},
        BadInput{"input_ids_not_array", "{\"input_ids\": 5}", 3, "must be an array"},
        BadInput{"negative_id", "{\"input_ids\": [4, -1]}", 3, "input_ids[1] is -1"},
        BadInput{"fractional_id", "{\"input_ids\": [1.5]}", 3, "input_ids[0] is a number with a fraction"},
        BadInput{"string_id", "{\"input_ids\": [\"7\"]}", 3, "input_ids[0] is a string"},
        BadInput{"id_too_large", "{\"input_ids\": [2147483648]}", 3, "input_ids[0] is 2147483648"},
        BadInput{"id_beyond_int64", "{\"input_ids\": [18446744073709551615]}", 3, "is 18446744073709551615"},
        BadInput{"labels_short", "{\"input_ids\": [1, 2, 3], \"labels\": [1, 2]}", 3, "labels has 2 values but input_ids has 3"},
        BadInput{"labels_not_array", "{\"input_ids\": [1], \"labels\": \"x\"}", 3, "\"labels\" must be an array"},
        BadInput{"label_negative", "{\"input_ids\": [1, 2], \"labels\": [-100, -5]}", 3, "labels[1] is -5"},
        BadInput{"invalid_utf8", "{\"input_ids\": [1], \"t\": \"\xff\"}", 3, "malformed JSON"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(JsonlReader, RejectsEmptyAndBlankFiles) {
  TempDir dir;
  write_file(dir.file("empty.jsonl"), "");
  write_file(dir.file("blank.jsonl"), "\n  \n\n");
  for (const char* name : {"empty.jsonl", "blank.jsonl"}) {
    try {
      read_jsonl(dir.file(name));
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file(name) + ": no samples"), std::string::npos) << e.what();
    }
  }
}

TEST(JsonlReader, RejectsMissingPathAndDirectory) {
  TempDir dir;
  EXPECT_THROW(
      {
        try {
          read_jsonl(dir.file("absent.jsonl"));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("absent.jsonl: cannot open"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(
      {
        try {
          read_jsonl(dir.path().string());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

TEST(TokenStore, RejectsLabelsOfAnotherLength) {
  TokenStore store;
  const std::vector<int32_t> ids{1, 2, 3}, labels{1, 2};
  EXPECT_THROW(store.add(ids, labels), Error);
  EXPECT_EQ(store.num_samples(), 0);
}

TEST(TokenStore, RejectsNegativeIdsAndLabelsOtherThanIgnore) {
  TokenStore store;
  const std::vector<int32_t> ids{1, -2, 3}, good{4, 5, 6}, labels{-100, 5, -1};
  try {
    store.add(ids);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sample 0: input_ids[1] is -2; input_ids must be integers in [0, 2147483647]");
  }
  try {
    store.add(good, labels);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 0: labels[2] is -1; labels must be integers in [0, "
                                         "2147483647] or -100"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.num_samples(), 0);
  store.add(good, std::vector<int32_t>{-100, -100, 6});
  EXPECT_EQ(store.num_samples(), 1);
}

}  // namespace
}  // namespace varpack
