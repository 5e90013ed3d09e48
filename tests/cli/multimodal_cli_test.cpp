// `varpack stats` and `varpack pack` on JSONL records with "images": image tokens count toward a
// sample's length, packed rows hold one placeholder per patch before the text (label -100), and a
// record with images is never split, nor packed without a placeholder id.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_run.h"
#include "packed_rows.h"
#include "temp_dir.h"

namespace varpack {
namespace {

using testing::read_packed_jsonl;
using testing::Result;
using testing::run;
using testing::TempDir;
using testing::write_file;

// 64 + 2, 3, 4 + 1 tokens: 74 in all.
const char* kInput =
    "{\"input_ids\": [1, 2], \"labels\": [1, -100], \"images\": [{\"view\": \"wrist\", \"patches\": 64}]}\n"
    "{\"input_ids\": [3, 4, 5]}\n"
    "{\"input_ids\": [6], \"images\": [{\"view\": \"top\", \"height\": 32, \"width\": 32, \"patch\": 16}]}\n";

TEST(CliMultimodal, StatsCountsImageTokens) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  const Result r = run({"stats", "in.jsonl", "--capacity", "128"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("3 samples, 74 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max 66"), std::string::npos) << r.out;
}

TEST(CliMultimodal, PackWritesPlaceholdersBeforeTheText) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  const Result r = run({"pack", "in.jsonl", "-L", "128", "-o", "out.jsonl", "--image-token-id", "9",
                        "--algorithm", "none", "--keep-order", "--check"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rows = read_packed_jsonl(dir.file("out.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  std::vector<int32_t> ids(64, 9), labels(64, -100);
  ids.insert(ids.end(), {1, 2});
  labels.insert(labels.end(), {1, -100});
  EXPECT_EQ(rows[0].input_ids, ids);
  EXPECT_EQ(rows[0].labels, labels);
  EXPECT_EQ(rows[1].input_ids, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(rows[2].input_ids, (std::vector<int32_t>{9, 9, 9, 9, 6}));
  EXPECT_EQ(rows[2].labels, (std::vector<int32_t>{-100, -100, -100, -100, 6}));
  EXPECT_EQ(rows[2].position_ids, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(CliMultimodal, RefusesWithoutPlaceholderIdOrWhenASampleWouldBeSplit) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kInput);
  Result r = run({"pack", "in.jsonl", "-L", "128", "-o", "out.jsonl"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("in.jsonl:1: sample 0 has images (64 image tokens); give --image-token-id"),
            std::string::npos) << r.err;
  for (const char* overlong : {"split", "truncate", "error"}) {
    r = run({"pack", "in.jsonl", "-L", "32", "-o", "out.jsonl", "--image-token-id", "9", "--overlong", overlong}, dir);
    EXPECT_EQ(r.status, 1) << overlong;
    EXPECT_NE(r.err.find("in.jsonl:1: sample 0 has 66 tokens (64 image + 2 text), more than the capacity 32; "
                         "a sample with images is never split"), std::string::npos) << r.err;
    r = run({"stats", "in.jsonl", "-L", "32", "--overlong", overlong}, dir);
    EXPECT_EQ(r.status, 1) << overlong;
    EXPECT_NE(r.err.find("never split"), std::string::npos) << r.err;
  }
  r = run({"pack", "in.jsonl", "-L", "128", "-o", "out.jsonl", "--image-token-id", "-5"}, dir);
  EXPECT_EQ(r.status, 2);  // bad usage
  EXPECT_NE(r.err.find("--image-token-id: Value -5 not in range 0 to 2147483647"), std::string::npos) << r.err;
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"in.jsonl"}));
}

}  // namespace
}  // namespace varpack
