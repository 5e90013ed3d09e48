// MappedFile: a whole file mapped read-only into memory, unmapped when it goes. Shared by the
// readers that hand out spans straight from disk (the packed binary file, .npy token files,
// Megatron .bin/.idx), so the open/stat/mmap error handling lives in one place.
#pragma once

#include <cstddef>
#include <string>

namespace varpack {

class MappedFile {
 public:
  // Throws varpack::Error naming `path` if it cannot be opened, is not a regular file or cannot be
  // mapped. An empty file is valid: size() is 0 and data() is null.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace varpack
