// The JSONL reader: lines come from the chunked line reader (line_reader.h) and each is parsed
// on its own with simdjson's DOM parser, which validates the whole line. Memory is proportional
// to the tokens kept by the caller, never to the JSON text.
#include <array>
#include <limits>
#include <simdjson.h>
#include <string>
#include <vector>

#include "line_reader.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
constexpr std::string_view kBom = "\xEF\xBB\xBF";
constexpr std::array<std::string_view, 3> kOurKeys = {"input_ids", "labels", "images"};

const char* type_name(simdjson::dom::element_type type) {
  switch (type) {
    case simdjson::dom::element_type::ARRAY: return "an array";
    case simdjson::dom::element_type::OBJECT: return "an object";
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64: return "an integer";
    case simdjson::dom::element_type::DOUBLE: return "a number with a fraction or exponent";
    case simdjson::dom::element_type::STRING: return "a string";
    case simdjson::dom::element_type::BOOL: return "a boolean";
    case simdjson::dom::element_type::NULL_VALUE: return "null";
  }
  return "an unknown value";
}

bool is_blank(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return false;
  }
  return true;
}

class LineParser {
 public:
  // `with_images`: read each record's "images" field (otherwise it is ignored like any other).
  LineParser(const std::string& path, const MultimodalSampleFn& on_sample, bool with_images)
      : path_(path), on_sample_(on_sample), with_images_(with_images) {}

  // `p` must have SIMDJSON_PADDING readable bytes after p + n (their content does not matter).
  void parse(const char* p, size_t n, int64_t line) {
    line_ = line;
    // A UTF-8 byte-order mark (some Windows editors write one) is not part of the JSON.
    if (line == 1 && n >= kBom.size() && std::string_view(p, kBom.size()) == kBom) {
      p += kBom.size();
      n -= kBom.size();
    }
    if (is_blank(p, n)) return;
    simdjson::dom::element doc;
    if (const auto err = parser_.parse(p, n, false).get(doc)) {
      if (err == simdjson::NUMBER_ERROR) {
        fail("a number too large to read (more than 19 digits) or malformed; token ids and "
             "labels are integers in [0, 2147483647] or -100");
      }
      fail(std::string("malformed JSON (") + simdjson::error_message(err) +
           "); every line must be one JSON object like {\"input_ids\": [1, 2, 3]}");
    }
    simdjson::dom::object object;
    if (doc.get_object().get(object)) {
      fail(std::string("expected a JSON object like {\"input_ids\": [1, 2, 3]}, got ") +
           type_name(doc.type()));
    }
    refuse_duplicate_keys(object);
    simdjson::dom::element ids;
    if (object["input_ids"].get(ids)) {
      fail("no \"input_ids\" field; every line must be an object like {\"input_ids\": [1, 2, 3]}");
    }
    read_array(ids, "input_ids", 0, ids_);
    simdjson::dom::element labels;
    labels_.clear();
    if (!object["labels"].get(labels) && !labels.is_null()) {
      read_array(labels, "labels", kIgnoreLabel, labels_);
      if (labels_.size() != ids_.size()) {
        fail("labels has " + std::to_string(labels_.size()) + " values but input_ids has " +
             std::to_string(ids_.size()) + "; labels must align one to one with input_ids");
      }
    }
    images_.clear();
    simdjson::dom::element images;
    if (with_images_ && !object["images"].get(images) && !images.is_null()) read_images(images);
    on_sample_(records_, line, ids_, labels_, images_);
    ++records_;
    if (!ids_.empty() || !images_.empty()) ++non_empty_records_;
  }

  int64_t records() const { return records_; }
  int64_t non_empty_records() const { return non_empty_records_; }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ":" + std::to_string(line_) + ": " + what);
  }

  // JSON leaves a repeated key to the reader (simdjson takes the first, Python's json the last):
  // one of ours twice is refused rather than guessed.
  void refuse_duplicate_keys(simdjson::dom::object object) const {
    bool seen[3] = {false, false, false};
    for (const auto field : object) {
      for (size_t k = 0; k < kOurKeys.size(); ++k) {
        if (field.key != kOurKeys[k]) continue;
        if (seen[k]) {
          fail("\"" + std::string(kOurKeys[k]) + "\" appears twice in the object; keep one");
        }
        seen[k] = true;
      }
    }
  }

  // Integers in [0, 2^31) go in; `also_allowed` (-100 for labels) too. Anything else fails,
  // naming the field and the index of the bad value.
  void read_array(simdjson::dom::element value, const char* field, int64_t also_allowed,
                  std::vector<int32_t>& out) const {
    simdjson::dom::array array;
    if (value.get_array().get(array)) {
      fail(std::string("\"") + field + "\" must be an array of integers, got " +
           type_name(value.type()));
    }
    out.clear();
    out.reserve(array.size());
    size_t index = 0;
    for (simdjson::dom::element v : array) {
      const auto type = v.type();
      int64_t x = -1;
      bool in_range = false;
      if (type == simdjson::dom::element_type::INT64) {
        x = v.get_int64().value_unsafe();
        in_range = (x >= 0 && x <= kMaxId) || (also_allowed != 0 && x == also_allowed);
      } else if (type != simdjson::dom::element_type::UINT64) {
        fail(std::string(field) + "[" + std::to_string(index) + "] is " + type_name(type) +
             ", not an integer; " + field + " must be an array of integers");
      }
      if (!in_range) {
        const std::string shown = type == simdjson::dom::element_type::UINT64
                                      ? std::to_string(v.get_uint64().value_unsafe())
                                      : std::to_string(x);
        fail(std::string(field) + "[" + std::to_string(index) + "] is " + shown + ": " + field +
             " values must be integers in [0, 2147483647]" +
             (also_allowed != 0 ? " or -100 (ignored)" : "") +
             (x < 0 && type == simdjson::dom::element_type::INT64 ? " (it is negative)" : ""));
      }
      out.push_back(static_cast<int32_t>(x));
      ++index;
    }
  }

  // A non-negative integer below 2^31 (at least 1 if `positive`), or an error naming `field`.
  int64_t read_count(simdjson::dom::element value, const std::string& field, bool positive) const {
    int64_t x = -1;
    if (value.type() == simdjson::dom::element_type::INT64) x = value.get_int64().value_unsafe();
    if (x < (positive ? 1 : 0) || x > kMaxId) {
      fail(field + " must be an integer in [" + (positive ? "1" : "0") + ", 2147483647], got " +
           (value.type() == simdjson::dom::element_type::INT64 ? std::to_string(x)
                                                               : type_name(value.type())));
    }
    return x;
  }

  void read_images(simdjson::dom::element value) {
    constexpr const char* kExample = "{\"view\": \"wrist\", \"patches\": 64}";
    simdjson::dom::array array;
    if (value.get_array().get(array)) {
      fail(std::string("\"images\" must be an array of objects like ") + kExample + ", got " +
           type_name(value.type()));
    }
    size_t index = 0;
    for (simdjson::dom::element image : array) {
      const std::string where = "images[" + std::to_string(index++) + "]";
      simdjson::dom::object object;
      if (image.get_object().get(object)) {
        fail(where + " is " + type_name(image.type()) + "; each image is an object like " + kExample);
      }
      ImageRecord record;
      std::string_view view;
      if (object["view"].get_string().get(view) || view.empty()) {
        fail(where + " has no \"view\" string (the camera's name, e.g. \"wrist\")");
      }
      record.view = view;
      simdjson::dom::element patches, height, width, patch;
      if (!object["patches"].get(patches)) {
        record.patches = read_count(patches, where + ".patches", false);
      } else if (!object["height"].get(height) && !object["width"].get(width) &&
                 !object["patch"].get(patch)) {
        const int64_t h = read_count(height, where + ".height", true);
        const int64_t w = read_count(width, where + ".width", true);
        const int64_t p = read_count(patch, where + ".patch", true);
        if (h % p != 0 || w % p != 0) {
          fail(where + ": a " + std::to_string(h) + "x" + std::to_string(w) +
               " image is not a whole number of " + std::to_string(p) + "x" + std::to_string(p) +
               " patches; resize it to multiples of " + std::to_string(p) + " pixels");
        }
        record.patches = (h / p) * (w / p);
      } else {
        fail(where + " (view \"" + record.view + "\") gives neither \"patches\" nor \"height\", " +
             "\"width\" and \"patch\"");
      }
      images_.push_back(std::move(record));
    }
  }

  const std::string& path_;
  const MultimodalSampleFn& on_sample_;
  const bool with_images_;
  simdjson::dom::parser parser_;
  std::vector<int32_t> ids_, labels_;
  std::vector<ImageRecord> images_;
  int64_t records_ = 0;
  int64_t non_empty_records_ = 0;
  int64_t line_ = 0;
};

}  // namespace

namespace {

void scan(const std::string& path, const MultimodalSampleFn& on_sample, bool with_images,
          const ProgressFn& progress) {
  LineParser parser(path, on_sample, with_images);
  const int64_t lines = detail::for_each_line(
      path, [&](const char* p, size_t n, int64_t line) { parser.parse(p, n, line); }, progress);
  if (parser.records() == 0) {
    throw Error(path + ": no samples: " +
                (lines == 0 ? std::string("the file is empty")
                            : "its " + std::to_string(lines) + " line(s) are all blank") +
                "; expected one JSON object like {\"input_ids\": [1, 2, 3]} per line");
  }
  if (parser.non_empty_records() == 0) {
    throw Error(path + ": no tokens: all " + std::to_string(parser.records()) +
                " record(s) have an empty \"input_ids\" (and no images); nothing to pack");
  }
}

}  // namespace

void scan_jsonl(const std::string& path, const SampleFn& on_sample, const ProgressFn& progress) {
  scan(
      path,
      [&](int64_t record, int64_t line, std::span<const int32_t> ids, std::span<const int32_t> labels,
          std::span<const ImageRecord>) { on_sample(record, line, ids, labels); },
      false, progress);
}

void scan_multimodal_jsonl(const std::string& path, const MultimodalSampleFn& on_sample,
                           const ProgressFn& progress) {
  scan(path, on_sample, true, progress);
}

TokenStore read_jsonl(const std::string& path, const ProgressFn& progress) {
  TokenStore store;
  scan_jsonl(
      path,
      [&](int64_t, int64_t, std::span<const int32_t> ids, std::span<const int32_t> labels) {
        store.add(ids, labels);
      },
      progress);
  return store;
}

}  // namespace varpack
