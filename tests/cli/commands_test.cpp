// The commands around packing: the JSON report and `stats --json` (nlohmann-json, valid UTF-8,
// version, command line, time, input sizes, percentiles), `varpack inspect` with and without
// --check, `stats` on a packed file and over the capacity, JSONL with a byte-order mark, progress
// lines off a terminal and --quiet.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstring>
#include <string>
#include <vector>

#include "cli_run.h"
#include "temp_dir.h"

namespace varpack {
namespace {

using testing::read_file;
using testing::Result;
using testing::run;
using testing::TempDir;
using testing::write_file;

const std::string kInput =
    "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [4, 5]}\n{\"input_ids\": [6]}\n{\"input_ids\": [7, 8, 9, 10]}\n";

simdjson::dom::object parse_object(simdjson::dom::parser& parser, const std::string& text) {
  simdjson::dom::object object;
  const auto error = parser.parse(text).get_object().get(object);  // validates UTF-8 too
  EXPECT_FALSE(error) << simdjson::error_message(error) << "\n" << text;
  return object;
}

TEST(Commands, ReportIsValidUtf8WithItsProvenance) {
  TempDir dir;
  const std::string name = "d\xff.jsonl";  // not UTF-8: the hand-written report was invalid JSON
  write_file(dir.file(name), kInput);
  const Result r = run({"pack", name, "-L", "8", "-o", "out.bin", "--report", "r.json"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  simdjson::dom::parser parser;
  const std::string text = read_file(dir.file("r.json"));
  const auto report = parse_object(parser, text);
  EXPECT_EQ(report["varpack_version"].get_string().value(), "0.1.0");
  EXPECT_EQ(report["command_line"].get_array().size(), 9u);
  EXPECT_EQ(report["time_utc"].get_string().value().size(), 20u);  // 2026-12-06T14:00:00Z
  EXPECT_EQ(report["input"].get_string().value(), "d\xEF\xBF\xBD.jsonl");  // U+FFFD
  EXPECT_EQ(report["input_bytes"]["d\xEF\xBF\xBD.jsonl"].get_int64().value(),
            static_cast<int64_t>(kInput.size()));
  EXPECT_EQ(report["lengths"]["count"].get_int64().value(), 4);
  EXPECT_EQ(report["lengths"]["percentiles"]["p50"].get_int64().value(), 2);
  EXPECT_EQ(report["lengths"]["max"].get_int64().value(), 4);
  EXPECT_EQ(report["tokens"].get_int64().value(), 10);
}

TEST(Commands, StatsJson) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  const Result r = run({"stats", "in.jsonl", "-L", "3", "--json"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  simdjson::dom::parser parser;
  const auto stats = parse_object(parser, r.out);
  EXPECT_EQ(stats["samples"].get_int64().value(), 4);
  EXPECT_EQ(stats["samples_over_capacity"].get_int64().value(), 1);  // counted, not an error
  EXPECT_EQ(stats["lengths"]["percentiles"]["p99"].get_int64().value(), 4);
  EXPECT_EQ(stats["strategies"].get_array().size(), 4u);
  EXPECT_EQ(stats["input_bytes"]["in.jsonl"].get_int64().value(), static_cast<int64_t>(kInput.size()));
}

TEST(Commands, StatsCountsOverlongSamplesByDefault) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  const Result r = run({"stats", "in.jsonl", "-L", "3"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("1 over the capacity 3 (packed line: --overlong split)"), std::string::npos) << r.out;
}

TEST(Commands, AByteOrderMarkIsSkipped) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), "\xEF\xBB\xBF" + kInput);
  write_file(dir.file("plain.jsonl"), kInput);
  ASSERT_EQ(run({"pack", "in.jsonl", "-L", "8", "-o", "a.jsonl"}, dir).status, 0);
  ASSERT_EQ(run({"pack", "plain.jsonl", "-L", "8", "-o", "b.jsonl"}, dir).status, 0);
  EXPECT_EQ(read_file(dir.file("a.jsonl")), read_file(dir.file("b.jsonl")));
}

TEST(Commands, InspectAndStatsOnAPackedFile) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  ASSERT_EQ(run({"pack", "in.jsonl", "-L", "3", "--overlong", "split", "-o", "p.bin"}, dir).status, 0);
  const Result r = run({"inspect", "p.bin", "--check"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("4 samples (0 without tokens) in 4 rows of capacity 3: 5 pieces (1 continuing "
                       "a split sample), 10 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("padding 2 tokens of 12 slots"), std::string::npos) << r.out;
  const Result json = run({"inspect", "p.bin", "--json"}, dir);
  simdjson::dom::parser parser;
  const auto object = parse_object(parser, json.out);
  EXPECT_EQ(object["pieces"].get_int64().value(), 5);
  EXPECT_EQ(object["sample_lengths"]["max"].get_int64().value(), 4);
  // stats reads the packed file's sample lengths (it took it for a Megatron prefix before).
  const Result stats = run({"stats", "p.bin", "-L", "8"}, dir);
  ASSERT_EQ(stats.status, 0) << stats.err;
  EXPECT_NE(stats.out.find("4 samples, 10 tokens"), std::string::npos) << stats.out;
}

// Overwrites `size` bytes at `at` of a file.
void patch(const std::string& path, size_t at, const void* bytes, size_t size) {
  std::string content = read_file(path);
  std::memcpy(content.data() + at, bytes, size);
  write_file(path, content);
}

TEST(Commands, InspectCheckFindsWhatOpeningDoesNot) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  ASSERT_EQ(run({"pack", "in.jsonl", "-L", "8", "-o", "p.bin"}, dir).status, 0);
  const std::string good = read_file(dir.file("p.bin"));
  uint64_t labels_at = 0, positions_at = 0;  // section offsets in the header (docs/FORMAT.md)
  std::memcpy(&labels_at, good.data() + 72 + 8, 8);
  std::memcpy(&positions_at, good.data() + 72 + 16, 8);
  const int32_t seven = 7;
  patch(dir.file("p.bin"), positions_at + 4, &seven, 4);
  EXPECT_EQ(run({"inspect", "p.bin"}, dir).status, 0);  // the tables are fine
  Result r = run({"inspect", "p.bin", "--check"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("p.bin: row 0, piece 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("token 1: position does not restart"), std::string::npos) << r.err;
  write_file(dir.file("p.bin"), good);
  patch(dir.file("p.bin"), labels_at, &seven, 4);
  r = run({"inspect", "p.bin", "--check"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("first label is not -100"), std::string::npos) << r.err;
}

TEST(Commands, ProgressLinesOffATerminalAndQuiet) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  const Result lines = run({"pack", "in.jsonl", "-L", "8", "-o", "a.jsonl", "--progress-every", "0"}, dir);
  ASSERT_EQ(lines.status, 0) << lines.err;
  EXPECT_NE(lines.err.find("varpack: reading in.jsonl: 100% ("), std::string::npos) << lines.err;
  EXPECT_NE(lines.err.find("s elapsed, about 0 s left"), std::string::npos) << lines.err;
  const Result quiet = run({"--quiet", "pack", "in.jsonl", "-L", "8", "-o", "b.jsonl", "--progress-every", "0"}, dir);
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  const Result after = run({"pack", "in.jsonl", "-L", "8", "-o", "c.jsonl", "-q"}, dir);
  EXPECT_EQ(after.status, 0) << after.err;  // the global flag after the subcommand too
}

TEST(Commands, Version) {
  TempDir dir;
  const Result r = run({"--version"}, dir);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("0.1.0"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace varpack
