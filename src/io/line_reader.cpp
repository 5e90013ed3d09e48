// for_each_line: see line_reader.h.
#include "line_reader.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "varpack/error.h"

namespace varpack::detail {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

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

int64_t for_each_line(const std::string& path,
                      const std::function<void(const char*, size_t, int64_t)>& on_line,
                      const ProgressFn& progress) {
  // "-" is standard input (a copy of its descriptor, so closing it leaves stdin open).
  FileDescriptor file(path == "-" ? ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3)
                                  : ::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    throw Error(path + ": cannot open: " + std::strerror(errno) +
                (errno == ENOENT ? "; check the path" : ""));
  }
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) throw Error(path + ": cannot read: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a JSONL file");
  const uint64_t total = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;

  // A regular file smaller than a chunk gets a buffer of its size + 1 (the + 1 lets the read that
  // finds the end land without growing it): scanning many small files, or one file per fuzz
  // execution, then does not allocate and zero a whole chunk each time (under AddressSanitizer
  // that was two thirds of the time, in page faults on fresh pages). Same lines either way.
  const size_t first_capacity =
      S_ISREG(st.st_mode) && total < kChunkBytes ? static_cast<size_t>(total) + 1 : kChunkBytes;
  // buffer[begin, end) holds bytes read but not yet handed out; `scanned` marks how far we
  // already looked for a newline, so a long line is not rescanned after each read.
  std::vector<char> buffer(first_capacity + simdjson::SIMDJSON_PADDING);
  size_t begin = 0, end = 0, scanned = 0;
  uint64_t bytes_read = 0;
  int64_t line = 0;
  bool eof = false;
  while (true) {
    const void* nl = std::memchr(buffer.data() + scanned, '\n', end - scanned);
    if (nl != nullptr) {
      const size_t stop = static_cast<size_t>(static_cast<const char*>(nl) - buffer.data());
      on_line(buffer.data() + begin, stop - begin, ++line);
      begin = scanned = stop + 1;
      continue;
    }
    if (eof) {
      if (begin < end) on_line(buffer.data() + begin, end - begin, ++line);
      return line;
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
}

}  // namespace varpack::detail
