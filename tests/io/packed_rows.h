// Test helper: reads a packed JSONL file back into plain vectors with simdjson, checking that
// every row has exactly the fields input_ids, labels, position_ids, cu_seqlens, samples, in order.
#pragma once

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace varpack::testing {

struct PackedRow {
  std::vector<int32_t> input_ids, labels, position_ids, cu_seqlens;
  std::vector<std::array<int64_t, 3>> samples;
};

inline std::vector<PackedRow> read_packed_jsonl(const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::dom::document_stream stream;
  std::vector<PackedRow> rows;
  simdjson::padded_string text;
  EXPECT_FALSE(simdjson::padded_string::load(path).get(text)) << path;
  EXPECT_FALSE(parser.parse_many(text).get(stream));
  for (auto result : stream) {
    simdjson::dom::object object;
    EXPECT_FALSE(result.get_object().get(object));
    std::vector<std::string> keys;
    for (auto field : object) keys.emplace_back(field.key);
    EXPECT_EQ(keys, (std::vector<std::string>{"input_ids", "labels", "position_ids", "cu_seqlens",
                                              "samples"}));
    PackedRow row;
    auto ints = [&](const char* key, std::vector<int32_t>& out) {
      simdjson::dom::array values;
      EXPECT_FALSE(object[key].get_array().get(values)) << key;
      for (simdjson::dom::element v : values) {
        out.push_back(static_cast<int32_t>(v.get_int64().value()));
      }
    };
    ints("input_ids", row.input_ids);
    ints("labels", row.labels);
    ints("position_ids", row.position_ids);
    ints("cu_seqlens", row.cu_seqlens);
    simdjson::dom::array samples;
    EXPECT_FALSE(object["samples"].get_array().get(samples));
    for (simdjson::dom::element piece : samples) {
      std::array<int64_t, 3> p{};
      size_t i = 0;
      simdjson::dom::array values;
      EXPECT_FALSE(piece.get_array().get(values));
      for (simdjson::dom::element v : values) p.at(i++) = v.get_int64().value();
      EXPECT_EQ(i, 3u);
      row.samples.push_back(p);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace varpack::testing
