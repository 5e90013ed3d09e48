// MappedFile: open, check and mmap a file read-only (see mapped_file.h).
#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "varpack/error.h"

namespace varpack {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path_ + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {  // mmap rejects a zero length; an empty file simply has no bytes to view
    ::close(fd);
    return;
  }
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  if (map == MAP_FAILED) throw Error(path_ + ": cannot map: " + std::strerror(map_errno));
  map_ = map;
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

}  // namespace varpack
