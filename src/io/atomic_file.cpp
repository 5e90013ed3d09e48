// AtomicFile: every output is written to a file without a name (O_TMPFILE) in the target's
// directory, given a name only once complete and renamed onto the path, so neither an error nor a
// kill -9 (which runs no destructor) leaves a partial file behind: the kernel frees a nameless
// file when its last descriptor closes. Where the file system has no O_TMPFILE, a named
// "<path>.tmp.<pid>.<n>" is used instead (an error still removes it; a kill -9 cannot).
// rename(2) within one directory (one file system) replaces the target in a single step.
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

// A name in the target's directory no other AtomicFile uses: the pid makes it unique across
// processes, a process-wide counter within this one (O_EXCL / linkat's EEXIST guard the rest).
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// What a failed write means, and what to do about it when it is the disk (or a file size limit).
std::string write_error(const std::string& path) {
  const int e = errno;
  std::string message = "error writing " + path + ": " + std::strerror(e);
  if (e == ENOSPC || e == EDQUOT || e == EFBIG) {
    message += " (nothing was written to " + path +
               "; free space on its file system, raise the file size limit, or write elsewhere)";
  }
  return message;
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
  // O_RDWR: O_TMPFILE needs write access, and check_packed_file reads the file before commit.
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
  if (fd_ >= 0) {
    temp_path_ = "/proc/self/fd/" + std::to_string(fd_);
    return;
  }
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    named_ = true;
    temp_path_ = temp_name(path_);
    fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
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
  if (named_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(write_error(path_));
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
      throw Error(write_error(path_));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  // On disk before it gets the name: after a power loss the path holds the old file or the whole
  // new one, never a named but empty one.
  if (::fsync(fd_) != 0) throw Error(write_error(path_));
  if (!named_) {
    // The nameless file gets a temporary name (linkat cannot replace a file), then the rename
    // below moves it onto the path; only a kill between the two leaves that name behind.
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::string name = temp_name(path_);
      if (::linkat(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
        temp_path_ = name;
        named_ = true;
        break;
      }
      if (errno != EEXIST) {
        throw Error("cannot write " + path_ + ": cannot name the finished file: " + errno_text());
      }
    }
    if (!named_) throw Error("cannot write " + path_ + ": no free temporary name beside it");
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error(write_error(path_));
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
