// The JSON documents the command writes (pack --report, stats --json, inspect --json), built with
// nlohmann::json: keys in insertion order, always valid UTF-8 (a path's invalid bytes become
// U+FFFD, the replacement character).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace varpack::cli {

using Json = nlohmann::ordered_json;

// What every document starts with: varpack's version, the command line and the UTC time.
Json report_header(const std::vector<std::string>& argv);

// Each file `input` reads with its size in bytes (none for a profile; null for a stream).
Json input_sizes(const std::string& input);

// count, min, max, mean and percentiles (p10 ... p99, nearest rank) of `lengths`.
Json length_summary(std::vector<int64_t> lengths);

// `json` as indented text ending in a newline.
std::string to_text(const Json& json);

}  // namespace varpack::cli
