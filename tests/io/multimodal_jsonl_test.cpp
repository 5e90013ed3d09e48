// The JSONL reader's optional "images" field (scan_multimodal_jsonl): patch counts given or from
// pixel sizes, records without images, scan_jsonl ignoring the field, and every bad image named by
// file, line and index.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "temp_dir.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

using testing::TempDir;
using testing::write_file;

struct Record {
  int64_t line;
  std::vector<int32_t> ids, labels;
  std::vector<ImageRecord> images;
};

std::vector<Record> scan_all(const std::string& path) {
  std::vector<Record> out;
  scan_multimodal_jsonl(path, [&](int64_t record, int64_t line, std::span<const int32_t> ids,
                                  std::span<const int32_t> labels, std::span<const ImageRecord> images) {
    EXPECT_EQ(record, static_cast<int64_t>(out.size()));
    out.push_back({line, {ids.begin(), ids.end()}, {labels.begin(), labels.end()}, {images.begin(), images.end()}});
  });
  return out;
}

TEST(MultimodalJsonl, ReadsPatchCountsAndPixelSizes) {
  TempDir dir;
  const std::string path = dir.file("in.jsonl");
  write_file(path,
             "{\"input_ids\": [1, 2], \"images\": [{\"view\": \"wrist\", \"patches\": 64}, "
             "{\"view\": \"base\", \"height\": 96, \"width\": 128, \"patch\": 16, \"file\": \"a.png\"}]}\n"
             "\n"
             "{\"input_ids\": [3], \"labels\": [-100]}\n"
             "{\"images\": null, \"input_ids\": [4]}\n"
             "{\"input_ids\": [], \"images\": [{\"view\": \"top\", \"patches\": 0}]}\n");
  const auto records = scan_all(path);
  ASSERT_EQ(records.size(), 4u);
  ASSERT_EQ(records[0].images.size(), 2u);
  EXPECT_EQ(records[0].images[0].view, "wrist");
  EXPECT_EQ(records[0].images[0].patches, 64);
  EXPECT_EQ(records[0].images[1].view, "base");
  EXPECT_EQ(records[0].images[1].patches, 6 * 8);
  EXPECT_EQ(records[1].line, 3);
  EXPECT_TRUE(records[1].images.empty());
  EXPECT_EQ(records[1].labels, std::vector<int32_t>{-100});
  EXPECT_TRUE(records[2].images.empty());
  ASSERT_EQ(records[3].images.size(), 1u);
  EXPECT_EQ(records[3].images[0].patches, 0);
}

TEST(MultimodalJsonl, PlainScanIgnoresImagesEvenMalformedOnes) {
  TempDir dir;
  const std::string path = dir.file("in.jsonl");
  write_file(path, "{\"input_ids\": [1, 2], \"images\": 7}\n");
  int64_t records = 0;
  scan_jsonl(path, [&](int64_t, int64_t, std::span<const int32_t> ids, std::span<const int32_t>) {
    EXPECT_EQ(ids.size(), 2u);
    ++records;
  });
  EXPECT_EQ(records, 1);
}

TEST(MultimodalJsonl, RejectsBadImagesNamingFileLineAndImage) {
  TempDir dir;
  const std::string path = dir.file("bad.jsonl");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\"images\": 3", "\"images\" must be an array of objects"},
      {"\"images\": [5]", "images[0] is an integer; each image is an object"},
      {"\"images\": [{\"patches\": 4}]", "images[0] has no \"view\" string"},
      {"\"images\": [{\"view\": \"\", \"patches\": 4}]", "images[0] has no \"view\" string"},
      {"\"images\": [{\"view\": \"a\", \"patches\": 1}, {\"view\": \"b\", \"patches\": -1}]",
       "images[1].patches must be an integer in [0, 2147483647], got -1"},
      {"\"images\": [{\"view\": \"a\", \"patches\": 1.5}]", "images[0].patches must be an integer"},
      {"\"images\": [{\"view\": \"a\", \"height\": 30, \"width\": 32, \"patch\": 16}]",
       "images[0]: a 30x32 image is not a whole number of 16x16 patches"},
      {"\"images\": [{\"view\": \"a\", \"height\": 32, \"width\": 32, \"patch\": 0}]",
       "images[0].patch must be an integer in [1, 2147483647], got 0"},
      {"\"images\": [{\"view\": \"a\", \"height\": 32}]",
       "images[0] (view \"a\") gives neither \"patches\" nor \"height\", \"width\" and \"patch\""},
  };
  for (const auto& [images, message] : cases) {
    write_file(path, "{\"input_ids\": [1]}\n{\"input_ids\": [1], " + images + "}\n");
    try {
      scan_all(path);
      ADD_FAILURE() << "accepted " << images;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ":2: ", 0), 0u) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what << "\nexpected: " << message;
    }
  }
}

}  // namespace
}  // namespace varpack
