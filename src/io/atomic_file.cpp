// AtomicFile: every output goes to "<path>.tmp.<pid>.<n>" in the target's directory and is renamed
// onto the path only once complete, so an error never leaves a partial file behind. rename(2)
// within one directory (one file system) replaces the target in a single step.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw Error("output path is empty; give a file name");
  const std::string dir = directory_of(path_);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error("cannot write " + path_ + ": directory '" + dir +
                "' does not exist; create it first or choose another output path");
  }
  if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw Error("cannot write " + path_ + ": it is a directory; give a file name");
  }
  // A process-wide counter makes the name unique within this process; O_EXCL guards the rest.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_path_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    throw Error("cannot write " + path_ + ": cannot create a file in '" + dir + "': " +
                errno_text());
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("error writing " + path_ + ": " + errno_text());
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("error writing " + path_ + ": " + errno_text());
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error("error writing " + path_ + ": " + errno_text());
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    throw Error("cannot write " + path_ + ": rename from " + temp_path_ + " failed: " +
                errno_text());
  }
  committed_ = true;
}

void write_text_file(const std::string& path, std::string_view text) {
  AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace varpack
