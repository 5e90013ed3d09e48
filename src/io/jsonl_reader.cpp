// The streaming JSONL reader: the file is read in chunks into one buffer that holds at most the
// longest line (plus simdjson's padding), and each line is parsed on its own with simdjson's DOM
// parser, which validates the whole line. Memory is proportional to the tokens kept by the
// caller, never to the JSON text.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <simdjson.h>
#include <string>
#include <vector>

#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();

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
  LineParser(const std::string& path, const SampleFn& on_sample)
      : path_(path), on_sample_(on_sample) {}

  // `p` must have SIMDJSON_PADDING readable bytes after p + n (their content does not matter).
  void parse(const char* p, size_t n, int64_t line) {
    line_ = line;
    if (is_blank(p, n)) return;
    simdjson::dom::element doc;
    if (const auto err = parser_.parse(p, n, false).get(doc)) {
      fail(std::string("malformed JSON (") + simdjson::error_message(err) +
           "); every line must be one JSON object like {\"input_ids\": [1, 2, 3]}");
    }
    simdjson::dom::object object;
    if (doc.get_object().get(object)) {
      fail(std::string("expected a JSON object like {\"input_ids\": [1, 2, 3]}, got ") +
           type_name(doc.type()));
    }
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
    on_sample_(records_, line, ids_, labels_);
    ++records_;
  }

  int64_t records() const { return records_; }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ":" + std::to_string(line_) + ": " + what);
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

  const std::string& path_;
  const SampleFn& on_sample_;
  simdjson::dom::parser parser_;
  std::vector<int32_t> ids_, labels_;
  int64_t records_ = 0;
  int64_t line_ = 0;
};

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { if (fd_ >= 0) ::close(fd_); }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

void scan_jsonl(const std::string& path, const SampleFn& on_sample, const ProgressFn& progress) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    throw Error(path + ": cannot open: " + std::strerror(errno) +
                (errno == ENOENT ? "; check the path" : ""));
  }
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) throw Error(path + ": cannot read: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a JSONL file");
  const uint64_t total = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;

  LineParser parser(path, on_sample);
  // buffer[begin, end) holds bytes read but not yet parsed; `scanned` marks how far we already
  // looked for a newline, so a long line is not rescanned after each read.
  std::vector<char> buffer(kChunkBytes + simdjson::SIMDJSON_PADDING);
  size_t begin = 0, end = 0, scanned = 0;
  uint64_t bytes_read = 0;
  int64_t line = 0;
  bool eof = false;
  while (true) {
    const void* nl = std::memchr(buffer.data() + scanned, '\n', end - scanned);
    if (nl != nullptr) {
      const size_t stop = static_cast<size_t>(static_cast<const char*>(nl) - buffer.data());
      parser.parse(buffer.data() + begin, stop - begin, ++line);
      begin = scanned = stop + 1;
      continue;
    }
    if (eof) {
      if (begin < end) parser.parse(buffer.data() + begin, end - begin, ++line);
      break;
    }
    // Move the unfinished line to the front; grow the buffer only for a line longer than it.
    std::memmove(buffer.data(), buffer.data() + begin, end - begin);
    end -= begin;
    begin = 0;
    scanned = end;
    const size_t capacity = buffer.size() - simdjson::SIMDJSON_PADDING;
    if (end == capacity) buffer.resize(2 * capacity + simdjson::SIMDJSON_PADDING);
    const size_t room = buffer.size() - simdjson::SIMDJSON_PADDING - end;
    const ssize_t n = ::read(file.get(), buffer.data() + end, room);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": read error after line " + std::to_string(line) + ": " +
                  std::strerror(errno));
    }
    eof = (n == 0);
    end += static_cast<size_t>(n);
    bytes_read += static_cast<uint64_t>(n);
    if (progress) progress(bytes_read, total);
  }
  if (parser.records() == 0) {
    throw Error(path + ": no samples: " +
                (line == 0 ? std::string("the file is empty")
                           : "its " + std::to_string(line) + " line(s) are all blank") +
                "; expected one JSON object like {\"input_ids\": [1, 2, 3]} per line");
  }
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
