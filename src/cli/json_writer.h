// A tiny JSON object writer for the pack report: flat objects of numbers, strings and booleans,
// keys in insertion order, numbers in their shortest exact form.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace varpack::cli {

class JsonObject {
 public:
  JsonObject& add(std::string_view key, int64_t value);
  JsonObject& add(std::string_view key, uint64_t value);
  JsonObject& add(std::string_view key, double value);  // non-finite values become null
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, bool value);
  std::string str() const { return text_ + "\n}\n"; }

 private:
  void key(std::string_view key);
  std::string text_ = "{";
};

// `text` as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

}  // namespace varpack::cli
