// AtomicFile: every output is written to a file without a name (O_TMPFILE) in the target's
// directory, given a name only once complete and renamed onto the path, so neither an error nor a
// kill -9 (which runs no destructor) leaves a partial file behind: the kernel frees a nameless
// file when its last descriptor closes. Where the file system has no O_TMPFILE, a named
// "<path>.tmp.<pid>.<n>" is used instead (an error still removes it; a kill -9 cannot).
// rename(2) within one directory (one file system) replaces the target in a single step.
// Symbolic links are followed to the file they name, and streams are written, never replaced.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxSymlinkHops = 40;  // the kernel's own limit (MAXSYMLINKS)
constexpr size_t kCopyChunk = size_t{1} << 20;

std::string errno_text() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  const std::string dir = fs::path(path).parent_path().string();
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

// The descriptor a path names by number: "-" and /dev/stdout are 1, /dev/stderr 2, /dev/fd/N
// and /proc/self/fd/N are N; -1 for any other path.
int named_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!path.starts_with(prefix)) continue;
    int fd = -1;
    const char* end = path.data() + path.size();
    const auto [ptr, error] = std::from_chars(path.data() + prefix.size(), end, fd);
    if (error == std::errc() && ptr == end) return fd;
  }
  return -1;
}

std::string descriptor_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// `path` with its symbolic links followed to the last one's target (which may not exist yet).
std::string follow_links(std::string path) {
  for (int hops = 0; hops < kMaxSymlinkHops; ++hops) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
    std::error_code error;
    const fs::path target = fs::read_symlink(path, error);
    if (error) return path;
    path = target.is_absolute() ? target.string() : (fs::path(path).parent_path() / target).string();
  }
  throw Error("cannot write " + path + ": too many levels of symbolic links");
}

// A file's identity: the device and inode of an existing file; for a name still to be created,
// its directory's device and inode and the name, so two outputs to one new name collide too.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;
  bool operator==(const FileId&) const = default;
};

// `dash_fd`: the descriptor "-" stands for (0 for an input, 1 for an output).
std::optional<FileId> identify(const std::string& path, int dash_fd) {
  const int fd = path == "-" ? dash_fd : named_descriptor(path);
  const std::string resolved = fd >= 0 ? descriptor_path(fd) : path;
  struct stat st {};
  if (::stat(resolved.c_str(), &st) == 0) return FileId{st.st_dev, st.st_ino, ""};
  if (fd >= 0) return std::nullopt;
  const fs::path target(follow_links(path));
  if (::stat(directory_of(target.string()).c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino, target.filename().string()};
}

// Refuses, before anything is read or written, an output that is one of the `protect` files.
void refuse_protected(const std::string& path, std::span<const ProtectedFile> protect) {
  const std::optional<FileId> self = identify(path, 1);
  if (!self) return;
  for (const ProtectedFile& other : protect) {
    if (identify(other.path, 0) == self) {
      throw Error("cannot write " + path + ": it is the same file as the " + other.role + " " +
                  other.path + " (nothing was read or written); choose another output path");
    }
  }
}

std::string temp_directory() {
  const char* dir = std::getenv("TMPDIR");
  return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::span<const ProtectedFile> protect)
    : path_(std::move(path)) {
  if (path_.empty()) throw Error("output path is empty; give a file name");
  const int descriptor = named_descriptor(path_);
  struct stat st {};
  const bool exists =
      ::stat(descriptor >= 0 ? descriptor_path(descriptor).c_str() : path_.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    throw Error("cannot write " + path_ + ": it is a directory; give a file name");
  }
  // A character device (/dev/null, a terminal) may take several outputs and be read as well.
  if (!(exists && S_ISCHR(st.st_mode))) refuse_protected(path_, protect);

  if (descriptor >= 0 || (exists && !S_ISREG(st.st_mode))) {
    // A stream: opened now (a FIFO's reader then sees the end even if this run fails), written
    // at commit() from a staging file, so it never receives part of an output.
    to_stdout_ = descriptor == 1;
    stream_fd_ = descriptor >= 0 ? ::fcntl(descriptor, F_DUPFD_CLOEXEC, 3)
                                 : ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (stream_fd_ < 0) throw Error("cannot write " + path_ + ": " + errno_text());
    open_temp(temp_directory(), false);
    return;
  }
  target_ = follow_links(path_);
  const std::string dir = directory_of(target_);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error("cannot write " + path_ + ": directory '" + dir +
                "' does not exist; create it first or choose another output path");
  }
  open_temp(dir, true);
}

void AtomicFile::open_temp(const std::string& dir, bool may_name) {
  // O_RDWR: O_TMPFILE needs write access, and check_packed_file reads the file before commit.
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
  if (fd_ >= 0) {
    temp_path_ = descriptor_path(fd_);
    return;
  }
  const std::string base = may_name ? target_ : (fs::path(dir) / "varpack-stream").string();
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_path_ = temp_name(base);
    fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    throw Error("cannot write " + path_ + ": cannot create a file in '" + dir + "': " +
                errno_text());
  }
  if (may_name) {
    named_ = true;
  } else {
    ::unlink(temp_path_.c_str());  // a staging file needs no name: the descriptor is enough
    temp_path_ = descriptor_path(fd_);
  }
}

AtomicFile::~AtomicFile() {
  if (stream_fd_ >= 0) ::close(stream_fd_);
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

void AtomicFile::copy_into_stream() {
  std::vector<char> chunk(kCopyChunk);
  for (uint64_t offset = 0;;) {
    const ssize_t n = ::pread(fd_, chunk.data(), chunk.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot write " + path_ + ": reading the staged output: " + errno_text());
    if (n == 0) return;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(stream_fd_, chunk.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw Error(write_error(path_));
      done += w;
    }
    offset += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (is_stream()) {
    copy_into_stream();
    ::close(fd_);
    fd_ = -1;
    committed_ = true;
    return;
  }
  // On disk before it gets the name: after a power loss the path holds the old file or the whole
  // new one, never a named but empty one.
  if (::fsync(fd_) != 0) throw Error(write_error(path_));
  // A file replaced keeps its permissions (a new one gets 0666 less the umask).
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) ::fchmod(fd_, st.st_mode & 07777);
  if (!named_) {
    // The nameless file gets a temporary name (linkat cannot replace a file), then the rename
    // below moves it onto the path; only a kill between the two leaves that name behind.
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::string name = temp_name(target_);
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
  if (::rename(temp_path_.c_str(), target_.c_str()) != 0) {
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
