// JsonObject: see json_writer.h.
#include "json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace varpack::cli {

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void JsonObject::key(std::string_view key) {
  text_ += text_.size() > 1 ? ",\n  " : "\n  ";
  text_ += json_quote(key);
  text_ += ": ";
}

JsonObject& JsonObject::add(std::string_view k, int64_t value) {
  key(k);
  text_ += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, uint64_t value) {
  key(k);
  text_ += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    text_ += "null";
  } else {
    char digits[32];
    const auto result = std::to_chars(digits, digits + sizeof(digits), value);
    text_.append(digits, result.ptr);
  }
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  key(k);
  text_ += json_quote(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, bool value) {
  key(k);
  text_ += value ? "true" : "false";
  return *this;
}

}  // namespace varpack::cli
